"""nsqpy.client against a real nsqpy-d, for the habits users bring from pynsq, gnsq and go-nsq:
a handler returning False requeues (pynsq), None/True finishes (go-nsq, gnsq), raising
requeues; giving_up runs before the give-up FIN and max_attempts=0 never gives up;
enable_async() with answers from another thread; plain handlers with concurrency=N run in N
threads, so blocking handlers neither serialize nor starve heartbeats; names and bodies nsqd
would refuse are refused before a byte is written; and the lifecycle (async with,
wait_closed, is_starved, disconnect_from_nsqd/lookupd, the blocking wrappers as context
managers).

Concurrency is proven with a threading.Barrier and a max-concurrency counter, never with a
tight clock; "nothing written" with a listener that records every byte, or nsqd's /stats."""

from __future__ import annotations

import asyncio
import threading
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
)
from nsqpy.client.checks import InvalidNameError, MessageTooBigError
from nsqpy.testing import wait_for

pytestmark = pytest.mark.asyncio


def fast(**kw) -> Config:
    """Timers that suit tests (go-nsq's names): no requeue delay, short backoff."""
    base = {"backoff_multiplier": 0.05, "default_requeue_delay": 0.0}
    base.update(kw)
    return Config(**base)


def channel_stats(d, topic: str, channel: str) -> dict:
    (ch,) = [
        ch
        for t in d.stats()["topics"]
        if t["topic_name"] == topic
        for ch in t["channels"]
        if ch["channel_name"] == channel
    ]
    return ch


async def until(pred, timeout: float = 15, what: str = "condition") -> None:
    await asyncio.to_thread(wait_for, pred, timeout, what=what)


# ---------------------------------------------------------------------------- handler contract


async def test_client_handler_false_requeues_none_and_true_finish(nsqd):
    """pynsq's habit (return False: REQ) and go-nsq's (return None: FIN) both hold; False
    also backs off, as a raise does."""
    seen: list[tuple[bytes, int]] = []

    def handler(msg: Message):
        seen.append((msg.body, msg.attempts))
        if msg.body == b"false" and msg.attempts == 1:
            return False
        return None if msg.body == b"none" else True

    c = Consumer("ret", "ch", fast(max_in_flight=5))
    c.add_handler(handler)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.mpub("ret", [b"none", b"true", b"false"])
    await until(lambda: c.stats().finished == 3, what="three FINs")
    st = c.stats()
    assert (st.received, st.finished, st.requeued) == (4, 3, 1)
    assert sorted(seen) == [(b"false", 1), (b"false", 2), (b"none", 1), (b"true", 1)]
    await c.stop(5)
    ch = channel_stats(nsqd, "ret", "ch")
    assert (ch["requeue_count"], ch["depth"], ch["in_flight_count"]) == (1, 0, 0)


@pytest.mark.parametrize("hook_kind", ["sync", "async"])
async def test_client_giving_up_runs_before_the_fin(nsqd, hook_kind):
    """max_attempts 2: deliveries 1 and 2 reach the handler (which raises); delivery 3 does
    not: giving_up(msg) runs (sync or async), and only then is the message FINed."""
    calls: list[int] = []
    gave_up: list[tuple[int, int, bool]] = []

    def handler(msg: Message) -> None:
        calls.append(msg.attempts)
        raise RuntimeError("always")

    def note(msg: Message) -> None:
        gave_up.append((msg.attempts, c.stats().finished, msg.has_responded()))

    async def async_hook(msg: Message) -> None:
        await asyncio.sleep(0.05)
        note(msg)

    c = Consumer("giveup_" + hook_kind, "ch", fast(max_attempts=2, backoff_multiplier=0.0))
    c.add_handler(handler, giving_up=note if hook_kind == "sync" else async_hook)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("giveup_" + hook_kind, b"x")
    await until(lambda: c.stats().finished == 1, what="give-up FIN")
    assert calls == [1, 2]
    assert gave_up == [(3, 0, False)]  # before the FIN, not yet answered
    await c.stop(5)
    assert nsqd.depth("giveup_" + hook_kind, "ch") == 0


async def test_client_giving_up_with_thread_handlers(nsqd):
    """The same with a threaded handler: a plain hook runs in the handler's pool."""
    threads: list[str] = []

    def handler(msg: Message) -> bool:
        return False

    def hook(msg: Message) -> None:
        threads.append(threading.current_thread().name)

    c = Consumer("giveup_thr", "ch", fast(max_attempts=1, backoff_multiplier=0.0))
    c.add_handler(handler, concurrency=2, giving_up=hook)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("giveup_thr", b"x")
    await until(lambda: c.stats().finished == 1, what="give-up FIN")
    assert len(threads) == 1 and threads[0].startswith("nsqpy-handler")
    assert c.stats().requeued == 1
    await c.stop(5)


async def test_client_max_attempts_zero_never_gives_up(nsqd):
    """max_attempts=0 (go-nsq): a message failing 7 times (past the default 5) still reaches
    the handler each time, and no giving_up runs."""
    calls: list[int] = []
    gave_up: list[Message] = []

    def handler(msg: Message) -> bool:
        calls.append(msg.attempts)
        return msg.attempts > 7

    c = Consumer("never", "ch", fast(max_attempts=0, backoff_multiplier=0.0))
    c.add_handler(handler, giving_up=gave_up.append)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("never", b"x")
    await until(lambda: c.stats().finished == 1, what="FIN on attempt 8")
    assert calls == list(range(1, 9)) and gave_up == []
    await c.stop(5)


async def test_client_enable_async_answers_from_another_thread(nsqd):
    """enable_async() (pynsq/gnsq's name): returning (even False) answers nothing; the
    message is finished later from a plain thread."""
    held: list[Message] = []

    def handler(msg: Message) -> bool:
        msg.enable_async()
        held.append(msg)
        return False  # ignored: the handler answers by hand

    c = Consumer("async_ans", "ch", fast(max_in_flight=2))
    c.add_handler(handler)
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("async_ans", b"x")
    await until(lambda: len(held) == 1)
    m = held[0]
    assert m.is_async() and m.is_auto_response_disabled() and not m.has_responded()
    assert channel_stats(nsqd, "async_ans", "ch")["in_flight_count"] == 1
    t = threading.Thread(target=lambda: (m.touch(), m.finish()))
    t.start()
    t.join(10)
    await until(lambda: c.stats().finished == 1, what="FIN from the thread")
    assert c.stats().requeued == 0
    await c.stop(5)
    assert nsqd.depth("async_ans", "ch") == 0


async def test_client_sync_handler_returning_a_coroutine_is_awaited(nsqd):
    """A plain lambda that calls an async function: its coroutine is awaited, then answered
    by what it returned (False: REQ), not dropped unawaited."""
    results: list[int] = []

    async def work(msg: Message) -> bool:
        await asyncio.sleep(0)
        results.append(msg.attempts)
        return msg.attempts > 1

    c = Consumer("coro_ret", "ch", fast(backoff_multiplier=0.0))
    c.add_handler(lambda m: work(m))
    await c.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("coro_ret", b"x")
    await until(lambda: c.stats().finished == 1)
    assert results == [1, 2] and c.stats().requeued == 1
    await c.stop(5)


# ---------------------------------------------------------------------------- threads


async def test_client_sync_handlers_run_in_n_threads(nsqd):
    """8 plain handlers of 0.2 s with concurrency=4: four run at once (a Barrier(4) only
    opens when four are inside; a max-concurrency counter reaches 4 and never 5), on
    threads other than the loop's, and the loop keeps ticking meanwhile."""
    barrier = threading.Barrier(4, timeout=30)
    lock = threading.Lock()
    state = {"now": 0, "max": 0}
    loop_thread = threading.get_ident()
    handler_threads: set[int] = set()

    def handler(msg: Message) -> None:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            handler_threads.add(threading.get_ident())
        try:
            barrier.wait()  # BrokenBarrierError (REQ) if fewer than 4 ever run together
            time.sleep(0.2)
        finally:
            with lock:
                state["now"] -= 1

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    c = Consumer("threads", "ch", fast(max_in_flight=8))
    c.add_handler(handler, concurrency=4)
    nsqd.mpub("threads", [b"%d" % i for i in range(8)])
    tick_task = asyncio.create_task(ticker())
    t0 = time.monotonic()
    await c.connect_to_nsqd(nsqd.tcp_address)
    await until(lambda: c.stats().finished == 8, what="8 FINs")
    elapsed = time.monotonic() - t0
    tick_task.cancel()
    print(f"8 handlers of 0.2 s, concurrency 4: {elapsed:.3f} s, loop ticks {ticks}")
    assert state["max"] == 4
    assert c.stats().requeued == 0 and not barrier.broken
    assert loop_thread not in handler_threads and 1 <= len(handler_threads) <= 4
    assert ticks > 5  # the loop ran while the handlers slept
    assert elapsed < 30  # wide: 8 × 0.2 s one at a time would be 1.6 s; this only bounds hangs
    await c.stop(5)
    assert nsqd.depth("threads", "ch") == 0


async def test_client_blocking_handlers_keep_the_connection(nsqd):
    """heartbeat_interval 1 s; two handlers each block 3.5 s (nsqd drops a client that misses
    two heartbeats, i.e. silent for 2 s): in threads the loop answers every heartbeat, the
    same connection stays up and both messages are FINed; nsqd saw no timeout."""
    started = threading.Event()

    def handler(msg: Message) -> None:
        started.set()
        time.sleep(3.5)

    cfg = fast(max_in_flight=2, heartbeat_interval=1.0, read_timeout=5.0)
    c = Consumer("hb_block", "ch", cfg)
    c.add_handler(handler, concurrency=2)
    nsqd.mpub("hb_block", [b"a", b"b"])
    await c.connect_to_nsqd(nsqd.tcp_address)
    conn = c.conns[nsqd.tcp_address]
    await asyncio.to_thread(started.wait, 15)
    await until(lambda: c.stats().finished == 2, timeout=30, what="2 FINs")
    assert c.conns.get(nsqd.tcp_address) is conn and conn.is_open
    ch = channel_stats(nsqd, "hb_block", "ch")
    assert (ch["timeout_count"], ch["requeue_count"], ch["depth"]) == (0, 0, 0)
    assert c.stats().received == 2
    await c.stop(5)


# ---------------------------------------------------------------------------- validation


async def test_client_refuses_bad_names_and_bodies_before_any_byte():
    """A name with a space or a newline, or a str body: refused at the call, and the
    listener standing in for nsqd never even sees a connection."""
    with RecordingListener() as rec:
        p = Producer(rec.address, Config(dial_timeout=2))
        for bad in ("has space", "new\nline", "", "x" * 65, "a#b"):
            with pytest.raises(ValueError, match=r"invalid topic name .*the rule: 1 to 64"):
                await p.publish(bad, b"x")
        with pytest.raises(InvalidNameError) as e:
            await p.multi_publish("sp ace", [b"x"])
        assert e.value.code == "E_BAD_TOPIC" and isinstance(e.value, NSQError)
        with pytest.raises(TypeError, match=r"not str: encode it first, e\.g\. body\.encode"):
            await p.publish("ok", "a str body")
        with pytest.raises(TypeError, match="not str"):
            await p.deferred_publish("ok", 1.0, "a str body")
        with pytest.raises(TypeError, match="not str"):
            await p.multi_publish("ok", [b"fine", "not fine"])
        with pytest.raises(TypeError, match="sequence of bodies"):
            await p.multi_publish("ok", b"one body")
        with pytest.raises(ValueError, match="invalid channel name 'bad ch'.*' ' at position 3"):
            Consumer("ok", "bad ch")
        await p.stop()
        assert rec.accepted == 0 and bytes(rec.received) == b""


async def test_client_bad_name_leaves_pipelined_publishes_alone(nsqd):
    """Against nsqd: a bad topic in the middle of pipelined publishes fails alone (nsqd would
    have closed the connection and failed them all); nsqd never hears of the topic."""
    p = Producer(nsqd.tcp_address)
    await p.publish("good", b"0")
    conn = p._conn
    results = await asyncio.gather(
        p.publish("good", b"1"),
        p.publish("bad topic\n", b"2"),
        p.publish("good", b"3"),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], InvalidNameError)
    assert p._conn is conn and conn is not None and conn.is_open
    assert nsqd.depth("good") == 3
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == ["good"]
    await p.stop()


async def test_client_size_limits_from_config_and_from_nsqd(daemon_factory):
    """nsqd with --max-msg-size=100: with Config(max_msg_size=100) an oversized body is
    refused before sending and the connection stays up; without it the first one reaches
    nsqd (E_BAD_MESSAGE, connection closed) and the producer then knows the limit and
    refuses the next one itself."""
    d = daemon_factory("--max-msg-size=100")
    async with Producer(d.tcp_address, Config(max_msg_size=100)) as p:
        await p.publish("sz", b"x" * 100)
        conn = p._conn
        with pytest.raises(MessageTooBigError) as e:
            await p.publish("sz", b"x" * 101)
        assert (e.value.code, e.value.size, e.value.limit) == ("E_BAD_MESSAGE", 101, 100)
        with pytest.raises(MessageTooBigError):
            await p.deferred_publish("sz", 0.1, b"x" * 101)
        assert p._conn is conn and conn is not None and conn.is_open
        await p.publish("sz", b"ok")
    assert d.depth("sz") == 2
    async with Producer(d.tcp_address) as p2:
        assert p2.max_msg_size == 0
        with pytest.raises(NSQError) as e2:
            await p2.publish("sz", b"y" * 150)
        assert e2.value.code == "E_BAD_MESSAGE" and not isinstance(e2.value, MessageTooBigError)
        assert p2.max_msg_size == 100  # learned from nsqd's "too big 150 > 100"
        with pytest.raises(MessageTooBigError):
            await p2.publish("sz", b"y" * 150)
        await p2.publish("sz", b"fits")
    assert d.depth("sz") == 3


async def test_client_limits_from_the_identify_answer():
    """An nsqd that announces max_msg_size and max_body_size in its IDENTIFY answer: bodies
    and MPUB totals over them are refused after the handshake and before the PUB/MPUB; not
    one byte follows the IDENTIFY."""
    with RecordingListener({"max_rdy_count": 2500, "max_msg_size": 10, "max_body_size": 40}) as rec:
        p = Producer(rec.address, Config(dial_timeout=5))
        with pytest.raises(MessageTooBigError) as e:
            await p.publish("t", b"z" * 11)
        assert rec.handshakes == 1 and e.value.limit == 10
        assert (p.max_msg_size, p.max_body_size) == (10, 40)
        with pytest.raises(MessageTooBigError) as e:
            await p.multi_publish("t", [b"z" * 10] * 3)  # 4 + 3 × 14 = 46 > 40
        assert (e.value.code, e.value.size) == ("E_BAD_BODY", 46)
        with pytest.raises(MessageTooBigError):
            await p.multi_publish("t", [b"z", b"z" * 11])
        assert bytes(rec.received) == b""
        await p.stop()


# ---------------------------------------------------------------------------- lifecycle


async def test_client_async_with_and_wait_closed(nsqd):
    """async with stops both on exit; wait_closed() returns once a stop from elsewhere (here
    the handler itself) has finished."""
    got: list[bytes] = []
    async with Producer(nsqd.tcp_address) as p:
        await p.publish("life", b"1")
    assert not p.connected
    with pytest.raises(ConnectionError):
        await p.publish("life", b"after stop")

    async with Consumer("life", "ch", fast()) as c:
        c.add_handler(lambda m: got.append(m.body))
        await c.connect_to_nsqd(nsqd.tcp_address)
        await until(lambda: got == [b"1"])
    assert c.stopped and c.stats().connections == 0

    c2 = Consumer("life", "ch2", fast())
    stopper: list[asyncio.Task] = []

    async def handler(msg: Message) -> None:
        stopper.append(asyncio.create_task(c2.stop(5)))

    c2.add_handler(handler)
    await c2.connect_to_nsqd(nsqd.tcp_address)
    nsqd.pub("life", b"2")
    await asyncio.wait_for(c2.wait_closed(), 20)
    assert c2.stopped and c2.stats().connections == 0 and len(stopper) == 1
    await c2.stop()  # a second stop returns at once


async def test_client_is_starved_and_disconnect_from_nsqd(daemon_factory):
    """is_starved: true while 85 % of a connection's RDY is in flight; disconnect_from_nsqd
    closes that connection for good (no redial), the other keeps reading."""
    d1, d2 = daemon_factory(), daemon_factory()
    held: list[Message] = []

    def handler(msg: Message) -> None:
        msg.enable_async()
        held.append(msg)

    c = Consumer("starve", "ch", fast(max_in_flight=4, lookupd_poll_interval=0.2))
    c.add_handler(handler)
    await c.connect_to_nsqds([d1.tcp_address, d2.tcp_address])
    assert not c.is_starved()
    d1.mpub("starve", [b"a", b"b"])  # RDY 2 on each connection: 2 in flight is 100 %
    await until(lambda: len(held) == 2)
    assert c.is_starved()
    for m in held:
        m.finish()
    await until(lambda: not c.is_starved(), what="not starved after FIN")
    with pytest.raises(ValueError, match="not connected"):
        c.disconnect_from_nsqd("127.0.0.1:1")
    c.disconnect_from_nsqd(d1.tcp_address)
    await until(lambda: list(c.conns) == [d2.tcp_address], what="d1 dropped")
    await asyncio.sleep(0.6)  # three redial intervals: d1 stays disconnected
    assert list(c.conns) == [d2.tcp_address]
    d2.pub("starve", b"c")
    await until(lambda: len(held) == 3)
    held[2].finish()
    await c.stop(5)


async def test_client_disconnect_from_lookupd(lookupd):
    c = Consumer("lk", "ch", fast(lookupd_poll_interval=0.2))
    c.add_handler(lambda m: None)
    await c.connect_to_lookupd(lookupd.http_address)
    with pytest.raises(ValueError, match="only remaining"):
        c.disconnect_from_lookupd(lookupd.http_address)
    with pytest.raises(ValueError, match="not connected"):
        c.disconnect_from_lookupd("127.0.0.1:1")
    await c.connect_to_lookupd("127.0.0.1:2")
    c.disconnect_from_lookupd("127.0.0.1:2")
    assert c._lookupd_addrs == [lookupd.http_address]
    await c.stop(5)


async def test_client_blocking_wrappers_as_context_managers(nsqd):
    def work() -> list[bytes]:
        with BlockingProducer(nsqd.tcp_address, timeout=5) as p:
            p.publish("blkcm", b"one")
            with pytest.raises(TypeError, match="encode"):
                p.publish("blkcm", "two")  # type: ignore[arg-type]
        p.stop()  # a second stop is a no-op
        out = []
        with BlockingConsumer("blkcm", "ch", Config(max_in_flight=2), timeout=5) as bc:
            bc.connect_to_nsqd(nsqd.tcp_address)
            m = bc.get(10)
            assert m is not None
            out.append(m.body)
            m.finish()
        bc.stop()
        return out

    assert await asyncio.to_thread(work) == [b"one"]
    assert nsqd.depth("blkcm", "ch") == 0


async def test_client_inline_handler_that_blocks_is_pointed_at_threads(nsqd, caplog):
    """A plain handler added without concurrency runs on the loop; one that blocks for more
    than a quarter of the heartbeat interval is logged once, naming the fix."""

    def slow(msg: Message) -> None:
        time.sleep(0.5)

    c = Consumer("slow_inline", "ch", fast(heartbeat_interval=1.0, max_in_flight=2))
    c.add_handler(slow)
    nsqd.mpub("slow_inline", [b"a", b"b"])
    with caplog.at_level("WARNING", logger="nsqpy.client"):
        await c.connect_to_nsqd(nsqd.tcp_address)
        await until(lambda: c.stats().finished == 2)
    warned = [r.getMessage() for r in caplog.records if "held the event loop" in r.getMessage()]
    assert len(warned) == 1 and "concurrency=N" in warned[0]
    await c.stop(5)
