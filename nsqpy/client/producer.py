"""Publishing: one nsqd (:class:`Producer`) or several (:class:`ProducerPool`).

Strategy: a Producer owns at most one :class:`~nsqpy.client.conn.Conn`, dialled on the first
call and again on the first call after it dropped (go-nsq producer.go: connect on demand).
Every PUB, MPUB and DPUB is written at once (the connection batches one event-loop pass into
one write) and its future queued; nsqd answers in order, so each answer resolves the oldest
future (go-nsq's transaction queue). Any number of publishes may be in flight at once from
concurrent tasks: that is the pipelining. When the connection drops, every publish still
waiting fails with ConnectionError; it may or may not have reached nsqd.

Source: go-nsq producer.go, command.go (v1.1)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from .. import wire
from .config import Config
from .conn import Conn, NSQError

_LEN = wire._LEN


def _mpub(topic: bytes, bodies: Sequence[bytes]) -> bytes:
    pack = _LEN.pack
    parts = [b"MPUB ", topic, b"\n", b"", pack(len(bodies))]
    size = 4
    for b in bodies:
        parts.append(pack(len(b)))
        parts.append(b)
        size += 4 + len(b)
    parts[3] = pack(size)
    return b"".join(parts)


class Producer:
    """Publishes to one nsqd at ``addr`` ("host:port" of its TCP listener).

    Every method is a coroutine on the caller's event loop. Errors: ConnectionError/OSError
    when nsqd cannot be reached or the connection drops before the answer (the next call dials
    again); TimeoutError when it cannot be dialled within ``config.dial_timeout`` s;
    :class:`NSQError` when nsqd answers with an error frame (e.g. ``E_BAD_TOPIC``,
    ``E_BAD_MESSAGE``, ``E_UNAUTHORIZED``; nsqd closes the connection after all of them);
    ValueError for a bad argument (an empty ``bodies``, a negative delay)."""

    def __init__(self, addr: str, config: Config | None = None) -> None:
        self.addr = addr
        self.config = config if config is not None else Config()
        self.config.validate()
        self._conn: Conn | None = None
        self._lock: asyncio.Lock | None = None
        self._stopped = False

    @property
    def connected(self) -> bool:
        """Whether a connection is up now."""
        return self._conn is not None and self._conn.is_open

    async def connect(self) -> Conn:
        """Dial and handshake now (otherwise the first publish does); returns the connection."""
        conn = self._conn
        if conn is not None and conn.is_open:
            return conn
        if self._stopped:
            raise ConnectionError("producer stopped")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            conn = self._conn
            if conn is not None and conn.is_open:
                return conn
            conn = Conn(self.addr, self.config)
            await conn.connect()
            self._conn = conn
            return conn

    async def _send(self, data: bytes) -> bytes:
        conn = self._conn
        if conn is None or not conn.is_open:
            conn = await self.connect()
        return await conn.command(data)

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB ``body`` (bytes) to ``topic``; returns once nsqd answered OK."""
        await self._send(wire.encode_command(b"PUB", topic.encode(), body=body))

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB ``bodies`` (a non-empty sequence of bytes) to ``topic`` in one command: nsqd
        takes all or none."""
        if not bodies:
            raise ValueError("multi_publish needs at least one body")
        await self._send(_mpub(topic.encode(), bodies))

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB: ``body`` becomes visible on ``topic``'s channels after ``delay`` seconds
        (sent in whole milliseconds; nsqd refuses more than its --max-req-timeout with
        E_INVALID)."""
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        ms = b"%d" % int(delay * 1000)
        await self._send(wire.encode_command(b"DPUB", topic.encode(), ms, body=body))

    async def ping(self) -> None:
        """Check the connection: dial if needed, then a NOP (which nsqd does not answer), so a
        dead connection shows at the next read; raises as publish."""
        conn = await self.connect()
        conn.send(b"NOP\n")

    async def stop(self) -> None:
        """Close the connection (publishes still waiting fail); later calls raise
        ConnectionError."""
        self._stopped = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.closed


class ProducerPool:
    """Publishes over several nsqd (``addrs``, "host:port" each), one :class:`Producer` each.

    Each call starts at the next nsqd in turn (round robin, from a random first one), skipping
    those whose last attempt failed to connect while a live one is left. When a call fails
    with a connection error (nsqd down, connection dropped, dial timeout) it is retried on the
    next nsqd, up to once per nsqd; the last error is raised when all failed. A retried
    publish whose connection dropped after sending may have reached the first nsqd too (at
    least once). An :class:`NSQError` (nsqd refused the command: E_BAD_TOPIC, E_BAD_MESSAGE,
    E_UNAUTHORIZED, ...) is raised at once, **not** retried: another nsqd would refuse it
    too."""

    def __init__(self, addrs: Sequence[str], config: Config | None = None) -> None:
        if not addrs:
            raise ValueError("ProducerPool needs at least one address")
        cfg = config if config is not None else Config()
        self.producers = [Producer(a, cfg) for a in addrs]
        self._next = random.randrange(len(self.producers))
        self._down: set[int] = set()

    async def _run(self, op: str, *args: object) -> None:
        n = len(self.producers)
        start = self._next
        self._next = (start + 1) % n
        order = [(start + i) % n for i in range(n)]
        order.sort(key=lambda i: i in self._down)  # live ones first, order kept
        err: BaseException | None = None
        for i in order:
            try:
                await getattr(self.producers[i], op)(*args)
            except NSQError:
                raise
            except OSError as e:  # TimeoutError and ConnectionError too
                self._down.add(i)
                err = e
                continue
            self._down.discard(i)
            return
        assert err is not None
        raise err

    async def publish(self, topic: str, body: bytes) -> None:
        """As Producer.publish, on one nsqd of the pool."""
        await self._run("publish", topic, body)

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        """As Producer.multi_publish, on one nsqd of the pool."""
        await self._run("multi_publish", topic, bodies)

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """As Producer.deferred_publish, on one nsqd of the pool."""
        await self._run("deferred_publish", topic, delay, body)

    async def stop(self) -> None:
        """Stop every producer."""
        for p in self.producers:
            await p.stop()
