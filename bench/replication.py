"""Publish throughput of a replicated topic (R=3, --replica-ack=all-isr) beside an R=1 topic on
the same three nsqpy-d nodes, on loopback.

One etcd (tests/support/etcd_server.py: Debian's etcd-server, temp data dir) and three nsqpy-d nodes
joined to it (ephemeral ports, temp data dirs). Topic ``r3`` is created with
``/topic/create?replicas=3``, topic ``r1`` with ``replicas=1``; both are published to on the
*leader* of r3 (so the R=1 figure is the same process, the same connections, without
replication). ``--producers`` connections each send ``--count / --producers`` messages of
``--size`` bytes in MPUBs of ``--batch`` (the next once the last is answered: an R=3 MPUB is
answered once both followers wrote it). Runs alternate R=1 / R=3 ``--runs`` times; the table
gives medians in msgs/s and the load average (the machine is shared: figures are indicative).
The producers of the throughput modes run on uvloop, as the daemons do (so do those of
bench.client_bench and bench.lookupd_scale). On asyncio's own loop the process of the 16 PUB
producers settled into one of two states, depending on nothing but its memory layout (the size
of its environment was enough to flip it): in one it spent about 60 % more CPU per PUB, and the
R=3 rows ran about a fifth slower (docs/replication.md, "Throughput"). The paced mode keeps
asyncio's loop: it sleeps 0.5 ms between sends, and libuv's timers count whole milliseconds.

    python -m bench.replication                        # 3 runs of 20,000 messages each
    python -m bench.replication --batch 1 --count 5000 # PUB-sized commits
    python -m bench.replication --replica-ack leader   # OK once the leader has it
    python -m bench.replication --inflight 8           # 8 publishes pipelined per connection

Two more modes:

``--rate N`` (paced): single PUBs at a fixed N msgs/s in total over ``--producers``
connections for ``--seconds``, each publish sent at its due time whatever the previous ones
did; the time from each publish's send to its OK is recorded, and p50, p99 and the largest are
printed for R=1 and R=3 (runs alternate as above; medians of the runs' percentiles). This
process's garbage collector is frozen while it measures: its pauses are not the broker's.

``--table``: the whole comparison in one run: two clusters of three nodes on one etcd, one
with ``--replica-ack=all-isr`` and one with ``--replica-ack=leader``; R=1 (on the first),
R=3 all-isr and R=3 leader, each for MPUB (``--batch`` 20 messages, 8 in flight per
connection, 4 connections) and PUB (16 connections, one PUB each in flight); the runs of one
workload alternate between the three; medians of ``--runs`` and each R=3's ratio to R=1.
Beside each row, the CPU each process spent per message (user + system, µs; medians of the
runs): the leader, the two other nodes of its cluster (mean) and this process (the
producers), and their sum (the other nodes counted twice). All of them share the machine's
cores, so a row's rate times its sum is the core time it used per second: near the number of
cores the row was bound by CPU, well below it by its processes waiting on one another (the
round trips of a commit). /proc counts in clock ticks (10 ms): an MPUB run's figures are
within about a tenth.

    python -m bench.replication --rate 5000 --seconds 5 --runs 5
    python -m bench.replication --table --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.etcd_server import EtcdServer  # noqa: E402

from bench.target import proc_cpu_seconds  # noqa: E402
from nsqpy.client import Producer  # noqa: E402
from nsqpy.testing.process import Nsqd, wait_for  # noqa: E402


async def _publish(
    addr: str, topic: str, count: int, producers: int, size: int, batch: int, inflight: int
) -> float:
    body = b"r" * size
    per = count // producers
    ps = [Producer(addr) for _ in range(producers)]
    for p in ps:
        await p.connect()

    async def one(p: Producer, share: int) -> None:
        sent = 0
        while sent < share:
            n = min(batch, share - sent)
            if n == 1:
                await p.publish(topic, body)
            else:
                await p.multi_publish(topic, [body] * n)
            sent += n

    # ``inflight`` publishers share each connection (go-nsq's producer used from that many
    # goroutines): their publishes are pipelined on it
    shares = [per // inflight + (1 if k < per % inflight else 0) for k in range(inflight)]
    t0 = time.monotonic()
    await asyncio.gather(*(one(p, share) for p in ps for share in shares if share))
    secs = time.monotonic() - t0
    for p in ps:
        await p.stop()
    return per * producers / secs


async def _paced(
    addr: str, topic: str, rate: int, seconds: float, producers: int, size: int
) -> tuple[float, float, float, float]:
    """PUBs at ``rate`` msgs/s for ``seconds`` over ``producers`` connections, each sent at
    its due time: (p50, p99, max) of send-to-OK in ms, and the rate achieved."""
    body = b"p" * size
    ps = [Producer(addr) for _ in range(producers)]
    for p in ps:
        await p.connect()
    lat: list[float] = []

    async def one(p: Producer) -> None:
        t = time.perf_counter()
        await p.publish(topic, body)
        lat.append(time.perf_counter() - t)

    total = int(rate * seconds)
    # the publishes still waiting, no more: a list of every task made would give this process
    # full garbage collections of 15-45 ms, which showed as the broker's p99
    pending: set[asyncio.Task[None]] = set()
    gc.collect()
    gc.freeze()
    try:
        t0 = time.perf_counter()
        sent = 0
        while sent < total:
            due = min(total, int((time.perf_counter() - t0) * rate) + 1)
            while sent < due:
                task = asyncio.ensure_future(one(ps[sent % producers]))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
            await asyncio.sleep(0.0005)
        while pending:
            await asyncio.gather(*pending)
        secs = time.perf_counter() - t0
    finally:
        gc.unfreeze()
    for p in ps:
        await p.stop()
    lat.sort()
    n = len(lat)
    return lat[n // 2] * 1e3, lat[min(n - 1, n * 99 // 100)] * 1e3, lat[-1] * 1e3, n / secs


def _role(n: Nsqd, topic: str) -> str:
    for t in n.stats(topic=topic).get("topics") or []:
        r = t.get("replication")
        if r:
            return str(r["role"])
    return ""


def _cluster(etcd: EtcdServer, ack: str, first_id: int, cluster: str) -> list[Nsqd]:
    """Three nodes with ``--replica-ack=ack`` under the etcd cluster name ``cluster``, with
    topics r1 (R=1) and r3 (R=3)."""
    nodes = [
        Nsqd(
            [
                f"--etcd-endpoints={etcd.endpoint}",
                f"--etcd-cluster={cluster}",
                f"--node-id={i}",
                "--broadcast-address=127.0.0.1",
                f"--replica-ack={ack}",
            ],
            https=False,
        )
        for i in range(first_id, first_id + 3)
    ]
    for n in nodes:
        n.post("/topic/create", topic="r1", replicas="1")
    for _ in range(50):
        try:
            nodes[0].post("/topic/create", topic="r3", replicas="3")
            break
        except Exception:  # noqa: BLE001 - nodes still joining: NOT_ENOUGH_NODES
            time.sleep(0.2)
    return nodes


def _leader(nodes: list[Nsqd]) -> Nsqd:
    found: Nsqd = wait_for(lambda: next((n for n in nodes if _role(n, "r3") == "leader"), None), 15)
    return found


def _cpu_now(node: Nsqd, others: list[Nsqd]) -> tuple[float, float, float]:
    """CPU seconds so far (user + system) of ``node``, of ``others`` together and of this
    process."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return (
        proc_cpu_seconds(node.pid),
        sum(proc_cpu_seconds(o.pid) for o in others),
        me.ru_utime + me.ru_stime,
    )


def _cpu_per_msg(
    before: tuple[float, float, float], after: tuple[float, float, float], n: int
) -> tuple[float, float, float]:
    """µs per message between two _cpu_now readings: the node, each other node (the mean of
    the two) and this process."""
    lead, others, me = (a - b for a, b in zip(after, before, strict=True))
    return lead / n * 1e6, others / 2 / n * 1e6, me / n * 1e6


def _load() -> str:
    load = os.getloadavg()
    return f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def _table(etcd: EtcdServer, runs: int, count: int, size: int) -> None:
    """The --table mode (module docstring)."""
    all_isr = _cluster(etcd, "all-isr", 1, "bench-all-isr")
    leader_ack = _cluster(etcd, "leader", 4, "bench-leader")
    clusters = [all_isr, leader_ack]
    try:
        a, b = _leader(all_isr), _leader(leader_ack)
        targets = (("R=1", a, "r1"), ("R=3 all-isr", a, "r3"), ("R=3 leader", b, "r3"))
        workloads = (
            ("MPUB 20 x 8 in flight x 4 conns", 4, 20, 8, count),
            ("PUB 16 producers", 16, 1, 1, max(16, count // 4)),
        )
        load_before = _load()
        rows: list[tuple[str, str, list[float], list[tuple[float, float, float]]]] = []
        for wl, producers, batch, inflight, n in workloads:
            rates: dict[str, list[float]] = {label: [] for label, _, _ in targets}
            cpus: dict[str, list[tuple[float, float, float]]] = {
                label: [] for label, _, _ in targets
            }
            for _ in range(runs):
                for label, node, topic in targets:
                    others = [o for o in (all_isr if node is a else leader_ack) if o is not node]
                    before = _cpu_now(node, others)
                    rates[label].append(
                        uvloop.run(
                            _publish(node.tcp_address, topic, n, producers, size, batch, inflight)
                        )
                    )
                    cpus[label].append(_cpu_per_msg(before, _cpu_now(node, others), n))
            rows.extend((wl, label, rates[label], cpus[label]) for label, _, _ in targets)
        print(
            f"replication bench --table: {runs} runs each, {size} B messages; {load_before} "
            f"before, {_load()} after"
        )
        print(
            f"  {'workload':<32} {'topic':<12} {'median':>9}  {'x R=1':>6}   "
            f"{'CPU us/msg: leader, other node, bench = sum':<44} runs (msgs/s)"
        )
        base = 0.0
        for wl, label, rs, cs in rows:
            med = statistics.median(rs)
            if label == "R=1":
                base = med
            ratio = med / base if base else 0.0
            runs_text = " ".join(f"{r:.0f}" for r in rs)
            lead, other, bench = (statistics.median(c[k] for c in cs) for k in range(3))
            cpu = f"{lead:.1f}, {other:.1f}, {bench:.1f} = {lead + 2 * other + bench:.1f}"
            print(f"  {wl:<32} {label:<12} {med:>9.0f}  {ratio:>6.2f}   {cpu:<44} {runs_text}")
    finally:
        for c in clusters:
            for node in c:
                node.stop()


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    a.add_argument("--runs", type=int, default=3)
    a.add_argument("--count", type=int, default=20_000, help="messages per run")
    a.add_argument("--producers", type=int, default=4, help="connections")
    a.add_argument("--size", type=int, default=100, help="bytes per message")
    a.add_argument("--batch", type=int, default=20, help="messages per MPUB (1: PUB)")
    a.add_argument("--replica-ack", default="all-isr", help="all-isr or leader")
    a.add_argument(
        "--inflight", type=int, default=1, help="publishes in flight per connection (pipelined)"
    )
    a.add_argument("--rate", type=int, default=0, help="paced mode: PUBs per second in total")
    a.add_argument("--seconds", type=float, default=5.0, help="paced mode: seconds per run")
    a.add_argument("--table", action="store_true", help="R=1, R=3 all-isr, R=3 leader table")
    args = a.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsqpy-bench-etcd-") as tmp:
        etcd = EtcdServer(Path(tmp))
        nodes: list[Nsqd] = []
        try:
            if args.table:
                _table(etcd, args.runs, args.count, args.size)
                return 0
            nodes = _cluster(etcd, args.replica_ack, 1, "default")
            leader = _leader(nodes)
            if args.rate:
                _paced_runs(leader, args)
                return 0
            rates: dict[str, list[float]] = {"r1": [], "r3": []}
            for _ in range(args.runs):
                for topic in ("r1", "r3"):
                    rate = uvloop.run(
                        _publish(
                            leader.tcp_address,
                            topic,
                            args.count,
                            args.producers,
                            args.size,
                            args.batch,
                            args.inflight,
                        )
                    )
                    rates[topic].append(rate)
            print(
                f"replication bench: {args.count} msgs x {args.runs} runs, {args.producers} "
                f"producers, {args.size} B, batch {args.batch}, {args.inflight} in flight per "
                f"connection; {_load()}"
            )
            for topic, label in (("r1", "R=1"), ("r3", f"R=3 {args.replica_ack}")):
                runs = " ".join(f"{r:.0f}" for r in rates[topic])
                med = statistics.median(rates[topic])
                print(f"  {label:<12} median {med:>9.0f} msgs/s   runs: {runs}")
        finally:
            for n in nodes:
                n.stop()
            etcd.stop()
    return 0


def _paced_runs(leader: Nsqd, args: argparse.Namespace) -> None:
    """The --rate mode (module docstring)."""
    got: dict[str, list[tuple[float, float, float, float]]] = {"r1": [], "r3": []}
    for _ in range(args.runs):
        for topic in ("r1", "r3"):
            got[topic].append(
                # asyncio's own loop: the pacing sleeps 0.5 ms, below libuv's 1 ms timers
                asyncio.run(
                    _paced(
                        leader.tcp_address,
                        topic,
                        args.rate,
                        args.seconds,
                        args.producers,
                        args.size,
                    )
                )
            )
    print(
        f"replication bench --rate {args.rate}: PUBs of {args.size} B over {args.producers} "
        f"connections, {args.seconds:g} s x {args.runs} runs; {_load()}"
    )
    for topic, label in (("r1", "R=1"), ("r3", f"R=3 {args.replica_ack}")):
        rs = got[topic]
        p50 = statistics.median(r[0] for r in rs)
        p99 = statistics.median(r[1] for r in rs)
        top = max(r[2] for r in rs)
        achieved = statistics.median(r[3] for r in rs)
        p99s = " ".join(f"{r[1]:.2f}" for r in rs)
        print(
            f"  {label:<12} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  max {top:7.2f} ms  "
            f"({achieved:.0f} msgs/s; p99 per run: {p99s})"
        )


if __name__ == "__main__":
    raise SystemExit(main())
