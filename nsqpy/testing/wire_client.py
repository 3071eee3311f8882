"""The one blocking client of the TCP V2 wire, test and bench support: exact bytes in and out.

Strategy: one socket, one receive buffer. ``fill()`` is one ``recv_into`` the free end of the
buffer (the consumed bytes are dropped first, by moving the partial tail of a frame to the
front; the buffer doubles when one frame does not fit); ``frames()`` walks the whole frames
buffered (wire.iter_frames: type and offsets, no copy) and the caller moves ``pos`` past what
it took. That is the hot path of a consumer that parses frames in place (bench reader and
e2e). The request/response calls (IDENTIFY, SUB, PUB, MPUB) sit on top: ``read_frame()`` waits
for the next whole frame with a deadline.

Heartbeats: with ``answer_heartbeats`` (the default) ``read_frame`` answers each one with NOP
and leaves it out, as every NSQ client does; without it (the tests' RawClient, which checks
exact frames) they come out as frames like any other. Sends go through one lock, so one thread
may FIN while another reads (and answers heartbeats).

Errors: TimeoutError when a deadline passes, ConnectionClosed (a ConnectionError) when the
server closes the connection (OSError from the socket as it comes), WireError when the server
answers a request with an error frame or something else than expected. Commands and frames:
nsqpy.wire (the TCP spec, https://nsq.io/clients/tcp_protocol_spec.html)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from .. import wire
from ..message import decode_record

NOP = b"NOP\n"


class ConnectionClosed(ConnectionError):
    """The server closed the connection (a recv returned no bytes)."""


class WireError(Exception):
    """nsqd answered with an error frame (``code`` is its E_* code, ``frame_type`` the type of
    the frame), or not as expected."""

    def __init__(self, text: str, code: str = "", frame_type: int = -1) -> None:
        super().__init__(text)
        self.code = code
        self.frame_type = frame_type

    @classmethod
    def from_frame(cls, frame_type: int, data: bytes) -> WireError:
        text = data.decode("utf-8", "replace")
        code = text.split(" ", 1)[0] if frame_type == wire.FRAME_TYPE_ERROR else ""
        return cls(text, code, frame_type)


class WireClient:
    """One blocking TCP V2 connection on ``sock`` (the magic is the caller's, or connect's).

    ``timeout`` (s) is the default deadline of every read and the socket's own timeout.
    Receive buffer: ``buf`` (a bytearray, grown in place), the bytes ``buf[pos:have]`` are
    received and not consumed yet.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        timeout: float = 10.0,
        answer_heartbeats: bool = True,
        buffer_size: int = 1 << 16,
    ) -> None:
        self.sock = sock
        self.timeout = timeout
        self.answer_heartbeats = answer_heartbeats
        sock.settimeout(timeout)
        self.buf = bytearray(max(64, buffer_size))
        self._mv = memoryview(self.buf)
        self.pos = 0
        self.have = 0
        self._send_lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        addr: tuple[str, int],
        *,
        timeout: float = 10.0,
        magic: bytes = wire.MAGIC_V2,
        nodelay: bool = True,
        answer_heartbeats: bool = True,
        buffer_size: int = 1 << 16,
    ) -> WireClient:
        """Connect to ``addr`` (host, port), set TCP_NODELAY unless told not to, send
        ``magic`` (b"" for none). Raises OSError."""
        sock = socket.create_connection(addr, timeout=timeout)
        try:
            if nodelay:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client = cls(
                sock, timeout=timeout, answer_heartbeats=answer_heartbeats, buffer_size=buffer_size
            )
            if magic:
                client.send(magic)
        except BaseException:
            sock.close()
            raise
        return client

    # ------------------------------------------------------------------ sending

    def send(self, data: bytes | bytearray | memoryview) -> None:
        """sendall under the connection's send lock. Raises OSError."""
        with self._send_lock:
            self.sock.sendall(data)

    def command(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        """Send ``NAME params...\\n`` (and ``[4-byte size][body]`` for a body command)."""
        self.send(wire.encode_command(name, *params, body=body))

    def rdy(self, count: int) -> None:
        self.send(b"RDY %d\n" % count)

    def fin(self, msg_id: bytes) -> None:
        self.send(b"FIN " + msg_id + b"\n")

    def nop(self) -> None:
        self.send(NOP)

    # ------------------------------------------------------------------ receiving

    def fill(self, flags: int = 0) -> int:
        """One ``recv_into`` the buffer (with ``flags``, e.g. socket.MSG_DONTWAIT), waiting at
        most the socket's timeout: the number of bytes received (> 0). Raises TimeoutError
        (nothing came), BlockingIOError (MSG_DONTWAIT, nothing there), ConnectionClosed (the
        server closed the connection) or OSError."""
        pos, have = self.pos, self.have
        if pos:
            if pos < have:
                self.buf[: have - pos] = bytes(self._mv[pos:have])  # the partial tail
            have -= pos
            self.pos = 0
        elif have == len(self.buf):  # one frame larger than the buffer: grow it
            self._mv.release()
            self.buf.extend(bytes(len(self.buf)))
            self._mv = memoryview(self.buf)
        self.have = have
        n = self.sock.recv_into(self._mv[have:], 0, flags)
        if n == 0:
            raise ConnectionClosed("connection closed by server")
        self.have = have + n
        return n

    def frames(self) -> Iterator[tuple[int, int, int]]:
        """wire.iter_frames over what is buffered: ``(frame_type, data_start, data_end)`` in
        ``buf``. Consuming is the caller's: set ``pos`` to the last ``data_end`` taken."""
        return wire.iter_frames(self.buf, self.pos, self.have)

    def read_frame(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame as ``(frame_type, data)``, waiting at most ``timeout`` s (default:
        the client's). Heartbeats are answered and skipped with ``answer_heartbeats``, else
        returned. Raises TimeoutError, ConnectionError or OSError."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        sock = self.sock
        try:
            while True:
                for ftype, start, end in wire.iter_frames(self.buf, self.pos, self.have):
                    self.pos = end
                    data = bytes(self._mv[start:end])
                    if (
                        self.answer_heartbeats
                        and ftype == wire.FRAME_TYPE_RESPONSE
                        and data == wire.HEARTBEAT
                    ):
                        self.nop()
                        continue
                    return ftype, data
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no frame")
                sock.settimeout(left)
                self.fill()
        finally:
            sock.settimeout(self.timeout)

    def read_response(self, timeout: float | None = None) -> bytes:
        """The data of the next response frame, heartbeats skipped (and answered with
        ``answer_heartbeats``). Raises WireError on an error or message frame."""
        while True:
            ftype, data = self.read_frame(timeout)
            if ftype == wire.FRAME_TYPE_RESPONSE:
                if data == wire.HEARTBEAT:
                    continue
                return data
            raise WireError.from_frame(ftype, data)

    def expect_ok(self, timeout: float | None = None) -> None:
        """Read the next response; WireError unless it is OK."""
        data = self.read_response(timeout)
        if data != wire.OK:
            raise WireError(f"expected OK, got {data[:100]!r}")

    def read_message(self, timeout: float | None = None) -> tuple[int, int, bytes, bytes]:
        """The next message frame, heartbeats skipped: ``(timestamp_ns, attempts, id, body)``
        (message.decode_record). Raises WireError on any other frame."""
        while True:
            ftype, data = self.read_frame(timeout)
            if ftype == wire.FRAME_TYPE_MESSAGE:
                return decode_record(data)
            if ftype == wire.FRAME_TYPE_RESPONSE and data == wire.HEARTBEAT:
                continue
            raise WireError.from_frame(ftype, data)

    # ------------------------------------------------------------------ requests

    def identify(self, fields: dict[str, Any]) -> bytes:
        """IDENTIFY with ``fields`` (JSON); nsqd's answer: ``OK`` or its settings as JSON."""
        self.command(b"IDENTIFY", body=json.dumps(fields).encode())
        return self.read_response()

    def sub(self, topic: str, channel: str) -> None:
        self.command(b"SUB", topic.encode(), channel.encode())
        self.expect_ok()

    def pub(self, topic: str, body: bytes) -> None:
        self.command(b"PUB", topic.encode(), body=body)
        self.expect_ok()

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        self.send(wire.encode_mpub(topic.encode(), bodies))
        self.expect_ok()

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()
