"""Messages waiting in a topic or a channel: memory first, then the backend.

Strategy: one owner for nsqd's "memoryMsgChan, else the BackendQueue" rule, which topics and
channels both keep (nsqd/topic.go and nsqd/channel.go `put`). At most ``mem_queue_size``
records wait in memory (a record_queue.RecordQueue of immutable record bytes, see message.py,
which packs a backlog into shared buffers); the rest are written to the backend (a DiskQueue)
as they are. ``--mem-queue-size=0`` sends every record to
the backend; an ephemeral topic or channel has no backend and drops what memory cannot hold,
as nsqd does. Topic and Channel inherit this class (no indirection on the publish path) and
add what differs: a topic moves what it holds to its channels, a channel hands it to consumers
and tracks which backend records are still unfinished (``_spilled``).

Every record that enters memory or the backend is noted in a msg_index index (memory: where in
the queue; backend: file and position), so ``locate_queued`` finds a message by its ID in
bounded time for GET /message?id=. Records go into ``_queue`` only through ``_mem_append`` /
``_mem_extend`` and leave it through paths that tell the index (``_mem_index.popped``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from .msg_index import DiskIndex, MemoryIndex
from .record_queue import RecordQueue

if TYPE_CHECKING:
    from .diskqueue import DiskQueue

log = logging.getLogger("nsqpy")


class StorageHooks(Protocol):
    """What topics and channels tell the daemon about storage (implemented by NSQD)."""

    def spilled(self, backend: DiskQueue) -> None:
        """Records were put in ``backend``; flush them before acknowledging a publish."""
        ...

    def backend_read(self, backend: DiskQueue) -> None:
        """Records were consumed from ``backend`` (its read position needs syncing)."""
        ...

    def deferred(self, topic: str, channel: str | None, record: bytes, delay_ms: int) -> None:
        """A published message is deferred (journal it); channel None: held by the topic."""
        ...

    def deferred_done(self, topic: str, channel: str | None, ids: list[bytes]) -> None:
        """These deferred messages left the deferred state (due, or moved to channels)."""
        ...

    def deferred_dropped(self, topic: str, channel: str | None) -> None:
        """A channel (or, with channel None, a topic's own queue) was emptied or deleted."""
        ...


class BackedQueue:
    """Records in memory (``_queue``, at most ``mem_queue_size``) and in ``backend``.

    ``_enqueue_many`` raises OSError when a backend write fails (the records that fitted in
    memory stay there).
    """

    __slots__ = (
        "_disk_index",
        "_hooks",
        "_mem_index",
        "_queue",
        "backend",
        "mem_queue_size",
        "name",
    )

    def __init__(
        self,
        name: str,
        mem_queue_size: int,
        backend: DiskQueue | None,
        hooks: StorageHooks | None,
    ) -> None:
        self.name = name
        self.mem_queue_size = mem_queue_size
        self.backend = backend
        self._hooks = hooks
        self._queue = RecordQueue()
        self._mem_index = MemoryIndex()
        self._disk_index = DiskIndex(backend) if backend is not None else None

    @property
    def depth(self) -> int:
        """Records waiting: in memory plus in the backend."""
        backend = self.backend
        return len(self._queue) + (backend.depth if backend is not None else 0)

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def _enqueue_many(self, records: list[bytes], in_order: bool = False) -> None:
        """Memory while there is room, the backend for the rest. ``in_order``: the records'
        IDs are known to increase (fresh publishes; see msg_index)."""
        room = self.mem_queue_size - len(self._queue)
        if room >= len(records):
            self._mem_extend(records, in_order)
            return
        if room > 0:
            self._mem_extend(records[:room], in_order)
            records = records[room:]
        self._spill(records, in_order)

    def _enqueue_framed(self, buf: bytes, offs: list[int], in_order: bool = False) -> None:
        """As :meth:`_enqueue_many`, for records as a diskqueue chunk holds them
        (DiskQueue.read_framed): those that fit in memory go in as the chunk holds them (no
        object per record); the rest are cut out for the backend."""
        n = len(offs) - 1
        room = self.mem_queue_size - len(self._queue)
        if room > 0 and n > 0:
            part = offs if room >= n else offs[: room + 1]
            queue = self._queue
            queue.extend_framed(buf, part)
            self._mem_index.appended_framed(buf, part, len(queue), in_order)
            if room >= n:
                return
            offs = offs[room:]
            n -= room
        if n > 0:
            self._spill([buf[offs[k] + 4 : offs[k + 1]] for k in range(n)], in_order)

    def _mem_append(self, record: bytes) -> None:
        """Append one record to memory (no room check)."""
        queue = self._queue
        queue.append(record)
        self._mem_index.appended_one(record, len(queue))

    def _mem_extend(self, records: list[bytes], in_order: bool = False) -> None:
        """Append records to memory (no room check)."""
        queue = self._queue
        queue.extend(records)
        self._mem_index.appended(records, len(queue), in_order)

    def _mem_clear(self) -> None:
        """Empty memory."""
        self._mem_index.cleared(len(self._queue))
        self._queue.clear()

    def _spill(self, records: list[bytes], in_order: bool = False) -> None:
        backend = self.backend
        if backend is None:
            return  # ephemeral: no backend, dropped past --mem-queue-size (as nsqd)
        index = self._disk_index
        if index is None:
            backend.put_many(records)
        else:
            marks = index.marks_for(records, in_order)
            index.written(marks, backend.put_many(records, marks))
        self._spilled(records)
        if self._hooks is not None:
            self._hooks.spilled(backend)

    def _spilled(self, records: list[bytes]) -> None:
        """``records`` were just written to the backend (a subclass may need to know)."""

    def _next_backend_records(
        self, kind: str, limit: int, out: list[bytes], positions: list[int] | None = None
    ) -> int:
        """Consume up to ``limit`` backend records from one data file, appended to ``out``;
        returns that file's number. Nothing is appended when there is nothing to read now, or
        when a read failed (logged; the backend is unchanged and a later call tries again).
        ``positions`` (optional) gets each record's byte position. A record too short to be a
        message cannot come back (the backend's minimum record size is a message header)."""
        backend = self.backend
        assert backend is not None
        try:
            file_num, records = backend.read_many(limit, positions)
        except OSError as e:
            log.error("%s(%s): failed to read from backend - %s", kind, self.name, e)
            return 0
        out += records
        return file_num

    def _next_backend_framed(self, kind: str, limit: int) -> tuple[bytes, list[int]]:
        """Consume up to ``limit`` backend records as DiskQueue.read_framed gives them:
        (chunk, offs); (b"", []) when there is nothing to read now or a read failed (logged,
        as :meth:`_next_backend_records`)."""
        backend = self.backend
        assert backend is not None
        try:
            return backend.read_framed(limit)[2:]
        except OSError as e:
            log.error("%s(%s): failed to read from backend - %s", kind, self.name, e)
            return b"", []

    def locate_queued(self, msg_id: bytes) -> tuple[str, bytes, tuple[int, int] | None] | None:
        """Where the message ``msg_id`` (16 hex bytes) waits: ("memory", record, None) or
        ("disk", record, (file number, byte position)), or None when it is in neither. Bounded
        time (msg_index); a disk hit reads one block of the backend."""
        i = self._mem_index.find(self._queue, msg_id)
        if i >= 0:
            return "memory", self._queue[i], None
        if self._disk_index is not None:
            hit = self._disk_index.find(msg_id)
            if hit is not None:
                return "disk", hit[1], hit[0]
        return None

    def _drop_queued(self, topic: str, channel: str | None) -> None:
        """Empty memory and the backend (the deferred journal forgets this queue's entries)."""
        self._mem_clear()
        if self.backend is not None:
            self.backend.empty()
            if self._disk_index is not None:
                self._disk_index.cleared()
            if self._hooks is not None:
                self._hooks.deferred_dropped(topic, channel)
