"""Recovery of a DiskQueue: reopening after a crash, and corrupt data.

Strategy: at open the meta file is checked against the files (go-diskqueue's rules and ours,
described in diskqueue.py): a read position past the write position restarts on a fresh file;
a write file that does not end at writePos makes the writer move on and the reader take the
old file as finished (records past writePos are salvaged and counted); consumed files a crash
left behind are removed. While reading, a corrupt file (go's handleReadError) is renamed to
"<file>.bad" and reading goes on at the next file; at the end of the queue a depth that is not
0 is logged and reset (go's checkTailCorruption)."""

from __future__ import annotations

import os

from .diskqueue_base import _LEN, READ_CHUNK, QueueState

_unpack_len = _LEN.unpack_from


class DiskQueueRecovery(QueueState):
    """Opening against the meta file, .bad files, the tail check (a DiskQueue mixin)."""

    __slots__ = ()

    def _open(self) -> None:
        depth, rn, rp, wn, wp = self._retrieve_meta()
        if rn > wn or (rn == wn and rp > wp):
            self._log.error(
                "DISKQUEUE(%s) metadata corruption: read position %d,%d past write position "
                "%d,%d, skipping to a new file and resetting 0...",
                self.name,
                rn,
                rp,
                wn,
                wp,
            )
            for n in range(rn, wn + 1):
                self._remove(self.file_name(n))
            rn = wn = max(rn, wn) + 1
            rp = wp = depth = 0
            self._need_sync = True
            corrupt = True
        else:
            corrupt = False

        # The write file must end at writePos. If it does not, the meta is stale (a crash
        # before the meta caught up with the data) or the file is damaged: either way the
        # writer starts a new file and the reader takes the old one as finished.
        while True:
            path = self.file_name(wn)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                size = -1
            if size == wp or (size < 0 and wp == 0):
                break
            if size > wp:
                extra = self._count_records(path, wp, size)
                self._log.warning(
                    "DISKQUEUE(%s) %s metadata writePos %d < file size of %d, skipping to new "
                    "file (%d records after writePos)",
                    self.name,
                    path,
                    wp,
                    size,
                    extra,
                )
                depth += extra
                self._fsync_path(path)
            elif size < 0:
                self._log.error(
                    "DISKQUEUE(%s) %s metadata writePos %d but the file is missing, skipping "
                    "to new file",
                    self.name,
                    path,
                    wp,
                )
            else:
                self._log.error(
                    "DISKQUEUE(%s) %s metadata writePos %d > file size of %d, data lost, "
                    "skipping to new file",
                    self.name,
                    path,
                    wp,
                    size,
                )
            wn += 1
            wp = 0
            self._need_sync = True

        # Consumed files left behind by a crash between a meta write and their removal (not
        # after a corrupt meta: what lies below its numbers is unknown, leave it alone).
        n = -1 if corrupt else rn - 1
        while n >= 0:
            try:
                os.unlink(self.file_name(n))
            except OSError:
                break
            n -= 1

        self._depth = depth
        self._read_num = rn
        self._read_pos = self._next_pos = rp
        self._write_num = wn
        self._write_pos = self._wbuf_start = wp
        self._durable_read_num = rn
        self._last_text = (
            self._meta_text()[1]
            if os.path.exists(self._meta_path)
            else (b"0\n0,0\n0,0\n" if (depth, rn, rp, wn, wp) == (0, 0, 0, 0, 0) else b"")
        )
        self._check_tail()

    def _count_records(self, path: str, start: int, end: int) -> int:
        """Whole, well-sized records in ``path`` between ``start`` and ``end``."""
        lo = self.min_msg_size
        hi = self.max_msg_size
        count = 0
        fd = os.open(path, os.O_RDONLY)
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

    def _fsync_path(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self._log.error("DISKQUEUE(%s) failed to sync %s - %s", self.name, path, e)

    def _bad_read_file(self, reason: str) -> None:
        """go-diskqueue's handleReadError: set the read file aside as .bad, read the next."""
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
        bad = path + ".bad"
        self._log.warning(
            "DISKQUEUE(%s) jump to next file and saving bad file as %s", self.name, bad
        )
        try:
            os.rename(path, bad)
        except OSError as e:
            self._log.error(
                "DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s - %s",
                self.name,
                path,
                bad,
                e,
            )
        self._read_num = rn + 1
        self._read_pos = 0
        self._need_sync = True
        # depth still counts whatever was lost in the bad file; it is put right only when
        # the reader reaches the end of the queue (go's "eventually consistent" depth).
        self._check_tail()

    def _check_tail(self) -> None:
        """At the end of the queue depth must be 0: if not, log it and make it so."""
        if (
            self._read_num == self._write_num
            and self._read_pos == self._write_pos
            and self._depth != 0
        ):
            if self._depth < 0:
                self._log.error(
                    "DISKQUEUE(%s) negative depth at tail (%d), metadata corruption, "
                    "resetting 0...",
                    self.name,
                    self._depth,
                )
            else:
                self._log.error(
                    "DISKQUEUE(%s) positive depth at tail (%d), data loss, resetting 0...",
                    self.name,
                    self._depth,
                )
            self._depth = 0
            self._need_sync = True
