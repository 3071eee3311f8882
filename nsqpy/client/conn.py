"""One client connection to nsqd over TCP (protocol V2): the handshake, frames in, commands out.

Strategy: :class:`Conn` is one ``asyncio.Protocol``. ``connect()`` runs go-nsq's handshake
(conn.go Connect/identify/upgradeTLS/upgradeDeflate/upgradeSnappy/auth): the magic ``"  V2"``,
IDENTIFY with ``feature_negotiation``, then, as nsqd's answer says, the TLS upgrade on the same
socket (``loop.start_tls``) and its ``OK``, the snappy (framed stream) or deflate (raw, wbits
-15) layer and its compressed ``OK``, and AUTH when nsqd says ``auth_required``.

Reads: bytes go into one bytearray (inflated first when a codec is on); :func:`nsqpy.client.frames.
scan_frames` collects all the message frames up to the next other frame in one call (compiled
by mypyc in the compiled build), and the consumed prefix is dropped with one ``del``. The
codec starts right after the frame nsqd sent before switching (the IDENTIFY answer, or the
TLS ``OK``), so bytes that arrive behind it in the same read are inflated, not parsed raw.
Heartbeats are answered with NOP at once; message frames go to the delegate as
:class:`~nsqpy.client.message.Message`; other responses and error frames resolve the oldest
pending command (go-nsq's transaction queue: nsqd answers in order), and error frames with no
command waiting (E_FIN_FAILED, ...) go to the delegate.

Writes: commands are appended to one output bytearray and flushed once per event-loop pass
(``call_soon``), compressed as one block when a codec is on: FINs and RDYs of a batch of
messages go out in one write, with no task per message. Calls from another thread are moved
onto the loop (``call_soon_threadsafe``).

Errors: an error frame is :class:`NSQError` (nsqd's E_* code and text). Fatal codes (all but
E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED, after which nsqd goes on) close the connection,
as nsqd does. Nothing read for ``read_timeout`` s, or a write buffer stuck for
``write_timeout`` s, closes it too; commands still waiting then fail with ConnectionError.

Source: nsq.io TCP protocol spec; go-nsq conn.go, command.go (v1.1)."""

from __future__ import annotations

import asyncio
import json
import struct
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from .. import wire
from ..compression import INFLATE_STEP, CompressionError, DeflateCodec, SnappyCodec
from ..message import BODY_START, ID_END, ID_START
from .config import Config
from .frames import NO_FRAME, scan_frames
from .message import Message

#: nsqd's error codes after which the connection stays open (protocol_v2.go ClientErr, not
#: FatalClientErr).
NON_FATAL = frozenset(("E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"))

_NOP = b"NOP\n"
_TS_ATTEMPTS = struct.Struct(">qH")
_LEN = struct.Struct(">i")


class NSQError(Exception):
    """nsqd answered with an error frame: ``code`` is its E_* code (``"E_BAD_TOPIC"``),
    ``text`` the rest of the frame. ``fatal`` says whether nsqd closes the connection after it
    (every code but E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED)."""

    def __init__(self, code: str, text: str = "") -> None:
        super().__init__(f"{code} {text}".strip())
        self.code = code
        self.text = text

    @property
    def fatal(self) -> bool:
        return self.code not in NON_FATAL

    @classmethod
    def from_frame(cls, data: bytes) -> NSQError:
        """From an error frame's data, ``b"E_CODE description"``."""
        text = data.decode("utf-8", "replace")
        code, _, rest = text.partition(" ")
        return cls(code, rest)


class ConnDelegate(Protocol):
    """What a Conn tells its owner (go-nsq's ConnDelegate, the parts nsqpy uses)."""

    def on_message(self, conn: Conn, msg: Message) -> None: ...

    def on_message_finished(self, conn: Conn, msg: Message) -> None: ...

    def on_message_requeued(self, conn: Conn, msg: Message, backoff: bool) -> None: ...

    def on_error(self, conn: Conn, err: NSQError) -> None: ...

    def on_close(self, conn: Conn) -> None: ...


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` / ``"[::1]:port"`` → ``(host, port)``; ValueError when malformed."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bad address {addr!r} (want host:port)")
    return host.strip("[]"), int(port)


#: ``on_records(conn, data, starts, ends)``: the message frames of one read, in bulk (see Conn).
RecordsHandler = Callable[["Conn", bytes, list[int], list[int]], None]


class Conn(asyncio.Protocol):
    """One nsqd connection, ``Conn(addr, config, delegate)``; ``await connect()`` dials and
    handshakes (raises OSError/TimeoutError when nsqd cannot be reached within
    ``config.dial_timeout`` s, NSQError when IDENTIFY or AUTH is refused, ssl.SSLError when the
    TLS handshake fails). ``identify_response`` holds nsqd's IDENTIFY answer (dict),
    ``auth_response`` the AUTH answer. ``command(data)`` sends a command that gets a response
    and returns a future of the response's data; ``send(data)`` sends one that gets none.
    ``closed`` is a future done once the socket is gone.

    ``on_records`` (optional) takes message frames in bulk instead of one Message per frame
    (for consumers that store messages as columns, such as the Spark source): after each read,
    ``on_records(conn, data, starts, ends)`` gets ``data`` (bytes) and, for each message frame
    of the read in order, its record ``data[starts[i]:ends[i]]`` (nsqpy.message's layout:
    timestamp ns, attempts, 16-byte ID, body). The callee answers with raw ``FIN <id>\\n``
    commands through :meth:`send`; ``in_flight`` and the delegate's on_message are left out."""

    def __init__(
        self,
        addr: str,
        config: Config,
        delegate: ConnDelegate | None = None,
        on_records: RecordsHandler | None = None,
    ) -> None:
        self.addr = addr
        self.config = config
        self.delegate = delegate
        self.on_records = on_records
        self.identify_response: dict[str, Any] = {}
        self.auth_response: dict[str, Any] | None = None
        self.max_rdy = 2500
        self.msg_timeout = 60.0
        self.rdy = 0
        self.last_rdy_time = 0.0
        self.last_msg_time = 0.0
        self.in_flight = 0
        self.closing = False  # CLS sent (or close requested)
        self.close_wait = False  # nsqd answered CLS: no more messages will come
        self.error: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._out = bytearray()
        self._flush_handle: asyncio.Handle | None = None
        self._pending: deque[asyncio.Future[bytes]] = deque()
        self._codec: SnappyCodec | DeflateCodec | None = None
        self._codec_next: SnappyCodec | DeflateCodec | None = None
        self._switch = False
        self._identify_fut: asyncio.Future[bytes] | None = None
        self._tls_ok: asyncio.Future[bytes] | None = None
        self._tls = False
        self._codec_ok: asyncio.Future[bytes] | None = None
        self._last_read = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"Conn({self.addr})"

    # ------------------------------------------------------------------ handshake

    async def connect(self) -> dict[str, Any]:
        """Dial, IDENTIFY, upgrade (TLS, compression), AUTH; returns the IDENTIFY answer."""
        cfg = self.config
        host, port = split_addr(self.addr)
        await asyncio.wait_for(
            self._loop.create_connection(lambda: self, host, port), cfg.dial_timeout
        )
        try:
            await asyncio.wait_for(self._handshake(host), max(cfg.read_timeout, 5.0))
        except BaseException:
            self.close()
            raise
        return self.identify_response

    async def _handshake(self, host: str) -> None:
        cfg = self.config
        self._identify_fut = fut = self._loop.create_future()
        self._pending.append(fut)
        self._write(wire.MAGIC_V2)
        self._write(wire.encode_command(b"IDENTIFY", body=json.dumps(cfg.identify_body()).encode()))
        await fut
        # _on_identify (run in data_received) queued the futures of the upgrade OKs.
        if self._tls_ok is not None:
            assert self._transport is not None
            ctx = cfg.ssl_context()
            tr = await self._loop.start_tls(
                self._transport, self, ctx, server_hostname=host if ctx.check_hostname else None
            )
            if tr is None:
                raise ConnectionError(f"TLS upgrade to {self.addr} failed")
            self._transport = tr
            self._tls = True
            await self._tls_ok
        if self._codec_ok is not None:
            await self._codec_ok
        if self.identify_response.get("auth_required"):
            if not cfg.auth_secret:
                raise NSQError("E_AUTH_REQUIRED", "nsqd requires AUTH and no auth_secret is set")
            data = await self.command(wire.encode_command(b"AUTH", body=cfg.auth_secret.encode()))
            self.auth_response = json.loads(data)

    def _on_identify(self, data: bytes) -> None:
        """nsqd's IDENTIFY answer, read inside data_received: choose the upgrades before the
        next frame is parsed."""
        cfg = self.config
        if data == wire.OK:  # no feature negotiation (very old nsqd)
            return
        resp = json.loads(data)
        self.identify_response = resp
        self.max_rdy = int(resp.get("max_rdy_count", 2500))
        if resp.get("msg_timeout"):
            self.msg_timeout = resp["msg_timeout"] / 1000
        codec: SnappyCodec | DeflateCodec | None = None
        if resp.get("snappy"):
            codec = SnappyCodec()
        elif resp.get("deflate"):
            codec = DeflateCodec(int(resp.get("deflate_level") or cfg.deflate_level))
        if resp.get("tls_v1"):
            self._tls_ok = self._loop.create_future()
            self._pending.append(self._tls_ok)
            self._codec_next = codec  # starts after the TLS OK
        elif codec is not None:
            self._codec_next = codec
            self._switch = True  # starts right after this frame
        if codec is not None:
            self._codec_ok = self._loop.create_future()
            self._pending.append(self._codec_ok)

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._last_read = self._loop.time()
        self._read_timer = self._loop.call_later(self.config.read_timeout, self._check_read)

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        try:
            codec = self._codec
            if codec is None:
                self._buf += data
            else:
                codec.feed(data)
                self._inflate(codec)
            self._parse()
        except (ValueError, CompressionError, NSQError) as e:
            self._fail(e)

    def _inflate(self, codec: SnappyCodec | DeflateCodec) -> None:
        buf = self._buf
        while True:
            part = codec.take(INFLATE_STEP)
            if not part:
                return
            buf += part

    def _parse(self) -> None:
        buf = self._buf
        max_size = self.config.max_msg_size
        bulk = self.on_records
        while True:
            pos = 0
            starts: list[int] = []
            ends: list[int] = []
            if len(buf) < 8 or _LEN.unpack_from(buf)[0] + 4 > len(buf):
                return  # no whole frame yet (a large one arriving): copy nothing
            data = bytes(buf)  # one copy per read: what the scan and on_records take
            while True:
                # all message frames up to the next other frame, in one call (nsqpy.client.frames)
                pos, ftype, start, end = scan_frames(data, pos, max_size, starts, ends)
                if bulk is None and starts:
                    for s, e in zip(starts, ends, strict=True):
                        self._on_message(data, s, e)
                        if self._transport is None:
                            return
                    starts.clear()
                    ends.clear()
                if ftype == NO_FRAME:
                    break
                if ftype == wire.FRAME_TYPE_MESSAGE:
                    raise ValueError(f"message of {end - start} bytes over max_msg_size")
                if ftype == wire.FRAME_TYPE_RESPONSE:
                    self._on_response(data[start:end])
                elif ftype == wire.FRAME_TYPE_ERROR:
                    self._on_error(data[start:end])
                else:
                    raise ValueError(f"unknown frame type {ftype}")
                if self._switch or self._transport is None:
                    break
            if starts and bulk is not None:
                self.last_msg_time = self._last_read
                bulk(self, data if pos == len(data) else data[:pos], starts, ends)
            if pos:
                del buf[:pos]
            if not self._switch:
                return
            # The codec starts here: what is left was compressed by nsqd.
            self._switch = False
            codec = self._codec = self._codec_next
            self._codec_next = None
            assert codec is not None
            rest = bytes(buf)
            del buf[:]
            codec.feed(rest)
            self._inflate(codec)

    def _on_message(self, buf: bytes, start: int, end: int) -> None:
        ts, attempts = _TS_ATTEMPTS.unpack_from(buf, start)
        msg = Message(
            bytes(buf[start + ID_START : start + ID_END]),
            bytes(buf[start + BODY_START : end]),
            attempts,
            ts,
            self,
        )
        self.in_flight += 1
        self.last_msg_time = self._last_read  # this read's time (one clock call per read)
        if self.delegate is not None:
            self.delegate.on_message(self, msg)

    def _on_response(self, data: bytes) -> None:
        if data == wire.HEARTBEAT:
            self._write(_NOP)
            return
        if not self._pending:
            return  # an answer nobody waits for (a CLOSE_WAIT after a drop, ...)
        fut = self._pending.popleft()
        if fut is self._identify_fut:
            self._identify_fut = None
            self._on_identify(data)
        elif fut is self._tls_ok and self._codec_next is not None:
            self._switch = True
        if not fut.done():
            fut.set_result(data)

    def _on_error(self, data: bytes) -> None:
        err = NSQError.from_frame(data)
        if self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)
        elif self.delegate is not None:
            self.delegate.on_error(self, err)
        if err.fatal:
            self._fail(err)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        for h in (self._read_timer, self._write_timer, self._flush_handle):
            if h is not None:
                h.cancel()
        err = self.error or ConnectionError(f"connection to nsqd {self.addr} closed")
        if exc is not None and self.error is None:
            err = ConnectionError(f"connection to nsqd {self.addr} lost: {exc}")
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # a pending command nobody awaits must not warn
        if not self.closed.done():
            self.closed.set_result(None)
        if self.delegate is not None:
            self.delegate.on_close(self)

    def pause_writing(self) -> None:
        self._write_timer = self._loop.call_later(
            self.config.write_timeout,
            self._fail,
            TimeoutError(f"write to nsqd {self.addr} timed out"),
        )

    def resume_writing(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _check_read(self) -> None:
        idle = self._loop.time() - self._last_read
        timeout = self.config.read_timeout
        if idle >= timeout:
            self._fail(TimeoutError(f"nothing read from nsqd {self.addr} for {timeout} s"))
        else:
            self._read_timer = self._loop.call_later(timeout - idle, self._check_read)

    def _fail(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err
        self.close()

    # ------------------------------------------------------------------ writes

    @property
    def is_open(self) -> bool:
        """Whether the socket is up (and no close was asked for)."""
        return self._transport is not None and self.error is None

    def _write(self, data: bytes | bytearray) -> None:
        self._out += data
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        out = self._out
        tr = self._transport
        if not out or tr is None:
            return
        data = bytes(out) if self._codec is None else self._codec.compress(out)
        del out[:]
        tr.write(data)

    def send(self, data: bytes) -> None:
        """Queue a command that gets no response (RDY, FIN, REQ, TOUCH, NOP); safe from any
        thread. Raises ConnectionError when the connection is gone."""
        if self._transport is None:
            raise ConnectionError(f"not connected to nsqd {self.addr}")
        if threading.get_ident() == self._thread:
            self._write(data)
        else:
            self._loop.call_soon_threadsafe(self._write_if_open, data)

    def _write_if_open(self, data: bytes) -> None:
        if self._transport is not None:
            self._write(data)

    def command(self, data: bytes) -> asyncio.Future[bytes]:
        """Queue a command that gets a response (SUB, PUB, MPUB, DPUB, AUTH, CLS); the future
        gets the response's data, or NSQError for an error frame, or ConnectionError when the
        connection goes first. Call on the loop's thread."""
        if self._transport is None:
            raise ConnectionError(f"not connected to nsqd {self.addr}")
        fut: asyncio.Future[bytes] = self._loop.create_future()
        self._pending.append(fut)
        self._write(data)
        return fut

    def close(self) -> None:
        """Close the socket now (pending writes are flushed first)."""
        self.closing = True
        tr = self._transport
        if tr is not None:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
                self._flush()
            tr.close()
            if self._tls:
                # asyncio's TLS close waits for the peer's close_notify (30 s by default),
                # which an nsqd may never send: once our bytes are out, drop the socket.
                self._loop.call_later(0.05, self._abort_when_flushed, tr, 40)

    def _abort_when_flushed(self, tr: asyncio.Transport, tries: int) -> None:
        if tr.is_closing() and self._transport is tr:
            if tr.get_write_buffer_size() and tries > 0:
                self._loop.call_later(0.05, self._abort_when_flushed, tr, tries - 1)
            else:
                tr.abort()

    # ------------------------------------------------------------------ message responses

    def set_rdy(self, count: int) -> None:
        """Send ``RDY count`` (the consumer's RDY logic decides; see consumer.py)."""
        self.rdy = count
        if count > 0:
            self.last_rdy_time = self._loop.time()
        self.send(b"RDY %d\n" % count)

    def respond(self, msg: Message, kind: int, delay_ms: int = 0, backoff: bool = False) -> None:
        """FIN (kind 0), REQ (kind 1, ``delay_ms``) or TOUCH (kind 2) ``msg``, then tell the
        delegate; from any thread (moved onto the loop's)."""
        if threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self.respond, msg, kind, delay_ms, backoff)
            return
        if self._transport is None:
            return  # nsqd has already put it back in its queue
        if kind == 0:  # the hot path: _write inlined
            self._out += b"FIN %s\n" % msg.id
            if self._flush_handle is None:
                self._flush_handle = self._loop.call_soon(self._flush)
        elif kind == 1:
            self._write(b"REQ %s %d\n" % (msg.id, delay_ms))
        else:
            self._write(b"TOUCH %s\n" % msg.id)
            return
        self.in_flight -= 1
        d = self.delegate
        if d is not None:
            if kind == 0:
                d.on_message_finished(self, msg)
            else:
                d.on_message_requeued(self, msg, backoff)
