"""Consuming a topic's channel from many nsqd: SUB, RDY spread, backoff, discovery, drain.

Strategy (go-nsq consumer.go, v1.1, rule for rule):

- **RDY.** nsqd sends a connection at most RDY messages in flight, so RDY is sent when the
  wanted count changes, not per message. Each connection wants ``perConnMaxInFlight`` =
  max(1, max_in_flight / connections) (never above the whole max_in_flight nor nsqd's
  max_rdy_count), and the sum over connections never passes max_in_flight: a new connection
  first lowers the others. With more connections than max_in_flight, a redistribution pass
  every ``rdy_redistribute_interval`` takes RDY back from connections idle for
  ``low_rdy_idle_timeout`` (or holding it for ``low_rdy_timeout``) and hands RDY 1 to random
  connections up to the max. When a connection closes, the others take its share back at once
  (go-nsq waits for the next connection or redistribution pass).
- **Backoff.** A FIN is a "resume" signal, a REQ with backoff a "backoff" signal, a REQ
  without it "continue". Backoff raises a level (while multiplier × 2**(level+1) stays within
  max_backoff_duration) and sends RDY 0 everywhere for multiplier × 2**level seconds; then RDY
  1 goes to one random connection to test the water; its FIN lowers the level, and at level 0
  every connection gets its RDY back. Signals that arrive while the RDY 0 timer runs are
  ignored (go-nsq's inBackoffTimeout).
- **Handlers.** :mod:`nsqpy.client.handlers` runs them: returning None/True FINs, returning
  False or raising REQs with backoff (default delay: default_requeue_delay × attempts,
  capped), ``enable_async()`` answers by hand; past max_attempts, ``giving_up`` then FIN. A
  plain function added alone without ``concurrency`` runs inline on the event loop as frames
  are parsed (no queue, no task per message); otherwise messages go through one
  asyncio.Queue to each handler's workers (tasks, or threads for a plain function with
  ``concurrency``).
- **Discovery.** Each lookupd is asked GET /lookup?topic= at once, then every
  lookupd_poll_interval after a random jitter (lookupd_poll_jitter × interval), round robin
  over the lookupds, at most 3 tries per poll; new nsqd are connected. A dropped connection
  makes the next poll happen at once; one made with connect_to_nsqd (no lookupd) is redialled
  every lookupd_poll_interval until it comes back.
- **Stop.** CLS on every connection; nsqd answers CLOSE_WAIT and sends nothing more; each
  connection closes once its in-flight messages are answered (or after ``timeout``).
  ``wait_closed()`` returns once a stop has finished (go-nsq's StopChan); ``async with``
  stops on exit.

Source: go-nsq consumer.go, conn.go (v1.1)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import check_name
from .config import Config
from .conn import Conn, NSQError
from .handlers import GivingUp, Handler, HandlerRunner
from .lookup import lookup
from .message import Message

log = logging.getLogger("nsqpy.client")

_RESUME, _BACKOFF, _CONTINUE = 0, 1, 2


@dataclass
class ConsumerStats:
    """Counters since the consumer started (go-nsq's ConsumerStats): messages ``received``,
    ``finished``, ``requeued``; ``connections`` open now; ``backoff_level`` now."""

    received: int
    finished: int
    requeued: int
    connections: int
    backoff_level: int


class Consumer:
    """Reads ``topic``/``channel`` (valid NSQ names; InvalidNameError, a ValueError naming the
    rule, otherwise) from nsqd.

    ``add_handler(handler, concurrency=None, giving_up=None)`` before connecting; then ``await
    connect_to_nsqd("host:port")`` / ``connect_to_nsqds([...])`` (nsqd's TCP address) and/or
    ``await connect_to_lookupd("host:port")`` / ``connect_to_lookupds([...])`` (lookupd's HTTP
    address); ``await stop()`` at the end. Connecting raises as :class:`~nsqpy.client.conn.Conn`
    does (OSError, TimeoutError, NSQError: a refused SUB is e.g. E_BAD_TOPIC or
    E_UNAUTHORIZED); RuntimeError before any handler or after stop. ``stats()`` gives the
    counters. Everything runs on the event loop that called the constructor's first
    coroutine. ``async with`` stops it on exit; ``wait_closed()`` waits for a stop."""

    def __init__(self, topic: str, channel: str, config: Config | None = None) -> None:
        check_name(topic, "topic")  # InvalidNameError (a ValueError) naming the rule
        check_name(channel, "channel")
        self.topic = topic
        self.channel = channel
        self.config = config if config is not None else Config()
        self.config.validate()
        self.max_in_flight = self.config.max_in_flight
        self.conns: dict[str, Conn] = {}
        self._connecting: set[str] = set()
        self._nsqd_addrs: list[str] = []
        self._lookupd_addrs: list[str] = []
        self._lookupd_index = 0
        self._handlers: list[HandlerRunner] = []
        self._inline: Callable[[Message], None] | None = None
        self._queue: asyncio.Queue[Message | None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._received = self._finished = self._requeued = 0
        self._backoff_level = 0
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._total_rdy = 0
        self._need_redistribute = False
        self._rdy_retry: dict[str, asyncio.TimerHandle] = {}
        self._stopping = False
        self._closed = asyncio.Event()
        self._started = False
        self._recheck: asyncio.Event | None = None
        self._session: Any = None
        self._rng = random.Random()

    # ------------------------------------------------------------------ handlers

    def add_handler(
        self,
        handler: Handler,
        concurrency: int | None = None,
        giving_up: GivingUp | None = None,
    ) -> None:
        """Add ``handler`` (a plain or coroutine function taking a Message; see
        :mod:`nsqpy.client.handlers` for the contract: return None/True FINs, return False or
        raise REQs with backoff, ``msg.enable_async()`` answers by hand). ``concurrency``: N
        worker threads for a plain function (N tasks for a coroutine function); without it a
        plain function runs inline on the event loop and must not block, a coroutine function
        in one task. ``giving_up(msg)`` (plain or async) runs for a message delivered more
        than ``config.max_attempts`` times (0: never give up), instead of the handler and
        before the FIN. Raises RuntimeError once connected (go-nsq panics), ValueError for
        concurrency < 1, TypeError for something not callable."""
        if self._started:
            raise RuntimeError("add_handler after connecting")
        self._handlers.append(HandlerRunner(handler, concurrency, giving_up, self.config))

    def _start(self) -> None:
        if self._started:
            return
        if not self._handlers:
            raise RuntimeError("no handlers: call add_handler first")
        self._started = True
        if len(self._handlers) == 1 and self._handlers[0].can_run_inline:
            self._inline = self._handlers[0].run_inline
        else:
            self._queue = asyncio.Queue()
            for h in self._handlers:
                h.start(self._queue)
        self._spawn(self._rdy_loop())

    def _spawn(self, coro: Awaitable[Any]) -> None:
        t: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ Conn delegate

    def on_message(self, conn: Conn, msg: Message) -> None:
        self._received += 1
        if self.config.auto_touch:
            every = conn.msg_timeout * self.config.auto_touch_fraction
            msg._touch_timer = asyncio.get_running_loop().call_later(
                every, self._auto_touch, msg, every
            )
        inline = self._inline
        if inline is not None:
            inline(msg)
        else:
            assert self._queue is not None
            self._queue.put_nowait(msg)

    def _auto_touch(self, msg: Message, every: float) -> None:
        if msg._responded or not msg._conn.is_open:
            return
        msg.touch()
        msg._touch_timer = asyncio.get_running_loop().call_later(
            every, self._auto_touch, msg, every
        )

    def _answered(self, conn: Conn, msg: Message) -> None:
        if msg._touch_timer is not None:
            msg._touch_timer.cancel()
            msg._touch_timer = None
        if conn.close_wait and conn.in_flight <= 0:
            conn.close()

    def on_message_finished(self, conn: Conn, msg: Message) -> None:
        self._finished += 1
        if msg._touch_timer is not None or conn.close_wait:
            self._answered(conn, msg)
        if self._backoff_level:  # a resume signal changes nothing at level 0
            self._signal(_RESUME)

    def on_message_requeued(self, conn: Conn, msg: Message, backoff: bool) -> None:
        self._requeued += 1
        self._answered(conn, msg)
        self._signal(_BACKOFF if backoff else _CONTINUE)

    def on_error(self, conn: Conn, err: NSQError) -> None:
        log.warning("(%s) error from nsqd: %s", conn.addr, err)

    def on_close(self, conn: Conn) -> None:
        if self.conns.get(conn.addr) is not conn:
            return
        del self.conns[conn.addr]
        self._total_rdy -= conn.rdy
        retry = self._rdy_retry.pop(conn.addr, None)
        if retry is not None:
            retry.cancel()
        left = len(self.conns)
        log.info("(%s) connection closed, %d left", conn.addr, left)
        if (retry is not None or conn.rdy > 0) and (
            left == self.max_in_flight or self._backoff_level > 0
        ):
            self._need_redistribute = True
        if self._stopping:
            return
        for c in list(self.conns.values()):  # the survivors take the share back
            self._maybe_update_rdy(c)
        if self._lookupd_addrs:
            if self._recheck is not None:
                self._recheck.set()
        elif conn.addr in self._nsqd_addrs:
            self._spawn(self._reconnect(conn.addr))

    async def _reconnect(self, addr: str) -> None:
        while not self._stopping and addr in self._nsqd_addrs:
            await asyncio.sleep(self.config.lookupd_poll_interval)
            if self._stopping or addr in self.conns:
                return
            try:
                await self.connect_to_nsqd(addr)
                return
            except (OSError, NSQError) as e:
                log.error("(%s) error connecting to nsqd - %s", addr, e)

    # ------------------------------------------------------------------ connecting

    async def connect_to_nsqd(self, addr: str) -> None:
        """Connect to the nsqd at ``addr`` (TCP "host:port") and SUB; a no-op when connected
        or connecting there already."""
        if self._stopping:
            raise RuntimeError("consumer stopped")
        self._start()
        if addr in self.conns or addr in self._connecting:
            return
        self._connecting.add(addr)
        conn = Conn(addr, self.config, self)
        try:
            await conn.connect()
            if conn.max_rdy < self.max_in_flight:
                log.warning(
                    "(%s) max RDY count %d < consumer max in flight %d, truncation possible",
                    addr,
                    conn.max_rdy,
                    self.max_in_flight,
                )
            await conn.command(b"SUB %s %s\n" % (self.topic.encode(), self.channel.encode()))
        except BaseException:
            conn.close()
            raise
        finally:
            self._connecting.discard(addr)
        if self._stopping or not conn.is_open:
            conn.close()
            return
        self.conns[addr] = conn
        if addr not in self._nsqd_addrs:
            self._nsqd_addrs.append(addr)
        for c in list(self.conns.values()):  # lower the others first
            if c is not conn:
                self._maybe_update_rdy(c)
        self._maybe_update_rdy(conn)

    async def connect_to_nsqds(self, addrs: Sequence[str]) -> None:
        """connect_to_nsqd for each address in turn (the first error is raised)."""
        for a in addrs:
            await self.connect_to_nsqd(a)

    async def connect_to_lookupd(self, addr: str) -> None:
        """Discover the topic's nsqd through the lookupd at ``addr`` (HTTP "host:port" or a
        URL): ask at once, then poll (see the module's docstring). Unreachable lookupds or
        nsqd are logged, not raised."""
        if self._stopping:
            raise RuntimeError("consumer stopped")
        self._start()
        if addr in self._lookupd_addrs:
            return
        self._lookupd_addrs.append(addr)
        if len(self._lookupd_addrs) > 1:
            return
        import aiohttp

        self._session = aiohttp.ClientSession()
        self._recheck = asyncio.Event()
        await self._query_lookupd()
        self._spawn(self._lookupd_loop())

    async def connect_to_lookupds(self, addrs: Sequence[str]) -> None:
        """connect_to_lookupd for each address."""
        for a in addrs:
            await self.connect_to_lookupd(a)

    async def _lookupd_loop(self) -> None:
        cfg = self.config
        await asyncio.sleep(
            self._rng.random() * cfg.lookupd_poll_jitter * cfg.lookupd_poll_interval
        )
        recheck = self._recheck
        assert recheck is not None
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(recheck.wait(), cfg.lookupd_poll_interval)
            recheck.clear()
            if self._stopping:
                return
            await self._query_lookupd()

    async def _query_lookupd(self) -> None:
        cfg = self.config
        addrs: list[str] | None = None
        for _ in range(3):
            endpoint = self._lookupd_addrs[self._lookupd_index % len(self._lookupd_addrs)]
            self._lookupd_index = (self._lookupd_index + 1) % len(self._lookupd_addrs)
            try:
                addrs = await lookup(self._session, endpoint, self.topic, cfg.lookupd_poll_timeout)
                break
            except Exception as e:  # aiohttp's errors, timeouts, bad JSON
                log.error("error querying nsqlookupd (%s) - %s", endpoint, e)
        for addr in addrs or ():
            if addr in self.conns or self._stopping:
                continue
            try:
                await self.connect_to_nsqd(addr)
            except (OSError, NSQError) as e:
                log.error("(%s) error connecting to nsqd - %s", addr, e)

    # ------------------------------------------------------------------ RDY

    def per_conn_max_in_flight(self) -> int:
        """max(1, max_in_flight / connections), at most max_in_flight (go-nsq)."""
        b = self.max_in_flight
        n = len(self.conns) or 1
        return int(min(max(1.0, b / n), b))

    def change_max_in_flight(self, n: int) -> None:
        """Set max_in_flight (0 pauses) and spread it again over the connections."""
        if n == self.max_in_flight:
            return
        self.max_in_flight = n
        for c in list(self.conns.values()):
            self._maybe_update_rdy(c)

    def _maybe_update_rdy(self, conn: Conn) -> None:
        if self._backoff_level > 0 or self._backoff_timer is not None:
            return
        self._update_rdy(conn, self.per_conn_max_in_flight())

    def _update_rdy(self, conn: Conn, count: int) -> None:
        if conn.closing or not conn.is_open:
            return
        count = min(count, conn.max_rdy)
        retry = self._rdy_retry.pop(conn.addr, None)
        if retry is not None:
            retry.cancel()
        rdy = conn.rdy
        max_possible = self.max_in_flight - self._total_rdy + rdy
        if 0 < max_possible < count:
            count = max_possible
        if max_possible <= 0 and count > 0:
            if rdy == 0:  # retry later, so that this connection cannot starve
                self._rdy_retry[conn.addr] = asyncio.get_running_loop().call_later(
                    5.0, self._update_rdy, conn, count
                )
            return
        if count == rdy:
            return
        self._total_rdy += count - rdy
        conn.set_rdy(count)

    async def _rdy_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.config.rdy_redistribute_interval)
            self._redistribute()

    def _redistribute(self) -> None:
        if self._backoff_timer is not None or not self.conns:
            return
        conns = list(self.conns.values())
        if len(conns) > self.max_in_flight:
            self._need_redistribute = True
        if self._backoff_level > 0 and len(conns) > 1:
            self._need_redistribute = True
        if not self._need_redistribute:
            return
        self._need_redistribute = False
        now = asyncio.get_running_loop().time()
        cfg = self.config
        for c in conns:
            if c.rdy > 0 and (
                now - c.last_msg_time > cfg.low_rdy_idle_timeout
                or now - c.last_rdy_time > cfg.low_rdy_timeout
            ):
                self._update_rdy(c, 0)
        available = self.max_in_flight - self._total_rdy
        if self._backoff_level > 0:
            available = 1 - self._total_rdy
        possible = conns[:]
        while possible and available > 0:
            available -= 1
            c = possible.pop(self._rng.randrange(len(possible)))
            self._update_rdy(c, 1)

    # ------------------------------------------------------------------ backoff

    def _backoff_duration(self, level: int) -> float:
        return float(self.config.backoff_multiplier * 2**level)

    def _signal(self, signal: int) -> None:
        if self._backoff_timer is not None or self._stopping:
            return
        level = self._backoff_level
        updated = False
        if signal == _RESUME:
            if level > 0:
                level -= 1
                updated = True
        elif signal == _BACKOFF:
            if self._backoff_duration(level + 1) <= self.config.max_backoff_duration:
                level += 1
                updated = True
        self._backoff_level = level
        if level == 0 and updated:
            count = self.per_conn_max_in_flight()
            log.warning("exiting backoff, returning all to RDY %d", count)
            for c in list(self.conns.values()):
                self._update_rdy(c, count)
        elif level > 0:
            d = min(self._backoff_duration(level), self.config.max_backoff_duration)
            log.warning("backing off for %.3fs (backoff level %d), setting all to RDY 0", d, level)
            for c in list(self.conns.values()):
                self._update_rdy(c, 0)
            self._backoff(d)

    def _backoff(self, seconds: float) -> None:
        self._backoff_timer = asyncio.get_running_loop().call_later(seconds, self._resume)

    def _resume(self) -> None:
        self._backoff_timer = None
        if self._stopping:
            return
        conns = [c for c in self.conns.values() if c.is_open and not c.closing]
        if not conns:
            log.warning("no connection available to resume, backing off for 1s")
            self._backoff(1.0)
            return
        choice = conns[self._rng.randrange(len(conns))]
        log.warning("(%s) backoff timeout expired, sending RDY 1", choice.addr)
        self._update_rdy(choice, 1)

    # ------------------------------------------------------------------ stop, stats

    @property
    def stopped(self) -> bool:
        """Whether stop() was called."""
        return self._stopping

    def stats(self) -> ConsumerStats:
        """The counters now."""
        return ConsumerStats(
            self._received, self._finished, self._requeued, len(self.conns), self._backoff_level
        )

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop: CLS everywhere, let handlers answer the messages in flight, close. After
        ``timeout`` s the connections are closed anyway (their unanswered messages go back to
        nsqd's queue at its msg_timeout... at once, as nsqd requeues a closed client's)."""
        if self._stopping:
            await self._closed.wait()
            return
        self._stopping = True
        for t in list(self._tasks):
            t.cancel()
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
            self._backoff_timer = None
        for h in self._rdy_retry.values():
            h.cancel()
        conns = list(self.conns.values())
        for c in conns:
            self._close_conn(c)
        if conns:
            await asyncio.wait([c.closed for c in conns], timeout=timeout)
        for c in conns:
            c.close()
        if self._queue is not None:
            for runner in self._handlers:
                for _ in range(runner.workers):
                    self._queue.put_nowait(None)
        for runner in self._handlers:
            await runner.stop(timeout)
        if self._session is not None:
            await self._session.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Return once stop() (called from anywhere) has finished: go-nsq's StopChan."""
        await self._closed.wait()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ go-nsq's extras

    def is_starved(self) -> bool:
        """go-nsq's IsStarved: whether some open connection has messages in flight and at
        least 85 % of its RDY count in flight (the handlers are the bottleneck; a batching
        handler should process what it holds)."""
        for c in self.conns.values():
            threshold = int(c.rdy * 0.85)
            if c.in_flight > 0 and c.in_flight >= threshold and not c.closing:
                return True
        return False

    def disconnect_from_nsqd(self, addr: str) -> None:
        """go-nsq's DisconnectFromNSQD: forget ``addr`` (TCP "host:port") and close its
        connection; no redial (with lookupds, a later poll may connect it again, as in
        go-nsq). Its in-flight messages go back to nsqd's queue. ValueError when ``addr`` is
        not one this consumer connected to (go-nsq's ErrNotConnected)."""
        if addr not in self._nsqd_addrs:
            raise ValueError(f"not connected to nsqd {addr}")
        self._nsqd_addrs.remove(addr)
        conn = self.conns.get(addr)
        if conn is not None:
            conn.close()

    def disconnect_from_lookupd(self, addr: str) -> None:
        """go-nsq's DisconnectFromNSQLookupd: stop polling the lookupd at ``addr``. ValueError
        when it is not one of this consumer's lookupds, or is the only one left (go-nsq
        refuses that too: call stop() to end discovery)."""
        if addr not in self._lookupd_addrs:
            raise ValueError(f"not connected to nsqlookupd {addr}")
        if len(self._lookupd_addrs) == 1:
            raise ValueError(
                f"cannot disconnect from only remaining nsqlookupd HTTP address {addr}"
            )
        self._lookupd_addrs.remove(addr)
        self._lookupd_index = 0

    def _close_conn(self, conn: Conn) -> None:
        if not conn.is_open:
            return
        conn.closing = True
        try:
            fut = conn.command(b"CLS\n")
        except ConnectionError:
            return

        def done(f: asyncio.Future[bytes]) -> None:
            if f.cancelled() or f.exception() is not None:
                conn.close()
                return
            conn.close_wait = True
            if conn.in_flight <= 0:
                conn.close()

        fut.add_done_callback(done)
