"""A replicated nsqpy-d cluster under test, and the history a fault test checks.

Shared by the replication tests (tests/daemon/test_replication_*.py): :class:`Nodes` starts
nsqpy-d nodes joined through one etcd (tests/support/etcd_server.py), each with its own data dir
so it can be killed and restarted on it; :class:`Producers` publish numbered bodies, waiting for
each acknowledgement and moving to another node when one fails; :class:`Readers` consume every
channel through nsqlookupd as applications do; :class:`History` holds what was attempted, what
was acknowledged and what each channel delivered, and :meth:`History.verdict` checks it the way
a Jepsen checker checks a queue:

- *lost*: acknowledged but never delivered on a channel (must be 0 on every channel);
- *phantom*: delivered but never attempted by any producer (must be 0);
- *duplicates*: deliveries beyond the first of a body (at-least-once: counted, not an error).

Bodies are ``b"p<producer>-<n>"`` so a body names its producer and its place. Everything is
bounded: producers by count and a deadline, readers by the caller's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nsqpy.client import Config, Consumer, Message, Producer
from nsqpy.client.conn import NSQError
from nsqpy.testing.process import Nsqd, wait_for
from support.etcd_server import EtcdCluster, EtcdServer
from support.netlab import NetLab

TTL = 2  # seconds of each node's etcd lease


class Nodes:
    """nsqpy-d nodes of one test's cluster (its own --etcd-cluster), joined through one etcd
    or every member of an etcd cluster (all in --etcd-endpoints). Each node's flags and
    data dir are kept, so :meth:`restart` brings a killed or stopped node back on its data
    (with new ephemeral ports, which it announces through etcd and nsqlookupd)."""

    def __init__(
        self,
        etcd: EtcdServer | EtcdCluster,
        cluster: str,
        base: Path | None = None,
        lab: NetLab | None = None,
    ) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.base = base
        self.lab = lab
        self.nodes: dict[str, Nsqd] = {}
        self.hosts: dict[str, int] = {}  # node id -> its NetLab host (with ``lab``)
        self._argv: dict[str, tuple[tuple[str, ...], Path | None]] = {}

    def start(self, node_id: int, *args: str, data_path: Path | None = None) -> Nsqd:
        """Start node ``node_id`` (on loopback, or in its own NetLab host with ``lab``: the
        same host again on a restart) and wait until it joined etcd."""
        if data_path is None and self.base is not None:
            data_path = self.base / f"node{node_id}"
            data_path.mkdir(parents=True, exist_ok=True)
        self._argv[str(node_id)] = (args, data_path)
        host, kw = "127.0.0.1", {}
        if self.lab is not None:
            k = self.hosts.setdefault(str(node_id), len(self.hosts))
            host = self.lab.address(k)
            kw = {"cmd": self.lab.command(k, [sys.executable, "-m", "nsqpy"]), "host": host}
        n = Nsqd(
            [
                f"--etcd-endpoints={self.etcd.endpoint}",
                f"--etcd-cluster={self.cluster}",
                f"--node-id={node_id}",
                f"--etcd-lease-ttl={TTL}",
                "--replica-timeout=1s",
                f"--broadcast-address={host}",
                *args,
            ],
            data_path,
            https=False,
            **kw,
        )
        self.nodes[str(node_id)] = n
        wait_for(lambda: "REPLICATION: node" in n.log_text(), 15, what=f"node {node_id} joined")
        return n

    def restart(self, node_id: str) -> Nsqd:
        """Start ``node_id`` again with its flags and data dir (it must not be running)."""
        assert not self.nodes[node_id].alive(), f"node {node_id} is running"
        args, data_path = self._argv[node_id]
        return self.start(int(node_id), *args, data_path=data_path)

    def stop(self) -> None:
        failed = []
        for node_id, n in self.nodes.items():
            if n.alive():
                try:
                    n.stop()
                except AssertionError:
                    failed.append(node_id)
                    print(f"\nnode {node_id} did not exit on SIGTERM:\n" + "\n".join(n.lines[-40:]))
        assert not failed, f"nodes {failed} did not exit on SIGTERM"

    def live(self) -> list[Nsqd]:
        return [n for n in self.nodes.values() if n.alive()]

    def node_id(self, n: Nsqd) -> str:
        return next(k for k, v in self.nodes.items() if v is n)

    def leader(self, topic: str, among: list[Nsqd] | None = None, timeout: float = 20) -> Nsqd:
        def find() -> Nsqd | None:
            for n in among or self.live():
                try:
                    r = repl_stats(n, topic)
                except OSError:  # paused or dying: not the leader we want
                    continue
                if r is not None and r["role"] == "leader":
                    return n
            return None

        found: Nsqd = wait_for(find, timeout, what=f"a leader of {topic}")
        return found

    def current_leader(self, topic: str) -> Nsqd | None:
        """The live node that says it leads ``topic`` now (None: none does)."""
        for n in self.live():
            try:
                r = repl_stats(n, topic)
            except OSError:
                continue
            if r is not None and r["role"] == "leader":
                return n
        return None

    def isr(self, topic: str) -> set[str]:
        """The in-sync replicas as the current leader has them (empty: no leader)."""
        n = self.current_leader(topic)
        r = repl_stats(n, topic) if n is not None else None
        return set(r["isr"]) if r is not None else set()


def repl_stats(n: Nsqd, topic: str) -> dict[str, Any] | None:
    """The ``replication`` object of ``topic`` in n's /stats (None: not replicated there)."""
    for t in n.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            r: dict[str, Any] | None = t.get("replication")
            return r
    return None


def topic_stats(n: Nsqd, topic: str) -> dict[str, Any]:
    for t in n.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            return dict(t)
    return {}


@pytest.fixture(name="cluster")
def cluster_fixture(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Nodes]:
    """A :class:`Nodes` of its own cluster name, data dirs under the test's tmp_path; the
    nodes still running are stopped after the test (each must exit on SIGTERM)."""
    name = request.node.name.replace("/", "_").replace("[", "_").replace("]", "")
    nodes = Nodes(etcd, name, tmp_path)
    try:
        yield nodes
    finally:
        nodes.stop()


def create(n: Nsqd, topic: str, replicas: int, nodes: list[Nsqd]) -> None:
    """/topic/create?replicas=; then every node knows its role."""
    n.post("/topic/create", topic=topic, replicas=str(replicas))
    for m in nodes:
        wait_for(lambda m=m: repl_stats(m, topic), 10, what="the record on every node")


# ---------------------------------------------------------------- history


@dataclass
class Verdict:
    """What :meth:`History.verdict` found; ``lost``/``phantom``/``duplicates`` per channel."""

    attempted: int
    acknowledged: int
    lost: dict[str, int]
    phantom: dict[str, int]
    duplicates: dict[str, int]
    delivered: dict[str, int]

    @property
    def ok(self) -> bool:
        return not any(self.lost.values()) and not any(self.phantom.values())

    def line(self) -> str:
        return (
            f"attempted {self.attempted}, acknowledged {self.acknowledged}, lost {self.lost}, "
            f"phantom {self.phantom}, duplicates {self.duplicates}, delivered {self.delivered}"
        )


@dataclass
class History:
    """Bodies attempted and acknowledged by the producers; per channel, body -> deliveries."""

    attempted: set[bytes] = field(default_factory=set)
    acked: set[bytes] = field(default_factory=set)
    received: dict[str, dict[bytes, int]] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    #: body -> (seconds since t0, address of the node that acknowledged it), where recorded
    acked_by: dict[bytes, tuple[float, str]] = field(default_factory=dict)

    def event(self, what: str) -> None:
        self.events.append((time.monotonic() - self.t0, what))

    def missing(self, channel: str) -> set[bytes]:
        return self.acked - self.received.get(channel, {}).keys()

    def lost_report(self, limit: int = 10) -> str:
        """The lost bodies of every channel, grouped by when and by which node they were
        acknowledged (where the producer recorded it): what to set beside the fault events."""
        groups: dict[tuple[str, float, str], list[bytes]] = {}
        for ch, got in sorted(self.received.items()):
            for body in sorted(self.acked - got.keys()):
                t, node = self.acked_by.get(body, (-1.0, "?"))
                groups.setdefault((ch, round(t, 2), node), []).append(body)
        lines = [
            f"  lost on {ch}: {len(bodies)} acknowledged at {t:.2f}s by {node} "
            f"({bodies[0]!r}..{bodies[-1]!r})"
            for (ch, t, node), bodies in sorted(groups.items(), key=lambda kv: kv[0][1])
        ]
        return "\n".join(lines[:limit])

    def verdict(self) -> Verdict:
        lost, phantom, dups, delivered = {}, {}, {}, {}
        for ch, got in self.received.items():
            lost[ch] = len(self.acked - got.keys())
            phantom[ch] = len(got.keys() - self.attempted)
            total = sum(got.values())
            delivered[ch] = total
            dups[ch] = total - len(got)
        return Verdict(len(self.attempted), len(self.acked), lost, phantom, dups, delivered)


class Producers:
    """``producers`` tasks publishing ``total`` bodies in MPUBs of ``batch`` to ``topic``;
    each waits for its answer, and on any failure moves to the next node of ``addresses()``
    (read anew, as restarted nodes have new ports) and sends the same bodies again. The first
    acknowledgement of a publish sent after :meth:`mark` is timed (:attr:`recovered_after`)."""

    def __init__(
        self,
        history: History,
        topic: str,
        addresses: Callable[[], list[str]],
        total: int,
        producers: int = 8,
        batch: int = 20,
        deadline: float = 120.0,
        pause: float = 0.0,
    ) -> None:
        self.history = history
        self.topic = topic
        self.addresses = addresses
        self.total = total
        self.producers = producers
        self.batch = batch
        self.deadline = time.monotonic() + deadline
        self.pause = pause  # seconds between a producer's publishes (0: none)
        self.failures = 0
        self.gaps: list[float] = []  # seconds from a failed publish to the next acknowledged
        self.acked_at: list[float] = []  # monotonic time of every acknowledgement, in order
        self.marked_at = 0.0
        self.recovered_after = -1.0
        self.progress = asyncio.Event()  # set at each acknowledgement
        self.stopping = False  # set: each producer ends after its current publish
        self._tasks: list[asyncio.Task[None]] = []

    def mark(self) -> None:
        """A fault happened now: time the first acknowledged publish sent after it."""
        self.marked_at = time.monotonic()
        self.recovered_after = -1.0

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run(i)) for i in range(self.producers)]

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks)

    async def until(self, n: int, timeout: float = 30) -> None:
        """Wait until at least ``n`` messages are acknowledged (AssertionError after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while len(self.history.acked) < n:
            left = deadline - time.monotonic()
            assert left > 0, f"only {len(self.history.acked)} acknowledged of {n}"
            self.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.progress.wait(), min(left, 1.0))

    async def stop(self, timeout: float = 30) -> None:
        """Each producer ends after its current publish; wait for them."""
        self.stopping = True
        await asyncio.wait_for(self.wait(), timeout)

    async def _run(self, i: int) -> None:
        h = self.history
        k = i
        per = self.total // self.producers + (1 if i < self.total % self.producers else 0)
        p: Producer | None = None
        seq = 0
        failed_at = 0.0
        while seq < per and not self.stopping:
            assert time.monotonic() < self.deadline, (
                f"producer {i} did not finish in time ({seq}/{per} acknowledged)"
            )
            if p is None:
                addrs = self.addresses()
                k = (k + 1) % len(addrs)
                p = Producer(addrs[k], Config(dial_timeout=1.0))
            bodies = [b"p%d-%d" % (i, s) for s in range(seq, min(seq + self.batch, per))]
            h.attempted.update(bodies)
            sent_at = time.monotonic()
            try:
                await asyncio.wait_for(p.multi_publish(self.topic, bodies), 5)
            except (OSError, NSQError, TimeoutError, ConnectionError):
                self.failures += 1
                failed_at = failed_at or time.monotonic()
                await p.stop()
                p = None
                await asyncio.sleep(0.05)
                continue
            if self.marked_at and sent_at > self.marked_at and self.recovered_after < 0:
                self.recovered_after = time.monotonic() - self.marked_at
            if failed_at:
                self.gaps.append(time.monotonic() - failed_at)
                failed_at = 0.0
            h.acked.update(bodies)
            self.acked_at.append(time.monotonic())
            acked = (self.acked_at[-1] - h.t0, p.addr)
            h.acked_by.update(dict.fromkeys(bodies, acked))
            seq += len(bodies)
            self.progress.set()
            if self.pause:
                await asyncio.sleep(self.pause)
        if p is not None:
            await p.stop()


class Readers:
    """``per_channel`` consumers on each of ``channels`` of ``topic``, found through the
    nsqlookupds at ``lookupd_http`` (polled every 0.5 s), recording every delivery in the
    history (and FINishing it)."""

    def __init__(
        self,
        history: History,
        topic: str,
        channels: list[str],
        lookupd_http: list[str],
        per_channel: int = 2,
        max_in_flight: int = 500,
    ) -> None:
        self.history = history
        self.topic = topic
        self.channels = channels
        self.lookupd_http = lookupd_http
        self.per_channel = per_channel
        self.max_in_flight = max_in_flight
        self.consumers: list[Consumer] = []
        self.changed = asyncio.Event()

    async def start(self) -> None:
        for ch in self.channels:
            got = self.history.received.setdefault(ch, {})
            for _ in range(self.per_channel):
                c = Consumer(
                    self.topic,
                    ch,
                    Config(
                        max_in_flight=self.max_in_flight,
                        lookupd_poll_interval=0.5,
                        lookupd_poll_jitter=0.1,
                        dial_timeout=1.0,
                    ),
                )
                c.add_handler(self._handler(got))
                await c.connect_to_lookupds(self.lookupd_http)
                self.consumers.append(c)

    def _handler(self, got: dict[bytes, int]) -> Callable[[Message], None]:
        changed = self.changed

        def handle(msg: Message) -> None:
            got[msg.body] = got.get(msg.body, 0) + 1
            changed.set()

        return handle

    async def wait_all(self, timeout: float) -> bool:
        """Wait until every acknowledged body was delivered on every channel (False when
        ``timeout`` seconds passed first)."""
        end = time.monotonic() + timeout
        h = self.history
        while any(h.missing(ch) for ch in self.channels):
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass
        return True

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop(5) for c in self.consumers), return_exceptions=True)


async def read_all(
    n: Nsqd, topic: str, acked: set[bytes], timeout: float = 60, channel: str = "check"
) -> dict[bytes, int]:
    """Consume ``topic`` on ``channel`` (a new one: it gets what the topic holds) of ``n``
    until every body of ``acked`` came or ``timeout`` seconds passed; body -> deliveries."""
    got: dict[bytes, int] = {}
    waiting = set(acked)
    done = asyncio.Event()

    def handler(msg: Message) -> None:
        got[msg.body] = got.get(msg.body, 0) + 1
        waiting.discard(msg.body)
        if not waiting:
            done.set()

    c = Consumer(topic, channel, Config(max_in_flight=2500))
    c.add_handler(handler)
    await c.connect_to_nsqd(n.tcp_address)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout)
    await c.stop(5)
    return got


def schedule(seed: int, faults: int, kinds: tuple[str, ...]) -> list[tuple[str, float]]:
    """A repeatable fault schedule: ``faults`` pairs (kind, seconds the fault lasts) drawn
    from ``random.Random(seed)``; the kind names the victim's role too (e.g. "kill-leader")."""
    rnd = random.Random(seed)
    return [(rnd.choice(kinds), round(rnd.uniform(0.2, 1.5 * TTL), 2)) for _ in range(faults)]
