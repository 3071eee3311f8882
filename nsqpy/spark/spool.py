"""The source's write-ahead spool: what nsqd delivered, durable before it is FIN'd, in Arrow IPC.

Strategy: the spool is a log of rows numbered from 0 (a row's number is its *position*; the
source's offsets are positions). It is a directory of segment files, each an Arrow IPC stream
named by the position of its first row (`<position:020d>.arrows`): the schema message, then one
record batch per group the driver wrote (many messages, one write, one fsync). Appending never
rewrites a byte, so a segment is readable while it grows, and a torn tail (a process killed
mid-write) is cut off at the last whole message when the spool is opened again.

The driver keeps an index in memory, one entry per group: (position, rows, byte offset, byte
length, segment). A Spark partition is then only (segment path, byte range, rows to skip and
take): an executor reads that byte range through pyarrow's filesystem layer (local path or a
URI) and turns each IPC message back into a RecordBatch without a Python loop per row
(`pyarrow.ipc.read_record_batch`: the buffers are used as they are).

Segments roll over at `segment_bytes`; `delete_below(end)` removes whole closed segments whose
rows are all below `end` (Spark committed them). The newest segment is never deleted, so its name
keeps the position count across restarts even when everything is committed."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

#: The rows the source yields, as Spark expects them from a Python data source
#: (``to_arrow_schema`` of the source's DDL: every field nullable, timestamps in UTC).
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("body", pa.binary()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("attempts", pa.int32()),
        ("topic", pa.string()),
        ("channel", pa.string()),
        ("nsqd_address", pa.string()),
    ]
)

_SEGMENT_RE = re.compile(r"^(\d{20})\.arrows$")
_SCHEMA_BYTES = SCHEMA.serialize().to_pybytes()


def segment_name(position: int) -> str:
    return f"{position:020d}.arrows"


@dataclass
class Group:
    """One record batch of a segment: rows [position, position + rows), at bytes
    [offset, offset + length) of the segment file."""

    position: int
    rows: int
    offset: int
    length: int


@dataclass
class Segment:
    position: int  # of its first row
    path: str
    groups: list[Group] = field(default_factory=list)
    size: int = 0  # bytes in the file
    rows: int = 0  # in its groups

    @property
    def end(self) -> int:
        return self.position + self.rows

    def add(self, g: Group) -> None:
        self.groups.append(g)
        self.rows += g.rows


@dataclass
class Slice:
    """What one Spark partition reads: ``rows`` rows starting ``skip`` rows into the byte range
    [offset, offset + length) of the segment ``name`` (a run of whole IPC messages)."""

    name: str
    offset: int
    length: int
    skip: int
    rows: int


class SpoolLockedError(RuntimeError):
    pass


class Spool:
    """The driver's side: append groups, fsync them, index them, plan slices, delete below.

    ``append`` is called by one writer thread and ``sync`` by one sync thread (the fsync of a
    group overlaps the build of the next); ``end``/``slices``/``delete_below`` by Spark's calls;
    ``lock`` orders the index. ``_fd_lock`` guards the write file descriptor between the writer
    (which replaces it when a segment is full, after an fsync of the full one) and the sync thread
    (which fsyncs it): no fsync of a closed or reused descriptor, no group marked durable whose
    segment was closed unsynced. A file lock keeps a second source off the directory.
    """

    def __init__(
        self, path: str, *, segment_bytes: int = 64 << 20, lock_timeout: float = 30
    ) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self.lock = threading.Lock()
        self._fd_lock = threading.Lock()
        os.makedirs(path, exist_ok=True)
        self._lock_fd = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self._lock_fd)
                    raise SpoolLockedError(
                        f"spool_dir {path} is used by another running nsq source"
                    ) from None
                time.sleep(0.2)
        self.segments: list[Segment] = []
        self.truncated_bytes = 0  # torn tail cut off when opening
        for name in sorted(os.listdir(path)):
            m = _SEGMENT_RE.match(name)
            if m:
                self.segments.append(self._scan(int(m.group(1)), os.path.join(path, name)))
        self._fd = -1
        self._dir_dirty = False
        if not self.segments:
            self._new_segment(0)
        else:
            seg = self.segments[-1]
            self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
        self.durable_end = self.segments[-1].end
        self.bytes_written = 0

    # ------------------------------------------------------------------ opening

    def _scan(self, position: int, path: str) -> Segment:
        """Index a segment file; cut a torn tail (a partial message) off."""
        seg = Segment(position, path)
        size = os.path.getsize(path)
        good = 0
        pos = position
        if size:
            with pa.memory_map(path) as src:
                reader = ipc.MessageReader.open_stream(src)
                try:
                    first = reader.read_next_message()
                    if first.type != "schema":
                        raise ValueError("no schema")
                    if not ipc.read_schema(first).equals(SCHEMA):
                        raise RuntimeError(f"{path}: not a segment of this spool version")
                    good = src.tell()
                    while True:
                        at = src.tell()
                        msg = reader.read_next_message()
                        n = ipc.read_record_batch(msg, SCHEMA).num_rows
                        end = src.tell()
                        seg.add(Group(pos, n, at, end - at))
                        pos += n
                        good = end
                except StopIteration:
                    pass
                except (OSError, ValueError, pa.ArrowInvalid):
                    pass  # a torn message: everything before it stands
        if good < size or good == 0:
            self.truncated_bytes += size - good
            with open(path, "r+b") as f:
                if good == 0:
                    f.truncate(0)
                    f.write(_SCHEMA_BYTES)
                    good = len(_SCHEMA_BYTES)
                else:
                    f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        seg.size = good
        return seg

    def _new_segment(self, position: int) -> None:
        path = os.path.join(self.path, segment_name(position))
        with self._fd_lock:
            if self._fd >= 0:
                os.fsync(self._fd)  # its groups may not be synced yet: the sync thread
                os.close(self._fd)  # only ever fsyncs the current descriptor
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            os.write(fd, _SCHEMA_BYTES)
            self._fd = fd
            self._dir_dirty = True
        self.segments.append(Segment(position, path, size=len(_SCHEMA_BYTES)))

    # ------------------------------------------------------------------ writing

    def append(self, batch: pa.RecordBatch) -> int:
        """Write one group (not yet durable: call :meth:`sync`); returns the end position."""
        data = batch.serialize()
        with self.lock:
            seg = self.segments[-1]
            if seg.groups and seg.size + data.size > self.segment_bytes:
                self._new_segment(seg.end)
                seg = self.segments[-1]
            end = seg.end
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(self._fd, view[written:])
        with self.lock:
            seg.add(Group(end, batch.num_rows, seg.size, data.size))
            seg.size += data.size
            self.bytes_written += data.size
            return end + batch.num_rows

    def sync(self, end: int) -> None:
        """fsync what was appended (and the directory when a segment was created); rows below
        ``end`` are durable from then on."""
        with self._fd_lock:
            os.fsync(self._fd)
            if self._dir_dirty:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._dir_dirty = False
        with self.lock:
            self.durable_end = max(self.durable_end, end)

    # ------------------------------------------------------------------ reading plans

    @property
    def start(self) -> int:
        """The first position still in the spool."""
        return self.segments[0].position

    def bytes_between(self, start: int, end: int) -> int:
        """Bytes of the groups overlapping [start, end) (an upper bound of the rows' size)."""
        with self.lock:
            return sum(g.length for g in self._groups(start, end))

    def _groups(self, start: int, end: int) -> Iterator[Group]:
        for seg in self.segments:
            if seg.end <= start or seg.position >= end:
                continue
            for g in seg.groups:
                if g.position + g.rows > start and g.position < end:
                    yield g

    def end_within_bytes(self, start: int, end: int, max_bytes: int) -> int:
        """The largest e in (start, end] whose groups from ``start`` fit ``max_bytes`` (at least
        one group's rows, so a batch always moves on)."""
        total = 0
        with self.lock:
            out = start
            for g in self._groups(start, end):
                total += g.length
                if total > max_bytes and out > start:
                    break
                out = min(end, g.position + g.rows)
            return out

    def recent_rows(self, count: int) -> list[tuple[bytes, bytes]]:
        """``(nsqd_address, id)`` of the last ``count`` rows (what may have been spooled but not
        FIN'd when the previous driver died)."""
        out: list[tuple[bytes, bytes]] = []
        with self.lock:
            groups = [(seg, g) for seg in self.segments for g in seg.groups]
        for seg, g in reversed(groups):
            if len(out) >= count:
                break
            with open(seg.path, "rb") as f:
                f.seek(g.offset)
                buf = f.read(g.length)
            rb = ipc.read_record_batch(ipc.read_message(pa.py_buffer(buf)), SCHEMA)
            ids = rb.column("id").to_pylist()
            addrs = rb.column("nsqd_address").to_pylist()
            out.extend((a.encode(), i.encode()) for a, i in zip(addrs, ids, strict=True))
        return out

    def slices(self, start: int, end: int, max_rows: int) -> list[Slice]:
        """Rows [start, end) as slices of at most ``max_rows`` rows (whole groups' bytes).

        Raises LookupError when a row of the range is no longer (or not yet) in the spool."""
        out: list[Slice] = []
        with self.lock:
            if start < self.start or end > self.durable_end:
                raise LookupError(
                    f"rows [{start}, {end}) are not in the spool {self.path} (it holds "
                    f"[{self.start}, {self.durable_end}))"
                )
            for seg in self.segments:
                if seg.end <= start or seg.position >= end:
                    continue
                name = os.path.basename(seg.path)
                cur: Slice | None = None
                for g in seg.groups:
                    lo, hi = max(start, g.position), min(end, g.position + g.rows)
                    if lo >= hi:
                        continue
                    while lo < hi:
                        if cur is None or cur.rows >= max_rows:
                            if cur is not None:
                                out.append(cur)
                            cur = Slice(name, g.offset, g.length, lo - g.position, 0)
                        else:  # the slice runs on into this group
                            cur.length = g.offset + g.length - cur.offset
                        n = min(hi - lo, max_rows - cur.rows)
                        cur.rows += n
                        lo += n
                if cur is not None:
                    out.append(cur)
        return out

    # ------------------------------------------------------------------ cleaning

    def delete_below(self, end: int) -> int:
        """Delete the closed segments whose rows are all below ``end``; returns how many."""
        with self.lock:
            doomed = [s for s in self.segments[:-1] if s.end <= end]
            self.segments = [s for s in self.segments if s not in doomed]
        for s in doomed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(s.path)
        return len(doomed)

    @property
    def committed(self) -> int:
        """The highest position Spark committed (``committed`` file; the spool's start when
        there is none): where a new query on this spool starts."""
        try:
            with open(os.path.join(self.path, "committed")) as f:
                return max(self.start, int(f.read().strip() or 0))
        except (OSError, ValueError):
            return self.start

    def set_committed(self, position: int) -> None:
        tmp = os.path.join(self.path, ".committed.tmp")
        with open(tmp, "w") as f:
            f.write(str(position))
        os.replace(tmp, os.path.join(self.path, "committed"))

    def disk_bytes_from(self, position: int) -> int:
        """Bytes of the segments holding rows at or after ``position``."""
        with self.lock:
            return sum(s.size for s in self.segments if s.end > position)

    def close(self) -> None:
        with self._fd_lock:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


# ---------------------------------------------------------------------------- executor side


def _filesystem(base: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path)`` for a local directory or a URI (file://, hdfs://,
    s3://, ...)."""
    import pyarrow.fs as pafs

    if "://" in base:
        return pafs.FileSystem.from_uri(base)
    return pafs.LocalFileSystem(), os.path.abspath(base)


def read_slice(base: str, sl: Slice, batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
    """The rows of one slice as RecordBatches of about ``batch_rows`` rows (groups joined: Spark
    takes a few large batches faster than many small ones), with no Python loop per row: reads
    the slice's byte range of ``<base>/<segment>`` through pyarrow.fs."""
    fs, root = _filesystem(base)
    with fs.open_input_file(f"{root.rstrip('/')}/{sl.name}") as f:
        buf = f.read_at(sl.length, sl.offset)
    reader = ipc.MessageReader.open_stream(pa.BufferReader(buf))
    skip, left = sl.skip, sl.rows
    pending: list[pa.RecordBatch] = []
    held = 0
    for msg in reader:
        if left <= 0:
            break
        rb = ipc.read_record_batch(msg, SCHEMA)
        if skip >= rb.num_rows:
            skip -= rb.num_rows
            continue
        n = min(left, rb.num_rows - skip)
        pending.append(rb.slice(skip, n))
        held += n
        skip = 0
        left -= n
        if held >= batch_rows:
            yield _joined(pending)
            pending, held = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, SCHEMA).combine_chunks().to_batches()[0]
