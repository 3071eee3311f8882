"""record_queue.RecordQueue against a plain deque (the model): random appends, extends,
extendleft, popleft, take, clear, positions and IDs, with small PACK and CHUNK_BYTES so packing
and splitting happen; plus what gets packed: records held only by the queue, not records
another queue shares."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.disk_chunks import framed_chunk

from nsqpy.message import encode_record
from nsqpy.record_queue import RecordQueue, _Packed, _Refs


def _rec(n: int, size: int) -> bytes:
    return encode_record(n, n % 7, b"%016x" % n, bytes([n % 251]) * size)


# ("append"|"extend"|"framed"|"front"|"pop"|"take"|"clear", k, body size)
_ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "extend", "extend", "framed", "front", "pop", "take", "clear"]),
        st.integers(0, 30),
        st.sampled_from([0, 5, 200]),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    _ops,
    st.integers(1, 9),
    st.sampled_from([64, 300, 1 << 20]),
    st.sampled_from(["none", "all", "recent"]),
)
def test_record_queue_behaves_as_a_deque(ops, pack, chunk, share) -> None:
    q = RecordQueue(pack=pack, chunk_bytes=chunk)
    model: deque[bytes] = deque()
    # another queue holding the same objects: all of them, or the 20 newest (another
    # channel's consumer has those in flight)
    other: deque[bytes] = deque(maxlen=None if share == "all" else 20)
    n = 0
    for op, k, size in ops:
        if op == "framed":
            # a diskqueue chunk: bytes before and after the records taken, each after its size
            same = [_rec(n + i, size) for i in range(k)]
            n += k
            q.extend_framed(*framed_chunk(same, b"\x00\x00\x00\x07garbage", b"\x00\x00\x01"))
            model.extend(same)
        elif op in ("append", "extend", "front"):
            count = k if op != "append" else 1
            # the model gets equal records, not the same objects (they would read as shared)
            recs = [_rec(n + i, size) for i in range(count)]
            same = [_rec(n + i, size) for i in range(count)]
            n += count
            if share != "none":
                other.extend(recs)
            if op == "append":
                q.append(recs[0])
                model.append(same[0])
            elif op == "extend":
                q.extend(recs)
                model.extend(same)
            else:
                q.extendleft(reversed(recs))
                model.extendleft(reversed(same))
            del recs
        elif op == "pop":
            for _ in range(min(k, len(model))):
                assert q.popleft() == model.popleft()
        elif op == "take":
            got = q.take(k)
            assert got == [model.popleft() for _ in range(min(k, len(got)))]
            assert len(got) == min(k, len(got) + len(model))
        else:
            q.clear()
            model.clear()
        assert len(q) == len(model)
        assert bool(q) == bool(model)
        assert list(q) == list(model)
        for i in {0, len(model) // 2, len(model) - 1, -1} if model else ():
            assert q[i] == model[i]
            assert q.id_at(i) == model[i][10:26]
    if share == "all":
        assert not any(isinstance(s, _Packed) and s.skip == 0 for s in q._segs)
    elif share == "none":
        assert not any(isinstance(s, _Refs) for s in q._segs[q._head :])
    if not model:
        with pytest.raises(IndexError):
            q.popleft()
        with pytest.raises(IndexError):
            q[0]


def test_record_queue_packs_a_backlog_held_only_by_itself() -> None:
    q = RecordQueue(pack=100, chunk_bytes=10_000)
    for b in range(10):
        q.extend([_rec(b * 50 + i, 200) for i in range(50)])
    # sealed before each extend once 100 wait: 400 records in segments, 100 in the tail
    packed = [s for s in q._segs if isinstance(s, _Packed)]
    assert sum(s.count for s in packed) == 400
    assert all(len(s.buf) <= 10_000 for s in packed)  # a tail over chunk_bytes is split
    assert all(not isinstance(s, _Refs) for s in q._segs)
    assert q.take(500) == [_rec(i, 200) for i in range(500)]
    assert not q


def test_record_queue_keeps_shared_records_as_they_are() -> None:
    a = RecordQueue(pack=100)
    b = RecordQueue(pack=100)
    for k in range(5):
        recs = [_rec(k * 60 + i, 200) for i in range(60)]
        a.extend(recs)  # as a topic hands the same objects to two channels
        b.extend(recs)
    assert a._segs and all(isinstance(s, _Refs) for s in a._segs)
    first = b[0]
    assert a.popleft() is first  # the very object: nothing was copied
    # once b's consumer took its copies, a's next backlog is held only by a: packed, and so
    # are its older segments, looked at again at the next seals
    del recs, first
    b.clear()
    for k in range(5, 9):
        a.extend([_rec(k * 60 + i, 200) for i in range(60)])
    assert all(isinstance(s, _Packed) for s in a._segs[a._head :])
    assert a.take_all(True) == [_rec(i, 200) for i in range(1, 540)]


def test_record_queue_packs_what_a_live_channel_no_longer_holds() -> None:
    """One channel lags (``lagging``), the other's consumer keeps up but holds its newest 150
    messages in flight: the lagging channel packs all but those, which it looks at again at its
    next seal."""
    lagging = RecordQueue(pack=1000)
    in_flight: deque[bytes] = deque(maxlen=150)
    for b in range(20):
        recs = [_rec(b * 200 + i, 200) for i in range(200)]
        lagging.extend(recs)
        in_flight.extend(recs)
        del recs
    segs = lagging._segs
    assert segs and all(isinstance(s, _Packed) for s in segs)
    packed = sum(s.count for s in segs)
    assert packed >= 4000 - 1000 - 200  # at most the unsealed tail is not packed
    assert len(lagging) == 4000
    assert lagging.take_all(True) == [_rec(i, 200) for i in range(4000)]
