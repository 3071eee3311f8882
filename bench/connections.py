"""Many connections on one daemon: 10,000 consumers, a polite client's round trips, RSS and idle
CPU, with Go nsqd side by side.

    python -m bench.connections [--conns 10000] [--topics 1000] [--idle-seconds 10] [--runs 1]

Per daemon (a fresh nsqpy-d, then a fresh Go nsqd 1.3.0 from /opt/nsq-go/bin, alternating over
--runs): the bench opens --conns consumer connections from one asyncio process (magic, IDENTIFY
``{}``, SUB ``t<i mod topics>`` ``c``, RDY 1; each answers heartbeats with NOP, as clients
must), --connect-batch at a time, while one polite client PUBs to its own topic every 100 ms
and times each OK. Then every consumer sits idle for --idle-seconds while the polite client
goes on. Reported: the polite client's slowest and p99 round trip during the connect storm and
while idle (ms), the daemon's RSS with every connection up (MiB, VmRSS), and its CPU while idle
(% of one core, utime + stime from /proc/<pid>/stat). The bench raises its own open-files
limit to the hard limit, and the daemons are started after it (they inherit it).

Every loop is bounded (connect deadline --timeout seconds); traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import struct
import sys
import time
from typing import Any

from nsqpy import wire

from .target import Daemon

GO_NSQD = os.path.join(os.environ.get("NSQ_GO_BIN", "/opt/nsq-go/bin"), "nsqd")
_SIZE = struct.Struct(">i")
_NOP = b"NOP\n"


class Consumer(asyncio.Protocol):
    """One subscribed connection: counts its OKs, answers heartbeats, ignores messages (RDY 1
    and nothing is published to its topic)."""

    def __init__(self, ready: asyncio.Future[None]) -> None:
        self.buf = bytearray()
        self.oks = 0
        self.ready = ready
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        end = 0
        for ftype, start, stop in wire.iter_frames(buf):
            end = stop
            if ftype == wire.FRAME_TYPE_RESPONSE:
                body = bytes(buf[start:stop])
                if body == wire.HEARTBEAT:
                    assert self.transport is not None
                    self.transport.write(_NOP)
                else:
                    self.oks += 1
                    if self.oks == 2 and not self.ready.done():  # IDENTIFY, SUB
                        self.ready.set_result(None)
            elif ftype == wire.FRAME_TYPE_ERROR and not self.ready.done():
                self.ready.set_exception(RuntimeError(bytes(buf[start:stop]).decode()))
        del buf[:end]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("closed before SUB was answered"))


async def _consumer(port: int, topic: str, protos: list[Consumer]) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    transport, proto = await loop.create_connection(lambda: Consumer(ready), "127.0.0.1", port)
    protos.append(proto)
    transport.write(
        wire.MAGIC_V2
        + b"IDENTIFY\n"
        + _SIZE.pack(2)
        + b"{}"
        + b"SUB "
        + topic.encode()
        + b" c\nRDY 1\n"
    )
    await ready


async def _polite(port: int, stop: asyncio.Event, marks: list[tuple[float, float]]) -> None:
    """PUB every 100 ms on its own connection; (time sent, round trip s) per OK."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(wire.MAGIC_V2)
    body = b"x" * 100
    cmd = b"PUB polite\n" + _SIZE.pack(len(body)) + body
    while not stop.is_set():
        t0 = time.monotonic()
        writer.write(cmd)
        while True:
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
            if frame[4:] == wire.HEARTBEAT:
                writer.write(_NOP)
                continue
            break
        marks.append((t0, time.monotonic() - t0))
        try:
            await asyncio.wait_for(stop.wait(), 0.1)
        except TimeoutError:
            pass
    writer.close()


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _window(marks: list[tuple[float, float]], t0: float, t1: float) -> tuple[float, float]:
    rtts = sorted(rtt for t, rtt in marks if t0 <= t < t1) or [0.0]
    p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
    return rtts[-1] * 1000, p99 * 1000


async def _run(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    stop = asyncio.Event()
    marks: list[tuple[float, float]] = []
    polite = asyncio.create_task(_polite(port, stop, marks))
    await asyncio.sleep(0.5)
    protos: list[Consumer] = []
    t_storm = time.monotonic()
    deadline = t_storm + args.timeout
    for first in range(0, args.conns, args.connect_batch):
        batch = range(first, min(args.conns, first + args.connect_batch))
        await asyncio.wait_for(
            asyncio.gather(*(_consumer(port, f"t{i % args.topics}", protos) for i in batch)),
            max(1.0, deadline - time.monotonic()),
        )
    t_idle = time.monotonic()
    rss = _rss_mib(pid)
    cpu0 = _proc_cpu_s(pid)
    await asyncio.sleep(args.idle_seconds)
    cpu1 = _proc_cpu_s(pid)
    t_end = time.monotonic()
    stop.set()
    await asyncio.wait_for(polite, 5)
    storm_max, storm_p99 = _window(marks, t_storm, t_idle)
    idle_max, idle_p99 = _window(marks, t_idle, t_end)
    for p in protos:
        if p.transport is not None:
            p.transport.close()
    return {
        "connect_s": t_idle - t_storm,
        "storm_max_ms": storm_max,
        "storm_p99_ms": storm_p99,
        "idle_max_ms": idle_max,
        "idle_p99_ms": idle_p99,
        "rss_mib": rss,
        "idle_cpu_pct": 100 * (cpu1 - cpu0) / (t_end - t_idle),
    }


def main(argv: list[str] | None = None) -> int:
    doc = (__doc__ or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="python -m bench.connections", description=doc)
    p.add_argument("--conns", type=int, default=10_000)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--connect-batch", type=int, default=200)
    p.add_argument("--runs", type=int, default=1, help="rounds, daemons alternating")
    p.add_argument("--timeout", type=float, default=120.0, help="connect deadline, seconds")
    p.add_argument("--no-go", action="store_true", help="nsqpy-d only")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.conns + 100:
        print(f"bench.connections: open-files hard limit {hard} < {args.conns}", file=sys.stderr)
        return 1
    daemons: list[tuple[str, str | None]] = [("nsqpy-d", None)]
    if not args.no_go and os.access(GO_NSQD, os.X_OK):
        daemons.append(("go-nsqd", GO_NSQD))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in daemons}
    for i in range(args.runs):
        for label, cmd in daemons:
            d = Daemon([], cmd=cmd)
            try:
                r = asyncio.run(_run(d.tcp_port, d.proc.pid, args))
            finally:
                d.stop()
            r["load"] = os.getloadavg()[0]
            results[label].append(r)
            print(f"run {i + 1} {label}: " + json.dumps({k: round(v, 2) for k, v in r.items()}))
    print(f"\n{args.conns:,} connections (IDENTIFY, SUB over {args.topics:,} topics, RDY 1), ")
    print(f"medians of {args.runs}:\n")
    print(
        "| daemon | connect s | polite max / p99 ms, connecting | polite max / p99 ms, idle "
        "| RSS MiB | idle CPU % |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, rs in results.items():

        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        print(
            f"| {label} | {med('connect_s'):.1f} | {med('storm_max_ms'):.1f} / "
            f"{med('storm_p99_ms'):.1f} | {med('idle_max_ms'):.1f} / {med('idle_p99_ms'):.1f} "
            f"| {med('rss_mib'):,.0f} | {med('idle_cpu_pct'):.1f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
