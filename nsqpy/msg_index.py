"""Find a queued message by its ID without scanning the queue (GET /message?id=, beyond nsqd).

Strategy: keep almost nothing per message. nsqd message IDs from one node grow with time
(guid.py), and as 16 hex digits they sort as bytes in the same order, so the records a queue
receives in the normal course (fresh publishes, in publish order) are already sorted by ID:
that "main run" is searched by bisection over the queue itself. Only the records that arrive
out of order (a requeue, a timeout, a consumer's in-flight messages put back at the front, a
deferred message coming due, a dead letter) are remembered one by one ("strays"), with the
ranges of queue positions they occupy so the bisection can step over them.

MemoryIndex follows a queue of records (record_queue.RecordQueue) by logical sequence
numbers: the record at queue position i has sequence ``base + i``; popping from the left
advances ``base``. DiskIndex follows a DiskQueue: every BLOCK-th main-run record written starts
a block (its ID, file number and byte position); a lookup bisects the blocks and reads one
block back from the file; strays keep their own position. Records already on disk when the
daemon started are found by reading what is left of them once, at the first lookup (then
indexed like the others).

Memory per queued message: 0 for the main run in memory, a block entry per BLOCK main-run
records on disk (about 1 byte per record), and about 100 bytes per stray (an ID and a
position in a dict). The checks run once per appended batch: one ID slice and compare per
record."""

from __future__ import annotations

import bisect
import operator
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .message import ID_END, ID_SLICE, ID_START
from .record_queue import RecordQueue

if TYPE_CHECKING:
    from .diskqueue import DiskQueue

#: Main-run records per disk block (a lookup reads at most one block back from disk).
BLOCK = 64

_record_id = operator.itemgetter(ID_SLICE)  # message.record_id, as a C-level callable
_NO_ID = b""


def _sorted_run(ids: list[bytes], last: bytes) -> bool:
    """True when ``ids`` are strictly increasing and all above ``last``."""
    return ids[0] > last and all(map(operator.lt, ids, ids[1:]))


class MemoryIndex:
    """Positions in a RecordQueue (see the module comment).

    The owner calls :meth:`appended` after each append to the right (with the records, in
    order), :meth:`prepended` after an ``extendleft`` (with how many), :meth:`popped` after
    taking records from the left, and :meth:`cleared` when the queue is emptied.
    """

    __slots__ = ("_checked", "_last", "_runs", "_strays", "base", "in_order")

    def __init__(self) -> None:
        self.base = 0  # sequence number of the queue's first record
        #: True while every record appended since the last clear came in ID order (then a
        #: copy of the whole queue is itself in order: Topic passes that on to its channels).
        self.in_order = True
        self._last = _NO_ID  # ID of the newest main-run record
        self._strays: dict[bytes, int] = {}  # ID -> sequence, records out of ID order
        self._runs: list[list[int]] = []  # [start, end) sequence ranges held by strays, sorted
        self._checked = 0  # len(_strays) at the last pruning

    def appended_one(self, record: bytes, length_after: int) -> None:
        """``record`` was appended; the queue now holds ``length_after`` records."""
        rid = record[ID_START:ID_END]
        if rid > self._last:
            self._last = rid
        else:
            self._stray(rid, self.base + length_after - 1)

    def appended(self, records: list[bytes], length_after: int, in_order: bool = False) -> None:
        """``records`` were appended; the queue now holds ``length_after`` records.
        ``in_order``: the caller knows their IDs increase (fresh publishes): then only the
        first is compared with what came before (O(1) instead of a slice per record)."""
        if len(records) < 2:
            if records:
                self.appended_one(records[0], length_after)
            return
        if in_order and records[0][ID_START:ID_END] > self._last:
            self._last = records[-1][ID_START:ID_END]
            return
        self._appended_ids(list(map(_record_id, records)), length_after)

    def appended_framed(
        self, buf: bytes, offs: list[int], length_after: int, in_order: bool = False
    ) -> None:
        """As :meth:`appended`, for records laid out as in a diskqueue file (record k is
        ``buf[offs[k] + 4 : offs[k + 1]]``, RecordQueue.extend_framed)."""
        if len(offs) < 2:
            return
        a = 4 + ID_START
        b = 4 + ID_END
        if in_order and buf[offs[0] + a : offs[0] + b] > self._last:
            self._last = buf[offs[-2] + a : offs[-2] + b]
            return
        self._appended_ids([buf[o + a : o + b] for o in offs[:-1]], length_after)

    def _appended_ids(self, ids: list[bytes], length_after: int) -> None:
        if _sorted_run(ids, self._last):
            self._last = ids[-1]
            return
        seq = self.base + length_after - len(ids)
        last = self._last
        for rid in ids:
            if rid > last:
                last = rid
            else:
                self._stray(rid, seq)
            seq += 1
        self._last = last

    def prepended(self, records: list[bytes]) -> None:
        """``records`` were put at the left, in the order they now stand (oldest first)."""
        if not records:
            return
        self.in_order = False
        self.base -= len(records)
        seq = self.base
        strays = self._strays
        for r in records:
            strays[r[ID_START:ID_END]] = seq
            seq += 1
        runs = self._runs
        if runs and runs[0][0] == seq:
            runs[0][0] = self.base
        else:
            runs.insert(0, [self.base, seq])

    def popped(self, n: int) -> None:
        """``n`` records were taken from the left."""
        self.base += n

    def cleared(self, n: int) -> None:
        """The queue (of ``n`` records) was emptied."""
        self.base += n
        self._strays.clear()
        self._runs.clear()
        self._checked = 0
        self.in_order = True

    def _stray(self, rid: bytes, seq: int) -> None:
        self.in_order = False
        self._strays[rid] = seq
        runs = self._runs
        if runs and runs[-1][1] == seq:
            runs[-1][1] = seq + 1
        else:
            runs.append([seq, seq + 1])
        if len(self._strays) > 2 * self._checked + 1024:
            self._prune()

    def _prune(self) -> None:
        base = self.base
        self._strays = {k: s for k, s in self._strays.items() if s >= base}
        runs = self._runs
        i = 0
        while i < len(runs) and runs[i][1] <= base:
            i += 1
        if i:
            del runs[:i]
        self._checked = len(self._strays)

    def find(self, queue: RecordQueue, rid: bytes) -> int:
        """Index of the record with ID ``rid`` in ``queue`` (the queue this index follows),
        or -1. Time: O(log n) probes (record_queue.RecordQueue.id_at, each O(log segments)),
        plus O(log r) per probe for r stray ranges."""
        base = self.base
        n = len(queue)
        seq = self._strays.get(rid)
        if seq is not None:
            i = seq - base
            if 0 <= i < n and queue.id_at(i) == rid:
                return i
        runs = self._runs
        while runs and runs[0][1] <= base:  # stray ranges already popped
            del runs[0]
        starts = [r[0] for r in runs]
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            k = bisect.bisect_right(starts, base + mid) - 1
            if k >= 0 and base + mid < runs[k][1]:  # a stray: step to a main-run neighbour
                after = runs[k][1] - base
                before = runs[k][0] - base - 1
                if after < hi:
                    mid = after
                elif before >= lo:
                    mid = before
                else:
                    return -1
            mid_id = queue.id_at(mid)
            if mid_id == rid:
                return mid
            if mid_id < rid:
                lo = mid + 1
            else:
                hi = mid
        return -1


class _Blocks:
    """One ID-sorted run of disk records: block starts and strays (see the module comment)."""

    __slots__ = ("blocks", "in_order", "last", "since", "strays")

    def __init__(self) -> None:
        self.last = _NO_ID  # ID of the newest main-run record
        self.since = BLOCK  # main-run records since the last block start
        self.blocks: deque[tuple[bytes, int, int]] = deque()  # (first ID, file, position)
        self.strays: dict[bytes, tuple[int, int]] = {}  # ID -> (file, position)
        self.in_order = True  # no stray was ever added

    def add(self, rid: bytes, pos: tuple[int, int]) -> None:
        """Index one record written (or found) at ``pos``."""
        if rid > self.last:
            self.last = rid
            if self.since >= BLOCK:
                self.blocks.append((rid, pos[0], pos[1]))
                self.since = 0
            self.since += 1
        else:
            self.in_order = False
            self.strays[rid] = pos

    def prune(self, rp: tuple[int, int], strays: bool = True) -> None:
        """Forget what lies before the read position ``rp`` (the blocks, from the front; with
        ``strays``, also the strays, a pass over all of them: amortized by the caller)."""
        blocks = self.blocks
        while len(blocks) > 1 and (blocks[1][1], blocks[1][2]) <= rp:
            blocks.popleft()
        if strays:
            self.strays = {k: p for k, p in self.strays.items() if p >= rp}

    def find(
        self, backend: DiskQueue, rid: bytes, rp: tuple[int, int]
    ) -> tuple[tuple[int, int], bytes] | None:
        """((file, position), record) of the unread record ``rid``, or None (``rp``: the
        backend's read position)."""
        pos = self.strays.get(rid)
        if pos is not None:
            if pos < rp:
                return None
            for fpos, rec in _records(backend, pos, None):
                return (fpos, rec) if rec[ID_START:ID_END] == rid else None
            return None
        blocks = self.blocks
        k = bisect.bisect_right(blocks, rid, key=operator.itemgetter(0)) - 1
        if k < 0:
            return None
        start = (blocks[k][1], blocks[k][2])
        stop = (blocks[k + 1][1], blocks[k + 1][2]) if k + 1 < len(blocks) else None
        for fpos, rec in _records(backend, max(start, rp), stop):
            if rec[ID_START:ID_END] == rid:
                return fpos, rec
        return None


class DiskIndex:
    """Positions of unread records in a DiskQueue (see the module comment).

    The owner writes records with ``backend.put_many(records, marks)`` where ``marks`` comes
    from :meth:`marks_for`, then calls :meth:`written` with the positions put_many returned.
    """

    __slots__ = ("_backend", "_checked", "_ids", "_kinds", "_new", "_old", "_unindexed")

    def __init__(self, backend: DiskQueue) -> None:
        self._backend = backend
        self._new = _Blocks()  # records written through this index
        self._old: _Blocks | None = None  # records on disk before it, once read
        self._checked = 0
        self._ids: list[bytes] = []
        self._kinds: list[bool] = []  # per mark: True for a block start, False for a stray
        # Records on disk before this index existed: [read position, write position) now.
        self._unindexed: tuple[int, int] | None = (
            (backend.write_file_num, backend.write_pos) if backend.depth else None
        )

    def marks_for(self, records: list[bytes], in_order: bool = False) -> list[int]:
        """Indexes in ``records`` whose disk position this index needs (block starts and
        strays); pass them to DiskQueue.put_many, then its answer to :meth:`written`.
        ``in_order`` as for MemoryIndex.appended."""
        run = self._new
        n = len(records)
        if in_order and n and records[0][ID_START:ID_END] > run.last:
            # Block starts fall every BLOCK records from where the last block left off.
            marks = list(range(BLOCK - run.since if run.since < BLOCK else 0, n, BLOCK))
            self._ids = [records[i][ID_START:ID_END] for i in marks]
            self._kinds = [True] * len(marks)
            run.since = n - marks[-1] if marks else run.since + n
            run.last = records[-1][ID_START:ID_END]
            return marks
        ids = list(map(_record_id, records))
        marks = []
        kinds: list[bool] = []
        if _sorted_run(ids, run.last) and run.since + n < BLOCK:
            run.since += n
            run.last = ids[-1]
        else:
            last = run.last
            since = run.since
            for i, rid in enumerate(ids):
                if rid > last:
                    last = rid
                    if since >= BLOCK:
                        marks.append(i)
                        kinds.append(True)
                        since = 0
                    since += 1
                else:
                    marks.append(i)
                    kinds.append(False)
                    run.in_order = False
            run.last = last
            run.since = since
        self._ids = [ids[i] for i in marks]
        self._kinds = kinds
        return marks

    def written(self, marks: list[int], positions: list[tuple[int, int]]) -> None:
        """The records marked by :meth:`marks_for` were written at ``positions``."""
        run = self._new
        for rid, block, pos in zip(self._ids, self._kinds, positions, strict=False):
            if block:
                run.blocks.append((rid, pos[0], pos[1]))
            else:
                run.strays[rid] = pos
        self._ids = []
        if len(run.strays) > 2 * self._checked + 1024:
            run.prune(self._read_pos())
            self._checked = len(run.strays)

    @property
    def in_order(self) -> bool:
        """True when every record this index saw written came in ID order and nothing was on
        disk before it: reading the backend from its start then yields records in ID order."""
        return self._unindexed is None and self._old is None and self._new.in_order

    def cleared(self) -> None:
        """The backend was emptied."""
        self._new = _Blocks()
        self._old = None
        self._unindexed = None
        self._checked = 0

    def _read_pos(self) -> tuple[int, int]:
        b = self._backend
        return b.read_file_num, b.read_pos

    def find(self, rid: bytes) -> tuple[tuple[int, int], bytes] | None:
        """((file number, byte position), record) of the unread record ``rid``, or None.
        Reads at most one block (BLOCK main-run records and the strays among them) from disk,
        plus, at the first call after a restart, what was on disk before (once)."""
        backend = self._backend
        if not backend.depth:
            return None
        rp = self._read_pos()
        if self._unindexed is not None:
            old = self._old = _Blocks()
            for fpos, rec in _records(backend, rp, self._unindexed):
                old.add(rec[ID_START:ID_END], fpos)
            self._unindexed = None
        for run in (self._new, self._old):
            if run is not None:
                run.prune(rp, strays=False)  # a stale stray is refused by find itself
                hit = run.find(backend, rid, rp)
                if hit is not None:
                    return hit
        return None


def _records(
    backend: DiskQueue, start: tuple[int, int], stop: tuple[int, int] | None
) -> Iterator[tuple[tuple[int, int], bytes]]:
    """((file, position), record) from ``start`` up to ``stop`` (None: the write position)."""
    end = stop if stop is not None else (backend.write_file_num, backend.write_pos)
    return backend.scan(start, end)
