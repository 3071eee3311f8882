"""Replicated topics under faults, checked against the recorded history:
real nsqpy-d processes joined through a real etcd, two nsqlookupds (in the leader crash one of
them Go's nsqlookupd 1.3 where it is found), producers that wait for each acknowledgement, and
two channels with two readers each that find the leader through nsqlookupd, plus in the leader
crash a third channel read by Go's nsq_tail (go-nsq, unchanged) where it is found
(tests/support/replication_cluster.py has the harness and the checker).

- **Leader crash**: 100,000 messages; the leader is killed -9 a third of the way in. Every
  acknowledged message is delivered on both channels (0 lost), nothing never published is
  delivered, duplicates are no more than the new leader counted as redelivered plus the
  batches producers sent again, the failover time is printed (from the kill to the first
  acknowledgement of a publish sent after it), and the old node, restarted on its data,
  catches up and is back in the in-sync set.
- **Random faults**: a seeded schedule (``NSQPY_FAULT_SEED``, printed; ``NSQPY_FAULTS`` of them)
  of kill -9, SIGSTOP, SIGTERM and (each node in its own network host, tests/support/netlab.py,
  where the machine allows: root and iproute2) a cut link, of the leader or a follower, each held
  for a drawn time and then recovered (restart, SIGCONT, heal), one at a time, while producers
  publish; after each the cluster must elect a leader,
  take publishes again and bring every node back into the in-sync set. The same checks on the
  whole history at the end, and the duplicates bounded by what was counted (every promotion's
  ``promoted`` entries once per channel, plus the producers' resent batches); the schedule and
  the counts are printed.

The only timed waits are the faults' own durations (drawn from the seed) and etcd's lease TTL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import gobin, netlab
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.netlab import NetLab
from support.replication_cluster import (
    TTL,
    History,
    Nodes,
    Producers,
    Readers,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    repl_stats,
    schedule,
)

from nsqpy.testing.process import Nsqd, Nsqlookupd, wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

TOPIC = "orders"
CHANNELS = ["billing", "audit"]


class Lookupds:
    """``n`` nsqlookupds on ``host``; with ``go`` the last one is Go's nsqlookupd 1.3 where it
    is found (``why_not_go`` says why not otherwise)."""

    def __init__(self, n: int = 2, host: str = "127.0.0.1", go: bool = False) -> None:
        path, why = gobin.find("nsqlookupd") if go else (None, "not asked for")
        self.why_not_go = "" if path else why
        self.all: list[Any] = [Nsqlookupd(host=host) for _ in range(n - 1 if path else n)]
        if path:
            self.all.append(gobin.start_go_lookupd())

    def flags(self) -> list[str]:
        return [f"--lookupd-tcp-address={x.tcp_address}" for x in self.all]

    def http(self) -> list[str]:
        return [x.http_address for x in self.all]

    def stop(self) -> None:
        for x in self.all:
            x.stop()


def _isr(n: Nsqd) -> list[str]:
    try:
        r = repl_stats(n, TOPIC)
    except OSError:
        return []
    return list(r["isr"]) if r is not None and r["role"] == "leader" else []


def wait_healthy(cluster: Nodes, timeout: float, what: str) -> Nsqd:
    """A leader whose in-sync set holds every node again; returns the leader."""

    def full() -> Nsqd | None:
        for n in cluster.live():
            if len(_isr(n)) == len(cluster.nodes):
                return n
        return None

    found: Nsqd = wait_for(full, timeout, what=what)
    return found


async def _channels_on(n: Nsqd, channels: list[str] = CHANNELS) -> None:
    """Wait until the readers' channels exist on ``n`` (so none misses a message)."""

    def both() -> bool:
        for t in n.stats(topic=TOPIC).get("topics") or []:
            names = {c["channel_name"] for c in t.get("channels") or []}
            return set(channels) <= names
        return False

    while not both():
        await asyncio.sleep(0.05)


def _go_tail(lookupds: Lookupds, out: Path) -> subprocess.Popen[bytes] | None:
    """Go's nsq_tail (a go-nsq consumer) on channel "tail" through the lookupds, polling them
    every second, its stdout (one message body a line) into ``out``; None without it."""
    path, _ = gobin.find("nsq_tail")
    if path is None:
        return None
    argv = [path, f"--topic={TOPIC}", "--channel=tail", "--max-in-flight=500"]
    argv += [f"--lookupd-http-address={a}" for a in lookupds.http()]
    argv += ["--consumer-opt=lookupd_poll_interval,1s"]
    return subprocess.Popen(argv, stdout=out.open("wb"), stderr=subprocess.DEVNULL)


@pytest.mark.asyncio
async def test_leader_crash_100k_two_lookupds_two_channels(cluster: Nodes, tmp_path: Path) -> None:
    """Where Go's binaries are found, one of the two lookupds is Go's nsqlookupd and a third
    channel is read by Go's nsq_tail (go-nsq): it too gets every acknowledged message."""
    lookupds = Lookupds(go=True)
    history = History()
    readers = Readers(history, TOPIC, CHANNELS, lookupds.http(), per_channel=2)
    tail_out = tmp_path / "nsq_tail.out"
    tail = None
    try:
        nodes = [cluster.start(i, *lookupds.flags()) for i in (1, 2, 3)]
        create(nodes[0], TOPIC, 3, nodes)
        leader = cluster.leader(TOPIC)
        old_id = cluster.node_id(leader)
        await readers.start()
        tail = _go_tail(lookupds, tail_out)
        channels = CHANNELS + (["tail"] if tail is not None else [])
        await asyncio.wait_for(_channels_on(leader, channels), 30)
        total = 100_000
        prod = Producers(
            history, TOPIC, lambda: [n.tcp_address for n in cluster.live()], total, 8, 20, 200
        )
        prod.start()
        while len(history.acked) < total // 3:
            prod.progress.clear()
            await asyncio.wait_for(prod.progress.wait(), 30)
        leader.kill()
        prod.mark()
        history.event(f"kill -9 leader {old_id}")
        await prod.wait()
        elapsed = time.monotonic() - history.t0
        new = cluster.leader(TOPIC, cluster.live())
        r = repl_stats(new, TOPIC)
        assert r is not None and r["epoch"] >= 2
        all_in = await readers.wait_all(120)
        if tail is not None:
            history.received["tail (go-nsq)"] = await _tail_lines(tail_out, history.acked)
        v = history.verdict()
        print(
            f"\nlookupds: {[type(x).__name__ for x in lookupds.all]} {lookupds.why_not_go}; "
            f"nsq_tail: {'yes' if tail is not None else gobin.find('nsq_tail')[1]}"
        )
        print(
            f"leader crash: {v.line()}; producer retries {prod.failures}; "
            f"failover {prod.recovered_after:.2f}s (lease TTL {TTL}s); publishing took "
            f"{elapsed:.1f}s; new leader {r['leader']} epoch {r['epoch']} stats {r}"
        )
        assert v.acknowledged == total
        assert all_in and v.ok, v.line() + "\n" + history.lost_report()
        assert prod.recovered_after > 0
        # duplicates are bounded and counted: what the new leader redelivered (it may have
        # been delivered before the crash) plus what producers sent again after a failure
        r = repl_stats(new, TOPIC) or r
        resent = prod.failures * 20 * len(v.duplicates)
        assert sum(v.duplicates.values()) <= r["redelivered"] + resent, (v.line(), r)
        # the old node, restarted on its data, catches up and is in sync again
        t_restart = time.monotonic()
        cluster.restart(old_id)
        wait_healthy(cluster, 60, "the restarted old leader back in the in-sync set")
        print(f"old leader back in the isr {time.monotonic() - t_restart:.1f}s after its restart")
    finally:
        await readers.stop()
        if tail is not None:
            tail.terminate()
            tail.wait(10)
        lookupds.stop()


async def _tail_lines(out: Path, acked: set[bytes], timeout: float = 60) -> dict[bytes, int]:
    """nsq_tail's lines so far, once every acknowledged body is among them (or ``timeout``
    seconds passed): body -> times printed."""
    end = time.monotonic() + timeout
    while True:
        got: dict[bytes, int] = {}
        for line in out.read_bytes().splitlines():
            got[line] = got.get(line, 0) + 1
        if acked <= got.keys() or time.monotonic() > end:
            return got
        await asyncio.sleep(0.2)  # polling a file another process writes


KINDS = (
    "kill-leader",
    "kill-follower",
    "pause-leader",
    "pause-follower",
    "stop-leader",
)
#: with network hosts (tests/support/netlab.py): the victim's link cut, then healed
PARTITIONS = ("partition-leader", "partition-follower")


@pytest.mark.asyncio
async def test_random_faults_seeded_history_checks(tmp_path: Path) -> None:
    """Each node in its own network host where the machine allows it (root, iproute2), so
    that partitions are among the faults; on loopback without them otherwise (said)."""
    seed = int(os.environ.get("NSQPY_FAULT_SEED", "20261126"))
    why = netlab.unavailable()
    lab = NetLab(3) if why is None else None
    kinds = KINDS + PARTITIONS if lab is not None else KINDS
    plan = schedule(seed, int(os.environ.get("NSQPY_FAULTS", "6")), kinds)
    print(f"\nfault seed {seed}: {plan}" + (f" (no partitions: {why})" if why else ""))
    host = lab.gateway if lab is not None else "127.0.0.1"
    history = History()
    etcd = lookupds = readers = prod = cluster = None
    recoveries: list[float] = []
    promotions: dict[tuple[str, int, str], int] = {}  # (node id, pid, counter) -> count
    try:
        etcd = EtcdServer(tmp_path / "etcd", host=host)
        cluster = Nodes(etcd, "faults", tmp_path, lab)
        lookupds = Lookupds(2, host)
        readers = Readers(history, TOPIC, CHANNELS, lookupds.http(), per_channel=2)
        nodes = [cluster.start(i, *lookupds.flags()) for i in (1, 2, 3)]
        create(nodes[0], TOPIC, 3, nodes)
        leader = cluster.leader(TOPIC)
        await readers.start()
        await asyncio.wait_for(_channels_on(leader), 30)
        prod = Producers(
            history, TOPIC, lambda: [n.tcp_address for n in cluster.live()], 10**7, 4, 20, 240
        )
        prod.start()
        for kind, hold in plan:
            leader = wait_healthy(cluster, 60, f"a healthy cluster before {kind}")
            _note_promotions(cluster, promotions)
            followers = [n for n in cluster.live() if n is not leader]
            victim = leader if kind.endswith("leader") else followers[0]
            vid = cluster.node_id(victim)
            history.event(f"{kind} node {vid} ({victim.tcp_address}) for {hold}s")
            prod.mark()
            if kind.startswith("kill"):
                victim.kill()
            elif kind.startswith("stop"):
                victim.stop()
            elif kind.startswith("pause"):
                os.kill(victim.pid, signal.SIGSTOP)
            else:
                assert lab is not None
                lab.cut(cluster.hosts[vid])
            await asyncio.sleep(hold)  # the fault's drawn duration
            if kind.startswith("pause"):
                os.kill(victim.pid, signal.SIGCONT)
            elif kind.startswith("partition"):
                assert lab is not None
                lab.heal(cluster.hosts[vid])
            else:
                cluster.restart(vid)
            history.event(f"recovered node {vid}")
            # publishes are acknowledged again after the fault
            acked = len(history.acked)
            while len(history.acked) <= acked or prod.recovered_after < 0:
                prod.progress.clear()
                await asyncio.wait_for(prod.progress.wait(), 30)
            recoveries.append(round(prod.recovered_after, 2))
        wait_healthy(cluster, 60, "a healthy cluster after the last fault")
        _note_promotions(cluster, promotions)
        prod.stopping = True
        await prod.wait()
        all_in = await readers.wait_all(120)
    finally:
        if prod is not None:
            prod.stopping = True
        if readers is not None:
            await readers.stop()
        for part in (cluster, lookupds, etcd):
            if part is not None:
                part.stop()
        if lab is not None:
            lab.close()
    v = history.verdict()
    # duplicates are bounded by what was counted: each promotion puts each replica-log entry
    # it went through (``promoted``) into each channel at most once (``redelivered`` counts
    # the puts into channels its progress record names; a channel the record does not name,
    # or a promotion with no record, gets every entry uncounted), plus the batches producers
    # sent again after a failure (each may have been committed too), on every channel
    assert prod is not None
    counted = sum(n for (_, _, what), n in promotions.items() if what == "redelivered")
    promoted = sum(n for (_, _, what), n in promotions.items() if what == "promoted")
    resent = prod.failures * prod.batch * len(CHANNELS)
    bound = promoted * len(CHANNELS) + resent
    print(f"random faults, seed {seed}: {v.line()}; retries {prod.failures}")
    print(
        f"duplicates {sum(v.duplicates.values())} <= promoted {promoted} x {len(CHANNELS)} "
        f"channels + resent {resent} = {bound} (of the promoted, counted redelivered {counted})"
    )
    print(f"publishes acknowledged again after each fault (s): {recoveries}")
    for t, what in history.events:
        print(f"  {t:7.2f}s {what}")
    assert all_in and v.ok, v.line() + "\n" + history.lost_report()
    assert sum(v.duplicates.values()) <= bound, (v.line(), promotions, resent)


def _note_promotions(cluster: Nodes, seen: dict[tuple[str, int, str], int]) -> None:
    """Keep each live node's replication ``promoted`` and ``redelivered`` counts (per
    process: a restart starts at 0), read while the cluster is healthy (no node paused),
    before the next fault can kill it."""
    for node_id, n in cluster.nodes.items():
        if not n.alive():
            continue
        r = repl_stats(n, TOPIC)
        if r is not None:
            for what in ("promoted", "redelivered"):
                key = (node_id, n.pid, what)
                seen[key] = max(seen.get(key, 0), int(r[what]))
