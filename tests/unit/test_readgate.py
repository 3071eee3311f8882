"""nsqpy.internal.readgate: reason bits over a transport's reading."""

from __future__ import annotations

from nsqpy.internal.readgate import BACKPRESSURE, BUDGET, SUSPENDED, ReadGate


class FakeTransport:
    """Records pause/resume calls, as an asyncio transport would receive them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return self.closing


def test_first_reason_pauses_last_reason_resumes() -> None:
    t = FakeTransport()
    g = ReadGate(t)
    assert g.pause(BUDGET) == BUDGET
    assert g.pause(BACKPRESSURE) == BUDGET | BACKPRESSURE
    assert t.calls == ["pause"]
    assert g.resume(BUDGET) == BACKPRESSURE  # still held by backpressure
    assert t.calls == ["pause"]
    assert g.resume(BACKPRESSURE) == 0
    assert t.calls == ["pause", "resume"]
    assert g.resume(SUSPENDED) == 0 and t.calls == ["pause", "resume"]  # not set: no call


def test_no_transport_keeps_bits_and_attach_pauses() -> None:
    g = ReadGate()
    g.pause(SUSPENDED)
    assert g.holds(SUSPENDED) and not g.holds(BUDGET)
    t = FakeTransport()
    g.attach(t)
    assert t.calls == ["pause"]
    t.closing = True
    assert g.resume(SUSPENDED) == 0
    assert t.calls == ["pause"]  # a closing transport is left alone
