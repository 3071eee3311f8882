"""A FIFO of message records that packs a backlog back to back in shared buffers.

Strategy: a queued record as its own ``bytes`` object costs its length plus 33 bytes of object
header, rounded up to pymalloc's 16-byte size classes (a 226-byte record of a 200-byte body
takes 272 bytes), plus a pointer in the queue. RecordQueue keeps the records of a backlog
instead in large buffers: a run of records joined into one ``bytes`` (a "packed segment",
at most CHUNK_BYTES) with an ``array('I')`` of their offsets, 4 bytes per record, so a queued
226-byte record costs about 230 bytes. A record taken out comes back as a fresh ``bytes`` copy.

What is packed, and when, keeps the hot paths as they were:

- New records go to the ``tail``, a plain list (a C-level extend). A consumer keeping up takes
  them from there unchanged: nothing is packed, nothing is copied.
- Only when PACK records wait in the tail (the consumers are behind) is the tail "sealed" into
  a segment, before the next records are added: one ``b"".join`` and one offsets array, in C.
- A topic hands the same record object to each of its channels. Packing a record that another
  queue also holds would add a copy (226 bytes) where a pointer costs 8, so a tail whose
  records are held elsewhere (seen from their reference counts, sampled) is sealed as a "refs
  segment", a list of the objects as they are. With one channel, or once the other channels'
  consumers have taken their copies, the records are held only here and are packed.
- A topic draining its diskqueue into its one channel (compiled build) hands over the chunks
  read from the file (``extend_framed``): a chunk becomes a segment as it is, each record after
  its 4-byte size, and nothing is copied or made an object until taken.
- Records put back at the front (a consumer's in-flight messages when it goes away) are few;
  they stay ``bytes`` objects in a small ``front`` deque.

The queue is deque-compatible for what backed_queue.py, channel.py and topic.py use (len,
bool, list(), popleft, append, extend, extendleft, clear, indexing) and adds ``take(n)`` (up
to n records from the left as one list, the bulk form of popleft, sliced in C) and
``id_at(i)`` (the ID of the record at a position without copying the record, for
msg_index's bisection). Indexing costs O(log segments): a bisection over the segments' start
positions."""

from __future__ import annotations

import bisect
import sys
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import Final

from .message import ID_END, ID_START

#: Records waiting in the tail before it is sealed into a segment (at the next append).
PACK: Final = 2048
#: A packed segment's buffer holds at most this many bytes (a larger tail is split), unless one
#: record alone is larger.
CHUNK_BYTES: Final = 1 << 20
#: Tails whose records average more than this many bytes are not packed: each record is then a
#: separate allocation outside pymalloc, and packing would save little for a large copy.
PACK_MAX_AVERAGE: Final = 4096
#: Every SAMPLE-th record of a tail has its reference count read to see whether it is shared.
SAMPLE: Final = 16
#: Front-of-tail records already taken are dropped from the list once this many have piled up.
TRIM: Final = 1024
#: At each seal, at most REPACK older refs segments are packed, of at most REPACK_WALK looked at.
REPACK: Final = 2
REPACK_WALK: Final = 8

_getrefcount = sys.getrefcount


def _refcounts(records: list[bytes], start: int, stop: int, step: int) -> list[int]:
    """The reference counts of ``records[start:stop:step]``."""
    return list(map(_getrefcount, records[start:stop:step]))


#: What _refcounts gives for a record held only by the list it reads (measured, not assumed:
#: the count depends on the interpreter and on how this module was built).
_UNSHARED = max(_refcounts([bytes(bytearray(8)) for _ in range(2)], 0, 2, 1))


class _Segment:
    """A sealed run of ``count`` records; ``start`` is the position of its first record in the
    queue's count of every record ever sealed."""

    __slots__ = ("count", "start")

    def __init__(self, start: int, count: int) -> None:
        self.start = start
        self.count = count

    def get(self, i: int) -> bytes:
        """Record ``i`` of this segment."""
        raise NotImplementedError

    def take(self, a: int, b: int) -> list[bytes]:
        """Records ``a`` to ``b`` (exclusive) of this segment."""
        raise NotImplementedError

    def id_at(self, i: int) -> bytes:
        """The 16-byte ID of record ``i``."""
        raise NotImplementedError


class _Refs(_Segment):
    """Records held as they are (shared with another queue, or too large to pack)."""

    __slots__ = ("refs",)

    def __init__(self, start: int, refs: list[bytes]) -> None:
        super().__init__(start, len(refs))
        self.refs = refs

    def get(self, i: int) -> bytes:
        return self.refs[i]

    def take(self, a: int, b: int) -> list[bytes]:
        return self.refs[a:b]

    def id_at(self, i: int) -> bytes:
        return self.refs[i][ID_START:ID_END]


class _Packed(_Segment):
    """Records in one shared buffer: record i is ``buf[offs[i] + skip : offs[i + 1]]``.
    ``skip`` 0: the records back to back (:func:`_packed`, joined from a tail); 4: as a
    diskqueue data file lays them out, each after its 4-byte size (a chunk read from the file,
    held as it is: RecordQueue.extend_framed)."""

    __slots__ = ("buf", "offs", "skip")

    def __init__(self, start: int, buf: bytes, offs: array[int], skip: int) -> None:
        super().__init__(start, len(offs) - 1)
        self.buf = buf
        self.offs = offs
        self.skip = skip

    def get(self, i: int) -> bytes:
        offs = self.offs
        return self.buf[offs[i] + self.skip : offs[i + 1]]

    def take(self, a: int, b: int) -> list[bytes]:
        # A loop over a list of the offsets: faster than map() over slice objects, both pure
        # and compiled (measured: 110-160 against 210-225 ns a record).
        offs = self.offs[a : b + 1].tolist()
        buf = self.buf
        skip = self.skip
        out = []
        s = offs[0]
        for e in offs[1:]:
            out.append(buf[s + skip : e])
            s = e
        return out

    def id_at(self, i: int) -> bytes:
        s = self.offs[i] + self.skip + ID_START
        return self.buf[s : s + (ID_END - ID_START)]


def _packed(start: int, records: list[bytes]) -> _Packed:
    """``records`` joined into one packed segment (each copied once)."""
    return _Packed(
        start, b"".join(records), array("I", accumulate(map(len, records), initial=0)), 0
    )


_DONE = _Refs(0, [])  # stands in for a segment already taken (frees it at once)


class RecordQueue:
    """A FIFO of records (``bytes``), deque-compatible for len, bool, iteration, popleft,
    append, extend, extendleft, clear and indexing (non-negative or negative positions;
    IndexError outside), plus :meth:`take` and :meth:`id_at`.

    ``pack`` (records) and ``chunk_bytes`` override PACK and CHUNK_BYTES (tests use small
    ones). A record taken out of a packed segment is a new ``bytes`` equal to the one put in.
    """

    __slots__ = (
        "_chunk_bytes",
        "_front",
        "_head",
        "_n",
        "_pack",
        "_pos",
        "_recheck",
        "_seal_at",
        "_seg_n",
        "_sealed",
        "_segs",
        "_starts",
        "_tail",
        "_tpos",
    )

    def __init__(self, pack: int = PACK, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._pack = pack
        self._seal_at = pack  # seal when this many records wait in the tail
        self._recheck = 0  # next segment _repack_some looks at
        self._chunk_bytes = chunk_bytes
        self._front: deque[bytes] = deque()  # put back at the left (extendleft)
        self._segs: list[_Segment] = []  # sealed segments; those before _head are taken
        self._starts: list[int] = []  # each segment's start (bisected by position lookups)
        self._head = 0  # first segment not wholly taken
        self._pos = 0  # records already taken from segment _head
        self._seg_n = 0  # records left in the segments
        self._sealed = 0  # records ever sealed (the next segment's start)
        self._tail: list[bytes] = []  # appended, not sealed; those before _tpos are taken
        self._tpos = 0
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.take_all(False))

    def __repr__(self) -> str:
        return f"RecordQueue({self._n} records, {len(self._segs) - self._head} segments)"

    # ------------------------------------------------------------ adding

    def append(self, record: bytes) -> None:
        """Add one record at the right."""
        if len(self._tail) - self._tpos >= self._seal_at:
            self._seal()
        elif self._tpos >= TRIM:
            self._trim()
        self._tail.append(record)
        self._n += 1

    def extend(self, records: list[bytes]) -> None:
        """Add records at the right, in order. The tail is sealed before, never with these
        records in it: the caller still holds them, which would read as shared."""
        if len(self._tail) - self._tpos >= self._seal_at:
            self._seal()
        elif self._tpos >= TRIM:
            self._trim()
        self._tail += records
        self._n += len(records)

    def extend_framed(self, buf: bytes, offs: list[int]) -> None:
        """Add at the right, in order, the records of a diskqueue chunk (DiskQueue.read_framed:
        record k is ``buf[offs[k] + 4 : offs[k + 1]]``) as one segment that holds ``buf``: no
        record is copied or made an object until taken. The tail is sealed first (its records
        come before these)."""
        n = len(offs) - 1
        if n <= 0:
            return
        if len(self._tail) > self._tpos:
            self._seal_tail()
            if self._tail:  # still shared: sealed as they are, not left behind these
                self._add(_Refs(self._sealed, self._tail))
                self._tail = []
                self._seal_at = self._pack
        self._add(_Packed(self._sealed, buf, array("I", offs), 4))
        self._n += n

    def extendleft(self, records: Iterable[bytes]) -> None:
        """Put records at the left one by one, as deque.extendleft (so the last one given ends
        up first: pass ``reversed(records)`` to keep their order)."""
        front = self._front
        before = len(front)
        front.extendleft(records)
        self._n += len(front) - before

    # ------------------------------------------------------------ taking

    def popleft(self) -> bytes:
        """Remove and return the leftmost record. Raises IndexError when empty."""
        if self._front:
            self._n -= 1
            return self._front.popleft()
        if self._seg_n:
            seg = self._segs[self._head]
            rec = seg.get(self._pos)
            self._pos += 1
            self._seg_n -= 1
            self._n -= 1
            if self._pos == seg.count:
                self._next_segment()
            return rec
        tail = self._tail
        tpos = self._tpos
        if tpos >= len(tail):
            raise IndexError("pop from an empty RecordQueue")
        rec = tail[tpos]
        self._n -= 1
        if tpos + 1 == len(tail):
            tail.clear()
            self._tpos = 0
        else:
            self._tpos = tpos + 1
        return rec

    def take(self, n: int) -> list[bytes]:
        """Remove and return up to ``n`` records from the left, oldest first."""
        if n >= self._n:
            if not self._seg_n and not self._tpos and not self._front:
                tail = self._tail  # a consumer keeping up: the records as appended, no copy
                self._tail = []
                self._n = 0
                return tail
            return self.take_all(True)
        out: list[bytes] = []
        if n <= 0:
            return out
        self._n -= n
        front = self._front
        while front and n:
            out.append(front.popleft())
            n -= 1
        while n and self._seg_n:
            seg = self._segs[self._head]
            pos = self._pos
            m = seg.count - pos
            if m > n:
                m = n
            if out:
                out += seg.take(pos, pos + m)
            else:
                out = seg.take(pos, pos + m)
            n -= m
            self._seg_n -= m
            self._pos = pos + m
            if self._pos == seg.count:
                self._next_segment()
        if n:
            tpos = self._tpos
            out += self._tail[tpos : tpos + n]
            self._tpos = tpos + n  # n < what was left: the tail keeps records
        return out

    def take_all(self, remove: bool) -> list[bytes]:
        """Every record, oldest first; ``remove``: the queue is emptied too."""
        out = list(self._front)
        segs = self._segs
        for k in range(self._head, len(segs)):
            seg = segs[k]
            out += seg.take(self._pos if k == self._head else 0, seg.count)
        out += self._tail[self._tpos :]
        if remove:
            self.clear()
        return out

    def clear(self) -> None:
        """Remove every record."""
        self._front.clear()
        self._segs = []
        self._starts = []
        self._head = 0
        self._pos = 0
        self._seg_n = 0
        self._sealed = 0
        self._tail = []
        self._tpos = 0
        self._n = 0
        self._seal_at = self._pack
        self._recheck = 0

    # ------------------------------------------------------------ positions

    def __getitem__(self, i: int) -> bytes:
        """The record at position ``i`` (0: the leftmost). O(log segments)."""
        i = self._index(i)
        nf = len(self._front)
        if i < nf:
            return self._front[i]
        i -= nf
        if i < self._seg_n:
            k, j = self._locate(i)
            return self._segs[k].get(j)
        return self._tail[self._tpos + i - self._seg_n]

    def id_at(self, i: int) -> bytes:
        """The 16-byte ID of the record at position ``i``, as ``self[i][ID_START:ID_END]``
        without copying the record out."""
        i = self._index(i)
        nf = len(self._front)
        if i < nf:
            return self._front[i][ID_START:ID_END]
        i -= nf
        if i < self._seg_n:
            k, j = self._locate(i)
            return self._segs[k].id_at(j)
        return self._tail[self._tpos + i - self._seg_n][ID_START:ID_END]

    def _index(self, i: int) -> int:
        n = self._n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("RecordQueue index out of range")
        return i

    def _locate(self, i: int) -> tuple[int, int]:
        """(segment, index in it) of the i-th record left in the segments."""
        a = self._sealed - self._seg_n + i  # its position among all records ever sealed
        k = bisect.bisect_right(self._starts, a, self._head) - 1
        return k, a - self._starts[k]

    # ------------------------------------------------------------ internals

    def _next_segment(self) -> None:
        """Segment _head was taken entirely: free it, move on (compacting the lists now and
        then)."""
        segs = self._segs
        segs[self._head] = _DONE
        self._head += 1
        self._pos = 0
        head = self._head
        if head >= 64 and 2 * head >= len(segs):
            del segs[:head]
            del self._starts[:head]
            self._head = 0
            self._recheck = max(0, self._recheck - head)

    def _trim(self) -> None:
        del self._tail[: self._tpos]
        self._tpos = 0

    def _seal(self) -> None:
        """Turn the tail's records into segments, then look again at an older refs segment or
        two (see _repack_some)."""
        self._seal_tail()
        self._repack_some()

    def _repack_some(self) -> None:
        """Pack up to REPACK refs segments whose records no one else holds any more (another
        channel's consumer has caught up since they were sealed). A cursor walks the segments
        round and round, at most REPACK_WALK of them per call."""
        segs = self._segs
        head = self._head
        k = self._recheck
        done = 0
        for _ in range(min(REPACK_WALK, len(segs) - head)):
            if k < head or k >= len(segs):
                k = head
            seg = segs[k]
            if isinstance(seg, _Refs) and seg.count:
                refs = seg.refs
                if _unshared_prefix(refs) == len(refs) and sum(map(len, refs)) <= (
                    PACK_MAX_AVERAGE * len(refs)
                ):
                    segs[k] = _packed(seg.start, refs)
                    done += 1
                    if done >= REPACK:
                        k += 1
                        break
            k += 1
        self._recheck = k

    def _seal_tail(self) -> None:
        """Turn the tail's records into segments: packed, unless they are shared or large."""
        tail = self._tail
        if self._tpos:
            del tail[: self._tpos]
            self._tpos = 0
        n = len(tail)
        self._seal_at = self._pack
        if not n:
            return
        self._tail = []
        total = sum(map(len, tail))
        if total > PACK_MAX_AVERAGE * n:
            self._add(_Refs(self._sealed, tail))
            return
        cut = _unshared_prefix(tail)
        if not cut:
            self._add(_Refs(self._sealed, tail))
            return
        if cut < n:
            # The newest records are still shared (another channel's consumer has them in
            # flight): they wait in the tail and are looked at again at the next seal.
            self._tail = tail[cut:]
            del tail[cut:]
            total = sum(map(len, tail))
            self._seal_at = max(self._pack, n - cut + self._pack // 4)
        if total <= self._chunk_bytes:
            self._add(_packed(self._sealed, tail))
            return
        ends = list(accumulate(map(len, tail)))
        a = 0
        while a < cut:
            limit = (ends[a - 1] if a else 0) + self._chunk_bytes
            b = max(bisect.bisect_right(ends, limit, a), a + 1)
            self._add(_packed(self._sealed, tail[a:b]))
            a = b

    def _add(self, seg: _Segment) -> None:
        self._segs.append(seg)
        self._starts.append(seg.start)
        self._sealed += seg.count
        self._seg_n += seg.count


def _unshared_prefix(records: list[bytes]) -> int:
    """How many of the oldest ``records`` no one else holds: all of them, none (the oldest is
    shared: another queue holds the same run), or those before the first shared one (sharing
    ends at the newest records, which another channel's consumer may still hold). Reads every
    SAMPLE-th count, then the counts between the last unshared and the first shared sample."""
    refs = _refcounts(records, 0, len(records), SAMPLE)
    if max(refs) <= _UNSHARED:
        return len(records)
    if refs[0] > _UNSHARED:
        return 0
    k = 1
    while refs[k] <= _UNSHARED:
        k += 1
    lo = (k - 1) * SAMPLE + 1
    fine = _refcounts(records, lo, k * SAMPLE + 1, 1)
    j = 0
    while fine[j] <= _UNSHARED:
        j += 1
    return lo + j
