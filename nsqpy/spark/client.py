"""The connector's publishing client and address helpers, on nsqpy.client.

Strategy: the sink (and the jobs, bench and tests that pre-fill topics) publish through
:class:`BatchPublisher`, a blocking, pipelined MPUB publisher for one nsqd and one topic: its
connection is an :class:`nsqpy.client.Conn` (IDENTIFY, TLS, snappy/deflate, AUTH and heartbeats
as nsqpy.client does them, configured by nsqpy.spark.options.conn_config) on an event loop that
runs in a daemon thread (nsqpy.client.blocking's loop thread). The calling thread encodes each
MPUB and hands it to the loop (``call_soon_threadsafe``), keeping up to ``window`` unanswered,
and checks every answer, in order, for ``OK`` (nsqd answers in order). The source's consuming
side lives in nsqpy.spark.fetch, on the same Conn."""

from __future__ import annotations

import asyncio
import concurrent.futures
import struct
from collections import deque

from nsqpy import wire
from nsqpy.client import Config, Conn, NSQError
from nsqpy.client.blocking import _LoopThread
from nsqpy.internal.netaddr import split_host_port

__all__ = ["BatchPublisher", "NSQError", "parse_address", "split_addresses"]

USER_AGENT = "nsqpy-spark/0.2"

_LEN = struct.Struct(">i")


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` to ``(host, port)``; ValueError otherwise."""
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


class BatchPublisher:
    """Publishes to ``topic`` on the nsqd at ``address`` with MPUB, a few in flight at once.

    ``config``: the connection's nsqpy.client Config (TLS, compression, auth_secret; default
    a plain connection), dialled and handshaken in the constructor within ``timeout`` s
    (OSError/TimeoutError when nsqd cannot be reached, NSQError when IDENTIFY or AUTH is
    refused, ssl.SSLError when the TLS handshake fails). ``put(body)`` queues one message and
    sends an MPUB of at most ``batch_size`` messages and ``batch_bytes`` bytes when full;
    ``send_encoded(count, body)`` sends one MPUB whose body is already encoded; up to
    ``window`` MPUBs stay unanswered. ``flush()`` sends what is queued and waits for every
    answer; ``published`` counts the messages nsqd answered OK for. Any other answer raises
    NSQError (E_BAD_TOPIC, E_BAD_MESSAGE, E_UNAUTHORIZED, ...; nsqd then closes the
    connection), a dropped connection ConnectionError, an answer later than ``timeout`` s
    TimeoutError. A context manager: flush at a clean exit, close always."""

    def __init__(
        self,
        address: str,
        topic: str,
        *,
        batch_size: int = 500,
        batch_bytes: int = 1 << 20,
        window: int = 4,
        timeout: float = 30.0,
        config: Config | None = None,
    ) -> None:
        parse_address(address)
        self.address = address
        self.topic = topic
        self.batch_size = max(1, batch_size)
        self.batch_bytes = max(1, batch_bytes)
        self.window = max(1, window)
        self.timeout = timeout
        cfg = config.copy() if config is not None else Config(dial_timeout=min(timeout, 5.0))
        cfg.user_agent = USER_AGENT
        self._head = b"MPUB " + topic.encode() + b"\n"
        self._unanswered: deque[tuple[int, concurrent.futures.Future[bytes]]] = deque()
        self._batch: list[bytes] = []
        self._batch_size_bytes = 0
        #: messages nsqd has answered OK for
        self.published = 0
        self._lt = _LoopThread("nsq-spark-producer")
        self._loop = self._lt.loop
        try:
            self.conn: Conn = self._lt.run(self._connect(cfg), timeout)
        except BaseException:
            self._lt.close()
            raise

    async def _connect(self, cfg: Config) -> Conn:
        conn = Conn(self.address, cfg)
        await conn.connect()
        return conn

    # ------------------------------------------------------------------ sending

    def _submit(self, data: bytes, cf: concurrent.futures.Future[bytes]) -> None:
        """On the loop: send one command, and pass its answer to ``cf``."""
        try:
            fut = self.conn.command(data)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            cf.set_exception(e)
            return

        def done(f: asyncio.Future[bytes]) -> None:
            if f.cancelled():
                cf.cancel()
            elif (err := f.exception()) is not None:
                cf.set_exception(err)
            else:
                cf.set_result(f.result())

        fut.add_done_callback(done)

    def _send(self, count: int, data: bytes) -> None:
        while len(self._unanswered) >= self.window:
            self._answer()
        cf: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._submit, data, cf)
        self._unanswered.append((count, cf))

    def send_encoded(self, count: int, mpub_body: bytes | memoryview) -> None:
        """Send one MPUB of ``count`` messages whose body (``[4-byte count]([4-byte size]
        [bytes])*``) is already encoded (see nsqpy.spark.sink.mpub_bodies)."""
        self._send(count, b"".join((self._head, _LEN.pack(len(mpub_body)), mpub_body)))

    def put(self, body: bytes) -> None:
        """Queue one message (ValueError when empty); sends an MPUB when the batch is full."""
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
        """put() each of ``bodies``, then flush()."""
        for b in bodies:
            self.put(b)
        self.flush()

    def _send_batch(self) -> None:
        batch, self._batch, self._batch_size_bytes = self._batch, [], 0
        self._send(len(batch), wire.encode_mpub(self.topic.encode(), batch))

    def _answer(self) -> None:
        count, cf = self._unanswered[0]
        try:
            data = cf.result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no answer from nsqd {self.address} in {self.timeout} s") from None
        self._unanswered.popleft()
        if data != wire.OK:
            raise NSQError("E_BAD_RESPONSE", f"expected OK from {self.address}, got {data[:100]!r}")
        self.published += count

    def flush(self) -> None:
        """Send what is queued and wait for every answer."""
        if self._batch:
            self._send_batch()
        while self._unanswered:
            self._answer()

    def close(self) -> None:
        """Close the connection (answers not yet read are lost) and the loop thread."""
        if self._loop.is_closed():
            return

        async def close() -> None:
            self.conn.close()
            await asyncio.wait_for(asyncio.shield(self.conn.closed), 3)

        try:
            self._lt.run(close(), 5)
        except (TimeoutError, OSError):
            pass
        finally:
            self._lt.close()

    def __enter__(self) -> BatchPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.flush()
        finally:
            self.close()
