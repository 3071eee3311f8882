"""nsqlookupd's HTTP API on the shared HTTP server (internal.http).

Strategy: glue only, as nsqlookupd/http.go (1.3): each handler reads the raw query the way Go's
url.ParseQuery does (a bad query is 400 INVALID_REQUEST; the first value of a key counts),
calls the registration DB and answers in the V1 shape (http.v1.api: 200 with the raw body or
JSON, errors as {"message": TEXT}). JSON is written as Go's encoding/json writes it: struct
fields in declaration order, map keys sorted, empty slices as []. Where Go iterates a map
(topics, channels, /debug's entries), the order here is sorted; producers come in the order
they registered. The router's redirects, OPTIONS and 405 come from http.router.Router.
nsqlookupd's /debug/pprof routes (Go runtime profiles) are not served. Handlers are synchronous
but GET /message (beyond nsqlookupd), which asks an nsqpy-d and so is a coroutine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..build_info import NSQ_VERSION
from ..internal.gojson import encode as go_json
from ..internal.http.request import JSON_TYPE, Request, Response, parse_go_query
from ..internal.http.router import Router
from ..internal.http.v1 import NSQ_HEADER, NsqHTTPError, api, json_answer, plain_text
from ..internal.reqmetrics import CONTENT_TYPE
from ..wire import is_valid_name
from .registration_db import PeerInfo, Registration

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd


def _params(request: Request) -> dict[str, list[str]]:
    try:
        return parse_go_query(request.raw_query)
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

    def ping(self, request: Request) -> Response:
        """GET /ping: plain "OK" (http_api.PlainText: no NSQ content-type header)."""
        return plain_text("OK")

    def info(self, request: Request) -> Any:
        """GET /info: {"version": "1.3.0"}."""
        return json_answer({"version": NSQ_VERSION})

    def topics(self, request: Request) -> Any:
        """GET /topics: {"topics": [every topic registration's name]}."""
        return json_answer({"topics": self.db.topics()})

    def channels(self, request: Request) -> Any:
        """GET /channels?topic=T: {"channels": [names]}; 400 MISSING_ARG_TOPIC."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        return json_answer({"channels": self.db.channels(topic)})

    def lookup(self, request: Request) -> Any:
        """GET /lookup?topic=T: {"channels": [...], "producers": [peer...]}, only active and
        not tombstoned producers; 404 TOPIC_NOT_FOUND when T has no registration. The
        answer is the registration DB's cached one (RegistrationDB.lookup) while it holds."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        lk = self.lookupd
        answer = self.db.lookup(
            topic, lk.inactive_producer_timeout_ns, lk.tombstone_lifetime_ns, lookup_answer
        )
        if answer is None:
            lk.metrics.lookups.inc(("not_found",))
            raise NsqHTTPError(404, "TOPIC_NOT_FOUND")
        lk.metrics.lookups.inc(("found",))
        return answer

    def nodes(self, request: Request) -> Any:
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
        return json_answer({"producers": out})

    def debug(self, request: Request) -> Any:
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
        return json_answer(dict(sorted(data.items())))

    def topic_create(self, request: Request) -> Any:
        """POST /topic/create?topic=T: 200 empty; 400 MISSING_ARG_TOPIC / INVALID_ARG_TOPIC."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise NsqHTTPError(400, "INVALID_ARG_TOPIC")
        self.db.add_registration(Registration("topic", topic, ""))
        return None

    def topic_delete(self, request: Request) -> Any:
        """POST /topic/delete?topic=T: drops T's channel and topic registrations (the name is
        not validated and "*" matches all, as in Go); 200 empty."""
        topic = _get(_params(request), "topic", "MISSING_ARG_TOPIC")
        self.db.delete_topic(topic)
        return None

    def topic_tombstone(self, request: Request) -> Any:
        """POST /topic/tombstone?topic=T&node=ADDR:HTTP_PORT: 200 empty; 400
        MISSING_ARG_TOPIC / MISSING_ARG_NODE."""
        params = _params(request)
        topic = _get(params, "topic", "MISSING_ARG_TOPIC")
        node = _get(params, "node", "MISSING_ARG_NODE")
        self.db.tombstone(topic, node)
        return None

    def channel_create(self, request: Request) -> Any:
        """POST /channel/create?topic=T&channel=C: registers the channel and its topic."""
        topic, channel = _topic_channel(_params(request))
        self.db.add_registration(Registration("channel", topic, channel))
        self.db.add_registration(Registration("topic", topic, ""))
        return None

    def channel_delete(self, request: Request) -> Any:
        """POST /channel/delete?topic=T&channel=C: 404 CHANNEL_NOT_FOUND when not registered."""
        topic, channel = _topic_channel(_params(request))
        regs = self.db.find_registrations("channel", topic, channel)
        if not regs:
            raise NsqHTTPError(404, "CHANNEL_NOT_FOUND")
        for r in regs:
            self.db.remove_registration(r)
        return None

    def metrics(self, request: Request) -> Response:
        """GET /metrics (beyond nsqlookupd): Prometheus text exposition (lookupd/metrics.py)."""
        from . import metrics

        body = metrics.scrape(self.lookupd)
        return Response(200, body, {"Content-Type": CONTENT_TYPE})

    async def message(self, request: Request) -> Any:
        """GET /message?id=<ID> (beyond nsqlookupd): asks the nsqpy-d whose node id the ID
        carries; the answer is lookupd.message_lookup's (imported on first use)."""
        from . import message_lookup

        query = {k: v[0] for k, v in _params(request).items()}
        return await message_lookup.answer(self.lookupd, query)


_JSON_HEADERS = {**NSQ_HEADER, "Content-Type": JSON_TYPE}


def lookup_answer(channels: list[str], producers: list[PeerInfo]) -> Response:
    """/lookup's 200: the bytes json_answer({"channels": channels, "producers": [peer JSON]})
    gives, written by parts (gojson.encode of each, each peer's kept by PeerInfo.json_bytes:
    compact JSON, so they join as one). The Response may be cached and sent again: its
    headers are one shared dict, never changed."""
    peers = b",".join([p.json_bytes() for p in producers])
    body = b'{"channels":' + go_json(channels) + b',"producers":[' + peers + b"]}"
    return Response(200, body, _JSON_HEADERS)


def build_router(lookupd: NSQLookupd) -> Router:
    """nsqlookupd's routes (http.go newHTTPServer), less /debug/pprof, plus GET /message and
    GET /metrics; each route's requests are timed and counted for /metrics."""
    h = LookupdHTTP(lookupd)
    r = Router()
    timed = lookupd.metrics.timed

    def get(path: str, handler: Any) -> None:
        r.get(path, timed(path, handler))

    def post(path: str, handler: Any) -> None:
        r.post(path, timed(path, handler))

    get("/ping", h.ping)
    get("/info", api(h.info))
    get("/debug", api(h.debug))
    get("/lookup", api(h.lookup))
    get("/topics", api(h.topics))
    get("/channels", api(h.channels))
    get("/nodes", api(h.nodes))
    get("/message", api(h.message))
    get("/metrics", h.metrics)
    post("/topic/create", api(h.topic_create))
    post("/topic/delete", api(h.topic_delete))
    post("/channel/create", api(h.channel_create))
    post("/channel/delete", api(h.channel_delete))
    post("/topic/tombstone", api(h.topic_tombstone))
    return r
