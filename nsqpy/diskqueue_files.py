"""The data files of a DiskQueue, one by one: names, opening, setting aside, removing, reading.

Strategy: DataFiles knows where a queue's data files are and does the file-level work that
needs no position of the queue's: open a file for writing (dropping bytes past the write
position), finish it (fsync, close), open it for reading, rename a corrupt one to "<file>.bad"
(go-diskqueue handleReadError), remove one, and read records outside the reader's path (scan,
the salvage count at open). Its only state is the directory, the queue's name and the logger;
the positions, the buffers and the decisions stay with the queue (diskqueue.py), which keeps
the open file descriptors. Log lines carry go-diskqueue's wording."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Generator

__all__ = ["READ_CHUNK", "DataFiles"]

#: Bytes asked for per pread; several records are parsed out of one chunk.
READ_CHUNK = 64 * 1024

_unpack_len = struct.Struct(">i").unpack_from  # a record's size prefix: int32 big-endian


class DataFiles:
    """``<data_path>/<name>.diskqueue.<%06d>.dat``, numbered from 0, each a run of records
    ``[int32 big-endian size][bytes]``. Methods raise OSError unless they say otherwise."""

    __slots__ = ("data_path", "log", "name")

    def __init__(self, data_path: str, name: str, log: logging.Logger) -> None:
        self.data_path = data_path
        self.name = name
        self.log = log

    def path(self, num: int) -> str:
        """Path of data file ``num``."""
        return os.path.join(self.data_path, f"{self.name}.diskqueue.{num:06d}.dat")

    def open_write(self, num: int, pos: int) -> int:
        """A write-only fd on file ``num`` (created if missing), holding nothing past byte
        ``pos``: bytes beyond belong to no record the queue knows of (a stray file with a
        number it has not reached yet) and are truncated away, with a warning."""
        path = self.path(num)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size > pos:
                self.log.warning(
                    "DISKQUEUE(%s) %s has %d bytes past write position %d, truncating",
                    self.name,
                    path,
                    size - pos,
                    pos,
                )
                os.ftruncate(fd, pos)
        except BaseException:
            os.close(fd)
            raise
        self.log.info("DISKQUEUE(%s): writeOne() opened %s", self.name, path)
        return fd

    def finish_write(self, fd: int) -> None:
        """fsync and close a finished write file. A failed fsync is logged, not raised (go
        logs it and rolls anyway)."""
        try:
            os.fsync(fd)
        except OSError as e:
            self.log.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
        finally:
            os.close(fd)

    def open_read(self, num: int) -> int | None:
        """A read-only fd on file ``num``; None when it does not exist."""
        path = self.path(num)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        self.log.info("DISKQUEUE(%s): readOne() opened %s", self.name, path)
        return fd

    def set_aside(self, num: int) -> None:
        """Rename file ``num`` to "<file>.bad" for an operator to look at; a failure is logged,
        not raised."""
        path = self.path(num)
        bad = path + ".bad"
        self.log.warning(
            "DISKQUEUE(%s) jump to next file and saving bad file as %s", self.name, bad
        )
        try:
            os.rename(path, bad)
        except OSError as e:
            self.log.error(
                "DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s - %s",
                self.name,
                path,
                bad,
                e,
            )

    def remove_path(self, path: str) -> OSError | None:
        """Unlink ``path``: None when done or already gone, else the OSError, logged and
        returned (for a caller that raises it once it has tried the rest)."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            self.log.error("DISKQUEUE(%s) failed to remove %s - %s", self.name, path, e)
            return e
        return None

    def remove(self, num: int) -> OSError | None:
        """:meth:`remove_path` of file ``num``."""
        return self.remove_path(self.path(num))

    def fsync(self, num: int) -> None:
        """fsync file ``num`` by name; a failure is logged, not raised."""
        path = self.path(num)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self.log.error("DISKQUEUE(%s) failed to sync %s - %s", self.name, path, e)

    def count_records(self, num: int, start: int, end: int, lo: int, hi: int) -> int:
        """Whole records with a size in [lo, hi] in file ``num`` from byte ``start`` up to
        ``end``; the first one that is not stops the count."""
        count = 0
        fd = os.open(self.path(num), os.O_RDONLY)
        try:
            pos = start
            buf = b""
            off = start
            while pos + 4 <= end:
                i = pos - off
                if i + 4 > len(buf):
                    buf = os.pread(fd, min(READ_CHUNK, end - pos), pos)
                    off = pos
                    i = 0
                    if len(buf) < 4:
                        break
                n = _unpack_len(buf, i)[0]
                if n < lo or n > hi or pos + 4 + n > end:
                    break
                count += 1
                pos += 4 + n
        finally:
            os.close(fd)
        return count

    def scan(
        self, num: int, pos: int, end: int, lo: int, hi: int
    ) -> Generator[tuple[tuple[int, int], bytes], None, bool]:
        """((num, position), record) for each record of file ``num`` from byte ``pos`` up to
        ``end`` (-1: the file's size). The generator's value is True when it reached ``end``,
        False when the file could not be opened, or a short read or a size outside [lo, hi]
        stopped it (what it cannot read it leaves to the reader's own error handling)."""
        try:
            fd = os.open(self.path(num), os.O_RDONLY)
        except OSError:
            return False
        try:
            if end < 0:
                end = os.fstat(fd).st_size
            while pos < end:
                chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
                if len(chunk) < 4:
                    return False
                i = 0
                while i + 4 <= len(chunk):
                    n = _unpack_len(chunk, i)[0]
                    if not lo <= n <= hi:
                        return False
                    j = i + 4 + n
                    if j > len(chunk):
                        break
                    yield (num, pos + i), chunk[i + 4 : j]
                    i = j
                if i == 0:  # a record bigger than a chunk: read it by itself
                    n = _unpack_len(chunk, 0)[0]
                    rec = os.pread(fd, n, pos + 4) if pos + 4 + n <= end else b""
                    if len(rec) < n:
                        return False
                    yield (num, pos), rec
                    i = 4 + n
                pos += i
            return True
        finally:
            os.close(fd)
