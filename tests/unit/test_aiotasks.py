"""cancel_and_wait ends a loop whose first cancel asyncio.wait_for swallowed (CPython #86296).

The race is made deterministic: the inner future of the loop's wait_for completes in the same
loop iteration as the cancel, which on Python 3.11 makes wait_for return its result.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from nsqpy.internal.aiotasks import cancel_and_wait

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]


class WaitForLoop:
    """A keepalive-like loop: wait_for on a future, then go round again."""

    def __init__(self) -> None:
        self.inner: asyncio.Future[int] | None = None
        self.rounds = 0
        self.waiting = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.inner = loop.create_future()
            self.waiting.set()
            await asyncio.wait_for(self.inner, timeout=10)
            self.rounds += 1
            self.waiting.clear()


async def _swallowing_cancel(w: WaitForLoop) -> asyncio.Task[None]:
    task = asyncio.create_task(w.run())
    await w.waiting.wait()
    assert w.inner is not None
    w.inner.set_result(1)  # completes in the same iteration as ...
    task.cancel()  # ... the cancel
    return task


async def test_a_swallowed_cancel_is_real_on_this_python() -> None:
    """Shows the hazard that cancel_and_wait exists for (only where wait_for has it)."""
    if sys.version_info >= (3, 12):
        pytest.skip("Python 3.12's wait_for no longer swallows a cancel (CPython #86296)")
    w = WaitForLoop()
    task = await _swallowing_cancel(w)
    await asyncio.wait_for(w.waiting.wait(), 5)  # the loop went round again: cancel lost
    assert w.rounds == 1 and not task.done()
    task.cancel()  # a second cancel lands at the next wait
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_and_wait_ends_the_loop() -> None:
    w = WaitForLoop()
    task = await _swallowing_cancel(w)
    await cancel_and_wait([task, None], retry_s=0.05)
    assert task.cancelled()


async def test_cancel_and_wait_logs_a_failed_task(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        raise ValueError("boom")

    async def forever() -> None:
        await asyncio.Event().wait()

    failed = asyncio.create_task(fail())
    running = asyncio.create_task(forever())
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="nsqpy"):
        await cancel_and_wait([failed, running])
    assert running.cancelled() and isinstance(failed.exception(), ValueError)
    assert "boom" in caplog.text
