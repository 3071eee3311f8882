"""Publish throughput of a replicated topic (R=3, --replica-ack=all-isr) beside an R=1 topic on
the same three nsqpy-d nodes, on loopback.

One etcd (tests/support/etcd_server.py: Debian's etcd-server, temp data dir) and three nsqpy-d nodes
joined to it (ephemeral ports, temp data dirs). Topic ``r3`` is created with
``/topic/create?replicas=3``, topic ``r1`` with ``replicas=1``; both are published to on the
*leader* of r3 (so the R=1 figure is the same process, the same connections, without
replication). ``--producers`` connections each send ``--count / --producers`` messages of
``--size`` bytes in MPUBs of ``--batch`` (the next once the last is answered: an R=3 MPUB is
answered after both followers fsynced it). Runs alternate R=1 / R=3 ``--runs`` times; the table
gives medians in msgs/s and the load average (the machine is shared: figures are indicative).

    python -m bench.replication                        # 3 runs of 20,000 messages each
    python -m bench.replication --batch 1 --count 5000 # PUB-sized commits
    python -m bench.replication --replica-ack leader   # OK once the leader has it
    python -m bench.replication --inflight 8           # 8 publishes pipelined per connection
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.etcd_server import EtcdServer  # noqa: E402

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


def _role(n: Nsqd, topic: str) -> str:
    for t in n.stats(topic=topic).get("topics") or []:
        r = t.get("replication")
        if r:
            return str(r["role"])
    return ""


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
    args = a.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsqpy-bench-etcd-") as tmp:
        etcd = EtcdServer(Path(tmp))
        nodes: list[Nsqd] = []
        try:
            for i in (1, 2, 3):
                n = Nsqd(
                    [
                        f"--etcd-endpoints={etcd.endpoint}",
                        f"--node-id={i}",
                        "--broadcast-address=127.0.0.1",
                        f"--replica-ack={args.replica_ack}",
                    ],
                    https=False,
                )
                nodes.append(n)
            for n in nodes:
                n.post("/topic/create", topic="r1", replicas="1")
            for _ in range(50):
                try:
                    nodes[0].post("/topic/create", topic="r3", replicas="3")
                    break
                except Exception:  # noqa: BLE001 - nodes still joining: NOT_ENOUGH_NODES
                    time.sleep(0.2)
            leader = wait_for(
                lambda: next((n for n in nodes if _role(n, "r3") == "leader"), None), 15
            )
            rates: dict[str, list[float]] = {"r1": [], "r3": []}
            for _ in range(args.runs):
                for topic in ("r1", "r3"):
                    rate = asyncio.run(
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
            load = os.getloadavg()
            print(
                f"replication bench: {args.count} msgs x {args.runs} runs, {args.producers} "
                f"producers, {args.size} B, batch {args.batch}, {args.inflight} in flight per "
                f"connection; load {load[0]:.2f} "
                f"{load[1]:.2f} {load[2]:.2f}"
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


if __name__ == "__main__":
    raise SystemExit(main())
