r"""reader: NSQ's bench_reader. Each connection SUBs to --topic/--channel (before the start), sends
RDY --rdy at the start, and FINs every message it receives. Frames are walked in place in the
connection's receive buffer (proto.fin_received: nsqpy.wire.iter_frames through its WireClient;
IDs at message.py's offsets); the FINs for everything one recv brought are sent as one buffer of
"FIN <id>\n" lines (bench_reader batches through a 4 KiB bufio.Writer to the same effect).

What it reads: the messages already queued for the channel (what `writer` left in the topic,
as NSQ's bench.py runs bench_reader after bench_writer), topped up first to --count by an
untimed MPUB pre-fill unless --prefill says otherwise. The run stops when everything queued
at the start is consumed, or at --runfor; the rate counts FINned messages over the time from
the start to the last message received."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from . import harness, proto, report
from .target import Target
from .writer import WriterConfig, run_writer


@dataclass
class ReaderConfig(harness.ConsumerConfig):
    """``concurrency`` consuming connections in ``processes`` client processes (0 as the
    writer's). ``prefill``: -1 tops the queue up to ``count``, 0 reads what is there, N
    publishes N more first; ``size`` is the prefill's body size."""

    concurrency: int = 2
    processes: int = 0
    prefill: int = -1
    count: int = 2_000_000
    name: str = "reader"


def _consume(
    client: proto.WireClient, ctx: harness.ConnContext, rdy_count: int
) -> tuple[int, int, int]:
    """Receive and FIN until stopped. Returns (messages, bytes of bodies, last message time)."""
    i = ctx.index
    counts, stop = ctx.counts, ctx.stop
    count = 0
    body_bytes = 0
    last_ns = 0
    fill, fin_received = client.fill, proto.fin_received
    monotonic_ns = time.monotonic_ns
    body_start = proto.MSG_BODY_START
    client.sock.settimeout(0.1)
    client.send(proto.rdy(rdy_count))
    while not stop[i]:
        try:
            fill()
        except TimeoutError:
            continue
        spans = fin_received(client)
        if spans:
            count += len(spans)
            body_bytes += sum([end - start for start, end in spans]) - len(spans) * body_start
            counts[i] = count
            last_ns = monotonic_ns()
    return count, body_bytes, last_ns


def run_reader(target: Target, cfg: ReaderConfig) -> dict[str, Any]:
    queued, _ = target.queued(cfg.topic, cfg.channel)
    prefill = cfg.prefill if cfg.prefill >= 0 else max(0, cfg.count - queued)
    if prefill:
        q = queued
        wcfg = WriterConfig(
            topic=cfg.topic,
            size=cfg.size,
            concurrency=2,
            runfor=600,
            count=prefill,
            progress=cfg.progress,
            name=f"{cfg.name}-prefill",
        )
        run_writer(target, wcfg)
        # Wait until the daemon reports them (bounded).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            q, _ = target.queued(cfg.topic, cfg.channel)
            if q >= queued + prefill:
                break
            time.sleep(0.1)
        queued = q
    if queued <= 0:
        raise harness.BenchError(f"nothing queued in {cfg.topic} to read")
    expected = min(queued, cfg.count) if cfg.prefill < 0 else queued
    addr = target.tcp

    def conn(ctx: harness.ConnContext) -> dict[str, Any]:
        client = proto.connect(addr, "reader")
        try:
            proto.subscribe(client, cfg.topic, cfg.channel)
            ctx.ready()
            count, body_bytes, last_ns = _consume(client, ctx, cfg.rdy)
            return {"count": count, "bytes": body_bytes, "last_ns": last_ns}
        finally:
            client.close()

    n = cfg.concurrency
    res = harness.run(
        cfg.name,
        conn,
        n,
        cfg.processes or harness.default_processes(n),
        harness.time_or_count_policy(cfg.runfor, expected),
        hard_limit=cfg.runfor + 30,
        progress=cfg.progress,
        daemon_pid=target.pid,
    )
    return report.rate_row(
        cfg.name,
        f"SUB+FIN RDY {cfg.rdy}, {n} conns, {cfg.runfor:g}s",
        res,
        sum(r["count"] for r in res.results),
        max([r["last_ns"] for r in res.results if r["count"]] or [res.end_ns]),
        sum(r["bytes"] for r in res.results),
        queued=expected,
    )
