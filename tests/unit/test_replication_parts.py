"""Several topics' appends in one request (replication/entries.py, courier.py): the parts'
byte layout round-trips, a body that does not parse is refused, and take_parts picks what one
request carries (oldest first, within the byte limit, one at least, never two parts of one
topic). Plain records, no event loop."""

from __future__ import annotations

from collections import deque

import pytest

from nsqpy.replication.entries import (
    ENTRY,
    PART_OVERHEAD,
    RECORD_HEADER,
    Part,
    decode_entries,
    decode_parts,
    encode_entries,
    encode_parts,
    take_parts,
)


def _entry(epoch: int, seq: int, body: bytes = b"x") -> bytes:
    return ENTRY.pack(epoch, seq, 0) + bytes(RECORD_HEADER) + body


def _part(topic: str, n: int = 1, size: int = 1) -> Part:
    params = {"topic": topic, "epoch": "3", "first": "7", "prev": "3:6"}
    return params, encode_entries([_entry(3, 7 + i, b"b" * size) for i in range(n)])


def test_parts_round_trip() -> None:
    probe: Part = ({"topic": "a", "epoch": "1", "first": "0", "prev": "?"}, b"")
    reset: Part = (
        {"topic": "b.c#ephemeral", "epoch": "2", "first": "0", "prev": "-", "reset": "1"},
        b"",
    )
    parts = [probe, _part("t1", 3), reset, _part("t2", 1, 300)]
    back = decode_parts(encode_parts(parts))
    assert back == parts
    assert [entry[-1:] for entry in decode_entries(back[1][1])] == [b"b"] * 3
    assert decode_parts(b"") == []


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x00\x00",  # a size cut short
        b"\x00\x00\x00\x09topic=t",  # a query longer than what follows
        b"\x00\x00\x00\x07topic=t",  # no body size
        b"\x00\x00\x00\x07topic=t\x00\x00\x00\x05ab",  # a body longer than what follows
        b"\x00\x00\x00\x03a=\xff\x00\x00\x00\x00",  # a query that is not ASCII
        b"\x00\x00\x00\x03%zz\x00\x00\x00\x00",  # nor a query
    ],
)
def test_parts_that_do_not_parse(body: bytes) -> None:
    with pytest.raises((ValueError, UnicodeDecodeError)):
        decode_parts(body)


def test_take_parts_oldest_first_within_the_limit() -> None:
    queue: deque[tuple[Part, str]] = deque((_part(f"t{i}", 1, 100), f"waiter{i}") for i in range(5))
    one = len(queue[0][0][1]) + PART_OVERHEAD
    taken = take_parts(queue, limit=3 * one)
    assert [w for _, w in taken] == ["waiter0", "waiter1", "waiter2"]
    assert [w for _, w in queue] == ["waiter3", "waiter4"]
    assert [w for _, w in take_parts(queue)] == ["waiter3", "waiter4"]
    assert not queue
    assert take_parts(queue) == []


def test_take_parts_takes_one_even_past_the_limit() -> None:
    queue: deque[tuple[Part, int]] = deque([(_part("big", 10, 1000), 1), (_part("s"), 2)])
    assert [w for _, w in take_parts(queue, limit=100)] == [1]
    assert [w for _, w in take_parts(queue, limit=100)] == [2]


def test_take_parts_never_two_parts_of_one_topic() -> None:
    queue: deque[tuple[Part, int]] = deque(
        [(_part("a"), 1), (_part("b"), 2), (_part("a"), 3), (_part("c"), 4)]
    )
    assert [w for _, w in take_parts(queue)] == [1, 2]  # order kept: c waits behind a
    assert [w for _, w in take_parts(queue)] == [3, 4]
