# nsqlookupd's HTTP API on aiohttp.
#
# Strategy: glue only, as nsqlookupd/http.go (1.3): each handler reads the raw query the way Go's
# url.ParseQuery does (a bad query is 400 INVALID_REQUEST; the first value of a key counts),
# calls the registration DB and answers in the V1 shape (httpd.api: 200 with the raw body or
# JSON, errors as {"message": TEXT}). JSON is written as Go's encoding/json writes it: struct
# fields in declaration order, map keys sorted, empty slices as []. Where Go iterates a map
# (topics, channels, /debug's entries), the order here is sorted; producers come in the order
# they registered. The router's redirects, OPTIONS and 405 come from httpd.go_router.
# nsqlookupd's /debug/pprof routes (Go runtime profiles) are not served.
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..httpd import NsqHTTPError, api, go_json_response, go_router, parse_go_query
from ..options import NSQ_VERSION
from ..wire import is_valid_name
from .registration_db import Registration

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd


def _params(request: web.Request) -> dict[str, list[str]]:
    try:
        return parse_go_query(request.rel_url.raw_query_string)
    except ValueError:
        raise NsqHTTPError(400, "INVALID_REQUEST") from None


def _get(params: dict[str, list[str]], key: str, missing: str) -> str:
    values = params.get(key)
    if values is None:
        raise NsqHTTPError(400, missing)
    return values[0]


def _topic_channel(params: dict[str, list[str]]) -> tuple[str, str]:
    """http_api.GetTopicChannelArgs: validated (topic, channel) or a 400 with its text."""
    topic = _get(params, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise NsqHTTPError(400, "INVALID_ARG_TOPIC")
    channel = _get(params, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise NsqHTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


class LookupdHTTP:
    """The handlers of nsqlookupd/http.go; ``lookupd`` is the core they read and change."""

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.db = lookupd.db

    async def ping(self, request: web.Request) -> web.Response:
        """GET /ping: plain "OK" (http_api.PlainText: no NSQ content-type header)."""
        return web.Response(status=200, text="OK")

    async def info(self, request: web.Request) -> Any:
        """GET /info: {"version": "1.3.0"}."""
        return go_json_response({"version": NSQ_VERSION})

    async def topics(self, request: web.Request) -> Any:
        """GET /topics: {"topics": [every topic registration's name]}."""
        return go_json_response({"topics": self.db.topics()})

    async def channels(self, request: web.Request) -> Any:
        """GET /channels?topic=T: {"channels": [names]}; 400 MISSING_ARG_TOPIC."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        return go_json_response({"channels": self.db.channels(topic)})

    async def lookup(self, request: web.Request) -> Any:
        """GET /lookup?topic=T: {"channels": [...], "producers": [peer...]}, only active and
        not tombstoned producers; 404 TOPIC_NOT_FOUND when T has no registration."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        db = self.db
        if not db.find_registrations("topic", topic, ""):
            raise NsqHTTPError(404, "TOPIC_NOT_FOUND")
        lk = self.lookupd
        producers = db.active_producers(
            topic, lk.inactive_producer_timeout_ns, lk.tombstone_lifetime_ns
        )
        return go_json_response(
            {
                "channels": db.channels(topic),
                "producers": [p.to_json() for p in producers],
            }
        )

    async def nodes(self, request: web.Request) -> Any:
        """GET /nodes: {"producers": [node...]}: every active identified nsqd (tombstoned ones
        too) with its topics and a tombstone flag per topic."""
        lk = self.lookupd
        out = []
        for peer, topics, tombstones in self.db.nodes(
            lk.inactive_producer_timeout_ns, lk.tombstone_lifetime_ns
        ):
            node = peer.to_json()
            node["tombstones"] = tombstones
            node["topics"] = topics
            out.append(node)
        return go_json_response({"producers": out})

    async def debug(self, request: web.Request) -> Any:
        """GET /debug: {"category:key:subkey": [producer...]} for registrations that have
        producers; each producer's keys sorted (Go marshals a map)."""
        data: dict[str, list[dict[str, Any]]] = {}
        for reg, producers in self.db.registrations():
            if not producers:
                continue
            key = f"{reg.category}:{reg.key}:{reg.subkey}"
            entries = data[key] = []
            for p in producers:
                peer = p.peer_info
                entries.append(
                    {
                        "broadcast_address": peer.broadcast_address,
                        "hostname": peer.hostname,
                        "http_port": peer.http_port,
                        "id": peer.id,
                        "last_update": peer.last_update,
                        "tcp_port": peer.tcp_port,
                        "tombstoned": p.tombstoned,
                        "tombstoned_at": p.tombstoned_at,
                        "version": peer.version,
                    }
                )
        return go_json_response(dict(sorted(data.items())))

    async def topic_create(self, request: web.Request) -> Any:
        """POST /topic/create?topic=T: 200 empty; 400 MISSING_ARG_TOPIC / INVALID_ARG_TOPIC."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise NsqHTTPError(400, "INVALID_ARG_TOPIC")
        self.db.add_registration(Registration("topic", topic, ""))
        return None

    async def topic_delete(self, request: web.Request) -> Any:
        """POST /topic/delete?topic=T: drops T's channel and topic registrations (the name is
        not validated and "*" matches all, as in Go); 200 empty."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        self.db.delete_topic(topic)
        return None

    async def topic_tombstone(self, request: web.Request) -> Any:
        """POST /topic/tombstone?topic=T&node=ADDR:HTTP_PORT: 200 empty; 400
        MISSING_ARG_TOPIC / MISSING_ARG_NODE."""
        params = _params(request)
        topic = _get(params, "topic", "MISSING_ARG_TOPIC")
        node = _get(params, "node", "MISSING_ARG_NODE")
        self.db.tombstone(topic, node)
        return None

    async def channel_create(self, request: web.Request) -> Any:
        """POST /channel/create?topic=T&channel=C: registers the channel and its topic."""
        topic, channel = _topic_channel(_params(request))
        self.db.add_registration(Registration("channel", topic, channel))
        self.db.add_registration(Registration("topic", topic, ""))
        return None

    async def channel_delete(self, request: web.Request) -> Any:
        """POST /channel/delete?topic=T&channel=C: 404 CHANNEL_NOT_FOUND when not registered."""
        topic, channel = _topic_channel(_params(request))
        regs = self.db.find_registrations("channel", topic, channel)
        if not regs:
            raise NsqHTTPError(404, "CHANNEL_NOT_FOUND")
        for r in regs:
            self.db.remove_registration(r)
        return None


def build_app(lookupd: NSQLookupd) -> web.Application:
    """nsqlookupd's routes (http.go newHTTPServer), less /debug/pprof."""
    h = LookupdHTTP(lookupd)
    app = web.Application(middlewares=[go_router])
    r = app.router
    r.add_get("/ping", h.ping, allow_head=False)
    r.add_get("/info", api(h.info), allow_head=False)
    r.add_get("/debug", api(h.debug), allow_head=False)
    r.add_get("/lookup", api(h.lookup), allow_head=False)
    r.add_get("/topics", api(h.topics), allow_head=False)
    r.add_get("/channels", api(h.channels), allow_head=False)
    r.add_get("/nodes", api(h.nodes), allow_head=False)
    r.add_post("/topic/create", api(h.topic_create))
    r.add_post("/topic/delete", api(h.topic_delete))
    r.add_post("/channel/create", api(h.channel_create))
    r.add_post("/channel/delete", api(h.channel_delete))
    r.add_post("/topic/tombstone", api(h.topic_tombstone))
    return app
