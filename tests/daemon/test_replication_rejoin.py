"""Replicated topics across leader changes (issue 21 §5): a deposed leader or a node that was
away while the leader changed rejoins as a follower, is reset or caught up from the new
leader's history (replication/stream.py "Rejoining") and is re-admitted to the ISR, so that
after any failover every placement node can be an in-sync replica again.

Real processes: nsqpy-d nodes on loopback with their own data dirs, a real etcd
(tests/etcd_server.py), producers that wait for their acknowledgements (nsqpy's client, MPUBs
of 20, sent to any live node and retried on another one after an error).

- a leader killed -9 mid-load, restarted on its data dir: it empties its own topic (its old
  data, unacknowledged tail included), takes the new leader's history, is back in the ISR;
  then with the new leader killed and the third node gone it is elected, and every
  acknowledged message is read from it (0 missing), nothing never published;
- a rolling restart of all three nodes (SIGTERM, the same data dir, the next one once the
  restarted node is back in the ISR), the leader included, under load: 0 lost, the ISR all
  three at the end; duplicates and the failover times printed;
- a partition: each node in its own network namespace (tests/netlab.py, root needed), etcd on
  the machine; the leader's link cut while producers publish to every node: a new leader once
  its lease lapsed, and once healed the old leader is reset and re-admitted; 0 lost.

Waits are on events or bounded polls; the only timed waits are etcd's lease TTL (2 s here).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import netlab
import pytest
from etcd_server import EtcdServer, etcd_binary, etcd_fixture  # noqa: F401 (the fixture)
from test_replication_data import TTL, Nodes, create, repl_stats

from nsqpy.client import Config, Consumer, Message, Producer
from nsqpy.client.conn import NSQError
from nsqpy.testing.process import Nsqd, wait_for

pytestmark = [
    pytest.mark.skipif(
        etcd_binary() is None,
        reason="etcd is not installed: .ci/install-etcd installs Debian's etcd-server",
    ),
    pytest.mark.timeout(120),
]

TOPIC = "rj"


@pytest.fixture
def nodes3(etcd: EtcdServer, request: pytest.FixtureRequest) -> Iterator[Nodes]:
    """The test's own cluster (its own --etcd-cluster), every node stopped at the end."""
    group = Nodes(etcd, request.node.name)
    try:
        yield group
    finally:
        group.stop()


class Load:
    """``producers`` producers publishing MPUBs of ``batch`` to ``TOPIC`` until :meth:`stop`
    or ``limit`` messages each, each batch waiting for its acknowledgement; a failed batch is
    sent again (a new connection, the next live node). ``acked``: the bodies acknowledged;
    ``sent``: every body ever sent; ``gaps``: seconds from a failure to the next
    acknowledgement, per producer."""

    def __init__(
        self, addresses: Callable[[], list[str]], producers: int = 4, batch: int = 20
    ) -> None:
        self.addresses = addresses
        self.batch = batch
        self.limit = 20_000
        self.acked: set[bytes] = set()
        self.sent: set[bytes] = set()
        self.gaps: list[float] = []
        self.errors = 0
        self._stop = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._run(i)) for i in range(producers)]

    async def _run(self, i: int) -> None:
        rng = random.Random(i)
        p: Producer | None = None
        seq = 0
        failed_at = 0.0
        while not self._stop.is_set() and seq < self.limit:
            if p is None:
                addrs = self.addresses()
                p = Producer(rng.choice(addrs), Config(dial_timeout=1.0))
            bodies = [b"p%d-%d" % (i, s) for s in range(seq, seq + self.batch)]
            self.sent.update(bodies)
            try:
                await asyncio.wait_for(p.multi_publish(TOPIC, bodies), 10)
            except (OSError, NSQError, TimeoutError, ConnectionError):
                self.errors += 1
                failed_at = failed_at or time.monotonic()
                await p.stop()
                p = None
                await asyncio.sleep(0.05)
                continue
            if failed_at:
                self.gaps.append(time.monotonic() - failed_at)
                failed_at = 0.0
            self.acked.update(bodies)
            seq += self.batch
            await asyncio.sleep(0.01)
        if p is not None:
            await p.stop()

    async def until(self, n: int, timeout: float = 30) -> None:
        """Wait until at least ``n`` messages are acknowledged."""
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acknowledged of {n}"
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(asyncio.gather(*self._tasks), 30)


def addresses(group: Nodes) -> Callable[[], list[str]]:
    return lambda: [n.tcp_address for n in group.live()]


def current_leader(group: Nodes) -> Nsqd | None:
    for n in group.live():
        r = repl_stats(n, TOPIC)
        if r is not None and r["role"] == "leader":
            return n
    return None


def isr_of_leader(group: Nodes) -> set[str]:
    n = current_leader(group)
    r = repl_stats(n, TOPIC) if n is not None else None
    return set(r["isr"]) if r is not None else set()


def node_id(group: Nodes, n: Nsqd) -> int:
    return int(next(i for i, m in group.nodes.items() if m is n))


async def read_all(n: Nsqd, acked: set[bytes], timeout: float = 60) -> dict[bytes, int]:
    """Consume TOPIC on a new channel of ``n`` until every body of ``acked`` came (or
    ``timeout``); body -> times received."""
    got: dict[bytes, int] = {}
    waiting = set(acked)
    done = asyncio.Event()

    def handler(msg: Message) -> None:
        got[msg.body] = got.get(msg.body, 0) + 1
        waiting.discard(msg.body)
        if not waiting:
            done.set()

    c = Consumer(TOPIC, "check", Config(max_in_flight=2500))
    c.add_handler(handler)
    await c.connect_to_nsqd(n.tcp_address)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    await c.stop(5)
    return got


def start_all(group: Nodes, tmp_path: Path, ids: tuple[int, ...], *args: str) -> dict[int, Path]:
    dirs = {i: tmp_path / f"n{i}" for i in ids}
    for i, d in dirs.items():
        d.mkdir()
        group.start(i, *args, data_path=d)
    return dirs


@pytest.mark.asyncio
async def test_deposed_leader_rejoins_isr_and_takes_over(nodes3: Nodes, tmp_path: Path) -> None:
    group = nodes3
    ids = (81, 82, 83)
    # messages on disk at once, so that the killed leader's topic still holds its own data
    disk = "--mem-queue-size=0"
    dirs = start_all(group, tmp_path, ids, disk)
    nodes = list(group.nodes.values())
    create(nodes[0], TOPIC, 3, nodes)
    old = group.leader(TOPIC)
    old_id = node_id(group, old)
    load = Load(addresses(group))
    await load.until(2000)
    killed = time.monotonic()
    old.kill()  # SIGKILL: its topic holds acknowledged and unacknowledged messages
    new = group.leader(TOPIC, group.live())
    elected = time.monotonic() - killed
    await load.until(len(load.acked) + 1000)

    back = group.start(old_id, disk, data_path=dirs[old_id])
    wait_for(lambda: str(old_id) in isr_of_leader(group), 30, what="the old leader readmitted")
    readmitted = time.monotonic() - killed
    r = repl_stats(back, TOPIC)
    assert r is not None and r["role"] == "follower" and r["epoch"] >= 2
    assert "messages of this node's own dropped" in back.log_text()
    await load.until(len(load.acked) + 1000)  # it is waited for again
    await load.stop()
    acked_before = len(load.acked)

    # the third node goes, then the new leader: the restarted one is the only ISR member left
    third = next(n for n in group.live() if n is not new and n is not back)
    third.kill()
    p = Producer(new.tcp_address)
    await asyncio.wait_for(p.publish(TOPIC, b"after-third"), 15)  # drops the third from the ISR
    await p.stop()
    load.acked.add(b"after-third")
    load.sent.add(b"after-third")
    wait_for(lambda: len(repl_stats(new, TOPIC)["isr"]) == 2, 10, what="isr of two")  # type: ignore[index]
    new.kill()
    t0 = time.monotonic()
    wait_for(lambda: (repl_stats(back, TOPIC) or {}).get("role") == "leader", 20, what="takeover")
    takeover = time.monotonic() - t0
    got = await read_all(back, load.acked)
    missing = load.acked - got.keys()
    received = sum(got.values())
    print(
        f"\nacknowledged {len(load.acked)} ({acked_before} under load, {load.errors} failed "
        f"batches retried), missing {len(missing)}, received {received}, duplicates "
        f"{received - len(got)}, new leader elected {elected:.2f}s after kill -9, old leader "
        f"readmitted {readmitted:.2f}s after it, takeover {takeover:.2f}s (lease TTL {TTL}s)"
    )
    assert not missing
    assert got.keys() <= load.sent  # nothing delivered that was never published


@pytest.mark.slow
@pytest.mark.asyncio
async def test_rolling_restart_loses_nothing(nodes3: Nodes, tmp_path: Path) -> None:
    group = nodes3
    ids = (91, 92, 93)
    dirs = start_all(group, tmp_path, ids)
    nodes = list(group.nodes.values())
    create(nodes[0], TOPIC, 3, nodes)
    first = node_id(group, group.leader(TOPIC))
    order = [first, *(i for i in ids if i != first)]
    load = Load(addresses(group))
    await load.until(1000)
    times: list[str] = []
    for i in order:
        n = group.nodes[str(i)]
        was_leader = current_leader(group) is n
        t0 = time.monotonic()
        assert n.stop() == 0
        if was_leader:
            group.leader(TOPIC, group.live())
        group.start(i, data_path=dirs[i])
        wait_for(lambda: len(isr_of_leader(group)) == 3, 30, what=f"node {i} back in the isr")
        times.append(f"{i}{'(leader)' if was_leader else ''} {time.monotonic() - t0:.1f}s")
        await load.until(len(load.acked) + 500)
    await load.stop()
    final = current_leader(group)
    assert final is not None
    r = repl_stats(final, TOPIC)
    assert r is not None and len(r["isr"]) == 3 and r["epoch"] >= 3
    got = await read_all(final, load.acked)
    missing = load.acked - got.keys()
    received = sum(got.values())
    gaps = sorted(load.gaps)
    print(
        f"\nrolling restart {', '.join(times)}: acknowledged {len(load.acked)}, failed batches "
        f"{load.errors}, missing {len(missing)}, received {received}, duplicates "
        f"{received - len(got)}, epoch {r['epoch']}, longest publish gap "
        f"{gaps[-1] if gaps else 0:.2f}s, load {os.getloadavg()[0]:.1f}"
    )
    assert not missing
    assert got.keys() <= load.sent
    # the first leader, restarted with its topic on disk, was reset by the new one
    assert "messages of this node's own dropped" in group.nodes[str(first)].log_text()


class BridgeEtcd:
    """etcd on the machine's side of a NetLab bridge (``address``), reachable from every host
    there; same settings as tests/etcd_server.py (10 ms heartbeat: 1 s minimum lease TTL)."""

    def __init__(self, data_dir: Path, address: str) -> None:
        exe = etcd_binary()
        assert exe is not None
        port = 20000 + os.getpid() % 20000
        self.endpoint = f"{address}:{port}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [
                exe,
                "--name=lab",
                f"--data-dir={data_dir}",
                f"--listen-client-urls=http://{self.endpoint}",
                f"--advertise-client-urls=http://{self.endpoint}",
                f"--listen-peer-urls=http://{address}:{port + 1}",
                f"--initial-advertise-peer-urls=http://{address}:{port + 1}",
                f"--initial-cluster=lab=http://{address}:{port + 1}",
                "--heartbeat-interval=10",
                "--election-timeout=100",
                "--logger=zap",
                "--log-outputs=stderr",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = threading.Event()

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                if "serving client traffic" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(20) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("etcd did not start:\n" + "".join(self.lines[-20:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.skipif(netlab.unavailable() is not None, reason=f"netlab: {netlab.unavailable()}")
async def test_partitioned_leader_rejoins_isr_after_heal(tmp_path: Path) -> None:
    """Each node in its own network namespace (tests/netlab.py), etcd on the machine. The
    leader's link is cut while producers publish to it and to the others: a new leader is
    elected once its lease lapsed; healed, the old leader is reset and re-admitted; every
    acknowledged message is read from the final leader."""
    with netlab.NetLab(3) as lab:
        etcd = BridgeEtcd(tmp_path / "etcd", lab.gateway)
        group = Nodes(etcd, "partition")  # type: ignore[arg-type]
        hosts: dict[str, int] = {}

        def start(k: int) -> Nsqd:
            i = 101 + k
            d = tmp_path / f"n{i}"
            d.mkdir(exist_ok=True)
            addr = lab.address(k)
            n = Nsqd(
                [
                    f"--etcd-endpoints={etcd.endpoint}",
                    "--etcd-cluster=partition",
                    f"--node-id={i}",
                    f"--etcd-lease-ttl={TTL}",
                    "--replica-timeout=1s",
                    f"--broadcast-address={addr}",
                    "--mem-queue-size=0",
                ],
                d,
                cmd=lab.command(k, [sys.executable, "-m", "nsqpy"]),
                host=addr,
                https=False,
            )
            group.nodes[str(i)] = n
            hosts[str(i)] = k
            wait_for(lambda: "REPLICATION: node" in n.log_text(), 15, what=f"node {i} joined")
            return n

        try:
            nodes = [start(k) for k in range(3)]
            create(nodes[0], TOPIC, 3, nodes)
            old = group.leader(TOPIC)
            old_id = node_id(group, old)
            others = [n for n in nodes if n is not old]
            load = Load(lambda: [n.tcp_address for n in nodes])
            await load.until(1500)
            cut = time.monotonic()
            lab.cut(hosts[str(old_id)])
            try:
                new = await asyncio.to_thread(group.leader, TOPIC, others)
                elected = time.monotonic() - cut
                at_cut = len(load.acked)
                await load.until(at_cut + 1000)  # through the other nodes meanwhile
            finally:
                lab.heal(hosts[str(old_id)])
            healed = time.monotonic()
            await asyncio.to_thread(
                wait_for,
                lambda: str(old_id) in set(repl_stats(new, TOPIC)["isr"]),  # type: ignore[index]
                30,
                0.05,
                "the old leader readmitted",
            )
            readmitted = time.monotonic() - healed
            await load.until(len(load.acked) + 500)
            await load.stop()
            assert (repl_stats(old, TOPIC) or {}).get("role") == "follower"
            got = await read_all(new, load.acked)
            missing = load.acked - got.keys()
            received = sum(got.values())
            print(
                f"\npartition: acknowledged {len(load.acked)} ({at_cut} before the cut), failed "
                f"batches {load.errors}, missing {len(missing)}, received {received}, duplicates "
                f"{received - len(got)}, new leader elected {elected:.2f}s after the cut (lease "
                f"TTL {TTL}s), old leader readmitted {readmitted:.2f}s after healing"
            )
            assert not missing
            assert got.keys() <= load.sent
        finally:
            group.stop()
            etcd.stop()
