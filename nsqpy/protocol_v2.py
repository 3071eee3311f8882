"""The TCP V2 protocol's rules, sans-IO: per-client state and the commands, no socket.

Strategy: as h11 is for HTTP, this module never reads, writes, schedules or awaits. A command
arrives parsed (wire.CommandParser, whose ``precheck`` hook runs ``ClientState.precheck``: the
checks nsqd makes before it reads a body); ``ProtocolV2.execute(client, name, params, body)``
runs it against the client's state and the broker core, and returns what the connection must do
next as an int of action bits (0: nothing, go on):

- the reply frames are appended to ``client.out`` (an error frame included); the connection
  flushes them at the end of its pass;
- ``CLOSE``: a fatal error (its frame is in ``out``): flush and close;
- ``UPGRADE``: IDENTIFY negotiated TLS and/or compression (``client.upgrade`` holds what): flush
  its plain reply, then route the bytes that follow through the new layers;
- ``SUSPEND``: the command waits on an outside answer (``client.wait``: an auth-server query,
  a large IDENTIFY body decoded in a helper process, a replicated publish's commit, or a new
  topic's lookupd channel query, NSQD.topic_started); read
  nothing more until the connection hands the answer to ``ProtocolV2.resume``, which finishes
  the command (its own action bits);
- ``TIMERS``: the heartbeat interval changed (IDENTIFY): re-arm the timer at ``next_wakeup``.

Time is the injected ``clock`` (monotonic seconds; the daemon passes its event loop's ``time``
so timers and rules agree): ``tick`` sends heartbeats and drops a client silent for two
heartbeat intervals (nsqd's read deadline). Calls into the broker core (NSQD.get_topic,
Topic.put, Channel.finish/requeue/touch...) are direct and synchronous, as in nsqd. The
connection itself (asyncio, budgets, backpressure, TLS and compression layers, the timer and
the auth query) is client_v2.Connection, a subclass of ClientState.

Commands, checks, error codes and texts follow nsqd/protocol_v2.go and client_v2.go (1.3):
https://nsq.io/clients/tcp_protocol_spec.html"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from . import wire
from .channel import Channel, ChannelError
from .client_stats import ClientStats
from .internal import gojson
from .internal.gojson import GoJSONError, GoStruct
from .internal.gostrconv import quote as go_quote
from .message import Message
from .options import NSQ_VERSION
from .stream_upgrade import Upgrade, negotiated_codec
from .tls import TLS_NOT_REQUIRED
from .topic import Topic, TopicError
from .wire import ClientError, FatalClientError

if TYPE_CHECKING:
    from .auth import AuthState
    from .auth_session import AuthSession
    from .nsqd import NSQD

log = logging.getLogger("nsqpy")

# Client states, numbered as nsqd's (they show in /stats "state").
STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

DEFAULT_BUFFER_SIZE = 16 * 1024

#: Action bits returned by the commands (0: go on).
CLOSE = 1
UPGRADE = 2
SUSPEND = 4
TIMERS = 8

#: What a suspended command waits on (Wait.kind).
WAIT_AUTH = 1
WAIT_DECODE = 2
#: A future made outside the core (a replicated publish's commit: nsqpy/replication/; a new
#: topic's start: NSQD.topic_started).
WAIT_FUTURE = 3
#: Work done in steps, one per loop pass (a large MPUB's puts): ``arg()`` does the next step
#: and returns True after the last; an exception it raises is the answer.
WAIT_STEPS = 4

#: An MPUB of more messages than this is put this many at a time, one slice per loop pass, so
#: other clients are served between the slices (its OK comes after the last one).
MPUB_SLICE = 4096

#: IDENTIFY bodies over this many bytes are decoded in a helper process (WAIT_DECODE).
LARGE_IDENTIFY = 64 * 1024
#: IDENTIFY's log line shows at most this many characters of a string field.
_LOG_VALUE_MAX = 1024

_OK_FRAME = wire.encode_response(wire.OK)
_HEARTBEAT_FRAME = wire.encode_response(wire.HEARTBEAT)
_CLOSE_WAIT_FRAME = wire.encode_response(wire.CLOSE_WAIT)
_NO_WAKEUP = -1.0


#: IDENTIFY's body as json.Unmarshal reads it into nsqd's identifyDataV2 (nsqd/protocol_v2.go).
_IDENTIFY = GoStruct(
    {
        "client_id": "string",
        "hostname": "string",
        "heartbeat_interval": "int",
        "output_buffer_size": "int",
        "output_buffer_timeout": "int",
        "feature_negotiation": "bool",
        "tls_v1": "bool",
        "deflate": "bool",
        "deflate_level": "int",
        "snappy": "bool",
        "sample_rate": "int32",
        "user_agent": "string",
        "msg_timeout": "int",
    },
    name="identifyDataV2",
    type_name="nsqd.identifyDataV2",
)


def _text(b: bytes) -> str:
    """Client bytes for an error text: invalid UTF-8 kept as surrogate escapes, which
    ClientError.text turns back into the same bytes (nsqd echoes them as sent)."""
    return b.decode("utf-8", "surrogateescape")


def decode_identify(body: bytes) -> dict[str, Any]:
    """IDENTIFY's JSON body as nsqd's json.Unmarshal into identifyDataV2 reads it: the fields
    present (not null) by json name. Go's rules (gojson.GoStruct): keys match
    case-insensitively, unknown keys are ignored, a lone surrogate escape is U+FFFD; raises
    GoJSONError (a ValueError, with encoding/json's text) for a body Go refuses."""
    return _IDENTIFY.unmarshal(body)


def decode_identify_aside(body: bytes) -> dict[str, Any] | None:
    """decode_identify in the helper process: None for a body it refuses (any error, deep
    nesting included: Go's decoder refuses those too)."""
    try:
        return decode_identify(body)
    except GoJSONError:
        return None


class Wait:
    """What a suspended command waits on: ``kind`` WAIT_AUTH (``arg``: the secret; answered
    with an AuthState or the query's exception), WAIT_DECODE (``arg``: IDENTIFY's body;
    answered with decode_identify_aside's result), WAIT_FUTURE (``arg``: an asyncio future;
    answered with its result or exception) or WAIT_STEPS (``arg``: a step function run once per
    loop pass until it returns True; answered with None, or the exception a step raised).
    ``then(answer)`` finishes the command and returns its action bits; ProtocolV2.resume
    calls it."""

    __slots__ = ("arg", "kind", "then")

    def __init__(self, kind: int, arg: Any, then: Callable[[Any], int]) -> None:
        self.kind = kind
        self.arg = arg
        self.then = then


class ClientState:
    """One V2 client's protocol state and counters (nsqd's clientV2 without its socket); also
    the channel's Consumer (channel.Consumer). Output accumulates in ``out``; ``flush``,
    ``flush_soon`` and ``close`` do nothing here: client_v2.Connection, the subclass that owns
    the socket, makes them write and close. A bare ClientState is what the unit tests drive."""

    __slots__ = (
        "auth",
        "channel",
        "client_id",
        "client_name",
        "closed",
        "connect_ts",
        "core",
        "finish_count",
        "handlers",
        "heartbeat_interval_ms",
        "hostname",
        "in_flight_count",
        "in_ready",
        "last_read",
        "message_count",
        "msg_timeout_ms",
        "next_heartbeat",
        "out",
        "output_buffer_size",
        "output_buffer_timeout_ms",
        "pub_counts",
        "rdy",
        "remote_address",
        "remote_ip",
        "replied",
        "requeue_count",
        "room_changed",
        "sample_rate",
        "state",
        "tls_policy",
        "upgrade",
        "user_agent",
        "wait",
        "write_paused",
    )

    def __init__(self, core: ProtocolV2) -> None:
        self.core = core
        nsqd = core.nsqd
        opts = core.opts
        self.client_id = nsqd.next_client_id()
        self.remote_address = ""
        self.remote_ip = ""
        self.state = STATE_INIT
        self.out = bytearray()
        self.replied = False
        self.output_buffer_size = DEFAULT_BUFFER_SIZE
        self.output_buffer_timeout_ms = opts.output_buffer_timeout_ms
        self.heartbeat_interval_ms = opts.client_timeout_ms // 2
        self.msg_timeout_ms = opts.msg_timeout_ms
        self.sample_rate = 0
        self.rdy = 0
        self.in_flight_count = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.channel: Channel | None = None
        self.in_ready = False
        self.client_name = ""
        self.hostname = ""
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.pub_counts: dict[str, int] = {}
        self.write_paused = False
        self.closed = False
        self.room_changed = False
        self.last_read = core.clock()
        self.next_heartbeat = _NO_WAKEUP
        self.auth: AuthSession | None = None
        if nsqd.auth is not None:  # --auth-http-address: only then is nsqpy.auth loaded
            from . import auth_session

            self.auth = auth_session.AuthSession()
        self.wait: Wait | None = None
        self.upgrade: Upgrade | None = None
        # --tls-required: until the TLS upgrade, IDENTIFY is the only command (nsqd's
        # enforceTLSPolicy, which runs before the command lookup)
        self.tls_policy = core.opts.tls_required != TLS_NOT_REQUIRED
        self.handlers = core.tls_handlers if self.tls_policy else core.handlers

    def __repr__(self) -> str:
        return self.remote_address

    def reply(self, frame: bytes) -> None:
        """Queue a response or error frame after the messages already in ``out``."""
        self.out += frame
        self.replied = True

    def precheck(self, name: bytes, params: list[bytes]) -> None:
        """The parser's hook: nsqd's checks before a body is read (raises FatalClientError)."""
        core = self.core
        if self.tls_policy and name != b"IDENTIFY":
            raise core.no_handler(self, name)
        core.precheck(self, name, params)

    # ------------------------------------------------------------ what the connection adds

    def flush(self) -> None:
        """Write ``out`` now (the connection); a bare state keeps it."""

    def flush_soon(self) -> None:
        """Write ``out`` once the current event-loop pass ends (the connection)."""

    def close(self) -> None:
        """Close after writing ``out`` (channel deleted, shutdown); a bare state is marked."""
        self.closed = True

    def transport_info(self) -> tuple[bool, str, str, str]:
        """(tls on, tls_version, tls_cipher_suite, codec name "snappy"/"deflate"/"")."""
        return False, "", "", ""

    # ------------------------------------------------------------ channel.Consumer

    def ready_room(self) -> int:
        if self.write_paused or self.state != STATE_SUBSCRIBED or self.closed:
            return 0
        ch = self.channel
        if ch is None or ch.paused:
            return 0
        return self.rdy - self.in_flight_count

    def send_messages(self, msgs: list[Message]) -> None:
        n = len(msgs)
        self.in_flight_count += n
        self.message_count += n
        out = self.out
        wire.append_record_frames(out, msgs)
        if len(out) >= self.output_buffer_size:
            self.flush()
        else:
            self.flush_soon()

    def timed_out_message(self) -> None:
        self.in_flight_count -= 1
        if self.channel is not None:
            self.channel.notify_ready(self)

    def emptied(self) -> None:
        self.in_flight_count = 0
        if self.channel is not None:
            self.channel.notify_ready(self)

    # ------------------------------------------------------------ stats

    def stats(self) -> ClientStats:
        """This client for /stats and /message (nsqd's ClientV2.Stats -> ClientStats)."""
        tls_on, tls_version, tls_cipher, codec = self.transport_info()
        auth = self.auth.state if self.auth is not None else None
        return ClientStats(
            client_id=self.client_id,
            client_name=self.client_name,
            hostname=self.hostname,
            remote_address=self.remote_address,
            user_agent=self.user_agent,
            state=self.state,
            ready_count=self.rdy,
            in_flight_count=self.in_flight_count,
            message_count=self.message_count,
            finish_count=self.finish_count,
            requeue_count=self.requeue_count,
            connect_ts=self.connect_ts,
            sample_rate=self.sample_rate,
            codec=codec,
            authed=auth is not None and bool(auth.authorizations),
            auth_identity=auth.identity if auth is not None else "",
            auth_identity_url=auth.identity_url if auth is not None else "",
            pub_counts=self.pub_counts,
            tls=tls_on,
            tls_version=tls_version,
            tls_cipher_suite=tls_cipher,
        )


Handler = Callable[[ClientState, list[bytes], Any], int]


class PubCommand:
    """What PUB, MPUB and DPUB differ in: ``name``; ``failed``, the code of the fatal error
    when the topic refuses the messages (E_PUB_FAILED...); ``many``, the body is a list of
    bodies (MPUB); ``deferred``, params[2] is a delay in ms (DPUB)."""

    __slots__ = ("deferred", "failed", "many", "name")

    def __init__(self, name: str, many: bool = False, deferred: bool = False) -> None:
        self.name = name
        self.failed = f"E_{name}_FAILED"
        self.many = many
        self.deferred = deferred


PUB_COMMAND = PubCommand("PUB")
MPUB_COMMAND = PubCommand("MPUB", many=True)
DPUB_COMMAND = PubCommand("DPUB", deferred=True)
_PUBLISH_COMMANDS = (b"PUB", b"MPUB", b"DPUB")


class Publish(NamedTuple):
    """A publish the core hands to PublishReplication.publish, its topic name read and the
    client authorized: ``cmd`` (PUB, MPUB or DPUB), ``topic``, the message ``bodies`` (one
    for PUB and DPUB) and ``delay_ms`` (DPUB's delay, else 0)."""

    cmd: PubCommand
    topic: str
    bodies: list[bytes]
    delay_ms: int


class PublishReplication(Protocol):
    """Replicated topics as the protocol core sees them (--etcd-endpoints only; implemented
    by nsqpy/replication/tcp_publish.py). Every method takes the client's state and a
    ``retry`` that runs the command again, and returns action bits; a method that returns
    SUSPEND has set ``c.wait`` (WAIT_FUTURE) to what the command waits on."""

    def replicates(self, topic: str) -> bool:
        """Does a publish to ``topic`` go through replication (it has a replication record,
        or a first publish makes one)?"""
        ...

    def hold(self, c: ClientState, retry: Callable[[], int]) -> int:
        """0 when ``c`` has no replicated publish waiting for its answer; else SUSPEND, and
        ``retry`` runs once they are answered."""
        ...

    def publish(self, c: ClientState, pub: Publish, retry: Callable[[], int]) -> int:
        """Publish ``pub`` (its topic replicated); answered through ProtocolV2.published, or
        an error of ``pub.cmd.failed`` (raised now or answered later, fatal)."""
        ...


class ProtocolV2:
    """The V2 commands for every client of one daemon (see the module docstring).

    ``nsqd`` is the broker core (registry, options, TLS context and auth servers set or not);
    ``clock()`` returns monotonic seconds. Every method takes the client's state and returns
    action bits; none raises for a client's error (it becomes the client's E_* frame)."""

    __slots__ = ("clock", "handlers", "nsqd", "opts", "protocols", "replication", "tls_handlers")

    def __init__(self, nsqd: NSQD, clock: Callable[[], float] = time.monotonic) -> None:
        self.nsqd = nsqd
        self.opts = nsqd.opts
        self.clock = clock
        self.handlers: dict[bytes, Handler] = {
            b"FIN": self.FIN,
            b"RDY": self.RDY,
            b"REQ": self.REQ,
            b"PUB": self.PUB,
            b"MPUB": self.MPUB,
            b"DPUB": self.DPUB,
            b"NOP": self.NOP,
            b"TOUCH": self.TOUCH,
            b"SUB": self.SUB,
            b"CLS": self.CLS,
            b"AUTH": self.AUTH,
            b"IDENTIFY": self.IDENTIFY,
        }
        #: --tls-required before the TLS upgrade: IDENTIFY only.
        self.tls_handlers: dict[bytes, Handler] = {b"IDENTIFY": self.IDENTIFY}
        #: Replicated topics (attach_replication, --etcd-endpoints only); None otherwise.
        self.replication: PublishReplication | None = None
        #: Other protocols on the TCP port by their magic (attach_protocol): each a factory
        #: of the object (an asyncio.Protocol) the connection hands itself over to.
        self.protocols: dict[bytes, Callable[[], Any]] = {}

    # ------------------------------------------------------------ running commands

    def execute(self, c: ClientState, name: bytes, params: list[bytes], body: Any) -> int:
        """Run one parsed command; its replies go to ``c.out``. Returns action bits."""
        handler = c.handlers.get(name)
        try:
            if handler is None:
                raise self.no_handler(c, name)
            return handler(c, params, body)
        except ClientError as e:
            return self.error(c, e)

    def error(self, c: ClientState, e: ClientError) -> int:
        """Answer a client error (the command's or the parser's): its frame, CLOSE if fatal."""
        log.error("[%s] - %s", c.remote_address, e)
        c.reply(wire.encode_error(e))
        return CLOSE if e.fatal else 0

    def resume(self, c: ClientState, answer: Any) -> int:
        """Finish the command suspended on ``c.wait`` with its answer. Returns action bits."""
        wait = c.wait
        c.wait = None
        if wait is None:
            return 0
        try:
            return wait.then(answer)
        except ClientError as e:
            return self.error(c, e)

    def no_handler(self, c: ClientState, name: bytes) -> FatalClientError:
        if c.tls_policy:
            return FatalClientError(
                "E_INVALID", f"cannot {_text(name)} in current state (TLS required)"
            )
        return FatalClientError("E_INVALID", f"invalid command {_text(name)}")

    def tls_established(self, c: ClientState) -> None:
        """The TLS handshake is done: --tls-required allows every command from now on."""
        if c.tls_policy:
            c.tls_policy = False
            c.handlers = self.handlers

    # ------------------------------------------------------------ heartbeats, read deadline

    def start_heartbeat(self, c: ClientState) -> None:
        """(Re)start the heartbeat interval from now (connect, IDENTIFY)."""
        hb = c.heartbeat_interval_ms
        c.next_heartbeat = self.clock() + hb / 1000 if hb > 0 else _NO_WAKEUP

    def next_wakeup(self, c: ClientState) -> float:
        """When ``tick`` has something to do (clock seconds), or -1 with heartbeats off."""
        hb = c.heartbeat_interval_ms
        if hb <= 0:
            return _NO_WAKEUP
        return min(c.next_heartbeat, c.last_read + 2 * hb / 1000)

    def tick(self, c: ClientState) -> int:
        """At or after ``next_wakeup``: CLOSE a client that sent nothing for two heartbeat
        intervals (nsqd's read deadline: "i/o timeout"), else queue a heartbeat when due."""
        hb = c.heartbeat_interval_ms
        if hb <= 0 or c.closed:
            return 0
        now = self.clock()
        if now >= c.last_read + 2 * hb / 1000:
            log.error(
                "client(%s) - failed to read command - i/o timeout (no data for %d ms)",
                c.remote_address,
                2 * hb,
            )
            return CLOSE
        if now >= c.next_heartbeat:
            c.reply(_HEARTBEAT_FRAME)
            c.next_heartbeat = now + hb / 1000
        return 0

    # ------------------------------------------------------------ checks made before a body

    def precheck(self, c: ClientState, name: bytes, params: list[bytes]) -> None:
        """nsqd's checks before it reads a body (raises FatalClientError)."""
        if name == b"PUB" or name == b"DPUB":
            cmd = name.decode()
            if len(params) < (2 if name == b"PUB" else 3):
                raise FatalClientError("E_INVALID", f"{cmd} insufficient number of parameters")
            if not wire.is_valid_name(params[1]):
                raise FatalClientError(
                    "E_BAD_TOPIC", f"{cmd} topic name {go_quote(params[1])} is not valid"
                )
            if name == b"DPUB":
                _dpub_timeout_ms(params[2], self.opts.max_req_timeout_ms)
        elif name == b"MPUB":
            if len(params) < 2:
                raise FatalClientError("E_INVALID", "MPUB insufficient number of parameters")
            if not wire.is_valid_name(params[1]):
                # nsqd repeats the code inside the text: "E_BAD_TOPIC E_BAD_TOPIC MPUB ..."
                raise FatalClientError(
                    "E_BAD_TOPIC",
                    f"E_BAD_TOPIC MPUB topic name {go_quote(params[1])} is not valid",
                )
            auth = c.auth
            if auth is not None and not auth.check_before_body("MPUB", params[1].decode()):
                # nsqd checks MPUB before reading its body; an expired state is asked again
                # once the body is in (MPUB's handler), and MPUB creates the topic then
                return
            # nsqd gets (creates) the topic before it reads the body: whatever goes wrong
            # with the body, or an EOF inside it, the topic exists by then
            self.nsqd.get_topic(params[1].decode())
        elif name == b"IDENTIFY":
            if c.state != STATE_INIT:
                raise FatalClientError("E_INVALID", "cannot IDENTIFY in current state")
        elif name == b"AUTH":
            if c.state != STATE_INIT:
                raise FatalClientError("E_INVALID", "cannot AUTH in current state")
            if len(params) != 1:
                raise FatalClientError("E_INVALID", "AUTH invalid number of parameters")

    # ------------------------------------------------------------ IDENTIFY

    def IDENTIFY(self, c: ClientState, params: list[bytes], body: Any) -> int:
        if len(body) > LARGE_IDENTIFY:
            # decoding megabytes of JSON builds millions of objects: seconds of the event loop
            # that nsqd spends in the client's own goroutine; the connection decodes it aside
            c.wait = Wait(WAIT_DECODE, body, lambda data: self._decoded(c, data))
            return SUSPEND
        try:
            data = decode_identify(body)
        except GoJSONError:
            raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
        return self._identified(c, data)

    def _decoded(self, c: ClientState, data: dict[str, Any] | None) -> int:
        if data is None:
            raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        return self._identified(c, data)

    def _identified(self, c: ClientState, data: dict[str, Any]) -> int:
        """IDENTIFY with its body decoded (nsqd's identifyDataV2)."""
        log.info("[%s] IDENTIFY: %s", c.remote_address, _loggable(data))
        opts = self.opts
        c.client_name = data.get("client_id", "")
        c.hostname = data.get("hostname", "")
        c.user_agent = data.get("user_agent", "")

        hb = _ranged(
            data, "heartbeat_interval", 1000, opts.max_heartbeat_interval_ms, "heartbeat interval"
        )
        if hb is not None:
            c.heartbeat_interval_ms = max(hb, 0)
        obt = _ranged(
            data,
            "output_buffer_timeout",
            opts.min_output_buffer_timeout_ms,
            opts.max_output_buffer_timeout_ms,
            "output buffer timeout",
        )
        if obt is not None:
            c.output_buffer_timeout_ms = max(obt, 0)
        obs = _ranged(
            data, "output_buffer_size", 64, opts.max_output_buffer_size, "output buffer size"
        )
        if obs == -1:
            c.output_buffer_size = 1
            c.output_buffer_timeout_ms = 0
        elif obs is not None:
            c.output_buffer_size = obs
        c.sample_rate = _ranged(data, "sample_rate", 0, 99, "sample rate", off=False) or 0
        mt = _ranged(data, "msg_timeout", 1000, opts.max_msg_timeout_ms, "msg timeout", off=False)
        if mt is not None:
            c.msg_timeout_ms = mt

        self.start_heartbeat(c)

        if not data.get("feature_negotiation", False):
            c.reply(_OK_FRAME)
            return TIMERS
        tls_v1 = self.nsqd.tls_context is not None and data.get("tls_v1", False)
        deflate = opts.deflate and data.get("deflate", False)
        deflate_level = 6
        if deflate and data.get("deflate_level", 0) > 0:
            deflate_level = data["deflate_level"]
        deflate_level = min(deflate_level, opts.max_deflate_level)
        snappy = opts.snappy and data.get("snappy", False)
        if deflate and snappy:
            raise FatalClientError(
                "E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression"
            )
        resp = {
            "max_rdy_count": opts.max_rdy_count,
            "version": NSQ_VERSION,
            "max_msg_timeout": opts.max_msg_timeout_ms,
            "msg_timeout": c.msg_timeout_ms,
            "tls_v1": tls_v1,
            "deflate": deflate,
            "deflate_level": deflate_level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": c.sample_rate,
            "auth_required": c.auth is not None,
            "output_buffer_size": c.output_buffer_size,
            "output_buffer_timeout": c.output_buffer_timeout_ms,
        }
        c.reply(wire.encode_response(gojson.encode(resp)))
        if tls_v1 or snappy or deflate:
            c.upgrade = Upgrade(tls_v1, negotiated_codec(snappy, deflate, deflate_level))
            return TIMERS | UPGRADE
        return TIMERS

    # ------------------------------------------------------------ AUTH

    def AUTH(self, c: ClientState, params: list[bytes], body: Any) -> int:
        auth = c.auth
        if auth is None:
            raise FatalClientError("E_AUTH_DISABLED", "AUTH disabled")
        auth.authenticate(body)
        c.wait = Wait(WAIT_AUTH, auth.secret, lambda answer: self._authenticated(c, answer))
        return SUSPEND

    def _authenticated(self, c: ClientState, answer: AuthState | BaseException) -> int:
        auth = c.auth
        assert auth is not None
        c.reply(auth.answered(_auth_answer(c, answer)))
        return 0

    def _authorize(
        self, c: ClientState, cmd: str, topic: str, channel: str, retry: Callable[[], int]
    ) -> int:
        """nsqd's CheckAuth: 0 when allowed; SUSPEND when the answer has expired (asked again,
        then ``retry`` runs the command again); raises E_AUTH_FIRST / E_UNAUTHORIZED."""
        auth = c.auth
        assert auth is not None
        if auth.authorize(cmd, topic, channel):
            return 0

        def requeried(answer: AuthState | BaseException) -> int:
            auth.state = _auth_answer(c, answer)
            return retry()

        c.wait = Wait(WAIT_AUTH, auth.secret, requeried)
        return SUSPEND

    # ------------------------------------------------------------ consuming

    def SUB(self, c: ClientState, params: list[bytes], body: Any) -> int:
        if c.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot SUB in current state")
        if c.heartbeat_interval_ms <= 0:
            raise FatalClientError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise FatalClientError("E_INVALID", "SUB insufficient number of parameters")
        if not wire.is_valid_name(params[1]):
            raise FatalClientError(
                "E_BAD_TOPIC", f"SUB topic name {go_quote(params[1])} is not valid"
            )
        if not wire.is_valid_name(params[2]):
            raise FatalClientError(
                "E_BAD_CHANNEL", f"SUB channel name {go_quote(params[2])} is not valid"
            )
        if c.auth is not None:
            act = self._authorize(
                c,
                "SUB",
                params[1].decode(),
                params[2].decode(),
                lambda: self.SUB(c, params, body),
            )
            if act:
                return act
        topic = self.nsqd.get_topic(params[1].decode())
        if topic.starting:
            act = _until_started(self.nsqd, c, topic, lambda: self.SUB(c, params, body))
            if act:
                return act
        channel = topic.get_channel(params[2].decode())
        try:
            channel.add_client(c, self.opts.max_channel_consumers)
        except ChannelError as e:
            raise FatalClientError("E_SUB_FAILED", f"SUB failed {e}") from None
        c.state = STATE_SUBSCRIBED
        c.channel = channel
        c.reply(_OK_FRAME)
        return 0

    def RDY(self, c: ClientState, params: list[bytes], body: Any) -> int:
        state = c.state
        if state == STATE_CLOSING:
            log.info(
                "PROTOCOL(V2): [%s] ignoring RDY after CLS in state ClientStateV2Closing",
                c.remote_address,
            )
            return 0
        if state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            try:
                count = wire.byte_to_base10(params[1])
            except ValueError:
                raise FatalClientError(
                    "E_INVALID", f"RDY could not parse count {_text(params[1])}"
                ) from None
        count = wire.go_int64(count)  # nsqd: int64 of the uint64 it parsed
        max_rdy = self.opts.max_rdy_count
        if count < 0 or count > max_rdy:
            raise FatalClientError("E_INVALID", f"RDY count {count} out of range 0-{max_rdy}")
        if count != c.rdy:
            c.rdy = count
            c.room_changed = True
        return 0

    def finish_ids(self, c: ClientState, ids: list[bytes]) -> None:
        """FIN for each ID (a run of FINs the parser took at once: wire.take_fins, or one FIN
        parsed alone), errors answered one by one, in order, as FIN's."""
        ch = c.channel
        assert ch is not None
        failed = ch.finish_many(c, ids)
        for msg_id, reason in failed:
            err = _in_flight_error("FIN", msg_id, reason)
            log.error("[%s] - %s", c.remote_address, err)
            c.reply(wire.encode_error(err))
        done = len(ids) - len(failed)
        c.finish_count += done
        c.in_flight_count -= done
        c.room_changed = True

    def FIN(self, c: ClientState, params: list[bytes], body: Any) -> int:
        # a FIN the parser did not take in a run (after CLS, or a line take_fins left)
        _in_flight_channel(c, "FIN", params)
        self.finish_ids(c, [params[1]])
        return 0

    def REQ(self, c: ClientState, params: list[bytes], body: Any) -> int:
        ch = _in_flight_channel(c, "REQ", params)
        msg_id = params[1]
        try:
            timeout_ms = wire.byte_to_base10(params[2])
        except ValueError:
            raise FatalClientError(
                "E_INVALID", f"REQ could not parse timeout {_text(params[2])}"
            ) from None
        max_ms = self.opts.max_req_timeout_ms
        ns = wire.go_ms_duration_ns(timeout_ms)  # a wrapping int64, as nsqd's Duration
        clamped = min(max(ns, 0), max_ms * 1_000_000)
        if clamped != ns:
            log.info(
                "PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d",
                c.remote_address,
                ns,
                max_ms * 1_000_000,
                clamped,
            )
        try:
            ch.requeue(c, msg_id, clamped // 1_000_000)
        except ChannelError as e:
            raise _in_flight_error("REQ", msg_id, e) from None
        c.requeue_count += 1
        c.in_flight_count -= 1
        c.room_changed = True
        return 0

    def TOUCH(self, c: ClientState, params: list[bytes], body: Any) -> int:
        ch = _in_flight_channel(c, "TOUCH", params)
        msg_id = params[1]
        try:
            ch.touch(c, msg_id, c.msg_timeout_ms)
        except ChannelError as e:
            raise _in_flight_error("TOUCH", msg_id, e) from None
        return 0

    def CLS(self, c: ClientState, params: list[bytes], body: Any) -> int:
        if c.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot CLS in current state")
        c.rdy = 0
        c.state = STATE_CLOSING
        c.reply(_CLOSE_WAIT_FRAME)
        return 0

    def NOP(self, c: ClientState, params: list[bytes], body: Any) -> int:
        return 0

    # ------------------------------------------------------------ publishing

    def PUB(self, c: ClientState, params: list[bytes], body: Any) -> int:
        return self.publish(c, params, body, PUB_COMMAND)

    def MPUB(self, c: ClientState, params: list[bytes], body: Any) -> int:
        return self.publish(c, params, body, MPUB_COMMAND)

    def DPUB(self, c: ClientState, params: list[bytes], body: Any) -> int:
        return self.publish(c, params, body, DPUB_COMMAND)

    def publish(self, c: ClientState, params: list[bytes], body: Any, cmd: PubCommand) -> int:
        """PUB, MPUB or DPUB (``cmd`` says which): nsqd's handlers, one path. ``body`` is the
        message body, MPUB's a list of them. The topic name and DPUB's delay are read; with
        replication attached (:meth:`attach_replication`) a topic it replicates goes to it
        after AUTH, any other waits first for the connection's replicated publishes
        (``hold``); then nsqd's CheckAuth, the put and flush_backends, and OK. Whatever waits
        (AUTH asked again, a pipeline) runs this again later. FatalClientError
        E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED when the topic refuses the messages."""
        topic_name = params[1].decode()
        delay_ms = 0
        if cmd.deferred:
            delay_ms = _dpub_timeout_ms(params[2], self.opts.max_req_timeout_ms)
        repl = self.replication
        if repl is not None or c.auth is not None:
            retry = lambda: self.publish(c, params, body, cmd)  # noqa: E731
            replicated = repl is not None and repl.replicates(topic_name)
            if repl is not None and not replicated:
                act = repl.hold(c, retry)
                if act:
                    return act
            if c.auth is not None:
                act = self._authorize(c, cmd.name, topic_name, "", retry)
                if act:
                    return act
            if repl is not None and replicated:
                bodies = list(body) if cmd.many else [body]
                return repl.publish(c, Publish(cmd, topic_name, bodies, delay_ms), retry)
        nsqd = self.nsqd
        topic = nsqd.get_topic(topic_name)
        if topic.starting:
            act = _until_started(nsqd, c, topic, lambda: self.publish(c, params, body, cmd))
            if act:
                return act
        n = 1
        if cmd.many and len(body) > MPUB_SLICE:
            mpub = SlicedMpub(self, c, topic_name, body)
            c.wait = Wait(WAIT_STEPS, mpub.step, mpub.then)
            return SUSPEND
        try:
            if cmd.many:
                msgs = nsqd.new_records(body)
                n = len(msgs)
                topic.put_many(msgs)
            elif delay_ms:
                topic.put_deferred(nsqd.new_record(body), delay_ms)
            else:
                topic.put(nsqd.new_record(body))
            nsqd.flush_backends()
        except (TopicError, OSError) as e:
            raise FatalClientError(cmd.failed, f"{cmd.name} failed {e}") from None
        return self.published(c, topic_name, n)

    def published(self, c: ClientState, topic_name: str, n: int) -> int:
        """A publish of ``n`` messages to ``topic_name`` is done: counted in the client's
        pub_counts, answered OK. Returns 0 (action bits)."""
        pub_counts = c.pub_counts
        pub_counts[topic_name] = pub_counts.get(topic_name, 0) + n
        c.reply(_OK_FRAME)
        return 0

    # ------------------------------------------------------------ replicated topics

    def attach_protocol(self, magic: bytes, factory: Callable[[], Any]) -> None:
        """A connection that opens with ``magic`` (four bytes other than "  V2") is handed
        over to ``factory()`` (an asyncio.Protocol), with the bytes after the magic: as nsqd's
        tcp.go picks the protocol by its magic. With --etcd-endpoints, the replication stream
        (replication/stream_server.py); a daemon without it answers any other magic
        E_BAD_PROTOCOL, as nsqd does."""
        self.protocols[magic] = factory

    def attach_replication(self, repl: PublishReplication) -> None:
        """With --etcd-endpoints (server.py): publishes to the topics ``repl`` replicates go
        to it, and every other command of a connection waits until that connection's
        replicated publishes are answered (``repl.hold``), so answers keep the commands'
        order. A daemon without replication never calls this."""
        self.replication = repl
        handlers = self.handlers
        for name, handler in list(handlers.items()):
            if name not in _PUBLISH_COMMANDS:
                handlers[name] = _held(repl, handler)


def _until_started(nsqd: NSQD, c: ClientState, topic: Topic, retry: Callable[[], int]) -> int:
    """0 when ``topic`` hands out its messages; else SUSPEND until its lookupd channel query
    is done (NSQD.topic_started: nsqd's GetTopic returns a new topic only then), and
    ``retry`` runs the command again."""
    started = nsqd.topic_started(topic)
    if started is None:
        return 0
    c.wait = Wait(WAIT_FUTURE, started, lambda _: retry())
    return SUSPEND


class SlicedMpub:
    """A large MPUB put MPUB_SLICE messages per ``step`` (ProtocolV2.publish suspends on it
    with WAIT_STEPS): the connection runs one step per loop pass and reads nothing else
    meanwhile; ``then`` answers OK (or E_MPUB_FAILED) once the last slice is in. The messages
    keep their order and get increasing IDs; the steps go on to the last even if the client
    goes away, as nsqd's PutMessages finishes once the body is read."""

    __slots__ = ("core", "client", "topic_name", "bodies", "at")

    def __init__(
        self, core: ProtocolV2, c: ClientState, topic_name: str, bodies: list[bytes]
    ) -> None:
        self.core = core
        self.client = c
        self.topic_name = topic_name
        self.bodies = bodies
        self.at = 0

    def step(self) -> bool:
        """Put the next slice; True once all are in (the backends flushed)."""
        nsqd = self.core.nsqd
        end = self.at + MPUB_SLICE
        nsqd.get_topic(self.topic_name).put_many(nsqd.new_records(self.bodies[self.at : end]))
        self.at = end
        if end < len(self.bodies):
            return False
        nsqd.flush_backends()
        return True

    def then(self, answer: Any) -> int:
        """The answer after the last step (None) or a step's exception."""
        if isinstance(answer, (TopicError, OSError)):
            raise FatalClientError(MPUB_COMMAND.failed, f"MPUB failed {answer}")
        if isinstance(answer, BaseException):
            raise answer
        return self.core.published(self.client, self.topic_name, len(self.bodies))


def _held(repl: PublishReplication, handler: Handler) -> Handler:
    """``handler``, run once ``repl.hold`` lets the connection go on (its answers come after
    those of the replicated publishes before it)."""

    def run(c: ClientState, params: list[bytes], body: Any) -> int:
        return repl.hold(c, lambda: run(c, params, body)) or handler(c, params, body)

    return run


def _dpub_timeout_ms(raw: bytes, max_ms: int) -> int:
    """DPUB's delay parameter, ms, checked against --max-req-timeout (FatalClientError)."""
    try:
        ms = wire.byte_to_base10(raw)
    except ValueError:
        raise FatalClientError("E_INVALID", f"DPUB could not parse timeout {_text(raw)}") from None
    # nsqd checks time.Duration(ms) * time.Millisecond, a wrapping int64
    ns = wire.go_ms_duration_ns(ms)
    if ns < 0 or ns > max_ms * 1_000_000:
        raise FatalClientError("E_INVALID", f"DPUB timeout {ms} out of range 0-{max_ms}")
    return ns // 1_000_000


def _loggable(data: dict[str, Any]) -> dict[str, Any]:
    """IDENTIFY's fields for its log line: a megabyte client_id would be a megabyte log line,
    written while the loop waits, so long strings are cut."""
    if not any(isinstance(v, str) and len(v) > _LOG_VALUE_MAX for v in data.values()):
        return data
    return {
        k: f"{v[:_LOG_VALUE_MAX]}... ({len(v)} chars)"
        if isinstance(v, str) and len(v) > _LOG_VALUE_MAX
        else v
        for k, v in data.items()
    }


def _ranged(
    data: dict[str, Any], key: str, lo: int, hi: int, what: str, off: bool = True
) -> int | None:
    """nsqd's rule for a numeric IDENTIFY field: 0 (or absent) keeps the default (None), -1
    turns the feature off where ``off`` allows it (-1), a value in [lo, hi] is taken, anything
    else is E_BAD_BODY "IDENTIFY <what> (<v>) is invalid"."""
    v = data.get(key, 0)
    if v == 0:
        return None
    if (v == -1 and off) or lo <= v <= hi:
        return int(v)
    raise FatalClientError("E_BAD_BODY", f"IDENTIFY {what} ({v}) is invalid")


def _in_flight_channel(c: ClientState, cmd: str, params: list[bytes]) -> Channel:
    """The channel of FIN, REQ and TOUCH (``cmd``), whose message ID is ``params[1]``, after
    nsqd's checks: subscribed (or closing), enough parameters, an ID of MSG_ID_LENGTH bytes;
    else FatalClientError E_INVALID."""
    state = c.state
    if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
        raise FatalClientError("E_INVALID", f"cannot {cmd} in current state")
    if len(params) < (3 if cmd == "REQ" else 2):
        raise FatalClientError("E_INVALID", f"{cmd} insufficient number of params")
    if len(params[1]) != wire.MSG_ID_LENGTH:
        raise FatalClientError("E_INVALID", "invalid message ID")
    ch = c.channel
    assert ch is not None
    return ch


def _in_flight_error(cmd: str, msg_id: bytes, reason: object) -> ClientError:
    """nsqd's answer when the channel refuses FIN, REQ or TOUCH (``cmd``) of ``msg_id``:
    E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED, "<cmd> <id> failed <reason>", not fatal."""
    return ClientError(f"E_{cmd}_FAILED", f"{cmd} {_text(msg_id)} failed {reason}")


def _auth_answer(c: ClientState, answer: AuthState | BaseException) -> AuthState:
    """The auth server's answer, or E_AUTH_FAILED for a failed query: nsqd does not leak
    auth server errors to untrusted clients (they only go to the log)."""
    if isinstance(answer, BaseException):
        log.warning("PROTOCOL(V2): [%s] AUTH failed %s", c.remote_address, answer)
        raise FatalClientError("E_AUTH_FAILED", "AUTH failed")
    return answer
