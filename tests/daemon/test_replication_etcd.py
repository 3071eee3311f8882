"""nsqpy.replication against a real etcd 3.4 (tests/support/etcd_server.py: a child process on
loopback, OS-picked ports, a temp data dir, 1 s minimum lease TTL): membership with leases, the
topic record's creation race, leader election when the leader's lease lapses, epoch fencing of a
deposed leader, may_acknowledge turning False before the server expires the lease, and watches.

Each "node" is its own NodeSession + Coordinator over its own EtcdClient (its own HTTP
connections), as separate nsqpy-d processes would be; a node cut off from etcd is one whose
keepalives stopped (NodeSession.stop_keepalive), which is all etcd can see of a partition or a
kill -9. One etcd serves the module; every test has its own key root. Waits are on watch events
with bounded timeouts; the only timed waits are the lease TTLs themselves.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import TypeVar

import pytest
import pytest_asyncio
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)

from nsqpy.replication import (
    Coordinator,
    EtcdClient,
    EtcdUnavailable,
    Fenced,
    Keys,
    NodeIdTaken,
    NodeInfo,
    NodeSession,
    NotEnoughNodes,
    TopicChange,
    TopicState,
    WatchCompacted,
    default_root,
)

pytestmark = [
    pytest.mark.asyncio,
    needs_etcd,
    pytest.mark.timeout(60),
]

TTL = 1  # seconds: etcd's floor with the 100 ms election timeout of tests/support/etcd_server.py
T = TypeVar("T")


@pytest.fixture
def keys(request: pytest.FixtureRequest) -> Keys:
    return Keys(default_root(request.node.name.replace("/", "_")))


class Cluster:
    """Nodes of one test, each a (session, coordinator) pair with its own client."""

    def __init__(self, etcd: EtcdServer, keys: Keys, stack: AsyncExitStack) -> None:
        self.etcd = etcd
        self.keys = keys
        self.stack = stack

    async def client(self) -> EtcdClient:
        return await self.stack.enter_async_context(EtcdClient([self.etcd.endpoint]))

    async def node(self, node_id: str, ttl: int = TTL, margin: float = 0.2) -> Coordinator:
        info = NodeInfo(node_id, tcp=f"127.0.0.1:{4150}", http=f"127.0.0.1:{4151}")
        session = NodeSession(await self.client(), self.keys, info, ttl=ttl, margin=margin)
        await session.join()
        self.stack.push_async_callback(session.stop_keepalive)
        return Coordinator(session)


@pytest_asyncio.fixture
async def cluster(etcd: EtcdServer, keys: Keys) -> AsyncIterator[Cluster]:
    async with AsyncExitStack() as stack:
        yield Cluster(etcd, keys, stack)


async def _next(it: AsyncIterator[T], pred: Callable[[T], bool], timeout: float = 10.0) -> T:
    """The first item of ``it`` satisfying ``pred``, within ``timeout`` seconds."""

    async def scan() -> T:
        async for item in it:
            if pred(item):
                return item
        raise AssertionError("watch ended")

    return await asyncio.wait_for(scan(), timeout)


async def test_repl_membership_join_leave_lapse(cluster: Cluster) -> None:
    a = await cluster.node("a")
    b = await cluster.node("b")
    c = await cluster.node("c")
    watcher = await cluster.node("w")
    members = await watcher.members()
    assert set(members) == {"a", "b", "c", "w"}
    assert members["a"].lease == a.session.lease_id
    assert members["a"].info == NodeInfo("a", tcp="127.0.0.1:4150", http="127.0.0.1:4151")

    # the same node id cannot join twice while its first life holds the key
    dup = NodeSession(await cluster.client(), cluster.keys, NodeInfo("a"), ttl=TTL)
    with pytest.raises(NodeIdTaken):
        await dup.join()

    changes = watcher.watch_members()
    await _next(changes, lambda ch: ch.node_id == "w")  # the snapshot has been delivered
    # a clean leave removes the key at once
    await a.session.leave()
    gone = await _next(changes, lambda ch: ch.member is None, timeout=TTL * 0.9)
    assert gone.node_id == "a"

    # keepalives keep b alive well past its TTL while c's lapses
    await c.session.stop_keepalive()
    t0 = time.monotonic()
    gone = await _next(changes, lambda ch: ch.member is None, timeout=TTL + 3)
    assert gone.node_id == "c" and time.monotonic() - t0 >= TTL * 0.5
    assert set(await watcher.members()) == {"b", "w"}

    # a lease the server drops (here revoked behind b's back) is noticed: lost, no more acks
    assert b.session.may_acknowledge()
    await watcher.client.lease_revoke(b.session.lease_id)
    await asyncio.wait_for(b.session.lost.wait(), TTL + 2)
    assert not b.session.may_acknowledge()
    old = b.session.lease_id
    await b.session.rejoin()
    assert b.session.lease_id != old and b.session.may_acknowledge()
    rejoined = await _next(changes, lambda ch: ch.member is not None and ch.node_id == "b")
    assert rejoined.member is not None and rejoined.member.lease == b.session.lease_id
    await changes.aclose()


async def test_repl_create_topic_race_one_record(cluster: Cluster) -> None:
    nodes = [await cluster.node(n) for n in ("a", "b", "c")]
    for i in range(5):
        topic = f"race{i}"
        results = await asyncio.gather(*(n.create_topic(topic, 3) for n in nodes))
        assert sorted(created for _, created in results) == [False, False, True]
        states = {st for st, _ in results}
        assert len(states) == 1  # everyone holds the winner's record at its revision
        (st,) = states
        rec = st.record
        assert (rec.replicas, rec.epoch, set(rec.placement)) == (3, 1, {"a", "b", "c"})
        assert rec.isr[0] == rec.leader == rec.placement[0]
        members = await nodes[0].members()
        assert rec.leader_lease == members[rec.leader].lease
    assert sorted(await nodes[0].topics()) == [f"race{i}" for i in range(5)]
    # a later create of an existing topic returns it, whatever R it asks for
    st, created = await nodes[1].create_topic("race0", 2)
    assert not created and st.record.replicas == 3
    with pytest.raises(NotEnoughNodes):
        await nodes[0].create_topic("big", 4)
    # R=1 topics spread over the nodes by load
    singles = [(await nodes[0].create_topic(f"one{i}", 1))[0] for i in range(6)]
    assert sorted(s.record.leader for s in singles) == ["a", "a", "b", "b", "c", "c"]


async def _leader_first(
    cluster: Cluster, topic: str, ttl: int = TTL
) -> tuple[dict[str, Coordinator], TopicState]:
    nodes = {n: await cluster.node(n, ttl=ttl) for n in ("a", "b", "c")}
    state, created = await nodes["a"].create_topic(topic, 3)
    assert created
    return nodes, state


async def test_repl_election_after_leader_lease_lapses(cluster: Cluster) -> None:
    nodes, state = await _leader_first(cluster, "orders")
    old = state.record
    leader = nodes[old.leader]
    others = [n for n in nodes.values() if n is not leader]
    # both survivors run failover: their transactions race, exactly one election may win
    failovers = [asyncio.create_task(n.run_failover()) for n in others]
    watch = others[0].watch_topics()
    first = await _next(watch, lambda ch: ch.topic == "orders")
    assert first.state == state
    try:
        assert await others[1].elect_leader("orders") == state  # leader alive: no election
        await leader.session.stop_keepalive()
        t0 = time.monotonic()
        change = await _next(watch, lambda ch: ch.state is not None and ch.state.record.epoch > 1)
        took = time.monotonic() - t0
    finally:
        for task in failovers:
            task.cancel()
        await asyncio.gather(*failovers, return_exceptions=True)
    assert change.state is not None
    new = change.state.record
    assert new.epoch == 2 and new.leader != old.leader and new.leader in old.isr
    assert old.leader not in new.isr and set(new.isr) == set(old.isr) - {old.leader}
    assert new.leader_lease == nodes[new.leader].session.lease_id
    assert new.placement == old.placement
    assert TTL * 0.5 <= took < TTL + 5
    # once settled, nobody elects again: the record stays at epoch 2 for every caller
    again = await asyncio.gather(*(n.elect_leader("orders") for n in others))
    assert {s.record.epoch for s in again} == {2}
    assert (await others[0].get_topic("orders")) == change.state
    await watch.aclose()


async def test_repl_concurrent_elections_one_winner(cluster: Cluster) -> None:
    nodes, state = await _leader_first(cluster, "t")
    leader = nodes[state.record.leader]
    others = [n for n in nodes.values() if n is not leader]
    watch = others[0].watch_members()
    await _next(watch, lambda ch: True)
    await leader.session.stop_keepalive()
    await _next(watch, lambda ch: ch.member is None, timeout=TTL + 3)
    await watch.aclose()
    results = await asyncio.gather(*(n.elect_leader("t") for n in others * 2))
    assert {(s.record.epoch, s.record.leader, s.revision) for s in results} == {
        (2, results[0].record.leader, results[0].revision)
    }


async def test_repl_deposed_leader_fenced_by_epoch(cluster: Cluster) -> None:
    # a 2 s lease: the ISR changes below must land while the leader's lease is alive, and a
    # 1 s lease can lapse on a loaded machine before they do (seen once at load 14)
    nodes, state = await _leader_first(cluster, "t", ttl=2)
    leader = nodes[state.record.leader]
    follower = next(n for n in state.record.isr if n != leader.node_id)
    # the leader changes the ISR at its epoch: epoch kept, revision moves on
    shrunk = await leader.shrink_isr(state, follower)
    assert follower not in shrunk.record.isr and shrunk.record.epoch == 1
    grown = await leader.expand_isr(shrunk, follower)
    assert set(grown.record.isr) == set(state.record.isr) and grown.revision > shrunk.revision
    # a stale state of the same epoch is retried on the fresh record, not refused
    both = await leader.shrink_isr(state, state.record.isr[2])
    assert both.record.isr == (leader.node_id, state.record.isr[1])
    # a follower is not leader: refused before any write
    with pytest.raises(Fenced):
        await nodes[follower].shrink_isr(both, leader.node_id)

    # cut the leader off: once its lease lapsed, its own ISR change fails on the lease compare
    watch = nodes[follower].watch_members()
    await _next(watch, lambda ch: True)
    await leader.session.stop_keepalive()
    await _next(watch, lambda ch: ch.member is None, timeout=2 + 3)
    await watch.aclose()
    with pytest.raises(Fenced) as lapsed:
        await leader.shrink_isr(both, state.record.isr[1])
    assert lapsed.value.epoch_held == lapsed.value.epoch_now == 1

    # a new leader is elected; the deposed one, acting on its epoch-1 state, fails the compare
    new = await nodes[follower].elect_leader("t")
    assert new.record.epoch == 2 and new.record.leader == follower
    with pytest.raises(Fenced) as deposed:
        await leader.expand_isr(both, state.record.isr[2])
    assert (deposed.value.epoch_held, deposed.value.epoch_now) == (1, 2)
    assert deposed.value.leader_now == follower
    assert not leader.may_acknowledge(both)
    assert nodes[follower].may_acknowledge(new)
    assert (await nodes[follower].get_topic("t")) == new  # nothing of the deposed leader landed


async def test_repl_may_acknowledge_ends_before_server_expiry(cluster: Cluster) -> None:
    """Once its keepalives stop, a leader stops acknowledging before etcd drops its key: the
    node's own deadline (the last keepalive's send time plus TTL less the margin) is earlier
    than the moment an observer sees the key go. Load-proof: both sides are compared as
    observed, with no sleep that must end on time."""
    nodes, state = await _leader_first(cluster, "t")
    leader = nodes[state.record.leader]
    observer = next(n for n in nodes.values() if n is not leader)
    assert leader.may_acknowledge(state)
    assert not observer.may_acknowledge(state)
    watch = observer.watch_members()
    await _next(watch, lambda ch: True)
    await leader.session.stop_keepalive()
    clock = leader.session.lease_clock
    deadline = clock.deadline
    # before its own deadline the node may still acknowledge, after it never
    assert leader.may_acknowledge(state) or clock.remaining() <= 0
    await _next(watch, lambda ch: ch.member is None and ch.node_id == leader.node_id, TTL + 5)
    t_gone = time.monotonic()
    assert not leader.may_acknowledge(state)
    assert deadline < t_gone  # the node was fenced before the server let the key go
    await watch.aclose()


async def test_repl_watch_delivers_every_change(cluster: Cluster) -> None:
    nodes = {n: await cluster.node(n) for n in ("a", "b", "c")}
    seen: list[TopicChange] = []
    got = asyncio.Event()

    async def follow() -> None:
        async for ch in nodes["c"].watch_topics():
            seen.append(ch)
            got.set()

    task = asyncio.create_task(follow())

    async def upto(n: int) -> None:
        while len(seen) < n:
            got.clear()
            await asyncio.wait_for(got.wait(), 10)

    try:
        await nodes["b"].create_topic("pre", 1)
        await upto(1)
        st, _ = await nodes["a"].create_topic("w", 3)
        await upto(2)
        leader = nodes[st.record.leader]
        follower = st.record.isr[1]
        st2 = await leader.shrink_isr(st, follower)
        st3 = await leader.expand_isr(st2, follower)
        await cluster.stack.enter_async_context(EtcdClient([cluster.etcd.endpoint]))
        await (await cluster.client()).delete(cluster.keys.topic("pre"))
        await upto(5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [ch.topic for ch in seen] == ["pre", "w", "w", "w", "pre"]
    assert [ch.state for ch in seen[1:4]] == [st, st2, st3]
    assert seen[4].state is None
    # a watch opened now starts with the records as they are
    late = nodes["a"].watch_topics()
    snap = await _next(late, lambda ch: True)
    assert snap == TopicChange("w", st3)
    await late.aclose()


async def test_repl_watch_from_compacted_revision(cluster: Cluster) -> None:
    client = await cluster.client()
    key = cluster.keys.topic("gone")
    first = await client.put(key, b"x")
    last = await client.put(key, b"y")
    await client.call("kv/compaction", {"revision": str(last), "physical": True})
    with pytest.raises(WatchCompacted) as info:
        await _next(client.watch_prefix(cluster.keys.topics, first), lambda ev: True)
    assert info.value.compact_revision == last
    now = await client.get(key)
    assert now is not None and now.value == b"y"


async def test_repl_client_skips_dead_endpoints(cluster: Cluster) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    dead_ep = f"127.0.0.1:{dead.getsockname()[1]}"
    try:
        async with EtcdClient([dead_ep, cluster.etcd.endpoint], timeout=2) as client:
            rev = await client.put(cluster.keys.topic("k"), b"v")
            kv = await client.get(cluster.keys.topic("k"))
            assert kv is not None and kv.mod_revision == rev
        async with EtcdClient([dead_ep], timeout=2) as client:
            with pytest.raises(EtcdUnavailable):
                await client.get(cluster.keys.topic("k"))
    finally:
        dead.close()


async def test_repl_lone_isr_leader_reelected_on_return(cluster: Cluster) -> None:
    a = await cluster.node("a")
    b = await cluster.node("b")
    st, _ = await a.create_topic("solo", 1)
    lone = b if st.record.leader == "b" else a
    other = a if lone is b else b
    failover = asyncio.create_task(other.run_failover())
    watch = other.watch_members()
    try:
        await _next(watch, lambda ch: True)
        await lone.session.stop_keepalive()
        await _next(watch, lambda ch: ch.member is None, timeout=TTL + 3)
        # no other ISR member: the topic waits, no unclean election onto `other`
        cur = await other.get_topic("solo")
        assert cur is not None and cur.record == st.record
        await lone.session.rejoin()
        topics = other.watch_topics()
        back = await _next(topics, lambda ch: ch.state is not None and ch.state.record.epoch == 2)
        await topics.aclose()
    finally:
        failover.cancel()
        await asyncio.gather(failover, return_exceptions=True)
        await watch.aclose()
    assert back.state is not None
    assert back.state.record.leader == lone.node_id
    assert back.state.record.leader_lease == lone.session.lease_id
    assert lone.may_acknowledge(back.state) and not lone.may_acknowledge(st)
