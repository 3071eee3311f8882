"""Followers' replica logs are trimmed of what every channel finished (replication/local.py
trim_log, after each progress round), with real processes: three nsqpy-d nodes and a real
etcd (tests/support/etcd_server.py), nsqpy's client.

2,000 messages read and finished on both channels leave no entry in the followers' logs
(``replication.trimmed`` 2,000, ``replica_log_depth`` 0); 100 more finished on one channel
only stay (the other still holds them); after a kill -9 of the leader the new one promotes
just those 100 and delivers them on that channel alone.

Deleting a replicated topic (/topic/delete on any node) deletes its etcd record, and every node
drops its copy and its replica log.
"""

from __future__ import annotations

import pytest
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    read_all,
    repl_stats,
)

from nsqpy.testing.process import Nsqd, wait_for

pytestmark = [needs_etcd, pytest.mark.timeout(120)]

TOPIC = "trim"


def _repl(n: Nsqd) -> dict:  # type: ignore[type-arg]
    return repl_stats(n, TOPIC) or {}


def _channels(n: Nsqd) -> list[dict]:  # type: ignore[type-arg]
    for t in n.stats(topic=TOPIC).get("topics") or []:
        return list(t.get("channels") or [])
    return []


@pytest.mark.asyncio
async def test_replica_logs_trimmed_of_what_every_channel_finished(cluster: Nodes) -> None:
    nodes = [cluster.start(i) for i in (111, 112, 113)]
    create(nodes[0], TOPIC, 3, nodes)
    leader = cluster.leader(TOPIC)
    followers = [n for n in nodes if n is not leader]
    for ch in ("a", "b"):
        leader.post("/channel/create", topic=TOPIC, channel=ch)
    first = [b"m%d" % i for i in range(2000)]
    for k in range(0, len(first), 200):
        leader.mpub(TOPIC, first[k : k + 200])
    for ch in ("a", "b"):
        got = await read_all(leader, TOPIC, set(first), 30, channel=ch)
        assert got.keys() == set(first)
    for f in followers:
        wait_for(
            lambda f=f: _repl(f).get("trimmed") == 2000 and _repl(f)["replica_log_depth"] == 0,
            20,
            what="the followers' logs trimmed of everything finished",
        )

    more = [b"n%d" % i for i in range(100)]
    leader.mpub(TOPIC, more)
    got = await read_all(leader, TOPIC, set(more), 30, channel="a")  # b still holds them
    assert got.keys() == set(more)
    rounds = {id(f): _repl(f)["progress_received"] for f in followers}
    for f in followers:  # two more rounds: b's hold is known, and nothing more goes
        wait_for(lambda f=f: _repl(f)["progress_received"] >= rounds[id(f)] + 2, 20)
        r = _repl(f)
        assert r["trimmed"] == 2000 and r["replica_log_depth"] == 100, r

    leader.kill()
    new = cluster.leader(TOPIC, followers)
    r = _repl(new)
    assert r["promoted"] == 100 and r["redelivered"] == 100, r
    depth = {c["channel_name"]: c["depth"] for c in _channels(new)}
    assert depth == {"a": 0, "b": 100}  # a finished all of them before the crash
    got_b = await read_all(new, TOPIC, set(more), 30, channel="b")
    assert got_b == dict.fromkeys(more, 1)


@pytest.mark.asyncio
async def test_deleting_a_replicated_topic_drops_it_everywhere(cluster: Nodes) -> None:
    """/topic/delete of a replicated topic (on a follower here) deletes its etcd record; every
    node drops its copy and its replica log files; a topic of that name made afterwards is a
    new record at epoch 1."""
    nodes = [cluster.start(i) for i in (114, 115, 116)]
    create(nodes[0], "gone", 3, nodes)
    leader = cluster.leader("gone")
    leader.mpub("gone", [b"x"] * 10)
    follower = next(n for n in nodes if n is not leader)
    for n in nodes:
        if n is not leader:
            wait_for(lambda n=n: (repl_stats(n, "gone") or {}).get("replica_log_depth") == 10)
    follower.post("/topic/delete", topic="gone")
    for n in nodes:
        wait_for(lambda n=n: not n.stats(topic="gone").get("topics"), 10, what="topic gone")
        assert not list(n.data_path.glob("gone#replica*")), sorted(n.data_path.iterdir())
    code, _, _ = leader.http("POST", "/topic/delete?topic=gone")
    assert code == 404  # nothing left to delete
    create(nodes[0], "gone", 3, nodes)
    r = repl_stats(cluster.leader("gone"), "gone")
    assert r is not None and r["epoch"] == 1 and r["promoted"] == 0
