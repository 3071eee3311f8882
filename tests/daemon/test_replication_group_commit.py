"""Group commit of R=3 topics under many producers (replication/leader_stream.py and
courier.py: one append request carries every entry pending for a follower, of every topic;
one acknowledgement answers every publish it covers). Three nsqpy-d nodes joined through a real etcd
(tests/support/etcd_server.py), --replica-ack=all-isr, followers acknowledging once written
(--replica-sync=write, the default) or after their fsync (--replica-sync=fsync).

- three R=3 topics led by one node; 16 producers, each its own connection with several PUBs
  in flight, 4 more sending MPUBs, and 2 publishing through a follower (forwarded to the
  leader), spread over the topics, all at once: every publish is acknowledged, and a new
  channel on the leader delivers every acknowledged message of each topic exactly once and
  nothing else;
- every follower's replica logs hold every entry, and their ``.last`` files (written only
  after the fsync of what they name) end up naming the last one: the background fsync caught
  up.
"""

from __future__ import annotations

import asyncio

import pytest
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    read_all,
    repl_stats,
    topic_stats,
)

from nsqpy.client import Producer
from nsqpy.replication.records import choose_placement
from nsqpy.testing.process import wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(180),
]

PUB_PRODUCERS = 16
PUBS_IN_FLIGHT = 4
PUB_ROUNDS = 10
MPUB_PRODUCERS = 4
MPUB_ROUNDS = 8
MPUB_SIZE = 20
FORWARDED = 2


async def _publish_all(
    leader_addr: str, follower_addr: str, topics: list[str]
) -> dict[str, set[bytes]]:
    """Publish from every producer at once, each lane to one topic; topic -> the bodies
    acknowledged."""
    acked: dict[str, set[bytes]] = {t: set() for t in topics}

    async def pubs(p: Producer, who: str, lane: int) -> None:
        topic = topics[lane % len(topics)]
        for k in range(PUB_ROUNDS):
            body = f"{who}-{lane}-{k}".encode()
            await p.publish(topic, body)
            acked[topic].add(body)

    async def mpubs(p: Producer, who: str, i: int) -> None:
        topic = topics[i % len(topics)]
        for k in range(MPUB_ROUNDS):
            bodies = [f"{who}-{k}-{j}".encode() for j in range(MPUB_SIZE)]
            await p.multi_publish(topic, bodies)
            acked[topic].update(bodies)

    producers: list[Producer] = []
    jobs = []
    for i in range(PUB_PRODUCERS):
        p = Producer(leader_addr)
        producers.append(p)
        jobs.extend(pubs(p, f"pub{i}", lane) for lane in range(PUBS_IN_FLIGHT))
    for i in range(MPUB_PRODUCERS):
        p = Producer(leader_addr)
        producers.append(p)
        jobs.append(mpubs(p, f"mpub{i}", i))
    for i in range(FORWARDED):
        p = Producer(follower_addr)
        producers.append(p)
        jobs.extend(pubs(p, f"fwd{i}", lane) for lane in range(PUBS_IN_FLIGHT))
    try:
        await asyncio.wait_for(asyncio.gather(*jobs), 120)
    finally:
        await asyncio.gather(*(p.stop() for p in producers), return_exceptions=True)
    return acked


@pytest.mark.asyncio
@pytest.mark.parametrize("sync", ["write", "fsync"])
async def test_many_producers_all_acknowledged_and_delivered_once(
    cluster: Nodes, sync: str
) -> None:
    nodes = [cluster.start(i, f"--replica-sync={sync}") for i in (121, 122, 123)]
    # three names whose placement (equal loads: rendezvous hashing) puts node 121 first, so
    # that one node leads them all and its requests to a follower carry all three
    names = (f"many{i}" for i in range(1000))
    topics = [t for t in names if choose_placement(t, 3, ["121", "122", "123"])[0] == "121"][:3]
    for t in topics:
        create(nodes[0], t, 3, nodes)
    leader = cluster.leader(topics[0])
    assert all(cluster.leader(t) is leader for t in topics)
    followers = [n for n in nodes if n is not leader]
    total = (
        PUB_PRODUCERS * PUBS_IN_FLIGHT * PUB_ROUNDS
        + MPUB_PRODUCERS * MPUB_ROUNDS * MPUB_SIZE
        + FORWARDED * PUBS_IN_FLIGHT * PUB_ROUNDS
    )

    acked = await _publish_all(leader.tcp_address, followers[0].tcp_address, topics)
    assert sum(len(a) for a in acked.values()) == total

    for t in topics:
        got = await read_all(leader, t, acked[t], timeout=60)
        missing, unexpected = acked[t] - set(got), set(got) - acked[t]
        assert not missing and not unexpected, (t, len(missing), unexpected)
        assert [b for b, n in got.items() if n != 1] == []
        assert topic_stats(leader, t)["message_count"] == len(acked[t])

        epoch = (repl_stats(leader, t) or {})["epoch"]
        for f in followers:
            wait_for(
                lambda f=f, t=t: (repl_stats(f, t) or {}).get("replica_log_depth") == len(acked[t]),
                20,
                what="every entry in every follower's replica log",
            )
            last = f.data_path / f"{t}#replica.last"
            wait_for(
                lambda last=last, t=t, epoch=epoch: (
                    (last.read_text().split() or ["-"])[0] == f"{epoch}:{len(acked[t]) - 1}"
                ),
                20,
                what="the follower's fsynced name reaching the last entry",
            )
