r"""The on-disk FIFO behind every topic and channel, file-compatible with go-diskqueue (nsqd 1.3).

Strategy: one object owned by the event-loop thread; no asyncio here. A put packs the record
into an in-memory write buffer and moves the positions at once; flush() hands the buffer to the
OS with pwrite at the buffer's file offset. Reading is a pread of a 64 KiB chunk that is parsed
record by record; peek() caches the record, advance() consumes it, so a record counts as
consumed only when the caller has handed it on. Durability is split in two: prepare_sync()
(loop thread: flush and snapshot the positions) returns a job (any thread: fsync a dup of the
write fd, then write the meta file atomically). The meta file is the commit point and the
rules below keep it honest.

The queue is one class: the writer, the reader, the sync jobs' snapshots and the handling of
corrupt data share its positions. Three parts with their own job live beside it: the data
files, file by file, with no position (DataFiles, diskqueue_files.py); the meta file with what
the sync jobs share across threads (MetaFile, diskqueue_meta.py); and the checks at open that
turn a meta file and the data files into a starting plan (diskqueue_recovery.py). The
per-record loops are diskqueue_codec.py's. docs/architecture-diskqueue.md draws the parts.

On-disk format (go-diskqueue v1.1.0, the version nsqd 1.3 uses):
  <data_path>/<name>.diskqueue.<%06d file number>.dat   records [int32 big-endian size][bytes]
  <data_path>/<name>.diskqueue.meta.dat                 "%d\n%d,%d\n%d,%d\n" =
      depth \n readFileNum,readPos \n writeFileNum,writePos \n
  The meta file is replaced by writing "<meta>.<random int63>.tmp", fsync, rename over.
  A file rolls *before* the write that would take it past max_bytes_per_file, and only when it
  already holds something (writePos > 0 and writePos + 4 + len > max): so a file never exceeds
  the limit except when it holds a single record bigger than the limit. No size is recorded:
  the reader of a finished file ("complete": number < writeFileNum) reads to the file's actual
  size, so files written with another max_bytes_per_file read fine.

Guarantees (what a reader of this file may rely on):
  * The meta file never names data that is not durable: the data fsync comes before the meta
    rename, and a roll fsyncs the old file before the meta naming the new one is written.
  * The meta file never goes backwards: snapshots are numbered and an older snapshot is never
    written over a newer one (a slow sync job loses the race silently).
  * A consumed data file is removed only once a meta file naming a later read file is durable.
  * After a crash the queue reopens at the last durable meta: records consumed since then come
    back again (at-least-once). Records written since then and present in the files (all that
    was flush()ed, for a process crash; all that was synced, for a power loss) are kept: as
    go-diskqueue does, when the write file is longer than the meta's writePos the writer moves
    to a new file and the reader reads the old one to its end; beyond go-diskqueue, data files
    numbered after the meta's write file are read too, and the salvaged records are counted
    into depth (go leaves depth short and lets the tail check reset it). A torn record at the
    end of a salvaged file is corruption (below): only that tail is lost.
  * A missing meta file is an empty queue at file 0. If a data file 0 exists anyway (a crash
    before the first meta write), its records are salvaged, not overwritten.

Corruption (go-diskqueue handleReadError): a size outside [min_msg_size, max_msg_size], a
record cut short by the end of the file, or a file that cannot be read: the file is renamed to
"<file>.bad", errors are logged, reading goes on at the next file; if the bad file is the write
file, writing moves to a new file too. depth is then approximate, exactly as in go: the records
lost in the bad file stay counted until the reader reaches the end of the queue, where a
non-zero depth is logged and reset to 0. A file truncated exactly at a record boundary cannot
be told from a shorter file: its lost records are found only by that tail check.

Deliberate differences from go-diskqueue, all invisible in the file format:
  * A reader that is exactly at the end of a finished file moves to the next file; go reads
    there, gets EOF and renames a healthy file to .bad (nsqio/go-diskqueue#42, still open).
  * empty() writes the meta file (with the new, empty positions) instead of removing it.
  * A meta file whose read position is past its write position is logged at open and the
    queue restarts on a fresh file, removing the files between (go's checkTailCorruption does
    the same, but only once a read or a read error happens to call it). A meta file with a
    negative number, or one that does not parse, is logged and treated as missing.
  * The directory is not fsynced after the meta rename (go does not either)."""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import ClassVar

from .diskqueue_codec import NATIVE, cut_records, pack_records, record_starts, unframe
from .diskqueue_files import READ_CHUNK, DataFiles
from .diskqueue_meta import MetaFile, format_meta
from .diskqueue_recovery import carry_out, plan_open

__all__ = [
    "MAX_RECORD_SIZE",
    "READ_CHUNK",
    "WRITE_BUFFER_LIMIT",
    "DiskQueue",
    "DiskQueueClosed",
    "FramedDiskQueue",
]

#: put() flushes the write buffer before it grows past this.
WRITE_BUFFER_LIMIT = 1 << 20
#: A record's size field is an int32 and the record must fit in a Python slice comfortably.
MAX_RECORD_SIZE = (1 << 31) - 5

_LEN = struct.Struct(">i")  # a record's size prefix: int32 big-endian
_pack_len = _LEN.pack
_unpack_len = _LEN.unpack_from
_NO_MARKS: list[int] = []
_default_logger = logging.getLogger("nsqpy.diskqueue")


def _size_error(n: int, lo: int, hi: int) -> ValueError:
    """go-diskqueue's refusal of a record of ``n`` bytes outside [lo, hi] (writeOne)."""
    return ValueError(f"invalid message write size ({n}) minMsgSize={lo} maxMsgSize={hi}")


class DiskQueueClosed(OSError):
    """An operation on a diskqueue after close() or delete() (go-diskqueue: "exiting")."""


class DiskQueue:
    """A FIFO of byte records on disk in go-diskqueue's format.

    Every method except the job returned by :meth:`prepare_sync` belongs to one thread (the
    event loop's). The job may run in any thread while that thread carries on.
    """

    __slots__ = (
        "_clock",
        "_closed",
        "_depth",
        "_files",
        "_last_text",
        "_log",
        "_meta",
        "_need_sync",
        "_next_pos",
        "_ops",
        "_peeked",
        "_pending_since",
        "_rbuf",
        "_rbuf_off",
        "_read_fd",
        "_read_num",
        "_read_pos",
        "_read_size",
        "_sync_timeout",
        "_wbuf",
        "_wbuf_start",
        "_write_fd",
        "_write_num",
        "_write_pos",
        "data_path",
        "max_bytes_per_file",
        "max_msg_size",
        "min_msg_size",
        "name",
        "read_floor",
        "sync_every",
        "sync_timeout_ms",
    )

    compiled_codec: ClassVar[bool] = NATIVE  # the record loops run compiled: read_framed pays

    def __init__(
        self,
        name: str,
        data_path: str,
        max_bytes_per_file: int,
        min_msg_size: int,
        max_msg_size: int,
        sync_every: int,
        sync_timeout_ms: int,
        logger: logging.Logger | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes_per_file <= 0:
            raise ValueError(f"max_bytes_per_file must be positive, not {max_bytes_per_file}")
        if not 0 <= min_msg_size <= max_msg_size <= MAX_RECORD_SIZE:
            raise ValueError(f"bad record size bounds [{min_msg_size}, {max_msg_size}]")
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.min_msg_size = min_msg_size
        self.max_msg_size = max_msg_size
        self.sync_every = max(1, sync_every)
        self.sync_timeout_ms = sync_timeout_ms
        self._sync_timeout = sync_timeout_ms / 1000.0
        self._log = logger if logger is not None else _default_logger
        self._clock = clock
        #: Optional: returns (file number, position, records) of the oldest record handed on
        #: but not yet finished by its consumer, and how many records were consumed from there
        #: on; the meta file then keeps that read position (and counts those records), so a
        #: crash redelivers them. None = every consumed record is done.
        self.read_floor: Callable[[], tuple[int, int, int] | None] | None = None
        self._files = DataFiles(data_path, name, self._log)
        self._meta = MetaFile(os.path.join(data_path, f"{name}.diskqueue.meta.dat"), self._files)

        # Start from the meta file, checked against the data files (diskqueue_recovery.py).
        plan = plan_open(self._meta.read(), self._files, min_msg_size, max_msg_size)
        carry_out(plan, self._files)
        self._meta.opened_at(plan.read_num)
        # Positions. The read position is what has been consumed; _next_pos is where the
        # peeked record ends. Invariant: _write_pos == _wbuf_start + len(_wbuf).
        self._depth = plan.depth
        self._read_num = plan.read_num
        self._read_pos = self._next_pos = plan.read_pos
        self._write_num = plan.write_num
        self._write_pos = self._wbuf_start = plan.write_pos

        self._wbuf = bytearray()
        self._write_fd: int | None = None

        self._read_fd: int | None = None
        self._read_size = -1  # size of a complete read file, -1 until looked up
        self._rbuf = b""  # a chunk of the read file starting at file offset _rbuf_off
        self._rbuf_off = 0
        self._peeked: bytes | None = None

        self._ops = 0  # puts and advances since the last sync (go counts both)
        self._pending_since = 0.0  # clock() at the first of those
        self._need_sync = plan.need_sync
        self._closed = False
        # The meta text of the last snapshot, or as opened ("" when no meta names these
        # positions; a missing meta file is already an empty queue's).
        self._last_text = (
            self._meta_text()[1]
            if self._meta.exists()
            else (b"0\n0,0\n0,0\n" if plan[:5] == (0, 0, 0, 0, 0) else b"")
        )
        self._check_tail()

    def file_name(self, num: int) -> str:
        """Path of data file ``num``: ``<data_path>/<name>.diskqueue.<%06d>.dat``."""
        return self._files.path(num)

    @property
    def meta_file_name(self) -> str:
        return self._meta.path

    @property
    def depth(self) -> int:
        """Records written and not yet consumed (a peeked record still counts)."""
        return self._depth

    @property
    def read_file_num(self) -> int:
        return self._read_num

    @property
    def read_pos(self) -> int:
        return self._read_pos

    @property
    def write_file_num(self) -> int:
        return self._write_num

    @property
    def write_pos(self) -> int:
        return self._write_pos

    @property
    def closed(self) -> bool:
        return self._closed

    # Lifecycle

    def empty(self) -> None:
        """Drop every record: the positions jump to a fresh file after the last one, the meta
        file says so, then the old data files are removed (meta first: a crash in between
        leaves files no meta names, never a meta naming missing files)."""
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        self._log.info("DISKQUEUE(%s): emptying", self.name)
        old_read, old_write = self._read_num, self._write_num
        self._peeked = None
        self._wbuf.clear()
        self._close_read()
        self._close_write()
        self._write_num = self._read_num = old_write + 1
        self._write_pos = self._read_pos = self._next_pos = 0
        self._wbuf_start = 0
        self._depth = 0
        self._meta.retire(range(old_read, old_write + 1))
        self.sync()

    def close(self) -> None:
        """Sync and close the files. Idempotent. If the final sync fails the OSError is raised
        and the files are closed anyway (records still buffered are lost)."""
        if self._closed:
            return
        self._log.info("DISKQUEUE(%s): closing", self.name)
        try:
            # Nothing happened since the meta was last written (or, for a queue never used, a
            # missing meta already means "empty"): skip the fsync. At the exit of a daemon with
            # 10,000 idle channels this saves 10,000 fsyncs.
            behind = self.unsynced or not self._meta.up_to_date()
            if behind or self._meta_text()[1] != self._last_text:
                self._prepare_sync()()
            elif not self._meta.exists():
                # go-diskqueue always leaves a meta file; an empty queue's needs no fsync.
                self._meta.write(self._last_text, fsync=False)
        finally:
            self._closed = True
            self._meta.close()
            self._peeked = None
            self._close_read()
            self._close_write()

    def delete(self) -> None:
        """Close without syncing and remove the data files, the meta file and any leftover
        meta temp files (the topic or channel is gone). ``.bad`` files are kept, as go keeps
        them, for an operator to look at. Raises the first removal's OSError, after trying
        them all."""
        self._log.info("DISKQUEUE(%s): deleting", self.name)
        if not self._closed:
            self._closed = True
            self._peeked = None
            self._wbuf.clear()
            self._close_read()
            self._close_write()
        self._meta.close()
        nums = set(self._meta.take_obsolete())
        nums.update(range(self._read_num, self._write_num + 1))
        errors = [self._files.remove(n) for n in sorted(nums)]
        errors += self._meta.delete()
        for e in errors:
            if e is not None:
                raise e

    # Writing: records into a write buffer, pwrite at the buffer's file offset, rolling files

    def put(self, data: bytes) -> None:
        """Append one record. ValueError if its size is out of bounds; OSError if the I/O that
        this put had to do (a roll, or flushing a full write buffer) failed, in which case the
        record was not added."""
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        n = len(data)
        if n < self.min_msg_size or n > self.max_msg_size:
            raise _size_error(n, self.min_msg_size, self.max_msg_size)
        wp = self._write_pos
        if wp > 0 and wp + 4 + n > self.max_bytes_per_file:
            self._roll()
        elif len(self._wbuf) >= WRITE_BUFFER_LIMIT:
            self.flush()
        buf = self._wbuf
        buf += _pack_len(n)
        buf += data
        self._write_pos += 4 + n
        self._depth += 1
        if not self._ops:
            self._pending_since = self._clock()
        self._ops += 1

    def put_many(
        self, datas: Iterable[bytes], marks: list[int] | None = None
    ) -> list[tuple[int, int]]:
        """put() each record in order. Sizes are checked first: a ValueError adds nothing. An
        OSError part-way leaves the records before the failing one added.

        ``marks``: ascending indexes into ``datas`` whose position is wanted; the answer is
        their (file number, byte position of the record's size prefix), in the same order
        (empty without marks)."""
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        datas = list(datas)
        lo = self.min_msg_size
        hi = self.max_msg_size
        for d in datas:
            n = len(d)
            if n < lo or n > hi:
                raise _size_error(n, lo, hi)
        max_bytes = self.max_bytes_per_file
        buf = self._wbuf
        positions: list[tuple[int, int]] = []
        mark_at = 0
        i = 0
        n_datas = len(datas)
        while i < n_datas:
            wp = self._write_pos
            if wp > 0 and wp + 4 + len(datas[i]) > max_bytes:
                self._roll()
            elif len(buf) >= WRITE_BUFFER_LIMIT:
                self.flush()
            j, self._write_pos, mark_at = pack_records(
                buf,
                datas,
                i,
                self._write_pos,
                max_bytes,
                WRITE_BUFFER_LIMIT,
                marks or _NO_MARKS,
                mark_at,
                positions,
                self._write_num,
            )
            self._depth += j - i
            if not self._ops:
                self._pending_since = self._clock()
            self._ops += j - i
            i = j
        return positions

    def flush(self) -> None:
        """Write the buffered records to the OS (no fsync). Raises OSError; what was written
        before the error stays written, the rest stays buffered."""
        buf = self._wbuf
        if not buf:
            return
        fd = self._write_fd
        if fd is None:
            fd = self._write_fd = self._files.open_write(self._write_num, self._wbuf_start)
        while buf:
            n = os.pwrite(fd, buf, self._wbuf_start)
            if n <= 0:
                raise OSError(f"pwrite to {self.file_name(self._write_num)} wrote nothing")
            del buf[:n]
            self._wbuf_start += n

    def _close_write(self) -> None:
        fd = self._write_fd
        if fd is not None:
            self._write_fd = None
            os.close(fd)

    def _roll(self) -> None:
        """Finish the write file (flush, fsync, close) and start the next one; the meta file
        is rewritten at once, as go-diskqueue writeOne does."""
        self.flush()  # may raise: nothing has changed yet
        old = self._write_num
        old_end = self._write_pos
        fd = self._write_fd
        if fd is not None:
            self._write_fd = None
            self._files.finish_write(fd)
        self._write_num = old + 1
        self._write_pos = 0
        self._wbuf_start = 0
        if self._read_num == old and self._read_pos == old_end and self._peeked is None:
            # The reader has consumed everything in the finished file: move it on now rather
            # than let it read at EOF later (go's .bad-file bug, see the module comment).
            self._next_read_file()
        try:
            self.sync()  # go syncs at every roll; the meta now names the new write file
        except OSError as e:
            self._log.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)

    # Reading: pread a chunk, parse records out of it; peek caches, advance consumes

    def peek(self) -> bytes | None:
        """The next unconsumed record, or None when there is none. Repeated calls return the
        same record until advance(). Corrupt data is skipped (see the module comment). OSError
        only when the record is still in the write buffer and flushing it fails, or when a data
        file exists but cannot be opened; the queue is unchanged and peek() may be retried."""
        rec = self._peeked
        if rec is not None:
            return rec
        buf = self._rbuf
        i = self._read_pos - self._rbuf_off
        if i >= 0 and i + 4 <= len(buf):
            n = _unpack_len(buf, i)[0]
            j = i + 4 + n
            if j <= len(buf) and self.min_msg_size <= n <= self.max_msg_size:
                rec = buf[i + 4 : j]
                self._peeked = rec
                self._next_pos = self._read_pos + 4 + n
                return rec
        return self._peek_slow()

    def _peek_slow(self) -> bytes | None:
        """peek() when the record is not in the chunk already read: read a new chunk (or the
        next file), hand whatever is corrupt to _bad_read_file and go on."""
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        while True:
            rn = self._read_num
            rp = self._read_pos
            at_write = rn == self._write_num
            if at_write:
                limit = self._write_pos
                if rp >= limit:
                    return None
                if self._wbuf and min(limit, rp + READ_CHUNK) > self._wbuf_start:
                    self.flush()
            fd = self._read_fd
            if fd is None:
                fd = self._open_read()
                if fd < 0:
                    continue  # the file was missing and has been skipped
            if not at_write:
                limit = self._read_size
                if limit < 0:
                    limit = self._read_size = os.fstat(fd).st_size
                if rp >= limit:
                    if rp == limit:
                        self._next_read_file()
                    else:
                        self._bad_read_file(f"read position beyond end of file ({limit} bytes)")
                    continue
            avail = limit - rp
            if avail < 4:
                self._bad_read_file(f"truncated record: {avail} bytes left at end of file")
                continue
            want = min(READ_CHUNK, avail)
            try:
                chunk = os.pread(fd, want, rp)
            except OSError as e:
                self._bad_read_file(str(e))
                continue
            if len(chunk) < want:
                self._bad_read_file(f"unexpected end of file at {rp + len(chunk)}")
                continue
            n = _unpack_len(chunk, 0)[0]
            if n < self.min_msg_size or n > self.max_msg_size:
                self._bad_read_file(f"invalid message read size ({n})")
                continue
            end = 4 + n
            if end > avail:
                self._bad_read_file(
                    f"truncated record: size {n} but {avail - 4} bytes left in the file"
                )
                continue
            if end <= len(chunk):
                self._rbuf = chunk
                self._rbuf_off = rp
                rec = chunk[4:end]
            else:  # a record bigger than a chunk: read it whole, by itself
                if at_write and self._wbuf and rp + end > self._wbuf_start:
                    self.flush()
                try:
                    rec = os.pread(fd, n, rp + 4)
                except OSError as e:
                    self._bad_read_file(str(e))
                    continue
                if len(rec) < n:
                    self._bad_read_file(f"unexpected end of file at {rp + 4 + len(rec)}")
                    continue
                self._rbuf = b""
                self._rbuf_off = 0
            self._peeked = rec
            self._next_pos = rp + end
            return rec

    def advance(self) -> None:
        """Consume the record returned by the last peek(). RuntimeError if there is none."""
        if self._peeked is None:
            raise RuntimeError("advance() without a peeked record")
        self._consumed(self._next_pos, 1)

    def read_many(self, limit: int, positions: list[int] | None = None) -> tuple[int, list[bytes]]:
        """Consume up to ``limit`` (>= 1) records in one call: (file number, records), all read
        from that one data file; ([] when there is none to read now). With ``positions``, the
        byte position of each record in that file is appended to it (where its 4-byte size
        starts, as ``read_pos`` would have shown before it was read).

        What peek() + advance() do per record, in one call for the records of a chunk already
        read (raises what peek() raises; the queue is then unchanged). A record past the chunk,
        or of a size out of bounds, ends the batch; the next call reads it through peek()."""
        file_num, first_pos, buf, offs = self.read_framed(limit)
        out: list[bytes] = []
        if offs:
            cut_records(buf, offs, out, positions, first_pos)
        return file_num, out

    def read_framed(self, limit: int) -> tuple[int, int, bytes, list[int]]:
        """Consume up to ``limit`` (>= 1) records as read_many() does, left as they lie in the
        data file: (file number, the first one's position, chunk, offs), record k being
        ``chunk[offs[k] + 4 : offs[k + 1]]``; offs is [] when there is none to read now. No
        object per record: the chunk is the one read from the file (a record bigger than a
        chunk comes back framed by itself)."""
        rec = self.peek()
        file_num = self._read_num
        rp = self._read_pos
        if rec is None:
            return file_num, rp, b"", []
        buf = self._rbuf
        off = self._rbuf_off
        j = self._next_pos - off
        if rp < off or j > len(buf):  # read by itself, past the chunk
            self._consumed(self._next_pos, 1)
            return file_num, rp, len(rec).to_bytes(4, "big") + rec, [0, 4 + len(rec)]
        offs = [rp - off]
        if limit > 1:
            j = record_starts(buf, j, self.min_msg_size, self.max_msg_size, limit, offs)
        offs.append(j)
        self._consumed(off + j, len(offs) - 1)
        return file_num, rp, buf, offs

    def _consumed(self, rp: int, count: int) -> None:
        """``count`` records were consumed, the next one starts at ``rp`` in the read file."""
        self._peeked = None
        self._read_pos = rp
        self._depth -= count
        if not self._ops:
            self._pending_since = self._clock()
        self._ops += count
        if self._read_num != self._write_num:
            size = self._read_size
            if size < 0:  # the file was the write file when it was opened for reading
                fd = self._read_fd
                if fd is not None:
                    size = self._read_size = os.fstat(fd).st_size
                else:
                    size = os.stat(self.file_name(self._read_num)).st_size
            if rp >= size:
                self._next_read_file()
        elif rp == self._write_pos and self._depth != 0:
            self._check_tail()

    def _open_read(self) -> int:
        """Open the read file; -1 (after skipping it) when it does not exist."""
        fd = self._files.open_read(self._read_num)
        if fd is None:
            self._bad_read_file("file does not exist")
            return -1
        self._read_fd = fd
        self._read_size = -1
        self._rbuf = b""
        self._rbuf_off = 0
        return fd

    def _close_read(self) -> None:
        fd = self._read_fd
        self._read_fd = None
        self._read_size = -1
        self._rbuf = b""
        self._rbuf_off = 0
        if fd is not None:
            os.close(fd)

    def _next_read_file(self) -> None:
        """The read file is consumed: read on at the start of the next one. The old file is
        removed by the first sync whose meta names a later read file."""
        self._close_read()
        self._meta.retire((self._read_num,))
        self._read_num += 1
        self._read_pos = 0
        self._need_sync = True  # go syncs whenever the reader changes file
        self._check_tail()

    def scan(
        self, start: tuple[int, int], stop: tuple[int, int]
    ) -> Iterator[tuple[tuple[int, int], bytes]]:
        """Read records back without consuming them: ((file number, position), record) for
        each record from ``start`` up to ``stop`` (both (file number, position) pairs at
        record boundaries, e.g. from put_many's marks or the read/write positions), in
        order. Stops early at a missing or damaged file (what it cannot read it leaves to the
        reader's own error handling). Flushes the write buffer first when it must."""
        f, p = start
        while (f, p) < stop:
            if f == self._write_num and self._wbuf:
                self.flush()
            end = stop[1] if f == stop[0] else -1
            whole = yield from self._files.scan(f, p, end, self.min_msg_size, self.max_msg_size)
            if not whole or f >= stop[0]:
                return
            f, p = f + 1, 0

    # Corruption met while reading (go-diskqueue handleReadError, checkTailCorruption)

    def _bad_read_file(self, reason: str) -> None:
        """Set the read file aside as ``.bad`` and read on at the next one; if it is the write
        file, writing moves to a new file too."""
        rn = self._read_num
        path = self.file_name(rn)
        self._log.error(
            "DISKQUEUE(%s) reading at %d of %s - %s", self.name, self._read_pos, path, reason
        )
        self._close_read()
        if rn == self._write_num:
            # The write file itself is unreadable: stop writing to it too.
            try:
                self.flush()
            except OSError as e:
                self._log.error("DISKQUEUE(%s) failed to flush - %s", self.name, e)
                self._wbuf.clear()
            self._close_write()
            self._write_num += 1
            self._write_pos = 0
            self._wbuf_start = 0
        self._files.set_aside(rn)
        self._read_num = rn + 1
        self._read_pos = 0
        self._need_sync = True
        # depth still counts whatever was lost in the bad file; it is put right only when
        # the reader reaches the end of the queue (go's "eventually consistent" depth).
        self._check_tail()

    def _check_tail(self) -> None:
        """At the end of the queue depth must be 0: if not, log it and make it so."""
        depth = self._depth
        if depth and self._read_num == self._write_num and self._read_pos == self._write_pos:
            kind = "negative" if depth < 0 else "positive"
            why = "metadata corruption" if depth < 0 else "data loss"
            msg = "DISKQUEUE(%s) %s depth at tail (%d), %s, resetting 0..."
            self._log.error(msg, self.name, kind, depth, why)
            self._depth = 0
            self._need_sync = True

    # Syncing: snapshot on this thread, fsync and meta write in the job (diskqueue_meta.py)

    @property
    def unsynced(self) -> bool:
        """True while some put, advance or file change is not yet covered by a sync."""
        return bool(self._ops or self._need_sync)

    def needs_sync(self) -> bool:
        """True when a sync is due: sync_every puts+advances since the last one, or the oldest
        put or advance not yet synced is sync_timeout old, or the reader or writer changed
        file (or skipped a corrupt one) since the last one. (go ticks every sync_timeout and
        syncs if anything happened: the same bound on unsynced age, without the fixed phase.)
        """
        if self._need_sync:
            return True
        ops = self._ops
        if ops == 0:
            return False
        if ops >= self.sync_every:
            return True
        return self._clock() - self._pending_since >= self._sync_timeout

    def prepare_sync(self) -> Callable[[], None]:
        """Flush, snapshot the positions, and return the job that makes them durable.

        The job fsyncs the write file through a dup of its fd, then writes the meta file
        (temp file, fsync, rename), then removes data files the reader has left behind. It
        may run in another thread while this one keeps using the queue, and must be run
        exactly once (it owns the dup'd fd). A job that runs after a newer snapshot has been
        written, or after close()/delete(), fsyncs but leaves the meta file alone. If it
        raises OSError the next needs_sync() is True.
        """
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        return self._prepare_sync()

    def sync(self) -> None:
        """prepare_sync()() in this thread."""
        self.prepare_sync()()

    def _meta_text(self) -> tuple[int, bytes]:
        """(read file number, meta text) of the current state, read floor applied."""
        read_num = self._read_num
        read_pos = self._read_pos
        depth = self._depth
        floor = self.read_floor() if self.read_floor is not None else None
        if floor is not None:
            read_num, read_pos, held = floor
            depth += held
        return read_num, format_meta(depth, read_num, read_pos, self._write_num, self._write_pos)

    def _prepare_sync(self) -> Callable[[], None]:
        self.flush()
        fd = os.dup(self._write_fd) if self._write_fd is not None else -1
        meta = self._meta
        seq = meta.next_seq()
        read_num, text = self._meta_text()
        self._last_text = text
        self._ops = 0
        self._need_sync = False

        def job() -> None:
            try:
                meta.commit(seq, text, read_num, fd)
            except BaseException:
                self._need_sync = True
                raise

        return job


class FramedDiskQueue(DiskQueue):
    """A DiskQueue that also takes records already framed as its data files hold them
    (:meth:`put_framed`): a replicated topic's replica log, whose leader sends its entries
    in that layout (replication/replica_log.py), so a follower writes them with one copy and
    no object per record. The same files, positions and rules as DiskQueue."""

    def put_framed(self, chunk: bytes | memoryview, ends: list[int]) -> None:
        """Append records already laid out as on disk (``chunk``: [int32 BE size][bytes]*,
        ``ends[k]``: where record k ends in it; the caller checked each size against
        min_msg_size and max_msg_size): one copy into the write buffer when they fit the write
        file, else record by record as put_many (so files roll at the same places). OSError
        as put_many."""
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        n = ends[-1] if ends else 0
        wp = self._write_pos
        if wp + n > self.max_bytes_per_file and (wp > 0 or len(ends) > 1):
            self.put_many(unframe(chunk, ends))
            return
        if len(self._wbuf) >= WRITE_BUFFER_LIMIT:
            self.flush()
        self._wbuf += chunk[:n]
        self._write_pos = wp + n
        self._depth += len(ends)
        if ends and not self._ops:
            self._pending_since = self._clock()
        self._ops += len(ends)
