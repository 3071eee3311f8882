# A channel: one copy of a topic's stream, shared by its consumers.
#
# Strategy: every call is synchronous and runs to completion on the event loop; nothing here
# awaits or spawns a task. A message goes to exactly one ready consumer: the channel keeps a FIFO
# of consumers with room (RDY minus in-flight > 0) and hands out messages in one dispatch pass
# whenever something changes (a put, a RDY, a FIN/REQ, a timeout, an unpause), spreading a batch
# fairly across ready consumers. Delivered messages sit in the in-flight table until FIN, REQ or
# their timeout (TimeoutQueue keyed on monotonic ns); REQ with a delay and DPUB go to the
# deferred queue. The queue-scan loop (queue_scan.py) calls process_in_flight/process_deferred.
#
# Consumers are seen through a small interface (see `Consumer`), implemented by the TCP client in
# protocol_v2.py; this module never touches a socket.
#
# Behaviour follows nsqd/channel.go, with one deliberate difference: when a consumer goes away
# its in-flight messages are requeued at once (nsqd leaves them to time out, msg_timeout later).
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from .message import Message
from .pqueue import TimeoutQueue


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

    def send_message(self, msg: Message) -> None:
        """Write a message frame (in-flight bookkeeping already done by the channel)."""
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


class ChannelError(Exception):
    """FIN/REQ/TOUCH on a message the channel cannot act on; text is nsqd's."""


class Channel:
    """One channel of a topic.

    Counters (as in nsqd's /stats): ``message_count``, ``requeue_count``, ``timeout_count``.
    ``depth`` counts messages waiting for a consumer (not in flight, not deferred).
    """

    __slots__ = (
        "_clock_ns",
        "_deferred_pq",
        "_dispatching",
        "_in_flight_pq",
        "_on_empty",
        "_queue",
        "_rand",
        "_ready",
        "clients",
        "deferred",
        "ephemeral",
        "exiting",
        "in_flight",
        "max_msg_timeout_ns",
        "message_count",
        "name",
        "paused",
        "requeue_count",
        "timeout_count",
        "topic_name",
    )

    def __init__(
        self,
        topic_name: str,
        name: str,
        *,
        max_msg_timeout_ms: int = 15 * 60_000,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        on_last_client_gone: Callable[[Channel], None] | None = None,
        rand: Callable[[int], int] | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.paused = False
        self.exiting = False
        self.clients: dict[int, Consumer] = {}
        self._queue: deque[Message] = deque()
        self._ready: deque[Consumer] = deque()
        self.in_flight: dict[bytes, Message] = {}
        self._in_flight_pq = TimeoutQueue()
        self.deferred: dict[bytes, Message] = {}
        self._deferred_pq = TimeoutQueue()
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.max_msg_timeout_ns = max_msg_timeout_ms * 1_000_000
        self._clock_ns = clock_ns
        self._on_empty = on_last_client_gone
        self._dispatching = False
        if rand is None:
            import random

            rand = random.randrange
        self._rand = rand

    # ---------------------------------------------------------------- state

    @property
    def depth(self) -> int:
        return len(self._queue)

    def __repr__(self) -> str:
        return f"Channel({self.topic_name}:{self.name})"

    # ---------------------------------------------------------------- producers side

    def put(self, msg: Message) -> None:
        """Queue one message for delivery (counted in message_count)."""
        self.message_count += 1
        self._queue.append(msg)
        if self._ready:
            self._dispatch()

    def put_many(self, msgs: Iterable[Message]) -> None:
        n = len(self._queue)
        self._queue.extend(msgs)
        self.message_count += len(self._queue) - n
        if self._ready:
            self._dispatch()

    def put_deferred(self, msg: Message, delay_ms: int) -> None:
        """Hold a message back for ``delay_ms`` ms (DPUB), then queue it."""
        self.message_count += 1
        self._start_deferred(msg, delay_ms)

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
            self.requeue_count += len(mine)
            mine.sort(key=_by_delivery)
            self._queue.extendleft(reversed(mine))
            self._dispatch()
        if not self.clients and self.ephemeral and self._on_empty is not None:
            self._on_empty(self)

    def notify_ready(self, c: Consumer) -> None:
        """A consumer may have room now (RDY raised, FIN/REQ, socket writable again)."""
        if not c.in_ready and c.ready_room() > 0 and c.client_id in self.clients:
            c.in_ready = True
            self._ready.append(c)
            if self._queue:
                self._dispatch()

    def finish(self, c: Consumer, msg_id: bytes) -> Message:
        """FIN: the message is done. Raises ChannelError ("ID not in flight", ...)."""
        msg = self._pop_in_flight(c, msg_id)
        self._in_flight_pq.remove(msg)
        return msg

    def requeue(self, c: Consumer, msg_id: bytes, delay_ms: int) -> None:
        """REQ: back to the queue now (delay 0, at the tail as nsqd) or after ``delay_ms``."""
        msg = self._pop_in_flight(c, msg_id)
        self._in_flight_pq.remove(msg)
        self.requeue_count += 1
        if delay_ms <= 0:
            if self.exiting:
                raise ChannelError("exiting")
            self._queue.append(msg)
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
        cap = msg.delivery_ts + self.max_msg_timeout_ns
        if pri - msg.delivery_ts >= self.max_msg_timeout_ns:
            pri = cap
        msg.pri = pri
        self._in_flight_pq.push(msg, pri)

    # ---------------------------------------------------------------- queue scan

    def process_in_flight(self, now_ns: int | None = None) -> bool:
        """Requeue in-flight messages whose timeout passed; True if any did ("dirty")."""
        if self.exiting or not self.in_flight:
            return False
        due = self._in_flight_pq.pop_due(self._clock_ns() if now_ns is None else now_ns)
        if not due:
            return False
        in_flight = self.in_flight
        for msg in due:
            del in_flight[msg.id]
            client = msg.client
            msg.client = None
            if client is not None and client.client_id in self.clients:
                client.timed_out_message()
        self.timeout_count += len(due)
        self._queue.extend(due)
        self._dispatch()
        return True

    def process_deferred(self, now_ns: int | None = None) -> bool:
        """Queue deferred messages that are due; True if any were ("dirty")."""
        if self.exiting or not self.deferred:
            return False
        due = self._deferred_pq.pop_due(self._clock_ns() if now_ns is None else now_ns)
        if not due:
            return False
        deferred = self.deferred
        for msg in due:
            del deferred[msg.id]
        self._queue.extend(due)
        self._dispatch()
        return True

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
        self._queue.clear()
        self.in_flight.clear()
        for m in self._in_flight_pq.clear():
            m.client = None
        self.deferred.clear()
        self._deferred_pq.clear()
        for c in list(self.clients.values()):
            c.emptied()

    def close(self) -> None:
        """Delete: disconnect every consumer and drop all messages."""
        self.exiting = True
        clients = list(self.clients.values())
        self.clients.clear()
        for c in clients:
            c.close()
        self._queue.clear()
        self.in_flight.clear()
        self._in_flight_pq.clear()
        self.deferred.clear()
        self._deferred_pq.clear()
        self._ready.clear()

    def client_in_flight_count(self, c: Consumer) -> int:
        return sum(1 for m in self.in_flight.values() if m.client is c)

    # ---------------------------------------------------------------- internals

    def _pop_in_flight(self, c: Consumer, msg_id: bytes) -> Message:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise ChannelError("ID not in flight")
        if msg.client is not c:
            raise ChannelError("client does not own message")
        del self.in_flight[msg_id]
        msg.client = None
        return msg

    def _start_deferred(self, msg: Message, delay_ms: int) -> None:
        if msg.id in self.deferred:
            raise ChannelError("ID already deferred")
        pri = self._clock_ns() + delay_ms * 1_000_000
        msg.pri = pri
        self.deferred[msg.id] = msg
        self._deferred_pq.push(msg, pri)

    def _dispatch(self) -> None:
        """Hand queued messages to ready consumers until one side runs out."""
        if self.paused or self._dispatching or self.exiting:
            return
        queue = self._queue
        ready = self._ready
        if not queue or not ready:
            return
        self._dispatching = True
        try:
            now = self._clock_ns()
            in_flight = self.in_flight
            push = self._in_flight_pq.push
            popleft = queue.popleft
            while queue and ready:
                c = ready.popleft()
                c.in_ready = False
                room = c.ready_room()
                if room <= 0 or c.client_id not in self.clients:
                    continue
                n = len(queue)
                if ready:  # share a short queue fairly among the ready consumers
                    n = max(1, n // (len(ready) + 1))
                n = min(n, room)
                timeout_ns = c.msg_timeout_ms * 1_000_000
                sample = c.sample_rate
                send = c.send_message
                for _ in range(n):
                    msg = popleft()
                    if sample and self._rand(100) > sample:
                        continue  # nsqd drops sampled-out messages for this channel
                    msg.attempts += 1
                    msg.client = c
                    msg.delivery_ts = now
                    pri = now + timeout_ns
                    msg.pri = pri
                    in_flight[msg.id] = msg
                    push(msg, pri)
                    send(msg)
                if c.ready_room() > 0:
                    c.in_ready = True
                    ready.append(c)
        finally:
            self._dispatching = False


def _by_delivery(m: Message) -> int:
    return m.delivery_ts
