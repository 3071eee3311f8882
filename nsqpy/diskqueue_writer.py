"""The writing side of a DiskQueue: records into a write buffer, pwrite, rolling files.

Strategy: a put packs ``[int32 size][bytes]`` into an in-memory buffer and moves the write
position at once; flush() hands the buffer to the OS with pwrite at the buffer's file offset
(no fsync: that is the sync job's, diskqueue_meta.py). A file rolls before the write that would
take it past max_bytes_per_file, and only when it already holds something (go-diskqueue
writeOne); the finished file is fsynced and the meta file rewritten at once, as go does."""

from __future__ import annotations

import os
from collections.abc import Iterable

from .diskqueue_base import _LEN, WRITE_BUFFER_LIMIT, DiskQueueClosed, QueueState
from .diskqueue_codec import pack_records

_pack_len = _LEN.pack
_NO_MARKS: list[int] = []


class DiskQueueWriter(QueueState):
    """put, put_many, flush and the write file (a DiskQueue mixin)."""

    __slots__ = ()

    def put(self, data: bytes) -> None:
        """Append one record. ValueError if its size is out of bounds; OSError if the I/O that
        this put had to do (a roll, or flushing a full write buffer) failed, in which case the
        record was not added."""
        if self._closed:
            raise DiskQueueClosed(f"diskqueue {self.name} is closed")
        n = len(data)
        if n < self.min_msg_size or n > self.max_msg_size:
            raise ValueError(
                f"invalid message write size ({n}) minMsgSize={self.min_msg_size} "
                f"maxMsgSize={self.max_msg_size}"
            )
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
                raise ValueError(
                    f"invalid message write size ({n}) minMsgSize={lo} maxMsgSize={hi}"
                )
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
            fd = self._open_write()
        while buf:
            n = os.pwrite(fd, buf, self._wbuf_start)
            if n <= 0:
                raise OSError(f"pwrite to {self.file_name(self._write_num)} wrote nothing")
            del buf[:n]
            self._wbuf_start += n

    def _open_write(self) -> int:
        path = self.file_name(self._write_num)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size > self._wbuf_start:
                # Bytes past our write position belong to no record we know of (a stray file
                # with a number we have not reached yet): drop them so that the file never
                # holds anything after writePos once it is finished.
                self._log.warning(
                    "DISKQUEUE(%s) %s has %d bytes past write position %d, truncating",
                    self.name,
                    path,
                    size - self._wbuf_start,
                    self._wbuf_start,
                )
                os.ftruncate(fd, self._wbuf_start)
        except BaseException:
            os.close(fd)
            raise
        self._write_fd = fd
        self._log.info("DISKQUEUE(%s): writeOne() opened %s", self.name, path)
        return fd

    def _close_write(self) -> None:
        fd = self._write_fd
        if fd is not None:
            self._write_fd = None
            os.close(fd)

    def _roll(self) -> None:
        """Finish the write file (flush, fsync, close) and start the next one."""
        self.flush()  # may raise: nothing has changed yet
        old = self._write_num
        old_end = self._write_pos
        fd = self._write_fd
        if fd is not None:
            self._write_fd = None
            try:
                os.fsync(fd)
            except OSError as e:  # go logs this and rolls anyway
                self._log.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
            finally:
                os.close(fd)
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
