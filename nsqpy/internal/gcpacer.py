"""Keep the cyclic collector's pauses short when a daemon holds many long-lived objects.

Why: CPython 3.11's collector stops the world for each collection, for a time that grows with
the objects it walks (0.5-1 microsecond each on this project's machine). Its older generations
hold everything that lived through a young collection; with 10,000 client connections that is
over 100,000 objects, and the collections of the older generations while they connect held the
event loop 40-230 ms each (measured with a gc.callbacks timer in the daemon under
``python -m bench.connections``): every other client waited that long. Go's collector runs
beside the program and has no such pause.

Strategy (freeze the survivors): after every collection of the youngest generation (at most
GEN0 new objects: a few milliseconds), the objects that lived through it are frozen at once
(``gc.freeze``, a constant-time list splice: the collector never walks them again). They are
still freed by reference counting when released, which is how a closed connection's objects go
(the daemons break their cycles on close), so the older generations stay empty and no automatic
collection walks more than GEN0 objects. A cycle that becomes garbage after its objects were
frozen would stay, so a full collection of everything (unfreeze, collect, freeze) still runs:
at most every FULL_INTERVAL_S seconds and only when the frozen set has grown by FULL_GROWTH
since the last one (a steady daemon never pays for it; one with 10,000 connections pauses about
as long as a CPython full collection once). It logs what it found at debug level, so a leak of
cycles shows in the log.

Every collection's pause (young or full, automatic or not) is timed by the same callback and
kept in a ring of the last PAUSES_KEPT, as Go's runtime keeps MemStats.PauseNs: /stats reads
the largest and the 99th and 95th percentiles from it (pause_percentiles), as nsqd reports
gc_pause_usec_100/99/95.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("nsqpy")

#: Allocations (of objects the collector tracks) between young collections; the bound on what
#: one automatic collection walks.
GEN0 = 10_000
#: How often (seconds) the pacer checks whether a full collection is due.
CHECK_S = 10.0
#: A full collection of every object runs at most this often (seconds) ...
FULL_INTERVAL_S = 600.0
#: ... and only when the frozen set has grown by this fraction since the last one.
FULL_GROWTH = 0.25
#: How many of the latest collections' pauses are kept (Go's MemStats.PauseNs holds 256).
PAUSES_KEPT = 256

_pauses: deque[float] = deque(maxlen=PAUSES_KEPT)  # seconds, oldest first
_started = 0.0


def _time_pause(phase: str, info: dict[str, Any]) -> None:
    """gc.callbacks hook: the time from each collection's start to its stop."""
    global _started
    if phase == "start":
        _started = time.perf_counter()
    elif _started:
        _pauses.append(time.perf_counter() - _started)
        _started = 0.0


def time_pauses() -> None:
    """Start timing every collection (idempotent); GcPacer.start calls it."""
    if _time_pause not in gc.callbacks:
        gc.callbacks.insert(0, _time_pause)


def pause_percentiles() -> tuple[int, int, int]:
    """(largest, 99th, 95th percentile) of the kept pauses in microseconds, as nsqd's
    getMemStats computes gc_pause_usec_100/99/95 (nearest rank over the sorted pauses);
    zeros before any collection was timed."""
    if not _pauses:
        return 0, 0, 0
    us = sorted(int(p * 1e6) for p in _pauses)
    n = len(us)
    return us[-1], us[min(n - 1, int(n * 0.99))], us[min(n - 1, int(n * 0.95))]


class GcPacer:
    """The policy of the module docstring, on ``loop``. ``start()`` freezes what exists
    (start-up objects), installs the freezing callback, sets the young threshold and
    enables the collector; ``stop()`` removes the callback and the timer."""

    __slots__ = ("loop", "clock", "_handle", "_last_full", "_frozen_at_full", "fulls")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.loop = loop
        self.clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._last_full = 0.0
        self._frozen_at_full = 0
        #: How many full collections ran.
        self.fulls = 0

    def start(self) -> None:
        # no collection first: start-up leaves a few dozen unreachable objects, and walking the
        # start-up objects held the loop 40-200 ms just as the first clients came
        gc.freeze()
        self._last_full = self.clock()
        self._frozen_at_full = gc.get_freeze_count()
        gc.set_threshold(GEN0)
        time_pauses()
        gc.callbacks.append(self._after_collection)
        gc.enable()
        self._handle = self.loop.call_later(CHECK_S, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            gc.freeze()  # what lived through this collection: never walked again

    def _check(self) -> None:
        self._handle = self.loop.call_later(CHECK_S, self._check)
        frozen = gc.get_freeze_count()
        if self.clock() - self._last_full >= FULL_INTERVAL_S and frozen > self._frozen_at_full * (
            1 + FULL_GROWTH
        ):
            self.full_collection()

    def full_collection(self) -> int:
        """Collect every object, frozen ones included, then freeze the survivors again; the
        number of unreachable objects found (logged at debug level)."""
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self.fulls += 1
        self._last_full = self.clock()
        self._frozen_at_full = gc.get_freeze_count()
        log.debug("GC: full collection: %d unreachable, %d kept", found, self._frozen_at_full)
        return found
