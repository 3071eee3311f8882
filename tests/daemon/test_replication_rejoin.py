"""Replicated topics across leader changes: a deposed leader or a node that was
away while the leader changed rejoins as a follower, is reset or caught up from the new
leader's history (replication/leader_stream.py "Rejoining") and is re-admitted to the ISR, so that
after any failover every placement node can be an in-sync replica again.

Real processes: nsqpy-d nodes on loopback with their own data dirs, a real etcd
(tests/support/etcd_server.py), producers that wait for their acknowledgements (nsqpy's client,
MPUBs of 20, sent to any live node and retried on another one after an error).

- a leader killed -9 mid-load, restarted on its data dir: it empties its own topic (its old
  data, unacknowledged tail included), takes the new leader's history, is back in the ISR;
  then with the new leader killed and the third node gone it is elected, and every
  acknowledged message is read from it (0 missing), nothing never published;
- a rolling restart of all three nodes (SIGTERM, the same data dir, the next one once the
  restarted node is back in the ISR), the leader included, under load: 0 lost, the ISR all
  three at the end; duplicates and the failover times printed;
- a partition: each node in its own network namespace (tests/support/netlab.py, root needed), etcd
  on the machine; the leader's link cut while producers publish to every node: a new leader once
  its lease lapsed, and once healed the old leader is reset and re-admitted; 0 lost.

Waits are on events or bounded polls; the only timed waits are etcd's lease TTL (2 s here).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
from support import netlab
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    TTL,
    History,
    Nodes,
    Producers,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    read_all,
    repl_stats,
)

from nsqpy.client import Producer
from nsqpy.testing.process import wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(120),
]

TOPIC = "rj"


def load(cluster: Nodes, history: History) -> Producers:
    """4 producers, MPUBs of 20 to any live node, paced (10 ms between a producer's
    publishes), until stopped."""
    p = Producers(
        history, TOPIC, lambda: [n.tcp_address for n in cluster.live()], 10**7, 4, 20, 110, 0.01
    )
    p.start()
    return p


@pytest.mark.asyncio
async def test_deposed_leader_rejoins_isr_and_takes_over(cluster: Nodes) -> None:
    # messages on disk at once, so that the killed leader's topic still holds its own data
    nodes = [cluster.start(i, "--mem-queue-size=0") for i in (81, 82, 83)]
    create(nodes[0], TOPIC, 3, nodes)
    old = cluster.leader(TOPIC)
    old_id = cluster.node_id(old)
    h = History()
    prod = load(cluster, h)
    await prod.until(2000)
    killed = time.monotonic()
    old.kill()  # SIGKILL: its topic holds acknowledged and unacknowledged messages
    new = cluster.leader(TOPIC, cluster.live())
    elected = time.monotonic() - killed
    await prod.until(len(h.acked) + 1000)

    back = cluster.restart(old_id)
    wait_for(lambda: old_id in cluster.isr(TOPIC), 30, what="the old leader readmitted")
    readmitted = time.monotonic() - killed
    r = repl_stats(back, TOPIC)
    assert r is not None and r["role"] == "follower" and r["epoch"] >= 2
    wait_for(lambda: "messages of this node's own dropped" in back.log_text(), what="reset logged")
    await prod.until(len(h.acked) + 1000)  # it is waited for again
    await prod.stop()
    acked_before = len(h.acked)

    # the third node goes, then the new leader: the restarted one is the only ISR member left
    third = next(n for n in cluster.live() if n is not new and n is not back)
    third.kill()
    p = Producer(new.tcp_address)
    h.attempted.add(b"after-third")
    await asyncio.wait_for(p.publish(TOPIC, b"after-third"), 15)  # drops the third from the ISR
    await p.stop()
    h.acked.add(b"after-third")
    wait_for(lambda: len(repl_stats(new, TOPIC)["isr"]) == 2, 10, what="isr of two")  # type: ignore[index]
    new.kill()
    t0 = time.monotonic()
    wait_for(lambda: (repl_stats(back, TOPIC) or {}).get("role") == "leader", 20, what="takeover")
    takeover = time.monotonic() - t0
    h.received["check"] = await read_all(back, TOPIC, h.acked)
    v = h.verdict()
    print(
        f"\ndeposed leader: {v.line()} ({acked_before} under load, {prod.failures} failed "
        f"batches retried), new leader elected {elected:.2f}s after kill -9, old leader "
        f"readmitted {readmitted:.2f}s after it, takeover {takeover:.2f}s (lease TTL {TTL}s)"
    )
    assert v.ok, v.line()  # 0 lost, nothing delivered that was never published


@pytest.mark.slow
@pytest.mark.asyncio
async def test_rolling_restart_loses_nothing(cluster: Nodes) -> None:
    ids = ("91", "92", "93")
    nodes = [cluster.start(int(i)) for i in ids]
    create(nodes[0], TOPIC, 3, nodes)
    first = cluster.node_id(cluster.leader(TOPIC))
    order = [first, *(i for i in ids if i != first)]
    h = History()
    prod = load(cluster, h)
    await prod.until(1000)
    times: list[str] = []
    for i in order:
        n = cluster.nodes[i]
        was_leader = cluster.current_leader(TOPIC) is n
        t0 = time.monotonic()
        assert n.stop() == 0
        if was_leader:
            cluster.leader(TOPIC, cluster.live())
        cluster.restart(i)
        wait_for(lambda: len(cluster.isr(TOPIC)) == 3, 30, what=f"node {i} back in the isr")
        times.append(f"{i}{'(leader)' if was_leader else ''} {time.monotonic() - t0:.1f}s")
        await prod.until(len(h.acked) + 500)
    await prod.stop()
    final = cluster.current_leader(TOPIC)
    assert final is not None
    r = repl_stats(final, TOPIC)
    assert r is not None and len(r["isr"]) == 3 and r["epoch"] >= 3
    h.received["check"] = await read_all(final, TOPIC, h.acked)
    v = h.verdict()
    gaps = sorted(prod.gaps)
    print(
        f"\nrolling restart {', '.join(times)}: {v.line()}, failed batches {prod.failures}, "
        f"epoch {r['epoch']}, longest publish gap {gaps[-1] if gaps else 0:.2f}s, load "
        f"{os.getloadavg()[0]:.1f}"
    )
    assert v.ok, v.line()
    # the first leader, restarted with its topic on disk, was reset by the new one
    wait_for(
        lambda: "messages of this node's own dropped" in cluster.nodes[first].log_text(),
        what="the first leader's reset logged",
    )


#: A producer inside a network host: PUBs to argv[1] (host:port) of topic argv[2] for at most
#: argv[3] seconds, one at a time, printing "ack T" (CLOCK_MONOTONIC seconds, the machine's
#: clock in every namespace) for each OK and "err T" for each failure (then a new connection).
IN_HOST_PRODUCER = """
import socket, struct, sys, time
addr, topic, secs = sys.argv[1], sys.argv[2].encode(), float(sys.argv[3])
host, port = addr.rsplit(":", 1)
end = time.monotonic() + secs
sock, n = None, 0
while time.monotonic() < end:
    try:
        if sock is None:
            sock = socket.create_connection((host, int(port)), timeout=0.5)
            sock.sendall(b"  V2")
        body = b"h%d" % n
        sock.sendall(b"PUB " + topic + b"\\n" + struct.pack(">I", len(body)) + body)
        head = b""
        while len(head) < 8:
            part = sock.recv(8 - len(head))
            if not part:
                raise OSError("closed")
            head += part
        size, kind = struct.unpack(">Ii", head)
        rest = b""
        while len(rest) < size - 4:
            rest += sock.recv(size - 4 - len(rest))
        if kind == 0 and rest == b"OK":
            print("ack %.3f %s" % (time.monotonic(), body.decode()), flush=True)
            n += 1
        elif rest != b"_heartbeat_":
            raise OSError(rest)
    except OSError:
        print("err %.3f" % time.monotonic(), flush=True)
        if sock is not None:
            sock.close()
        sock = None
        time.sleep(0.05)
"""


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.skipif(netlab.unavailable() is not None, reason=f"netlab: {netlab.unavailable()}")
async def test_partitioned_leader_rejoins_isr_after_heal(tmp_path: Path) -> None:
    """Each node in its own network namespace (tests/support/netlab.py), etcd on the machine. The
    leader's link is cut while producers publish to it and to the others, one of them inside
    the leader's own host (which still reaches it): that one's last acknowledgement from the
    cut-off leader comes within the lease TTL of the cut; a new leader is elected once the
    lease lapsed; healed, the old leader is reset and re-admitted; every acknowledged message
    is read from the final leader, nothing delivered that was never published."""
    with netlab.NetLab(3) as lab:
        etcd = EtcdServer(tmp_path / "etcd", host=lab.gateway)
        cluster = Nodes(etcd, "partition", tmp_path, lab)
        try:
            nodes = [cluster.start(101 + k, "--mem-queue-size=0") for k in range(3)]
            create(nodes[0], TOPIC, 3, nodes)
            old = cluster.leader(TOPIC)
            old_id = cluster.node_id(old)
            others = [n for n in nodes if n is not old]
            h = History()
            prod = load(cluster, h)
            await prod.until(1500)
            inside = await asyncio.create_subprocess_exec(
                *lab.command(
                    cluster.hosts[old_id],
                    [sys.executable, "-c", IN_HOST_PRODUCER, old.tcp_address, TOPIC, "6"],
                ),
                stdout=asyncio.subprocess.PIPE,
            )
            assert inside.stdout is not None
            first = await asyncio.wait_for(inside.stdout.readline(), 10)
            assert first.startswith(b"ack "), first  # it publishes to the leader
            cut = time.monotonic()
            lab.cut(cluster.hosts[old_id])
            try:
                new = await asyncio.to_thread(cluster.leader, TOPIC, others)
                elected = time.monotonic() - cut
                at_cut = len(h.acked)
                await prod.until(at_cut + 1000)  # through the other nodes meanwhile
                out, _ = await asyncio.wait_for(inside.communicate(), 20)
            finally:
                lab.heal(cluster.hosts[old_id])
            healed = time.monotonic()
            acks = [line.split() for line in (first + out).decode().splitlines()]
            acks = [a for a in acks if a[0] == "ack"]
            # h0..hN acknowledged, h(N+1) maybe sent when the link went (sent again after errors)
            h.attempted.update(b"h%d" % k for k in range(len(acks) + 1))
            h.acked.update(a[2].encode() for a in acks)
            last = max(float(a[1]) for a in acks)
            await asyncio.to_thread(
                wait_for,
                lambda: old_id in set(repl_stats(new, TOPIC)["isr"]),  # type: ignore[index]
                30,
                0.05,
                "the old leader readmitted",
            )
            readmitted = time.monotonic() - healed
            await prod.until(len(h.acked) + 500)
            await prod.stop()
            assert (repl_stats(old, TOPIC) or {}).get("role") == "follower"
            h.received["check"] = await read_all(new, TOPIC, h.acked)
            v = h.verdict()
            print(
                f"\npartition: {v.line()} ({at_cut} before the cut), failed batches "
                f"{prod.failures}, in-host producer's last acknowledgement from the cut-off "
                f"leader {last - cut:+.2f}s after the cut, new leader elected {elected:.2f}s "
                f"after the cut (lease TTL {TTL}s), old leader readmitted {readmitted:.2f}s "
                f"after healing"
            )
            assert last - cut <= TTL, "the cut-off leader acknowledged past its lease"
            assert v.ok, v.line()
        finally:
            cluster.stop()
            etcd.stop()
