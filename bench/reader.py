r"""reader: NSQ's bench_reader. Each connection SUBs to --topic/--channel (before the start), sends
RDY --rdy at the start, and FINs every message it receives. Frames are walked in place in the
connection's receive buffer (nsqpy.wire.iter_frames through its WireClient; IDs at message.py's
offsets); the FINs for everything one recv brought are sent as one buffer of
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

from . import harness, proto
from .target import Target
from .writer import WriterConfig, run_writer


@dataclass
class ReaderConfig:
    topic: str = "sub_bench"
    channel: str = "ch"
    size: int = 200
    rdy: int = 2500
    concurrency: int = 2
    processes: int = 0
    runfor: float = 10.0
    count: int = 2_000_000
    prefill: int = -1  # -1: top the queue up to --count; 0: read what is there; N: add N
    progress: bool = True
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
    fill, send = client.fill, client.send
    monotonic_ns = time.monotonic_ns
    fin_join = b"\nFIN ".join
    id_start, id_end, body_start = proto.MSG_ID_START, proto.MSG_ID_END, proto.MSG_BODY_START
    heartbeat = proto.HEARTBEAT
    client.sock.settimeout(0.1)
    send(proto.rdy(rdy_count))
    while not stop[i]:
        try:
            fill()
        except TimeoutError:
            continue
        buf = client.buf
        ids = []
        end = client.pos
        for ftype, start, end in client.frames():
            if ftype == 2:
                ids.append(buf[start + id_start : start + id_end])
                body_bytes += end - start - body_start
            elif ftype == 0:
                if buf[start:end] == heartbeat:
                    send(proto.NOP)
            else:
                raise proto.ProtocolError(f"error frame: {bytes(buf[start:end])!r}")
        client.pos = end
        if ids:
            send(b"FIN " + fin_join(ids) + b"\n")
            count += len(ids)
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
    total = sum(r["count"] for r in res.results)
    body_bytes = sum(r["bytes"] for r in res.results)
    end_ns = max([r["last_ns"] for r in res.results if r["count"]] or [res.end_ns])
    duration = max((end_ns - res.start_ns) / 1e9, 1e-9)
    return {
        "mode": cfg.name,
        "workload": f"SUB+FIN RDY {cfg.rdy}, {n} conns, {cfg.runfor:g}s",
        "count": total,
        "queued": expected,
        "duration_s": duration,
        "msgs_per_s": total / duration,
        "mb_per_s": body_bytes / duration / 1024 / 1024,
        "daemon_cpu": res.daemon_cpu_share,
        "client_cpu": res.client_cpu_share,
    }
