"""Unit tests of the broker core (channel.py, topic.py, queue_scan.py) with an injected clock.

No sockets and no sleeps: time is a number the test moves, consumers are small objects that
implement channel.Consumer and record what they were sent.
"""

from __future__ import annotations

import random

import pytest

from nsqpy.channel import Channel, ChannelError
from nsqpy.message import Message, encode_record
from nsqpy.options import Options
from nsqpy.queue_scan import QueueScanner
from nsqpy.topic import Topic

MS = 1_000_000  # ns


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * MS

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms * MS


class FakeConsumer:
    """A subscribed client with RDY ``rdy``; keeps what it was sent."""

    def __init__(self, client_id: int, rdy: int = 1, msg_timeout_ms: int = 60_000) -> None:
        self.client_id = client_id
        self.in_ready = False
        self.msg_timeout_ms = msg_timeout_ms
        self.sample_rate = 0
        self.rdy = rdy
        self.in_flight = 0
        self.sent: list[Message] = []
        self.timeouts = 0
        self.closed = False

    def ready_room(self) -> int:
        return max(0, self.rdy - self.in_flight)

    def send_messages(self, msgs: list[Message]) -> None:
        assert len(msgs) <= self.ready_room()
        self.in_flight += len(msgs)
        self.sent += msgs

    def timed_out_message(self) -> None:
        self.in_flight -= 1
        self.timeouts += 1

    def emptied(self) -> None:
        self.in_flight = 0

    def close(self) -> None:
        self.closed = True

    def fin(self, ch: Channel, msg: Message) -> None:
        ch.finish(self, msg.id)
        self.in_flight -= 1
        ch.notify_ready(self)


def record(n: int, body: bytes = b"body") -> bytes:
    return encode_record(1_700_000_000_000_000_000, 0, b"%016x" % n, body)


def channel(clock: Clock, **kw) -> Channel:
    return Channel("t", "c", clock_ns=clock, **kw)


def subscribe(ch: Channel, c: FakeConsumer) -> FakeConsumer:
    ch.add_client(c)
    ch.notify_ready(c)
    return c


# ----------------------------------------------------------------------------- channel


def test_in_flight_timeout_requeues_and_redelivers_with_next_attempt() -> None:
    clock = Clock()
    ch = channel(clock)
    a = subscribe(ch, FakeConsumer(1, rdy=1, msg_timeout_ms=1000))
    ch.put(record(1))
    assert [m.attempts for m in a.sent] == [1]
    clock.advance_ms(999)
    assert ch.process_in_flight() is False
    clock.advance_ms(1)
    assert ch.process_in_flight() is True
    assert (ch.timeout_count, a.timeouts, len(ch.in_flight)) == (1, 1, 0)
    ch.notify_ready(a)  # the client's room came back with the timeout
    assert [m.attempts for m in a.sent] == [1, 2]
    assert a.sent[1].id == a.sent[0].id


def test_touch_restarts_the_timeout_but_not_past_max_msg_timeout() -> None:
    clock = Clock()
    ch = channel(clock, max_msg_timeout_ms=2500)
    a = subscribe(ch, FakeConsumer(1, msg_timeout_ms=1000))
    ch.put(record(1))
    msg = a.sent[0]
    clock.advance_ms(900)
    assert ch.process_in_flight() is False
    ch.touch(a, msg.id, 1000)  # due at delivery + 1900 ms
    clock.advance_ms(900)
    assert ch.process_in_flight() is False
    ch.touch(a, msg.id, 1000)  # delivery + 2800 ms, capped at delivery + 2500 ms
    clock.advance_ms(699)
    assert ch.process_in_flight() is False
    clock.advance_ms(1)
    assert ch.process_in_flight() is True  # capped at delivery + 2500 ms


def test_deferred_message_waits_its_delay() -> None:
    clock = Clock()
    ch = channel(clock)
    a = subscribe(ch, FakeConsumer(1, rdy=5))
    ch.put_deferred(record(1), 500)
    assert a.sent == [] and len(ch.deferred) == 1 and ch.depth == 0
    clock.advance_ms(499)
    assert ch.process_deferred() is False
    clock.advance_ms(1)
    assert ch.process_deferred() is True
    assert [m.attempts for m in a.sent] == [1]


def test_req_without_delay_goes_to_the_tail_and_with_delay_to_deferred() -> None:
    clock = Clock()
    ch = channel(clock)
    a = subscribe(ch, FakeConsumer(1, rdy=1))
    ch.put(record(1))
    ch.put(record(2))
    first = a.sent[0]
    ch.requeue(a, first.id, 0)
    a.in_flight -= 1
    ch.notify_ready(a)
    assert a.sent[1].id == record(2)[10:26]  # message 1 went behind message 2
    ch.requeue(a, a.sent[1].id, 250)
    a.in_flight -= 1
    assert len(ch.deferred) == 1 and ch.requeue_count == 2
    ch.notify_ready(a)
    assert a.sent[2].id == first.id and a.sent[2].attempts == 2
    with pytest.raises(ChannelError, match="ID not in flight"):
        ch.requeue(a, b"0" * 16, 0)


def test_fin_by_another_client_is_refused() -> None:
    clock = Clock()
    ch = channel(clock)
    a = subscribe(ch, FakeConsumer(1))
    b = subscribe(ch, FakeConsumer(2))
    ch.put(record(1))
    holder, other = (a, b) if a.sent else (b, a)
    with pytest.raises(ChannelError, match="client does not own message"):
        ch.finish(other, holder.sent[0].id)
    holder.fin(ch, holder.sent[0])
    assert not ch.in_flight


def test_finish_many_finishes_in_order_and_reports_each_failure() -> None:
    clock = Clock()
    ch = channel(clock)
    a = subscribe(ch, FakeConsumer(1, rdy=3))
    b = subscribe(ch, FakeConsumer(2, rdy=3))
    ch.put_many([record(i) for i in range(6)])
    assert len(a.sent) == len(b.sent) == 3
    mine = [m.id for m in a.sent]
    theirs = b.sent[0].id
    failed = ch.finish_many(a, [mine[0], theirs, b"f" * 16, mine[2], mine[0]])
    assert failed == [
        (theirs, "client does not own message"),
        (b"f" * 16, "ID not in flight"),
        (mine[0], "ID not in flight"),  # finished already, earlier in this run
    ]
    assert set(ch.in_flight) == {mine[1]} | {m.id for m in b.sent}
    assert ch.finish_many(b, [m.id for m in b.sent]) == []
    clock.advance_ms(60_000)  # only what is still in flight times out
    assert ch.process_in_flight() is True
    assert (ch.timeout_count, a.timeouts, b.timeouts) == (1, 1, 0)


def test_backlog_on_disk_is_read_ahead_in_batches_and_still_counted(tmp_path) -> None:
    """A channel reads its disk backlog in batches (READ_AHEAD). What it has read and not yet
    handed out still counts as on disk (depth, backend_depth), is found by locate(), holds the
    read floor (redelivered after a crash), and is written back on a clean exit."""
    from nsqpy.channel import READ_AHEAD
    from nsqpy.diskqueue import DiskQueue

    def backend() -> DiskQueue:
        return DiskQueue("t:c", str(tmp_path), 1 << 20, 26, 1 << 20, 10_000, 2_000)

    n = READ_AHEAD * 3
    ch = channel(Clock(), mem_queue_size=0, backend=backend())
    ch.put_many([record(i) for i in range(n)])
    assert (ch.depth, ch.backend_depth) == (n, n)
    a = subscribe(ch, FakeConsumer(1, rdy=5))
    assert len(a.sent) == 5 and len(ch._reads.ahead) == READ_AHEAD - 5
    assert (ch.depth, ch.backend_depth) == (n - 5, n - 5)
    assert ch.backend is not None and ch.backend.depth == n - READ_AHEAD
    # a message in the read ahead is on disk, at its position in the first data file
    where = ch.locate(b"%016x" % 7)
    assert where is not None and where[0] == "disk" and where[1] == record(7)
    assert where[2] == (0, 7 * (4 + len(record(7))))
    # the read floor is the first message handed out and not finished
    assert ch._reads.floor() == (0, 0, READ_AHEAD)
    a.fin(ch, a.sent[0])  # room for one more: handed out from the read ahead
    assert ch._reads.floor() == (0, 4 + len(record(0)), READ_AHEAD - 1)
    assert [m.id for m in a.sent[-1:]] == [b"%016x" % 5]
    # clean exit: in flight (5) and read ahead go back to disk; nothing is lost
    ch.drain_for_exit()
    ch.backend.close()
    dq = backend()
    ids = []
    while (rec := dq.peek()) is not None:
        ids.append(rec[10:26])
        dq.advance()
    assert sorted(ids) == sorted(b"%016x" % i for i in range(1, n))
    # empty() drops the read ahead too
    dq.close()
    ch = channel(Clock(), mem_queue_size=0, backend=backend())
    ch.put_many([record(i) for i in range(n)])
    subscribe(ch, FakeConsumer(2, rdy=1))
    assert ch._reads.ahead and ch.depth == n - 1
    ch.empty()
    assert (ch.depth, len(ch._reads.ahead), len(ch._reads.ahead_refs)) == (0, 0, 0)


def test_max_channel_consumers() -> None:
    ch = channel(Clock())
    ch.add_client(FakeConsumer(1), max_consumers=2)
    ch.add_client(FakeConsumer(2), max_consumers=2)
    with pytest.raises(ChannelError, match="consumers for t:c exceeds limit of 2"):
        ch.add_client(FakeConsumer(3), max_consumers=2)


def test_a_slow_consumer_does_not_hold_messages_from_a_ready_one() -> None:
    clock = Clock()
    ch = channel(clock)
    slow = subscribe(ch, FakeConsumer(1, rdy=1))
    fast = subscribe(ch, FakeConsumer(2, rdy=100))
    for n in range(50):
        ch.put(record(n))
    assert len(slow.sent) == 1  # it never FINs: its one slot stays taken
    assert len(fast.sent) == 49
    for m in list(fast.sent):
        fast.fin(ch, m)
    assert ch.depth == 0


def test_disconnect_requeues_in_flight_at_once_in_delivery_order() -> None:
    clock = Clock()
    ch = channel(clock)
    a = subscribe(ch, FakeConsumer(1, rdy=3))
    for n in range(3):
        ch.put(record(n))
        clock.advance_ms(1)
    ch.remove_client(a)
    b = subscribe(ch, FakeConsumer(2, rdy=3))
    assert [m.id for m in b.sent] == [m.id for m in a.sent]
    assert ch.requeue_count == 3


def test_memory_past_mem_queue_size_without_backend_is_dropped_as_nsqd() -> None:
    ch = Channel("t", "c#ephemeral", clock_ns=Clock(), mem_queue_size=3)
    for n in range(5):
        ch.put(record(n))
    assert ch.depth == 3 and ch.message_count == 5


# ----------------------------------------------------------------------------- topic


def _topic(clock: Clock) -> Topic:
    return Topic("t", lambda topic, name: Channel(topic.name, name, clock_ns=clock))


def test_topic_holds_messages_until_a_channel_exists_then_copies_to_each() -> None:
    t = _topic(Clock())
    t.put_many([record(1), record(2)])
    assert t.depth == 2
    c1 = t.get_channel("one")
    assert t.depth == 0 and c1.depth == 2
    c2 = t.get_channel("two")
    t.put(record(3))
    assert (c1.depth, c2.depth) == (3, 1)


def test_first_channel_takes_the_held_queue_over_whole() -> None:
    """The first and only channel takes the topic's held memory queue as its own (the same
    records, in order, counted once, findable by ID); the topic is left empty and new
    publishes reach the channel."""
    t = _topic(Clock())
    held = [record(n) for n in range(5000)]  # more than a packed segment
    for i in range(0, len(held), 100):
        t.put_many(held[i : i + 100])
    ch = t.get_channel("c")
    assert (t.depth, ch.depth, ch.message_count) == (0, 5000, 5000)
    assert ch.locate(b"%016x" % 4321) == ("memory", held[4321], None)
    assert t.locate(b"%016x" % 4321) is None
    t.put(record(5000))
    c = subscribe(ch, FakeConsumer(1, rdy=10_000))
    assert [m.record for m in c.sent] == [*held, record(5000)]
    assert t.depth == 0 and ch.depth == 0


@pytest.mark.parametrize("framed", [True, False])
def test_topic_drains_its_diskqueue_into_its_one_channel(tmp_path, framed: bool) -> None:
    """A topic's backlog on disk reaches its one channel, as the chunks read from the file
    (``framed``: the compiled build's way) or as records: into memory while there is room, the
    rest to the channel's diskqueue. Every record once, counted once, findable by ID where it
    lies; they come out whole."""
    from nsqpy.diskqueue import DiskQueue

    def dq(name: str) -> DiskQueue:
        return DiskQueue(name, str(tmp_path), 1 << 20, 26, 1 << 16, 2500, 2000)

    def new_channel(topic: Topic, name: str) -> Channel:
        return Channel("t", name, clock_ns=Clock(), mem_queue_size=1000, backend=dq("t:c"))

    t = Topic("t", new_channel, mem_queue_size=100, backend=dq("t"))
    t.framed_drain = framed
    held = [record(n, b"b%d" % n * (n % 50)) for n in range(3000)]
    for i in range(0, len(held), 250):
        t.put_many(held[i : i + 250])
    assert t.backend is not None and t.backend.depth == 2900
    ch = t.get_channel("c")  # takes the 100 in memory, then the topic's diskqueue
    assert (t.depth, ch.depth, ch.message_count) == (0, 3000, 3000)
    assert len(ch._queue) == 1000 and ch.backend_depth == 2000
    assert [ch._queue.id_at(i) for i in (0, 99, 100, 999)] == [
        b"%016x" % n for n in (0, 99, 100, 999)
    ]
    for n in (0, 100, 101, 555, 999):
        assert ch.locate(b"%016x" % n) == ("memory", held[n], None)
    for n in (1000, 2999):
        where = ch.locate(b"%016x" % n)
        assert where is not None and where[:2] == ("disk", held[n])
    c = subscribe(ch, FakeConsumer(1, rdy=10_000))
    assert sorted(m.record for m in c.sent) == sorted(held)
    assert ch.depth == 0


def test_held_queue_is_copied_when_the_channel_is_not_empty_or_too_small() -> None:
    """A channel that holds records already, or whose memory cannot take the whole held
    queue, gets the records as a publish would (no takeover)."""
    clock = Clock()
    ch = channel(clock)
    ch.put(record(0))
    t = Topic("t", lambda topic, name: ch)
    t.put_many([record(1), record(2)])
    assert not ch.adopt_queue(t)
    t.get_channel("c")
    assert (t.depth, ch.depth, ch.message_count) == (0, 3, 3)
    small = channel(clock, mem_queue_size=1)
    t2 = Topic("t2", lambda topic, name: small)
    t2.put_many([record(3), record(4)])
    assert not small.adopt_queue(t2)
    assert len(t2._queue) == 2


def test_topic_pause_and_starting_hold_messages() -> None:
    t = _topic(Clock())
    c = t.get_channel("c")
    t.pause()
    t.put(record(1))
    assert (t.depth, c.depth) == (1, 0)
    t.unpause()
    assert (t.depth, c.depth) == (0, 1)
    t.starting = True  # waiting for lookupd's channel list
    t.put(record(2))
    assert (t.depth, c.depth) == (1, 1)
    t.start()
    assert (t.depth, c.depth) == (0, 2)


# ----------------------------------------------------------------------------- queue scan


def _scanner(selection: int = 20) -> QueueScanner:
    opts = Options()
    opts.queue_scan_selection_count = selection
    return QueueScanner(opts, list, lambda: 0, rng=random.Random(7))


def test_scan_pass_processes_due_timeouts_of_the_sampled_channels() -> None:
    clock = Clock()
    chans = []
    for _ in range(4):
        ch = channel(clock)
        c = subscribe(ch, FakeConsumer(1, msg_timeout_ms=100))
        ch.put(record(1))
        chans.append((ch, c))
    clock.advance_ms(100)
    picked, dirty = _scanner().scan_once([ch for ch, _ in chans])
    assert (picked, dirty) == (4, 4)
    assert all(ch.timeout_count == 1 for ch, _ in chans)


def test_scan_repeats_while_more_than_a_quarter_was_dirty() -> None:
    s = _scanner()
    assert s.again(20, 6) is True  # 30% > 25%
    assert s.again(20, 5) is False  # exactly 25%: nsqd stops
    assert s.again(0, 0) is False


def test_scan_samples_at_most_selection_count_channels() -> None:
    clock = Clock()
    chans = [channel(clock) for _ in range(50)]
    picked = _scanner(selection=20).pick(chans)
    assert len(picked) == 20 and len(set(map(id, picked))) == 20


# ----------------------------------------------------------------------------- dead letters


def test_dead_letter_after_max_attempts_for_req_timeout_and_disconnect() -> None:
    clock = Clock()
    ch = channel(clock)
    dead: list[bytes] = []
    ch.set_dead_letter(2, lambda c, records: dead.extend(records) or True)
    a = subscribe(ch, FakeConsumer(1, rdy=3, msg_timeout_ms=100))
    for n in range(3):
        ch.put(record(n))
    # first delivery of each: REQ one, let one time out, keep one for the disconnect
    req, late, held = a.sent
    ch.requeue(a, req.id, 0)
    a.in_flight -= 1
    clock.advance_ms(100)
    ch.touch(a, held.id, 1000)
    ch.process_in_flight()  # `late` times out: attempt 1 < 2, back in the queue
    ch.notify_ready(a)
    second = {m.id: m for m in a.sent[3:]}
    assert set(second) == {req.id, late.id} and all(m.attempts == 2 for m in second.values())
    ch.requeue(a, req.id, 0)  # attempt 2 used up: dead, not requeued
    clock.advance_ms(100)
    ch.process_in_flight()  # `late` times out at attempt 2: dead too
    ch.remove_client(a)  # `held` (attempt 1) goes back to the queue
    assert [r[10:26] for r in dead] == [req.id, late.id]
    assert [int.from_bytes(r[8:10], "big") for r in dead] == [2, 2]  # attempts kept
    assert ch.dead_letter_count == 2 and ch.depth == 1


def test_dead_letter_refused_keeps_the_message() -> None:
    clock = Clock()
    ch = channel(clock)
    ch.set_dead_letter(1, lambda c, records: False)
    a = subscribe(ch, FakeConsumer(1, rdy=1))
    ch.put(record(1))
    ch.requeue(a, a.sent[0].id, 0)
    assert ch.dead_letter_count == 0 and ch.depth == 1
