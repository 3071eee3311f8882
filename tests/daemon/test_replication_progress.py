"""Replicated topics' high watermark and channel-progress replication with real
processes: nsqpy-d nodes on loopback joined through a real etcd (tests/support/etcd_server.py).

- high watermark: with a follower stopped (SIGSTOP, a replica timeout long enough to keep it in
  the ISR), a PUB to the leader is neither acknowledged nor delivered to the leader's consumer;
  once the follower resumes, the PUB is answered OK and the message delivered;
- progress: two channels on the leader, one finishing every message, one finishing half and
  holding the rest in flight; once a progress round reached the followers, the leader is
  killed -9; the new leader gives the first channel only what was published after the round
  (none here) and the second its unfinished half, loses no acknowledged message on either, and
  its /stats ``redelivered`` is exactly what its channels delivered.

Waits are on events or bounded polls; one timed wait: the second that shows the held PUB is
not delivered.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import time
from typing import Any

import pytest
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    repl_stats,
)

from nsqpy.client import Config, Consumer, Message, Producer
from nsqpy.testing.process import Nsqd, wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(90),
]


@pytest.fixture
def nodes(cluster: Nodes) -> Nodes:
    """The harness's cluster (tests/support/replication_cluster.py): own --etcd-cluster,
    stopped after."""
    return cluster


def channel_stats(n: Nsqd, topic: str, channel: str) -> dict[str, Any]:
    for t in n.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            for c in t.get("channels") or []:
                if c["channel_name"] == channel:
                    return dict(c)
    return {}


async def until(pred: Any, timeout: float, what: str) -> None:
    """Poll ``pred()`` without blocking the loop (the test's consumers run on it)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def raw_pub(address: str, topic: str, body: bytes) -> socket.socket:
    """A PUB written on a fresh V2 connection; its answer is left unread."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"  V2" + b"PUB %s\n" % topic.encode() + struct.pack(">I", len(body)) + body)
    return s


def read_frame(s: socket.socket, timeout: float) -> bytes:
    s.settimeout(timeout)
    head = b""
    while len(head) < 8:
        chunk = s.recv(8 - len(head))
        assert chunk, "connection closed"
        head += chunk
    size, _kind = struct.unpack(">II", head)
    data = b""
    while len(data) < size - 4:
        chunk = s.recv(size - 4 - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


@pytest.mark.asyncio
async def test_replication_hwm_channel_sees_only_committed(nodes: Nodes) -> None:
    cluster = nodes
    started = [cluster.start(i, "--replica-timeout=30s") for i in (81, 82, 83)]
    create(started[0], "hw", 3, started)
    leader = cluster.leader("hw")
    got: list[bytes] = []
    arrived = asyncio.Event()

    def handler(msg: Message) -> None:
        got.append(msg.body)
        arrived.set()

    c = Consumer("hw", "c", Config(max_in_flight=10))
    c.add_handler(handler)
    await c.connect_to_nsqd(leader.tcp_address)
    p = Producer(leader.tcp_address)
    await p.publish("hw", b"warm")
    await asyncio.wait_for(arrived.wait(), 10)
    await p.stop()
    arrived.clear()
    stopped = next(n for n in started if n is not leader)
    os.kill(stopped.pid, signal.SIGSTOP)
    s: socket.socket | None = None
    try:
        s = raw_pub(leader.tcp_address, "hw", b"held")
        # the leader has it in its stream, waiting for the stopped follower...
        wait_for(lambda: repl_stats(leader, "hw")["lag"] == 1, 10, what="the entry pending")  # type: ignore[index]
        # ...and neither its topic nor its channel has it: nothing delivered
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(arrived.wait(), 1.0)
        assert got == [b"warm"]
        assert channel_stats(leader, "hw", "c")["message_count"] == 1
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert s is not None
    try:
        # resumed: the follower takes the entry, the commit point passes it, the PUB is
        # answered OK and the message delivered
        await asyncio.wait_for(arrived.wait(), 15)
        assert got == [b"warm", b"held"]
        assert read_frame(s, 10) == b"OK"
    finally:
        s.close()
        await c.stop(5)


@pytest.mark.asyncio
async def test_replication_progress_bounds_failover_redelivery(nodes: Nodes) -> None:
    cluster = nodes
    total = 2000
    started = [cluster.start(i) for i in (91, 92, 93)]
    create(started[0], "pg", 3, started)
    leader = cluster.leader("pg")
    followers = [n for n in started if n is not leader]
    a_done: set[bytes] = set()
    b_done: set[bytes] = set()
    b_held: set[bytes] = set()
    everything = asyncio.Event()

    def check() -> None:
        if len(a_done) == total and len(b_done) + len(b_held) == total:
            everything.set()

    def on_a(msg: Message) -> None:
        a_done.add(msg.body)
        check()

    def on_b(msg: Message) -> None:
        if int(msg.body[1:]) % 2:  # the odd ones stay in flight, unanswered
            msg.disable_auto_response()
            b_held.add(msg.body)
        else:
            b_done.add(msg.body)
        check()

    ca = Consumer("pg", "a", Config(max_in_flight=200))
    ca.add_handler(on_a)
    cb = Consumer("pg", "b", Config(max_in_flight=total))
    cb.add_handler(on_b)
    await ca.connect_to_nsqd(leader.tcp_address)
    await cb.connect_to_nsqd(leader.tcp_address)
    p = Producer(leader.tcp_address)
    acked: set[bytes] = set()
    for i in range(0, total, 100):
        bodies = [b"m%d" % j for j in range(i, i + 100)]
        await p.multi_publish("pg", bodies)
        acked.update(bodies)
    await p.stop()
    await asyncio.wait_for(everything.wait(), 30)
    await until(
        lambda: (
            channel_stats(leader, "pg", "a")["in_flight_count"] == 0
            and channel_stats(leader, "pg", "b")["in_flight_count"] == total // 2
        ),
        10,
        "the FINs taken",
    )
    # two more rounds reach the followers: the second one was taken after the FINs
    seen = [repl_stats(f, "pg")["progress_received"] for f in followers]  # type: ignore[index]
    for f, n in zip(followers, seen, strict=True):
        await until(
            lambda f=f, n=n: repl_stats(f, "pg")["progress_received"] >= n + 2,  # type: ignore[index]
            10,
            "two progress rounds",
        )
    side = [f.data_path / "pg#replica.progress" for f in followers]
    assert all(os.path.getsize(x) > 0 for x in side)
    t0 = time.monotonic()
    leader.kill()
    await ca.stop(1)
    await cb.stop(1)
    new = cluster.leader("pg", followers)
    r = repl_stats(new, "pg")
    # every entry either trimmed (finished on both channels, at the log's front) or promoted
    assert r is not None and r["role"] == "leader" and r["promoted"] + r["trimmed"] == total
    failover = time.monotonic() - t0

    again: dict[str, list[bytes]] = {"a": [], "b": []}
    consumers = []
    for name in ("a", "b"):
        c = Consumer("pg", name, Config(max_in_flight=total))
        c.add_handler(lambda msg, name=name: again[name].append(msg.body))
        await c.connect_to_nsqd(new.tcp_address)
        consumers.append(c)
    b_expected = acked - b_done
    await until(lambda: b_expected <= set(again["b"]), 20, "b's unfinished half again")
    await until(
        lambda: all(
            channel_stats(new, "pg", ch).get("depth") == 0
            and channel_stats(new, "pg", ch).get("in_flight_count") == 0
            for ch in ("a", "b")
        ),
        10,
        "both channels drained",
    )
    for c in consumers:
        await c.stop(5)
    redelivered = repl_stats(new, "pg")["redelivered"]  # type: ignore[index]
    print(
        f"\nacknowledged {len(acked)}; after kill -9 of the leader: channel a got "
        f"{len(again['a'])} again, channel b {len(again['b'])} (its {len(b_held)} unfinished); "
        f"redelivered {redelivered}, new leader after {failover:.2f}s"
    )
    # nothing acknowledged is missing on either channel
    assert acked <= a_done | set(again["a"])
    assert acked <= b_done | set(again["b"])
    # a finished everything before the round: nothing again; b: exactly its unfinished half
    assert again["a"] == []
    assert sorted(again["b"]) == sorted(b_held)
    assert redelivered == len(again["a"]) + len(again["b"]) == total // 2


@pytest.mark.asyncio
async def test_replication_progress_final_round_at_clean_exit(nodes: Nodes) -> None:
    """SIGTERM of the leader right after its consumer finished everything (well inside the
    round interval): its exit sends one last round, so the new leader redelivers nothing."""
    cluster = nodes
    started = [cluster.start(i) for i in (94, 95, 96)]
    create(started[0], "ce", 3, started)
    leader = cluster.leader("ce")
    followers = [n for n in started if n is not leader]
    done: set[bytes] = set()
    c = Consumer("ce", "a", Config(max_in_flight=200))
    c.add_handler(lambda msg: done.add(msg.body))
    await c.connect_to_nsqd(leader.tcp_address)
    # the channel is named in a round first (a round needs something put into the topic)
    p = Producer(leader.tcp_address)
    await p.publish("ce", b"first")
    await until(lambda: repl_stats(followers[0], "ce")["progress_received"] > 0, 10, "a round")  # type: ignore[index]
    bodies = [b"x%d" % i for i in range(200)]
    await p.multi_publish("ce", bodies)
    await p.stop()
    await until(
        lambda: len(done) == 201 and channel_stats(leader, "ce", "a")["in_flight_count"] == 0,
        10,
        "every message finished",
    )
    await asyncio.to_thread(leader.stop)
    await c.stop(1)
    new = cluster.leader("ce", followers)
    again: list[bytes] = []
    c2 = Consumer("ce", "a", Config(max_in_flight=200))
    c2.add_handler(lambda msg: again.append(msg.body))
    await c2.connect_to_nsqd(new.tcp_address)
    await until(lambda: channel_stats(new, "ce", "a").get("depth") == 0, 10, "a drained")
    await c2.stop(1)
    r = repl_stats(new, "ce")
    assert r is not None and r["promoted"] + r["trimmed"] == 201
    assert again == [] and r["redelivered"] == 0
