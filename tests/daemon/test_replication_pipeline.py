"""Pipelined replicated publishes (replication/tcp_publish.py, "Pipelining"): one connection
has several replicated publishes waiting for their commits at once, and every answer still
comes in the order of the commands, exact bytes over a raw socket. Three nsqpy-d nodes joined
through a real etcd (tests/support/etcd_server.py); one follower is stopped (SIGSTOP, with a long
--replica-timeout) so that no commit can happen while the commands go in.

- three PUBs and an MPUB to the replicated topic, then a PUB to an R=1 topic, a NOP and a PUB
  with a bad topic name, in one write: all four replicated publishes reach the leader's stream
  while the first is still uncommitted (its lag is 6 entries), the R=1 publish has not run
  yet (it waits behind them: the R=1 topic does not exist yet), and once the follower resumes
  the answers come in order: OK x5, then E_BAD_TOPIC and the close;
- many concurrent publishes through nsqpy's go-nsq-like Producer (one connection) are all
  acknowledged and all on every follower.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.raw_client import RawClient
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    repl_stats,
    topic_stats,
)

from nsqpy import wire
from nsqpy.client import Producer
from nsqpy.testing.process import wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(120),
]


def test_pipelined_publishes_answered_in_order(cluster: Nodes) -> None:
    nodes = [cluster.start(i, "--replica-timeout=60s") for i in (71, 72, 73)]
    create(nodes[0], "pipe", 3, nodes)
    leader = cluster.leader("pipe")
    follower = next(n for n in nodes if n is not leader)
    raw = RawClient(leader.tcp_port, timeout=20)
    try:
        raw.pub("pipe", b"warm")  # the links are up
        os.kill(follower.pid, signal.SIGSTOP)
        try:
            pub = wire.encode_command
            raw.send(
                pub(b"PUB", b"pipe", body=b"p1")
                + pub(b"PUB", b"pipe", body=b"p2")
                + pub(b"PUB", b"pipe", body=b"p3")
                + wire.encode_mpub(b"pipe", [b"m1", b"m2", b"m3"])
                + pub(b"PUB", b"plain", body=b"x")
                + pub(b"NOP")
                + pub(b"PUB", b"bad!topic", body=b"y")
            )
            # p1..p3 and m1..m3 are all in the stream before any is committed
            wait_for(
                lambda: (repl_stats(leader, "pipe") or {}).get("lag") == 6,
                10,
                what="six entries in flight on one connection",
            )
            assert topic_stats(leader, "plain") == {}  # the R=1 publish waits behind them
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        answers = [raw.read_non_heartbeat() for _ in range(6)]
        ok = (wire.FRAME_TYPE_RESPONSE, b"OK")
        assert answers[:5] == [ok] * 5
        assert answers[5][0] == wire.FRAME_TYPE_ERROR
        assert answers[5][1].startswith(b"E_BAD_TOPIC")
        assert raw.closed_by_server()
        assert topic_stats(leader, "plain")["message_count"] == 1
    finally:
        raw.close()


@pytest.mark.asyncio
async def test_concurrent_publishes_on_one_connection(cluster: Nodes) -> None:
    nodes = [cluster.start(i) for i in (74, 75, 76)]
    create(nodes[0], "conc", 3, nodes)
    leader = cluster.leader("conc")
    p = Producer(leader.tcp_address)
    try:
        await asyncio.wait_for(
            asyncio.gather(*(p.publish("conc", b"c%d" % i) for i in range(500))), 60
        )
    finally:
        await p.stop()
    for n in nodes:
        if n is leader:
            assert topic_stats(n, "conc")["message_count"] == 500
        else:
            wait_for(
                lambda n=n: (repl_stats(n, "conc") or {}).get("replica_log_depth") == 500,
                10,
                what="every publish on every follower",
            )
