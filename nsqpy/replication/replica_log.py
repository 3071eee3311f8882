"""A follower's copy of one topic's stream: the replica log (entries.py's entries, appended as
a leader sends them over ``/replica/append``: written before the answer, fsynced within
SYNC_GAP seconds after it or, with --replica-sync=fsync, before it).

Strategy: a DiskQueue ``<topic>#replica`` in the data path (the library as it is,
go-diskqueue's format). Its *read* position is what this node has put into its own topic: a
follower only appends. It answers once the entries are written to the OS (``pwrite``: they
survive this process being killed, and are readable at once), and fsyncs in the background
(:meth:`ReplicaLog._sync_loop`: one fsync covers every append made since the previous one
started, and one starts at most every SYNC_GAP seconds, so the fsync rate follows neither the
request rate nor, on a fast disk, the disk's: a busy follower spends its CPU on appends, not on
handing fsyncs to a thread); with --replica-sync=fsync it
answers only after that fsync. An fsync is of the data file alone, the meta file too on
--sync-every/--sync-timeout and on a new file. A follower promoted to leader reads everything
past the read position into its topic (:meth:`ReplicaLog.drain`), so what it delivers next is
everything it holds that its channels never had. Names only grow along the log: an entry whose
name is not after the log's last one is skipped (it has it). The name of the last entry
survives a restart in ``<topic>#replica.last`` (written after the fsync of what it names, so
it never names an entry that is not durable: :attr:`ReplicaLog.synced`; a stale one only
costs entries sent twice, which drain() skips). The newest epoch seen lives in memory: a
restarted follower accepts the next batch of any epoch not older than its record's. A
leader finding this node's topic *dirty* (holding messages of an earlier leadership of its
own) resets it: the topic and the log are emptied, then rebuilt from the leader's history
(leader_stream.py, "Rejoining").
Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from ..diskqueue import DiskQueue, FramedDiskQueue
from .entries import (
    ENTRY,
    MAX_RETAINED,
    Gap,
    Name,
    NotFollowing,
    StaleEpoch,
    entry_ends,
    entry_name,
    framed_name,
    name_text,
    parse_name,
)

log = logging.getLogger("nsqpy.replication")


def _fsync_close(fd: int) -> None:
    """fsync and close ``fd`` (a dup made for this job: in a worker thread, while the loop
    may close the fd it was made from, at a reset or a new file)."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The ``.last`` file: "E:S N:P" (the last fsynced entry's name, and the data file number and
#: byte position its record ends at) padded with spaces, rewritten in place; an older file
#: holds "E:S" alone.
_LAST_SIZE = 64
#: Seconds, the least time between the starts of two background fsyncs of one replica log
#: (--replica-sync=write): what an acknowledged entry may wait, beyond one fsync, to be on disk.
SYNC_GAP = 0.01
_SIZE = struct.Struct(">I")
_SCAN_CHUNK = 1 << 20


class ReplicaLog:
    """A follower's copy of one topic's stream: the DiskQueue ``<topic>#replica`` made by
    ``open_queue(name)`` (Storage.new_backend's sizes plus the entry header).

    ``last`` is the name of the last entry appended (None: none, or unknown), kept across
    restarts in ``last_path`` (``<topic>#replica.last``; written after the fsync of the data
    it names, never fsynced itself: a stale one names an older entry, which only makes the
    leader send some entries again, skipped by :meth:`drain`). ``epoch`` is the newest sender
    epoch seen, ``min_epoch`` the oldest epoch still accepted (raised by :meth:`fence` when
    this node learns of a newer record, so a deposed leader's late appends are refused even
    before the new leader sent anything). ``dirty()`` says whether this node's own topic
    still holds messages (from an earlier leadership of its own); ``on_reset()`` empties that
    topic for a leader of the given epoch and returns False when it cannot (this node does not
    know that epoch's record yet, or still leads in its own view).

    ``fsync_first``: answer an append only after its fsync (--replica-sync=fsync); otherwise
    (--replica-sync=write) once written, the fsync following in the background.
    :attr:`synced` is the name of the last entry known durable (what ``.last`` says)."""

    def __init__(
        self,
        topic: str,
        dq: FramedDiskQueue,
        last_path: str | None = None,
        dirty: Callable[[], bool] | None = None,
        on_reset: Callable[[int], bool] | None = None,
        fsync_first: bool = True,
    ) -> None:
        self.topic = topic
        self.dq = dq
        self.epoch = 0
        self.appended = 0
        self.resets = 0
        self.min_epoch = 0
        self.lock = asyncio.Lock()
        self.dirty = dirty
        self.on_reset = on_reset
        #: Entries taken out by drain() at the last promotion (the new leader's history).
        self.retained: deque[bytes] = deque(maxlen=MAX_RETAINED)
        self._data_fd = -1  # read-only fd of the write file, for the data-only fsync
        self._data_num = -1  # its file number (-1: none yet: the next sync is a full one)
        self.last: Name | None = None
        self.fsync_first = fsync_first
        self._unsynced = False  # written, not yet covered by an fsync started since
        self._sync_task: asyncio.Task[None] | None = None
        self._resets = 0  # a sync that started before a reset names nothing of the new log
        self._closed = False
        self._sync_started = float("-inf")  # loop time of the last background fsync's start
        self._last_fd = -1
        where: tuple[int, int] | None = None
        if last_path is not None:
            self._last_fd = os.open(last_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                self.last, where = _parse_last(os.pread(self._last_fd, _LAST_SIZE, 0))
            except (ValueError, UnicodeDecodeError):
                self.last = None  # absent or torn: unknown, the leader sends everything
        # entries written after the last fsync that named one (then kept by the DiskQueue's
        # reopen, which fsyncs what it salvages): the log really ends with the newest of them
        tail = _last_in_files(dq, where)
        if tail is not None and (self.last is None or tail > self.last):
            self.last = tail
        self.synced: Name | None = self.last

    @property
    def next_seq(self) -> int:
        """The seq expected next in the newest sender epoch seen (0 when none of it is here)."""
        last = self.last
        return last[1] + 1 if last is not None and last[0] == self.epoch else 0

    def fence(self, epoch: int) -> None:
        """Refuse appends of epochs older than ``epoch`` from now on."""
        self.min_epoch = max(self.min_epoch, epoch)

    async def request(
        self,
        epoch: int,
        entries: list[bytes] | bytes,
        prev: str | None,
        reset: bool = False,
    ) -> dict[str, Any]:
        """One ``/replica/append`` request: :meth:`append` (``entries`` a list) or
        :meth:`append_framed` (``entries`` the request body as it came), then the answer
        ``{"next": N, "last": "E:S"}`` (with ``"dirty"`` for a probe, ``prev="?"``)."""
        if isinstance(entries, list):
            await self.append(epoch, 0, entries, prev, reset)
        else:
            await self.append_framed(epoch, entries, prev, reset)
        return self._answer(prev)

    def request_now(
        self, epoch: int, body: bytes, prev: str | None, reset: bool = False
    ) -> dict[str, Any]:
        """:meth:`request` at once (only when :meth:`ready_now`: append_framed_now)."""
        self.append_framed_now(epoch, body, prev, reset)
        return self._answer(prev)

    def _answer(self, prev: str | None) -> dict[str, Any]:
        answer: dict[str, Any] = {"next": self.next_seq, "last": name_text(self.last)}
        if prev == "?":
            answer["dirty"] = bool(self.dirty is not None and self.dirty())
        return answer

    async def append(
        self,
        epoch: int,
        first: int,
        entries: list[bytes],
        prev: str | None = None,
        reset: bool = False,
    ) -> int:
        """Append the entries a leader of ``epoch`` sent (each names itself; those not after
        :attr:`last` are skipped: this log has them), fsync, and return :attr:`next_seq`.

        ``prev``: ``"?"`` a probe (nothing appended); ``"-"`` the batch starts the leader's
        history, to go after whatever this log has; ``"E:S"`` the name this log must end with
        (Gap otherwise); None (no chain check) only refuses a batch starting past the next seq
        of the epoch this log ends in. ``reset``: first empty this node's topic (on_reset) and
        this log (the leader found the topic dirty: a deposed leader's own data, its
        unacknowledged tail included, gives way to the leader's history). ``first`` is the
        sender's seq of the batch, informational. StaleEpoch, Gap, NotFollowing, OSError."""

        def name_at(k: int) -> Name:
            return entry_name(entries[k])

        def write(i: int) -> None:
            self.dq.put_many(entries[i:] if i else entries)

        return await self._append(epoch, prev, reset, len(entries), name_at, write)

    async def append_framed(
        self, epoch: int, body: bytes, prev: str | None = None, reset: bool = False
    ) -> int:
        """:meth:`append` for an append request's body as it came (``[u32 size][entry]*``,
        entries.py): its sizes are walked once (entries.entry_ends; ValueError when it does
        not parse) and the fresh part is written into the log as it is
        (DiskQueue.put_framed), with no object per entry."""
        name_at, write, n = self._framed(body)
        return await self._append(epoch, prev, reset, n, name_at, write)

    def ready_now(self) -> bool:
        """Whether :meth:`append_framed_now` may run: no append or reset in progress, and
        an append is answered once written (--replica-sync=write)."""
        return not self.fsync_first and not self.lock.locked()

    def append_framed_now(
        self, epoch: int, body: bytes, prev: str | None = None, reset: bool = False
    ) -> int:
        """:meth:`append_framed` at once, for a follower that answers once written: only
        when :meth:`ready_now` (nothing to wait for); the same rules and errors."""
        assert self.ready_now()
        name_at, write, n = self._framed(body)
        newest = self._take(epoch, prev, reset, n, name_at, write)
        if newest is not None:
            self.dq.flush()  # in the OS: survives this process, readable at a promotion
            self.last = newest
            self._sync_soon()
        return self.next_seq

    def _framed(self, body: bytes) -> tuple[Callable[[int], Name], Callable[[int], None], int]:
        """``name_at``, ``write`` and the count of an append body's entries (ValueError when
        it does not parse)."""
        ends = entry_ends(body, self.dq.max_msg_size)

        def name_at(k: int) -> Name:
            return framed_name(body, ends[k - 1] if k else 0)

        def write(i: int) -> None:
            if not i:
                self.dq.put_framed(body, ends)
                return
            start = ends[i - 1]
            self.dq.put_framed(memoryview(body)[start:], [e - start for e in ends[i:]])

        return name_at, write, len(ends)

    async def _append(
        self,
        epoch: int,
        prev: str | None,
        reset: bool,
        n: int,
        name_at: Callable[[int], Name],
        write: Callable[[int], None],
    ) -> int:
        """The append's rules (:meth:`_take`), then the answer's wait: written (and the fsync
        soon after), or fsynced first (--replica-sync=fsync)."""
        async with self.lock:
            newest = self._take(epoch, prev, reset, n, name_at, write)
            if newest is not None:
                if self.fsync_first:
                    where = self._where()
                    await self._sync()
                    self.last = self.synced = newest
                    self._write_last(self.last, where)
                else:
                    self.dq.flush()  # in the OS: survives this process, readable at a promotion
                    self.last = newest
                    self._sync_soon()
            return self.next_seq

    def _take(
        self,
        epoch: int,
        prev: str | None,
        reset: bool,
        n: int,
        name_at: Callable[[int], Name],
        write: Callable[[int], None],
    ) -> Name | None:
        """The append's rules (:meth:`append`) over ``n`` entries named by ``name_at(k)``:
        ``write(i)`` puts entries i.. into the DiskQueue; returns the name of the newest one
        written, None when none was (a probe, or all were here already)."""
        if epoch < self.epoch or epoch < self.min_epoch:
            raise StaleEpoch
        self.epoch = epoch
        if prev == "?":
            return None
        if reset:
            self._reset(epoch)
        last = self.last
        if prev is None:
            if n and last is not None:
                head = name_at(0)
                if head[0] == last[0] and head[1] > last[1] + 1:
                    raise Gap(last, self.next_seq)
        elif prev != "-" and parse_name(prev) != last:
            raise Gap(last, self.next_seq)
        i = 0
        if last is not None:
            while i < n and name_at(i) <= last:
                i += 1
        if i >= n:
            return None
        write(i)
        self.appended += n - i
        return name_at(n - 1)

    async def _sync(self) -> None:
        """fsync what is written: the data file alone through a dup of its fd, or the meta
        file too when due by --sync-every/--sync-timeout or on a new file. OSError."""
        dq = self.dq
        loop = asyncio.get_running_loop()
        if dq.needs_sync() or dq.write_file_num != self._data_num:
            await loop.run_in_executor(None, dq.prepare_sync())
            self._reopen_data()
        else:
            dq.flush()
            await loop.run_in_executor(None, _fsync_close, os.dup(self._data_fd))

    def _sync_soon(self) -> None:
        """An append was written: make sure an fsync starts after it (the running one may
        have started before)."""
        self._unsynced = True
        task = self._sync_task
        if task is None or task.done():
            self._sync_task = asyncio.get_running_loop().create_task(
                self._sync_loop(), name=f"replica-sync-{self.topic}"
            )

    async def _sync_loop(self) -> None:
        """fsync while appends keep coming, one start every SYNC_GAP seconds at most; after
        each, :attr:`synced` and ``.last`` name the last entry written before it started
        (unless the log was reset meanwhile). A failed fsync is logged and tried again."""
        loop = asyncio.get_running_loop()
        while self._unsynced and not self._closed:
            wait = self._sync_started + SYNC_GAP - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)  # appends made meanwhile ride on this fsync
                if self._closed:
                    return
            self._sync_started = loop.time()
            self._unsynced = False
            name, resets, where = self.last, self._resets, self._where()
            try:
                await self._sync()
            except OSError as e:
                log.error("replica log %s: fsync failed: %s", self.topic, e)
                self._unsynced = True
                await asyncio.sleep(0.1)
                continue
            if resets == self._resets and not self._closed:
                self.synced = name
                self._write_last(name, where)

    async def wait_synced(self) -> None:
        """Return once the background fsync has nothing left to do (every append so far is
        fsynced and named by :attr:`synced`, unless a reset came between). OSError is not
        raised here: a failing fsync is retried by the background task."""
        while self._sync_task is not None and not self._sync_task.done():
            await asyncio.shield(self._sync_task)

    def _reset(self, epoch: int) -> None:
        if self.on_reset is not None and not self.on_reset(epoch):
            raise NotFollowing(f"topic {self.topic}: still leading here, not reset")
        log.warning("topic %s: replica log reset to the leader's history", self.topic)
        self.dq.empty()
        self._close_data()
        self.last = self.synced = None
        self._resets += 1
        self._write_last(None)
        self.resets += 1

    def _where(self) -> tuple[int, int]:
        """(data file number, byte position) where the log ends now (what is written)."""
        dq = self.dq
        dq.flush()
        return dq.write_file_num, dq.write_pos

    def _write_last(self, name: Name | None, where: tuple[int, int] | None = None) -> None:
        if self._last_fd >= 0:
            text = name_text(name)
            if name is not None and where is not None:
                text += f" {where[0]}:{where[1]}"
            os.pwrite(self._last_fd, text.encode().ljust(_LAST_SIZE), 0)

    def _reopen_data(self) -> None:
        """Keep a read-only fd on the write file: fsync through any fd of a file makes its
        data durable, and the DiskQueue reopens past the meta file's write position (it keeps
        records found beyond it, diskqueue.py), so between meta syncs an append costs one
        fsync of the data."""
        num = self.dq.write_file_num
        if num == self._data_num:
            return
        self._close_data()
        self._data_fd = os.open(self.dq.file_name(num), os.O_RDONLY | os.O_CLOEXEC)
        self._data_num = num

    def _close_data(self) -> None:
        if self._data_fd >= 0:
            os.close(self._data_fd)
        self._data_fd, self._data_num = -1, -1

    def drain(self, limit: int = 1024) -> list[tuple[int, bytes]]:
        """Consume up to ``limit`` entries not yet put into this node's topic:
        [(delay_ms, record)], [] when none is left. An entry whose name is not after the one
        drained before it (sent twice after a stale ``.last``) is skipped. Every entry
        returned is also kept in :attr:`retained` (the newest MAX_RETAINED)."""
        out: list[tuple[int, bytes]] = []
        hs = ENTRY.size
        unpack = ENTRY.unpack_from
        keep = self.retained
        while not out:
            _, raw = self.dq.read_many(limit)
            if not raw:
                break
            top = entry_name(keep[-1]) if keep else (-1, -1)
            for e in raw:
                epoch, seq, delay = unpack(e)
                if (epoch, seq) <= top:
                    continue
                top = (epoch, seq)
                keep.append(e)
                out.append((delay, e[hs:]))
        return out

    def trim(self, finished: Callable[[bytes], bool], limit: int) -> int:
        """Drop up to ``limit`` entries from the front of the part not yet put into this
        node's topic, while ``finished(record)`` (the nsqd record, without the entry header)
        says every channel finished it (local.trim_log, from the progress rounds); returns
        how many went. Such an entry is neither put into the topic at a promotion nor sent
        as history: no channel could deliver it again. One peek/advance each, so only what
        is dropped is consumed (a crash before the meta file's next sync brings some back:
        filtered again at a promotion). OSError from the DiskQueue."""
        dq = self.dq
        hs = ENTRY.size
        n = 0
        while n < limit:
            e = dq.peek()
            if e is None or not finished(e[hs:]):
                break
            dq.advance()
            n += 1
        return n

    def take_retained(self) -> list[bytes]:
        """The entries drained since the last call, in order (then forgotten here)."""
        out = list(self.retained)
        self.retained.clear()
        return out

    def sync_job(self) -> Callable[[], None]:
        return self.dq.prepare_sync()

    def close(self) -> None:
        """Stop the background fsync and close the files (the DiskQueue's close syncs)."""
        self._closed = True
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        self._close_data()
        if self._last_fd >= 0:
            os.close(self._last_fd)
            self._last_fd = -1
        self.dq.close()


def _parse_last(raw: bytes) -> tuple[Name | None, tuple[int, int] | None]:
    """The ``.last`` file's name and position ("E:S N:P", or "E:S" alone, or "-").
    ValueError, UnicodeDecodeError when it does not parse."""
    fields = raw.decode().split()
    if not fields:
        raise ValueError("empty")
    name = parse_name(fields[0])
    if len(fields) < 2 or name is None:
        return name, None
    num, sep, pos = fields[1].partition(":")
    if not sep:
        raise ValueError(f"bad position {fields[1]!r}")
    return name, (int(num), int(pos))


def _last_in_files(dq: DiskQueue, where: tuple[int, int] | None) -> Name | None:
    """The name of the last whole entry in ``dq``'s data files from ``where`` (a file number
    and byte position; None: the read position) to the write position, None when there is
    none. Only reads: what follows the last fsync that ``.last`` recorded is at most one fsync's
    worth (or the whole log when there is no position)."""
    read_at = (dq.read_file_num, dq.read_pos)
    num, pos = where if where is not None and where >= read_at else read_at
    end_num, end_pos = dq.write_file_num, dq.write_pos
    hs = ENTRY.size
    last: Name | None = None
    while num <= end_num:
        try:
            fd = os.open(dq.file_name(num), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            num, pos = num + 1, 0
            continue
        try:
            end = end_pos if num == end_num else os.fstat(fd).st_size
            buf = b""
            off = pos
            while pos + 4 <= end:
                i = pos - off
                if i + 4 + hs > len(buf):
                    buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
                    off, i = pos, 0
                    if len(buf) < 4:
                        break
                (size,) = _SIZE.unpack_from(buf, i)
                if size < hs or pos + 4 + size > end or i + 4 + hs > len(buf):
                    break
                epoch, seq, _ = ENTRY.unpack_from(buf, i + 4)
                last = (epoch, seq)
                pos += 4 + size
        finally:
            os.close(fd)
        num, pos = num + 1, 0
    return last
