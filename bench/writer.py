"""writer: NSQ's bench_writer. Each connection sends one MPUB of --batch-size bodies of --size
bytes, waits for its OK, and sends the next, until --runfor has passed (checked after each
acknowledged batch, as bench_writer does) or its share of --count is published. The MPUB frame
is encoded once. The rate counts acknowledged messages over the time from the common start to
the last connection's last OK."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from . import harness, proto, report
from .target import Target


@dataclass
class WriterConfig(harness.LoadConfig):
    """MPUBs of ``batch_size`` bodies over ``concurrency`` connections in ``processes`` client
    processes (0: one per connection, up to the number of CPUs)."""

    batch_size: int = 200
    concurrency: int = 2
    processes: int = 0
    name: str = "writer"


def run_writer(target: Target, cfg: WriterConfig) -> dict[str, Any]:
    n = cfg.concurrency
    per_conn = -(-cfg.count // n)
    shares = [min(per_conn, max(0, cfg.count - i * per_conn)) for i in range(n)]
    full = proto.mpub_frame(cfg.topic, cfg.size, cfg.batch_size)
    runfor_ns = int(cfg.runfor * 1e9)
    addr = target.tcp

    def conn(ctx: harness.ConnContext) -> dict[str, Any]:
        share = shares[ctx.index]
        client = proto.connect(addr, "writer")
        try:
            start_ns = ctx.ready()
            deadline = start_ns + runfor_ns
            i = ctx.index
            counts, stop = ctx.counts, ctx.stop
            send, fill = client.send, client.fill
            ok = proto.OK_FRAME
            n_ok = len(ok)
            batch = cfg.batch_size
            sent = 0
            last_ns = start_ns
            monotonic_ns = time.monotonic_ns
            max_rtt = 0
            while sent < share and not stop[i]:
                k = batch if share - sent >= batch else share - sent
                send(full if k == batch else proto.mpub_frame(cfg.topic, cfg.size, k))
                # the usual answer: one recv brings exactly the OK frame (fill() first drops
                # what was consumed, so the buffer then holds that frame alone)
                fill()
                if client.have == n_ok and client.buf[:n_ok] == ok:
                    client.pos = n_ok
                else:  # anything else (heartbeats, a split OK, an error) the slow way
                    client.expect_ok()
                sent += k
                counts[i] = sent
                now = monotonic_ns()
                if now - last_ns > max_rtt:
                    max_rtt = now - last_ns
                last_ns = now
                if now >= deadline:
                    break
            return {"count": sent, "last_ns": last_ns, "max_rtt_ns": max_rtt}
        finally:
            client.close()

    procs = cfg.processes or harness.default_processes(n)
    res = harness.run(
        cfg.name,
        conn,
        n,
        procs,
        harness.time_or_count_policy(cfg.runfor, cfg.count),
        hard_limit=cfg.runfor + 30,
        progress=cfg.progress,
        daemon_pid=target.pid,
    )
    total = sum(r["count"] for r in res.results)
    return report.rate_row(
        cfg.name,
        f"MPUB {cfg.batch_size}x{cfg.size} B, {n} conns, {cfg.runfor:g}s",
        res,
        total,
        max(r["last_ns"] for r in res.results),
        total * cfg.size,
        # The longest wait for one MPUB's OK (send to OK): the daemon's longest stall.
        max_ms=max(r["max_rtt_ns"] for r in res.results) / 1e6,
    )
