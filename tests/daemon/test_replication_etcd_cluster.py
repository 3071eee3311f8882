"""Replicated topics over a three-member etcd cluster (tests/support/etcd_server.py EtcdCluster:
three etcd 3.4 processes on loopback, each with its own data dir), every member's client address in
``--etcd-endpoints``:

- the etcd client fails over between members for every call (kv, txn, lease grant, keepalive,
  revoke, watch): a member that refuses connections and one that accepts them and never
  answers are skipped, and the hung one is not tried again by the calls after (it counts its
  connections); a caller giving up on a hung member moves the next call on too; a watch whose
  member is killed -9 goes on through another from the next revision (no gap, no repeat); a
  lease outlives several TTLs through a member's kill -9 while its node session keeps it;
- three nsqpy-d nodes, an R=3 topic, readers on two channels through nsqlookupd and producers
  that wait for every acknowledgement: one etcd member killed -9 under the load, then the
  nsqpy leader: publishes, the failover and the lookups go on, and the longest gap between two
  acknowledgements stays below the lease TTL plus a wide margin; then two members killed (no
  quorum): publishes are refused over TCP (E_PUB_FAILED / E_MPUB_FAILED) and HTTP /pub (503
  PUB_FAILED) with words naming the etcd lease, and resume once one member is back; every
  acknowledged message of the whole test is delivered on both channels (0 lost).

The timings (gaps, time to refusal, recovery) are printed. Waits are on events or bounded
polls run off the event loop, so producers keep publishing while the test waits; the only
timed waits are etcd's lease TTL (2 s) and how long the no-quorum state is held.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support.etcd_server import EtcdCluster, needs_etcd
from support.replication_cluster import TTL, History, Nodes, Producers, Readers, create, repl_stats

from nsqpy.client import Producer
from nsqpy.client.conn import NSQError
from nsqpy.replication import EtcdClient, Keys, NodeInfo, NodeSession, default_root
from nsqpy.replication.records import cmp_absent, op_put
from nsqpy.testing.process import Nsqd, Nsqlookupd

pytestmark = [needs_etcd, pytest.mark.asyncio]

TOPIC = "orders"
CHANNELS = ["billing", "audit"]
T = TypeVar("T")


@pytest.fixture(name="etcds")
def etcds_fixture(tmp_path: Path) -> Iterator[EtcdCluster]:
    """Three etcd members of the test's own (each test kills some)."""
    etcds = EtcdCluster(tmp_path / "etcd")
    try:
        yield etcds
    finally:
        etcds.stop()


async def until(pred: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``pred`` (run in a thread: it may do blocking HTTP) until truthy, without holding
    the event loop; AssertionError after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        v = await asyncio.to_thread(pred)
        if v:
            return v
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


class Hung:
    """A TCP listener that accepts connections and never answers (an etcd member that hangs);
    ``accepted`` counts the connections it got."""

    def __init__(self) -> None:
        self.accepted = 0
        self.endpoint = ""
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.endpoint = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _conn(self, _r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(w)  # held open, never written to

    def close(self) -> None:
        for w in self._writers:
            w.close()
        if self._server is not None:
            self._server.close()


async def test_repl_etcd_client_fails_over_between_members(etcds: EtcdCluster) -> None:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    dead = f"127.0.0.1:{refused.getsockname()[1]}"
    hung = Hung()
    await hung.start()
    keys = Keys(default_root("failover"))
    m0, m1, m2 = etcds.members
    clients: list[EtcdClient] = []
    session: NodeSession | None = None
    watch = None
    try:
        # every call, the first one skipping a refusing and a hung endpoint
        client = EtcdClient([dead, hung.endpoint, *etcds.endpoints], timeout=1.0)
        clients.append(client)
        rev = await client.put(keys.topic("a"), b"1")
        assert hung.accepted == 1
        kv = await client.get(keys.topic("a"))
        assert kv is not None and kv.mod_revision == rev
        res = await client.txn([cmp_absent(keys.topic("b"))], [op_put(keys.topic("b"), b"2")])
        assert res.succeeded
        kvs, _ = await client.get_prefix(keys.topics)
        assert [x.value for x in kvs] == [b"1", b"2"]
        lease, ttl = await client.lease_grant(TTL)
        assert await client.lease_keepalive(lease) > 0
        await client.lease_revoke(lease)
        assert await client.delete(keys.topic("b")) == 1
        assert hung.accepted == 1, "the hung member was tried again by a later call"

        # a caller that gives up on the hung member (as the keepalive's deadline does): the
        # next call starts with the member after it
        patient = EtcdClient([hung.endpoint, *etcds.endpoints], timeout=60.0)
        clients.append(patient)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(patient.get(keys.topic("a")), 0.5)
        assert (await patient.get(keys.topic("a"))) is not None
        assert hung.accepted == 2

        # a node session whose first endpoint hangs, then loses the member it renews through
        skc = EtcdClient([hung.endpoint, *etcds.endpoints], timeout=5.0)
        clients.append(skc)
        session = NodeSession(skc, keys, NodeInfo("s"), ttl=TTL)
        lease = await session.join()

        # a watch opened past the hung and the refusing endpoints, on m0
        wc = EtcdClient([hung.endpoint, dead, *etcds.endpoints], timeout=1.0)
        clients.append(wc)
        writer = EtcdClient([m1.endpoint, m2.endpoint], timeout=5.0)
        clients.append(writer)
        start = await writer.put(keys.topic("w"), b"-1")
        watch = wc.watch_prefix(keys.topic("w"), start + 1)
        got: list[tuple[int, bytes]] = []

        async def take(n: int) -> None:
            assert watch is not None
            while len(got) < n:
                ev = await asyncio.wait_for(anext(watch), 30)
                got.append((ev.revision, ev.kv.value))

        for i in range(5):
            await writer.put(keys.topic("w"), b"%d" % i)
        await take(5)
        m0.kill()
        killed = time.monotonic()
        for i in range(5, 10):
            await writer.put(keys.topic("w"), b"%d" % i)
        await take(10)
        assert [v for _, v in got] == [b"%d" % i for i in range(10)]
        revs = [r for r, _ in got]
        assert revs == sorted(set(revs)), revs  # no repeat, in order

        # the session's lease lives on for several TTLs past m0's death
        left = 3 * TTL - (time.monotonic() - killed)
        if left > 0:
            await asyncio.sleep(left)  # the lease TTL itself: what must be outlived
        out = await writer.call("lease/timetolive", {"ID": str(lease)})
        assert int(out.get("TTL", -1)) > 0, out
        assert not session.lost.is_set()
        await until(session.may_acknowledge, 10, "the session vouching for its lease")
        assert session.refusal() == ""
    finally:
        if watch is not None:
            await watch.aclose()
        if session is not None:
            await session.stop_keepalive()
        for c in clients:
            await c.close()
        hung.close()
        refused.close()


# ------------------------------------------------------------------ nsqpy-d over the cluster


def _max_gap(times: list[float], start: float, end: float) -> float:
    """The longest time between two acknowledgements in [start, end] (the window's edges
    count as acknowledgements: a window with none is one gap)."""
    inside = [t for t in times if start <= t <= end]
    marks = [start, *inside, end]
    return max(b - a for a, b in zip(marks, marks[1:], strict=False))


async def _probe_tcp(n: Nsqd, history: History, body: bytes) -> str:
    """One PUB of ``body`` to ``n``: "" when acknowledged, else the error's text."""
    history.attempted.add(body)
    p = Producer(n.tcp_address)
    try:
        await asyncio.wait_for(p.publish(TOPIC, body), 15)
    except (NSQError, OSError, TimeoutError, ConnectionError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        await p.stop()
    history.acked.add(body)
    return ""


def _probe_http(n: Nsqd, history: History, body: bytes) -> str:
    """One HTTP /pub of ``body`` to ``n``: "" when answered OK, else status and message."""
    history.attempted.add(body)
    q = urllib.parse.urlencode({"topic": TOPIC})
    try:
        code, out, _ = n.http("POST", f"/pub?{q}", body, timeout=15)
    except OSError as exc:
        return repr(exc)
    if code == 200:
        history.acked.add(body)
        return ""
    try:
        return f"{code} {json.loads(out)['message']}"
    except (ValueError, KeyError):
        return f"{code} {out!r}"


def _leader(cluster: Nodes) -> Nsqd | None:
    return cluster.current_leader(TOPIC)


def _listed(lookupd: Nsqlookupd, n: Nsqd) -> bool:
    """nsqlookupd lists ``n`` as a producer of the topic."""
    port = int(n.tcp_address.rsplit(":", 1)[1])
    return any(p.get("tcp_port") == port for p in lookupd.producers(TOPIC))


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_repl_etcd_members_lost_under_load(etcds: EtcdCluster, tmp_path: Path) -> None:
    lookupd = Nsqlookupd()
    cluster = Nodes(etcds, "members-lost", tmp_path)
    history = History()
    readers = Readers(history, TOPIC, CHANNELS, [lookupd.http_address], per_channel=1)
    prod: Producers | None = None
    m0, m1, m2 = etcds.members
    report: dict[str, Any] = {}
    try:
        flags = (f"--lookupd-tcp-address={lookupd.tcp_address}",)
        nodes = [cluster.start(i, *flags) for i in (1, 2, 3)]
        create(nodes[0], TOPIC, 3, nodes)
        leader = cluster.leader(TOPIC)
        await readers.start()
        await until(lambda: _channels_on(leader), 30, "the readers' channels on the leader")
        # the followers know the channels (a progress round) before a failover can need them
        for n in nodes:
            if n is not leader:
                await until(lambda n=n: _progress_received(n), 30, "a progress round")
        prod = Producers(
            history, TOPIC, lambda: [n.tcp_address for n in cluster.live()], 10**7, 4, 20, 280
        )
        prod.pause = 0.01
        prod.start()
        await prod.until(1000, 60)

        # one etcd member down (the first endpoint, the one every node talks to first)
        t_etcd = time.monotonic()
        m0.kill()
        history.event(f"kill -9 etcd {m0.name}")
        await prod.until(len(history.acked) + 1000, 60)
        t_leader = time.monotonic()
        old_id = cluster.node_id(leader)
        leader.kill()
        prod.mark()
        history.event(f"kill -9 nsqpy leader {old_id}")
        new = await until(lambda: _leader(cluster), 60, "a new leader with one etcd member down")
        await prod.until(len(history.acked) + 2000, 60)
        await until(lambda: _listed(lookupd, new), 30, "nsqlookupd listing the new leader")
        t_end = time.monotonic()
        report["gap_etcd_kill"] = _max_gap(prod.acked_at, t_etcd, t_leader)
        report["gap_phase1"] = _max_gap(prod.acked_at, t_etcd, t_end)
        report["failover"] = prod.recovered_after
        # acknowledgements went on: the leader's failover costs about a lease TTL, and the
        # loss of one etcd member nothing a producer waits on; the margin is for a loaded box
        assert report["gap_phase1"] < TTL + 20, report
        assert report["gap_etcd_kill"] < TTL + 20, report

        # back to whole: the etcd member and the nsqpy node on their data dirs
        await asyncio.to_thread(etcds.restart, m0)
        await asyncio.to_thread(cluster.restart, old_id)
        await until(lambda: len(cluster.isr(TOPIC)) == 3, 60, "all three nodes in the isr")
        await prod.until(len(history.acked) + 500, 60)
        leader = await until(lambda: _leader(cluster), 30, "the leader")
        follower = next(n for n in cluster.live() if n is not leader)

        # two members down: no quorum, no lease renewal, no acknowledgement
        t_quorum = time.monotonic()
        m1.kill()
        m2.kill()
        history.event(f"kill -9 etcd {m1.name} and {m2.name}")
        k = 0
        tcp_err = ""
        while not tcp_err:
            assert time.monotonic() - t_quorum < 60, "publishes still acknowledged"
            k += 1
            tcp_err = await _probe_tcp(leader, history, b"probe-tcp-%d" % k)
        report["refused_after"] = time.monotonic() - t_quorum
        assert tcp_err.startswith("E_PUB_FAILED PUB failed"), tcp_err
        assert "etcd" in tcp_err and "lease" in tcp_err, tcp_err
        http_err = await asyncio.to_thread(_probe_http, leader, history, b"probe-http-1")
        assert http_err.startswith("503 PUB_FAILED") and "etcd" in http_err, http_err
        http_err_f = await asyncio.to_thread(_probe_http, follower, history, b"probe-http-2")
        assert http_err_f.startswith("503 PUB_FAILED") and "etcd" in http_err_f, http_err_f
        acked_then = len(history.acked)
        await asyncio.sleep(2 * TTL)  # held without quorum: nothing may be acknowledged
        assert len(history.acked) == acked_then, "acknowledged without an etcd quorum"
        tcp_err2 = await _probe_tcp(follower, history, b"probe-tcp-f")
        assert tcp_err2.startswith("E_PUB_FAILED") and "etcd" in tcp_err2, tcp_err2

        # one member back: a quorum again, the leases renewed, publishes acknowledged again
        t_back = time.monotonic()
        await asyncio.to_thread(etcds.restart, m1)
        report["member_restart"] = time.monotonic() - t_back
        prod.mark()
        history.event(f"restarted etcd {m1.name}")
        await prod.until(len(history.acked) + 1, 60)
        report["recovered_after"] = time.monotonic() - t_back
        await prod.until(len(history.acked) + 1000, 60)
        prod.stopping = True
        await prod.wait()
        await asyncio.to_thread(etcds.restart, m2)
        all_in = await readers.wait_all(120)
    finally:
        if prod is not None:
            prod.stopping = True
        await readers.stop()
        cluster.stop()
        lookupd.stop()
    v = history.verdict()
    print(
        f"\netcd members lost: {v.line()}; producer retries {prod.failures if prod else 0}\n"
        + "\n".join(
            f"  {k}: {x:.2f}s" if isinstance(x, float) else f"  {k}: {x}" for k, x in report.items()
        )
        + f"\n  tcp refusal: {tcp_err}\n  http refusal: {http_err}"
    )
    for t, what in history.events:
        print(f"  {t:7.2f}s {what}")
    if not (all_in and v.ok):
        for ch in CHANNELS:
            print(f"missing on {ch}: {_ranges(history.missing(ch))}")
        for node_id, n in cluster.nodes.items():
            print(f"--- node {node_id}")
            print("\n".join(x for x in n.lines if "REPLICATION" in x or "ERROR" in x))
    assert all_in and v.ok, v.line()


def _ranges(bodies: set[bytes]) -> str:
    """``p<i>-<n>`` bodies as per-producer ranges."""
    per: dict[str, list[int]] = {}
    for b in bodies:
        p, _, n = b.decode().partition("-")
        if n.isdigit():
            per.setdefault(p, []).append(int(n))
    out = []
    for p, ns in sorted(per.items()):
        ns.sort()
        start = prev = ns[0]
        for x in [*ns[1:], None]:
            if x is None or x != prev + 1:
                out.append(f"{p}:{start}-{prev}")
                if x is not None:
                    start = x
            if x is not None:
                prev = x
    return ", ".join(out)


def _progress_received(n: Nsqd) -> bool:
    r = repl_stats(n, TOPIC)
    return r is not None and r["progress_received"] >= 1


def _channels_on(n: Nsqd) -> bool:
    for t in n.stats(topic=TOPIC).get("topics") or []:
        return {c["channel_name"] for c in t.get("channels") or []} >= set(CHANNELS)
    return False
