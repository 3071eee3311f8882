"""The leader's sender to one follower, sans-IO: the link's state and its two decisions, what
to send next (:func:`next_step`) and what an answer means (:func:`apply_answer`).

Strategy: as protocol_v2.py is for a client, this module never sends, sleeps or awaits. A
:class:`Link` is a plain record of what the leader knows of one follower; the decisions read
it, the leader's :class:`Backlog` (its history and this epoch's entries) and the time (an
argument: monotonic seconds), update the link and say what the sender must do; the sender
(leader_stream.LeaderStream, one task per link) does the HTTP request, the sleeps and the calls
into the ISR policy (on_lagging, on_caught_up) around them.

A link's life (leader_stream.py, "Rejoining"): it starts with a probe (``prev=?``: the
follower answers the name of its last entry and whether its topic is dirty); a dirty follower
is reset (out of the ISR first, when it is in it); then each request carries what follows the
follower's last name, history first (:func:`batch_for`); a caught-up link waits for new
entries, and one out of the ISR counts again from then on (``readmit``). A failed request
forgets the probe (the follower may have restarted), reports the link lagging once it has had
entries pending for ``timeout`` seconds, and is retried after a backoff that doubles while the
follower is out of the ISR. Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Protocol

from .entries import (
    ENTRY,
    MAX_REQUEST_BYTES,
    RECORD_HEADER,
    Name,
    entry_name,
    name_text,
    parse_name,
)

#: Sender backoff after a failed request, seconds.
RETRY_DELAY = 0.05
#: Longest wait between failed requests to a follower out of the ISR (down, restarting).
MAX_BACKOFF = 0.5
#: The most entries one request can carry (each at least a header, a record header and a size).
_MOST_ENTRIES = MAX_REQUEST_BYTES // (ENTRY.size + RECORD_HEADER + 4) + 1
#: Append requests one link has out at once: the next goes before the earlier ones are
#: answered (pipelining, :func:`chained_step`); the follower takes them in order.
MAX_ROUNDS_IN_FLIGHT = 4


class Backlog(Protocol):
    """What a leader holds for its links (leader_stream.LeaderStream): ``topic``, ``epoch``;
    ``history`` (entries before this epoch, names increasing); ``entries`` (this epoch's
    still kept, ``entries[0]`` has seq ``base``); ``next_seq`` (the seq the next append gets)."""

    @property
    def topic(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def base(self) -> int: ...

    @property
    def next_seq(self) -> int: ...

    @property
    def history(self) -> list[bytes]: ...

    @property
    def entries(self) -> list[bytes]: ...


class Link:
    """The leader's sender to one follower: ``node_id``, ``acked`` (the seq of this epoch it
    expects next: everything below is in its replica log; 0 while it is still given the history
    before this epoch), ``behind_since`` (monotonic seconds since when it has had entries
    pending without acknowledging, 0 when caught up), ``last`` (the name of the follower's
    last entry, as it last answered), ``probed`` (``last`` is known: a probe or an append
    answered since the link started or last failed), ``reset`` (it answered its topic dirty:
    its next request empties its topic and log), ``in_isr`` (waited for by the commit point;
    False while catching up), ``refused`` (it answered E_STALE_EPOCH: not kept for catch-up
    either), ``lag_reported`` (on_lagging was called for the current lag), ``backoff``
    (seconds before the next retry); ``floor`` (None, or for a node new to the placement the
    seq of this epoch it starts from when it has nothing of this epoch: the first entry the
    leader still kept when it linked it; what came before is on the nodes placed then);
    ``wake`` and ``task`` belong to the sender."""

    __slots__ = (
        "acked",
        "backoff",
        "behind_since",
        "floor",
        "in_isr",
        "lag_reported",
        "last",
        "node_id",
        "probed",
        "refused",
        "reset",
        "task",
        "wake",
    )

    def __init__(self, node_id: str, acked: int, floor: int | None = None) -> None:
        self.node_id = node_id
        self.floor = floor
        self.in_isr = True
        self.refused = False
        self.acked = acked
        self.behind_since = 0.0
        self.last: Name | None = None
        self.probed = False
        self.reset = False
        self.lag_reported = False
        self.backoff = RETRY_DELAY
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


# ------------------------------------------------------------ what to send next

#: Step kinds (next_step).
SEND = 0  # POST /replica/append with ``params`` and ``batch``
EVICT = 1  # a dirty follower still in the ISR: out of it first (``report``), wait RETRY_DELAY
IDLE = 2  # caught up: wait for new entries (``readmit``: it counts in the ISR again)
GIVE_UP = 3  # what it needs is no longer kept: stop the link, out of the ISR


class Step:
    """What the sender does next: ``kind`` (SEND, EVICT, IDLE, GIVE_UP); for SEND the
    request's query ``params`` and its entries ``batch``; ``report``: call on_lagging first
    (EVICT); ``readmit``: call on_caught_up first (IDLE)."""

    __slots__ = ("batch", "kind", "params", "readmit", "report")

    def __init__(
        self,
        kind: int,
        params: dict[str, str] | None = None,
        batch: list[bytes] | None = None,
        report: bool = False,
        readmit: bool = False,
    ) -> None:
        self.kind = kind
        self.params = params if params is not None else {}
        self.batch = batch if batch is not None else []
        self.report = report
        self.readmit = readmit


def next_step(link: Link, backlog: Backlog, now: float, catch_up: bool) -> Step:
    """What ``link`` does next (updating it: the reset forgets the follower's last name, a
    caught-up link stops lagging, a link with entries pending is behind from ``now``).
    ``catch_up``: out-of-ISR followers are readmitted once caught up."""
    if link.reset and link.in_isr:
        # a dirty follower still in the ISR: out of it first (so it is never elected while
        # its log is being replaced), then reset
        report = not link.lag_reported
        link.lag_reported = True
        return Step(EVICT, report=report)
    params = {"topic": backlog.topic, "epoch": str(backlog.epoch), "first": "0"}
    if not link.probed:
        params["prev"] = "?"
        return Step(SEND, params)
    if link.reset:
        link.last = None
        params["reset"] = "1"
    batch = batch_for(link.last, backlog, link.floor)
    if batch is None:
        return Step(GIVE_UP)
    if not batch and not link.reset:
        link.behind_since = 0.0
        link.lag_reported = False
        readmit = not link.in_isr and catch_up
        if readmit:
            link.in_isr = True  # waited for from now on, before etcd says so
        return Step(IDLE, readmit=readmit)
    params["prev"] = "-" if link.reset else name_text(link.last)
    params["first"] = str(link.acked)
    if not link.behind_since:
        link.behind_since = now
    return Step(SEND, params, batch)


def chained_step(link: Link, backlog: Backlog, sent: Step, now: float) -> Step | None:
    """The append that follows ``sent`` (a SEND step not answered yet) without waiting for
    its answer: this epoch's entries after the last one ``sent`` carries (at most
    MAX_REQUEST_BYTES), chained on it (``prev``: its name, so the follower refuses it with a
    gap unless ``sent`` was written first); None when nothing follows it yet, or ``sent`` is
    not such a step (a probe, a reset, entries of the history). The link is behind from
    ``now`` when it was not."""
    if not sent.batch or "reset" in sent.params or not link.probed:
        return None
    epoch, seq = entry_name(sent.batch[-1])
    start = seq + 1
    if epoch != backlog.epoch or start >= backlog.next_seq or start < backlog.base:
        return None
    params = {
        "topic": backlog.topic,
        "epoch": str(epoch),
        "first": str(start),
        "prev": name_text((epoch, seq)),
    }
    if not link.behind_since:
        link.behind_since = now
    return Step(SEND, params, take(backlog.entries, start - backlog.base))


def _resume_at(last: Name | None, backlog: Backlog, floor: int | None) -> tuple[int | None, int]:
    """Where a follower whose log ends at ``last`` goes on: ``(i, 0)`` when it needs the
    history from index ``i``, else ``(None, start)`` with ``start`` the seq of this epoch it
    needs next (``floor`` when it has nothing of this epoch: Link.floor)."""
    epoch = backlog.epoch
    if last is not None and last[0] >= epoch:
        next_seq = backlog.next_seq
        return None, (min(last[1] + 1, next_seq) if last[0] == epoch else next_seq)
    hist = backlog.history
    i = 0 if last is None else bisect_right(hist, last, key=entry_name)
    if i < len(hist):
        return i, 0
    return None, floor or 0


def batch_for(last: Name | None, backlog: Backlog, floor: int | None = None) -> list[bytes] | None:
    """What a follower whose log ends at ``last`` needs next (at most MAX_REQUEST_BYTES): the
    history entries after it, else this epoch's entries after it (from ``floor`` on, when
    given and it has nothing of this epoch: Link.floor); [] when it has everything, None when
    what it needs is no longer kept."""
    i, start = _resume_at(last, backlog, floor)
    if i is not None:
        return take(backlog.history, i)
    if start < backlog.base:
        return None
    return take(backlog.entries, start - backlog.base)


def has_more(last: Name | None, backlog: Backlog, floor: int | None = None) -> bool:
    """Whether :func:`batch_for` would give a follower whose log ends at ``last`` anything
    (or None), without making the batch."""
    i, start = _resume_at(last, backlog, floor)
    return i is not None or start < backlog.base or start < backlog.next_seq


def acked_of(last: Name | None, backlog: Backlog, floor: int | None = None) -> int:
    """The seq of this epoch a follower whose log ends at ``last`` expects next (``floor``
    when it has nothing of this epoch and starts there: Link.floor)."""
    epoch = backlog.epoch
    if last is None or last[0] < epoch:
        return floor or 0
    return min(last[1] + 1, backlog.next_seq) if last[0] == epoch else backlog.next_seq


def take(entries: list[bytes], start: int) -> list[bytes]:
    """Entries from ``start`` on, at most MAX_REQUEST_BYTES of them (one at least)."""
    rest = entries[start : start + _MOST_ENTRIES]
    if sum(map(len, rest)) + 4 * len(rest) <= MAX_REQUEST_BYTES:
        return rest  # all of them (sizes summed in C)
    batch: list[bytes] = []
    size = 0
    for j in range(start, len(entries)):
        e = entries[j]
        if batch and size + len(e) > MAX_REQUEST_BYTES:
            break
        batch.append(e)
        size += len(e) + 4
    return batch


# ------------------------------------------------------------ what an answer means

#: Outcome kinds (apply_answer).
AGAIN = 0  # go on at once (``advance``: recompute the commit point first)
REFUSED = 1  # E_STALE_EPOCH: the follower has a newer epoch; stop, out of the ISR
RETRY = 2  # the request failed: wait ``link.backoff``, then after_retry (``report``: lagging)


@dataclass(slots=True)
class Outcome:
    """What an answer means for the sender: ``kind`` (AGAIN, REFUSED, RETRY); ``advance``:
    the follower acknowledged (AGAIN); ``resetting``: a probe found its topic dirty (AGAIN);
    ``report``: call on_lagging (RETRY); ``message``: the error's text."""

    kind: int
    advance: bool = False
    resetting: bool = False
    report: bool = False
    message: str = ""


def apply_answer(
    link: Link,
    backlog: Backlog,
    step: Step,
    status: int,
    answer: dict[str, Any],
    now: float,
    timeout: float,
) -> Outcome:
    """Take the follower's answer to ``step`` (``status``: the HTTP status, -1 when the
    request failed; ``answer``: the JSON object, ``{"message": ...}`` for an error) into
    ``link``. ``timeout``: seconds with entries pending before an in-ISR link is reported
    lagging. ValueError when a 200 answer names no valid entry."""
    message = str(answer.get("message", ""))
    if status == 200:
        link.backoff = RETRY_DELAY
        link.last = parse_name(str(answer.get("last", "-")))
        resetting = False
        if not link.probed:
            link.probed = True
            link.reset = resetting = bool(answer.get("dirty"))
        elif "reset" in step.params:
            link.reset = False
        link.acked = acked_of(link.last, backlog, link.floor)
        if link.acked >= backlog.next_seq and not has_more(link.last, backlog, link.floor):
            link.behind_since = 0.0
        elif step.batch:
            link.behind_since = now
        return Outcome(AGAIN, advance=True, resetting=resetting)
    if status == 409 and message == "E_STALE_EPOCH":
        link.refused = True
        return Outcome(REFUSED, message=message)
    if status == 409 and message.startswith("E_GAP "):
        link.last = parse_name(message[6:])  # where the follower really is
        link.acked = acked_of(link.last, backlog, link.floor)
        return Outcome(AGAIN)
    link.probed = False  # it may have restarted: ask again where it is
    report = (
        link.in_isr
        and not link.lag_reported
        and bool(link.behind_since)
        and now - link.behind_since >= timeout
    )
    if report:
        link.lag_reported = True
    return Outcome(RETRY, report=report, message=message)


def after_retry(link: Link) -> None:
    """After a RETRY's wait: the backoff doubles (up to MAX_BACKOFF) while the follower is
    out of the ISR (down or restarting: no need to ask it often)."""
    if not link.in_isr:
        link.backoff = min(link.backoff * 2, MAX_BACKOFF)
