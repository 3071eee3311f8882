"""The reading side of a DiskQueue: pread chunks, peek/advance, batches, scans.

Strategy: reading is a pread of a READ_CHUNK (64 KiB) that is parsed record by record; peek()
caches the record and advance() consumes it, so a record counts as consumed only when the
caller has handed it on; read_many() takes every record the chunk already holds in one call.
A finished file is read to its actual size (so files written with another max_bytes_per_file
read fine); a read that meets corruption hands the file to diskqueue_recovery.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

from .diskqueue_base import _LEN, READ_CHUNK, DiskQueueClosed, QueueState
from .diskqueue_codec import split_records

_unpack_len = _LEN.unpack_from


class DiskQueueReader(QueueState):
    """peek, advance, read_many, scan and the read file (a DiskQueue mixin)."""

    __slots__ = ()

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

        What peek() + advance() do per record, with one Python call for the records that a
        chunk already read holds (the first comes from peek(), so it raises what peek()
        raises; the queue is then unchanged). A record past the chunk, or one whose size is
        out of bounds, ends the batch; the next call reads it through peek()'s checks."""
        rec = self.peek()
        file_num = self._read_num
        if rec is None:
            return file_num, []
        out = [rec]
        if positions is not None:
            positions.append(self._read_pos)
        nxt = self._next_pos
        buf = self._rbuf
        off = self._rbuf_off
        i = nxt - off
        end = len(buf)
        if limit > 1 and i >= 0 and i + 4 <= end:
            i = split_records(
                buf, i, self.min_msg_size, self.max_msg_size, limit, out, positions, off
            )
            nxt = off + i
        self._consumed(nxt, len(out))
        return file_num, out

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
        path = self.file_name(self._read_num)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._bad_read_file("file does not exist")
            return -1
        self._read_fd = fd
        self._read_size = -1
        self._rbuf = b""
        self._rbuf_off = 0
        self._log.info("DISKQUEUE(%s): readOne() opened %s", self.name, path)
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
        with self._obsolete_lock:
            self._obsolete.append(self._read_num)
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
            try:
                fd = os.open(self.file_name(f), os.O_RDONLY)
            except OSError:
                return
            try:
                end = stop[1] if f == stop[0] else os.fstat(fd).st_size
                while p < end:
                    chunk = os.pread(fd, min(READ_CHUNK, end - p), p)
                    if len(chunk) < 4:
                        return
                    i = 0
                    while i + 4 <= len(chunk):
                        n = _unpack_len(chunk, i)[0]
                        if not self.min_msg_size <= n <= self.max_msg_size:
                            return
                        j = i + 4 + n
                        if j > len(chunk):
                            break
                        yield (f, p + i), chunk[i + 4 : j]
                        i = j
                    if i == 0:  # a record bigger than a chunk: read it by itself
                        n = _unpack_len(chunk, 0)[0]
                        rec = os.pread(fd, n, p + 4) if p + 4 + n <= end else b""
                        if len(rec) < n:
                            return
                        yield (f, p), rec
                        i = 4 + n
                    p += i
            finally:
                os.close(fd)
            if f >= stop[0]:
                return
            f, p = f + 1, 0
