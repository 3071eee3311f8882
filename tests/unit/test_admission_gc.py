"""admission.Admission (new connections' first reads, a few per event-loop pass) and
internal.gcpacer.GcPacer (survivors of young collections frozen; rare full collections)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from nsqpy.admission import Admission
from nsqpy.internal import gcpacer


def test_admission_runs_a_few_first_reads_per_pass_in_arrival_order():
    async def main() -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()
        adm = Admission(loop, per_pass=2)
        seen: list[tuple[int, str]] = []
        pass_no = [0]

        def count_passes() -> None:  # one callback per pass, scheduled before the admissions
            pass_no[0] += 1
            if pass_no[0] < 8:
                loop.call_soon(count_passes)

        loop.call_soon(count_passes)
        await asyncio.sleep(0)  # pass 1 starts counting
        for i in range(5):
            if adm.admit(lambda i=i: seen.append((pass_no[0], f"late{i}"))):
                seen.append((pass_no[0], f"now{i}"))
        for _ in range(6):
            await asyncio.sleep(0)
        return seen

    seen = asyncio.run(main())
    names = [n for _, n in seen]
    assert names == ["now0", "now1", "late2", "late3", "late4"]
    passes = [p for p, _ in seen]
    # two in the first pass, then two the next, then the last one: never more than two a pass
    assert passes[0] == passes[1] and passes[2] == passes[3] == passes[0] + 1
    assert passes[4] == passes[0] + 2


def test_admission_lets_a_newcomer_in_at_once_only_when_nobody_waits():
    async def main() -> list[str]:
        adm = Admission(asyncio.get_running_loop(), per_pass=1)
        seen: list[str] = []
        assert adm.admit(lambda: seen.append("a"))
        assert not adm.admit(lambda: seen.append("b"))
        assert not adm.admit(lambda: seen.append("c"))
        await asyncio.sleep(0)  # the next pass admitted "b" only (before this task went on)
        assert seen == ["b"]
        assert not adm.admit(lambda: seen.append("d"))  # "c" still waits: behind it
        for _ in range(4):
            await asyncio.sleep(0)
        assert adm.admit(lambda: seen.append("e"))  # nobody waits and the pass has room
        return seen

    assert asyncio.run(main()) == ["b", "c", "d"]


@pytest.fixture
def gc_restored():
    threshold = gc.get_threshold()
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_gc_pacer_freezes_what_lives_through_a_young_collection(gc_restored):
    async def main() -> tuple[int, int, int]:
        pacer = gcpacer.GcPacer(asyncio.get_running_loop())
        pacer.start()
        try:
            frozen0 = gc.get_freeze_count()
            keep = [[i] for i in range(gcpacer.GEN0 * 2)]  # enough to run a young collection
            frozen1 = gc.get_freeze_count()
            old = gc.get_count()[1] + gc.get_count()[2]
            del keep
            return frozen0, frozen1, old
        finally:
            pacer.stop()

    frozen0, frozen1, older = asyncio.run(main())
    assert frozen1 > frozen0 + gcpacer.GEN0  # the survivors went to the frozen set
    assert older == 0  # and nothing waits in the older generations for a long walk


def test_gc_pacer_full_collection_finds_frozen_cycles(gc_restored):
    async def main() -> int:
        pacer = gcpacer.GcPacer(asyncio.get_running_loop())
        pacer.start()
        try:
            cycles = [_Cycle() for _ in range(100)]
            gc.collect(0)  # they live through it: frozen
            assert gc.get_count()[1] == 0
            del cycles  # garbage now, but frozen: only the full collection sees them
            return pacer.full_collection()
        finally:
            pacer.stop()

    assert asyncio.run(main()) >= 100


def test_gc_pauses_timed_as_nsqd_reports_them() -> None:
    """Each collection's pause lands in the ring /stats reads gc_pause_usec_100/99/95 from."""
    installed = gcpacer._time_pause in gc.callbacks
    gcpacer.time_pauses()
    gcpacer.time_pauses()  # once only
    try:
        assert gc.callbacks.count(gcpacer._time_pause) == 1
        keep = [[i] for i in range(50_000)]
        for _ in range(5):
            gc.collect()
        p100, p99, p95 = gcpacer.pause_percentiles()
        assert p100 >= p99 >= p95 > 0
        assert len(gcpacer._pauses) <= gcpacer.PAUSES_KEPT
        del keep
    finally:
        if not installed:
            gc.callbacks.remove(gcpacer._time_pause)
