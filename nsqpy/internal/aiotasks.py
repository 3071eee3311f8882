"""Stopping asyncio tasks so that a stop always ends.

On Python 3.10 and 3.11, ``asyncio.wait_for`` returns its inner result instead of raising
CancelledError when a cancel reaches it in the same loop iteration in which the inner awaitable
completes (CPython issue #86296; 3.12's rewrite of wait_for fixed it). A loop built on wait_for,
such as a lease keepalive, can therefore lose one ``task.cancel()`` and go on running, and a
plain ``task.cancel(); await task`` then waits forever. ``cancel_and_wait`` cancels again until
the task has ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("nsqpy")

RETRY_S = 0.5  # seconds between cancels of a task that is still running


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any] | None], *, retry_s: float = RETRY_S
) -> None:
    """Cancel every task of ``tasks`` (None entries are skipped) and return once all have
    ended, cancelling those still running again every ``retry_s`` seconds.

    A task's own CancelledError is absorbed; another exception it ended with is logged (at
    error, with its traceback) and not raised, so one failed loop does not stop the others
    from being stopped. A cancel of the caller itself still propagates (asyncio.wait never
    absorbs it).
    """
    todo = [t for t in tasks if t is not None]
    pending = {t for t in todo if not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=retry_s)
    for t in todo:
        if t.cancelled():
            continue
        exc = t.exception()
        if exc is not None:
            log.error("task %s ended with %r", t, exc, exc_info=exc)
