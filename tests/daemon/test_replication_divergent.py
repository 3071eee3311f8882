"""A follower in the ISR that holds entries the next leader does not: the old leader streamed a
publish to one follower (which wrote it) while the other, paused, never got it, and crashed
before the publish was committed; the paused one is elected. What happens to the extra entries
(replication/leader_stream.py "Rejoining", case 1): the follower is clean (its topic is empty:
only its replica log holds them), so it is neither reset nor truncated: the new leader's probe
finds its last entry beyond its own history and sends it what follows, this epoch's entries;
the tail stays, published and never acknowledged, as a producer's retry would have put it
again. The follower stays in the ISR, every acknowledged message of both epochs reaches it in
order, and when it is elected in turn it delivers them all, the old tail included: nothing
acknowledged is lost, nothing delivered was never published.

Real processes: three nsqpy-d nodes on loopback with their own data dirs, one etcd
(tests/support/etcd_server.py), the topic R=3 with all-isr acknowledgements. The node to be
elected is restarted with a long lease TTL, so that pausing it (SIGSTOP) cannot lapse its lease
whatever the machine's load; waits are bounded polls on /stats."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import pytest
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    History,
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    read_all,
    repl_stats,
)

from nsqpy.client import Producer
from nsqpy.testing.process import Nsqd, wait_for

pytestmark = [needs_etcd, pytest.mark.timeout(180)]

TOPIC = "dv"
ORPHANS = 40  # bodies only the old leader and one follower ever had


def _stats(n: Nsqd) -> dict:  # type: ignore[type-arg]
    r = repl_stats(n, TOPIC)
    assert r is not None
    return r


async def until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``pred`` in a thread (it does blocking HTTP) while the event loop runs on (a
    publish in flight must get sent); AssertionError after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not await asyncio.to_thread(pred):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _publish(n: Nsqd, history: History, bodies: list[bytes]) -> None:
    """MPUB ``bodies`` to ``n`` and wait for the acknowledgement."""
    history.attempted.update(bodies)
    p = Producer(n.tcp_address)
    try:
        await asyncio.wait_for(p.multi_publish(TOPIC, bodies), 20)
    finally:
        await p.stop()
    history.acked.update(bodies)


@pytest.mark.asyncio
async def test_isr_follower_holding_entries_the_new_leader_lacks(cluster: Nodes) -> None:
    # a follower stays in the isr while paused; the leader's lease is the short one
    nodes = [cluster.start(i, "--replica-timeout=60s") for i in (64, 65, 66)]
    create(nodes[0], TOPIC, 3, nodes)
    old = cluster.leader(TOPIC)
    rec = _stats(old)
    heir_id, keeper_id = rec["isr"][1], rec["isr"][2]  # the election takes isr order
    # the heir, restarted with a long lease: a pause cannot lapse it
    cluster.nodes[heir_id].stop()
    cluster.start(int(heir_id), "--replica-timeout=60s", "--etcd-lease-ttl=30")
    wait_for(lambda: len(cluster.isr(TOPIC)) == 3, 30, what="the heir back in the isr")
    assert list(_stats(old)["isr"])[1] == heir_id
    heir, keeper = cluster.nodes[heir_id], cluster.nodes[keeper_id]
    h = History()
    await _publish(old, h, [b"e1-%d" % i for i in range(200)])

    # the heir paused: the next publish reaches the keeper only, and is never committed
    os.kill(heir.pid, signal.SIGSTOP)
    try:
        orphans = [b"orphan-%d" % i for i in range(ORPHANS)]
        h.attempted.update(orphans)
        p = Producer(old.tcp_address)
        send = asyncio.ensure_future(p.multi_publish(TOPIC, orphans))

        def streamed() -> bool:
            f = _stats(old)["followers"]
            return f[keeper_id]["lag"] == 0 and f[heir_id]["lag"] >= ORPHANS

        await until(streamed, 20, "the orphans on the keeper, not on the heir")
        assert not send.done(), "acknowledged without the paused in-sync follower"
        keeper_depth = _stats(keeper)["replica_log_depth"]
        old.kill()
        t_kill = time.monotonic()
    finally:
        os.kill(heir.pid, signal.SIGCONT)
    await asyncio.gather(send, return_exceptions=True)  # the connection died unanswered
    await p.stop()

    # the heir leads epoch 2; the keeper, in its isr, is neither reset nor truncated
    wait_for(lambda: _stats(heir)["role"] == "leader", 30, what="the heir elected")
    elected = time.monotonic() - t_kill
    r = _stats(heir)
    assert r["epoch"] == 2 and keeper_id in r["isr"], r
    await _publish(heir, h, [b"e2-%d" % i for i in range(200)])
    k = _stats(keeper)
    assert k["role"] == "follower" and k["resets"] == 0, k
    assert k["replica_log_depth"] >= keeper_depth, (k, keeper_depth)  # the tail kept
    assert keeper_id in _stats(heir)["isr"]

    # the keeper serves: the heir leaves cleanly, the keeper is elected and delivers
    heir.stop()
    wait_for(lambda: _stats(keeper)["role"] == "leader", 30, what="the keeper elected")
    h.received["check"] = await read_all(keeper, TOPIC, h.acked)
    got = h.received["check"]
    v = h.verdict()
    tail = sum(1 for b in orphans if b in got)
    print(
        f"\ndivergent isr follower: {v.line()}; heir elected {elected:.2f}s after kill -9; "
        f"keeper's replica log {keeper_depth} before, orphans delivered by it {tail}/{ORPHANS}"
    )
    assert v.ok, v.line()  # every acknowledged message of both epochs, nothing unpublished
    assert tail in (0, ORPHANS), tail  # the tail is kept whole (or was never written)
