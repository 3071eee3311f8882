"""Unit and property tests for nsqpy.guid (snowflake message IDs, as nsqd/guid.go)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.guid import (
    TWEPOCH,
    GUIDFactory,
    decode_id,
    guid_node_id,
    guid_timestamp_ms,
)

HEX16 = re.compile(rb"[0-9a-f]{16}")
# 2023-11-14T22:13:20Z in ns: a realistic wall clock
T0 = 1_700_000_000_000_000_000
TICK = 1 << 20  # one pseudo-millisecond


class FakeClock:
    def __init__(self, ns: int) -> None:
        self.ns = ns
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.ns


def decode(guid: int) -> tuple[int, int, int]:
    """(tick, node id, sequence) of an ID."""
    return (guid >> 22) + TWEPOCH, (guid >> 12) & 0x3FF, guid & 0xFFF


def test_layout_of_first_id() -> None:
    clock = FakeClock(T0)
    f = GUIDFactory(513, clock_ns=clock)
    g = f.new_guid()
    assert g == (((T0 >> 20) - TWEPOCH) << 22) | (513 << 12) | 0
    assert clock.calls == 1
    assert guid_node_id(g) == 513
    assert guid_timestamp_ms(g) == T0 >> 20
    assert decode(g) == (T0 >> 20, 513, 0)
    # the next ID in the same tick only bumps the sequence
    assert f.new_guid() == g + 1


def test_new_id_is_hex_of_guid() -> None:
    clock = FakeClock(T0)
    f = GUIDFactory(7, clock_ns=clock)
    g = GUIDFactory(7, clock_ns=FakeClock(T0)).new_guid()
    i = f.new_id()
    assert isinstance(i, bytes)
    assert HEX16.fullmatch(i)
    assert int(i, 16) == g
    assert i == b"%016x" % g


def test_default_clock_ids() -> None:
    f = GUIDFactory(1)
    ids = [f.new_id() for _ in range(2000)]
    assert all(HEX16.fullmatch(i) for i in ids)
    assert all(a < b for a, b in zip(ids, ids[1:]))  # same width, so bytes order == int order
    assert {guid_node_id(int(i, 16)) for i in ids} == {1}


@pytest.mark.parametrize("node_id", [-1, 1024, 4096, -1024])
def test_node_id_out_of_range(node_id: int) -> None:
    with pytest.raises(ValueError):
        GUIDFactory(node_id)


@pytest.mark.parametrize("node_id", [0, 1, 512, 1023])
def test_node_id_bits_decode(node_id: int) -> None:
    f = GUIDFactory(node_id, clock_ns=FakeClock(T0))
    for _ in range(5000):  # across the sequence wrap too
        g = f.new_guid()
        assert guid_node_id(g) == node_id


def test_more_than_4096_in_one_tick() -> None:
    clock = FakeClock(T0)  # never moves
    f = GUIDFactory(3, clock_ns=clock)
    ids = [f.new_guid() for _ in range(3 * 4096 + 10)]
    assert len(set(ids)) == len(ids)
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert {guid_node_id(g) for g in ids} == {3}
    # the first 4096 share the real tick, then the factory borrows the following ticks
    assert [decode(g)[0] for g in ids[:4096]] == [T0 >> 20] * 4096
    assert decode(ids[4096]) == ((T0 >> 20) + 1, 3, 0)
    assert decode(ids[-1])[0] == (T0 >> 20) + 3
    # once the clock catches up and passes the borrowed ticks, IDs follow the clock again
    clock.ns = T0 + 10 * TICK
    g = f.new_guid()
    assert g > ids[-1]
    assert decode(g) == ((T0 >> 20) + 10, 3, 0)


def test_clock_steps_back_by_seconds() -> None:
    clock = FakeClock(T0)
    f = GUIDFactory(9, clock_ns=clock)
    before = [f.new_guid() for _ in range(10)]
    clock.ns = T0 - 5 * 10**9  # five seconds back
    after = [f.new_guid() for _ in range(5000)]
    ids = before + after
    assert len(set(ids)) == len(ids)
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert min(after) > max(before)
    # when the clock comes back to normal, time is used again
    clock.ns = T0 + 5 * 10**9
    g = f.new_guid()
    assert g > ids[-1]
    assert decode(g) == ((T0 + 5 * 10**9) >> 20, 9, 0)


def test_ids_strictly_increase_with_moving_clock() -> None:
    clock = FakeClock(T0)
    f = GUIDFactory(0, clock_ns=clock)
    prev = -1
    for k in range(20000):
        clock.ns += 37_000  # about 28 IDs per tick
        g = f.new_guid()
        assert g > prev
        prev = g
        if k == 0:
            assert decode(g)[2] == 0


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.integers(min_value=0, max_value=1023),
    st.lists(
        st.tuples(
            st.one_of(
                st.just(0),
                st.integers(min_value=-(10 * 10**9), max_value=10 * 10**9),  # +-10 s
                st.integers(min_value=-3 * TICK, max_value=3 * TICK),
            ),
            st.integers(min_value=1, max_value=300),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_ids_unique_and_increasing_whatever_the_clock(node_id: int, steps) -> None:
    clock = FakeClock(T0)
    f = GUIDFactory(node_id, clock_ns=clock)
    prev = -1
    seen = set()
    for delta, count in steps:
        clock.ns += delta
        for _ in range(count):
            g = f.new_guid()
            assert g > prev
            assert g not in seen
            assert guid_node_id(g) == node_id
            # the time part is never behind the clock (it runs ahead only while the clock is
            # behind an earlier tick or a tick's 4096 sequence numbers ran out)
            assert decode(g)[0] >= clock.ns >> 20
            seen.add(g)
            prev = g
    # and the hex form keeps the order
    last_hex = f.new_id()
    assert HEX16.fullmatch(last_hex)
    assert int(last_hex, 16) > prev


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.integers(min_value=0, max_value=1023),
    st.integers(min_value=T0 - 10**17, max_value=T0 + 10**17),
)
def test_fresh_factory_id_follows_clock(node_id: int, now: int) -> None:
    g = GUIDFactory(node_id, clock_ns=FakeClock(now)).new_guid()
    assert decode(g) == (now >> 20, node_id, 0)
    assert guid_timestamp_ms(g) == now >> 20
    assert 0 < g < 2**63  # fits nsqd's int64 / 16 hex digits


def test_decode_round_trip_with_an_injected_clock() -> None:
    clock = 1_790_000_000_123_456_789
    g = GUIDFactory(617, clock_ns=lambda: clock)
    ids = [g.new_id() for _ in range(3)]
    for seq, i in enumerate(ids):
        d = decode_id(i, now_ns=clock)
        assert (d.node_id, d.sequence, d.tick) == (617, seq, clock >> 20)
        assert 0 <= clock - d.time_ns < 1 << 20


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.integers(min_value=0, max_value=1023),
    st.lists(
        st.tuples(
            st.integers(min_value=-3 * TICK, max_value=3 * TICK),
            st.integers(min_value=0, max_value=5000),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_new_records_are_new_id_calls_at_one_instant(node_id: int, batches) -> None:
    """An MPUB's records get the IDs that as many new_id() calls at the batch's clock reading
    give, whatever the clock did between batches (4096-ID ticks borrowed alike)."""
    clock_a, clock_b = FakeClock(T0), FakeClock(T0)
    batched = GUIDFactory(node_id, clock_ns=clock_a)
    single = GUIDFactory(node_id, clock_ns=clock_b)
    header = b"H" * 10
    for delta, count in batches:
        clock_a.ns += delta
        clock_b.ns += delta
        bodies = [b"%d" % k for k in range(count)]
        calls = clock_a.calls
        records = batched.new_records(header, bodies)
        assert clock_a.calls == calls + 1
        assert records == [header + single.new_id() + b for b in bodies]
    assert batched.new_id() == single.new_id()
