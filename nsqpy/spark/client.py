"""The NSQ TCP V2 client of the Spark driver and executors, on nsqpy.wire_client.

Strategy: each NSQConnection wraps one nsqpy.wire_client.WireClient (the blocking client of the
wire that bench and the tests use too: one socket, one receive buffer, frames walked with
nsqpy.wire.iter_frames) and adds what the connector needs: an address string, nsqd's IDENTIFY
settings, an ``alive`` flag, NSQError with nsqd's E_* code, and the batching Producer.
Request/response calls (IDENTIFY, SUB, PUB, MPUB) read until their answer and reply to
heartbeats on the way; a consumer's socket is otherwise read by its owner (the source's I/O
thread) through `read_available`, which also answers heartbeats with NOP. Every send goes
through the WireClient's lock, so the driver thread (FIN) and the I/O thread (TOUCH, NOP) can
share a connection. Every blocking call has a timeout."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections import deque
from typing import Any

from nsqpy import wire
from nsqpy.internal.netaddr import split_host_port
from nsqpy.message import decode_record
from nsqpy.wire_client import ConnectionClosed, WireClient

USER_AGENT = "nsqpy-spark/0.1"

_LEN = struct.Struct(">i")


class NSQError(Exception):
    """nsqd answered with an error frame (``code`` is its E_* code), or not as expected."""

    def __init__(self, text: str, code: str = "") -> None:
        super().__init__(text)
        self.code = code

    @classmethod
    def from_frame(cls, data: bytes) -> NSQError:
        text = data.decode("utf-8", "replace")
        return cls(text, text.split(" ", 1)[0])


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` to ``(host, port)``."""
    address = address.strip()
    try:
        host, port = split_host_port(address)
    except ValueError:
        host, port = "", -1
    if not host or port < 0:
        raise ValueError(f"bad nsqd address {address!r} (want host:port)")
    return host, port


def split_addresses(value: str | None) -> list[str]:
    """A comma (or whitespace) separated list of addresses, without blanks or repeats."""
    out: list[str] = []
    for part in (value or "").replace(",", " ").split():
        if part not in out:
            out.append(part)
    return out


class Message:
    """One delivered message and the connection that delivered it (FIN/TOUCH go there)."""

    __slots__ = ("attempts", "body", "conn", "id", "timestamp_ns")

    def __init__(
        self, msg_id: bytes, body: bytes, timestamp_ns: int, attempts: int, conn: NSQConnection
    ) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp_ns = timestamp_ns
        self.attempts = attempts
        self.conn = conn


class NSQConnection:
    """One TCP V2 connection to an nsqd (consumer or producer)."""

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 10.0,
        msg_timeout_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        client_id: str | None = None,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.msg_timeout_ms = msg_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.client_id = client_id or socket.gethostname().split(".")[0]
        self.sock: socket.socket | None = None
        self.wire: WireClient | None = None
        self.settings: dict[str, Any] = {}
        self.alive = False
        self.last_recv = 0.0

    # ------------------------------------------------------------------ set-up

    def connect(self) -> dict[str, Any]:
        """Connect, send the magic and IDENTIFY (feature negotiation); returns nsqd's settings."""
        host, port = parse_address(self.address)
        self.wire = WireClient.connect((host, port), timeout=self.timeout, buffer_size=1 << 18)
        self.sock = self.wire.sock
        self.alive = True
        self.last_recv = time.monotonic()
        try:
            fields: dict[str, Any] = {
                "client_id": self.client_id,
                "hostname": socket.gethostname(),
                "user_agent": USER_AGENT,
                "feature_negotiation": True,
            }
            if self.msg_timeout_ms is not None:
                fields["msg_timeout"] = int(self.msg_timeout_ms)
            if self.heartbeat_interval_ms is not None:
                fields["heartbeat_interval"] = int(self.heartbeat_interval_ms)
            self.wire.command(b"IDENTIFY", body=json.dumps(fields).encode())
            data = self._response()
            self.settings = json.loads(data) if data.startswith(b"{") else {}
        except BaseException:
            self.close()
            raise
        return self.settings

    @property
    def max_rdy_count(self) -> int:
        return int(self.settings.get("max_rdy_count", 2500))

    # ------------------------------------------------------------------ sending

    def send(self, data: bytes) -> None:
        client = self.wire
        if client is None or not self.alive:
            raise ConnectionError(f"connection to {self.address} is closed")
        try:
            client.send(data)
        except OSError:
            self.alive = False
            raise

    def sub(self, topic: str, channel: str) -> None:
        self.send(wire.encode_command(b"SUB", topic.encode(), channel.encode()))
        self._expect_ok()

    def rdy(self, count: int) -> None:
        self.send(wire.encode_command(b"RDY", str(int(count)).encode()))

    def fin(self, msg_id: bytes) -> None:
        self.send(wire.encode_command(b"FIN", msg_id))

    def touch(self, msg_id: bytes) -> None:
        self.send(wire.encode_command(b"TOUCH", msg_id))

    def req(self, msg_id: bytes, delay_ms: int = 0) -> None:
        self.send(wire.encode_command(b"REQ", msg_id, str(int(delay_ms)).encode()))

    def send_many(self, name: bytes, ids: list[bytes]) -> None:
        """``name <id>\\n`` for every id, in one write (FIN and TOUCH in bulk)."""
        if ids:
            self.send(b"".join(name + b" " + i + b"\n" for i in ids))

    def nop(self) -> None:
        self.send(b"NOP\n")

    def pub(self, topic: str, body: bytes) -> None:
        """PUB and wait for OK; raises NSQError when nsqd answers anything else."""
        self.send(wire.encode_command(b"PUB", topic.encode(), body=body))
        self._expect_ok()

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        """MPUB and wait for OK; raises NSQError when nsqd answers anything else."""
        self.send(wire.encode_mpub(topic.encode(), bodies))
        self._expect_ok()

    def send_mpub(self, topic: str, bodies: list[bytes]) -> None:
        """MPUB without waiting: read its answer later with :meth:`expect_ok` (answers come in
        order)."""
        self.send(wire.encode_mpub(topic.encode(), bodies))

    def expect_ok(self) -> None:
        self._expect_ok()

    # ------------------------------------------------------------------ receiving

    def read_available(self) -> list[tuple[int, bytes]]:
        """One ``recv`` (call when the socket is readable): the whole frames it completed.

        Heartbeats are answered (NOP) and left out. Raises ConnectionError on EOF."""
        client = self.wire
        if client is None:
            raise ConnectionError(f"connection to {self.address} is closed")
        try:
            client.fill()
        except (BlockingIOError, InterruptedError, TimeoutError):
            return []
        except OSError as e:
            self.alive = False
            if isinstance(e, ConnectionClosed):
                raise ConnectionError(f"{self.address} closed the connection") from e
            raise ConnectionError(f"{self.address}: {e}") from e
        self.last_recv = time.monotonic()
        out = []
        buf = client.buf
        for ftype, start, end in client.frames():
            client.pos = end
            data = bytes(buf[start:end])
            if ftype == wire.FRAME_TYPE_RESPONSE and data == wire.HEARTBEAT:
                self.nop()
            else:
                out.append((ftype, data))
        return out

    def read_frame(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame other than a heartbeat (answered with NOP), waiting at most
        ``timeout`` s (default: the connection's timeout)."""
        client = self.wire
        if client is None:
            raise ConnectionError(f"connection to {self.address} is closed")
        try:
            frame = client.read_frame(self.timeout if timeout is None else timeout)
        except TimeoutError:
            raise TimeoutError(f"no answer from {self.address}") from None
        except OSError as e:
            self.alive = False
            if isinstance(e, ConnectionClosed):
                raise ConnectionError(f"{self.address} closed the connection") from e
            raise ConnectionError(f"{self.address}: {e}") from e
        self.last_recv = time.monotonic()
        return frame

    def _response(self) -> bytes:
        ftype, data = self.read_frame()
        if ftype == wire.FRAME_TYPE_ERROR:
            raise NSQError.from_frame(data)
        if ftype != wire.FRAME_TYPE_RESPONSE:
            raise NSQError(f"unexpected frame type {ftype} from {self.address}")
        return data

    def _expect_ok(self) -> None:
        data = self._response()
        if data != wire.OK:
            raise NSQError(f"expected OK from {self.address}, got {data[:100]!r}")

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def close(self) -> None:
        self.alive = False
        client, self.wire, self.sock = self.wire, None, None
        if client is not None:
            try:
                client.close()
            except OSError:
                pass


def decode_message_frame(data: bytes, conn: NSQConnection) -> Message:
    ts, attempts, msg_id, body = decode_record(data)
    return Message(msg_id, body, ts, attempts, conn)


class Producer:
    """Publishes batches with MPUB, a few in flight at once, and checks every answer is OK.

    ``publish(bodies)`` splits ``bodies`` into MPUBs of at most ``batch_size`` messages and
    ``batch_bytes`` bytes, keeps up to ``window`` of them unanswered, and raises NSQError on the
    first answer that is not OK (nsqd closes the connection after a fatal error anyway).
    """

    def __init__(
        self,
        address: str,
        topic: str,
        *,
        batch_size: int = 500,
        batch_bytes: int = 1 << 20,
        window: int = 4,
        timeout: float = 30.0,
    ) -> None:
        self.topic = topic
        self.batch_size = max(1, batch_size)
        self.batch_bytes = max(1, batch_bytes)
        self.window = max(1, window)
        self.conn = NSQConnection(address, timeout=timeout)
        self.conn.connect()
        self._unanswered: deque[int] = deque()  # sizes of the MPUBs not yet answered
        self._batch: list[bytes] = []
        self._batch_size_bytes = 0
        #: messages nsqd has answered OK for
        self.published = 0

    def put(self, body: bytes) -> None:
        """Queue one message; sends an MPUB when the batch is full."""
        if not body:
            raise ValueError("NSQ messages cannot be empty")
        if self._batch and (
            len(self._batch) >= self.batch_size
            or self._batch_size_bytes + len(body) + 4 > self.batch_bytes
        ):
            self._send_batch()
        self._batch.append(body)
        self._batch_size_bytes += len(body) + 4

    def publish(self, bodies: list[bytes]) -> None:
        for b in bodies:
            self.put(b)
        self.flush()

    def send_encoded(self, count: int, mpub_body: bytes | memoryview) -> None:
        """Send one MPUB whose body (``[4-byte count]([4-byte size][bytes])*``) is already
        encoded (see nsqpy.spark.sink.mpub_bodies); up to ``window`` stay unanswered."""
        while len(self._unanswered) >= self.window:
            self._answer()
        self.conn.send(
            b"MPUB " + self.topic.encode() + b"\n" + _LEN.pack(len(mpub_body)) + bytes(mpub_body)
        )
        self._unanswered.append(count)

    def _send_batch(self) -> None:
        batch, self._batch, self._batch_size_bytes = self._batch, [], 0
        while len(self._unanswered) >= self.window:
            self._answer()
        self.conn.send_mpub(self.topic, batch)
        self._unanswered.append(len(batch))

    def _answer(self) -> None:
        self.conn.expect_ok()
        self.published += self._unanswered.popleft()

    def flush(self) -> None:
        """Send what is queued and wait for every answer."""
        if self._batch:
            self._send_batch()
        while self._unanswered:
            self._answer()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.flush()
        finally:
            self.close()
