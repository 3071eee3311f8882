"""A channel's messages while no consumer holds them: memory, the backend (with its read ahead
and read floor) and the deferred set; the base of channel.Channel.

Strategy: channel.py is about consumers (RDY, dispatch, in-flight, FIN/REQ/TOUCH, timeouts);
this module is about where a channel's messages wait until then, and it never sees a consumer.
A deferred message (DPUB, or REQ with a delay) waits in ``deferred`` by ID and in a timeout
queue by due time (ns, the channel's clock); the queue-scan loop moves the due ones back to the
queue (process_deferred). Records on the backend are read a batch at a time (READ_AHEAD) into
backend_reads.BackendReads, which keeps the read floor the diskqueue's meta file is written at.
Every call is synchronous; nothing here awaits."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .backed_queue import BackedQueue, StorageHooks
from .backend_reads import BackendReads
from .message import Message, record_id
from .pqueue import InFlightQueue, TimeoutQueue

if TYPE_CHECKING:
    from .diskqueue import DiskQueue

log = logging.getLogger("nsqpy")

#: Backend records read per batch when a channel's backlog is on disk (one read chunk holds
#: about 290 records of 200 bytes); they wait in the channel's read ahead until handed out.
READ_AHEAD = 256


class ChannelError(Exception):
    """FIN/REQ/TOUCH on a message the channel cannot act on; text is nsqd's."""


class ChannelStore(BackedQueue):
    """Where one channel's messages wait: memory, backend (read ahead) and deferred.

    ``in_flight`` (message ID -> Message) is kept here only so that a second copy of an
    in-flight message read from the backend (after a crash) is skipped; channel.Channel fills
    it. ``message_count`` counts every message put (nsqd's /stats).
    """

    __slots__ = (
        "_clock_ns",
        "_deferred_pq",
        "_reads",
        "deferred",
        "exiting",
        "in_flight",
        "message_count",
        "topic_name",
    )

    def __init__(
        self,
        topic_name: str,
        name: str,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        mem_queue_size: int = 10000,
        backend: DiskQueue | None = None,
        hooks: StorageHooks | None = None,
    ) -> None:
        super().__init__(name, mem_queue_size, backend, hooks)
        self.topic_name = topic_name
        self.exiting = False
        self.message_count = 0
        self.in_flight: dict[bytes, Message] = {}
        self.deferred: dict[bytes, Message] = {}
        self._deferred_pq = TimeoutQueue()
        self._clock_ns = clock_ns
        # Backend records read and not yet finished (read ahead, read floor: backend_reads.py).
        self._reads = BackendReads()
        if backend is not None:
            backend.read_floor = self._reads.floor

    def _dispatch(self) -> None:
        """Hand queued messages to consumers: channel.Channel's; nothing here."""

    @property
    def depth(self) -> int:
        """Messages waiting for a consumer: memory, read ahead and the backend."""
        backend = self.backend
        n = len(self._queue) + len(self._reads.ahead)
        return n + (backend.depth if backend is not None else 0)

    @property
    def backend_depth(self) -> int:
        """Messages waiting on disk (the read ahead included)."""
        backend = self.backend
        return len(self._reads.ahead) + (backend.depth if backend is not None else 0)

    def put_deferred(self, record: bytes, delay_ms: int) -> None:
        """Hold a message back for ``delay_ms`` ms (DPUB), then queue it."""
        self.message_count += 1
        self._start_deferred(Message(record), delay_ms)
        if self._hooks is not None and self.backend is not None:
            self._hooks.deferred(self.topic_name, self.name, record, delay_ms)

    def _spilled(self, records: list[bytes]) -> None:
        # A record written again (a requeue, a timeout) no longer needs its earlier copy.
        reads = self._reads
        if reads.refs:
            for r in records:
                reads.release(record_id(r))

    def _read_backend(self) -> bytes | None:
        """The next backend record to hand out, or None if there is none to read now."""
        reads = self._reads
        while True:
            rec = reads.take(self.in_flight)
            if rec is not None:
                return rec
            positions: list[int] = []
            records: list[bytes] = []
            file_num = self._next_backend_records("CHANNEL", READ_AHEAD, records, positions)
            if not records:
                return None
            reads.fill(file_num, records, positions)

    def _pop_due(
        self, held: dict[bytes, Message], pq: TimeoutQueue | InFlightQueue, now_ns: int | None
    ) -> list[Message]:
        """The queue scan's first step over one priority queue: the messages of ``pq`` due at
        ``now_ns`` (the clock's now when None), earliest first, taken out of ``pq`` and out of
        ``held`` (their table by ID); none while the channel exits or ``held`` is empty.
        One call per pass (process_deferred, Channel.process_in_flight), inline per message."""
        if self.exiting or not held:
            return []
        due: list[Message] = pq.pop_due(self._clock_ns() if now_ns is None else now_ns)
        for msg in due:
            held.pop(msg.id, None)
        return due

    def process_deferred(self, now_ns: int | None = None) -> bool:
        """Queue deferred messages that are due; True if any were ("dirty")."""
        due = self._pop_due(self.deferred, self._deferred_pq, now_ns)
        if not due:
            return False
        self._requeue_all(due)
        if self._hooks is not None and self.backend is not None:
            self._hooks.deferred_done(self.topic_name, self.name, [m.id for m in due])
        self._dispatch()
        return True

    def restore_deferred(self, record: bytes, delay_ms: int) -> None:
        """Put back a deferred message kept across a restart (not counted again)."""
        self._start_deferred(Message(record), max(0, delay_ms))

    def _requeue_all(self, msgs: list[Message]) -> None:
        """Timed-out or due messages go back to the queue; a backend failure is logged (nothing
        else can be done from the queue-scan loop) and the messages stay in memory."""
        records = [m.to_record() for m in msgs]
        try:
            self._enqueue_many(records)
        except OSError as e:
            log.error("CHANNEL(%s): failed to write message to backend - %s", self.name, e)
            self._mem_extend(records)

    def _start_deferred(self, msg: Message, delay_ms: int) -> None:
        if msg.id in self.deferred:
            raise ChannelError("ID already deferred")
        pri = self._clock_ns() + delay_ms * 1_000_000
        msg.pri = pri
        self.deferred[msg.id] = msg
        self._deferred_pq.push(msg, pri)
