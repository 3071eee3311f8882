"""Group commit of an R=3 topic under many producers (replication/leader_stream.py: one append
request carries every entry pending for a follower; one acknowledgement answers every
publish it covers). Three nsqpy-d nodes joined through a real etcd
(tests/support/etcd_server.py), --replica-ack=all-isr, followers acknowledging once written
(--replica-sync=write, the default) or after their fsync (--replica-sync=fsync).

- 16 producers, each its own connection with several PUBs in flight, 4 more sending MPUBs,
  and 2 publishing through a follower (forwarded to the leader), all at once: every publish
  is acknowledged, and a new channel on the leader delivers every acknowledged message exactly
  once and nothing else;
- every follower's replica log holds every entry, and its ``.last`` file (written only after
  the fsync of what it names) ends up naming the last one: the background fsync caught up.
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


async def _publish_all(leader_addr: str, follower_addr: str, topic: str) -> set[bytes]:
    """Publish from every producer at once; the bodies acknowledged."""
    acked: set[bytes] = set()

    async def pubs(p: Producer, who: str, lane: int) -> None:
        for k in range(PUB_ROUNDS):
            body = f"{who}-{lane}-{k}".encode()
            await p.publish(topic, body)
            acked.add(body)

    async def mpubs(p: Producer, who: str) -> None:
        for k in range(MPUB_ROUNDS):
            bodies = [f"{who}-{k}-{j}".encode() for j in range(MPUB_SIZE)]
            await p.multi_publish(topic, bodies)
            acked.update(bodies)

    producers: list[Producer] = []
    jobs = []
    for i in range(PUB_PRODUCERS):
        p = Producer(leader_addr)
        producers.append(p)
        jobs.extend(pubs(p, f"pub{i}", lane) for lane in range(PUBS_IN_FLIGHT))
    for i in range(MPUB_PRODUCERS):
        p = Producer(leader_addr)
        producers.append(p)
        jobs.append(mpubs(p, f"mpub{i}"))
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
    create(nodes[0], "many", 3, nodes)
    leader = cluster.leader("many")
    followers = [n for n in nodes if n is not leader]
    expected = (
        PUB_PRODUCERS * PUBS_IN_FLIGHT * PUB_ROUNDS
        + MPUB_PRODUCERS * MPUB_ROUNDS * MPUB_SIZE
        + FORWARDED * PUBS_IN_FLIGHT * PUB_ROUNDS
    )

    acked = await _publish_all(leader.tcp_address, followers[0].tcp_address, "many")
    assert len(acked) == expected

    got = await read_all(leader, "many", acked, timeout=60)
    assert set(got) == acked, f"missing {len(acked - set(got))}, unexpected {set(got) - acked}"
    assert [b for b, n in got.items() if n != 1] == []
    assert topic_stats(leader, "many")["message_count"] == expected

    epoch = (repl_stats(leader, "many") or {})["epoch"]
    for f in followers:
        wait_for(
            lambda f=f: (repl_stats(f, "many") or {}).get("replica_log_depth") == expected,
            20,
            what="every entry in every follower's replica log",
        )
        last = f.data_path / "many#replica.last"
        wait_for(
            lambda last=last: last.read_text().strip() == f"{epoch}:{expected - 1}",
            20,
            what="the follower's fsynced name reaching the last entry",
        )
