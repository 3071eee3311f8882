"""The TCP V2 protocol: one asyncio.Protocol per client connection.

Strategy: glue, no broker rules. ``data_received`` feeds the sans-IO parser (wire.py) and runs
each whole command against the core (NSQD, Topic, Channel). All output goes through one
bytearray: response and error frames are flushed at once (as nsqd does), message frames are
coalesced and flushed when the buffer reaches the client's output_buffer_size or, at the
latest, once the current event-loop pass ends (one call_soon per flush, never a timer): under
load that batches as nsqd's 250 ms output buffer does, when idle it adds no latency. A client
whose socket is full (pause_writing) has no room for messages until resume_writing.

Fairness: one read may run at most READ_BUDGET_COMMANDS commands (READ_BUDGET_FINS FINs, which are
cheap) or READ_BUDGET_BYTES of input per event-loop pass; the rest waits in the parser with
reading paused and continues on the next pass, so a client pipelining thousands of PUBs cannot
hold the loop while others wait. Replies to the commands of one pass (OK, errors) go out in one
write at its end. A client that is not subscribed and does not read its replies stops being read
once the replies it has not read pass UNREAD_REPLIES_LIMIT bytes (the kernel's send queue,
SIOCOUTQ, checked once per pass that replied) or the transport's buffer passes its high-water mark
(pause_writing), as a Go nsqd's blocked write stops its read loop: nobody can grow the daemon's
memory by publishing without reading. A subscribed connection keeps being read (its FINs free
room) as nsqd's separate read loop does.

Upgrades (IDENTIFY's tls_v1, snappy, deflate) and AUTH take a separate, slower path that the
plain connection never enters: one flag (``_slow``) tested at the top of data_received and in
_flush. On that path bytes read go through the connection's stream_upgrade.StreamLayers
(decrypt, decompress) before the parser, and each output flush through them the other way.
Compressed input is inflated in steps (compression.INFLATE_STEP), one when the parser needs
more bytes, each charged to the pass's byte budget; while some input waits compressed the
transport stays paused, so a stream that inflates 1000x holds a step of memory, not 1000x its
size, and an oversized frame is refused before the rest of it is inflated. The
bytes that follow IDENTIFY in the same read are the first TLS/compressed bytes: they are taken
from the parser and fed through the new layers, never lost. An auth-server query
(auth_session.AuthSession: AUTH, or a PUB/SUB after the TTL expired) suspends the connection:
reading pauses, later commands wait in the parser, and the command resumes when the answer is
in, so commands are never reordered.

Commands, checks, error codes and texts follow nsqd/protocol_v2.go and client_v2.go (1.3):
https://nsq.io/clients/tcp_protocol_spec.html"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import json
import logging
import multiprocessing
import struct
import termios
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

from . import wire
from .auth import AuthState
from .auth_session import AuthSession, Suspend
from .channel import Channel, ChannelError
from .compression import INFLATE_STEP
from .message import Message
from .options import NSQ_VERSION
from .stream_upgrade import StreamLayers, Upgrade, negotiated_codec
from .tls import TLS_NOT_REQUIRED
from .topic import TopicError
from .wire import ClientError, FatalClientError, go_quote

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("nsqpy")

# Client states, numbered as nsqd's (they show in /stats "state").
STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

DEFAULT_BUFFER_SIZE = 16 * 1024

_OK_FRAME = wire.encode_response(wire.OK)
_HEARTBEAT_FRAME = wire.encode_response(wire.HEARTBEAT)
_CLOSE_WAIT_FRAME = wire.encode_response(wire.CLOSE_WAIT)

#: The most commands, and input bytes, one connection's read may run per event-loop pass.
READ_BUDGET_COMMANDS = 256
READ_BUDGET_BYTES = 128 * 1024
#: FINs are cheap (no reply; the channel dispatches once for all of a pass): more per pass.
READ_BUDGET_FINS = 1024

#: Bytes of replies a publisher may leave unread (in the kernel's send queue) before it is no
#: longer read; reading resumes below half of it (checked every UNREAD_RECHECK_S seconds).
UNREAD_REPLIES_LIMIT = 256 * 1024
UNREAD_RECHECK_S = 0.02

# Why reading is paused (bits of ClientV2._read_paused).
_PAUSE_BUDGET = 1
_PAUSE_BACKPRESSURE = 2
_PAUSE_AUTH = 4


# IDENTIFY fields and their JSON types (nsqd identifyDataV2). Go matches keys case-insensitively.
_IDENTIFY_FIELDS: dict[str, type] = {
    "client_id": str,
    "hostname": str,
    "heartbeat_interval": int,
    "output_buffer_size": int,
    "output_buffer_timeout": int,
    "feature_negotiation": bool,
    "tls_v1": bool,
    "deflate": bool,
    "deflate_level": int,
    "snappy": bool,
    "sample_rate": int,
    "user_agent": str,
    "msg_timeout": int,
}


def _text(b: bytes) -> str:
    """Client bytes for an error text: invalid UTF-8 kept as surrogate escapes, which
    ClientError.text turns back into the same bytes (nsqd echoes them as sent)."""
    return b.decode("utf-8", "surrogateescape")


def _no_json_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")  # Python's NaN/Infinity extension; Go refuses them


def decode_identify(body: bytes) -> dict[str, Any]:
    """IDENTIFY's JSON body as nsqd's json.Unmarshal into identifyDataV2 reads it.

    Unknown keys are ignored, keys match case-insensitively, ``null`` leaves a field unset;
    a value of the wrong type raises ValueError.
    """
    # UTF-8 only, as Go's decoder: json.loads(bytes) would also take a BOM or UTF-16/32 text.
    # Invalid UTF-8 inside a string becomes U+FFFD (as in Go), outside one a syntax error.
    try:
        data = json.loads(body.decode("utf-8", "replace"), parse_constant=_no_json_constant)
    except RecursionError:
        # nested deeper than Python's recursion limit (about 1000): Go decodes up to 10000
        # levels, but no IDENTIFY field takes a nested value, so nsqd fails too unless the
        # nesting sits under a key it ignores
        raise ValueError("IDENTIFY body nested too deep") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("IDENTIFY body is not a JSON object")
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.lower()
        typ = _IDENTIFY_FIELDS.get(name)
        if typ is None or value is None:
            continue
        if typ is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{key}: not an integer")
            if name == "sample_rate" and not -(2**31) <= value < 2**31:
                raise ValueError(f"{key}: out of int32 range")
            if not -(2**63) <= value < 2**63:  # Go's int (int64): Unmarshal fails
                raise ValueError(f"{key}: out of int64 range")
        elif not isinstance(value, typ):
            raise ValueError(f"{key}: wrong type")
        out[name] = value
    return out


#: IDENTIFY bodies over this many bytes are decoded in a helper process (ClientV2._decode_aside).
LARGE_IDENTIFY = 64 * 1024
#: IDENTIFY's log line shows at most this many characters of a string field.
_LOG_VALUE_MAX = 1024
_identify_pool: concurrent.futures.ProcessPoolExecutor | None = None


def identify_pool() -> concurrent.futures.ProcessPoolExecutor:
    """The one helper process that decodes large IDENTIFY bodies, started at first need (a
    legitimate IDENTIFY is a few hundred bytes and never starts it); it exits with the daemon."""
    global _identify_pool
    if _identify_pool is None:
        _identify_pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        )
    return _identify_pool


def decode_identify_aside(body: bytes) -> dict[str, Any] | None:
    """decode_identify in the helper process: None for a body it refuses (any error, deep
    nesting included: Go's decoder refuses those too)."""
    try:
        return decode_identify(body)
    except (ValueError, RecursionError):
        return None


class ClientV2(asyncio.Protocol):
    """One V2 client connection; also the channel's Consumer (see channel.Consumer)."""

    __slots__ = (
        "_auth",
        "_layers",
        "_remote_ip",
        "_slow",
        "_suspended",
        "_tls_policy",
        "_deadline_handle",
        "_flush_scheduled",
        "_handlers",
        "_hb_handle",
        "_in_read",
        "_magic",
        "_read_paused",
        "_replied",
        "_sock_fd",
        "channel",
        "client_id",
        "client_name",
        "_room_changed",
        "closed",
        "connect_ts",
        "finish_count",
        "heartbeat_interval_ms",
        "hostname",
        "in_flight_count",
        "in_ready",
        "last_read",
        "loop",
        "message_count",
        "msg_timeout_ms",
        "nsqd",
        "opts",
        "out",
        "output_buffer_size",
        "output_buffer_timeout_ms",
        "parser",
        "pub_counts",
        "rdy",
        "remote_address",
        "requeue_count",
        "sample_rate",
        "state",
        "transport",
        "user_agent",
        "write_paused",
    )

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        opts = self.opts = nsqd.opts
        self.loop = asyncio.get_event_loop()
        self.transport: asyncio.WriteTransport | None = None
        self.client_id = nsqd.next_client_id()
        self.remote_address = ""
        self.state = STATE_INIT
        self.parser = wire.CommandParser(opts.max_msg_size, opts.max_body_size, self._precheck)
        self._magic = b""
        self.out = bytearray()
        self._flush_scheduled = False
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
        self.last_read = 0.0
        self._hb_handle: asyncio.TimerHandle | None = None
        self._deadline_handle: asyncio.TimerHandle | None = None
        self.closed = False
        self._room_changed = False
        self._slow = False
        self._layers: StreamLayers | None = None
        self._suspended = False
        self._in_read = False
        self._replied = False
        self._sock_fd = -1
        self._read_paused = 0
        self._auth = AuthSession(self, self.loop, nsqd.auth) if nsqd.auth is not None else None
        self._remote_ip = ""
        # --tls-required: until the TLS upgrade, IDENTIFY is the only command (nsqd's
        # enforceTLSPolicy, which runs before the command lookup: see _no_handler)
        self._tls_policy = opts.tls_required != TLS_NOT_REQUIRED
        self._handlers: dict[bytes, Callable[[list[bytes], Any], None]] = self._command_table()
        if self._tls_policy:
            self.parser.precheck = self._precheck_tls_required

    def _command_table(self) -> dict[bytes, Callable[[list[bytes], Any], None]]:
        if self._tls_policy:
            return {b"IDENTIFY": self.IDENTIFY}
        return {
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

    def _no_handler(self, name: bytes) -> FatalClientError:
        if self._tls_policy:
            return FatalClientError(
                "E_INVALID", f"cannot {_text(name)} in current state (TLS required)"
            )
        return FatalClientError("E_INVALID", f"invalid command {_text(name)}")

    def __repr__(self) -> str:
        return self.remote_address

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is a write transport without subclassing asyncio's.
        transport = cast(asyncio.WriteTransport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            host, port = peer[0], peer[1]
            self.remote_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self.client_name = self.hostname = self._remote_ip = host
        transport.set_write_buffer_limits(
            high=max(256 * 1024, 4 * self.opts.max_output_buffer_size)
        )
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._sock_fd = sock.fileno()
        self.last_read = self.loop.time()
        self.nsqd.add_client(self)
        log.info("TCP: new client(%s)", self.remote_address)
        self._start_heartbeat()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timers()
        self._stop_layers()
        self._release()
        if exc is not None:
            log.error("client(%s) - %s", self.remote_address, exc)
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.remote_address)
        ch = self.channel
        if ch is not None:
            ch.remove_client(self)
        self.nsqd.remove_client(self)

    def _release(self) -> None:
        """Drop what a closed connection holds: its parser's buffer (up to a whole body), unsent
        output, compressed input, and the command table's bound methods. A connection sits in
        reference cycles (those bound methods, its layers and auth session point back at it),
        which only the cyclic collector frees, rarely once the daemon's collector thresholds
        are raised: the megabytes must not wait for it."""
        self.parser = wire.CommandParser(self.opts.max_msg_size, self.opts.max_body_size)
        self.out = bytearray()
        self._handlers = {}
        self._layers = None

    def eof_received(self) -> None:
        """The client closed its side. As nsqd's read loop: between commands that is a silent
        close; inside a body command (its size or body cut short) nsqd's failed read is answered
        with its error frame first (wire.CommandParser.eof_error), then the connection closes."""
        if not self.closed and not self._suspended and len(self._magic) == 4:
            err = self.parser.eof_error()
            if err is not None:
                log.error("[%s] - %s", self.remote_address, err)
                self._write_now(wire.encode_error(err))
        self._close()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.state != STATE_SUBSCRIBED:
            self._pause_read(_PAUSE_BACKPRESSURE)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._read_paused & _PAUSE_BACKPRESSURE:
            self._recheck_unread()
        if self.channel is not None:
            self.channel.notify_ready(self)

    def _unread_replies(self) -> int:
        """Bytes written to the socket that the client has not read yet (SIOCOUTQ), 0 when
        the platform cannot tell."""
        if self._sock_fd < 0:
            return 0
        try:
            return struct.unpack("i", fcntl.ioctl(self._sock_fd, termios.TIOCOUTQ, b"\0" * 4))[0]
        except OSError:
            return 0

    def _recheck_unread(self) -> None:
        if self.closed or not self._read_paused & _PAUSE_BACKPRESSURE:
            return
        if self.write_paused or self._unread_replies() > UNREAD_REPLIES_LIMIT // 2:
            self.loop.call_later(UNREAD_RECHECK_S, self._recheck_unread)
            return
        self._resume_read(_PAUSE_BACKPRESSURE)

    def _pause_read(self, reason: int) -> None:
        if not self._read_paused and self.transport is not None and not self.closed:
            try:
                cast(asyncio.Transport, self.transport).pause_reading()
            except (RuntimeError, AttributeError):
                pass
        self._read_paused |= reason

    def _resume_read(self, reason: int) -> None:
        was = self._read_paused
        now = self._read_paused = was & ~reason
        if not was or self.transport is None or self.closed:
            return
        if not now:
            try:
                cast(asyncio.Transport, self.transport).resume_reading()
            except (RuntimeError, AttributeError):
                pass
            if reason != _PAUSE_BUDGET and (
                self.parser.buffered() or (self._layers is not None and self._layers.pending)
            ):
                self.loop.call_soon(self._continue_commands)
        elif now == _PAUSE_BUDGET and reason != _PAUSE_BUDGET:
            self.loop.call_soon(self._continue_commands)  # its continuation was skipped

    def data_received(self, data: bytes) -> None:
        if self._slow:  # TLS, compression or a suspended command: see _decode_in
            data = self._decode_in(data)
            if not data:
                return
        if self.closed:
            return
        self.last_read = self.loop.time()
        if len(self._magic) < 4:
            need = 4 - len(self._magic)
            self._magic += data[:need]
            data = data[need:]
            if len(self._magic) < 4:
                return
            log.info(
                "CLIENT(%s): desired protocol magic %r",
                self.remote_address,
                self._magic.decode("latin-1"),
            )
            if self._magic != wire.MAGIC_V2:
                log.error(
                    "client(%s) bad protocol magic %r",
                    self.remote_address,
                    self._magic.decode("latin-1"),
                )
                self._write_now(wire.encode_frame(wire.FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL"))
                self._close()
                return
            if not data:
                return
        self.parser.feed(data)
        if self._read_paused & _PAUSE_BUDGET:
            return  # a continuation is scheduled; it takes these bytes in turn
        self._run_commands()

    def _continue_commands(self) -> None:
        """The next pass's share of commands left in the parser by the budget."""
        if self.closed or self._suspended:
            return
        if self._read_paused & ~_PAUSE_BUDGET:
            return  # paused for another reason: resumed (and continued) by that reason's end
        self._run_commands()

    def _run_commands(self) -> None:
        """Run the parser's whole commands, up to the per-pass budget; then write the replies
        at once and let the channel dispatch once for all the FIN/REQ/RDY."""
        parser = self.parser
        handlers = self._handlers
        layers = self._layers
        budget_left = READ_BUDGET_COMMANDS
        fins_left = READ_BUDGET_FINS
        start = parser.buffered()
        inflated = 0  # bytes inflated into the parser during this pass
        over_budget = False
        self._in_read = True
        try:
            while not self.closed:
                if budget_left == 0 or start + inflated - parser.buffered() >= READ_BUDGET_BYTES:
                    over_budget = True
                    break
                try:
                    if self.state == STATE_SUBSCRIBED:
                        ids = parser.take_fins(fins_left)
                        if ids:  # the common consumer traffic, without a command object each
                            fins_left -= len(ids)
                            if fins_left <= 0:
                                budget_left = 0
                            self._finish_ids(ids)
                            continue
                    budget_left -= 1
                    cmd = parser.next_command()
                    if cmd is None:
                        if parser.more_work:  # a long MPUB split goes on at the next pass
                            over_budget = True
                            break
                        # compressed input: inflate the next step only now that the parser
                        # needs it, and charge it to this pass's byte budget
                        if layers is None or not layers.pending:
                            break
                        if inflated >= READ_BUDGET_BYTES:
                            over_budget = True
                            break
                        more = layers.inflate(INFLATE_STEP)
                        if not more:
                            break
                        budget_left += 1
                        inflated += len(more)
                        parser.feed(more)
                        continue
                    handler = handlers.get(cmd[0])
                    if handler is None:
                        raise self._no_handler(cmd[0])
                    handler(cmd[1], cmd[2])
                except Upgrade as up:
                    self._in_read = False
                    self._flush()
                    self._upgrade(up)
                    return
                except Suspend:
                    return
                except ClientError as e:
                    log.error("[%s] - %s", self.remote_address, e)
                    self._write_now(wire.encode_error(e))
                    if e.fatal:
                        self._in_read = False
                        self._close()
                        return
        finally:
            self._in_read = False
            if not self.closed:
                parser.compact()
                self._flush()
                if self._replied:
                    self._replied = False
                    if self.state != STATE_SUBSCRIBED and self._unread_replies() > (
                        UNREAD_REPLIES_LIMIT
                    ):
                        self._pause_read(_PAUSE_BACKPRESSURE)
                        self.loop.call_later(UNREAD_RECHECK_S, self._recheck_unread)
                # FIN/REQ/RDY only mark that this consumer may have room: one dispatch pass for
                # the whole batch of commands, not one per FIN.
                if self._room_changed:
                    self._room_changed = False
                    if self.channel is not None:
                        self.channel.notify_ready(self)
        if not over_budget and layers is not None and not self.closed and layers.pending:
            over_budget = True  # a step was left compressed (the inflate broke off): go on
        if over_budget and not self.closed:
            self._pause_read(_PAUSE_BUDGET)
            self.loop.call_soon(self._continue_commands)
        elif self._read_paused & _PAUSE_BUDGET:
            self._resume_read(_PAUSE_BUDGET)

    # ------------------------------------------------------------ output

    def _write_now(self, frame: bytes) -> None:
        """Append a response/error frame after any buffered messages and flush (at the end of
        the current pass of commands when called from one)."""
        self.out += frame
        if not self._in_read:
            self._flush()
        else:
            self._replied = True

    def _flush(self) -> None:
        out = self.out
        if out and self.transport is not None and not self.closed:
            if self._slow:
                self._flush_slow()
                return
            self.out = bytearray()
            self.transport.write(out)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _close(self) -> None:
        """Close after writing what is buffered (fatal error, channel deleted, shutdown)."""
        if self.closed:
            return
        self._flush()
        layers = self._layers
        if layers is not None and self.transport is not None:
            notify = layers.close_notify()
            if notify:
                self.transport.write(notify)
        self.closed = True
        self._stop_timers()
        self._stop_layers()
        if self.transport is not None:
            self.transport.close()

    def _stop_layers(self) -> None:
        if self._layers is not None:
            self._layers.stop()
        if self._auth is not None:
            self._auth.cancel()

    # ------------------------------------------------------------ the slow path: TLS,
    # compression, suspension (never entered by a plain connection)

    def _recompute_slow(self) -> None:
        self._slow = self._layers is not None or self._suspended

    def _decode_in(self, data: bytes) -> bytes:
        """Bytes read -> plaintext for the parser (b"" when there is none yet)."""
        if self.closed:
            return b""
        self.last_read = self.loop.time()
        layers = self._layers
        if layers is not None:
            data = layers.decode(data)
            if self.closed:
                return b""
        if self._suspended:
            if data:
                self.parser.feed(data)
            return b""
        return data

    def _flush_slow(self) -> None:
        transport = self.transport
        assert transport is not None
        layers = self._layers
        out = self.out
        data = out if layers is None else layers.encode(out)  # no layers: suspended, plain
        if data is None:
            return  # held until the TLS handshake is done
        self.out = bytearray()
        transport.write(data)

    def _upgrade(self, up: Upgrade) -> None:
        """IDENTIFY negotiated TLS and/or compression: its JSON reply is out (plain)."""
        old = self.parser
        rest = bytes(old._buf[old._pos :])  # the first bytes of the new layers
        self.parser = wire.CommandParser(
            self.opts.max_msg_size,
            self.opts.max_body_size,
            self._precheck_tls_required if self._tls_policy else self._precheck,
        )
        layers = self._layers = StreamLayers(self, self.loop, up, self.nsqd.tls_context)
        self._slow = True
        layers.start()
        if rest:
            self.data_received(rest)

    # stream_upgrade.UpgradeHost

    def raw_write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def write_reply(self, frame: bytes) -> None:
        self._write_now(frame)

    def flush(self) -> None:
        self._flush()

    def tls_established(self) -> None:
        if self._tls_policy:
            self._tls_policy = False
            self._handlers = self._command_table()
            self.parser.precheck = self._precheck

    @property
    def tls_on(self) -> bool:
        return self._layers is not None and self._layers.tls_on

    @property
    def codec_name(self) -> str:
        return self._layers.codec_name if self._layers is not None else ""

    def tls_info(self) -> tuple[str, str]:
        """(tls_version, tls_cipher_suite) for /stats, in Go's spelling."""
        return self._layers.tls_info() if self._layers is not None else ("", "")

    # ------------------------------------------------------------ AUTH (auth_session.AuthHost)

    @property
    def auth_state(self) -> AuthState | None:
        return self._auth.state if self._auth is not None else None

    def auth_peer(self) -> tuple[str, bool, str]:
        layers = self._layers
        if layers is None:
            return self._remote_ip, False, ""
        return self._remote_ip, layers.tls_on, layers.peer_common_name()

    def suspend_commands(self) -> None:
        """Stop running commands until resume_commands (an auth-server query runs)."""
        assert self.transport is not None
        self._suspended = True
        self._slow = True
        self._in_read = False
        self._flush()  # the replies of the commands before this one go out first
        self._pause_read(_PAUSE_AUTH)

    def _unpause_for_resume(self) -> None:
        """Lift the suspension's and the budget's read pauses (the caller goes on with the
        commands itself, so no continuation is scheduled, unlike _resume_read)."""
        self._read_paused &= ~(_PAUSE_AUTH | _PAUSE_BUDGET)
        if not self._read_paused:
            try:
                cast(asyncio.Transport, self.transport).resume_reading()
            except (RuntimeError, AttributeError):
                pass

    def resume_commands(self, then: Callable[[], None] | None) -> None:
        """Run ``then`` as a command (None: the query was cancelled: close), then the commands
        that waited in the parser, in order."""
        if then is None:
            self._close()
            return
        if self.closed:
            return
        self._suspended = False
        self._recompute_slow()
        try:
            then()
        except Suspend:
            return
        except Upgrade as up:  # IDENTIFY decoded aside negotiated TLS or compression
            self._unpause_for_resume()
            self._flush()
            self._upgrade(up)
            return
        except ClientError as e:
            log.error("[%s] - %s", self.remote_address, e)
            self._write_now(wire.encode_error(e))
            if e.fatal:
                self._close()
                return
        if self.closed:
            return
        if self._room_changed and self.channel is not None:
            self._room_changed = False
            self.channel.notify_ready(self)
        assert self.transport is not None
        # data_received below runs what waits in the parser with a fresh budget
        self._unpause_for_resume()
        # the commands that came behind this one, in order
        self._slow = False
        try:
            self.data_received(b"")
        finally:
            self._recompute_slow()

    # ------------------------------------------------------------ heartbeats and deadlines

    def _start_heartbeat(self) -> None:
        self._stop_timers()
        hb = self.heartbeat_interval_ms
        if hb > 0:
            self._hb_handle = self.loop.call_later(hb / 1000, self._on_heartbeat)
            self._deadline_handle = self.loop.call_at(
                self.last_read + 2 * hb / 1000, self._on_read_deadline
            )

    def _stop_timers(self) -> None:
        if self._hb_handle is not None:
            self._hb_handle.cancel()
            self._hb_handle = None
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
            self._deadline_handle = None

    def _on_heartbeat(self) -> None:
        if self.closed:
            return
        self._write_now(_HEARTBEAT_FRAME)
        self._hb_handle = self.loop.call_later(
            self.heartbeat_interval_ms / 1000, self._on_heartbeat
        )

    def _on_read_deadline(self) -> None:
        if self.closed:
            return
        due = self.last_read + 2 * self.heartbeat_interval_ms / 1000
        if self.loop.time() >= due:
            log.error(
                "client(%s) - failed to read command - i/o timeout (no data for %d ms)",
                self.remote_address,
                2 * self.heartbeat_interval_ms,
            )
            self._close()
            return
        self._deadline_handle = self.loop.call_at(due, self._on_read_deadline)

    # ------------------------------------------------------------ Consumer interface

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
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._scheduled_flush)

    def timed_out_message(self) -> None:
        self.in_flight_count -= 1
        if self.channel is not None:
            self.channel.notify_ready(self)

    def emptied(self) -> None:
        self.in_flight_count = 0
        if self.channel is not None:
            self.channel.notify_ready(self)

    def close(self) -> None:
        self._close()

    # ------------------------------------------------------------ checks made before a body

    def _precheck_tls_required(self, name: bytes, params: list[bytes]) -> None:
        # nsqd's enforceTLSPolicy runs before any command but IDENTIFY reads its body
        if name != b"IDENTIFY" and self._tls_policy:
            raise self._no_handler(name)
        self._precheck(name, params)

    def _precheck(self, name: bytes, params: list[bytes]) -> None:
        if name == b"PUB" or name == b"DPUB":
            cmd = name.decode()
            if len(params) < (2 if name == b"PUB" else 3):
                raise FatalClientError("E_INVALID", f"{cmd} insufficient number of parameters")
            if not wire.is_valid_name(params[1]):
                raise FatalClientError(
                    "E_BAD_TOPIC", f"{cmd} topic name {go_quote(params[1])} is not valid"
                )
            if name == b"DPUB":
                self._dpub_timeout_ms(params[2])
        elif name == b"MPUB":
            if len(params) < 2:
                raise FatalClientError("E_INVALID", "MPUB insufficient number of parameters")
            if not wire.is_valid_name(params[1]):
                # nsqd repeats the code inside the text: "E_BAD_TOPIC E_BAD_TOPIC MPUB ..."
                raise FatalClientError(
                    "E_BAD_TOPIC",
                    f"E_BAD_TOPIC MPUB topic name {go_quote(params[1])} is not valid",
                )
            auth = self._auth
            if auth is not None and not auth.check_before_body("MPUB", params[1].decode()):
                # nsqd checks MPUB before reading its body; an expired state is asked again
                # once the body is in (MPUB's handler), and MPUB creates the topic then
                return
            # nsqd gets (creates) the topic before it reads the body: whatever goes wrong
            # with the body, or an EOF inside it, the topic exists by then
            self.nsqd.get_topic(params[1].decode())
        elif name == b"IDENTIFY":
            if self.state != STATE_INIT:
                raise FatalClientError("E_INVALID", "cannot IDENTIFY in current state")
        elif name == b"AUTH":
            if self.state != STATE_INIT:
                raise FatalClientError("E_INVALID", "cannot AUTH in current state")
            if len(params) != 1:
                raise FatalClientError("E_INVALID", "AUTH invalid number of parameters")

    def _dpub_timeout_ms(self, raw: bytes) -> int:
        try:
            ms = wire.byte_to_base10(raw)
        except ValueError:
            raise FatalClientError(
                "E_INVALID", f"DPUB could not parse timeout {_text(raw)}"
            ) from None
        max_ms = self.opts.max_req_timeout_ms
        # nsqd checks time.Duration(ms) * time.Millisecond, a wrapping int64
        ns = wire.go_ms_duration_ns(ms)
        if ns < 0 or ns > max_ms * 1_000_000:
            raise FatalClientError("E_INVALID", f"DPUB timeout {ms} out of range 0-{max_ms}")
        return ns // 1_000_000

    # ------------------------------------------------------------ commands

    def IDENTIFY(self, params: list[bytes], body: Any) -> None:
        if len(body) > LARGE_IDENTIFY:
            self._decode_aside(body)  # raises Suspend: _identified runs once it is decoded
        try:
            data = decode_identify(body)
        except (ValueError, RecursionError):  # deep nesting: Go's decoder refuses it too
            raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
        self._identified(data)

    def _decode_aside(self, body: bytes) -> None:
        """Decode a large IDENTIFY body in the helper process (see identify_pool) while this
        connection is suspended (as for an auth-server query), then resume it with the rest of
        IDENTIFY. Decoding megabytes of JSON builds millions of objects: seconds of the event
        loop that nsqd spends in the client's own goroutine."""
        global _identify_pool
        try:
            fut = self.loop.run_in_executor(identify_pool(), decode_identify_aside, body)
        except Exception as e:  # the helper cannot start or died: decode here this time
            log.error("IDENTIFY helper process failed (%s): decoding in the event loop", e)
            _identify_pool = None
            return
        self.suspend_commands()

        def done(f: asyncio.Future[dict[str, Any] | None]) -> None:
            if self.closed:
                return
            try:
                data = f.result()
            except Exception:  # the helper died: decode here after all (a new one next time)
                global _identify_pool
                _identify_pool = None
                data = decode_identify_aside(body)

            def then() -> None:
                if data is None:
                    raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
                self._identified(data)

            self.resume_commands(then)

        fut.add_done_callback(done)
        raise Suspend

    def _identified(self, data: dict[str, Any]) -> None:
        """IDENTIFY with its body decoded (nsqd's identifyDataV2)."""
        shown = data
        if any(isinstance(v, str) and len(v) > _LOG_VALUE_MAX for v in data.values()):
            # a megabyte client_id would be a megabyte log line, written while the loop waits
            shown = {
                k: f"{v[:_LOG_VALUE_MAX]}... ({len(v)} chars)"
                if isinstance(v, str) and len(v) > _LOG_VALUE_MAX
                else v
                for k, v in data.items()
            }
        log.info("[%s] IDENTIFY: %s", self.remote_address, shown)
        opts = self.opts
        self.client_name = data.get("client_id", "")
        self.hostname = data.get("hostname", "")
        self.user_agent = data.get("user_agent", "")

        def ranged(key: str, lo: int, hi: int, what: str, off: bool = True) -> int | None:
            """nsqd's rule for a numeric IDENTIFY field: 0 (or absent) keeps the default
            (None), -1 turns the feature off where ``off`` allows it (-1), a value in [lo, hi]
            is taken, anything else is E_BAD_BODY "IDENTIFY <what> (<v>) is invalid"."""
            v = data.get(key, 0)
            if v == 0:
                return None
            if (v == -1 and off) or lo <= v <= hi:
                return int(v)
            raise FatalClientError("E_BAD_BODY", f"IDENTIFY {what} ({v}) is invalid")

        hb = ranged(
            "heartbeat_interval", 1000, opts.max_heartbeat_interval_ms, "heartbeat interval"
        )
        if hb is not None:
            self.heartbeat_interval_ms = max(hb, 0)
        obt = ranged(
            "output_buffer_timeout",
            opts.min_output_buffer_timeout_ms,
            opts.max_output_buffer_timeout_ms,
            "output buffer timeout",
        )
        if obt is not None:
            self.output_buffer_timeout_ms = max(obt, 0)
        obs = ranged("output_buffer_size", 64, opts.max_output_buffer_size, "output buffer size")
        if obs == -1:
            self.output_buffer_size = 1
            self.output_buffer_timeout_ms = 0
        elif obs is not None:
            self.output_buffer_size = obs
        self.sample_rate = ranged("sample_rate", 0, 99, "sample rate", off=False) or 0
        mt = ranged("msg_timeout", 1000, opts.max_msg_timeout_ms, "msg timeout", off=False)
        if mt is not None:
            self.msg_timeout_ms = mt

        self._start_heartbeat()

        if not data.get("feature_negotiation", False):
            self._write_now(_OK_FRAME)
            return
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
            "msg_timeout": self.msg_timeout_ms,
            "tls_v1": tls_v1,
            "deflate": deflate,
            "deflate_level": deflate_level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": self.sample_rate,
            "auth_required": self._auth is not None,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": self.output_buffer_timeout_ms,
        }
        self._write_now(wire.encode_response(json.dumps(resp, separators=(",", ":")).encode()))
        if tls_v1 or snappy or deflate:
            raise Upgrade(tls_v1, negotiated_codec(snappy, deflate, deflate_level))

    def AUTH(self, params: list[bytes], body: Any) -> None:
        auth = self._auth
        if auth is None:
            raise FatalClientError("E_AUTH_DISABLED", "AUTH disabled")
        auth.authenticate(body)

    def SUB(self, params: list[bytes], body: Any) -> None:
        if self.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot SUB in current state")
        if self.heartbeat_interval_ms <= 0:
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
        if self._auth is not None:
            self._auth.check(
                "SUB", params[1].decode(), params[2].decode(), lambda: self.SUB(params, body)
            )
        topic = self.nsqd.get_topic(params[1].decode())
        channel = topic.get_channel(params[2].decode())
        try:
            channel.add_client(self, self.opts.max_channel_consumers)
        except ChannelError as e:
            raise FatalClientError("E_SUB_FAILED", f"SUB failed {e}") from None
        self.state = STATE_SUBSCRIBED
        self.channel = channel
        self._write_now(_OK_FRAME)

    def RDY(self, params: list[bytes], body: Any) -> None:
        state = self.state
        if state == STATE_CLOSING:
            log.info(
                "PROTOCOL(V2): [%s] ignoring RDY after CLS in state ClientStateV2Closing",
                self.remote_address,
            )
            return
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
        if count != self.rdy:
            self.rdy = count
            self._room_changed = True

    def _msg_id(self, cmd: str, params: list[bytes]) -> bytes:
        state = self.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            raise FatalClientError("E_INVALID", f"cannot {cmd} in current state")
        if len(params) < (3 if cmd == "REQ" else 2):
            raise FatalClientError("E_INVALID", f"{cmd} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != wire.MSG_ID_LENGTH:
            raise FatalClientError("E_INVALID", "invalid message ID")
        return msg_id

    def _finish_ids(self, ids: list[bytes]) -> None:
        """FIN for each ID (as FIN() does, errors answered one by one, in order)."""
        ch = self.channel
        assert ch is not None
        failed = ch.finish_many(self, ids)
        for msg_id, reason in failed:
            err = ClientError("E_FIN_FAILED", f"FIN {_text(msg_id)} failed {reason}")
            log.error("[%s] - %s", self.remote_address, err)
            self._write_now(wire.encode_error(err))
        done = len(ids) - len(failed)
        self.finish_count += done
        self.in_flight_count -= done
        self._room_changed = True

    def FIN(self, params: list[bytes], body: Any) -> None:
        msg_id = self._msg_id("FIN", params)
        ch = self.channel
        assert ch is not None
        try:
            ch.finish(self, msg_id)
        except ChannelError as e:
            raise ClientError("E_FIN_FAILED", f"FIN {_text(msg_id)} failed {e}") from None
        self.finish_count += 1
        self.in_flight_count -= 1
        self._room_changed = True

    def REQ(self, params: list[bytes], body: Any) -> None:
        msg_id = self._msg_id("REQ", params)
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
                self.remote_address,
                ns,
                max_ms * 1_000_000,
                clamped,
            )
        timeout_ms = clamped // 1_000_000
        ch = self.channel
        assert ch is not None
        try:
            ch.requeue(self, msg_id, timeout_ms)
        except ChannelError as e:
            raise ClientError("E_REQ_FAILED", f"REQ {_text(msg_id)} failed {e}") from None
        self.requeue_count += 1
        self.in_flight_count -= 1
        self._room_changed = True

    def TOUCH(self, params: list[bytes], body: Any) -> None:
        msg_id = self._msg_id("TOUCH", params)
        ch = self.channel
        assert ch is not None
        try:
            ch.touch(self, msg_id, self.msg_timeout_ms)
        except ChannelError as e:
            raise ClientError("E_TOUCH_FAILED", f"TOUCH {_text(msg_id)} failed {e}") from None

    def CLS(self, params: list[bytes], body: Any) -> None:
        if self.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot CLS in current state")
        self.rdy = 0
        self.state = STATE_CLOSING
        self._write_now(_CLOSE_WAIT_FRAME)

    def NOP(self, params: list[bytes], body: Any) -> None:
        return None

    def PUB(self, params: list[bytes], body: Any) -> None:
        topic_name = params[1].decode()
        if self._auth is not None:
            self._auth.check("PUB", topic_name, "", lambda: self.PUB(params, body))
        nsqd = self.nsqd
        topic = nsqd.get_topic(topic_name)
        try:
            topic.put(nsqd.new_record(body))
            nsqd.flush_backends()
        except (TopicError, OSError) as e:
            raise FatalClientError("E_PUB_FAILED", f"PUB failed {e}") from None
        self.pub_counts[topic_name] = self.pub_counts.get(topic_name, 0) + 1
        self._write_now(_OK_FRAME)

    def MPUB(self, params: list[bytes], body: Any) -> None:
        topic_name = params[1].decode()
        if self._auth is not None:
            self._auth.check("MPUB", topic_name, "", lambda: self.MPUB(params, body))
        nsqd = self.nsqd
        topic = nsqd.get_topic(topic_name)
        msgs = nsqd.new_records(body)
        try:
            topic.put_many(msgs)
            nsqd.flush_backends()
        except (TopicError, OSError) as e:
            raise FatalClientError("E_MPUB_FAILED", f"MPUB failed {e}") from None
        self.pub_counts[topic_name] = self.pub_counts.get(topic_name, 0) + len(msgs)
        self._write_now(_OK_FRAME)

    def DPUB(self, params: list[bytes], body: Any) -> None:
        topic_name = params[1].decode()
        delay_ms = self._dpub_timeout_ms(params[2])
        if self._auth is not None:
            self._auth.check("DPUB", topic_name, "", lambda: self.DPUB(params, body))
        nsqd = self.nsqd
        topic = nsqd.get_topic(topic_name)
        record = nsqd.new_record(body)
        try:
            if delay_ms:
                topic.put_deferred(record, delay_ms)
            else:
                topic.put(record)
            nsqd.flush_backends()
        except (TopicError, OSError) as e:
            raise FatalClientError("E_DPUB_FAILED", f"DPUB failed {e}") from None
        self.pub_counts[topic_name] = self.pub_counts.get(topic_name, 0) + 1
        self._write_now(_OK_FRAME)
