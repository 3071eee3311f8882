"""Timeout priority queues for in-flight and deferred messages.

Strategy: a binary heap (C heapq) of ``(pri, seq, item)`` entries with lazy removal. Removing
an item (FIN, REQ, TOUCH) only forgets its entry (``item.pq_entry = None``); stale entries are
skipped when they surface, and the heap is rebuilt from live entries once stale ones outnumber
live ones, so memory stays within about twice the live count. nsqd keeps an indexed heap in
Go (nsqd/in_flight_pqueue.go); in Python an indexed heap costs a dozen attribute writes per
operation, while heapq push/pop are single C calls. Rule kept: an item is in at most one
queue at a time, and ``pop_due`` returns live items in (pri, insertion) order.

Items are message.Message objects (their ``pq_entry`` and ``pri`` slots): typed as such, the
compiled build reads and writes those slots directly; typed as any object with the attributes,
every access went through Python's generic attribute lookup (about a tenth of the daemon's
time delivering and finishing messages)."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Any

from .message import Message

#: A heap entry, ``(pri, seq, item)``. Live entries are recognised by identity
#: (``item.pq_entry is entry``), so an entry must stay one object: typed as a variable-length
#: tuple because mypyc keeps a fixed-shape ``tuple[int, int, Any]`` unboxed and would box a new
#: tuple at every store.
_Entry = tuple[Any, ...]


class TimeoutQueue:
    """Items ordered by an integer priority (a due time, ns).

    Items must have a ``pq_entry`` attribute (None when in no queue). ``push`` adds or
    re-prioritises; ``remove`` drops; ``pop_due(now)`` takes every item with ``pri <= now``.
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._live = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self._live

    def push(self, item: Message, pri: int) -> None:
        if item.pq_entry is not None:
            self._live -= 1
        entry: _Entry = (pri, next(self._seq), item)
        item.pq_entry = entry
        heapq.heappush(self._heap, entry)
        self._live += 1
        self._maybe_compact()

    def remove(self, item: Message) -> bool:
        """Forget ``item``; False when it was in no queue."""
        if item.pq_entry is None:
            return False
        item.pq_entry = None
        self._live -= 1
        self._maybe_compact()
        return True

    def peek_pri(self) -> int | None:
        """Priority of the first live item, or None when empty."""
        heap = self._heap
        while heap:
            entry = heap[0]
            if entry[2].pq_entry is entry:
                return entry[0]
            heapq.heappop(heap)
        return None

    def pop_due(self, now: int) -> list[Message]:
        """Remove and return every live item with ``pri <= now``, earliest first."""
        heap = self._heap
        out: list[Message] = []
        pop = heapq.heappop
        while heap and heap[0][0] <= now:
            entry = pop(heap)
            item: Message = entry[2]
            if item.pq_entry is entry:
                item.pq_entry = None
                out.append(item)
        self._live -= len(out)
        return out

    def items(self) -> list[Message]:
        """Live items in no particular order."""
        return [e[2] for e in self._heap if e[2].pq_entry is e]

    def clear(self) -> list[Message]:
        """Remove and return every live item."""
        out = self.items()
        for item in out:
            item.pq_entry = None
        self._heap = []
        self._live = 0
        return out

    def _maybe_compact(self) -> None:
        heap = self._heap
        if len(heap) > 1024 and len(heap) > 2 * self._live:
            live = [e for e in heap if e[2].pq_entry is e]
            heapq.heapify(live)
            self._heap = live


class InFlightQueue:
    """In-flight timeouts, as a FIFO per timeout length plus a TimeoutQueue for the rest.

    A message delivered at ``now`` to a consumer with timeout ``span`` is due at ``now + span``;
    ``now`` only grows, so the messages sharing a span fall due in the order they were sent:
    ``push_sent`` appends to that span's FIFO (no tuple, no heap). A TOUCH gives a message a new
    due time out of that order (``push``: the TimeoutQueue); its FIFO entry goes stale. Removal is
    lazy as in TimeoutQueue (``pq_entry``: the FIFO while live there, the heap entry after a
    TOUCH, None when gone); stale entries are dropped when they reach a FIFO's head (FIN order
    is mostly send order, so that is at once) and all FIFOs are compacted once stale entries
    outnumber live ones. Rule kept: ``pop_due(now)`` returns every live item with ``pri <= now``,
    earliest first, and nothing else.
    """

    __slots__ = ("_fifos", "_heap", "_live", "_stored")

    def __init__(self) -> None:
        self._fifos: dict[int, deque[Message]] = {}
        self._heap = TimeoutQueue()
        self._live = 0  # live FIFO entries
        self._stored = 0  # FIFO entries, live or stale

    def __len__(self) -> int:
        return self._live + len(self._heap)

    def push_sent(self, item: Message, pri: int, span: int) -> None:
        """A new delivery (the item is in no queue yet): due at ``pri`` = send time + ``span``."""
        fifo = self._fifos.get(span)
        if fifo is None:
            fifo = self._fifos[span] = deque()
        elif fifo and fifo[-1].pri > pri:
            self._heap.push(item, pri)  # out of send order (never with a monotonic clock)
            return
        fifo.append(item)
        item.pq_entry = fifo
        self._live += 1
        self._stored += 1

    def push_sent_many(self, items: list[Message], pri: int, span: int) -> None:
        """push_sent for each of ``items``, all sent at once (the same ``pri``), in order."""
        if not items:
            return
        fifo = self._fifos.get(span)
        if fifo is None:
            fifo = self._fifos[span] = deque()
        elif fifo and fifo[-1].pri > pri:
            for item in items:
                self._heap.push(item, pri)
            return
        fifo.extend(items)
        for item in items:
            item.pq_entry = fifo
        n = len(items)
        self._live += n
        self._stored += n

    def push(self, item: Message, pri: int) -> None:
        """(Re)schedule ``item`` at ``pri`` (a TOUCH): it leaves its FIFO for the heap."""
        if isinstance(item.pq_entry, deque):
            item.pq_entry = None
            self._live -= 1
        self._heap.push(item, pri)

    def remove(self, item: Message) -> bool:
        """Forget ``item`` (FIN, REQ); False when it was in no queue."""
        entry = item.pq_entry
        if entry is None:
            return False
        if not isinstance(entry, deque):
            return self._heap.remove(item)
        item.pq_entry = None
        self._live -= 1
        fifo = entry
        while fifo and fifo[0].pq_entry is not fifo:  # stale heads (this one first)
            fifo.popleft()
            self._stored -= 1
        if self._stored > 4096 and self._stored > 2 * self._live:
            self._compact()
        return True

    def remove_many(self, items: list[Message]) -> None:
        """remove() for each of ``items`` (FIN runs); items in no queue are passed over."""
        heap_remove = self._heap.remove
        fifos: list[deque[Message]] = []
        live = self._live
        for item in items:
            entry = item.pq_entry
            if entry is None:
                continue
            if not isinstance(entry, deque):
                heap_remove(item)
                continue
            item.pq_entry = None
            live -= 1
            if not fifos or fifos[-1] is not entry:
                fifos.append(entry)
        self._live = live
        stored = self._stored
        for fifo in fifos:
            while fifo and fifo[0].pq_entry is not fifo:  # stale heads
                fifo.popleft()
                stored -= 1
        self._stored = stored
        if stored > 4096 and stored > 2 * live:
            self._compact()

    def pop_due(self, now: int) -> list[Message]:
        """Remove and return every live item with ``pri <= now``, earliest first."""
        out: list[Message] = []
        for fifo in self._fifos.values():
            popleft = fifo.popleft
            while fifo:
                head = fifo[0]
                if head.pq_entry is not fifo:
                    popleft()
                    self._stored -= 1
                elif head.pri <= now:
                    popleft()
                    self._stored -= 1
                    head.pq_entry = None
                    self._live -= 1
                    out.append(head)
                else:
                    break
        touched = self._heap.pop_due(now)
        if touched or len(self._fifos) > 1:
            out += touched
            out.sort(key=_pri)
        return out

    def items(self) -> list[Message]:
        """Live items in no particular order."""
        live = [i for f in self._fifos.values() for i in f if i.pq_entry is f]
        return live + self._heap.items()

    def clear(self) -> list[Message]:
        """Remove and return every live item."""
        out = self.items()
        for item in out:
            item.pq_entry = None
        self._fifos = {}
        self._heap.clear()
        self._live = self._stored = 0
        return out

    def _compact(self) -> None:
        stored = 0
        for span, fifo in list(self._fifos.items()):
            live = deque(i for i in fifo if i.pq_entry is fifo)
            for i in live:
                i.pq_entry = live
            if live:
                self._fifos[span] = live
            else:
                del self._fifos[span]
            stored += len(live)
        self._stored = stored


def _pri(item: Message) -> int:
    return item.pri
