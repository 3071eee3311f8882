r"""The on-disk FIFO behind every topic and channel, file-compatible with go-diskqueue (nsqd 1.3).

Strategy: one object owned by the event-loop thread; no asyncio here. A put packs the record
into an in-memory write buffer and moves the positions at once; flush() hands the buffer to the
OS with pwrite at the buffer's file offset. Reading is a pread of a 64 KiB chunk that is parsed
record by record; peek() caches the record, advance() consumes it, so a record counts as
consumed only when the caller has handed it on. Durability is split in two: prepare_sync()
(loop thread: flush and snapshot the positions) returns a job (any thread: fsync a dup of the
write fd, then write the meta file atomically). The meta file is the commit point and the
rules below keep it honest.

The code is split by job into mixins sharing this object's slots (diskqueue_base.py): the
writer (diskqueue_writer.py), the reader (diskqueue_reader.py), the meta file and sync jobs
(diskqueue_meta.py), and recovery after a crash or corruption (diskqueue_recovery.py).

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
import threading
import time
from collections.abc import Callable

from .diskqueue_base import MAX_RECORD_SIZE, READ_CHUNK, WRITE_BUFFER_LIMIT, DiskQueueClosed
from .diskqueue_meta import DiskQueueMeta
from .diskqueue_reader import DiskQueueReader
from .diskqueue_recovery import DiskQueueRecovery
from .diskqueue_writer import DiskQueueWriter

__all__ = ["MAX_RECORD_SIZE", "READ_CHUNK", "WRITE_BUFFER_LIMIT", "DiskQueue", "DiskQueueClosed"]

_default_logger = logging.getLogger("nsqpy.diskqueue")


class DiskQueue(DiskQueueWriter, DiskQueueReader, DiskQueueMeta, DiskQueueRecovery):
    """A FIFO of byte records on disk in go-diskqueue's format.

    Every method except the job returned by :meth:`prepare_sync` belongs to one thread (the
    event loop's). The job may run in any thread while that thread carries on.
    """

    __slots__ = ()  # the slots are QueueState's (diskqueue_base.py)

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
        self._meta_path = os.path.join(data_path, f"{name}.diskqueue.meta.dat")

        # Positions. The read position is what has been consumed; _next_pos is where the
        # peeked record ends. Invariant: _write_pos == _wbuf_start + len(_wbuf).
        self._depth = 0
        self._read_num = 0
        self._read_pos = 0
        self._next_pos = 0
        self._write_num = 0
        self._write_pos = 0

        self._wbuf = bytearray()
        self._wbuf_start = 0
        self._write_fd: int | None = None

        self._read_fd: int | None = None
        self._read_size = -1  # size of a complete read file, -1 until looked up
        self._rbuf = b""  # a chunk of the read file starting at file offset _rbuf_off
        self._rbuf_off = 0
        self._peeked: bytes | None = None

        self._ops = 0  # puts and advances since the last sync (go counts both)
        self._pending_since = 0.0  # clock() at the first of those
        self._need_sync = False
        self._last_text = b""  # the meta text of the last snapshot (or as opened)
        self._closed = False

        # Shared with sync jobs running in other threads.
        self._meta_lock = threading.Lock()
        self._meta_seq = 0  # last snapshot taken (loop thread only)
        self._meta_seq_written = 0  # last snapshot written to disk (under _meta_lock)
        self._meta_closed = False  # no meta writes any more (under _meta_lock)
        self._durable_read_num = 0  # readFileNum of the newest durable meta (under _meta_lock)
        self._obsolete_lock = threading.Lock()
        self._obsolete: list[int] = []  # consumed file numbers waiting for a durable meta

        self._open()

    def file_name(self, num: int) -> str:
        """Path of data file ``num``: ``<data_path>/<name>.diskqueue.<%06d>.dat``."""
        return os.path.join(self.data_path, f"{self.name}.diskqueue.{num:06d}.dat")

    @property
    def meta_file_name(self) -> str:
        return self._meta_path

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

    # ----------------------------------------------------------------------------------------
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
        with self._obsolete_lock:
            self._obsolete.extend(range(old_read, old_write + 1))
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
            with self._meta_lock:
                written = self._meta_seq_written == self._meta_seq
            if not written or self.unsynced or self._meta_text()[1] != self._last_text:
                self._prepare_sync()()
            elif not os.path.exists(self._meta_path):
                # go-diskqueue always leaves a meta file; an empty queue's needs no fsync.
                self._write_meta_file(self._last_text, fsync=False)
        finally:
            self._closed = True
            with self._meta_lock:
                self._meta_closed = True
            self._peeked = None
            self._close_read()
            self._close_write()

    def delete(self) -> None:
        """Close without syncing and remove the data files, the meta file and any leftover
        meta temp files (the topic or channel is gone). ``.bad`` files are kept, as go keeps
        them, for an operator to look at."""
        self._log.info("DISKQUEUE(%s): deleting", self.name)
        if not self._closed:
            self._closed = True
            self._peeked = None
            self._wbuf.clear()
            self._close_read()
            self._close_write()
        with self._meta_lock:
            self._meta_closed = True
        with self._obsolete_lock:
            nums = set(self._obsolete)
            self._obsolete = []
        nums.update(range(self._read_num, self._write_num + 1))
        errors = [self._remove(self.file_name(n)) for n in sorted(nums)]
        errors.append(self._remove(self._meta_path))
        prefix = os.path.basename(self._meta_path) + "."
        try:
            names = os.listdir(self.data_path)
        except OSError:
            names = []
        for fn in names:
            if fn.startswith(prefix) and fn.endswith(".tmp"):
                errors.append(self._remove(os.path.join(self.data_path, fn)))
        for e in errors:
            if e is not None:
                raise e
