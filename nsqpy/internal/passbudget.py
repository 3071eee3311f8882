"""The time of one event-loop pass, shared by the HTTP connections that read in it.

Why: each HTTP connection already stops after its own slice of a pass (its events and time)
and goes on at the loop's next turn. But a pass runs every connection that has input, so twenty
hostile HTTP connections whose requests cost 5-13 ms each (a megabyte request target, a megabyte
header value, 40,000 header lines) held the loop 80-250 ms in one pass (timed per pass with
asyncio's own loop under ``python -m bench bombs --mixed``), and a polite client whose PUB came
meanwhile waited for all of them. In Go each connection is a goroutine the scheduler preempts.

Strategy: the readers of one pass share PASS_S seconds. A reader asks ``until(own_s)`` for its
deadline: its own slice, cut to what is left of the pass's time, and never less than FLOOR_S
after now. The time starts with the first slice asked for in a pass and starts again at the
loop's next turn (a call_soon made by that first ask). A reader that finds the time spent does
nothing and is put off (``put_off``); the readers put off are resumed by the restart of the
pass's time at the loop's next turn, in the order they were put off, while the new pass's time
lasts (the first always runs); the rest wait for the turn after, so none is starved. Nothing is
ever refused: the budget only cuts the work into more, shorter passes. The HTTP server's
connections read through it; the V2 clients do not: their reads are bounded by commands and
bytes, and no hostile V2 input measured held a pass long enough to need more.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

#: Seconds of reading that all connections of one pass share.
PASS_S = 0.004
#: Seconds a reader gets after ``until`` whatever is left of PASS_S.
FLOOR_S = 0.0005


class PassBudget:
    """The shared time of the module docstring.

    ``until(own_s)``: a ``time.perf_counter()`` deadline for a slice starting now,
    ``min(now + own_s, end of the pass's time)`` but at least ``now + floor_s``.
    ``spent()``: whether the pass's time has run out. ``put_off(resume)``: call ``resume()`` at
    the loop's next turn, when the time restarts, in the order put off, while the new pass's
    time lasts (at least the first), else at a later turn. Without a running loop
    every ``until`` starts a pass of its own (nothing would restart it)."""

    __slots__ = ("pass_s", "floor_s", "_end", "_loop", "_waiting")

    def __init__(self, pass_s: float = PASS_S, floor_s: float = FLOOR_S) -> None:
        self.pass_s = pass_s
        self.floor_s = floor_s
        self._end = 0.0  # perf_counter() when this pass's time runs out; 0.0: not started
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that restarts it
        self._waiting: deque[Callable[[], None]] = deque()  # put off, in order

    def _pass_end(self, now: float) -> float:
        """The end of the current pass's time, starting a pass if none runs on this loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return now + self.pass_s  # no loop: this slice is a pass of its own
        if self._end == 0.0 or loop is not self._loop:
            if loop is not self._loop:  # a pass left by a loop now gone, and its waiters
                self._waiting.clear()
            self._end = now + self.pass_s
            self._loop = loop
            loop.call_soon(self._restart)
        return self._end

    def until(self, own_s: float) -> float:
        now = time.perf_counter()
        left = self._pass_end(now) - now
        if left < self.floor_s:
            left = self.floor_s
        return now + (own_s if own_s < left else left)

    def spent(self) -> bool:
        now = time.perf_counter()
        return now >= self._pass_end(now)

    def put_off(self, resume: Callable[[], None]) -> None:
        self._waiting.append(resume)
        self._pass_end(time.perf_counter())  # a pass runs, so its restart is scheduled

    def _restart(self) -> None:
        self._end = 0.0
        waiting = self._waiting
        while waiting and (self._end == 0.0 or time.perf_counter() < self._end):
            resume = waiting.popleft()
            try:
                resume()
            except Exception as e:  # one connection's failure: the others still resume
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "error resuming a reader put off", "exception": e}
                )


#: The budget of the process's event loop (each nsqpy daemon runs one).
SHARED = PassBudget()
