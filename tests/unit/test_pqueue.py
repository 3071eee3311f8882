"""Unit and property tests for nsqpy.pqueue.TimeoutQueue."""

from __future__ import annotations

import ast
import itertools
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from nsqpy.message import Message, encode_record
from nsqpy.pqueue import InFlightQueue, TimeoutQueue


def Item(name: int | str) -> Message:  # noqa: N802  (reads as the item it makes)
    """A message standing for the item ``name`` (the queues hold message.Message objects; the
    name is its body, read back by ``name_of``)."""
    return Message(encode_record(0, 0, b"0" * 16, repr(name).encode()))


def name_of(m: Message) -> Any:
    return ast.literal_eval(m.body.decode())


class Model:
    """The obvious reference: item -> (pri, insertion seq), ordered by (pri, seq)."""

    def __init__(self) -> None:
        self.entries: dict[Item, tuple[int, int]] = {}
        self.seq = itertools.count()

    def push(self, item: Item, pri: int) -> None:
        self.entries[item] = (pri, next(self.seq))

    def remove(self, item: Item) -> bool:
        return self.entries.pop(item, None) is not None

    def ordered(self) -> list[Item]:
        return sorted(self.entries, key=self.entries.__getitem__)

    def pop_due(self, now: int) -> list[Item]:
        due = [i for i in self.ordered() if self.entries[i][0] <= now]
        for i in due:
            del self.entries[i]
        return due

    def peek_pri(self) -> int | None:
        return min((p for p, _ in self.entries.values()), default=None)


# --------------------------------------------------------------------------------------------
# Examples


def test_empty_queue() -> None:
    q = TimeoutQueue()
    assert len(q) == 0
    assert q.peek_pri() is None
    assert q.pop_due(10**18) == []
    assert q.items() == []
    assert q.clear() == []


def test_push_pop_in_priority_order() -> None:
    q = TimeoutQueue()
    a, b, c = Item("a"), Item("b"), Item("c")
    q.push(b, 20)
    q.push(c, 30)
    q.push(a, 10)
    assert len(q) == 3
    assert q.peek_pri() == 10
    assert a.pq_entry is not None
    assert q.pop_due(9) == []
    assert q.pop_due(20) == [a, b]
    assert a.pq_entry is None and b.pq_entry is None
    assert len(q) == 1
    assert q.peek_pri() == 30
    assert q.pop_due(100) == [c]
    assert len(q) == 0
    assert q.peek_pri() is None


def test_ties_in_insertion_order() -> None:
    q = TimeoutQueue()
    items = [Item(i) for i in range(50)]
    for it in items:
        q.push(it, 5)
    assert q.pop_due(5) == items


def test_repush_reprioritises() -> None:
    q = TimeoutQueue()
    a, b = Item("a"), Item("b")
    q.push(a, 10)
    q.push(b, 20)
    q.push(a, 30)  # later than b now
    assert len(q) == 2
    assert q.peek_pri() == 20
    assert q.pop_due(25) == [b]
    assert q.pop_due(100) == [a]  # a comes out once, not twice
    assert len(q) == 0


def test_repush_same_priority_moves_to_back_of_ties() -> None:
    q = TimeoutQueue()
    a, b = Item("a"), Item("b")
    q.push(a, 1)
    q.push(b, 1)
    q.push(a, 1)
    assert q.pop_due(1) == [b, a]


def test_remove() -> None:
    q = TimeoutQueue()
    a, b = Item("a"), Item("b")
    q.push(a, 1)
    q.push(b, 2)
    assert q.remove(a) is True
    assert a.pq_entry is None
    assert q.remove(a) is False
    assert q.remove(Item("never")) is False
    assert len(q) == 1
    assert q.peek_pri() == 2  # the stale entry for a is skipped
    assert q.pop_due(10) == [b]
    assert q.remove(b) is False  # popped items are in no queue


def test_items_and_clear() -> None:
    q = TimeoutQueue()
    its = [Item(i) for i in range(10)]
    for i, it in enumerate(its):
        q.push(it, 100 - i)
    q.remove(its[3])
    q.push(its[4], 7)
    assert sorted(q.items(), key=lambda x: name_of(x)) == [x for x in its if x is not its[3]]
    cleared = q.clear()
    assert sorted(cleared, key=lambda x: name_of(x)) == [x for x in its if x is not its[3]]
    assert all(x.pq_entry is None for x in its)
    assert len(q) == 0
    assert q.items() == []
    assert q.peek_pri() is None
    # the queue is usable after clear, and cleared items can be pushed again
    q.push(its[0], 1)
    assert q.pop_due(1) == [its[0]]


def test_negative_and_huge_priorities() -> None:
    q = TimeoutQueue()
    a, b = Item("a"), Item("b")
    q.push(a, 2**62)
    q.push(b, -5)
    assert q.pop_due(0) == [b]
    assert q.pop_due(2**62) == [a]


def test_compaction_bounds_heap_after_many_removes() -> None:
    q = TimeoutQueue()
    items = [Item(i) for i in range(5000)]
    for i, it in enumerate(items):
        q.push(it, i)
    assert len(q._heap) == 5000
    for it in items[:4900]:
        assert q.remove(it)
        # after each push/remove the heap holds at most max(1024, 2 * live) entries
        assert len(q._heap) <= max(1024, 2 * len(q))
    assert len(q) == 100
    assert len(q._heap) < 5000  # compaction happened
    assert q.peek_pri() == 4900
    assert q.pop_due(10**9) == items[4900:]
    assert len(q) == 0


def test_compaction_by_repush_keeps_order() -> None:
    q = TimeoutQueue()
    items = [Item(i) for i in range(300)]
    rng = random.Random(7)
    model = Model()
    for _ in range(4000):  # re-pushes leave stale entries behind
        it = rng.choice(items)
        pri = rng.randrange(1000)
        q.push(it, pri)
        model.push(it, pri)
        assert len(q._heap) <= max(1024, 2 * len(q))
    assert len(q) == len(model.entries) == len({id(x) for x in q.items()})
    assert q.pop_due(500) == model.pop_due(500)
    assert q.pop_due(10**6) == model.pop_due(10**6)


# --------------------------------------------------------------------------------------------
# Random operation sequences against the model

ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 60), st.integers(-50, 1000)),
        st.tuples(st.just("remove"), st.integers(0, 60), st.just(0)),
        st.tuples(st.just("pop"), st.just(0), st.integers(-60, 1100)),
        st.tuples(st.just("peek"), st.just(0), st.just(0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None, database=None)
@given(ops)
def test_random_ops_match_model(seq) -> None:
    q = TimeoutQueue()
    m = Model()
    items = [Item(i) for i in range(61)]
    for op, idx, val in seq:
        if op == "push":
            q.push(items[idx], val)
            m.push(items[idx], val)
        elif op == "remove":
            assert q.remove(items[idx]) is m.remove(items[idx])
        elif op == "pop":
            assert q.pop_due(val) == m.pop_due(val)
        elif op == "peek":
            assert q.peek_pri() == m.peek_pri()
        else:
            assert set(map(id, q.clear())) == set(map(id, m.entries))
            m.entries.clear()
        assert len(q) == len(m.entries)
        for it in items:
            assert (it.pq_entry is not None) is (it in m.entries)
    assert q.pop_due(10**9) == m.ordered()


@settings(max_examples=30, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=1100, max_value=3000))
def test_many_removes_trigger_compaction_and_match_model(seed: int, n: int) -> None:
    rng = random.Random(seed)
    q = TimeoutQueue()
    m = Model()
    items = [Item(i) for i in range(n)]
    for it in items:
        pri = rng.randrange(100)
        q.push(it, pri)
        m.push(it, pri)
    heap_peak = len(q._heap)
    assert heap_peak == n
    victims = rng.sample(items, n - rng.randrange(1, 200))
    for it in victims:
        assert q.remove(it) is True
        m.remove(it)
        assert len(q._heap) <= max(1024, 2 * len(q))
    assert len(q._heap) < heap_peak  # the heap was rebuilt from live entries
    assert len(q) == len(m.entries)
    for _ in range(50):
        it = rng.choice(items)
        pri = rng.randrange(100)
        q.push(it, pri)
        m.push(it, pri)
    assert q.peek_pri() == m.peek_pri()
    assert q.pop_due(50) == m.pop_due(50)
    assert q.pop_due(1000) == m.ordered()


# --------------------------------------------------------------------------------------------
# Stateful test


class TimeoutQueueMachine(RuleBasedStateMachine):
    items = Bundle("items")

    @initialize()
    def setup(self) -> None:
        self.q = TimeoutQueue()
        self.m = Model()
        self.all: list[Item] = []
        self.counter = itertools.count()

    @rule(target=items)
    def new_item(self) -> Item:
        it = Item(next(self.counter))
        self.all.append(it)
        return it

    def heap_bounded(self) -> None:
        # right after a push or remove, stale entries never outnumber live ones past 1024
        assert len(self.q._heap) <= max(1024, 2 * len(self.q))

    @rule(item=items, pri=st.integers(-100, 100))
    def push(self, item: Item, pri: int) -> None:
        self.q.push(item, pri)
        self.m.push(item, pri)
        self.heap_bounded()

    @rule(pri=st.integers(-100, 100), n=st.integers(1, 1500))
    def push_many(self, pri: int, n: int) -> None:
        for k in range(n):
            it = Item(next(self.counter))
            self.all.append(it)
            self.q.push(it, pri + k % 7)
            self.m.push(it, pri + k % 7)
            self.heap_bounded()

    @rule(item=items)
    def remove(self, item: Item) -> None:
        assert self.q.remove(item) is self.m.remove(item)
        self.heap_bounded()

    @rule(keep=st.integers(0, 20))
    def remove_most(self, keep: int) -> None:
        live = self.m.ordered()
        for it in live[keep:]:
            assert self.q.remove(it) is True
            self.m.remove(it)
            self.heap_bounded()

    @rule(now=st.integers(-110, 110))
    def pop_due(self, now: int) -> None:
        assert self.q.pop_due(now) == self.m.pop_due(now)

    @rule()
    def peek(self) -> None:
        assert self.q.peek_pri() == self.m.peek_pri()

    @rule()
    def clear(self) -> None:
        got = self.q.clear()
        assert {id(x) for x in got} == {id(x) for x in self.m.entries}
        assert len(got) == len(self.m.entries)
        self.m.entries.clear()

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.q) == len(self.m.entries)

    @invariant()
    def membership_agrees(self) -> None:
        live = {id(x) for x in self.q.items()}
        assert live == {id(x) for x in self.m.entries}
        for it in self.all:
            assert (it.pq_entry is not None) is (it in self.m.entries)


TimeoutQueueMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_timeout_queue_state_machine = TimeoutQueueMachine.TestCase


@pytest.mark.parametrize("n", [1025, 2049])
def test_compaction_threshold(n: int) -> None:
    q = TimeoutQueue()
    items = [Item(i) for i in range(n)]
    for i, it in enumerate(items):
        q.push(it, i)
    # remove until stale entries outnumber live ones: the heap is rebuilt at that point
    removed = 0
    while len(q._heap) == n:
        q.remove(items[removed])
        removed += 1
    assert len(q._heap) == len(q) == n - removed
    assert len(q._heap) * 2 < n + 2
    assert q.pop_due(10**9) == items[removed:]


# --------------------------------------------------------------------------------------------
# InFlightQueue: FIFOs per timeout length, against the same model


Msg = Item  # a message with its ``pri`` (0 until set)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 3), st.sampled_from([5, 20, 60])),
        st.tuples(st.just("send_many"), st.integers(0, 4), st.sampled_from([5, 20, 60])),
        st.tuples(st.just("touch"), st.integers(0, 400), st.integers(0, 80)),
        st.tuples(st.just("fin"), st.integers(0, 400), st.just(0)),
        st.tuples(st.just("fin_run"), st.integers(0, 400), st.integers(1, 6)),
        st.tuples(st.just("scan"), st.integers(0, 30), st.just(0)),
    ),
    max_size=250,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_OPS)
def test_in_flight_queue_matches_the_model(ops) -> None:
    """Sends at a clock that only grows (each into its span's FIFO), TOUCHes to any later time,
    FINs and scans: pop_due gives exactly the model's due items, by due time."""
    q = InFlightQueue()
    due_at: dict[Msg, int] = {}
    sent: list[Msg] = []
    now = 0
    for op, a, b in ops:
        if op == "send":
            now += a
            m = Msg(len(sent))
            m.pri = now + b
            q.push_sent(m, m.pri, b)
            due_at[m] = m.pri
            sent.append(m)
        elif op == "send_many":  # a dispatch pass: a few at once, one due time
            batch = [Msg(len(sent) + k) for k in range(a)]
            for m in batch:
                m.pri = now + b
                due_at[m] = m.pri
            q.push_sent_many(batch, now + b, b)
            sent += batch
        elif op == "touch" and sent:
            m = sent[a % len(sent)]
            if m in due_at:
                m.pri = now + b
                q.push(m, m.pri)
                due_at[m] = m.pri
        elif op == "fin" and sent:
            m = sent[a % len(sent)]
            assert q.remove(m) == (m in due_at)
            due_at.pop(m, None)
        elif op == "fin_run" and sent:  # a run of FINs, mostly in send order
            run = [sent[(a + k) % len(sent)] for k in range(b)]
            q.remove_many(list(dict.fromkeys(run)))
            for m in run:
                due_at.pop(m, None)
        elif op == "scan":
            now += a
            got = q.pop_due(now)
            want = [m for m in due_at if due_at[m] <= now]
            assert sorted(got, key=lambda m: (m.pri, name_of(m))) == sorted(
                want, key=lambda m: (due_at[m], name_of(m))
            )
            assert [m.pri for m in got] == sorted(m.pri for m in got)
            for m in got:
                del due_at[m]
        assert len(q) == len(due_at)
    assert sorted(q.items(), key=lambda m: name_of(m)) == sorted(due_at, key=lambda m: name_of(m))


def test_in_flight_queue_stays_compact_when_fins_come_out_of_order() -> None:
    q = InFlightQueue()
    msgs = [Msg(i) for i in range(20_000)]
    for i, m in enumerate(msgs):
        m.pri = i + 100
        q.push_sent(m, m.pri, 100)
    for m in msgs[1:]:  # the first one is never finished: its stale followers pile up
        q.remove(m)
    assert len(q) == 1 and q._stored <= 4096 + 2
    assert q.pop_due(10**9) == [msgs[0]]
