"""nsqadmin's pages, rendered on the server from jinja2 templates (templates/), no build step.

Strategy: each GET page asks ClusterInfo (nsqpy.internal.clusterinfo) for what it shows (in
parallel, with the HTTP client's deadlines), turns a failed node into an error row on its table
and a warning at the top (never a blank page, never a 500), and renders one template. Every page
is complete without JavaScript; static/admin.js only refreshes the live part (#live) in place
and asks for a confirmation before a destructive form is sent. Destructive actions are HTML
forms that POST to the page's own URL; the handler calls AdminAPI.perform (the same door as the JSON
API: ACL, cluster calls, audit event) and answers 303 back to a page with a notice, or the
error page with the API's status (403 for a non-admin, nothing changed). A POST whose Origin
header names another host is refused (403) so another site cannot press the buttons."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from aiohttp import web

from ..guid import decode_id
from ..internal.clusterinfo import types as ci
from ..internal.clusterinfo.data import ClusterInfo
from ..internal.clusterinfo.types import Stats, UpstreamError
from ..internal.gotime import date_time, date_time_ms
from ..internal.http.v1 import NsqHTTPError
from ..options import NSQ_VERSION, NSQPY_VERSION
from . import summaries
from .history import History, sparkline
from .http_api import AdminAPI
from .options import AdminOptions

log = logging.getLogger("nsqpy")

TEMPLATES = Path(__file__).parent / "templates"


def format_duration(ns: int | float) -> str:
    """A duration in nanoseconds as "3d4h", "2h5m", "4m10s", "12s" (two largest units)."""
    s = int(ns // 1_000_000_000)
    if s < 0:
        s = 0
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size or (unit == "s" and not parts):
            parts.append(f"{s // size}{unit}")
            s %= size
    return "".join(parts[:2])


def format_number(n: Any) -> str:
    """An integer with thousands separators ("1,234,567"); anything else as str."""
    return f"{n:,}" if isinstance(n, int) else str(n)


def format_rate(r: float | None) -> str:
    """A rate in messages per second ("12.5/s"), "–" before two samples."""
    if r is None:
        return "–"
    return f"{r:,.0f}/s" if r >= 100 else f"{r:,.1f}/s"


def format_ts(ts: int | float) -> str:
    """Unix seconds as local "2006-01-02 15:04:05"."""
    return date_time(ts)


def make_env(base_path: str) -> jinja2.Environment:
    """The template environment: autoescaped, ``bp(path)`` for links under --base-path,
    ``q`` to quote a name into a URL path segment."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    prefix = base_path.rstrip("/")
    env.globals["bp"] = lambda p: prefix + p
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["num"] = format_number
    env.filters["dur"] = format_duration
    env.filters["rate"] = format_rate
    env.filters["ts"] = format_ts
    env.filters["addr"] = ci.http_address
    env.filters["ms"] = format_ms
    return env


class Pages:
    """The HTML pages of one nsqadmin (see the module comment)."""

    def __init__(
        self, opts: AdminOptions, cluster: ClusterInfo, api: AdminAPI, history: History
    ) -> None:
        self.opts = opts
        self.cluster = cluster
        self.api = api
        self.history = history
        self.env = make_env(opts.base_path)
        self.prefix = opts.base_path.rstrip("/")

    # ------------------------------------------------------------ rendering

    def render(
        self, request: web.Request, template: str, status: int = 200, **ctx: Any
    ) -> web.Response:
        base = {
            "version": NSQ_VERSION,
            "nsqpy_version": NSQPY_VERSION,
            "is_admin": self.api.is_admin(request),
            "user": self.api.user(request),
            "lookupds": self.cluster.lookupd,
            "nsqds": self.cluster.nsqd,
            "notice": request.query.get("notice", ""),
            "refresh_ms": self.opts.refresh_interval_ms,
            "nav": "",
            "warnings": [],
            "msg_id": "",
        }
        base.update(ctx)
        body = self.env.get_template(template).render(**base)
        return web.Response(status=status, text=body, content_type="text/html", charset="utf-8")

    def charts(self, key: tuple[str, ...], label: str) -> dict[str, Any]:
        """The depth and rate charts (SVG markup) of one history key, and the newest rate."""
        now = time.time()
        window = self.opts.history_window_ms / 1000
        h = self.history
        return {
            "depth": sparkline(h.depths(key), f"{label} depth", window=window, now=now),
            "rate": sparkline(h.rates(key), f"{label} messages/s", window=window, now=now),
            "last_rate": h.last_rate(key),
        }

    def error_page(self, request: web.Request, status: int, text: str) -> web.Response:
        return self.render(request, "error.html", status=status, error=text, title="Error")

    # ------------------------------------------------------------ GET pages

    async def topics(self, request: web.Request) -> web.Response:
        """/ and /topics: every topic with its cluster-wide depth, messages and rate chart."""
        warnings: list[str] = []
        try:
            (names, errors), (producers, perrors) = await asyncio.gather(
                self.cluster.topics(), self.cluster.producers()
            )
        except UpstreamError as e:
            return self.render(
                request, "topics.html", status=502, nav="topics", title="Topics",
                warnings=[str(e)], topics=[],
            )  # fmt: skip
        warnings += errors + perrors
        totals: dict[str, Stats] = {}
        if producers:
            rows, _, node_errors = await self.cluster.stats(producers, "", "", False)
            warnings += [f"{n}: {e}" for n, e in node_errors.items()]
            for name in names:
                totals[name] = ci.aggregate_topic(name, rows)
        topics = []
        for name in names:
            t = totals.get(name) or ci.new_topic_total(name)
            topics.append({"stats": t, **self.charts(("topic", name), name)})
        return self.render(
            request, "topics.html", nav="topics", title="Topics", topics=topics,
            warnings=warnings,
        )  # fmt: skip

    async def _topic_data(
        self, topic: str, channel: str = "", clients: bool = False
    ) -> tuple[list[ci.ProducerInfo], list[Stats], dict[str, Stats], dict[str, str], list[str]]:
        """(producers, node rows, channel map, node errors, warnings) for a topic page."""
        warnings: list[str] = []
        try:
            producers, errors = await self.cluster.topic_producers(topic)
        except UpstreamError as e:
            return [], [], {}, {}, [str(e)]
        warnings += errors
        if not producers:
            return [], [], {}, {}, warnings
        rows, channels, node_errors = await self.cluster.stats(producers, topic, channel, clients)
        return producers, rows, channels, node_errors, warnings

    def _error_rows(
        self, producers: list[ci.ProducerInfo], node_errors: dict[str, str]
    ) -> list[Any]:
        return [
            {"node": ci.http_address(p), "hostname": p["hostname"], "error": node_errors[a]}
            for p in producers
            if (a := ci.http_address(p)) in node_errors
        ]

    async def dead_letters(self, topic: str, channels: list[str]) -> dict[str, dict[str, Any]]:
        """nsqpy-d's dead-letter topics of ``topic``'s channels: channel -> {"topic":
        "<topic>.<channel><suffix>", "received": messages it took in across the cluster,
        "waiting": messages it holds (what a replay moves back)}, for the channels whose
        dead-letter topic exists. Failures count as none (this is an extra)."""
        suffix = self.opts.dead_letter_suffix
        if not suffix or not channels:
            return {}
        wanted = {f"{topic}.{c}{suffix}": c for c in channels}
        try:
            names, _ = await self.cluster.topics()
        except UpstreamError:
            return {}
        present = [n for n in names if n in wanted]

        async def count(dead: str) -> dict[str, Any]:
            try:
                producers, _ = await self.cluster.topic_producers(dead)
            except UpstreamError:
                producers = []
            rows, _, _ = await self.cluster.stats(producers, dead, "", False)
            return {
                "topic": dead,
                "received": sum(r["message_count"] for r in rows),
                "waiting": sum(r["depth"] for r in rows),
            }

        counts = await asyncio.gather(*(count(d) for d in present))
        return {wanted[d]: n for d, n in zip(present, counts)}

    async def topic(self, request: web.Request) -> web.Response:
        """/topics/:topic: per-node rows and totals, the topic's channels (with their dead
        letters), the replication of a replicated topic (leader, in-sync replicas, epoch,
        lag: nsqpy-d's /stats ``replication``), charts, actions."""
        name = request.match_info["topic"]
        producers, rows, channels, node_errors, warnings = await self._topic_data(name)
        total = ci.aggregate_topic(name, rows)
        dead = await self.dead_letters(name, list(channels))
        chans = [
            {
                "stats": c,
                "dead": dead.get(c["channel_name"]),
                **self.charts(("channel", name, c["channel_name"]), c["channel_name"]),
            }
            for c in sorted(channels.values(), key=lambda c: c["channel_name"])
        ]
        return self.render(
            request, "topic.html", nav="topics", title=f"Topic {name}", topic=name,
            producers=producers, total=total, rows=rows, channels=chans,
            replication=[r for r in rows if "replication" in r],
            error_rows=self._error_rows(producers, node_errors),
            warnings=warnings + [f"{n}: {e}" for n, e in node_errors.items()],
            **self.charts(("topic", name), name),
        )  # fmt: skip

    async def channel(self, request: web.Request) -> web.Response:
        """/topics/:topic/:channel: per-node rows, totals, clients, charts, actions."""
        topic, name = request.match_info["topic"], request.match_info["channel"]
        producers, rows, channels, node_errors, warnings = await self._topic_data(
            topic, name, clients=True
        )
        stats = channels.get(name)
        dead = (await self.dead_letters(topic, [name])).get(name)
        return self.render(
            request, "channel.html", nav="topics", title=f"Channel {topic}/{name}",
            topic=topic, channel=name, stats=stats, producers=producers, dead=dead,
            error_rows=self._error_rows(producers, node_errors),
            warnings=warnings + [f"{n}: {e}" for n, e in node_errors.items()],
            now=time.time(), **self.charts(("channel", topic, name), f"{topic}/{name}"),
        )  # fmt: skip

    async def nodes(self, request: web.Request) -> web.Response:
        """/nodes: every nsqd with version, lookupd registrations, topics and uptime."""
        try:
            producers, warnings = await self.cluster.producers()
        except UpstreamError as e:
            return self.render(
                request, "nodes.html", status=502, nav="nodes", title="Nodes", nodes=[],
                warnings=[str(e)], now=time.time(),
            )  # fmt: skip
        infos = await self.cluster.node_infos(producers)
        nodes = []
        for p in producers:
            info, err = infos[ci.http_address(p)]
            start = info.get("start_time") if isinstance(info, dict) else None
            nodes.append({"p": p, "error": err, "start_time": start})
            if err:
                warnings.append(f"{ci.http_address(p)}: {err}")
        return self.render(
            request, "nodes.html", nav="nodes", title="Nodes", nodes=nodes,
            warnings=warnings, now=time.time(), n_lookupd=len(self.cluster.lookupd),
        )  # fmt: skip

    async def node(self, request: web.Request) -> web.Response:
        """/nodes/:node: one nsqd's topics, channels and clients."""
        node = request.match_info["node"]
        try:
            producers, warnings = await self.cluster.producers()
        except UpstreamError as e:
            return self.error_page(request, 502, f"UPSTREAM_ERROR: {e}")
        producer = ci.find_producer(producers, node)
        if producer is None:
            return self.error_page(request, 404, f"NODE_NOT_FOUND: {node}")
        rows, _, node_errors = await self.cluster.stats([producer], "", "", True)
        error = node_errors.get(node, "")
        if error:
            warnings.append(f"{node}: {error}")
        total_messages, total_clients = summaries.node_totals(rows)
        infos, metrics = await asyncio.gather(
            self.cluster.node_infos([producer]), self.cluster.node_metrics(node)
        )
        info, _ = infos[node]
        return self.render(
            request, "node.html", nav="nodes", title=f"Node {node}", node=node, p=producer,
            topics=rows, error=error, total_messages=total_messages,
            total_clients=total_clients, warnings=warnings, now=time.time(),
            start_time=info.get("start_time") if isinstance(info, dict) else None,
            metrics=sorted((metrics or {}).items()),
        )  # fmt: skip

    async def lookup(self, request: web.Request) -> web.Response:
        """/lookup: each topic the lookupds know, the nodes producing it and its channels; the
        form that creates a topic/channel through the lookupds."""
        if not self.cluster.lookupd:
            return self.render(
                request, "lookup.html", nav="lookup", title="Lookup", topics=[],
                warnings=["no --lookupd-http-address: nsqadmin reads the nsqds directly"],
            )  # fmt: skip
        try:
            names, warnings = await self.cluster.lookupd_topics()
        except UpstreamError as e:
            return self.render(
                request, "lookup.html", status=502, nav="lookup", title="Lookup",
                topics=[], warnings=[str(e)],
            )  # fmt: skip

        async def one(name: str) -> dict[str, Any]:
            try:
                (producers, e1), (channels, e2) = await asyncio.gather(
                    self.cluster.lookupd_topic_producers(name),
                    self.cluster.lookupd_topic_channels(name),
                )
            except UpstreamError as e:
                return {"name": name, "producers": [], "channels": [], "error": str(e)}
            return {"name": name, "producers": producers, "channels": channels, "error": ""}

        topics = list(await asyncio.gather(*(one(n) for n in names)))
        return self.render(
            request, "lookup.html", nav="lookup", title="Lookup", topics=topics,
            warnings=warnings,
        )  # fmt: skip

    async def counter(self, request: web.Request) -> web.Response:
        """/counter: messages processed by every channel of the cluster, live."""
        warnings: list[str] = []
        total = 0
        try:
            producers, warnings = await self.cluster.producers()
            _, channels, node_errors = await self.cluster.stats(producers, "", "", False)
            warnings += [f"{n}: {e}" for n, e in node_errors.items()]
            total = sum(s["message_count"] for s in summaries.counter_stats(channels).values())
        except UpstreamError as e:
            warnings.append(str(e))
        return self.render(
            request, "counter.html", nav="counter", title="Counter", total=total,
            warnings=warnings, **self.charts(("total",), "all channels"),
        )  # fmt: skip

    async def message(self, request: web.Request) -> web.Response:
        """/message?id=ID[&topic=T][&body=1]: where one message is now (nsqpy's GET /message,
        through the lookupds or every nsqd: ClusterInfo.find_message): its ID decoded, the node
        that made it, each place that holds it and in what state; 400 for a malformed ID."""
        msg_id = request.query.get("id", "").strip()
        topic = request.query.get("topic", "").strip()
        want_body = request.query.get("body") == "1"
        ctx: dict[str, Any] = {
            "nav": "message", "title": "Message", "msg_id": msg_id, "topic": topic,
            "decoded": None, "hunt": None, "rows": [], "producers": [], "body": None,
            "want_body": want_body,
        }  # fmt: skip
        if not msg_id:
            return self.render(request, "message.html", **ctx)
        try:
            decoded = decode_id(msg_id)
        except ValueError as e:
            return self.render(request, "message.html", status=400, error=f"INVALID_ID: {e}", **ctx)
        ctx["decoded"] = {
            "node_id": decoded.node_id,
            "created_ms": decoded.time_ns // 1_000_000,
            "sequence": decoded.sequence,
        }
        hunt = await self.cluster.find_message(msg_id.lower(), topic, want_body)
        for addr, answer in hunt.answers:
            producer = answer.get("producer")
            node = ci.http_address(producer) if isinstance(producer, dict) else addr
            if isinstance(producer, dict):
                ctx["producers"].append({"node": node, "via": addr, **producer})
            else:
                ctx["producers"].append(
                    {"node": node, "via": "", "this_node": answer.get("this_node")}
                )
            for loc in answer.get("locations") or []:
                ctx["rows"].append({"node": node, **loc})
            if ctx["body"] is None and isinstance(answer.get("body"), str):
                ctx["body"] = _show_body(answer["body"])
        ctx["hunt"] = hunt
        ctx["warnings"] = [f"{a}: {e}" for a, s, e in hunt.errors if s != 404 or not hunt.answers]
        return self.render(request, "message.html", status=hunt.status, **ctx)

    # ------------------------------------------------------------ POST forms

    def _same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if not origin or origin == "null":
            return origin is None
        return urlsplit(origin).netloc == request.host

    async def _form_action(
        self,
        request: web.Request,
        action: str,
        topic: str,
        channel: str,
        node: str,
        back: str,
        done: str,
    ) -> web.StreamResponse:
        if not self._same_origin(request):
            return self.error_page(request, 403, "FORBIDDEN: cross-site form")
        try:
            message, extra = await self.api.perform(request, action, topic, channel, node)
        except NsqHTTPError as e:
            return self.error_page(request, e.code, e.text)
        if "replayed" in extra:
            done += f", {extra['replayed']} replayed"
        notice = done + (f" ({message})" if message else "")
        raise web.HTTPSeeOther(f"{self.prefix}{back}?{urlencode({'notice': notice})}")

    async def topic_form(self, request: web.Request) -> web.StreamResponse:
        """POST /topics/:topic action=pause|unpause|empty|delete, or a replicated topic's
        action=replicas replicas=N / action=reassign nodes=a,b,c (AdminAPI.change_placement)."""
        topic = request.match_info["topic"]
        form = await request.post()
        action = str(form.get("action", ""))
        if action in ("replicas", "reassign"):
            return await self._placement_form(request, topic, action, form)
        back = "/topics" if action == "delete" else f"/topics/{quote(topic, safe='')}"
        return await self._form_action(
            request, action, topic, "", "", back, f"{action} topic {topic}: done"
        )

    async def _placement_form(
        self, request: web.Request, topic: str, action: str, form: Any
    ) -> web.StreamResponse:
        if not self._same_origin(request):
            return self.error_page(request, 403, "FORBIDDEN: cross-site form")
        value = str(form.get("replicas" if action == "replicas" else "nodes", ""))
        try:
            rec = await self.api.change_placement(request, topic, action, value)
        except NsqHTTPError as e:
            return self.error_page(request, e.code, e.text)
        nodes = ", ".join(str(n) for n in rec.get("placement") or [])
        notice = (
            f"topic {topic}: placed on {nodes} (R={rec.get('replicas')}), leader "
            f"{rec.get('leader')}, epoch {rec.get('epoch')}"
        )
        back = f"/topics/{quote(topic, safe='')}"
        raise web.HTTPSeeOther(f"{self.prefix}{back}?{urlencode({'notice': notice})}")

    async def channel_form(self, request: web.Request) -> web.StreamResponse:
        """POST /topics/:topic/:channel action=pause|unpause|empty|delete|replay."""
        topic, channel = request.match_info["topic"], request.match_info["channel"]
        form = await request.post()
        action = str(form.get("action", ""))
        t = quote(topic, safe="")
        back = f"/topics/{t}" if action == "delete" else f"/topics/{t}/{quote(channel, safe='')}"
        return await self._form_action(
            request, action, topic, channel, "", back, f"{action} channel {topic}/{channel}: done"
        )

    async def lookup_form(self, request: web.Request) -> web.StreamResponse:
        """POST /lookup topic=T [channel=C]: create through the lookupds."""
        form = await request.post()
        topic = str(form.get("topic", "")).strip()
        channel = str(form.get("channel", "")).strip()
        what = f"{topic}/{channel}" if channel else topic
        return await self._form_action(
            request, "create", topic, channel, "", "/lookup", f"created {what}"
        )

    async def node_form(self, request: web.Request) -> web.StreamResponse:
        """POST /nodes/:node action=tombstone topic=T."""
        node = request.match_info["node"]
        form = await request.post()
        topic = str(form.get("topic", ""))
        return await self._form_action(
            request, "tombstone", topic, "", node, f"/nodes/{quote(node, safe='')}",
            f"tombstoned {topic} on {node}",
        )  # fmt: skip

    async def ping(self, request: web.Request) -> web.Response:
        """GET /ping: "OK"."""
        return web.Response(text="OK")


def _show_body(b64: str) -> str:
    """A message body (base64 in the answer) as text: UTF-8, else Python's bytes repr."""
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return b64
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return repr(raw)


def format_ms(ms: Any) -> str:
    """Unix milliseconds as UTC "2006-01-02 15:04:05.000 UTC" ("–" when not a number)."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return "–"
    return date_time_ms(int(ms), utc=True) + " UTC"


def add_routes(app: web.Application, pages: Pages, bp: Callable[[str], str]) -> None:
    """The pages' routes under the base path, and /static/ (or --dev-static-dir)."""
    r = app.router
    r.add_get(bp("/"), pages.topics, allow_head=False)
    r.add_get(bp("/ping"), pages.ping, allow_head=False)
    r.add_get(bp("/topics"), pages.topics, allow_head=False)
    r.add_get(bp("/topics/{topic}"), pages.topic, allow_head=False)
    r.add_post(bp("/topics/{topic}"), pages.topic_form)
    r.add_get(bp("/topics/{topic}/{channel}"), pages.channel, allow_head=False)
    r.add_post(bp("/topics/{topic}/{channel}"), pages.channel_form)
    r.add_get(bp("/nodes"), pages.nodes, allow_head=False)
    r.add_get(bp("/nodes/{node}"), pages.node, allow_head=False)
    r.add_post(bp("/nodes/{node}"), pages.node_form)
    r.add_get(bp("/counter"), pages.counter, allow_head=False)
    r.add_get(bp("/lookup"), pages.lookup, allow_head=False)
    r.add_get(bp("/message"), pages.message, allow_head=False)
    r.add_post(bp("/lookup"), pages.lookup_form)
    static = pages.opts.dev_static_dir or str(Path(__file__).parent / "static")
    r.add_static(bp("/static"), static, append_version=False)
