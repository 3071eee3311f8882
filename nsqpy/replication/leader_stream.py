"""One topic's stream as its leader in one epoch: the entries it appends, the links that send
them to the other placement nodes, the commit point and the high watermark.

The leader (:class:`LeaderStream`) keeps this epoch's entries while a link needs them, one
link per other placement node (its state and decisions in link.py, sans-IO; its task here does
the HTTP requests) sending whatever is pending in one request (through the follower's
courier.Courier, which puts the appends of every topic this node leads into one request),
and the waiters (one future per publish command, resolved in seq order when every in-sync
follower's acknowledged seq passes it).

Rejoining. A new leader keeps, as its *history*, every entry it drained from its
replica log at promotion (under their old names, at most MAX_RETAINED; plus what it led last
when it is elected again with no other leader between). Every other placement node gets a link
for the whole epoch, whether in the ISR or not; a node that is down or restarting is retried
with a backoff. A link starts with a probe: the follower answers the name of its last entry and
whether its own topic is *dirty* (holds messages while it does not lead: only an earlier
leadership of its own put them there; a follower's topic receives nothing until it is
promoted). Then:

1. a clean follower is sent what follows its last name: the history entries after it (all of
   them when its log is empty or older than the history), then this epoch's. An unacknowledged
   tail it holds beyond the leader's (the old leader sent it more than the new leader got) is
   left in place: it was published, never acknowledged, and a producer's retry would add the
   same; with names only growing, what follows is the leader's;
2. a dirty follower (a deposed leader: its topic holds its own epoch's data, the
   unacknowledged tail included) is *reset*: out of the ISR first if it is in it, then its
   node empties that topic and its channels (every acknowledged message of it is on this
   leader, which was in the ISR that acknowledged it) and its replica log, and it is sent the
   whole history and this epoch. The node accepts a reset only from the leader named by the
   record it holds for that very epoch, so a deposed leader that reaches it first cannot
   wipe it;
3. once it has everything appended so far, an out-of-ISR follower is waited for again and
   re-admitted to the ISR (``on_caught_up`` -> Coordinator.expand_isr).

Why a full resync for a dirty follower rather than Kafka's truncation to the divergence point:
what a deposed leader must drop is in its *topic* (it never wrote its own epoch to its replica
log), and an emptied topic loses the part of its log already promoted into it too, so the log
is rebuilt from the leader's history; it is bounded (MAX_RETAINED entries) and only a node
that led and still holds undelivered messages pays it. A clean follower, the common case
(a restarted or paused follower, a deposed leader whose consumers had finished everything),
only gets what follows its last entry. A node that is further behind than this epoch's
retained entries is given up for the epoch (logged) and stays out of the ISR.

High watermark (--replica-ack=all-isr). The leader does not put a publish into its topic when
it accepts it: the stream keeps the records of the entries not yet committed (one
``(first seq, end seq, records, delay)`` tuple per publish command, not per message), and each
time the commit point advances (:meth:`LeaderStream._advance`, once per acknowledgement round)
the records it passed go to ``on_commit(plain, deferred)`` in seq order: one put_many for the
plain ones, a put_deferred per DPUB, then one flush. So a channel never holds a message the ISR
does not have, and a failover cannot take back a delivered message. Records committed while
acknowledging is not allowed (lease uncertain, ISR below --min-isr: their publishers get
E_PUB_FAILED) are dropped, as are the uncommitted ones when the stream closes: a refused
publish is never delivered by this leader (a later leader may deliver it from its replica log,
as a producer's retry would). With --replica-ack=leader (no ``on_commit``) the watermark is the
local append: the caller puts the records into the topic at once.
Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from .entries import ENTRY, MAX_RETAINED, encode_entries
from .link import (
    EVICT,
    GIVE_UP,
    IDLE,
    MAX_ROUNDS_IN_FLIGHT,
    REFUSED,
    RETRY,
    RETRY_DELAY,
    Link,
    Step,
    after_retry,
    apply_answer,
    chained_step,
    next_step,
)

if TYPE_CHECKING:
    import aiohttp

    from .courier import Courier

log = logging.getLogger("nsqpy.replication")

#: A follower's answer to one append: the HTTP status (-1: the request failed) and the JSON.
Answer: TypeAlias = tuple[int, dict[str, Any]]
#: What a committed advance hands over: the plain records (seq order) and the DPUB ones with
#: their delay in ms; returns False when they could not be put (their publishers are refused).
OnCommit: TypeAlias = Callable[[list[bytes], list[tuple[bytes, int]]], bool]


@dataclass(eq=False, repr=False)
class LeaderStream:
    """One topic's stream as its leader in ``epoch``: ``append`` assigns seqs and keeps the
    entries until every link has them; ``commit_waiter`` gives a future answered True once
    every in-sync link acknowledged up to it and ``allowed()`` says acknowledging is safe (a
    ``may_acknowledge`` and min-ISR check), False otherwise. ``http`` is an aiohttp
    ClientSession; ``address_of(node_id)`` a follower's HTTP "host:port" ("" when unknown);
    ``on_lagging(node_id)`` is called (once per lag) for a link that acknowledged nothing for
    ``timeout`` seconds while entries were pending.

    Catch-up (see the module docstring, "Rejoining"): every other placement node gets a link
    for the whole epoch, waited for only while it is in the ISR. A link first probes the
    follower for the name of its last entry and whether its topic is dirty, then sends what
    follows that name in this leader's history: :attr:`history` (the entries it drained from
    its replica log at promotion, under their old names, at most ``MAX_RETAINED``), then this
    epoch's entries, which are kept for every out-of-ISR link (at most ``MAX_RETAINED``
    behind; past that it is given up for this epoch). Once an out-of-ISR follower has
    everything appended so far, the link counts again at once (so no publish is acknowledged
    without it from then on) and ``on_caught_up(node_id)`` is called, which re-admits it to
    the ISR in etcd (Coordinator.expand_isr).

    ``on_commit``: the high watermark (module docstring); None when the caller delivers at the
    local append. ``dropped`` counts the records it never handed over (refused, or uncommitted
    when the stream closed). ``clock``: monotonic seconds (how long a link has been behind).
    ``courier_of(node_id)``: the follower's courier.Courier, shared by every topic this node
    leads, so that one request carries every topic's pending entries (None, or no
    ``courier_of``: this stream sends its own requests through ``http``)."""

    topic: str
    epoch: int
    http: aiohttp.ClientSession | None
    address_of: Callable[[str], str]
    allowed: Callable[[], bool]
    on_lagging: Callable[[str], None]
    timeout: float
    on_caught_up: Callable[[str], None] | None = None
    on_commit: OnCommit | None = None
    clock: Callable[[], float] = time.monotonic
    courier_of: Callable[[str], Courier | None] | None = None
    base: int = field(default=0, init=False)  # seq of entries[0]
    entries: list[bytes] = field(default_factory=list, init=False)
    next_seq: int = field(default=0, init=False)
    links: dict[str, Link] = field(default_factory=dict, init=False)
    waiters: deque[tuple[int, asyncio.Future[bool]]] = field(default_factory=deque, init=False)
    committed: int = field(default=0, init=False)
    closed: bool = field(default=False, init=False)
    history: list[bytes] = field(default_factory=list, init=False)  # set_history
    #: Out-of-ISR nodes this epoch can no longer serve.
    given_up: set[str] = field(default_factory=set, init=False)
    #: Every node linked this epoch (None: none yet).
    placed: set[str] | None = field(default=None, init=False)
    #: Records not yet committed: (first seq, end seq, records, delay ms) per append.
    pending: deque[tuple[int, int, list[bytes], int]] = field(default_factory=deque, init=False)
    dropped: int = field(default=0, init=False)
    #: The last batch encoded (:meth:`_encoded`): its identity, first entry and body.
    _last_encoded: tuple[tuple[int, int, int], bytes, bytes] | None = field(
        default=None, init=False
    )

    # ------------------------------------------------------------ links

    def set_history(self, entries: list[bytes]) -> None:
        """The entries before this epoch that this leader holds (drained from its replica log
        at promotion, oldest first, names increasing): sent to a follower after its last."""
        self.history = entries

    def set_links(self, followers: list[str], others: list[str] | None = None) -> None:
        """``followers``: the in-sync followers now; ``others``: the other placement nodes
        (node ids). Every one of them has a link (new ones start with a probe); those out of
        the ISR are not waited for (catch-up), and are stopped instead when they refused this
        epoch, were given up, or catch-up is off; then re-check the waiters. A node first
        named after the first call (placed on the topic during this epoch: placement.py) is
        sent this epoch from the first entry still kept (link.Link.floor), as is one placed
        off it and on it again."""
        first = self.placed is None
        # a node placed off the topic is forgotten: placed on it again, it is joining again
        self.placed = (self.placed or set()) & {*followers, *(others or ())}
        catch_up = self.on_caught_up is not None
        wanted = set(followers)
        if catch_up:
            wanted.update(n for n in others or () if n not in self.given_up)
        for node_id, link in list(self.links.items()):
            if node_id not in followers:
                if link.refused or node_id not in wanted:
                    self._stop_link(self.links.pop(node_id))
                else:
                    link.in_isr = False
        for node_id in [*followers, *(n for n in wanted if n not in followers)]:
            joining = not first and node_id not in self.placed
            self.placed.add(node_id)
            link_now = self.links.get(node_id)
            if link_now is not None:
                if node_id in followers:
                    link_now.in_isr = True
            else:
                link = Link(node_id, self.base, self.base if joining else None)
                link.in_isr = node_id in followers
                link.task = asyncio.get_running_loop().create_task(
                    self._send_loop(link), name=f"replicate-{self.topic}-{node_id}"
                )
                self.links[node_id] = link
        self._advance()

    def _stop_link(self, link: Link) -> None:
        if link.task is not None:
            link.task.cancel()
            link.task = None

    def close(self, answer: bool = False) -> None:
        """Stop every link and answer every waiter ``answer`` (False: not acknowledged)."""
        self.closed = True
        for link in self.links.values():
            self._stop_link(link)
        self.links.clear()
        self.dropped += sum(end - first for first, end, _, _ in self.pending)
        self.pending.clear()
        while self.waiters:
            _, fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(answer)

    # ------------------------------------------------------------ publishing

    def append(self, records: list[bytes], delay_ms: int = 0) -> int:
        """Assign the next seqs to ``records`` and queue them for every link; returns the seq
        after the last one (what commit_waiter takes)."""
        seq = self.next_seq
        head = ENTRY.pack
        epoch = self.epoch
        entries = self.entries
        for r in records:
            entries.append(head(epoch, seq, delay_ms) + r)
            seq += 1
        if self.on_commit is not None and records:
            self.pending.append((self.next_seq, seq, records, delay_ms))
        self.next_seq = seq
        waited = False
        for link in self.links.values():
            link.wake.set()
            waited = waited or link.in_isr
        if not waited:  # no in-sync follower (only catching-up ones, or none): committed now
            self._advance()
        return seq

    def commit_waiter(self, end: int) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if end <= self.committed:
            fut.set_result(self.allowed())
        else:
            self.waiters.append((end, fut))
        return fut

    def _advance(self) -> None:
        """Recompute the committed seq, answer the waiters it passed, drop entries every link
        has."""
        links = self.links.values()
        committed = min((lk.acked for lk in links if lk.in_isr), default=self.next_seq)
        self.committed = committed
        waiters = self.waiters
        pending = self.pending
        ok: bool | None = None
        if pending and pending[0][0] < committed:
            ok = self._hand_over(committed, self.allowed())
        if waiters and waiters[0][0] <= committed:
            if ok is None:
                ok = self.allowed()
            while waiters and waiters[0][0] <= committed:
                _, fut = waiters.popleft()
                if not fut.done():
                    fut.set_result(ok)
        keep = committed
        for lk in list(links):
            if not lk.in_isr:
                if self.next_seq - lk.acked > MAX_RETAINED:
                    log.warning(
                        "topic %s: %s is too far behind to catch up", self.topic, lk.node_id
                    )
                    self._stop_link(self.links.pop(lk.node_id))
                else:
                    keep = min(keep, lk.acked)
        drop = keep - self.base
        if drop > 0:
            del self.entries[:drop]
            self.base = keep

    def _hand_over(self, committed: int, ok: bool) -> bool:
        """The pending records below ``committed`` go to on_commit (``ok``) or are dropped;
        returns whether their publishers may be acknowledged."""
        pending = self.pending
        plain: list[bytes] = []
        deferred: list[tuple[bytes, int]] = []
        while pending and pending[0][0] < committed:
            first, end, records, delay = pending[0]
            if end <= committed:
                pending.popleft()
            else:  # an MPUB split across append requests: the committed part only
                cut = committed - first
                pending[0] = (committed, end, records[cut:], delay)
                records = records[:cut]
            if delay:
                deferred.extend((r, delay) for r in records)
            elif plain:
                plain.extend(records)
            else:
                plain = list(records)
        if ok and self.on_commit is not None and self.on_commit(plain, deferred):
            return True
        self.dropped += len(plain) + len(deferred)
        return False

    # ------------------------------------------------------------ one link: its I/O

    async def _send_loop(self, link: Link) -> None:
        """The task of one link: link.next_step says what to do, this does it (the request,
        the waits, the ISR policy's calls), link.apply_answer takes the answer in."""
        node = link.node_id
        catch_up = self.on_caught_up is not None
        while not self.closed:
            step = next_step(link, self, self.clock(), catch_up)
            if step.kind == EVICT:
                if step.report:
                    self.on_lagging(node)
                await asyncio.sleep(RETRY_DELAY)
                continue
            if step.kind == GIVE_UP:
                log.warning("topic %s: %s is too far behind to catch up", self.topic, node)
                self.given_up.add(node)
                self.links.pop(node, None)
                self.on_lagging(node)
                self._advance()
                return
            if step.kind == IDLE:
                if step.readmit and self.on_caught_up is not None:
                    self.on_caught_up(node)
                    self._advance()
                link.wake.clear()
                await link.wake.wait()
                continue
            # the request, and the ones chained on it while it is out (pipelining: the
            # follower takes them in order); answers are taken in order, and anything but a
            # 200 drops the rounds behind it (chained on it: refused with a gap, or unknown)
            wake = link.wake
            inflight: deque[tuple[Step, asyncio.Future[Answer]]] = deque()
            inflight.append((step, self._send(node, step, wake)))
            while inflight:
                while len(inflight) < MAX_ROUNDS_IN_FLIGHT:
                    more = chained_step(link, self, inflight[-1][0], self.clock())
                    if more is None:
                        break
                    inflight.append((more, self._send(node, more, wake)))
                if not inflight[0][1].done():
                    wake.clear()
                    await wake.wait()
                    continue
                sent, done = inflight.popleft()
                status, answer = done.result()
                if status != 200:
                    inflight.clear()
                out = apply_answer(link, self, sent, status, answer, self.clock(), self.timeout)
                if out.kind == REFUSED:
                    log.warning(
                        "topic %s: %s has a newer epoch than %d", self.topic, node, self.epoch
                    )
                    self.on_lagging(node)
                    return
                if out.kind == RETRY:
                    if out.report:
                        log.warning(
                            "topic %s: follower %s lags (%s): leaving the ISR",
                            self.topic,
                            node,
                            out.message,
                        )
                        self.on_lagging(node)
                    await asyncio.sleep(link.backoff)
                    after_retry(link)
                    break
                if out.resetting:
                    log.info("topic %s: %s holds data of its own: resetting it", self.topic, node)
                if out.advance:
                    self._advance()

    def _send(self, node: str, step: Step, wake: asyncio.Event) -> asyncio.Future[Answer]:
        """Send ``step`` to ``node`` now (queued on its courier, or a request of its own):
        the future of its answer (:meth:`_post`), which sets ``wake`` when it comes."""
        courier = self.courier_of(node) if self.courier_of is not None else None
        if courier is not None:
            return courier.submit(step.params, self._encoded(step.batch), wake.set)
        fut = asyncio.ensure_future(self._post(node, step))
        fut.add_done_callback(lambda _: wake.set())
        return fut

    def _encoded(self, batch: list[bytes]) -> bytes:
        """``batch`` as an append's body (entries.encode_entries), made once for the links
        that send the same entries one after another (the followers of one round)."""
        if not batch:
            return b""
        key = (id(batch[0]), id(batch[-1]), len(batch))
        last = self._last_encoded
        if last is not None and last[0] == key and last[1] is batch[0]:
            return last[2]
        body = encode_entries(batch)
        self._last_encoded = (key, batch[0], body)
        return body

    async def _post(self, node: str, step: Step) -> tuple[int, dict[str, Any]]:
        """POST /replica/append to ``node`` (through its courier when there is one, with the
        other topics' appends): (HTTP status, JSON answer), or (-1, {"message": the failure})
        when the request failed (no address, refused, timed out, no JSON)."""
        courier = self.courier_of(node) if self.courier_of is not None else None
        if courier is not None:
            return await courier.append(step.params, encode_entries(step.batch))
        address = self.address_of(node)
        try:
            if not address or self.http is None:
                raise OSError(f"no address for node {node}")
            async with self.http.post(
                f"http://{address}/replica/append",
                params=step.params,
                data=encode_entries(step.batch),
                # seconds: aiohttp makes them a ClientTimeout(total=...)
                timeout=self.timeout,  # type: ignore[arg-type]
            ) as resp:
                text = await resp.read()
                answer = json.loads(text) if text else {}
                if not isinstance(answer, dict):
                    raise ValueError(f"not a JSON object: {text[:64]!r}")
                return resp.status, answer
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: retried, then lagging
            return -1, {"message": repr(exc)}
