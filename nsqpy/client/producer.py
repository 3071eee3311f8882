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
from collections.abc import Callable, Sequence

from .. import wire
from .checks import (
    check_bodies,
    check_body,
    check_mpub_size,
    check_name,
    check_size,
    limit_from_error,
)
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
    ValueError for a bad argument (an empty ``bodies``, a negative delay).

    What nsqd would refuse is refused here first, before a byte is written (see
    :mod:`nsqpy.client.checks`): a bad topic name (InvalidNameError), a body that is not
    bytes-like (TypeError), a body over nsqd's limits (MessageTooBigError); the first two are
    also ValueErrors and NSQErrors with nsqd's code, and leave the connection up.

    ``async with Producer(addr) as p:`` stops it on exit (the first publish dials)."""

    def __init__(self, addr: str, config: Config | None = None) -> None:
        self.addr = addr
        self.config = config if config is not None else Config()
        self.config.validate()
        self._conn: Conn | None = None
        self._lock: asyncio.Lock | None = None
        self._stopped = False
        self._learned: dict[str, int] = {}

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

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

    # ------------------------------------------------------------------ limits

    def _limit(self, name: str) -> int:
        """nsqd's ``name`` limit ("max_msg_size" or "max_body_size", bytes; 0 = unknown): what
        this connection's IDENTIFY answer says, else what an earlier "too big" refusal said,
        else (max_msg_size only) ``config.max_msg_size``."""
        conn = self._conn
        if conn is not None:
            announced = conn.identify_response.get(name)
            if isinstance(announced, int) and announced > 0:
                return announced
        learned = self._learned.get(name, 0)
        if learned:
            return learned
        return self.config.max_msg_size if name == "max_msg_size" else 0

    @property
    def max_msg_size(self) -> int:
        """The largest body (bytes) this producer lets through, 0 for no check: nsqd's value
        when its IDENTIFY answer gives one or an earlier refusal named it, else
        ``config.max_msg_size``. (nsqd 1.3 announces neither limit in IDENTIFY: set
        ``Config(max_msg_size=...)`` to nsqd's ``--max-msg-size`` to check from the first
        publish.)"""
        return self._limit("max_msg_size")

    @property
    def max_body_size(self) -> int:
        """The largest MPUB body (bytes) let through, 0 for no check (nsqd's, as
        max_msg_size)."""
        return self._limit("max_body_size")

    async def _send(self, check: Callable[[], None], build: Callable[[], bytes]) -> bytes:
        check()  # names, types and the limits known so far: before dialling
        conn = self._conn
        if conn is None or not conn.is_open:
            conn = await self.connect()
            check()  # the limits this connection's IDENTIFY answer gave
        try:
            return await conn.command(build())
        except NSQError as e:
            learned = limit_from_error(e)
            if learned is not None:
                self._learned[learned[0]] = learned[1]
            raise

    # ------------------------------------------------------------------ publishing

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB ``body`` (bytes-like) to ``topic``; returns once nsqd answered OK. Refused
        before anything is sent: a bad topic name (InvalidNameError, a ValueError), a body
        that is not bytes-like (TypeError; encode a str first), a body over
        :attr:`max_msg_size` (MessageTooBigError, a ValueError)."""
        t = check_name(topic, "topic")
        b = check_body(body)
        await self._send(
            lambda: check_size("PUB", len(b), self.max_msg_size),
            lambda: wire.encode_command(b"PUB", t, body=b),
        )

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB ``bodies`` (a non-empty sequence of bytes-like) to ``topic`` in one command:
        nsqd takes all or none. Refused before sending as publish, and when the MPUB body
        exceeds :attr:`max_body_size` (MessageTooBigError with code E_BAD_BODY)."""
        t = check_name(topic, "topic")
        bs = check_bodies(bodies)
        await self._send(
            lambda: check_mpub_size(bs, self.max_msg_size, self.max_body_size),
            lambda: _mpub(t, bs),
        )

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB: ``body`` becomes visible on ``topic``'s channels after ``delay`` seconds
        (sent in whole milliseconds; nsqd refuses more than its --max-req-timeout with
        E_INVALID). Refused before sending as publish; ValueError for a negative delay."""
        t = check_name(topic, "topic")
        b = check_body(body)
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        ms = b"%d" % int(delay * 1000)
        await self._send(
            lambda: check_size("DPUB", len(b), self.max_msg_size),
            lambda: wire.encode_command(b"DPUB", t, ms, body=b),
        )

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
    too (nor is what the client refuses before sending, see Producer). ``async with`` stops
    every producer on exit."""

    def __init__(self, addrs: Sequence[str], config: Config | None = None) -> None:
        if not addrs:
            raise ValueError("ProducerPool needs at least one address")
        cfg = config if config is not None else Config()
        self.producers = [Producer(a, cfg) for a in addrs]
        self._next = random.randrange(len(self.producers))
        self._down: set[int] = set()

    async def __aenter__(self) -> ProducerPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

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
