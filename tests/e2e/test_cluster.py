"""A cluster on this machine: three nsqpy-d nodes registered with two nsqpy-lookupd, consumers
that know only the lookupds.

Each node listens on its own loopback address (nsqd1 127.0.0.2, nsqd2 127.0.0.3, nsqd3 127.0.0.4,
ports picked by the OS) and registers that address with both lookupds (``--broadcast-address``,
``--lookupd-tcp-address`` twice), so a consumer can reach a node only by the address lookupd
gives it. Messages are published round-robin by index, each node's share to its own address.
While they flow, one lookupd is SIGKILLed and one node is stopped cleanly (SIGTERM) and started
again on the same data directory and address (new ports: consumers find it again through the
surviving lookupd). Consumers: real pynsq Readers (two per channel, two channels) in a tornado
subprocess (this file run as a script), configured only with ``lookupd_http_addresses``; the
Spark source reads through lookupd too. Every wait has a deadline; every server is on loopback.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nsqpy.spark.client import BatchPublisher, NSQError
from nsqpy.testing import Nsqd, Nsqlookupd, wait_for

if TYPE_CHECKING:  # imported where used: the script (the consumer) does not have tests/ on its path
    from support.nsq_connection import NSQConnection

# Not support.daemons': this file also runs as a script (the consumer), without tests/ on its path.
ROOT = Path(__file__).resolve().parents[2]

TOPIC = "cluster"
CHANNELS = ("ch1", "ch2")
HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


# ------------------------------------------------------------------------------------ nodes


class Node:
    """One nsqpy-d on its own address (nsqpy.testing's Nsqd on ``host``), registering that
    address with the lookupds, restartable on the same data directory; ``prefix`` runs it
    elsewhere (``ip netns exec NS``)."""

    def __init__(
        self, name: str, host: str, data_path: Path, lookupds: list[str], prefix: list[str]
    ) -> None:
        self.name = name
        self.host = host
        self.data_path = data_path
        self.prefix = prefix
        self.args = [
            f"--broadcast-address={host}",
            *(f"--lookupd-tcp-address={a}" for a in lookupds),
        ]
        self.daemon: Nsqd | None = None
        self.incarnations: list[tuple[int, int]] = []  # (tcp, http) ports of each start
        self.start()

    def start(self) -> None:
        self.daemon = Nsqd(
            self.args, self.data_path, host=self.host, cwd=ROOT, start_timeout=30,
            cmd=[*self.prefix, sys.executable, "-m", "nsqpy"],
        )  # fmt: skip
        self.incarnations.append((self.daemon.tcp_port, self.daemon.http_port))

    def stop(self) -> int:
        assert self.daemon is not None
        return self.daemon.stop(timeout=20)

    @property
    def tcp_address(self) -> str:
        assert self.daemon is not None
        return self.daemon.tcp_address

    @property
    def http_address(self) -> str:
        assert self.daemon is not None
        return self.daemon.http_address

    def http(self, method: str, path: str) -> tuple[int, bytes]:
        assert self.daemon is not None
        code, body, _ = self.daemon.http(method, path, b"" if method == "POST" else None)
        return code, body

    def channels(self, topic: str = TOPIC) -> dict[str, dict]:
        code, body = self.http("GET", f"/stats?format=json&topic={topic}")
        assert code == 200, body
        out = {}
        for t in json.loads(body)["topics"]:
            if t["topic_name"] == topic:
                out = {c["channel_name"]: c for c in t["channels"]}
        return out


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class Topology:
    """Where the nodes and lookupds live. ``loopback``: nodes on 127.0.0.2-4, lookupds on
    127.0.0.1. ``netns`` (root only): each node in its own network namespace, joined by a veth
    pair to a bridge in this namespace that holds the lookupds' address (10.0.S.1; nodes
    10.0.S.2-4, S a /24 not in use here); the publisher and the consumers reach the nodes
    through the bridge."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.namespaces: list[str] = []
        self.bridge = ""
        self.nodes: list[Node] = []
        self.lookupds: list[Nsqlookupd] = []
        if kind == "loopback":
            self.lookupd_host = "127.0.0.1"
            self.hosts = list(HOSTS)
            self.prefixes: list[list[str]] = [[] for _ in HOSTS]
            return
        tag = str(os.getpid() % 100000)
        used = (
            subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, timeout=10).stdout
            + subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
        )
        octet = next(
            o for k in range(230) if f"10.0.{(o := 20 + (int(tag) + k) % 230)}." not in used
        )
        net = f"10.0.{octet}"
        self.lookupd_host = f"{net}.1"
        self.hosts = [f"{net}.{i + 2}" for i in range(len(HOSTS))]
        self.prefixes = []
        self.bridge = f"nsqbr{tag}"
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.lookupd_host}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, host in enumerate(self.hosts, 1):
            ns, vh, vp = f"nsqpy{tag}n{i}", f"nsqv{tag}n{i}", f"nsqp{tag}n{i}"
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", vh, "type", "veth", "peer", "name", vp, "netns", ns)
            _ip("link", "set", vh, "master", self.bridge)
            _ip("link", "set", vh, "up")
            _ip("-n", ns, "addr", "add", f"{host}/24", "dev", vp)
            _ip("-n", ns, "link", "set", vp, "up")
            self.prefixes.append(["ip", "netns", "exec", ns])

    def lookupd(self) -> Nsqlookupd:
        lk = Nsqlookupd(host=self.lookupd_host, cwd=ROOT, start_timeout=30)
        self.lookupds.append(lk)
        return lk

    def node(self, i: int, lookupds: list[str]) -> Node:
        n = Node(
            f"nsqd{i + 1}", self.hosts[i], self.tmp_path / f"nsqd{i + 1}", lookupds,
            self.prefixes[i],
        )  # fmt: skip
        self.nodes.append(n)
        return n

    def close(self) -> list[str]:
        """Stop everything (nodes must exit 0, lookupds 0 or killed); the problems found."""
        problems = []
        for n in self.nodes:
            try:
                rc = n.stop()
            except AssertionError as e:
                rc = str(e)
            if rc != 0:
                problems.append(f"{n.name} exited {rc}:\n{n.daemon.log_text()[-3000:]}")
        for lk in self.lookupds:
            rc = lk.stop()
            if rc not in (0, -9):
                problems.append(f"nsqpy-lookupd exited {rc}:\n{lk.log_text()[-3000:]}")
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=15)
        if self.bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=15)
        return problems


@pytest.fixture
def topology(request, tmp_path: Path) -> Iterator[Topology]:
    kind = getattr(request, "param", "loopback")
    if kind == "netns":
        if os.geteuid() != 0 or not shutil.which("ip"):
            pytest.skip("network namespaces need root and iproute2 (the loopback run covers it)")
    try:
        topo = Topology(kind, tmp_path)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        for ns in [f"nsqpy{os.getpid() % 100000}n{i}" for i in (1, 2, 3)]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=15)
        subprocess.run(
            ["ip", "link", "del", f"nsqbr{os.getpid() % 100000}"], capture_output=True, timeout=15
        )
        pytest.skip(f"cannot set up network namespaces here: {e}")
    try:
        yield topo
    finally:
        problems = topo.close()
    assert not problems, "\n".join(problems)


def lookup_nodes(lookupd, topic: str) -> set[str]:
    code, body, _ = lookupd.http("GET", f"/lookup?topic={topic}")
    if code != 200:
        return set()
    return {f"{p['broadcast_address']}:{p['tcp_port']}" for p in json.loads(body)["producers"]}


# ------------------------------------------------------------------------------------ publisher


class Publisher:
    """Message i (body ``m-%06d``) goes to node i % len(nodes), over TCP to that node's own
    address: one thread per node, MPUB batches (every tenth a single PUB), paced to ``rate``
    messages/s in all. ``pause(k)`` holds node k's publisher between batches (for its restart);
    after ``resume(k)`` it reconnects to the node's current address."""

    def __init__(self, nodes: list[Node], count: int, rate: float, batch: int = 50) -> None:
        self.nodes = nodes
        self.count = count
        self.rate = rate
        self.batch = batch
        self.locks = [threading.Lock() for _ in nodes]
        self.published = [0] * len(nodes)
        self.retries = [0] * len(nodes)
        self.errors: list[str] = []
        self.t0 = 0.0
        self.threads = [
            threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(len(nodes))
        ]

    def start(self) -> None:
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()

    def total(self) -> int:
        return sum(self.published)

    def done(self) -> bool:
        return not any(t.is_alive() for t in self.threads)

    def pause(self, k: int) -> None:
        self.locks[k].acquire()

    def resume(self, k: int) -> None:
        self.locks[k].release()

    def _send(self, conn: NSQConnection, bodies: list[bytes], single: bool) -> None:
        if single:
            for b in bodies:
                conn.pub(TOPIC, b)
        else:
            conn.mpub(TOPIC, bodies)

    def _run(self, k: int) -> None:
        from support.nsq_connection import NSQConnection

        n = len(self.nodes)
        mine = list(range(k, self.count, n))
        conn: NSQConnection | None = None
        conn_addr = ""
        deadline = self.t0 + 90
        pos = 0
        batches = 0
        while pos < len(mine) and time.monotonic() < deadline:
            due = self.t0 + mine[pos] / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.2))
                continue
            bodies = [b"m-%06d" % i for i in mine[pos : pos + self.batch]]
            with self.locks[k]:
                addr = self.nodes[k].tcp_address
                try:
                    if conn is None or conn_addr != addr:
                        if conn is not None:
                            conn.close()
                        conn = NSQConnection(addr, timeout=10)
                        conn.connect()
                        conn_addr = addr
                    self._send(conn, bodies, single=batches % 10 == 9)
                except (OSError, NSQError) as e:
                    self.retries[k] += 1
                    self.errors.append(f"node {k}: {type(e).__name__}: {e}")
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.1)
                    continue
            pos += len(bodies)
            batches += 1
            self.published[k] += len(bodies)
        if conn is not None:
            conn.close()


# ------------------------------------------------------------------------------------ consumer


def run_consumer(argv: list[str]) -> int:
    """The pynsq side (run as ``python tests/e2e/test_cluster.py consume ...``): READERS Readers
    per channel, each given only the lookupds. Prints a progress line (JSON) every 0.2 s; when
    stdin closes (or --timeout passes) prints the report and exits."""
    import logging

    import nsq
    import tornado.ioloop

    ap = argparse.ArgumentParser()
    ap.add_argument("--lookupd", action="append", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--channels", required=True)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--max-in-flight", type=int, default=100)
    ap.add_argument("--poll", type=int, default=1, help="lookupd poll interval, s")
    ap.add_argument("--timeout", type=float, default=100)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)

    loop = tornado.ioloop.IOLoop.current()
    channels = args.channels.split(",")
    received: dict[str, collections.Counter] = {ch: collections.Counter() for ch in channels}
    by_node: dict[str, collections.Counter] = {ch: collections.Counter() for ch in channels}
    per_reader: collections.Counter = collections.Counter()
    nodes_seen: dict[str, set[str]] = {}
    started = time.monotonic()

    class Reader(nsq.Reader):
        def _on_message(self, conn: Any, message: Any, **kwargs: Any) -> None:
            by_node[self.channel][conn.id] += 1
            return super()._on_message(conn, message, **kwargs)

    def handler_for(ch: str, name: str):
        def handle(message: Any) -> bool:
            received[ch][bytes(message.body)] += 1
            per_reader[name] += 1
            return True

        return handle

    readers: dict[str, nsq.Reader] = {}
    for ch in channels:
        for i in range(args.readers):
            name = f"{ch}/{i}"
            readers[name] = Reader(
                topic=args.topic,
                channel=ch,
                message_handler=handler_for(ch, name),
                lookupd_http_addresses=[f"http://{a}" for a in args.lookupd],
                lookupd_poll_interval=args.poll,
                lookupd_poll_jitter=0.1,
                lookupd_connect_timeout=1,
                lookupd_request_timeout=1,
                max_in_flight=args.max_in_flight,
                name=name,
            )

    def progress() -> None:
        for name, r in readers.items():
            nodes_seen.setdefault(name, set()).update(r.conns)
        line = {
            "t": round(time.monotonic() - started, 2),
            "distinct": {ch: len(c) for ch, c in received.items()},
            "received": {ch: sum(c.values()) for ch, c in received.items()},
            "conns": {name: sorted(r.conns) for name, r in readers.items()},
        }
        print(json.dumps(line), flush=True)

    stop = {"why": ""}

    def watch_stdin() -> None:
        sys.stdin.read()
        loop.add_callback(lambda: (stop.update(why="stdin closed"), loop.stop()))

    def give_up() -> None:
        stop["why"] = f"timed out after {args.timeout}s"
        loop.stop()

    threading.Thread(target=watch_stdin, daemon=True).start()
    tornado.ioloop.PeriodicCallback(progress, 200).start()
    loop.call_later(args.timeout, give_up)
    loop.start()
    progress()

    expected = {b"m-%06d" % i for i in range(args.count)}
    report: dict[str, Any] = {
        "stopped": stop["why"],
        "elapsed_s": round(time.monotonic() - started, 2),
        "per_reader": dict(per_reader),
        "nodes_seen": {k: sorted(v) for k, v in nodes_seen.items()},
        "by_node": {ch: dict(c) for ch, c in by_node.items()},
        "channels": {},
    }
    for ch, counter in received.items():
        got = set(counter)
        dup_bodies = sorted(b.decode() for b, n in counter.items() if n > 1)
        report["channels"][ch] = {
            "received": sum(counter.values()),
            "distinct": len(got),
            "missing": sorted(b.decode() for b in expected - got)[:20],
            "missing_count": len(expected - got),
            "unexpected_count": len(got - expected),
            "duplicates": sum(n - 1 for n in counter.values() if n > 1),
            "duplicate_bodies": dup_bodies[:50],
            "duplicate_indexes": [int(b[2:]) for b in dup_bodies],
        }
    print(json.dumps({"report": report}), flush=True)
    return 0


class Consumer:
    """The consumer subprocess; ``latest`` is its last progress line."""

    def __init__(self, lookupds: list[str], count: int, readers: int, max_in_flight: int) -> None:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "consume",
            *(f"--lookupd={a}" for a in lookupds),
            f"--topic={TOPIC}",
            f"--channels={','.join(CHANNELS)}",
            f"--readers={readers}",
            f"--count={count}",
            f"--max-in-flight={max_in_flight}",
            "--poll=1",
            "--timeout=110",
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.latest: dict = {}
        self.report: dict | None = None
        self.err_lines: list[str] = []
        self._out = threading.Thread(target=self._read, daemon=True)
        self._out.start()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._err.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if "report" in doc:
                self.report = doc["report"]
            else:
                self.latest = doc

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err_lines.append(line.rstrip("\n"))

    @property
    def stderr(self) -> str:
        return "\n".join(self.err_lines)

    def distinct(self) -> dict[str, int]:
        return self.latest.get("distinct", {})

    def finish(self, timeout: float = 20) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._out.join(5)
        self._err.join(5)
        assert self.report is not None, self.stderr[-3000:]
        return self.report

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


# ------------------------------------------------------------------------------------ tests


@pytest.mark.slow
@pytest.mark.timeout(170)
@pytest.mark.parametrize("topology", ["loopback", "netns"], indirect=True)
def test_three_nodes_two_lookupds_restart_and_lookupd_kill(topology: Topology) -> None:
    count = 30_000
    readers, max_in_flight = 2, 100
    t_start = time.monotonic()
    lk1, lk2 = topology.lookupd(), topology.lookupd()
    lookupd_tcp = [lk1.tcp_address, lk2.tcp_address]
    nodes = [topology.node(i, lookupd_tcp) for i in range(len(topology.hosts))]

    # The topic and both channels on every node before anything is published (a channel gets
    # what is published after it exists); both lookupds then list all three nodes by their own
    # addresses.
    for n in nodes:
        assert n.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
        for ch in CHANNELS:
            assert n.http("POST", f"/channel/create?topic={TOPIC}&channel={ch}")[0] == 200
    want = {n.tcp_address for n in nodes}
    for lk in (lk1, lk2):
        wait_for(lambda lk=lk: lookup_nodes(lk, TOPIC) == want, 15, 0.1, "both lookupds list 3")
        chans = lk.get_json(f"/channels?topic={TOPIC}")["channels"]
        assert sorted(chans) == sorted(CHANNELS)

    consumer = Consumer([lk1.http_address, lk2.http_address], count, readers, max_in_flight)
    publisher = Publisher(nodes, count, rate=2500)
    try:

        def subscribed(n: Node) -> bool:
            chans = n.channels()
            return all(len(chans.get(ch, {}).get("clients", [])) == readers for ch in CHANNELS)

        for n in nodes:
            wait_for(
                lambda n=n: subscribed(n) or consumer.proc.poll() is not None, 20, 0.1,
                f"every Reader on {n.name}",
            )  # fmt: skip
            assert consumer.proc.poll() is None, consumer.stderr[-3000:]
        t_pub = time.monotonic()
        publisher.start()

        # Mid-run: SIGKILL lookupd1...
        wait_for(lambda: publisher.total() >= count * 0.2, 30, 0.02, "20% published")
        lk1.kill()
        at_kill = publisher.total()

        # ...then a clean stop of nsqd2 between two of its batches, and a start on the same
        # data directory and address (new ports, found again through lookupd2).
        wait_for(lambda: publisher.total() >= count * 0.45, 30, 0.02, "45% published")
        victim = nodes[1]
        publisher.pause(1)
        try:
            before = victim.channels()
            snapshot = {
                ch: (c["in_flight_count"], c["depth"]) for ch, c in before.items()
            }  # fmt: skip
            at_stop = publisher.total()
            t_stop = time.monotonic()
            assert victim.stop() == 0, victim.daemon.log_text()[-3000:]
            wait_for(
                lambda: victim.tcp_address not in lookup_nodes(lk2, TOPIC), 10, 0.05,
                "lookupd2 drops the stopped node",
            )  # fmt: skip
            time.sleep(1.0)  # consumers notice it is gone
            victim.start()
            down_s = time.monotonic() - t_stop
        finally:
            publisher.resume(1)
        wait_for(
            lambda: victim.tcp_address in lookup_nodes(lk2, TOPIC), 10, 0.05,
            "the restarted node registered with lookupd2",
        )  # fmt: skip
        t_restarted = time.monotonic()
        wait_for(lambda: subscribed(victim), 20, 0.1, "Readers back on the restarted node")
        resubscribed_s = time.monotonic() - t_restarted

        wait_for(publisher.done, 60, 0.1, "publishing done")
        assert publisher.total() == count, (publisher.published, publisher.errors[:5])
        wait_for(
            lambda: all(consumer.distinct().get(ch, 0) >= count for ch in CHANNELS),
            60,
            0.1,
            f"every message on both channels (progress {consumer.latest.get('distinct')})",
        )
        t_all = time.monotonic()

        # Everything FIN'd: nothing queued or in flight anywhere.
        def settled() -> bool:
            for n in nodes:
                for ch in CHANNELS:
                    c = n.channels()[ch]
                    if c["depth"] or c["in_flight_count"] or c["deferred_count"]:
                        return False
            return True

        wait_for(settled, 20, 0.1, "every node drained and every message FIN'd")
        time.sleep(0.5)  # a late redelivery would show up in the report
    finally:
        report = consumer.finish() if consumer.proc.poll() is None else None
        consumer.kill()
    assert report is not None, consumer.stderr[-3000:]
    elapsed = time.monotonic() - t_start

    # The restarted node is at the same address with other ports, and both lookupds' views
    # were used: lookupd1 is gone, lookupd2 lists all three again.
    assert len(victim.incarnations) == 2
    assert lookup_nodes(lk2, TOPIC) == {n.tcp_address for n in nodes}
    assert not lk1.alive()

    summary = {}
    bound = readers * max_in_flight  # the most a channel can have in flight on one node
    for ch in CHANNELS:
        r = report["channels"][ch]
        assert r["missing_count"] == 0, (ch, r["missing"])
        assert r["unexpected_count"] == 0, ch
        # NSQ is at least once: only messages in flight on nsqd2 when it stopped (written to
        # its disk and delivered again after the start) may come twice.
        assert r["duplicates"] <= bound, (ch, r["duplicates"], r["duplicate_bodies"])
        assert all(i % 3 == 1 for i in r["duplicate_indexes"]), r["duplicate_bodies"]
        assert r["distinct"] == count
        summary[ch] = (r["received"], r["duplicates"])
        # Each channel got messages from all three nodes, the restarted one at both addresses.
        conns = set(report["by_node"][ch])
        hosts = {c.rsplit(":", 1)[0] for c in conns}
        assert hosts == set(topology.hosts), conns
        assert {f"{victim.host}:{p}" for p, _ in victim.incarnations} <= conns, conns
    assert all(report["per_reader"].get(f"{ch}/{i}", 0) > 0 for ch in CHANNELS for i in (0, 1))
    print(
        f"\ncluster ({topology.kind}: nodes on {', '.join(topology.hosts)}): published {count}"
        f" (round-robin over 3 nodes, {publisher.retries} publish"
        f" retries), received {', '.join(f'{ch}={summary[ch][0]}' for ch in CHANNELS)},"
        f" missing 0, duplicates {', '.join(f'{ch}={summary[ch][1]}' for ch in CHANNELS)}"
        f" (nsqd2 in flight/depth at stop {snapshot}), lookupd1 killed at {at_kill},"
        f" nsqd2 stopped at {at_stop} and down {down_s:.1f}s, Readers back on it"
        f" {resubscribed_s:.1f}s after it registered, all delivered"
        f" {t_all - t_pub:.1f}s after the first publish, {elapsed:.1f}s in all"
    )


# ------------------------------------------------------------------------------------ Spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory) -> Iterator:
    import os

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from nsqpy.spark import register

    s = (
        SparkSession.builder.master("local[2]")
        .appName("nsqpy-cluster-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    register(s)
    yield s
    s.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_spark_source_reads_every_node_through_nsqpy_lookupd(
    spark, topology: Topology, tmp_path: Path
) -> None:
    from support.spark_query import start_query  # this file also runs as a script

    lk = topology.lookupd()
    a = topology.node(0, [lk.tcp_address])
    b = topology.node(1, [lk.tcp_address])
    n = 3000
    bodies = [b"s-%05d" % i for i in range(n)]
    for k, node in enumerate((a, b)):
        with BatchPublisher(node.tcp_address, "sparked", batch_size=250) as p:
            p.publish(bodies[k::2])
    wait_for(
        lambda: lookup_nodes(lk, "sparked") == {a.tcp_address, b.tcp_address}, 15, 0.1,
        "lookupd lists both nodes for the topic",
    )  # fmt: skip
    df = (
        spark.readStream.format("nsq")
        .option("lookupd_http_addresses", lk.http_address)
        .option("topic", "sparked")
        .option("channel", "spark")
        .option("lookupd_poll_interval", "1s")
        .option("spool_dir", str(tmp_path / "ckpt" / "nsq-spool"))
        .load()
    )
    q = start_query(
        lambda: (
            df.writeStream.format("memory")
            .queryName("cluster_out")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
    )
    t0 = time.monotonic()
    try:
        wait_for(
            lambda: (
                q.exception() is not None
                or spark.sql("select count(*) c from cluster_out").collect()[0].c >= n
            ),
            150,
            0.5,
            f"{n} rows",
        )
        assert q.exception() is None, q.exception()
        rows = spark.sql("select body, nsqd_address from cluster_out").collect()
    finally:
        q.stop()
    by_node = collections.Counter(r.nsqd_address for r in rows)
    assert by_node == {a.tcp_address: n // 2, b.tcp_address: n // 2}, by_node
    assert sorted(bytes(r.body) for r in rows) == bodies
    print(
        f"\nspark via nsqpy-lookupd: {len(rows)} rows of {n}, by node {dict(by_node)},"
        f" {time.monotonic() - t0:.1f}s"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["consume"]:
        sys.exit(run_consumer(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} consume ...")
