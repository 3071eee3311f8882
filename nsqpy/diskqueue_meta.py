"""The meta file of a DiskQueue and its sync jobs: the queue's commit point.

Strategy: prepare_sync() runs on the loop thread (flush, snapshot the positions as the meta
text, number the snapshot) and returns a job for any thread: fsync a dup of the write fd, then
write the meta file atomically (temp file, fsync, rename; internal/fileutil.py), then remove
the data files the reader has left behind. Snapshots are numbered and an older one is never
written over a newer one; a consumed file is removed only once a meta naming a later read file
is durable. The meta text is go-diskqueue's "%d\n%d,%d\n%d,%d\n" (depth, readFileNum,readPos,
writeFileNum,writePos), read back with go's Fscanf rules."""

from __future__ import annotations

import os
from collections.abc import Callable

from .diskqueue_base import META_RE, DiskQueueClosed, QueueState
from .internal.fileutil import write_sync_file


class DiskQueueMeta(QueueState):
    """needs_sync, prepare_sync, sync and the meta file (a DiskQueue mixin)."""

    __slots__ = ()

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

    def _meta_text(self) -> tuple[int, bytes]:
        """(read file number, meta text) of the current state, read floor applied."""
        read_num = self._read_num
        read_pos = self._read_pos
        depth = self._depth
        floor = self.read_floor() if self.read_floor is not None else None
        if floor is not None:
            read_num, read_pos, held = floor
            depth += held
        text = b"%d\n%d,%d\n%d,%d\n" % (
            depth,
            read_num,
            read_pos,
            self._write_num,
            self._write_pos,
        )
        return read_num, text

    def _prepare_sync(self) -> Callable[[], None]:
        self.flush()
        fd = os.dup(self._write_fd) if self._write_fd is not None else -1
        self._meta_seq += 1
        seq = self._meta_seq
        read_num, text = self._meta_text()
        self._last_text = text
        self._ops = 0
        self._need_sync = False

        def job() -> None:
            try:
                if fd >= 0:
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                self._persist_meta(seq, text, read_num)
            except BaseException:
                self._need_sync = True
                raise

        return job

    def sync(self) -> None:
        """prepare_sync()() in this thread."""
        self.prepare_sync()()

    def _persist_meta(self, seq: int, text: bytes, read_num: int) -> None:
        with self._meta_lock:
            if not self._meta_closed and seq > self._meta_seq_written:
                self._write_meta_file(text)
                self._meta_seq_written = seq
                if read_num > self._durable_read_num:
                    self._durable_read_num = read_num
            keep = self._durable_read_num
        with self._obsolete_lock:
            doomed = [n for n in self._obsolete if n < keep]
            if doomed:
                self._obsolete = [n for n in self._obsolete if n >= keep]
        for n in doomed:
            self._remove(self.file_name(n))

    def _write_meta_file(self, text: bytes, fsync: bool = True) -> None:
        write_sync_file(self._meta_path, text, fsync)

    def _remove(self, path: str) -> OSError | None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            self._log.error("DISKQUEUE(%s) failed to remove %s - %s", self.name, path, e)
            return e
        return None

    def _retrieve_meta(self) -> tuple[int, int, int, int, int]:
        try:
            with open(self._meta_path, "rb") as f:
                raw = f.read(4096)
        except FileNotFoundError:
            return 0, 0, 0, 0, 0
        except OSError as e:
            self._log.error("DISKQUEUE(%s) failed to retrieveMetaData - %s", self.name, e)
            return 0, 0, 0, 0, 0
        m = META_RE.match(raw)
        if m is None:
            self._log.error(
                "DISKQUEUE(%s) failed to retrieveMetaData - unexpected content %r",
                self.name,
                raw[:100],
            )
            return 0, 0, 0, 0, 0
        depth, rn, rp, wn, wp = (int(g) for g in m.groups())
        if min(rn, rp, wn, wp) < 0:
            self._log.error(
                "DISKQUEUE(%s) failed to retrieveMetaData - negative position in %r",
                self.name,
                raw[:100],
            )
            return 0, 0, 0, 0, 0
        return depth, rn, rp, wn, wp
