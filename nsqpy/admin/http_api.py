"""nsqadmin's JSON API (nsqadmin/http.go, v1 endpoints) on aiohttp.

Strategy: glue only. Each handler asks ClusterInfo (nsqpy.internal.clusterinfo, which asks the
daemons in parallel) and answers nsqadmin's JSON shape through internal.http.aio's V1 helpers
(internal.gojson's bytes): Go's field order, "message" carrying "WARNING: ..." when some daemon
failed, 502 "UPSTREAM_ERROR: ..." only when every daemon asked failed. Every destructive action goes
through AdminAPI.perform, which the HTML forms (pages.py) call too: the ACL check
(--admin-user against the --acl-http-header header; 403 FORBIDDEN and nothing changed
otherwise), the cluster calls, and the audit event for --notification-http-endpoint
(notify.py)."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from ..internal.clusterinfo import types as ci
from ..internal.clusterinfo.data import ClusterInfo
from ..internal.clusterinfo.types import UpstreamError
from ..internal.gojson import GoJSONError, GoStruct, unmarshal_strings
from ..internal.http.aio import error_response, go_json_response
from ..internal.http.v1 import NsqHTTPError
from ..internal.lg import LOG_LEVELS, change_level
from ..wire import is_valid_name
from . import summaries
from .notify import Notifier
from .options import AdminOptions, option_by_cfg_name

log = logging.getLogger("nsqpy")

#: actions POST /api/topics/:topic[/:channel] accepts (replay: nsqpy-d's dead letters, a
#: channel only)
TOPIC_CHANNEL_ACTIONS = ("pause", "unpause", "empty", "replay")
#: nsqpy's placement changes of a replicated topic, POST /api/topics/:topic (and its page)
PLACEMENT_ACTIONS = ("replicas", "reassign")
#: nsqadmin's anonymous request structs (all string fields), by their json names
_BODY_STRUCTS: dict[tuple[str, ...], GoStruct] = {}


def upstream(e: UpstreamError) -> NsqHTTPError:
    """nsqadmin's answer when no daemon answered: 502 "UPSTREAM_ERROR: <error>"."""
    return NsqHTTPError(502, f"UPSTREAM_ERROR: {e}")


def v1_json(fn: Callable[[web.Request], Awaitable[Any]]) -> Callable[..., Awaitable[web.Response]]:
    """http_api.V1 for nsqadmin's handlers: the handler's dict as Go's encoding/json writes
    it, NsqHTTPError as {"message": TEXT} with its code, UpstreamError as a 502."""

    async def handle(request: web.Request) -> web.Response:
        try:
            data = await fn(request)
        except NsqHTTPError as e:
            return error_response(e.code, e.text)
        except UpstreamError as e:
            log.error("%s", e)
            err = upstream(e)
            return error_response(err.code, err.text)
        if isinstance(data, web.StreamResponse):
            return data  # type: ignore[return-value]
        return go_json_response(data)

    return handle


class AdminAPI:
    """The /api handlers of one nsqadmin: ``opts`` (read at each request: PUT /config can
    change the lookupds and the log level), ``cluster`` (reads and actions), ``notifier``."""

    def __init__(self, opts: AdminOptions, cluster: ClusterInfo, notifier: Notifier) -> None:
        self.opts = opts
        self.cluster = cluster
        self.notifier = notifier

    # ------------------------------------------------------------ ACL

    def user(self, request: web.Request) -> str:
        """The authenticated user as --acl-http-header names it ("" when absent)."""
        return request.headers.get(self.opts.acl_http_header, "")

    def is_admin(self, request: web.Request) -> bool:
        """isAuthorizedAdminRequest: anyone when no --admin-user is set, else only those."""
        users = self.opts.admin_users
        return not users or self.user(request) in users

    # ------------------------------------------------------------ reads

    async def topics(self, request: web.Request) -> Any:
        """GET /api/topics: {"topics": [names], "message"}; with ?inactive=true, {"topics":
        {topic: [channels]}} for topics the lookupds know but no producer has."""
        topics, errors = await self.cluster.topics()
        messages = [ci.err_list(errors)] if errors else []
        if request.query.get("inactive") == "true":
            inactive: dict[str, list[str]] = {}
            if self.cluster.lookupd:
                for name in topics:
                    try:
                        producers, _ = await self.cluster.lookupd_topic_producers(name)
                    except UpstreamError:
                        producers = []
                    if not producers:
                        try:
                            inactive[name], _ = await self.cluster.lookupd_topic_channels(name)
                        except UpstreamError:
                            inactive[name] = []
            return {"topics": inactive, "message": summaries.warn_message(messages)}
        return {"topics": topics, "message": summaries.warn_message(messages)}

    async def topic(self, request: web.Request) -> Any:
        """GET /api/topics/:topic: the cluster-wide TopicStats with "nodes" (per node, with
        their channels), "channels" (cluster-wide) and "message"."""
        name = request.match_info["topic"]
        producers, errors = await self.cluster.topic_producers(name)
        messages = [ci.err_list(errors)] if errors else []
        rows, _, node_errors = await self.cluster.stats(
            producers, name, "", False, require_one=True
        )
        if node_errors:
            messages.append(ci.err_list(node_errors.values()))
        return {**ci.aggregate_topic(name, rows), "message": summaries.warn_message(messages)}

    async def channel(self, request: web.Request) -> Any:
        """GET /api/topics/:topic/:channel: the cluster-wide ChannelStats with "nodes",
        "clients" and "message" (null stats fields when no node has the channel, as Go)."""
        topic = request.match_info["topic"]
        channel = request.match_info["channel"]
        producers, errors = await self.cluster.topic_producers(topic)
        messages = [ci.err_list(errors)] if errors else []
        _, channels, node_errors = await self.cluster.stats(
            producers, topic, channel, True, require_one=True
        )
        if node_errors:
            messages.append(ci.err_list(node_errors.values()))
        stats = channels.get(channel)
        if stats is None:
            # Go embeds a nil *ChannelStats: encoding/json writes only the outer field
            return {"message": summaries.warn_message(messages)}
        return {**stats, "message": summaries.warn_message(messages)}

    async def nodes(self, request: web.Request) -> Any:
        """GET /api/nodes: {"nodes": [producer...], "message"}."""
        producers, errors = await self.cluster.producers()
        return {
            "nodes": producers,
            "message": summaries.warn_message([ci.err_list(errors)] if errors else []),
        }

    async def node(self, request: web.Request) -> Any:
        """GET /api/nodes/:node (its HTTP address): {"node", "topics" (per-node TopicStats with
        channels and clients), "total_messages", "total_clients", "message"}; 404
        NODE_NOT_FOUND."""
        node = request.match_info["node"]
        producers, errors = await self.cluster.producers()
        producer = ci.find_producer(producers, node)
        if producer is None:
            raise NsqHTTPError(404, "NODE_NOT_FOUND")
        rows, _, node_errors = await self.cluster.stats([producer], "", "", True, require_one=True)
        total_messages, total_clients = summaries.node_totals(rows)
        return {
            "node": node,
            "topics": rows or None,
            "total_messages": total_messages,
            "total_clients": total_clients,
            "message": summaries.warn_message([ci.err_list(errors)] if errors else []),
        }

    async def counter(self, request: web.Request) -> Any:
        """GET /api/counter: {"stats": {"topic:channel:node": {node, topic_name, channel_name,
        message_count}}, "message"}."""
        producers, errors = await self.cluster.producers()
        messages = [ci.err_list(errors)] if errors else []
        _, channels, node_errors = await self.cluster.stats(
            producers, "", "", False, require_one=True
        )
        if node_errors:
            messages.append(ci.err_list(node_errors.values()))
        return {
            "stats": summaries.counter_stats(channels),
            "message": summaries.warn_message(messages),
        }

    # ------------------------------------------------------------ actions

    async def perform(
        self, request: web.Request, action: str, topic: str, channel: str = "", node: str = ""
    ) -> tuple[str, dict[str, Any]]:
        """Do one destructive action for ``request``: (its warning message, "" when every
        daemon agreed; extra answer fields: {"replayed": n} for replay). ``action``: create
        (topic, channel optional), tombstone (topic on node), delete, pause, unpause, empty
        (topic, or its channel when ``channel``), replay (a channel's dead letters back into
        it, on every nsqpy-d producing the topic). Raises NsqHTTPError: 403 FORBIDDEN for a
        non-admin (nothing is changed), 400 INVALID_TOPIC/INVALID_CHANNEL/INVALID_ACTION, 502
        UPSTREAM_ERROR."""
        extra: dict[str, Any] = {}
        if not self.is_admin(request):
            log.warning("admin action %s by %r refused", action, self.user(request))
            raise NsqHTTPError(403, "FORBIDDEN")
        if action in ("create", "tombstone") and not is_valid_name(topic):
            raise NsqHTTPError(400, "INVALID_TOPIC")
        if action == "create" and channel and not is_valid_name(channel):
            raise NsqHTTPError(400, "INVALID_CHANNEL")
        c = self.cluster
        try:
            if action == "create":
                errors = await c.create_topic_channel(topic, channel)
                events = [("create_topic", "")]
                if channel:
                    events.append(("create_channel", channel))
            elif action == "tombstone":
                errors = await c.tombstone_node_for_topic(topic, node)
                events = [("tombstone_topic_producer", "")]
            elif action == "delete":
                if channel:
                    errors = await c.delete_channel(topic, channel)
                else:
                    errors = await c.delete_topic(topic)
                events = [(f"delete_{'channel' if channel else 'topic'}", channel)]
            elif action == "replay" and channel:
                replayed, errors = await c.replay_dead_letters(topic, channel)
                extra["replayed"] = replayed
                events = [("replay_channel", channel)]
            elif action in TOPIC_CHANNEL_ACTIONS and action != "replay":
                errors = await c.topic_channel_action(topic, channel, action)
                events = [(f"{action}_{'channel' if channel else 'topic'}", channel)]
            else:
                raise NsqHTTPError(400, "INVALID_ACTION")
        except UpstreamError as e:
            log.error("failed to %s topic/channel - %s", action, e)
            raise upstream(e) from None
        for name, ch in events:
            self.notifier.admin_action(request, name, topic, ch, node)
        if errors:
            log.warning("%s", ci.err_list(errors))
        return summaries.warn_message([ci.err_list(errors)] if errors else []), extra

    async def change_placement(
        self, request: web.Request, topic: str, action: str, value: str
    ) -> dict[str, Any]:
        """A replicated topic's placement change through one of its nsqpy-d nodes
        (cluster.change_placement): ``action`` "replicas" (``value``: the new R) or
        "reassign" (``value``: node ids "a,b,c"). Returns the topic's record as the node
        answered it. NsqHTTPError: 403 FORBIDDEN for a non-admin, 400 INVALID_TOPIC /
        INVALID_REPLICAS / INVALID_NODES / INVALID_ACTION, 502 UPSTREAM_ERROR with the
        node's answer when none took it."""
        if not self.is_admin(request):
            log.warning("admin action %s by %r refused", action, self.user(request))
            raise NsqHTTPError(403, "FORBIDDEN")
        if not is_valid_name(topic):
            raise NsqHTTPError(400, "INVALID_TOPIC")
        value = value.strip()
        if action == "replicas":
            if not value.isdigit() or int(value) < 1:
                raise NsqHTTPError(400, "INVALID_REPLICAS")
            uri, qs, event = "topic/replicas", f"replicas={int(value)}", "change_replicas"
        elif action == "reassign":
            nodes = [n.strip() for n in value.split(",")]
            if not value or not all(nodes):
                raise NsqHTTPError(400, "INVALID_NODES")
            uri, qs, event = "topic/reassign", f"nodes={quote(','.join(nodes))}", "reassign_topic"
        else:
            raise NsqHTTPError(400, "INVALID_ACTION")
        try:
            answer, errors = await self.cluster.change_placement(topic, uri, qs)
        except UpstreamError as e:
            raise upstream(e) from None
        if answer is None:
            log.error("failed to %s topic %s - %s", action, topic, ci.err_list(errors))
            raise NsqHTTPError(502, f"UPSTREAM_ERROR: {ci.err_list(errors)}")
        self.notifier.admin_action(request, event, topic, "", "")
        return answer

    async def _body(self, request: web.Request, *fields: str) -> dict[str, str]:
        """The string ``fields`` of the JSON body as nsqadmin's Go decoder reads them ("" when
        absent or null); 400 with encoding/json's error text otherwise (internal.gojson)."""
        struct = _BODY_STRUCTS.get(fields)
        if struct is None:
            struct = _BODY_STRUCTS[fields] = GoStruct(dict.fromkeys(fields, "string"))
        try:
            found = struct.decode(await request.read())
        except GoJSONError as e:
            raise NsqHTTPError(400, str(e)) from None
        return {f: found.get(f, "") for f in fields}

    async def create(self, request: web.Request) -> Any:
        """POST /api/topics {"topic", "channel"?}: create through the lookupds (and the
        channel on the topic's nsqds); {"message"}."""
        if not self.is_admin(request):
            raise NsqHTTPError(403, "FORBIDDEN")
        body = await self._body(request, "topic", "channel")
        topic, channel = body["topic"], body["channel"]
        message, _ = await self.perform(request, "create", topic, channel)
        return {"message": message}

    async def _action(self, request: web.Request, channel: str) -> Any:
        if not self.is_admin(request):
            raise NsqHTTPError(403, "FORBIDDEN")
        action = (await self._body(request, "action"))["action"]
        if action in PLACEMENT_ACTIONS and not channel:
            body = await self._body(request, "action", "replicas", "nodes")
            topic = request.match_info["topic"]
            value = body["replicas"] if action == "replicas" else body["nodes"]
            rec = await self.change_placement(request, topic, action, value)
            return {"message": "", "topic": rec}
        if action not in TOPIC_CHANNEL_ACTIONS:
            raise NsqHTTPError(400, "INVALID_ACTION")
        topic = request.match_info["topic"]
        message, extra = await self.perform(request, action, topic, channel)
        return {"message": message, **extra}

    async def topic_action(self, request: web.Request) -> Any:
        """POST /api/topics/:topic {"action": "pause"|"unpause"|"empty"}: on every producer;
        nsqpy's {"action": "replicas", "replicas": "N"} and {"action": "reassign", "nodes":
        "a,b,c"} change a replicated topic's placement (change_placement), answering
        {"message": "", "topic": record}."""
        return await self._action(request, "")

    async def channel_action(self, request: web.Request) -> Any:
        """POST /api/topics/:topic/:channel {"action": ...}: on every producer of the topic;
        "replay" (nsqpy's) answers {"message", "replayed": n}."""
        return await self._action(request, request.match_info["channel"])

    async def delete_topic(self, request: web.Request) -> Any:
        """DELETE /api/topics/:topic: on the lookupds and every producer; {"message"}."""
        topic = request.match_info["topic"]
        message, _ = await self.perform(request, "delete", topic)
        return {"message": message}

    async def delete_channel(self, request: web.Request) -> Any:
        """DELETE /api/topics/:topic/:channel: on the lookupds and every producer."""
        topic, channel = request.match_info["topic"], request.match_info["channel"]
        message, _ = await self.perform(request, "delete", topic, channel)
        return {"message": message}

    async def tombstone(self, request: web.Request) -> Any:
        """DELETE /api/nodes/:node {"topic"}: tombstone the node's topic on the lookupds and
        delete it on the node; 400 INVALID_BODY / INVALID_TOPIC."""
        if not self.is_admin(request):
            raise NsqHTTPError(403, "FORBIDDEN")
        try:
            topic = (await self._body(request, "topic"))["topic"]
        except NsqHTTPError:
            raise NsqHTTPError(400, "INVALID_BODY") from None
        node = request.match_info["node"]
        message, _ = await self.perform(request, "tombstone", topic, node=node)
        return {"message": message}

    # ------------------------------------------------------------ /config

    async def config(self, request: web.Request) -> Any:
        """GET/PUT /config/:opt from --allow-config-from-cidr only (403 FORBIDDEN): read an
        option by cfg name, or set nsqlookupd_http_addresses (JSON list) or log_level."""
        opts = self.opts
        if opts.allow_config_from_cidr:
            net = ipaddress.ip_network(opts.allow_config_from_cidr, strict=False)
            peer = request.transport.get_extra_info("peername") if request.transport else None
            try:
                ip = ipaddress.ip_address(peer[0]) if peer else None
            except ValueError:
                ip = None
            if ip is None:
                raise NsqHTTPError(400, "INVALID_REMOTE_ADDR")
            if ip.version != net.version or ip not in net:
                raise NsqHTTPError(403, "FORBIDDEN")
        opt = request.match_info["opt"]
        if request.method == "PUT":
            raw = await request.content.read(1024 * 1024 + 1)
            if not raw or len(raw) > 1024 * 1024:
                raise NsqHTTPError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_http_addresses":
                try:  # json.Unmarshal into []string (a null element is "")
                    value = unmarshal_strings(raw)
                except GoJSONError:
                    raise NsqHTTPError(400, "INVALID_VALUE") from None
                if value is None:  # Go would store a nil slice; nsqpy-admin keeps a list
                    raise NsqHTTPError(400, "INVALID_VALUE")
                opts.nsqlookupd_http_addresses = value
                self.cluster.lookupd = list(value)
            elif opt == "log_level":
                level = raw.decode("utf-8", "replace").strip().lower()
                if not change_level(opts, level, LOG_LEVELS):
                    raise NsqHTTPError(400, "INVALID_VALUE")
            else:
                raise NsqHTTPError(400, "INVALID_OPTION")
        found, value = option_by_cfg_name(opts, opt)
        if not found:
            raise NsqHTTPError(400, "INVALID_OPTION")
        return go_json_response(value)


def add_routes(app: web.Application, api: AdminAPI, bp: Callable[[str], str]) -> None:
    """nsqadmin's v1 routes under the base path (``bp`` joins it)."""
    r = app.router
    r.add_get(bp("/api/topics"), v1_json(api.topics), allow_head=False)
    r.add_post(bp("/api/topics"), v1_json(api.create))
    r.add_get(bp("/api/topics/{topic}"), v1_json(api.topic), allow_head=False)
    r.add_post(bp("/api/topics/{topic}"), v1_json(api.topic_action))
    r.add_delete(bp("/api/topics/{topic}"), v1_json(api.delete_topic))
    r.add_get(bp("/api/topics/{topic}/{channel}"), v1_json(api.channel), allow_head=False)
    r.add_post(bp("/api/topics/{topic}/{channel}"), v1_json(api.channel_action))
    r.add_delete(bp("/api/topics/{topic}/{channel}"), v1_json(api.delete_channel))
    r.add_get(bp("/api/nodes"), v1_json(api.nodes), allow_head=False)
    r.add_get(bp("/api/nodes/{node}"), v1_json(api.node), allow_head=False)
    r.add_delete(bp("/api/nodes/{node}"), v1_json(api.tombstone))
    r.add_get(bp("/api/counter"), v1_json(api.counter), allow_head=False)
    r.add_get(bp("/config/{opt}"), v1_json(api.config), allow_head=False)
    r.add_put(bp("/config/{opt}"), v1_json(api.config))
