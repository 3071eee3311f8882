"""msg_index against a linear search: random appends (in order and out of order), requeues at
the front, pops and clears on a RecordQueue (small PACK: records get packed); random writes,
reads and restarts on a real DiskQueue."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.disk_chunks import framed_chunk

from nsqpy.diskqueue import DiskQueue
from nsqpy.message import encode_record
from nsqpy.msg_index import BLOCK, DiskIndex, MemoryIndex
from nsqpy.record_queue import RecordQueue


def _rec(n: int, body: bytes = b"x") -> bytes:
    return encode_record(n, 0, b"%016x" % n, body)


def _linear(queue: RecordQueue, rid: bytes) -> int:
    for i, r in enumerate(queue):
        if r[10:26] == rid:
            return i
    return -1


def _extend(queue: RecordQueue, index: MemoryIndex, recs, rnd, in_order: bool = False) -> None:
    """Append ``recs`` as records, or as a diskqueue chunk holds them (a topic's drain)."""
    if rnd.random() < 0.5:
        queue.extend(recs)
        index.appended(recs, len(queue), in_order=in_order)
        return
    buf, offs = framed_chunk(recs, before=b"\x00\x01")
    queue.extend_framed(buf, offs)
    index.appended_framed(buf, offs, len(queue), in_order=in_order)


# An operation: ("new", k) appends k fresh (increasing) IDs; ("old", k) appends k IDs seen
# before (a requeue); ("front", k) puts k old IDs at the left; ("pop", k); ("clear", 0).
_ops = st.lists(
    st.tuples(st.sampled_from(["new", "new", "old", "front", "pop", "clear"]), st.integers(1, 40)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_ops, st.randoms(use_true_random=False))
def test_memory_index_finds_what_a_linear_search_finds(ops, rnd) -> None:
    queue = RecordQueue(pack=8, chunk_bytes=200)
    index = MemoryIndex()
    next_id = 1
    taken: list[bytes] = []  # records popped earlier (candidates for requeues)
    for op, k in ops:
        if op == "new":
            recs = [_rec(next_id + i) for i in range(k)]
            next_id += k
            if k == 1 and rnd.random() < 0.5:
                queue.append(recs[0])
                index.appended_one(recs[0], len(queue))
            else:
                _extend(queue, index, recs, rnd, in_order=rnd.random() < 0.5)
        elif op in ("old", "front") and taken:
            recs = [taken.pop(rnd.randrange(len(taken))) for _ in range(min(k, len(taken)))]
            if op == "old":
                _extend(queue, index, recs, rnd)
            else:
                queue.extendleft(reversed(recs))
                index.prepended(recs)
        elif op == "pop":
            n = min(k, len(queue))
            for _ in range(n):
                taken.append(queue.popleft())
            index.popped(n)
        elif op == "clear":
            index.cleared(len(queue))
            taken.extend(queue)
            queue.clear()
        if index.in_order:  # the topic relies on it: the queue as a whole is in ID order
            ids = [r[10:26] for r in queue]
            assert ids == sorted(set(ids))
        for r in list(queue) + taken[-5:] + [_rec(next_id + 7)]:
            rid = r[10:26]
            assert index.find(queue, rid) == _linear(queue, rid)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["new", "new", "old", "read", "restart"]), st.integers(1, 150)),
        max_size=25,
    ),
    st.randoms(use_true_random=False),
)
def test_disk_index_finds_every_unread_record(tmp_path_factory, ops, rnd) -> None:
    path = str(tmp_path_factory.mktemp("dq"))

    def open_dq() -> DiskQueue:
        # small files: blocks cross file boundaries
        return DiskQueue("t", path, 4096, 26, 1 << 20, 10_000, 2_000)

    dq = open_dq()
    index = DiskIndex(dq)
    next_id = 1
    unread: list[bytes] = []  # what a linear reader would still find, in file order
    read: list[bytes] = []

    def write(recs: list[bytes], in_order: bool = False) -> None:
        marks = index.marks_for(recs, in_order)
        index.written(marks, dq.put_many(recs, marks))
        unread.extend(recs)

    for op, k in ops:
        if op == "new":
            recs = [_rec(next_id + i, b"y" * rnd.randrange(1, 300)) for i in range(k)]
            next_id += k
            write(recs, in_order=rnd.random() < 0.5)
        elif op == "old" and read:
            write([read.pop(rnd.randrange(len(read))) for _ in range(min(k, len(read)))])
        elif op == "read":
            for _ in range(min(k, len(unread))):
                rec = dq.peek()
                assert rec == unread[0]
                dq.advance()
                read.append(unread.pop(0))
        elif op == "restart":
            dq.close()
            dq = open_dq()
            index = DiskIndex(dq)
        if index.in_order:
            ids = [r[10:26] for r in unread]
            assert ids == sorted(set(ids))
        for r in unread[:: max(1, len(unread) // 30)] + unread[-3:]:
            hit = index.find(r[10:26])
            assert hit is not None and hit[1] == r, r[10:26]
        for r in read[-3:]:
            if r not in unread:
                assert index.find(r[10:26]) is None
    dq.close()


def test_disk_index_keeps_one_entry_per_block(tmp_path) -> None:
    dq = DiskQueue("t", str(tmp_path), 1 << 20, 26, 1 << 20, 10_000, 2_000)
    index = DiskIndex(dq)
    recs = [_rec(i + 1) for i in range(BLOCK * 50)]
    for i in range(0, len(recs), 200):
        batch = recs[i : i + 200]
        marks = index.marks_for(batch, in_order=i % 400 == 0)
        index.written(marks, dq.put_many(batch, marks))
    assert len(index._new.blocks) == 50
    assert not index._new.strays
    assert index.find(recs[1234][10:26]) is not None
    dq.close()
