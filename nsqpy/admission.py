"""Admission of new connections: a bounded number of first reads per event-loop pass.

Why: a connection's first read is its most expensive one (the magic, IDENTIFY's JSON both ways,
SUB creating a topic and a channel, the log lines), about 0.3-0.5 ms of the loop each. When
hundreds of clients connect at once (a consumer fleet restarting, ``python -m bench.connections``
opens them 200 at a time), a pass that runs all their first reads held the loop 20-50 ms of CPU
while every connected client waited. In Go each connection is its own goroutine and the
scheduler interleaves them with everyone else's.

Strategy: each pass admits at most PER_PASS new connections, in the order their first bytes
came; a connection that finds the pass's admissions spent stops reading (the read gate's BUDGET
bit) and waits in a FIFO, and the next passes admit the waiting ones first. Once admitted a
connection is never gated here again, so connected clients are never slowed by newcomers: a
pass runs at most PER_PASS first reads beside the ordinary traffic. The count restarts with each
pass (one call_soon at a pass's first admission: it runs at the next pass).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

#: New connections whose first read one event-loop pass may run.
PER_PASS = 8


class Admission:
    """The per-pass admission of the module docstring on ``loop``.

    ``admit(resume)`` is called once by a new connection with input to run: True when it may run
    now, False when it must wait; ``resume()`` is then called at a later pass, when its turn
    comes (the connection re-checks that it is still open)."""

    __slots__ = ("loop", "per_pass", "left", "waiting", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop, per_pass: int = PER_PASS) -> None:
        self.loop = loop
        self.per_pass = per_pass
        #: Admissions left in this pass.
        self.left = per_pass
        #: Connections waiting for a later pass, first come first.
        self.waiting: deque[Callable[[], None]] = deque()
        self._scheduled = False

    def admit(self, resume: Callable[[], None]) -> bool:
        if self.left > 0 and not self.waiting:
            self.left -= 1
            self._schedule()
            return True
        self.waiting.append(resume)
        self._schedule()
        return False

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._next_pass)

    def _next_pass(self) -> None:
        """A new pass: the count restarts, and the waiting connections go first."""
        self._scheduled = False
        self.left = self.per_pass
        waiting = self.waiting
        while waiting and self.left > 0:
            self.left -= 1
            waiting.popleft()()
        if waiting or self.left < self.per_pass:
            self._schedule()
