# Timeout priority queues for in-flight and deferred messages.
#
# Strategy: a binary heap (C heapq) of ``(pri, seq, item)`` entries with lazy removal. Removing
# an item (FIN, REQ, TOUCH) only forgets its entry (``item.pq_entry = None``); stale entries are
# skipped when they surface, and the heap is rebuilt from live entries once stale ones outnumber
# live ones, so memory stays within about twice the live count. nsqd keeps an indexed heap in
# Go (nsqd/in_flight_pqueue.go); in Python an indexed heap costs a dozen attribute writes per
# operation, while heapq push/pop are single C calls. Rule kept: an item is in at most one
# queue at a time, and ``pop_due`` returns live items in (pri, insertion) order.
from __future__ import annotations

import heapq
import itertools
from typing import Any, Protocol


class _Item(Protocol):
    pq_entry: Any


class TimeoutQueue:
    """Items ordered by an integer priority (a due time, ns).

    Items must have a ``pq_entry`` attribute (None when in no queue). ``push`` adds or
    re-prioritises; ``remove`` drops; ``pop_due(now)`` takes every item with ``pri <= now``.
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._live = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self._live

    def push(self, item: _Item, pri: int) -> None:
        if item.pq_entry is not None:
            self._live -= 1
        entry = (pri, next(self._seq), item)
        item.pq_entry = entry
        heapq.heappush(self._heap, entry)
        self._live += 1
        self._maybe_compact()

    def remove(self, item: _Item) -> bool:
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

    def pop_due(self, now: int) -> list[Any]:
        """Remove and return every live item with ``pri <= now``, earliest first."""
        heap = self._heap
        out = []
        pop = heapq.heappop
        while heap and heap[0][0] <= now:
            entry = pop(heap)
            item = entry[2]
            if item.pq_entry is entry:
                item.pq_entry = None
                out.append(item)
        self._live -= len(out)
        return out

    def items(self) -> list[Any]:
        """Live items in no particular order."""
        return [e[2] for e in self._heap if e[2].pq_entry is e]

    def clear(self) -> list[Any]:
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
