"""A channel: one copy of a topic's stream, shared by its consumers.

Strategy: every call is synchronous and runs to completion on the event loop; nothing here
awaits or spawns a task. A message goes to exactly one ready consumer: the channel keeps a FIFO
of consumers with room (RDY minus in-flight > 0) and hands out messages in one dispatch pass
whenever something changes (a put, a RDY, a FIN/REQ, a timeout, an unpause), spreading a batch
fairly across ready consumers. Delivered messages sit in the in-flight table until FIN, REQ or
their timeout (pqueue.InFlightQueue, monotonic ns); REQ with a delay and DPUB go to the
deferred queue. The queue-scan loop (queue_scan.py) calls process_in_flight/process_deferred.

Storage: queued messages are records (immutable bytes in nsqd's layout, see message.py), not
objects, and a backlog of them is packed into shared buffers (record_queue.py). At most
``mem_queue_size`` wait in memory; the rest spill to the channel's backend (a DiskQueue named
"<topic>:<channel>") as they are (backed_queue.py), and dispatch reads from memory and backend
in turn so neither starves. A record read from the backend counts as consumed only once
it is handed to a consumer, and the backend's meta file keeps its read position at the oldest such
record not yet FIN'd (a read floor), so after a crash every record handed out and not finished is
delivered again (at-least-once). Ephemeral channels have no backend: past mem_queue_size their
messages are dropped, as nsqd does.

Consumers are seen through a small interface (see `Consumer`), implemented by the TCP client in
protocol_v2.py; this module never touches a socket.

Behaviour follows nsqd/channel.go, with one deliberate difference: when a consumer goes away
its in-flight messages are requeued at once (nsqd leaves them to time out, msg_timeout later)."""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .backed_queue import BackedQueue, StorageHooks
from .channel_store import READ_AHEAD, ChannelError, ChannelStore
from .message import Message, record_id
from .msg_index import MemoryIndex
from .pqueue import InFlightQueue
from .record_queue import RecordQueue

if TYPE_CHECKING:
    from .diskqueue import DiskQueue

log = logging.getLogger("nsqpy")

__all__ = ["READ_AHEAD", "Channel", "ChannelError", "ChannelStore", "Consumer"]


class Consumer(Protocol):
    """What a channel needs from a subscribed client."""

    client_id: int
    #: True while queued in a channel's ready FIFO (owned by the channel).
    in_ready: bool
    #: Per-client in-flight timeout, ms (IDENTIFY msg_timeout or --msg-timeout).
    msg_timeout_ms: int
    #: Deliver only about this percentage of messages (IDENTIFY sample_rate; 0 = all).
    sample_rate: int

    def ready_room(self) -> int:
        """How many more messages the consumer can take now (RDY - in-flight, 0 if not ready)."""
        ...

    def send_messages(self, msgs: list[Message]) -> None:
        """Write these messages' frames, in order (the channel has done the in-flight
        bookkeeping; never more than ready_room() allowed)."""
        ...

    def timed_out_message(self) -> None:
        """One of its in-flight messages timed out."""
        ...

    def emptied(self) -> None:
        """The channel was emptied: its in-flight count is now 0."""
        ...

    def close(self) -> None:
        """Disconnect (channel deleted)."""
        ...


class Channel(ChannelStore):
    """One channel of a topic.

    Counters (as in nsqd's /stats): ``message_count``, ``requeue_count``, ``timeout_count``.
    ``depth`` counts messages waiting for a consumer (not in flight, not deferred).
    """

    __slots__ = (
        "_disk_turn",
        "_dispatching",
        "_in_flight_pq",
        "_on_dead_letter",
        "_on_empty",
        "_rand",
        "_ready",
        "clients",
        "dead_letter_count",
        "e2e",
        "ephemeral",
        "max_attempts",
        "max_msg_timeout_ns",
        "paused",
        "requeue_count",
        "timeout_count",
    )

    def __init__(
        self,
        topic_name: str,
        name: str,
        *,
        max_msg_timeout_ms: int = 15 * 60_000,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        on_last_client_gone: Callable[[Channel], None] | None = None,
        rand: Callable[[int], int] = random.randrange,
        mem_queue_size: int = 10000,
        backend: DiskQueue | None = None,
        hooks: StorageHooks | None = None,
    ) -> None:
        super().__init__(topic_name, name, clock_ns, mem_queue_size, backend, hooks)
        self.ephemeral = name.endswith("#ephemeral")
        self.paused = False
        self.clients: dict[int, Consumer] = {}
        self._ready: deque[Consumer] = deque()
        self._in_flight_pq = InFlightQueue()
        self.requeue_count = 0
        self.timeout_count = 0
        # Dead letters (beyond nsqd): a message coming back (REQ, timeout, disconnect) after
        # max_attempts deliveries goes to on_dead_letter instead of this channel's queue.
        self.max_attempts = 0
        self.dead_letter_count = 0
        self._on_dead_letter: Callable[[Channel, list[bytes]], bool] | None = None
        # FIN latency recorder (quantile.E2ELatency) when --e2e-processing-latency-percentile
        # is set, else None (then FIN does no extra work).
        self.e2e: Any = None
        self.max_msg_timeout_ns = max_msg_timeout_ms * 1_000_000
        self._on_empty = on_last_client_gone
        self._dispatching = False
        self._rand = rand
        self._disk_turn = False

    # ---------------------------------------------------------------- state

    def __repr__(self) -> str:
        return f"Channel({self.topic_name}:{self.name})"

    # ---------------------------------------------------------------- producers side

    def put(self, record: bytes) -> None:
        """Queue one message record for delivery (counted in message_count). Raises OSError
        when it had to go to the backend and the write failed."""
        self.message_count += 1
        if len(self._queue) < self.mem_queue_size:
            self._mem_append(record)
        else:
            self._spill([record])
        if self._ready:
            self._dispatch()

    def put_many(self, records: list[bytes], in_order: bool = False) -> None:
        """Queue a batch of records; as put(). ``in_order``: their IDs are known to increase
        (fresh publishes), which saves the message index a check per record."""
        self.message_count += len(records)
        self._enqueue_many(records, in_order)
        if self._ready:
            self._dispatch()

    def put_framed(self, buf: bytes, offs: list[int], in_order: bool = False) -> None:
        """Queue the records of a diskqueue chunk (DiskQueue.read_framed: record k is
        ``buf[offs[k] + 4 : offs[k + 1]]``); as put_many()."""
        self.message_count += len(offs) - 1
        self._enqueue_framed(buf, offs, in_order)
        if self._ready:
            self._dispatch()

    def adopt_queue(self, held: BackedQueue) -> bool:
        """Take over the records ``held`` (a topic) keeps in memory, in order, as this
        channel's own memory queue, with their message index: the queue object changes owner,
        no record is copied, and ``held`` is left with an empty one. Only for a channel that
        holds nothing yet (memory, backend, read-ahead) and has room for all of them; False,
        with nothing done, otherwise (then put_many the records). Counted in message_count."""
        n = len(held._queue)
        backend = self.backend
        if (
            self._queue
            or self._reads.ahead
            or (backend is not None and backend.depth)
            or n > self.mem_queue_size
            or self.exiting
        ):
            return False
        self._queue = held._queue
        self._mem_index = held._mem_index
        held._queue = RecordQueue()
        held._mem_index = MemoryIndex()
        self.message_count += n
        if self._ready:
            self._dispatch()
        return True

    # ---------------------------------------------------------------- consumers side

    def add_client(self, c: Consumer, max_consumers: int = 0) -> None:
        """Subscribe a consumer. Raises ChannelError when the channel is exiting or full."""
        if self.exiting:
            raise ChannelError("exiting")
        if c.client_id in self.clients:
            return
        if max_consumers and len(self.clients) >= max_consumers:
            raise ChannelError(
                f"consumers for {self.topic_name}:{self.name} exceeds limit of {max_consumers}"
            )
        self.clients[c.client_id] = c
        c.in_ready = False

    def remove_client(self, c: Consumer) -> None:
        """Unsubscribe; its in-flight messages go back to the front of the queue at once."""
        if self.clients.pop(c.client_id, None) is None:
            return
        mine = [m for m in self.in_flight.values() if m.client is c]
        if mine:
            pq = self._in_flight_pq
            for m in mine:
                del self.in_flight[m.id]
                pq.remove(m)
                m.client = None
            if self.max_attempts:
                mine = self._dead_letters_out(mine)
            self.requeue_count += len(mine)
            mine.sort(key=_by_delivery)
            records = [m.to_record() for m in mine]
            self._queue.extendleft(reversed(records))
            self._mem_index.prepended(records)
            self._dispatch()
        if not self.clients and self.ephemeral and self._on_empty is not None:
            self._on_empty(self)

    def notify_ready(self, c: Consumer) -> None:
        """A consumer may have room now (RDY raised, FIN/REQ, socket writable again)."""
        if not c.in_ready and c.ready_room() > 0 and c.client_id in self.clients:
            c.in_ready = True
            self._ready.append(c)
            if (
                self._queue
                or self._reads.ahead
                or (self.backend is not None and self.backend.depth)
            ):
                self._dispatch()

    def finish(self, c: Consumer, msg_id: bytes) -> Message:
        """FIN: the message is done. Raises ChannelError ("ID not in flight", ...)."""
        msg = self._pop_in_flight(c, msg_id)
        self._in_flight_pq.remove(msg)
        if self._reads.refs:
            self._reads.release(msg_id)
        if self.e2e is not None:
            self.e2e.insert(msg.timestamp)
        return msg

    def finish_many(self, c: Consumer, msg_ids: list[bytes]) -> list[tuple[bytes, str]]:
        """FIN for each ID in order, as finish() does one by one; returns the failures as
        (ID, nsqd's reason: "ID not in flight", "client does not own message"), [] when all
        were finished."""
        in_flight = self.in_flight
        pop = in_flight.pop
        e2e = self.e2e
        refs = self._reads.refs
        failed: list[tuple[bytes, str]] = []
        done: list[Message] = []
        for msg_id in msg_ids:
            msg = pop(msg_id, None)  # one dict operation for the usual, owned, ID
            if msg is None or msg.client is not c:
                if msg is None:
                    failed.append((msg_id, "ID not in flight"))
                else:
                    in_flight[msg_id] = msg  # another consumer's: it stays in flight
                    failed.append((msg_id, "client does not own message"))
                continue
            msg.client = None
            done.append(msg)
            if refs:
                ref = refs.pop(msg_id, None)
                if ref is not None:
                    ref[2] = 1
            if e2e is not None:
                e2e.insert(msg.timestamp)
        self._in_flight_pq.remove_many(done)
        return failed

    def requeue(self, c: Consumer, msg_id: bytes, delay_ms: int) -> None:
        """REQ: back to the queue now (delay 0, at the tail as nsqd) or after ``delay_ms``."""
        msg = self._pop_in_flight(c, msg_id)
        self._in_flight_pq.remove(msg)
        if self.max_attempts and not self._dead_letters_out([msg]):
            return
        self.requeue_count += 1
        if delay_ms <= 0:
            if self.exiting:
                raise ChannelError("exiting")
            try:
                self._enqueue_many([msg.to_record()])
            except OSError as e:
                raise ChannelError(str(e)) from None
            if self._ready:
                self._dispatch()
        else:
            self._start_deferred(msg, delay_ms)

    def touch(self, c: Consumer, msg_id: bytes, timeout_ms: int) -> None:
        """TOUCH: restart the in-flight timeout, capped at delivery + --max-msg-timeout."""
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise ChannelError("ID not in flight")
        if msg.client is not c:
            raise ChannelError("client does not own message")
        now = self._clock_ns()
        pri = now + timeout_ms * 1_000_000
        if pri - msg.delivery_ts >= self.max_msg_timeout_ns:
            pri = msg.delivery_ts + self.max_msg_timeout_ns
        msg.pri = pri
        self._in_flight_pq.push(msg, pri)

    # ---------------------------------------------------------------- queue scan

    def process_in_flight(self, now_ns: int | None = None) -> bool:
        """Requeue in-flight messages whose timeout passed; True if any did ("dirty")."""
        due = self._pop_due(self.in_flight, self._in_flight_pq, now_ns)
        if not due:
            return False
        for msg in due:
            client = msg.client
            msg.client = None
            if client is not None and client.client_id in self.clients:
                client.timed_out_message()
        self.timeout_count += len(due)
        if self.max_attempts:
            due = self._dead_letters_out(due)
        self._requeue_all(due)
        self._dispatch()
        return True

    def locate(self, msg_id: bytes) -> tuple[str, Message | bytes, tuple[int, int] | None] | None:
        """Where the message ``msg_id`` is in this channel: ("in_flight", Message, None),
        ("deferred", Message, None), ("memory", record, None), ("disk", record, (file number,
        byte position)); None when the channel does not hold it (finished, or never here).
        Bounded time: see msg_index."""
        msg = self.in_flight.get(msg_id)
        if msg is not None:
            return "in_flight", msg, None
        msg = self.deferred.get(msg_id)
        if msg is not None:
            return "deferred", msg, None
        hit = self._reads.locate(msg_id)
        if hit is not None:
            return "disk", hit[0], hit[1]
        return self.locate_queued(msg_id)

    def held_ids(self, limit: int) -> list[bytes] | None:
        """The IDs (16-byte wire form, in no order) of every message this channel holds:
        queued in memory or read ahead, in flight, deferred. None when some wait on disk unread
        or there are more than ``limit``. Replicated topics' channel progress
        (replication/progress.py) reads it about once a second; O(held messages)."""
        backend = self.backend
        ahead = self._reads.ahead
        if backend is not None and backend.depth:
            return None
        if len(self._queue) + len(ahead) + len(self.in_flight) + len(self.deferred) > limit:
            return None
        ids: list[bytes] = list(self.in_flight)
        ids.extend(self.deferred)
        ids.extend(map(record_id, self._queue))
        ids.extend(map(record_id, ahead))
        return ids

    # ---------------------------------------------------------------- admin

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        for c in self.clients.values():
            if not c.in_ready and c.ready_room() > 0:
                c.in_ready = True
                self._ready.append(c)
        self._dispatch()

    def empty(self) -> None:
        """Drop every queued, in-flight and deferred message (nsqd Channel.Empty)."""
        self._reads.drop_ahead()
        self._reads.forget()
        self._drop_queued(self.topic_name, self.name)
        self.in_flight.clear()
        for m in self._in_flight_pq.clear():
            m.client = None
        self.deferred.clear()
        self._deferred_pq.clear()
        for c in list(self.clients.values()):
            c.emptied()

    def close(self) -> None:
        """Delete: disconnect every consumer and drop all messages and files."""
        self.exiting = True
        clients = list(self.clients.values())
        self.clients.clear()
        for c in clients:
            c.close()
        self._mem_clear()
        self._reads.drop_ahead()
        self.in_flight.clear()
        self._in_flight_pq.clear()
        self.deferred.clear()
        self._deferred_pq.clear()
        self._ready.clear()
        if self.backend is not None:
            self.backend.delete()
            if self._hooks is not None:
                self._hooks.deferred_dropped(self.topic_name, self.name)

    def drain_for_exit(self) -> list[Message]:
        """Clean exit: every in-flight and queued message goes to the backend (nsqd's flush),
        and the deferred messages are returned (``pri`` = due time, this clock) for the caller
        to keep with their remaining delay. The channel stops."""
        self.exiting = True
        queued = self._reads.drop_ahead() + self._queue.take_all(False)
        self._mem_clear()
        in_flight = sorted(self.in_flight.values(), key=_by_delivery)
        self.in_flight.clear()
        self._in_flight_pq.clear()
        for m in in_flight:
            m.client = None
        deferred = self._deferred_pq.clear()
        self.deferred.clear()
        deferred.sort(key=lambda m: m.pri)
        if self.backend is not None:
            self.backend.put_many([m.to_record() for m in in_flight] + queued)
            # Deferred messages read from the backend are kept by the caller; all else was
            # written again just above.
            self._reads.forget()
        return deferred

    # ---------------------------------------------------------------- internals

    def set_dead_letter(
        self, max_attempts: int, on_dead_letter: Callable[[Channel, list[bytes]], bool] | None
    ) -> None:
        """Dead-letter messages after ``max_attempts`` deliveries (0: never, as nsqd):
        ``on_dead_letter(channel, records)`` takes them (records keep ID, timestamp and
        attempts) instead of this channel's queue, and returns False when it could not (they
        then stay in this channel)."""
        self.max_attempts = max_attempts if on_dead_letter is not None else 0
        self._on_dead_letter = on_dead_letter

    def _dead_letters_out(self, msgs: list[Message]) -> list[Message]:
        """Hand the messages that used up max_attempts to on_dead_letter; return the others."""
        limit = self.max_attempts
        dead = [m for m in msgs if m.attempts >= limit]
        if not dead or self._on_dead_letter is None:
            return msgs
        if not self._on_dead_letter(self, [m.to_record() for m in dead]):
            return msgs
        if self._reads.refs:
            for m in dead:
                self._reads.release(m.id)
        self.dead_letter_count += len(dead)
        return [m for m in msgs if m.attempts < limit]

    def _pop_in_flight(self, c: Consumer, msg_id: bytes) -> Message:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise ChannelError("ID not in flight")
        if msg.client is not c:
            raise ChannelError("client does not own message")
        del self.in_flight[msg_id]
        msg.client = None
        return msg

    def _dispatch(self) -> None:
        """Hand queued messages to ready consumers until one side runs out."""
        if self.paused or self._dispatching or self.exiting:
            return
        queue = self._queue
        ready = self._ready
        backend = self.backend
        ahead = self._reads.ahead
        if not ready or not (queue or ahead or (backend is not None and backend.depth)):
            return
        self._dispatching = True
        try:
            now = self._clock_ns()
            setdefault = self.in_flight.setdefault
            push_many = self._in_flight_pq.push_sent_many
            clients = self.clients
            read_disk = False
            popped = 0
            while ready:
                on_disk = len(ahead) + backend.depth if backend is not None else 0
                avail = len(queue) + on_disk
                if not avail:
                    break
                c = ready.popleft()
                c.in_ready = False
                room = c.ready_room()
                if room <= 0 or c.client_id not in clients:
                    continue
                n = avail
                if ready:  # share a short queue fairly among the ready consumers
                    n = max(1, n // (len(ready) + 1))
                if n > room:
                    n = room
                timeout_ns = c.msg_timeout_ms * 1_000_000
                pri = now + timeout_ns
                sample = c.sample_rate
                if not on_disk:
                    recs = queue.take(n)
                    popped += len(recs)
                else:
                    recs = []
                    for _ in range(n):
                        if on_disk and (self._disk_turn or not queue):
                            # Memory and disk take turns (nsqd selects on both at random).
                            self._disk_turn = False
                            read_disk = True
                            rec = self._read_backend()
                            if rec is None:
                                on_disk = 0
                                if not queue:
                                    break
                                rec = queue.popleft()
                                popped += 1
                            else:
                                on_disk -= 1
                        else:
                            self._disk_turn = True
                            rec = queue.popleft()
                            popped += 1
                        recs.append(rec)
                batch: list[Message] = []
                for rec in recs:
                    if sample and self._rand(100) > sample:
                        # nsqd drops sampled-out messages for this channel
                        if self._reads.refs:
                            self._reads.release(record_id(rec))
                        continue
                    msg = Message(rec)
                    if setdefault(msg.id, msg) is not msg:
                        continue  # a duplicate of a message in flight (after a crash)
                    msg.attempts += 1
                    msg.client = c
                    msg.delivery_ts = now
                    msg.pri = pri
                    batch.append(msg)
                if batch:
                    push_many(batch, pri, timeout_ns)
                    c.send_messages(batch)
                if c.ready_room() > 0:
                    c.in_ready = True
                    ready.append(c)
            self._mem_index.popped(popped)
            if read_disk and self._hooks is not None and backend is not None:
                self._hooks.backend_read(backend)
        finally:
            self._dispatching = False


def _by_delivery(m: Message) -> int:
    return m.delivery_ts
