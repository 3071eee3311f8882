"""Topic records in etcd: creation with placement, leader election, ISR changes, fencing checks
and watches. Every write is one etcd transaction whose compares make it
safe against any other node doing the same thing at the same time:

- **create** (:meth:`Coordinator.create_topic`): the topic key is absent, and the chosen leader's
  node key still carries the lease read with it. Two nodes creating one topic at once: one
  transaction wins, the other reads the winner's record back (``created`` False).
- **elect** (:meth:`Coordinator.elect_leader`): the record is still at the revision read (so the
  epoch is still the one read: every epoch bump is a write of that key), the old leader's node key
  no longer carries ``leader_lease`` (its lease lapsed on the server: an absent key holds lease 0),
  and the candidate's node key still carries the lease it is elected with. Epoch + 1. Of two
  candidates at once, the second finds the revision moved and reads the first's result.
- **ISR shrink/expand** (:meth:`Coordinator.shrink_isr`, :meth:`Coordinator.expand_isr`): the
  record is still at the revision the leader holds, and the leader's node key still carries
  ``leader_lease``. On a failed compare the current record is read back in the same transaction:
  a different epoch (or a lapsed lease) raises :class:`Fenced`; the same epoch (a concurrent ISR
  change) is retried on the fresh record.
- **placement change** (:meth:`Coordinator.update_topic`, driven by placement.py): the record
  is still at the revision read, and, when the change names a new leader (a leadership
  transfer before the old leader leaves the placement), that node's key still carries the
  lease it is named with. A lost compare reads the record again and plans the change anew.

What the caller holds is a :class:`TopicState`: the record plus the etcd ``mod_revision`` it was
read at; every conditional write takes one and returns the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from .etcd_gateway import KV, EtcdClient, EtcdError, WatchCompacted
from .records import (
    Keys,
    NodeInfo,
    RecordError,
    ReplicationError,
    TopicRecord,
    choose_leader,
    choose_placement,
    cmp_absent,
    cmp_lease,
    cmp_mod_revision,
    elected,
    op_get,
    op_put,
    placement_load,
)
from .session import NodeSession

log = logging.getLogger("nsqpy.replication")

#: Bound on compare-and-retry rounds of one call (each round is one etcd transaction).
MAX_ROUNDS = 16


class Fenced(ReplicationError):
    """This node acted on a topic record it no longer leads: ``epoch_held`` is the epoch it
    acted in, ``epoch_now`` the record's (equal when its lease lapsed but no election ran yet),
    ``leader_now`` the record's leader."""

    def __init__(self, topic: str, epoch_held: int, epoch_now: int, leader_now: str) -> None:
        super().__init__(
            f"topic {topic!r}: fenced at epoch {epoch_held} (now epoch {epoch_now}, "
            f"leader {leader_now!r})"
        )
        self.topic = topic
        self.epoch_held = epoch_held
        self.epoch_now = epoch_now
        self.leader_now = leader_now


class NoEligibleLeader(ReplicationError):
    """The leader lapsed and no other ISR member is live: the topic stays leaderless (no unclean
    election) until an ISR member comes back."""


class TopicMissing(ReplicationError):
    """No record for this topic in etcd."""


class Contended(ReplicationError):
    """MAX_ROUNDS transactions in a row lost their compare to concurrent writers."""


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic record and the etcd ``revision`` (the key's mod_revision) it was read at."""

    record: TopicRecord
    revision: int


@dataclass(frozen=True, slots=True)
class Member:
    """A live node: its info and the lease its key is held under."""

    info: NodeInfo
    lease: int


@dataclass(frozen=True, slots=True)
class TopicChange:
    """A watch event: ``state`` None when the record was deleted."""

    topic: str
    state: TopicState | None


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A membership event: ``member`` None when the node's key went (left, or lease lapsed)."""

    node_id: str
    member: Member | None


def _state(kv: KV) -> TopicState:
    return TopicState(TopicRecord.decode(kv.value), kv.mod_revision)


class Coordinator:
    """``Coordinator(session)``: the topic-record operations of the node ``session`` is, over
    ``session.client`` and ``session.keys``. Errors: Fenced, NoEligibleLeader, TopicMissing,
    Contended, NotEnoughNodes (records), EtcdError / EtcdUnavailable (etcd_gateway)."""

    def __init__(self, session: NodeSession) -> None:
        self.session = session
        self.client: EtcdClient = session.client
        self.keys: Keys = session.keys

    @property
    def node_id(self) -> str:
        return self.session.node_id

    # --- reads ---

    async def members(self) -> dict[str, Member]:
        """Node id -> Member for every node whose key is live now."""
        kvs, _ = await self.client.get_prefix(self.keys.nodes)
        return {m.info.node_id: m for m in map(_member, kvs) if m is not None}

    async def get_topic(self, topic: str) -> TopicState | None:
        kv = await self.client.get(self.keys.topic(topic))
        return _state(kv) if kv is not None else None

    async def topics(self) -> dict[str, TopicState]:
        """Topic -> state for every record (a value that does not decode is logged, skipped)."""
        kvs, _ = await self.client.get_prefix(self.keys.topics)
        out: dict[str, TopicState] = {}
        for kv in kvs:
            try:
                st = _state(kv)
            except RecordError as exc:
                log.warning("ignoring topic key %r: %s", kv.key, exc)
                continue
            out[st.record.topic] = st
        return out

    # --- writes ---

    async def create_topic(self, topic: str, replicas: int) -> tuple[TopicState, bool]:
        """The record of ``topic``, created when absent with ``replicas`` (R >= 1) nodes chosen
        over the live members (records.choose_placement), the first one leader at epoch 1 and
        all R in the ISR. Returns (state, True) when this call created it, (existing state,
        False) when it was there already (whatever its R). NotEnoughNodes when fewer than R
        nodes are live."""
        key = self.keys.topic(topic)
        for _ in range(MAX_ROUNDS):
            existing = await self.get_topic(topic)
            if existing is not None:
                return existing, False
            live = await self.members()
            load = placement_load(s.record for s in (await self.topics()).values())
            placement = choose_placement(topic, replicas, live, load)
            leader = placement[0]
            rec = TopicRecord(topic, replicas, placement, leader, live[leader].lease, placement, 1)
            res = await self.client.txn(
                [cmp_absent(key), cmp_lease(self.keys.node(leader), rec.leader_lease)],
                [op_put(key, rec.encode())],
                [op_get(key)],
            )
            if res.succeeded:
                return TopicState(rec, res.revision), True
            kvs = res.range_kvs(0)
            if kvs:
                return _state(kvs[0]), False
        raise Contended(f"create {topic!r}: {MAX_ROUNDS} rounds lost")

    async def delete_topic(self, topic: str) -> bool:
        """Delete the record of ``topic`` (every node's watch then drops its copy); False
        when there was none. EtcdError."""
        return await self.client.delete(self.keys.topic(topic)) > 0

    async def elect_leader(self, topic: str) -> TopicState:
        """When the record's leader no longer holds ``leader_lease``, elect the first live ISR
        member (records.choose_leader) at epoch + 1; any node may call this, and of concurrent
        callers exactly one transaction wins. Returns the record as it stands afterwards (the
        unchanged record when the leader is alive, another caller's result when it won).
        TopicMissing, NoEligibleLeader."""
        for _ in range(MAX_ROUNDS):
            cur = await self.get_topic(topic)
            if cur is None:
                raise TopicMissing(topic)
            rec = cur.record
            live = await self.members()
            held = live.get(rec.leader)
            if rec.leader and held is not None and held.lease == rec.leader_lease:
                return cur
            cand = choose_leader(rec, live)
            if cand is None:
                raise NoEligibleLeader(f"topic {topic!r}: no live ISR member in {rec.isr}")
            new = elected(rec, cand, live[cand].lease, live)
            cmps = [
                cmp_mod_revision(self.keys.topic(topic), cur.revision),
                cmp_lease(self.keys.node(cand), live[cand].lease),
            ]
            if rec.leader:
                cmps.append(cmp_lease(self.keys.node(rec.leader), rec.leader_lease, equal=False))
            res = await self.client.txn(cmps, [op_put(self.keys.topic(topic), new.encode())])
            if res.succeeded:
                log.info("topic %s: %s elected at epoch %d", topic, cand, new.epoch)
                return TopicState(new, res.revision)
        raise Contended(f"elect {topic!r}: {MAX_ROUNDS} rounds lost")

    async def elect_lapsed(self) -> list[TopicState]:
        """elect_leader for every topic whose leader's lease lapsed; returns the new states
        (topics with no eligible leader are logged and left)."""
        out: list[TopicState] = []
        live = await self.members()
        for name, st in (await self.topics()).items():
            held = live.get(st.record.leader)
            if held is not None and held.lease == st.record.leader_lease:
                continue
            try:
                new = await self.elect_leader(name)
            except NoEligibleLeader as exc:
                log.warning("%s", exc)
                continue
            if new.record.epoch != st.record.epoch:
                out.append(new)
        return out

    async def shrink_isr(self, state: TopicState, node_id: str) -> TopicState:
        """Leader only: drop ``node_id`` (a lagging follower) from the ISR of ``state``'s
        epoch. Fenced when the epoch moved on or this node's leader lease lapsed."""
        return await self._change_isr(state, lambda isr: isr - {node_id})

    async def expand_isr(self, state: TopicState, node_id: str) -> TopicState:
        """Leader only: add ``node_id`` (a caught-up follower in the placement) to the ISR of
        ``state``'s epoch. RecordError when it is not in the placement; Fenced as above."""
        if node_id not in state.record.placement:
            raise RecordError(f"{node_id!r} is not in the placement {state.record.placement}")
        return await self._change_isr(state, lambda isr: isr | {node_id})

    async def _change_isr(
        self, state: TopicState, change: Callable[[set[str]], set[str]]
    ) -> TopicState:
        rec = state.record
        if rec.leader != self.node_id or rec.leader_lease != self.session.lease_id:
            raise Fenced(rec.topic, rec.epoch, rec.epoch, rec.leader)
        key = self.keys.topic(rec.topic)
        cur = state
        for _ in range(MAX_ROUNDS):
            new = cur.record.with_isr(change(set(cur.record.isr)))
            if new.isr == cur.record.isr:
                return cur
            res = await self.client.txn(
                [
                    cmp_mod_revision(key, cur.revision),
                    cmp_lease(self.keys.node(self.node_id), rec.leader_lease),
                ],
                [op_put(key, new.encode())],
                [op_get(key), op_get(self.keys.node(self.node_id))],
            )
            if res.succeeded:
                return TopicState(new, res.revision)
            kvs, mine = res.range_kvs(0), res.range_kvs(1)
            if not kvs:
                raise TopicMissing(rec.topic)
            cur = _state(kvs[0])
            now = cur.record
            if now.epoch != rec.epoch or not mine or mine[0].lease != rec.leader_lease:
                raise Fenced(rec.topic, rec.epoch, now.epoch, now.leader)
        raise Contended(f"isr change {rec.topic!r}: {MAX_ROUNDS} rounds lost")

    async def update_topic(
        self, topic: str, change: Callable[[TopicRecord, dict[str, Member]], TopicRecord]
    ) -> TopicState:
        """Write ``change(record, live members)`` over the record of ``topic`` in one
        transaction comparing the revision read (and, when the leader changes, the new
        leader's lease); re-read and re-planned when another write came first. The unchanged
        state when ``change`` returns the record as it is. TopicMissing, Contended, and what
        ``change`` raises."""
        key = self.keys.topic(topic)
        for _ in range(MAX_ROUNDS):
            cur = await self.get_topic(topic)
            if cur is None:
                raise TopicMissing(topic)
            live = await self.members()
            new = change(cur.record, live)
            if new == cur.record:
                return cur
            cmps = [cmp_mod_revision(key, cur.revision)]
            if new.leader and new.leader != cur.record.leader:
                cmps.append(cmp_lease(self.keys.node(new.leader), new.leader_lease))
            res = await self.client.txn(cmps, [op_put(key, new.encode())])
            if res.succeeded:
                return TopicState(new, res.revision)
        raise Contended(f"placement change {topic!r}: {MAX_ROUNDS} rounds lost")

    def may_acknowledge(self, state: TopicState) -> bool:
        """May this node acknowledge a publish on ``state``'s topic now? Only as its leader
        elected under its current lease, and only while that lease is certainly alive on the
        server (session.LeaseClock): False before another node could be elected."""
        rec = state.record
        return (
            rec.leader == self.node_id
            and rec.leader_lease == self.session.lease_id
            and self.session.may_acknowledge()
        )

    # --- watches ---

    async def watch_topics(self) -> AsyncIterator[TopicChange]:
        """Every topic record now (one change each, key order), then every change after, with no
        gap (the watch starts at the revision after the read); a dropped connection is
        reopened from the next revision. After a compaction the records are read again and
        re-announced (deleted ones as deletions). Runs until the caller stops iterating;
        EtcdUnavailable when no endpoint answers."""
        async for kv, deleted in self._watch(self.keys.topics):
            try:
                topic = self.keys.topic_of(kv.key)
                yield TopicChange(topic, None if deleted else _state(kv))
            except (ValueError, RecordError) as exc:
                log.warning("ignoring topic key %r: %s", kv.key, exc)

    async def watch_members(self) -> AsyncIterator[NodeChange]:
        """Every live node now, then every join (member set) and leave/lapse (member None)."""
        async for kv, deleted in self._watch(self.keys.nodes):
            try:
                node_id = self.keys.node_id_of(kv.key)
            except (ValueError, UnicodeDecodeError):
                continue
            yield NodeChange(node_id, None if deleted else _member(kv))

    async def _watch(self, prefix: bytes) -> AsyncIterator[tuple[KV, bool]]:
        """(kv, deleted) for every key under ``prefix`` now, then every change. After a
        compaction the prefix is read again: keys gone meanwhile come out as deletions, the
        others as they are now."""
        known: set[bytes] = set()
        while True:
            kvs, rev = await self.client.get_prefix(prefix)
            now = {kv.key for kv in kvs}
            for key in sorted(known - now):
                yield KV(key, b"", 0, rev, 0, 0), True
            known = now
            for kv in kvs:
                yield kv, False
            try:
                async for ev in self.client.watch_prefix(prefix, rev + 1):
                    if ev.deleted:
                        known.discard(ev.kv.key)
                    else:
                        known.add(ev.kv.key)
                    yield ev.kv, ev.deleted
            except WatchCompacted:
                log.warning("watch on %r compacted: reading it again", prefix)

    async def run_failover(self, retry_delay: float = 0.5) -> None:
        """Run until cancelled: at start and at every membership change, elect new leaders for
        the topics whose leader lapsed (elect_lapsed): a node's key going (its lease lapsed or
        it left) can depose a leader, and a node joining can make a leaderless topic's ISR
        member live again. Every node may run this; the transactions make concurrent runs safe.
        etcd errors are logged and the watch is opened again after ``retry_delay`` seconds."""
        while True:
            try:
                await self.elect_lapsed()
                async for _change in self.watch_members():
                    await self.elect_lapsed()
            except EtcdError as exc:
                log.warning("failover watch: %s; again in %.1fs", exc, retry_delay)
                await asyncio.sleep(retry_delay)


def _member(kv: KV) -> Member | None:
    try:
        return Member(NodeInfo.decode(kv.value), kv.lease)
    except RecordError as exc:
        log.warning("ignoring node key %r: %s", kv.key, exc)
        return None
