"""Replicated topics' data path with real processes: nsqpy-d nodes
on loopback (ephemeral ports, temp data dirs) joined through a real etcd
(tests/support/etcd_server.py), published to with nsqpy's go-nsq-like client.

- a replicated PUB/MPUB/DPUB is answered OK only once every in-sync follower has it in its
  replica log (the followers' /stats show the entries at the moment of the answer); with
  --min-isr=3 and a follower stopped (SIGSTOP) the publish is refused (E_PUB_FAILED); once
  resumed, the follower catches up and is re-admitted to the ISR;
- with --replicas=3 the first publish to a new topic makes it replicated;
- a publish to a follower is forwarded to the leader and answered once the leader answered;
  only the leader registers the topic with nsqlookupd;
- kill -9 of the leader while producers wait for their acknowledgements: a new leader is
  elected from the ISR, and every acknowledged message is read back from its channel (0
  missing), and nsqlookupd lists the new leader alone; duplicates (at-least-once) and the
  failover time are printed;
- a follower killed -9 and restarted on its data dir catches up and is re-admitted;
- a leader paused (SIGSTOP) past its lease is replaced, and once resumed steps down and
  forwards;
- --replica-ack=leader answers at once, with a follower stopped, which catches up after;
- R=1 stays as it was: no record, no "replication" key in /stats.

Waits are on events or bounded polls; the only timed waits are etcd's lease TTL (2 s here).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (  # the harness the replication tests share
    TTL,
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    read_all,
    repl_stats,
    topic_stats,
)

from nsqpy.client import Config, Producer
from nsqpy.client.conn import NSQError
from nsqpy.testing.process import Nsqlookupd, wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(120),
]


@pytest.mark.asyncio
async def test_replicated_publish_acked_after_followers_have_it(cluster: Nodes) -> None:
    lookupd = Nsqlookupd()
    try:
        la = f"--lookupd-tcp-address={lookupd.tcp_address}"
        nodes = [cluster.start(i, la) for i in (11, 12, 13)]
        create(nodes[0], "rt", 3, nodes)
        leader = cluster.leader("rt")
        followers = [n for n in nodes if n is not leader]
        r = repl_stats(leader, "rt")
        assert r is not None and r["replicas"] == 3 and len(r["isr"]) == 3 and r["epoch"] == 1
        for f in followers:
            fr = repl_stats(f, "rt")
            assert fr is not None and fr["role"] == "follower" and fr["leader"] == r["leader"]

        p = Producer(leader.tcp_address)
        await p.publish("rt", b"one")
        # acknowledged: both followers hold it in their replica logs already
        for f in followers:
            assert repl_stats(f, "rt")["replica_log_depth"] == 1  # type: ignore[index]
        await p.multi_publish("rt", [b"m%d" % i for i in range(100)])
        for f in followers:
            assert repl_stats(f, "rt")["replica_log_depth"] == 101  # type: ignore[index]
        await p.stop()

        # publish through a follower: forwarded, answered once the leader answered
        fp = Producer(followers[0].tcp_address)
        await fp.publish("rt", b"via-follower")
        await fp.multi_publish("rt", [b"fm1", b"fm2"])
        await fp.deferred_publish("rt", 0.1, b"deferred")
        await fp.stop()
        followers[1].pub("rt", b"http-via-follower")
        assert topic_stats(leader, "rt")["message_count"] == 106
        assert topic_stats(followers[0], "rt")["message_count"] == 0
        for f in followers:
            assert repl_stats(f, "rt")["replica_log_depth"] == 106  # type: ignore[index]

        # nsqlookupd hears of the topic from the leader only
        def producers() -> list[int]:
            return sorted(int(x["tcp_port"]) for x in lookupd.producers("rt"))

        wait_for(lambda: producers() == [leader.tcp_port], 10, what="leader-only registration")
        assert producers() == [leader.tcp_port]
    finally:
        lookupd.stop()


@pytest.mark.asyncio
async def test_replicated_publish_refused_below_min_isr(cluster: Nodes) -> None:
    nodes = [cluster.start(i, "--min-isr=3", "--replicas=3") for i in (21, 22, 23)]
    # --replicas=3: the first publish to a new topic, on any node, makes it replicated
    first = Producer(nodes[2].tcp_address)
    await first.publish("mi", b"first")
    await first.stop()
    for n in nodes:
        wait_for(lambda n=n: repl_stats(n, "mi"), 10, what="the record on every node")
    leader = cluster.leader("mi")
    assert repl_stats(leader, "mi")["replicas"] == 3  # type: ignore[index]
    assert topic_stats(leader, "mi")["message_count"] == 1
    p = Producer(leader.tcp_address)
    await p.publish("mi", b"ok")
    stopped = next(n for n in nodes if n is not leader)
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(NSQError) as err:
            await asyncio.wait_for(p.publish("mi", b"refused"), 15)
        assert "E_PUB_FAILED" in str(err.value)
        print(f"\nrefused after {time.monotonic() - t0:.2f}s (replica timeout 1 s)")
        r = repl_stats(leader, "mi")
        assert r is not None and len(r["isr"]) == 2
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    # resumed, it catches up from the leader and is re-admitted: publishing works again
    wait_for(lambda: len(repl_stats(leader, "mi")["isr"]) == 3, 15, what="re-admission")  # type: ignore[index]
    await p.stop()
    p = Producer(leader.tcp_address)
    await p.publish("mi", b"again")
    await p.stop()
    # the follower's log has "first", "ok", "again", and "refused" (streamed before it was
    # refused: a later leader may deliver it, as a producer's retry would); the leader's topic
    # never had "refused" (the high watermark: refused when it was committed)
    assert repl_stats(stopped, "mi")["replica_log_depth"] == 4  # type: ignore[index]
    assert topic_stats(leader, "mi")["message_count"] == 3
    assert repl_stats(leader, "mi")["undelivered"] == 1  # type: ignore[index]


@pytest.mark.asyncio
async def test_paused_leader_is_replaced_and_steps_down(cluster: Nodes) -> None:
    """SIGSTOP the leader past its lease (what etcd sees of a partition): another ISR member
    is elected; once resumed, the old leader acknowledges nothing itself any more and forwards
    to the new one; every acknowledged message is on the new leader."""
    nodes = [cluster.start(i) for i in (61, 62, 63)]
    create(nodes[0], "pz", 3, nodes)
    old = cluster.leader("pz")
    others = [n for n in nodes if n is not old]
    p = Producer(old.tcp_address)
    await p.publish("pz", b"before")
    await p.stop()
    os.kill(old.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        new = cluster.leader("pz", others)
        elected = time.monotonic() - t0
        fp = Producer(others[0].tcp_address)
        await asyncio.wait_for(fp.publish("pz", b"during"), 15)
        await fp.stop()
    finally:
        os.kill(old.pid, signal.SIGCONT)
    acked = 2
    deadline = time.monotonic() + 20
    while True:  # refused (E_PUB_FAILED) until it noticed; then forwarded
        op = Producer(old.tcp_address)
        try:
            await asyncio.wait_for(op.publish("pz", b"after"), 15)
            acked += 1
            break
        except (NSQError, OSError, TimeoutError):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        finally:
            await op.stop()
    r = repl_stats(old, "pz")
    assert r is not None and r["role"] != "leader" and r["epoch"] >= 2
    nr = repl_stats(new, "pz")
    assert nr is not None and nr["leader"] == r["leader"]
    # the new leader holds all three: "before" (promoted from its replica log) and the others
    assert topic_stats(new, "pz")["depth"] == acked == 3
    print(f"\nnew leader elected {elected:.2f}s after SIGSTOP (lease TTL {TTL}s)")


@pytest.mark.asyncio
async def test_follower_kill9_restart_catches_up(cluster: Nodes, tmp_path: Path) -> None:
    """A follower killed -9 leaves the ISR; restarted on its data dir (same node id, once its
    old lease lapsed) it still has what it acknowledged, gets the rest from the leader, and is
    re-admitted."""
    dirs = {i: tmp_path / f"n{i}" for i in (71, 72, 73)}
    for d in dirs.values():
        d.mkdir()
    nodes = [cluster.start(i, data_path=dirs[i]) for i in dirs]
    create(nodes[0], "fr", 3, nodes)
    leader = cluster.leader("fr")
    victim = next(n for n in nodes if n is not leader)
    victim_id = next(i for i, n in cluster.nodes.items() if n is victim)
    p = Producer(leader.tcp_address)
    await p.multi_publish("fr", [b"a%d" % i for i in range(50)])
    victim.kill()
    await p.multi_publish("fr", [b"b%d" % i for i in range(50)])  # after the replica timeout
    assert len(repl_stats(leader, "fr")["isr"]) == 2  # type: ignore[index]
    back = cluster.start(int(victim_id), data_path=dirs[int(victim_id)])
    wait_for(lambda: len(repl_stats(leader, "fr")["isr"]) == 3, 20, what="re-admission")  # type: ignore[index]
    assert repl_stats(back, "fr")["replica_log_depth"] == 100  # type: ignore[index]
    await p.multi_publish("fr", [b"c"])
    assert repl_stats(back, "fr")["replica_log_depth"] == 101  # type: ignore[index]
    await p.stop()


@pytest.mark.asyncio
async def test_replica_ack_leader_answers_without_followers(cluster: Nodes) -> None:
    nodes = [cluster.start(i, "--replica-ack=leader", "--replica-timeout=10s") for i in (51, 52)]
    create(nodes[0], "la", 2, nodes)
    leader = cluster.leader("la")
    follower = next(n for n in nodes if n is not leader)
    p = Producer(leader.tcp_address)
    await p.publish("la", b"a")
    wait_for(lambda: repl_stats(follower, "la")["replica_log_depth"] == 1, 10)  # type: ignore[index]
    wait_for(lambda: repl_stats(leader, "la")["lag"] == 0, 10)  # type: ignore[index]
    os.kill(follower.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        await asyncio.wait_for(p.multi_publish("la", [b"b", b"c"]), 5)
        assert time.monotonic() - t0 < 1.0  # not waiting for the stopped follower
        assert repl_stats(leader, "la")["lag"] == 2  # type: ignore[index]
    finally:
        os.kill(follower.pid, signal.SIGCONT)
    # the follower catches up behind
    wait_for(lambda: repl_stats(follower, "la")["replica_log_depth"] == 3, 10)  # type: ignore[index]
    await p.stop()


@pytest.mark.asyncio
async def test_replication_off_for_r1_topics(cluster: Nodes) -> None:
    n = cluster.start(31)
    n.pub("plain", b"x")
    assert repl_stats(n, "plain") is None
    assert topic_stats(n, "plain")["depth"] == 1
    assert "replication" not in topic_stats(n, "plain")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_leader_kill9_loses_no_acknowledged_message(cluster: Nodes) -> None:
    total, producers, batch = 20_000, 8, 20
    lookupd = Nsqlookupd()
    la = f"--lookupd-tcp-address={lookupd.tcp_address}"
    try:
        await _leader_kill9(cluster, lookupd, la, total, producers, batch)
    finally:
        lookupd.stop()


async def _leader_kill9(
    cluster: Nodes, lookupd: Nsqlookupd, la: str, total: int, producers: int, batch: int
) -> None:
    nodes = [cluster.start(i, la) for i in (41, 42, 43)]
    create(nodes[0], "kl", 3, nodes)
    leader = cluster.leader("kl")
    addrs = [n.tcp_address for n in nodes]
    acked: set[bytes] = set()
    killed_at: list[float] = []
    first_ack_after_kill: list[float] = []
    kill_after = total // 3
    deadline = time.monotonic() + 90

    async def produce(i: int) -> None:
        k = i % len(addrs)
        p = Producer(addrs[k], Config(dial_timeout=1.0))
        seq = 0
        per = total // producers
        while seq < per:
            bodies = [b"p%d-%d" % (i, s) for s in range(seq, min(seq + batch, per))]
            sent_at = time.monotonic()
            try:
                await asyncio.wait_for(p.multi_publish("kl", bodies), 10)
            except (OSError, NSQError, TimeoutError, ConnectionError):
                assert time.monotonic() < deadline, "producers did not finish in time"
                await p.stop()
                k = (k + 1) % len(addrs)
                p = Producer(addrs[k], Config(dial_timeout=1.0))
                await asyncio.sleep(0.05)
                continue
            if killed_at and sent_at > killed_at[0] and not first_ack_after_kill:
                # failover: from the kill to the first publish sent after it acknowledged
                first_ack_after_kill.append(time.monotonic())
            acked.update(bodies)
            seq += len(bodies)
            if not killed_at and len(acked) >= kill_after:
                killed_at.append(time.monotonic())
                leader.kill()  # SIGKILL
        await p.stop()

    t0 = time.monotonic()
    await asyncio.gather(*(produce(i) for i in range(producers)))
    elapsed = time.monotonic() - t0
    assert killed_at and len(acked) == total
    survivors = [n for n in nodes if n is not leader]
    new = cluster.leader("kl", survivors)
    r = repl_stats(new, "kl")
    assert r is not None and r["epoch"] >= 2 and r["role"] == "leader"
    # consumers find the new leader, and only it, through nsqlookupd
    wait_for(
        lambda: [int(x["tcp_port"]) for x in lookupd.producers("kl")] == [new.tcp_port],
        10,
        what="the new leader registered alone",
    )

    got = await read_all(new, "kl", acked, 60, channel="c")
    missing = acked - got.keys()
    received = sum(got.values())
    dups = received - len(got)
    failover = first_ack_after_kill[0] - killed_at[0] if first_ack_after_kill else -1.0
    print(
        f"\nacknowledged {len(acked)} in {elapsed:.1f}s, missing {len(missing)}, received "
        f"{received}, duplicates {dups}, promoted {r['promoted']} (redelivered "
        f"{r['redelivered']}: the channel was made after the failover), "
        f"failover {failover:.2f}s (lease TTL {TTL}s), new leader {r['leader']}"
    )
    assert not missing
