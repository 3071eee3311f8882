"""The meta file of a DiskQueue: the queue's commit point, and what the sync jobs share.

Strategy: MetaFile owns what a sync job shares with the queue from another thread (the job
touches nothing else of the queue's but its "sync needed" flag, set when it fails). It numbers
the snapshots the queue takes (loop thread). A job commits one (any thread): it fsyncs the
write file, then writes the snapshot's text atomically (temp file, fsync, rename;
internal/fileutil.py) unless a newer one is already on disk or the queue is closed, under its
lock. It keeps the consumed data files until a durable meta names a later read file, then
removes them. The text is go-diskqueue's "%d\n%d,%d\n%d,%d\n" (depth, readFileNum,readPos,
writeFileNum,writePos), read back with go's Fscanf rules (go-diskqueue retrieveMetaData,
persistMetaData). The rules themselves are listed in diskqueue.py;
docs/architecture-diskqueue.md draws the parts."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable

from .diskqueue_files import DataFiles
from .internal.fileutil import write_sync_file

__all__ = ["META_RE", "MetaFile", "format_meta"]

# go reads the meta file with fmt.Fscanf("%d\n%d,%d\n%d,%d\n"): signed decimals, spaces before
# a number allowed, the newlines required (the last one may be missing at end of file).
META_RE = re.compile(
    rb"[ \t]*([+-]?\d+)[ \t]*\n"
    rb"[ \t]*([+-]?\d+)[ \t]*,[ \t]*([+-]?\d+)[ \t]*\n"
    rb"[ \t]*([+-]?\d+)[ \t]*,[ \t]*([+-]?\d+)[ \t]*(?:\n|\Z)"
)


class MetaFile:
    """``<data_path>/<name>.diskqueue.meta.dat`` and the data files waiting on it.

    Threads: :meth:`next_seq`, :meth:`up_to_date`, :meth:`retire` and :meth:`read` are called
    from the queue's thread; :meth:`commit` from whichever thread runs a sync job. The two
    locks are never held together, and the obsolete-file lock is never held across I/O, so
    the queue's thread never waits on a sync job's fsync.
    """

    __slots__ = (
        "_durable_read_num",
        "_files",
        "_lock",
        "_meta_closed",
        "_obsolete",
        "_obsolete_lock",
        "_seq",
        "_seq_written",
        "path",
    )

    def __init__(self, path: str, files: DataFiles) -> None:
        self.path = path
        self._files = files  # the data files it removes once retired, its log and name
        self._lock = threading.Lock()
        self._seq = 0  # last snapshot numbered (queue thread only)
        self._seq_written = 0  # last snapshot written to disk (under _lock)
        self._meta_closed = False  # no meta writes any more (under _lock)
        self._durable_read_num = 0  # readFileNum of the newest durable meta (under _lock)
        self._obsolete_lock = threading.Lock()
        self._obsolete: list[int] = []  # consumed file numbers waiting for a durable meta

    def read(self) -> tuple[int, int, int, int, int]:
        """(depth, readFileNum, readPos, writeFileNum, writePos) from the file. A missing,
        unreadable or unparsable file, or one with a negative number, is all zeros (an empty
        queue at file 0); all but a missing file are logged."""
        log, name = self._files.log, self._files.name
        try:
            with open(self.path, "rb") as f:
                raw = f.read(4096)
        except FileNotFoundError:
            return 0, 0, 0, 0, 0
        except OSError as e:
            log.error("DISKQUEUE(%s) failed to retrieveMetaData - %s", name, e)
            return 0, 0, 0, 0, 0
        m = META_RE.match(raw)
        if m is None:
            log.error(
                "DISKQUEUE(%s) failed to retrieveMetaData - unexpected content %r",
                name,
                raw[:100],
            )
            return 0, 0, 0, 0, 0
        depth, rn, rp, wn, wp = (int(g) for g in m.groups())
        if min(rn, rp, wn, wp) < 0:
            log.error(
                "DISKQUEUE(%s) failed to retrieveMetaData - negative position in %r",
                name,
                raw[:100],
            )
            return 0, 0, 0, 0, 0
        return depth, rn, rp, wn, wp

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def opened_at(self, read_num: int) -> None:
        """The queue opened reading file ``read_num``: the files below it are not waited on."""
        with self._lock:
            self._durable_read_num = read_num

    def next_seq(self) -> int:
        """Number a new snapshot (queue thread): higher than every one before."""
        self._seq += 1
        return self._seq

    def up_to_date(self) -> bool:
        """True when the last snapshot numbered is the one on disk."""
        with self._lock:
            return self._seq_written == self._seq

    def retire(self, nums: Iterable[int]) -> None:
        """Data files the reader is done with: removed by the first :meth:`commit` that makes
        a meta naming a later read file durable (or by :meth:`take_obsolete`'s caller)."""
        with self._obsolete_lock:
            self._obsolete.extend(nums)

    def commit(self, seq: int, text: bytes, read_num: int, data_fd: int = -1) -> None:
        """Make snapshot ``seq`` durable: fsync the write file through ``data_fd`` (a dup of
        it, closed here; -1 when there is none), then write the meta ``text`` (whose
        readFileNum is ``read_num``) unless a newer snapshot is on disk or :meth:`close` was
        called, then remove the retired files below the newest durable readFileNum. Raises
        the fsync's or the write's OSError (nothing recorded then)."""
        if data_fd >= 0:
            try:
                os.fsync(data_fd)
            finally:
                os.close(data_fd)
        with self._lock:
            if not self._meta_closed and seq > self._seq_written:
                write_sync_file(self.path, text)
                self._seq_written = seq
                if read_num > self._durable_read_num:
                    self._durable_read_num = read_num
            keep = self._durable_read_num
        with self._obsolete_lock:
            doomed = [n for n in self._obsolete if n < keep]
            if doomed:
                self._obsolete = [n for n in self._obsolete if n >= keep]
        for n in doomed:
            self._files.remove(n)

    def write(self, text: bytes, fsync: bool = True) -> None:
        """Replace the file with ``text`` now, outside the snapshot numbering. OSError."""
        write_sync_file(self.path, text, fsync)

    def close(self) -> None:
        """No meta writes from now on: a sync job still running fsyncs but writes nothing."""
        with self._lock:
            self._meta_closed = True

    def take_obsolete(self) -> list[int]:
        """The retired file numbers not yet removed; the caller removes them."""
        with self._obsolete_lock:
            nums = self._obsolete
            self._obsolete = []
        return nums

    def delete(self) -> list[OSError | None]:
        """Remove the file and any leftover temp files of it; one entry per file tried."""
        errors = [self._files.remove_path(self.path)]
        directory, base = os.path.split(self.path)
        prefix = base + "."
        try:
            names = os.listdir(directory)
        except OSError:
            names = []
        for fn in names:
            if fn.startswith(prefix) and fn.endswith(".tmp"):
                errors.append(self._files.remove_path(os.path.join(directory, fn)))
        return errors


def format_meta(depth: int, read_num: int, read_pos: int, write_num: int, write_pos: int) -> bytes:
    """The meta file's text for these positions (go-diskqueue persistMetaData's layout)."""
    return b"%d\n%d,%d\n%d,%d\n" % (depth, read_num, read_pos, write_num, write_pos)
