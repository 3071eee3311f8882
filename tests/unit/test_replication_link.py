"""A leader's link to one follower, sans-IO (replication/link.py): what it sends next and what
each answer does to it, driven with a plain backlog of entries and the time as a number.

No sockets, no event loop, no sleeps: a step is what the sender would do, an answer is the
status and JSON object a follower would give."""

from __future__ import annotations

from dataclasses import dataclass, field

from nsqpy.replication.entries import ENTRY, MAX_REQUEST_BYTES, RECORD_HEADER, entry_name
from nsqpy.replication.link import (
    AGAIN,
    EVICT,
    GIVE_UP,
    IDLE,
    MAX_BACKOFF,
    REFUSED,
    RETRY,
    RETRY_DELAY,
    SEND,
    Link,
    Step,
    after_retry,
    apply_answer,
    batch_for,
    chained_step,
    has_more,
    next_step,
    take,
)

TIMEOUT = 10.0


def entry(epoch: int, seq: int, body: bytes = b"") -> bytes:
    return ENTRY.pack(epoch, seq, 0) + bytes(RECORD_HEADER) + (body or b"e%d-%d" % (epoch, seq))


@dataclass
class Backlog:
    """link.Backlog as plain data: epoch 5 with three entries and a history of epochs 2 and 4."""

    topic: str = "t"
    epoch: int = 5
    base: int = 0
    next_seq: int = 3
    history: list[bytes] = field(default_factory=lambda: [entry(2, 7), entry(2, 8), entry(4, 0)])
    entries: list[bytes] = field(default_factory=lambda: [entry(5, i) for i in range(3)])


def names(batch: list[bytes]) -> list[tuple[int, int]]:
    return [entry_name(e) for e in batch]


def probed(last: tuple[int, int] | None, in_isr: bool = True) -> Link:
    link = Link("f", 0)
    link.probed, link.last, link.in_isr = True, last, in_isr
    return link


def test_a_new_link_probes_first() -> None:
    step = next_step(Link("f", 0), Backlog(), 100.0, catch_up=True)
    assert step.kind == SEND and step.batch == []
    assert step.params == {"topic": "t", "epoch": "5", "first": "0", "prev": "?"}


def test_the_probe_answer_says_where_the_follower_is_and_whether_it_is_dirty() -> None:
    b = Backlog()
    link = Link("f", 0)
    step = next_step(link, b, 100.0, True)
    out = apply_answer(link, b, step, 200, {"next": 0, "last": "4:0", "dirty": False}, 101, 10)
    assert out.kind == AGAIN and out.advance and not out.resetting
    assert link.probed and link.last == (4, 0) and link.acked == 0 and not link.reset
    # what follows its last entry: this epoch's three, behind from now on
    step = next_step(link, b, 102.0, True)
    assert step.kind == SEND and names(step.batch) == [(5, 0), (5, 1), (5, 2)]
    assert step.params == {"topic": "t", "epoch": "5", "first": "0", "prev": "4:0"}
    assert link.behind_since == 102.0
    out = apply_answer(link, b, step, 200, {"next": 3, "last": "5:2"}, 103.0, TIMEOUT)
    assert out.kind == AGAIN and link.acked == 3 and link.behind_since == 0.0


def test_a_follower_is_sent_what_follows_its_last_name_history_first() -> None:
    b = Backlog()
    for last, want in [
        (None, [(2, 7), (2, 8), (4, 0)]),  # empty log: the whole history
        ((1, 50), [(2, 7), (2, 8), (4, 0)]),  # older than the history
        ((2, 7), [(2, 8), (4, 0)]),
        ((2, 99), [(4, 0)]),  # an unacknowledged tail of epoch 2: kept, what follows sent
        ((5, 1), [(5, 2)]),
    ]:
        step = next_step(probed(last), b, 0.0, True)
        assert step.kind == SEND and names(step.batch) == want, last


def test_a_caught_up_link_idles_and_an_out_of_isr_one_is_readmitted() -> None:
    b = Backlog()
    link = probed((5, 2))
    link.behind_since, link.lag_reported = 50.0, True
    step = next_step(link, b, 100.0, True)
    assert step.kind == IDLE and not step.readmit
    assert link.behind_since == 0.0 and not link.lag_reported
    out_of_isr = probed((5, 2), in_isr=False)
    step = next_step(out_of_isr, b, 100.0, True)
    assert step.kind == IDLE and step.readmit and out_of_isr.in_isr
    # catch-up off: never readmitted by the link
    off = probed((5, 2), in_isr=False)
    assert not next_step(off, b, 100.0, False).readmit and not off.in_isr


def test_a_follower_behind_what_is_kept_is_given_up() -> None:
    b = Backlog(base=1, entries=[entry(5, 1), entry(5, 2)])
    assert next_step(probed((4, 0)), b, 0.0, True).kind == GIVE_UP
    assert names(next_step(probed((5, 0)), b, 0.0, True).batch) == [(5, 1), (5, 2)]


def test_a_node_new_to_the_placement_starts_from_what_is_kept() -> None:
    b = Backlog(base=1, entries=[entry(5, 1), entry(5, 2)], history=[])
    link = Link("f", 1, floor=1)
    link.probed, link.in_isr = True, False
    step = next_step(link, b, 0.0, True)
    assert step.kind == SEND and names(step.batch) == [(5, 1), (5, 2)]
    assert step.params["prev"] == "-"
    # its probe answered an empty log: it expects the floor, not seq 0
    fresh = Link("f", 1, floor=1)
    fresh.in_isr = False
    probe = next_step(fresh, b, 0.0, True)
    apply_answer(fresh, b, probe, 200, {"next": 0, "last": "-", "dirty": False}, 0.0, TIMEOUT)
    assert fresh.acked == 1
    # with a history it gets that first
    h = Backlog(base=1, entries=[entry(5, 1), entry(5, 2)])
    link = Link("f", 1, floor=1)
    link.probed, link.in_isr = True, False
    assert names(next_step(link, h, 0.0, True).batch)[0] == (2, 7)


def test_a_dirty_follower_leaves_the_isr_then_is_reset_with_the_whole_history() -> None:
    b = Backlog()
    link = Link("f", 0)
    step = next_step(link, b, 0.0, True)
    out = apply_answer(link, b, step, 200, {"last": "3:9", "dirty": True}, 1.0, TIMEOUT)
    assert out.resetting and link.reset
    step = next_step(link, b, 2.0, True)
    assert step.kind == EVICT and step.report  # asked out of the ISR once
    assert next_step(link, b, 3.0, True).report is False
    link.in_isr = False  # etcd said so
    step = next_step(link, b, 4.0, True)
    assert step.kind == SEND and step.params["reset"] == "1" and step.params["prev"] == "-"
    assert names(step.batch) == [(2, 7), (2, 8), (4, 0)] and link.last is None
    out = apply_answer(link, b, step, 200, {"last": "4:0"}, 5.0, TIMEOUT)
    assert out.kind == AGAIN and not link.reset and link.last == (4, 0)


def test_a_stale_epoch_answer_refuses_the_link() -> None:
    b = Backlog()
    link = probed((5, 0))
    step = next_step(link, b, 0.0, True)
    out = apply_answer(link, b, step, 409, {"message": "E_STALE_EPOCH"}, 1.0, TIMEOUT)
    assert out.kind == REFUSED and link.refused


def test_a_gap_answer_moves_the_link_to_where_the_follower_is() -> None:
    b = Backlog()
    link = probed((5, 2))
    link.acked = 3
    step = next_step(link, b, 0.0, True)
    out = apply_answer(link, b, step, 409, {"message": "E_GAP 5:0"}, 1.0, TIMEOUT)
    assert out.kind == AGAIN and not out.advance
    assert link.last == (5, 0) and link.acked == 1
    assert names(next_step(link, b, 2.0, True).batch) == [(5, 1), (5, 2)]


def test_failures_are_retried_and_reported_lagging_once_after_the_timeout() -> None:
    b = Backlog()
    link = probed((5, 0))
    step = next_step(link, b, 100.0, True)
    assert link.behind_since == 100.0
    out = apply_answer(link, b, step, -1, {"message": "refused"}, 105.0, TIMEOUT)
    assert out.kind == RETRY and not out.report and not link.probed  # probed again next
    out = apply_answer(link, b, step, 500, {"message": "E_APPEND_FAILED"}, 110.0, TIMEOUT)
    assert out.kind == RETRY and out.report and out.message == "E_APPEND_FAILED"
    out = apply_answer(link, b, step, -1, {}, 120.0, TIMEOUT)
    assert not out.report  # once per lag


def test_the_backoff_doubles_only_out_of_the_isr() -> None:
    link = probed((5, 0))
    after_retry(link)
    assert link.backoff == RETRY_DELAY
    link.in_isr = False
    for _ in range(10):
        after_retry(link)
    assert link.backoff == MAX_BACKOFF
    apply_answer(link, Backlog(), next_step(link, Backlog(), 0, True), 200, {"last": "5:2"}, 0, 1)
    assert link.backoff == RETRY_DELAY


def test_a_request_carries_at_most_max_request_bytes_but_at_least_one_entry() -> None:
    big = [entry(1, i, b"x" * (MAX_REQUEST_BYTES // 3)) for i in range(4)]
    assert len(take(big, 0)) == 2
    huge = [entry(1, 0, b"x" * MAX_REQUEST_BYTES)]
    assert take(huge, 0) == huge
    assert take(big, 4) == []


def test_has_more_agrees_with_batch_for() -> None:
    b = Backlog()
    for last in [None, (1, 50), (2, 7), (2, 8), (2, 99), (4, 0), (5, 0), (5, 1), (5, 2), (6, 0)]:
        for floor in (None, 1, 3):
            batch = batch_for(last, b, floor)
            assert has_more(last, b, floor) == (batch is None or bool(batch)), (last, floor)
    behind = Backlog(base=2, entries=[entry(5, 2)])  # seqs 0 and 1 no longer kept
    assert batch_for((5, 0), behind) is None and has_more((5, 0), behind)


def test_a_chained_append_follows_the_one_out_without_its_answer() -> None:
    b = Backlog(next_seq=2, entries=[entry(5, 0), entry(5, 1)])
    link = probed((5, 0))
    first = next_step(link, b, 1.0, True)
    assert first.kind == SEND and names(first.batch) == [(5, 1)]
    assert chained_step(link, b, first, 2.0) is None  # nothing after it yet
    b.entries += [entry(5, 2), entry(5, 3)]
    b.next_seq = 4
    second = chained_step(link, b, first, 2.0)
    assert second is not None and names(second.batch) == [(5, 2), (5, 3)]
    assert second.params["prev"] == "5:1" and second.params["first"] == "2"
    assert link.behind_since == 1.0  # behind since the first was sent
    # its answers come in order: the first's moves the link, the second's too
    out = apply_answer(link, b, first, 200, {"last": "5:1"}, 3.0, TIMEOUT)
    assert out.kind == AGAIN and link.acked == 2 and link.behind_since == 3.0
    out = apply_answer(link, b, second, 200, {"last": "5:3"}, 4.0, TIMEOUT)
    assert out.kind == AGAIN and link.acked == 4 and link.behind_since == 0.0
    # nothing is chained on a probe, a reset or history entries
    probe = Step(SEND, {"prev": "?"})
    assert chained_step(link, b, probe, 5.0) is None
    reset = Step(SEND, {"prev": "-", "reset": "1"}, [entry(5, 0)])
    assert chained_step(link, b, reset, 5.0) is None
    history = Step(SEND, {"prev": "-"}, [entry(4, 0)])
    assert chained_step(link, b, history, 5.0) is None
