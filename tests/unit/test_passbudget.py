"""nsqpy.internal.passbudget: one event-loop pass's reading time, shared by its connections."""

from __future__ import annotations

import asyncio
import time

from nsqpy.internal.passbudget import PassBudget


def test_a_slice_is_its_own_time_while_the_pass_has_more() -> None:
    async def main() -> None:
        b = PassBudget(pass_s=3600.0, floor_s=0.0005)
        t0 = time.perf_counter()
        until = b.until(0.002)
        assert t0 + 0.002 <= until <= time.perf_counter() + 0.002
        assert not b.spent()

    asyncio.run(main())


def test_a_spent_pass_leaves_the_floor_only() -> None:
    async def main() -> None:
        b = PassBudget(pass_s=0.0, floor_s=0.0005)
        t0 = time.perf_counter()
        until = b.until(0.002)
        assert b.spent()
        assert t0 + 0.0005 <= until <= time.perf_counter() + 0.0005

    asyncio.run(main())


def test_the_time_starts_again_at_the_loops_next_turn() -> None:
    async def main() -> None:
        b = PassBudget(pass_s=0.0)
        assert b.spent()
        b.pass_s = 3600.0
        assert b.spent()  # the same pass
        await asyncio.sleep(0)  # the loop's next turn
        assert not b.spent()

    asyncio.run(main())


def test_a_pass_left_by_another_loop_does_not_hold() -> None:
    b = PassBudget(pass_s=0.0)

    async def spend() -> bool:
        return b.spent()

    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(spend())
    loop.close()  # its restart never runs
    b.pass_s = 3600.0
    assert not asyncio.run(spend())


def test_without_a_loop_every_slice_is_a_pass_of_its_own() -> None:
    b = PassBudget(pass_s=3600.0)
    assert not b.spent()
    assert b.until(0.002) <= time.perf_counter() + 0.002


def test_put_off_readers_resume_in_order_at_the_next_turn_while_time_lasts() -> None:
    async def main() -> list[str]:
        b = PassBudget(pass_s=0.0)
        ran: list[str] = []

        def reader(name: str) -> None:
            ran.append(name)
            b.until(0.002)  # a reader asks for its slice: the new pass's time starts

        assert b.spent()
        for name in ("a", "b", "c"):
            b.put_off(lambda name=name: reader(name))
        assert ran == []
        await asyncio.sleep(0)  # next turn: the first runs, then the time (0 s) is spent
        assert ran == ["a"]
        await asyncio.sleep(0)
        assert ran == ["a", "b"]
        b.pass_s = 3600.0
        await asyncio.sleep(0)
        return ran

    assert asyncio.run(main()) == ["a", "b", "c"]
