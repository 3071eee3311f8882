"""Many connections on one daemon: 10,000 consumers, a polite client's round trips, RSS and idle
CPU, with Go nsqd side by side.

    python -m bench.connections [--conns 10000] [--topics 1000] [--idle-seconds 10] [--runs 1]

Per daemon (a fresh nsqpy-d, then a fresh Go nsqd 1.3.0 from /opt/nsq-go/bin, alternating over
--runs): a child process opens --conns consumer connections from one asyncio loop (magic, IDENTIFY
``{}``, SUB ``t<i mod topics>`` ``c``, RDY 1; each answers heartbeats with NOP, as clients must),
--connect-batch at a time, while one polite client, a thread of the bench process (idle otherwise,
as bench/polite.py's probe: so that the consumers' own processing does not delay its replies), PUBs
to its own topic every 100 ms and times each OK. Then every consumer sits idle for --idle-seconds
while the polite client goes on. Reported: the polite client's slowest and p99 round trip during
the connect storm and while idle (ms), the daemon's RSS with every connection up (MiB, VmRSS), and
its CPU while idle (% of one core, utime + stime from /proc/<pid>/stat). The bench raises its own
open-files limit to the hard limit, and the daemons are started after it (they inherit it).

Every loop is bounded (connect deadline --timeout seconds); traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import struct
import sys
import threading
import time
from typing import Any

from nsqpy import wire

from .target import Daemon, proc_rss_mib

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


def _polite(port: int, stop: threading.Event, marks: list[tuple[float, float]]) -> None:
    """PUB every 100 ms on its own blocking connection; (time sent, round trip s) per OK,
    heartbeats answered with NOP. Runs in a thread until ``stop`` is set."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(wire.MAGIC_V2)
        body = b"x" * 100
        cmd = b"PUB polite\n" + _SIZE.pack(len(body)) + body
        rf = s.makefile("rb")
        while not stop.is_set():
            t0 = time.monotonic()
            s.sendall(cmd)
            while True:
                size = _SIZE.unpack(rf.read(4))[0]
                frame = rf.read(size)
                if frame[4:] == wire.HEARTBEAT:
                    s.sendall(_NOP)
                    continue
                break
            marks.append((t0, time.monotonic() - t0))
            stop.wait(0.1)


async def _hold(port: int, conns: int, topics: int, batch_size: int, timeout: float, pipe) -> None:
    """The consumers' process body: connect every consumer, say so (seconds taken), hold them
    open until the parent says "close"."""
    protos: list[Consumer] = []
    t0 = time.monotonic()
    deadline = t0 + timeout
    for first in range(0, conns, batch_size):
        batch = range(first, min(conns, first + batch_size))
        await asyncio.wait_for(
            asyncio.gather(*(_consumer(port, f"t{i % topics}", protos) for i in batch)),
            max(1.0, deadline - time.monotonic()),
        )
    pipe.send(time.monotonic() - t0)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, pipe.recv)
    for p in protos:
        if p.transport is not None:
            p.transport.close()


def _consumers_main(port: int, conns: int, topics: int, batch: int, timeout: float, pipe) -> None:
    try:
        asyncio.run(_hold(port, conns, topics, batch, timeout, pipe))
    except BaseException as e:  # the parent reads it instead of a duration
        pipe.send(f"{type(e).__name__}: {e}")


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _window(marks: list[tuple[float, float]], t0: float, t1: float) -> tuple[float, float]:
    rtts = sorted(rtt for t, rtt in marks if t0 <= t < t1) or [0.0]
    p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
    return rtts[-1] * 1000, p99 * 1000


def _run(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    stop = threading.Event()
    marks: list[tuple[float, float]] = []
    polite = threading.Thread(target=_polite, args=(port, stop, marks), daemon=True)
    polite.start()
    time.sleep(0.5)
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=_consumers_main,
        args=(port, args.conns, args.topics, args.connect_batch, args.timeout, theirs),
        daemon=True,
    )
    t_storm = time.monotonic()
    child.start()
    try:
        if not ours.poll(args.timeout + 30):
            raise TimeoutError("the consumers did not connect in time")
        took = ours.recv()
        if isinstance(took, str):
            raise RuntimeError(f"consumers failed: {took}")
        t_idle = time.monotonic()
        rss = proc_rss_mib(pid)
        cpu0 = _proc_cpu_s(pid)
        time.sleep(args.idle_seconds)
        cpu1 = _proc_cpu_s(pid)
        t_end = time.monotonic()
    finally:
        stop.set()
        polite.join(15)
        ours.send("close")
        child.join(30)
        if child.is_alive():
            child.kill()
    storm_max, storm_p99 = _window(marks, t_storm, t_idle)
    idle_max, idle_p99 = _window(marks, t_idle, t_end)
    return {
        "connect_s": took,
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
    p.add_argument(
        "--nsqd-cmd",
        metavar="CMD",
        help="nsqpy-d's command (default: this Python's -m nsqpy), e.g. under a profiler",
    )
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.conns + 100:
        print(f"bench.connections: open-files hard limit {hard} < {args.conns}", file=sys.stderr)
        return 1
    daemons: list[tuple[str, str | None]] = [("nsqpy-d", args.nsqd_cmd)]
    if not args.no_go and os.access(GO_NSQD, os.X_OK):
        daemons.append(("go-nsqd", GO_NSQD))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in daemons}
    for i in range(args.runs):
        for label, cmd in daemons:
            d = Daemon([], cmd=cmd)
            try:
                r = _run(d.tcp_port, d.proc.pid, args)
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
