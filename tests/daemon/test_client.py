"""nsqpy.client against a real nsqpy-d (and nsqpy-lookupd): publish/consume round trips, MPUB
and DPUB, REQ and attempts, max_attempts, go-nsq's backoff (RDY 0, then RDY 1, then back),
manual answers and auto-touch, heartbeats, lookupd discovery with RDY spread over nsqd,
reconnects after nsqd restarts, the producer pool's failover, nsqd's E_* errors, the stop
drain and the blocking wrappers.

RDY is observed on both sides: what the client sent (a spy on Conn.set_rdy) and the
ready_count nsqd reports in /stats. Every wait is bounded and waits on an event."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from support.listeners import RecordingListener

from nsqpy.client import (
    BlockingConsumer,
    BlockingProducer,
    Config,
    Consumer,
    Message,
    NSQError,
    Producer,
    ProducerPool,
)
from nsqpy.testing import wait_for

pytestmark = pytest.mark.asyncio


def fast(**kw) -> Config:
    """A config whose timers suit tests (go-nsq's names)."""
    base = {"backoff_multiplier": 0.05, "default_requeue_delay": 0.0, "lookupd_poll_interval": 0.2}
    base.update(kw)
    return Config(**base)


class Collector:
    """A handler that keeps what it got and sets an event at ``n`` messages."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.msgs: list[Message] = []
        self.done = asyncio.Event()

    def __call__(self, msg: Message) -> None:
        self.msgs.append(msg)
        if len(self.msgs) >= self.n:
            self.done.set()

    async def wait(self, timeout: float = 10) -> None:
        await asyncio.wait_for(self.done.wait(), timeout)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]


def ready_counts(d, topic: str, channel: str) -> list[int]:
    st = d.stats(include_clients="true")
    return [
        cl["ready_count"]
        for t in st["topics"]
        if t["topic_name"] == topic
        for ch in t["channels"]
        if ch["channel_name"] == channel
        for cl in ch["clients"] or []
    ]


def spy_rdy(c: Consumer) -> list[tuple[str, int]]:
    """Record every RDY the consumer's connections send from now on."""
    sent: list[tuple[str, int]] = []
    for conn in c.conns.values():
        orig = conn.set_rdy

        def spy(n: int, conn=conn, orig=orig) -> None:
            sent.append((conn.addr, n))
            orig(n)

        conn.set_rdy = spy  # type: ignore[method-assign]
    return sent


async def test_client_roundtrip_pub_mpub_dpub(nsqd):
    p = Producer(nsqd.tcp_address)
    got = Collector(202)
    c = Consumer("rt", "ch", Config(max_in_flight=50))
    c.add_handler(got)
    await c.connect_to_nsqd(nsqd.tcp_address)
    t0 = time.monotonic()
    await p.deferred_publish("rt", 0.3, b"deferred")
    await p.publish("rt", b"first")
    await p.multi_publish("rt", [b"m%03d" % i for i in range(200)])
    await got.wait()
    assert got.bodies[0] == b"first"
    assert got.bodies[1:201] == [b"m%03d" % i for i in range(200)]
    assert got.bodies[201] == b"deferred" and time.monotonic() - t0 >= 0.25
    m = got.msgs[0]
    assert len(m.id) == 16 and m.attempts == 1 and m.nsqd_address == nsqd.tcp_address
    assert abs(m.timestamp / 1e9 - time.time()) < 60
    await c.stop(5)
    st = c.stats()
    assert (st.received, st.finished, st.requeued, st.connections) == (202, 202, 0, 0)
    assert nsqd.depth("rt", "ch") == 0
    await p.stop()


async def test_client_pipelined_publishes_keep_order(nsqd):
    """Many publishes in flight on one connection: each gets its own answer, in order."""
    p = Producer(nsqd.tcp_address)
    await asyncio.gather(*(p.publish("pipe", b"%d" % i) for i in range(500)))
    assert nsqd.depth("pipe") == 500
    await p.stop()


async def test_client_requeue_and_attempts(nsqd):
    """Raising requeues (default delay × attempts, here 0); the retry comes with attempts 2."""
    seen: list[tuple[bytes, int]] = []
    done = asyncio.Event()

    def handler(msg: Message) -> None:
        seen.append((msg.body, msg.attempts))
        if msg.attempts < 3:
            raise RuntimeError("again")
        done.set()

    c = Consumer("req", "ch", fast(backoff_multiplier=0.0))
    c.add_handler(handler)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("req", b"x")
    await asyncio.wait_for(done.wait(), 10)
    assert seen == [(b"x", 1), (b"x", 2), (b"x", 3)]
    await c.stop(5)
    assert (c.stats().requeued, c.stats().finished) == (2, 1)


async def test_client_max_attempts_finishes_without_handler(nsqd):
    calls: list[int] = []

    def handler(msg: Message) -> None:
        calls.append(msg.attempts)
        raise RuntimeError("always")

    c = Consumer("maxatt", "ch", fast(max_attempts=2, backoff_multiplier=0.0))
    c.add_handler(handler)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("maxatt", b"x")
    await asyncio.to_thread(wait_for, lambda: c.stats().finished == 1, what="give-up FIN")
    assert calls == [1, 2]
    assert c.stats().requeued == 2
    await c.stop(5)
    assert nsqd.depth("maxatt", "ch") == 0


async def test_client_backoff_rdy_zero_then_recovers(nsqd):
    """go-nsq's backoff: a failure sends RDY 0 (nsqd shows ready_count 0) for multiplier × 2
    s; then RDY 1 tests the water; the retry's FIN brings RDY back to max_in_flight."""
    state = {"fail": True}
    got = Collector(2)

    def handler(msg: Message) -> None:
        if state["fail"]:
            state["fail"] = False
            raise RuntimeError("first fails")
        got(msg)

    cfg = fast(max_in_flight=10, backoff_multiplier=0.5, default_requeue_delay=1.5)
    c = Consumer("boff", "ch", cfg)
    c.add_handler(handler)
    await c.connect_to_nsqd(nsqd.tcp_address)
    await asyncio.to_thread(wait_for, lambda: ready_counts(nsqd, "boff", "ch") == [10])
    sent = spy_rdy(c)
    nsqd.pub("boff", b"bad")
    await asyncio.to_thread(wait_for, lambda: c.stats().backoff_level == 1, what="backoff")
    # backoff lasts 0.5 × 2 = 1 s: nsqd sees RDY 0 meanwhile
    await asyncio.to_thread(wait_for, lambda: ready_counts(nsqd, "boff", "ch") == [0])
    nsqd.pub("boff", b"good")
    await got.wait()
    await asyncio.to_thread(wait_for, lambda: c.stats().backoff_level == 0, what="recovery")
    await asyncio.to_thread(wait_for, lambda: ready_counts(nsqd, "boff", "ch") == [10])
    assert [n for _, n in sent] == [0, 1, 10]
    assert sorted(got.bodies) == [b"bad", b"good"]
    await c.stop(5)


async def test_client_manual_response_and_auto_touch(nsqd):
    """disable_auto_response: the handler answers later; auto_touch keeps a message held past
    msg_timeout (1 s) from timing out. Meanwhile an idle producer with heartbeat_interval 1 s
    keeps its connection (nsqd drops a client silent for two intervals) by answering the
    heartbeats."""
    held: list[Message] = []

    async def handler(msg: Message) -> None:
        msg.disable_auto_response()
        held.append(msg)

    c = Consumer("touch", "ch", Config(max_in_flight=5, msg_timeout=1.0, auto_touch=True))
    c.add_handler(handler)
    await c.connect_to_nsqd(nsqd.tcp_address)
    p = Producer(nsqd.tcp_address, Config(heartbeat_interval=1.0))
    await p.publish("touch", b"slow")
    conn = p._conn
    await asyncio.to_thread(wait_for, lambda: len(held) == 1)
    await asyncio.sleep(2.2)  # past two msg_timeouts: only the auto TOUCHes keep it
    await p.publish("hb", b"2")
    assert p._conn is conn and conn is not None and conn.is_open
    await p.stop()
    assert not held[0].has_responded()
    held[0].finish()
    held[0].finish()  # a second answer is a no-op
    await asyncio.to_thread(wait_for, lambda: c.stats().finished == 1)
    st = nsqd.stats()
    (ch,) = [ch for t in st["topics"] for ch in t["channels"] if t["topic_name"] == "touch"]
    assert (ch["timeout_count"], ch["requeue_count"], ch["message_count"]) == (0, 0, 1)
    assert [m.attempts for m in held] == [1]
    await c.stop(5)


async def test_client_errors_are_nsqds(nsqd):
    """nsqd's E_* codes come back as NSQError; the connection is dropped and the next call
    dials again."""
    p = Producer(nsqd.tcp_address)
    with pytest.raises(NSQError) as e:
        await p.publish("bad!topic", b"x")
    assert e.value.code == "E_BAD_TOPIC"
    with pytest.raises(NSQError) as e:
        await p.publish("ok", b"")
    assert e.value.code == "E_BAD_MESSAGE"
    with pytest.raises(NSQError) as e:
        await p.deferred_publish("ok", 7200, b"x")
    assert e.value.code == "E_INVALID"
    await p.publish("ok", b"fine")
    assert nsqd.depth("ok") == 1
    await p.stop()
    with pytest.raises(ValueError):
        Consumer("bad!topic", "ch")


async def test_client_lookupd_discovery_and_rdy_spread(daemon_factory, lookupd):
    """Two nsqd registered with lookupd (listed after a dead lookupd): the consumer finds both,
    splits max_in_flight 8 as 4
    + 4, and reads from both; a third nsqd that appears later is connected at the next poll
    and the split becomes 3/3/2... at most 8 in all."""
    flags = (f"--lookupd-tcp-address={lookupd.tcp_address}", "--broadcast-address=127.0.0.1")
    d1, d2 = daemon_factory(*flags), daemon_factory(*flags)
    d1.pub("disc", b"from1")
    d2.pub("disc", b"from2")
    await asyncio.to_thread(wait_for, lambda: len(lookupd.producers("disc")) == 2)
    got = Collector(2)
    c = Consumer("disc", "ch", fast(max_in_flight=8))
    c.add_handler(got)
    # a dead lookupd first: each poll tries the next lookupd (up to 3 tries), as go-nsq
    await c.connect_to_lookupds([f"127.0.0.1:{_free_port()}", lookupd.http_address])
    await got.wait()
    assert sorted(got.bodies) == [b"from1", b"from2"]
    assert sorted(c.conns) == sorted([d1.tcp_address, d2.tcp_address])
    assert ready_counts(d1, "disc", "ch") == [4] and ready_counts(d2, "disc", "ch") == [4]
    d3 = daemon_factory(*flags)
    d3.pub("disc", b"from3")
    await asyncio.to_thread(wait_for, lambda: len(c.conns) == 3, what="third nsqd")
    await asyncio.wait_for(_until(lambda: len(got.msgs) == 3), 10)
    total = sum(sum(ready_counts(d, "disc", "ch")) for d in (d1, d2, d3))
    assert 3 <= total <= 8
    await c.stop(5)


async def test_client_rdy_redistribution_when_conns_outnumber_max_in_flight(daemon_factory):
    """max_in_flight 1 over two nsqd: never more than RDY 1 in all; the redistribution pass
    takes RDY from the idle connection (low_rdy_idle_timeout 1 s) and gives it to another, so
    messages waiting on either nsqd get read."""
    d1, d2 = daemon_factory(), daemon_factory()
    got = Collector(2)
    cfg = fast(max_in_flight=1, rdy_redistribute_interval=0.05, low_rdy_idle_timeout=1.0)
    c = Consumer("redis", "ch", cfg)
    c.add_handler(got)
    await c.connect_to_nsqd(d1.tcp_address)
    await c.connect_to_nsqd(d2.tcp_address)
    held = {a: conn.rdy for a, conn in c.conns.items()}
    assert sorted(held.values()) == [0, 1]
    sent = spy_rdy(c)
    d1.pub("redis", b"on1")
    d2.pub("redis", b"on2")
    await got.wait(15)
    assert sorted(got.bodies) == [b"on1", b"on2"]
    assert {a for a, _ in sent} == set(held)  # RDY moved to both, one at a time:
    for addr, n in sent:
        held[addr] = n
        assert sum(held.values()) <= 1, sent
    await c.stop(5)


async def _until(pred) -> None:
    while not pred():
        await asyncio.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_client_reconnect_after_nsqd_restart(daemon_factory):
    """nsqd stops and comes back on the same port: the consumer (direct connection) redials
    every lookupd_poll_interval and reads again; the producer's call during the outage fails
    with ConnectionError and the next one after it reconnects."""
    port = _free_port()
    addr = f"127.0.0.1:{port}"
    d = daemon_factory(f"--tcp-address={addr}")
    p = Producer(addr)
    got = Collector(2)
    c = Consumer("rc", "ch", fast())
    c.add_handler(got)
    await c.connect_to_nsqd(addr)
    await p.publish("rc", b"before")
    await asyncio.wait_for(_until(lambda: len(got.msgs) == 1), 10)
    assert await asyncio.to_thread(d.stop) == 0
    await asyncio.wait_for(_until(lambda: not c.conns), 10)
    with pytest.raises(OSError):
        await p.publish("rc", b"lost")
    daemon_factory(f"--tcp-address={addr}")
    await asyncio.wait_for(_until(lambda: len(c.conns) == 1), 10)
    await p.publish("rc", b"after")
    await got.wait()
    assert got.bodies == [b"before", b"after"]
    await c.stop(5)
    await p.stop()


async def test_client_producer_pool_failover(nsqd):
    """A dead nsqd in the pool: publishes go to the live one; an E_* error is not retried."""
    dead = f"127.0.0.1:{_free_port()}"
    pool = ProducerPool([dead, nsqd.tcp_address], Config(dial_timeout=0.5))
    for i in range(6):
        await pool.publish("pool", b"%d" % i)
    await pool.multi_publish("pool", [b"a", b"b"])
    assert nsqd.depth("pool") == 8
    with pytest.raises(NSQError):
        await pool.publish("bad!topic", b"x")
    await pool.stop()
    with pytest.raises(OSError):
        await ProducerPool([dead], Config(dial_timeout=0.5)).publish("pool", b"x")


async def test_client_stop_drains_in_flight(nsqd):
    """stop(): CLS, and the messages already handed to slow async handlers are answered
    (FIN) before the connections close."""
    started = asyncio.Event()
    finished: list[bytes] = []

    async def slow(msg: Message) -> None:
        started.set()
        await asyncio.sleep(0.3)
        finished.append(msg.body)

    c = Consumer("drain", "ch", Config(max_in_flight=4))
    c.add_handler(slow, concurrency=4)
    nsqd.mpub("drain", [b"%d" % i for i in range(4)])
    await c.connect_to_nsqd(nsqd.tcp_address)
    await asyncio.wait_for(started.wait(), 10)
    await c.stop(10)
    assert sorted(finished) == [b"0", b"1", b"2", b"3"]
    assert c.stats().finished == 4
    assert nsqd.depth("drain", "ch") == 0


async def test_client_blocking_wrappers(nsqd):
    """BlockingProducer/BlockingConsumer from plain threads (their loop runs in its own)."""

    def work() -> list[bytes]:
        with BlockingProducer(nsqd.tcp_address, timeout=5) as p:
            p.publish("blk", b"one")
            p.multi_publish("blk", [b"two", b"three"])
            p.deferred_publish("blk", 0.1, b"four")
        out = []
        bc = BlockingConsumer("blk", "ch", Config(max_in_flight=10), timeout=5)
        bc.connect_to_nsqd(nsqd.tcp_address)
        for m in bc.messages(idle=2):
            out.append(m.body)
            if m.body == b"three" and m.attempts == 1:
                m.requeue(0, backoff=False)
            else:
                m.finish()
            if len(out) == 5:
                break
        assert bc.stats().finished == 4
        bc.stop()
        # an nsqd that accepts and never answers: the call's timeout is what ends it
        with RecordingListener() as silent:
            impatient = BlockingProducer(silent.address, Config(dial_timeout=5), timeout=0.5)
            with pytest.raises(TimeoutError):
                impatient.publish("blk_other", b"x")
            assert silent.accepted == 1
            impatient.timeout = 5
            impatient.stop()
        return out

    out = await asyncio.to_thread(work)
    assert sorted(out) == sorted([b"one", b"two", b"three", b"three", b"four"])
    assert nsqd.depth("blk", "ch") == 0
