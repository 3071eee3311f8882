"""nsqd's HTTP API on the shared HTTP server (internal.http).

Strategy: glue only. Each handler parses the query the way nsqd does (first value of a key),
calls the core and answers in nsqd's "V1" shape: 200 with the raw body ("OK", JSON, or empty),
errors as {"message": "<TEXT>"} with nsqd's status codes and texts, and the header
`X-Nsq-Content-Type: nsq; version=1.0` on every V1 answer. Routes, codes and texts follow
nsqd/http.go and internal/http_api (1.3); https://nsq.io/components/nsqd.html#http-api
Handlers are synchronous (the core's calls are): the server answers each in the same loop pass,
except /pub, /mpub and /topic/create meeting a topic that still waits for its lookupd channel
query (NSQD.topic_started): as nsqd's GetTopic, they answer once it is done (a coroutine).
Routes can be added or replaced by a RouteHook given to build_router: with --etcd-endpoints,
replication/http_routes.py installs the replicated topics' routes (their handlers may return a
coroutine, answered later), falling back on the handlers here for every other topic.
The routes that read a body name how much (--max-msg-size for /pub and PUT /config,
--max-body-size for /mpub); the server buffers no more than that plus one byte."""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import config, stats, wire
from .internal.gojson import GoJSONError, unmarshal_strings
from .internal.gostrconv import parse_int
from .internal.http.request import JSON_TYPE, Request, Response, first_values
from .internal.http.router import Router
from .internal.http.server import HTTPServer, serve
from .internal.http.v1 import NSQ_HEADER, NsqHTTPError, api, plain_text
from .internal.lg import LOG_LEVELS, change_level
from .options import NSQ_VERSION
from .topic import TopicError

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("nsqpy")

_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}
_LEN = struct.Struct(">i")
#: lg.ParseLogLevel's names, which PUT /config/log_level takes (nsqpy's "warning" alias is
#: the command line's only).
_PUT_LOG_LEVELS = LOG_LEVELS.keys() - {"warning"}
_INT64 = 1 << 63


def _ms_duration_ns(ms: int) -> int:
    """Go's time.Duration(ms) * time.Millisecond: nanoseconds, wrapped to int64 as Go's
    multiplication overflows."""
    return (ms * 1_000_000 + _INT64) % (2 * _INT64) - _INT64


#: Adds or replaces routes of nsqd's router, given the handlers it may fall back on
#: (replication/http_routes.install_routes with --etcd-endpoints).
RouteHook = Callable[[Router, "HTTPAPI"], None]


def _tls_required(nsqd: NSQD) -> Any:
    """nsqd's ServeHTTP check: with --tls-required=true the plain HTTP listener answers every
    request 403 {"message": "TLS_REQUIRED", "https_port": N} (tcp-https leaves HTTP open)."""

    def check(request: Request) -> Response | None:
        if nsqd.opts.tls_required == 2 and not request.secure:
            port = nsqd.https_address[1] if nsqd.https_address else 0
            return Response(
                403,
                b'{"message": "TLS_REQUIRED", "https_port": %d}' % port,
                {**NSQ_HEADER, "Content-Type": JSON_TYPE},
            )
        return None

    return check


def _name_arg(q: dict[str, str], key: str, invalid: str) -> str:
    """``q[key]`` (``key``: "topic" or "channel"): 400 MISSING_ARG_<KEY> when absent, 400
    ``invalid`` when it is not a valid NSQ name (no check when ``invalid`` is empty)."""
    if key not in q:
        raise NsqHTTPError(400, f"MISSING_ARG_{key.upper()}")
    name = q[key]
    if invalid and not wire.is_valid_name(name):
        raise NsqHTTPError(400, invalid)
    return name


class HTTPAPI:
    """The handlers; ``nsqd`` is the core they act on."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self._registry: Any = None

    # ------------------------------------------------------------ helpers

    @staticmethod
    def query(request: Request) -> dict[str, str]:
        """The query as nsqd reads it (Go's url.ParseQuery, first value of each key); a query
        Go cannot parse (a bad %-escape, a ``;``) is 400 INVALID_REQUEST in every handler."""
        try:
            return first_values(request.raw_query)
        except ValueError as e:
            log.error("failed to parse request params - %s", e)
            raise NsqHTTPError(400, "INVALID_REQUEST") from None

    def topic_from_query(self, request: Request) -> tuple[dict[str, str], Any]:
        q = self.query(request)
        return q, self.nsqd.get_topic(_name_arg(q, "topic", "INVALID_TOPIC"))

    def once_started(self, topic: Any, answer: Callable[[], Any]) -> Any:
        """``answer()`` now when ``topic`` hands out its messages; else a coroutine that waits
        for its lookupd channel query (NSQD.topic_started, bounded by
        --http-client-request-timeout) and then returns ``answer()``."""
        started = self.nsqd.topic_started(topic)
        if started is None:
            return answer()

        async def later() -> Any:
            await started
            return answer()

        return later()

    def _existing_topic_and_channel(self, request: Request) -> tuple[Any, str]:
        q = self.query(request)
        topic_name = _name_arg(q, "topic", "INVALID_ARG_TOPIC")
        channel_name = _name_arg(q, "channel", "INVALID_ARG_CHANNEL")
        try:
            topic = self.nsqd.get_existing_topic(topic_name)
        except TopicError:
            raise NsqHTTPError(404, "TOPIC_NOT_FOUND") from None
        return topic, channel_name

    def _existing_channel(self, request: Request) -> Any:
        topic, channel_name = self._existing_topic_and_channel(request)
        try:
            return topic.get_existing_channel(channel_name)
        except TopicError:
            raise NsqHTTPError(404, "CHANNEL_NOT_FOUND") from None

    def _existing_topic(self, request: Request, validate: bool) -> Any:
        name = _name_arg(self.query(request), "topic", "INVALID_TOPIC" if validate else "")
        try:
            return self.nsqd.get_existing_topic(name)
        except TopicError:
            raise NsqHTTPError(404, "TOPIC_NOT_FOUND") from None

    @staticmethod
    def body_within(request: Request, limit: int, too_big: str) -> bytes:
        """The body, at most ``limit`` bytes (the route reads limit+1: one more is too big);
        413 ``too_big`` when its Content-Length or what was read says more."""
        if request.content_length is not None and request.content_length > limit:
            raise NsqHTTPError(413, too_big)
        if len(request.body) > limit:
            raise NsqHTTPError(413, too_big)
        return request.body

    # ------------------------------------------------------------ handlers

    def ping(self, request: Request) -> Response:
        """GET /ping: "OK" (http_api.PlainText), or 500 with the health text when unhealthy."""
        nsqd = self.nsqd
        return plain_text(nsqd.health, 200 if nsqd.is_healthy() else 500)

    def info(self, request: Request) -> Any:
        opts = self.nsqd.opts
        tcp = self.nsqd.tcp_address
        http = self.nsqd.http_address
        return {
            "version": NSQ_VERSION,
            "broadcast_address": opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": http[1] if http else -1,
            "tcp_port": tcp[1] if tcp else -1,
            "start_time": self.nsqd.start_time,
            # Go encodes time.Duration as integer nanoseconds.
            "max_heartbeat_interval": opts.max_heartbeat_interval_ms * 1_000_000,
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": opts.max_output_buffer_timeout_ms * 1_000_000,
            "max_deflate_level": opts.max_deflate_level,
        }

    def pub(self, request: Request) -> Any:
        opts = self.nsqd.opts
        body = self.body_within(request, opts.max_msg_size, "MSG_TOO_BIG")
        if not body:
            raise NsqHTTPError(400, "MSG_EMPTY")
        q, topic = self.topic_from_query(request)
        deferred = self.defer_ms(q)

        def put() -> None:
            record = self.nsqd.new_record(body)
            if deferred:
                topic.put_deferred(record, deferred)
            else:
                topic.put(record)

        return self.put_and_flush(topic, put, "PUB_FAILED")

    def mpub(self, request: Request) -> Any:
        opts = self.nsqd.opts
        if request.content_length is not None and request.content_length > opts.max_body_size:
            raise NsqHTTPError(413, "BODY_TOO_BIG")
        q, topic = self.topic_from_query(request)
        bodies = self.mpub_bodies(q, request)

        def put() -> None:
            topic.put_many(self.nsqd.new_records(bodies))

        return self.put_and_flush(topic, put, "MPUB_FAILED")

    def put_and_flush(self, topic: Any, put: Callable[[], None], failed: str) -> Any:
        """/pub's and /mpub's answer: ``put`` run once ``topic`` has started (once_started),
        then the backends flushed: "OK". 503 EXITING when the topic refuses (TopicError), 500
        ``failed`` on a disk error (nsqd answers 503 EXITING for any put error; a disk failure
        is not "exiting")."""

        def run() -> str:
            try:
                put()
                self.nsqd.flush_backends()
            except TopicError:
                raise NsqHTTPError(503, "EXITING") from None
            except OSError:
                raise NsqHTTPError(500, failed) from None
            return "OK"

        return self.once_started(topic, run)

    def defer_ms(self, q: dict[str, str]) -> int:
        """/pub's ``defer`` in whole ms (0 when absent); 400 INVALID_DEFER."""
        if "defer" not in q:
            return 0
        try:
            deferred_ns = _ms_duration_ns(parse_int(q["defer"]))
        except ValueError:  # strconv.ParseInt(s, 10, 64): no spaces, no "_"
            raise NsqHTTPError(400, "INVALID_DEFER") from None
        if deferred_ns < 0 or deferred_ns > self.nsqd.opts.max_req_timeout_ms * 1_000_000:
            raise NsqHTTPError(400, "INVALID_DEFER")
        return -(-deferred_ns // 1_000_000)  # whole ms (a wrapped sub-ms stays > 0)

    def mpub_bodies(self, q: dict[str, str], request: Request) -> list[bytes]:
        """/mpub's messages, binary or newline separated; 413 errors as nsqd's."""
        opts = self.nsqd.opts
        binary = False
        if "binary" in q:
            binary = _BOOL_PARAMS.get(q["binary"], True)
        body = self.body_within(request, opts.max_body_size, "BODY_TOO_BIG")
        if binary:
            # Binary /mpub body: [4-byte count]([4-byte size][bytes])* (no leading body size).
            parser = wire.CommandParser(opts.max_msg_size, opts.max_body_size)
            try:
                parser.feed(b"MPUB x\n" + _LEN.pack(len(body)) + body)
                cmd = parser.next_command()
            except wire.ClientError as e:
                raise NsqHTTPError(413, e.code[2:]) from None
            if cmd is None:  # an empty body
                raise NsqHTTPError(413, "BAD_BODY")
            assert isinstance(cmd[2], list)
            bodies: list[bytes] = cmd[2]
        else:
            bodies = []
            for line in body.split(b"\n"):
                if not line:
                    continue
                if len(line) > opts.max_msg_size:
                    raise NsqHTTPError(413, "MSG_TOO_BIG")
                bodies.append(line)
        return bodies

    def stats(self, request: Request) -> Any:
        q = self.query(request)
        include_clients = _BOOL_PARAMS.get(q.get("include_clients", ""), True)
        include_mem = _BOOL_PARAMS.get(q.get("include_mem", ""), True)
        topic = q.get("topic", "")
        channel = q.get("channel", "")
        if q.get("format", "") == "json":
            return stats.stats_json(self.nsqd, topic, channel, include_clients, include_mem)
        # A str: answered as text/plain; charset=utf-8, the type Go's server sniffs for it.
        return stats.stats_text(self.nsqd, topic, channel, include_clients, include_mem)

    def topic_create(self, request: Request) -> Any:
        """POST /topic/create?topic=T[&replicas=R]: ``replicas`` above 1 needs replicated
        topics (400 REPLICATION_DISABLED; with --etcd-endpoints replication/http_routes.py
        answers this route), 1 is a plain topic."""
        q = self.query(request)
        if "replicas" in q and self.replicas_arg(q) > 1:
            raise NsqHTTPError(400, "REPLICATION_DISABLED")
        _, topic = self.topic_from_query(request)
        return self.once_started(topic, lambda: None)

    @staticmethod
    def replicas_arg(q: dict[str, str]) -> int:
        """/topic/create's ``replicas`` (nsqpy's own): an integer >= 1; 400 INVALID_REPLICAS."""
        try:
            replicas = int(q["replicas"])
        except ValueError:
            raise NsqHTTPError(400, "INVALID_REPLICAS") from None
        if replicas < 1:
            raise NsqHTTPError(400, "INVALID_REPLICAS")
        return replicas

    def topic_delete(self, request: Request) -> Any:
        name = _name_arg(self.query(request), "topic", "")
        try:
            self.nsqd.delete_existing_topic(name)
        except TopicError:
            raise NsqHTTPError(404, "TOPIC_NOT_FOUND") from None
        return None

    def topic_empty(self, request: Request) -> Any:
        self._existing_topic(request, validate=True).empty()
        return None

    def topic_pause(self, request: Request) -> Any:
        return self._pause(request, self._existing_topic(request, validate=False))

    def _pause(self, request: Request, target: Any) -> None:
        """/topic/(un)pause and /channel/(un)pause on ``target`` (a Topic or a Channel), the
        path saying which, then the metadata persisted (nsqd's doPauseTopic/doPauseChannel)."""
        if "unpause" in request.path:
            target.unpause()
        else:
            target.pause()
        self.nsqd.persist_metadata()

    def channel_create(self, request: Request) -> Any:
        topic, channel_name = self._existing_topic_and_channel(request)
        q = self.query(request)
        max_attempts = None
        if "max_attempts" in q:  # nsqpy's dead letters (nsqd has no such parameter)
            max_attempts = self._count_arg(q["max_attempts"], "INVALID_MAX_ATTEMPTS")
            dead = self.nsqd.dead_letter_topic(topic.name, channel_name)
            if max_attempts and (
                channel_name.endswith("#ephemeral") or not wire.is_valid_name(dead)
            ):
                raise NsqHTTPError(400, "INVALID_DEAD_LETTER_TOPIC")
        topic.get_channel(channel_name)
        if max_attempts is not None:
            self.nsqd.set_channel_max_attempts(topic.name, channel_name, max_attempts)
        return None

    @staticmethod
    def _count_arg(value: str, error: str) -> int:
        try:
            n = parse_int(value)
        except ValueError:
            raise NsqHTTPError(400, error) from None
        if n < 0:
            raise NsqHTTPError(400, error)
        return n

    def message_replay(self, request: Request) -> Any:
        """POST /message/replay?topic=&channel=[&count=N] (nsqpy's dead letters): up to N
        (default all) messages of <topic>.<channel>.dead back into the channel, attempts reset;
        answers {"replayed": n}."""
        topic, channel_name = self._existing_topic_and_channel(request)
        q = self.query(request)
        limit = self._count_arg(q["count"], "INVALID_COUNT") if "count" in q else 1 << 62
        try:
            n = self.nsqd.replay_dead_letters(topic.name, channel_name, limit)
        except TopicError:
            raise NsqHTTPError(404, "CHANNEL_NOT_FOUND") from None
        except OSError:
            raise NsqHTTPError(500, "REPLAY_FAILED") from None
        return {"replayed": n}

    def channel_delete(self, request: Request) -> Any:
        topic, channel_name = self._existing_topic_and_channel(request)
        try:
            topic.delete_existing_channel(channel_name)
        except TopicError:
            raise NsqHTTPError(404, "CHANNEL_NOT_FOUND") from None
        return None

    def channel_empty(self, request: Request) -> Any:
        self._existing_channel(request).empty()
        return None

    def config(self, request: Request) -> Any:
        """GET/PUT /config/<opt> (nsqd's doConfig): PUT sets nsqlookupd_tcp_addresses (a JSON
        list of strings) or log_level (debug, info, ...); both answer the option's value."""
        opt = request.params["opt"]
        opts = self.nsqd.opts
        if request.method == "PUT":
            # nsqd reads at most max-msg-size+1 bytes; a longer Content-Length reads nothing
            read_max = opts.max_msg_size + 1
            body = request.body
            if len(body) >= read_max or not body:
                raise NsqHTTPError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_tcp_addresses":
                try:  # json.Unmarshal into []string: null is nil, a null element ""
                    value = unmarshal_strings(body)
                except GoJSONError:
                    raise NsqHTTPError(400, "INVALID_VALUE") from None
                opts.nsqlookupd_tcp_addresses = value  # type: ignore[assignment]
                if self.nsqd.lookup is not None:
                    self.nsqd.lookup.set_addresses(value or [])
            elif opt == "log_level":
                level = body.decode("utf-8", "replace").lower()
                if not change_level(opts, level, _PUT_LOG_LEVELS):
                    raise NsqHTTPError(400, "INVALID_VALUE")
            else:
                raise NsqHTTPError(400, "INVALID_OPTION")
        value, ok = config.option_value(opts, opt)
        if not ok:
            raise NsqHTTPError(400, "INVALID_OPTION")
        if value is None:  # a nil []string after PUT "null": Go's JSON says null
            return Response(200, b"null", {**NSQ_HEADER, "Content-Type": JSON_TYPE})
        return value  # RespondV1: a string raw, anything else JSON

    def metrics(self, request: Request) -> Response:
        """Prometheus text exposition (not in nsqd): read from the live topics on scrape.
        prometheus_client is imported on the first scrape, not at start-up."""
        from . import metrics

        if self._registry is None:
            self._registry = metrics.build_registry(self.nsqd)
        return Response(200, metrics.scrape(self._registry), {"Content-Type": metrics.CONTENT_TYPE})

    def message(self, request: Request) -> Any:
        """GET /message?id=<ID>[&topic=][&body=1] (beyond nsqd): where that message is now;
        the answer is message_lookup's (imported on first use)."""
        from . import message_lookup

        return message_lookup.answer(self.nsqd, self.query(request))

    def channel_pause(self, request: Request) -> Any:
        return self._pause(request, self._existing_channel(request))


def build_router(nsqd: NSQD, hooks: Sequence[RouteHook] = ()) -> Router:
    """nsqd's routes (nsqd/http.go newHTTPServer, less /debug/pprof), plus nsqpy's own:
    /metrics, /message, /message/replay; then each of ``hooks`` adds or replaces routes
    (replication/http_routes.py with --etcd-endpoints)."""
    h = HTTPAPI(nsqd)
    opts = nsqd.opts

    def msg_size() -> int:
        return opts.max_msg_size

    def body_size() -> int:
        return opts.max_body_size

    r = Router()
    r.get("/ping", h.ping)
    r.get("/info", api(h.info))
    r.post("/pub", api(h.pub), msg_size)
    r.post("/mpub", api(h.mpub), body_size)
    r.get("/stats", api(h.stats))
    r.post("/topic/create", api(h.topic_create))
    r.post("/topic/delete", api(h.topic_delete))
    r.post("/topic/empty", api(h.topic_empty))
    r.post("/topic/pause", api(h.topic_pause))
    r.post("/topic/unpause", api(h.topic_pause))
    r.post("/channel/create", api(h.channel_create))
    r.post("/message/replay", api(h.message_replay))
    r.get("/message", api(h.message))
    r.post("/channel/delete", api(h.channel_delete))
    r.post("/channel/empty", api(h.channel_empty))
    r.post("/channel/pause", api(h.channel_pause))
    r.post("/channel/unpause", api(h.channel_pause))
    r.get("/config/{opt}", api(h.config))
    r.add("PUT", "/config/{opt}", api(h.config), msg_size)
    r.get("/metrics", h.metrics)
    for hook in hooks:
        hook(r, h)
    return r


async def start_http(
    nsqd: NSQD,
    host: str | None,
    port: int,
    ssl_context: Any = None,
    unix_path: str | None = None,
    hooks: Sequence[RouteHook] = (),
) -> HTTPServer:
    """Serve the API (with ``hooks``' routes, build_router) on host:port (port 0 = pick one),
    over TLS with ``ssl_context`` (HTTPS), or on the unix socket ``unix_path``; the server's
    ``address`` is the bound one. Raises OSError when it cannot bind."""
    return await serve(
        build_router(nsqd, hooks),
        host,
        port,
        ssl_context,
        _tls_required(nsqd),
        unix_path=unix_path,
    )
