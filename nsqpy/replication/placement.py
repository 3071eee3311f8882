"""Changing a replicated topic's placement: the replication factor, a reassignment to given
nodes, the replacement of one node everywhere (docs/replication.md, "Changing the placement").

Strategy: the plans are pure functions of a TopicRecord (and the live members), each written
by Coordinator.update_topic in one etcd transaction comparing the record's revision; the
orchestration (:class:`PlacementChanges`) only reads, writes and waits. A change that brings
nodes in is made in two steps, so the topic never has fewer in-sync copies than before:

1. the *union* placement (the old one, then the nodes new to it): the leader links every new
   node, sends it its history and this epoch's entries from then on, and re-admits it to the
   ISR once it has them all (leader_stream.py, "Rejoining");
2. once every new node is in the ISR: when the leader is leaving, leadership moves to the first
   live in-sync member of the final placement (epoch + 1, as an election: nodes that stay come
   first in ISR order, so an old member is preferred to a new one), after the leader sent its
   channels' progress once more (so the next leader knows every channel); then the *final*
   placement, its ISR the old ISR within it.

A change that only removes nodes is step 2 alone; the leader never leaves the placement without
a transfer. Any node may run a change: nothing here needs to be the leader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

from .coordinator import Coordinator, Member, TopicMissing, TopicState
from .records import (
    NotEnoughNodes,
    ReplicationError,
    TopicRecord,
    choose_placement,
    elected,
    placement_load,
)

#: Seconds between two reads of the record while waiting for new nodes to join the ISR.
POLL_INTERVAL = 0.1


class PlacementError(ReplicationError):
    """A change that cannot be made as asked: ``code`` is the NSQ-style HTTP error text
    (INVALID_NODES, INVALID_REPLICAS) answered with a 400."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class NotInSync(ReplicationError):
    """The new nodes did not all join the ISR within the time given: the union placement
    stays (more copies, not fewer); asking again continues from there."""


def parse_nodes(text: str) -> tuple[str, ...]:
    """``"a,b,c"`` as node ids, in order. PlacementError INVALID_NODES when empty, when an id
    is empty or holds a character outside [A-Za-z0-9_.-], or when one repeats."""
    nodes = tuple(n.strip() for n in text.split(","))
    if not nodes or any(not n or not all(c.isalnum() or c in "_.-" for c in n) for n in nodes):
        raise PlacementError("INVALID_NODES", f"bad node list {text!r}")
    if len(set(nodes)) != len(nodes):
        raise PlacementError("INVALID_NODES", f"node list {text!r} repeats a node")
    return nodes


def check_new_nodes(rec: TopicRecord, final: Sequence[str], live: Mapping[str, Member]) -> None:
    """Every node of ``final`` not in ``rec``'s placement must be live (it has to catch up):
    PlacementError INVALID_NODES otherwise."""
    gone = [n for n in final if n not in rec.placement and n not in live]
    if gone:
        raise PlacementError("INVALID_NODES", f"nodes {gone} are not live members")


def union_record(rec: TopicRecord, final: Sequence[str]) -> TopicRecord:
    """Step 1: ``rec`` with the nodes of ``final`` new to its placement appended (R grows to
    match; ISR, leader and epoch unchanged)."""
    joining = [n for n in final if n not in rec.placement]
    if not joining:
        return rec
    placement = (*rec.placement, *joining)
    return replace(rec, replicas=len(placement), placement=placement)


def transfer_record(
    rec: TopicRecord, final: Sequence[str], live: Mapping[str, Member]
) -> TopicRecord:
    """Step 2a: when ``rec``'s leader is not in ``final``, the record after the first live
    ISR member in ``final`` (ISR order) takes over at epoch + 1 (records.elected: the old
    leader leaves the ISR); ``rec`` itself otherwise. NotInSync when no such member."""
    if not rec.leader or rec.leader in final:
        return rec
    for n in rec.isr:
        if n != rec.leader and n in final and n in live:
            return elected(rec, n, live[n].lease, live)
    raise NotInSync(f"topic {rec.topic!r}: no live in-sync member of {list(final)} to lead")


def final_record(rec: TopicRecord, final: Sequence[str]) -> TopicRecord:
    """Step 2b: ``rec`` placed on ``final`` (R = its length), its ISR the old one within it,
    leader first. NotInSync when the leader is not in ``final`` (transfer first)."""
    if rec.leader and rec.leader not in final:
        raise NotInSync(f"topic {rec.topic!r}: leader {rec.leader!r} is still leading")
    head = [rec.leader] if rec.leader else []
    isr = (*head, *(n for n in final if n in rec.isr and n != rec.leader))
    return replace(rec, replicas=len(final), placement=tuple(final), isr=isr)


def grown(
    rec: TopicRecord, replicas: int, live: Mapping[str, Member], load: Mapping[str, int]
) -> tuple[str, ...]:
    """The placement for R = ``replicas`` (>= len(placement)): the current nodes, then new
    ones chosen among the other live nodes as creation chooses (records.choose_placement).
    NotEnoughNodes when too few are live."""
    extra = replicas - len(rec.placement)
    if extra <= 0:
        return rec.placement
    others = [n for n in live if n not in rec.placement]
    try:
        return (*rec.placement, *choose_placement(rec.topic, extra, others, load))
    except NotEnoughNodes:
        raise NotEnoughNodes(replicas, len(others) + len(rec.placement)) from None


def shrunk(rec: TopicRecord, replicas: int) -> tuple[str, ...]:
    """The placement for R = ``replicas`` (>= 1, <= len(placement)): followers dropped, out
    of the ISR ones first, then the last in placement order; never the leader."""
    drop = len(rec.placement) - replicas
    if drop <= 0:
        return rec.placement
    order = [n for n in reversed(rec.placement) if n != rec.leader]
    order.sort(key=lambda n: n in rec.isr)  # stable: out-of-ISR first, each group last first
    gone = set(order[:drop])
    return tuple(n for n in rec.placement if n not in gone)


class PlacementChanges:
    """The placement changes of the cluster ``coordinator`` belongs to; each waits at most
    ``timeout`` seconds for new nodes to join the ISR (NotInSync after). Errors besides:
    PlacementError, TopicMissing, Contended, NotEnoughNodes, EtcdError."""

    def __init__(
        self,
        coordinator: Coordinator,
        before_transfer: Callable[[TopicRecord], Awaitable[None]] | None = None,
        poll: float = POLL_INTERVAL,
    ) -> None:
        """``before_transfer(record)``: awaited before leadership moves off ``record.leader``
        (http_routes.ReplicaRoutes._handover_round: the leader sends its channels' progress,
        so that the next leader knows them); its errors are the caller's to swallow."""
        self.coordinator = coordinator
        self.before_transfer = before_transfer
        self.poll = poll

    async def reassign(self, topic: str, nodes: Sequence[str], timeout: float) -> TopicState:
        """Place ``topic`` on ``nodes`` (module docstring: union, wait, transfer, final)."""
        final = tuple(nodes)
        if not final:
            raise PlacementError("INVALID_NODES", "an empty placement")
        c = self.coordinator

        def step1(rec: TopicRecord, live: dict[str, Member]) -> TopicRecord:
            check_new_nodes(rec, final, live)
            return union_record(rec, final)

        state = await c.update_topic(topic, step1)
        live = await c.members()
        # the live nodes of the final placement out of the ISR: waited for (a dead one that
        # stays in the placement is not: it rejoins when it is back)
        waiting = {n for n in final if n not in state.record.isr and n in live}
        deadline = time.monotonic() + timeout
        while not waiting <= set(state.record.isr):
            if time.monotonic() >= deadline:
                missing = sorted(waiting - set(state.record.isr))
                raise NotInSync(f"topic {topic!r}: {missing} not in the ISR after {timeout}s")
            await asyncio.sleep(self.poll)
            now = await c.get_topic(topic)
            if now is None:
                raise TopicMissing(topic)
            state = now
        if state.record.leader not in final and self.before_transfer is not None:
            await self.before_transfer(state.record)
        state = await c.update_topic(topic, lambda rec, live: transfer_record(rec, final, live))
        return await c.update_topic(topic, lambda rec, live: final_record(rec, final))

    async def set_replicas(self, topic: str, replicas: int, timeout: float) -> TopicState:
        """R of ``topic`` to ``replicas`` (>= 1; PlacementError INVALID_REPLICAS otherwise):
        raised with nodes chosen as creation chooses them, lowered by dropping followers."""
        if replicas < 1:
            raise PlacementError("INVALID_REPLICAS", f"replicas must be >= 1, got {replicas}")
        c = self.coordinator
        cur = await c.get_topic(topic)
        if cur is None:
            raise TopicMissing(topic)
        rec = cur.record
        if replicas > len(rec.placement):
            live = await c.members()
            load = placement_load(s.record for s in (await c.topics()).values())
            final = grown(rec, replicas, live, load)
        else:
            final = shrunk(rec, replicas)
        return await self.reassign(topic, final, timeout)

    async def replace_node(self, old: str, new: str, timeout: float) -> list[TopicState]:
        """Reassign every topic placed on ``old`` with ``new`` in its place (the topics one
        after another, in name order); returns their final states. PlacementError
        INVALID_NODES when ``new`` is not live or is ``old``."""
        if old == new:
            raise PlacementError("INVALID_NODES", "old and new are the same node")
        c = self.coordinator
        if new not in await c.members():
            raise PlacementError("INVALID_NODES", f"node {new!r} is not a live member")
        out: list[TopicState] = []
        for name, st in sorted((await c.topics()).items()):
            placement = st.record.placement
            if old not in placement:
                continue
            if new in placement:
                final = tuple(n for n in placement if n != old)
            else:
                final = tuple(new if n == old else n for n in placement)
            out.append(await self.reassign(name, final, timeout))
        return out
