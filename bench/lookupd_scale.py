"""nsqlookupd at cluster scale: nsqpy-lookupd beside Go nsqlookupd 1.3.0.

Strategy: one bench process, one asyncio loop (uvloop when installed), every connection real
TCP on loopback. For each run a lookupd is started with nsqpy.testing's launcher (ports 0),
then:

- ``--producers`` simulated nsqd peers each open a connection, send the magic ``"  V1"``,
  IDENTIFY (JSON with a distinct tcp_port/http_port/hostname per producer) and then, written
  in one go and answered in one read, ``REGISTER topic`` plus ``REGISTER topic channel`` for
  ``--topics`` x ``--channels`` (what an nsqd sends for its topics and channels; the replies
  are nsqlookupd's SendResponse frames, 4-byte big-endian size + "OK": the bench compares the
  whole reply block with the expected bytes, so no per-command wait and little bench CPU).
  Each producer then sends PING every ``--ping-interval`` seconds (random phase) and keeps
  reading its socket, so it sees the lookupd go away at once (Go: nsqlookupd/
  lookup_protocol_v1.go, nsqd/lookup.go).
- Once every producer is registered, the measured window (``--duration`` s) starts:
  ``--clients`` keep-alive HTTP/1.1 connections send GET /lookup?topic=<random registered
  topic> at ``--rate`` requests/s in all (each client on its own schedule, one request in
  flight per client); every request's latency (write to last body byte, ms) is kept. The
  lookupd's CPU is user+sys from /proc/<pid>/stat over the window, as % of one core; RSS is
  VmRSS at the window's end (MiB).
- Re-registration: SIGTERM the lookupd, start it again on the same TCP/HTTP ports; every
  producer reconnects (as soon as the new process listens) and IDENTIFYs and REGISTERs all
  again. The figure (s) runs from the new process's spawn (its start-up included) until every
  REGISTER is answered and /lookup lists all producers for a sample of topics; beside it, the
  CPU (user+sys, s) the new lookupd used in that time, which the machine's load moves less.

Runs alternate nsqpy-lookupd and Go (``--runs`` of each, in one series, so machine load falls
on both alike); the table gives medians. Every wait and loop is bounded in time. The bench
raises its open-files limit to the hard limit. Both daemons run with their default flags (log
level info: each first registration is logged, as in production). ``--checkout DIR`` (any number
of times) adds to the series an nsqpy-lookupd started from another checkout of nsqpy (run in
DIR, so DIR's nsqpy is the one imported), e.g. a build before a change beside the one after.

    .venv/bin/python -m bench.lookupd_scale                       # 200 x 500 x 2, 3 runs each
    .venv/bin/python -m bench.lookupd_scale --producers 20 --topics 50 --duration 5 --runs 1
    .venv/bin/python -m bench.lookupd_scale --checkout /path/to/main    # that one too, in turn
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import struct
import sys
import time

from nsqpy.testing import Nsqlookupd

from . import flags
from .target import proc_rss_mib

GO_LOOKUPD = "/opt/nsq-go/bin/nsqlookupd"
_OK_FRAME = struct.pack(">I", 2) + b"OK"
_SIZE = struct.Struct(">I")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1)).__int__()]


def proc_cpu_s(pid: int) -> float:
    """user+sys CPU seconds of ``pid`` (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


class Cluster:
    """The simulated producers and their shared state for one lookupd (one run)."""

    def __init__(self, args: argparse.Namespace, topics: list[str]) -> None:
        self.args = args
        self.topics = topics
        self.port = 0
        self.epoch = 0
        self.registered = 0
        self.all_registered = asyncio.Event()
        self.up = asyncio.Event()
        self.stopping = False
        self.errors: list[str] = []
        lines = []
        for t in topics:
            lines.append(f"REGISTER {t}\n")
            lines.extend(f"REGISTER {t} c{k}\n" for k in range(args.channels))
        self.register_block = "".join(lines).encode()
        self.expected = _OK_FRAME * len(lines)

    def new_epoch(self, port: int) -> None:
        self.port = port
        self.epoch += 1
        self.registered = 0
        self.all_registered.clear()
        self.up.set()

    async def producer(self, i: int, deadline: float) -> None:
        ident = json.dumps(
            {
                "broadcast_address": "127.0.0.1",
                "tcp_port": 20000 + i,
                "http_port": 40000 + i,
                "version": "1.3.0",
                "hostname": f"bench-producer-{i}",
            }
        ).encode()
        hello = b"  V1IDENTIFY\n" + _SIZE.pack(len(ident)) + ident
        done_epoch = 0
        while not self.stopping and time.monotonic() < deadline:
            if done_epoch == self.epoch:
                await self.up.wait()  # the lookupd is down: wait for its successor
                if done_epoch == self.epoch and not self.stopping:
                    self.errors.append(f"producer {i}: connection lost")
                    return
                continue
            epoch = self.epoch
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            try:
                writer.write(hello)
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                await reader.readexactly(size)  # IDENTIFY's JSON answer
                writer.write(self.register_block)
                got = await reader.readexactly(len(self.expected))
                if got != self.expected:
                    self.errors.append(f"producer {i}: unexpected replies {got[:80]!r}")
                    return
                done_epoch = epoch
                self.registered += 1
                if self.registered == self.args.producers:
                    self.all_registered.set()
                await self._serve(reader, writer)
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """PING every interval (random phase) and read until EOF (the lookupd went away)."""

        async def pings() -> None:
            await asyncio.sleep(random.uniform(0, self.args.ping_interval))
            while True:
                writer.write(b"PING\n")
                await asyncio.sleep(self.args.ping_interval)

        task = asyncio.create_task(pings())
        try:
            rest = b""  # Go writes a reply's size and data apart: frames may come split
            while True:
                chunk = await reader.read(4096)
                if not chunk:
                    return
                rest = (rest + chunk).replace(_OK_FRAME, b"")
                if not _OK_FRAME.startswith(rest):
                    self.errors.append(f"unexpected PING reply {rest[:80]!r}")
                    return
        finally:
            task.cancel()


async def _http_get(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> tuple[int, bytes]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        low = line.lower()
        if low.startswith(b"content-length:"):
            length = int(line[15:])
        elif low.startswith(b"transfer-encoding:") and b"chunked" in low:
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    parts = []  # Go's net/http chunks a body it was not given a length for (over 4 KiB)
    for _ in range(1 << 20):
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        parts.append(await reader.readexactly(size + 2))
        if size == 0:
            break
    return status, b"".join(p[:-2] for p in parts)


async def lookup_client(
    http_port: int, topics: list[str], interval: float, end: float, lat: list[float]
) -> int:
    """GET /lookup every ``interval`` s until ``end``; latencies (ms) into ``lat``; returns
    the count of non-200 answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
    bad = 0
    try:
        nxt = time.monotonic() + random.uniform(0, interval)
        while True:
            now = time.monotonic()
            if nxt > now:
                await asyncio.sleep(nxt - now)
            if time.monotonic() >= end:
                return bad
            path = f"/lookup?topic={random.choice(topics)}"
            t0 = time.perf_counter()
            status, _ = await asyncio.wait_for(_http_get(reader, writer, path), 10)
            lat.append((time.perf_counter() - t0) * 1000)
            bad += status != 200
            nxt += interval
    finally:
        writer.close()


async def all_listed(http_port: int, sample: list[str], n: int) -> bool:
    """True when /lookup names ``n`` producers for every topic in ``sample``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
    try:
        for t in sample:
            status, body = await _http_get(reader, writer, f"/lookup?topic={t}")
            if status != 200 or len(json.loads(body).get("producers") or []) != n:
                return False
        return True
    finally:
        writer.close()


async def one_run(name: str, cmd: list[str] | None, args: argparse.Namespace) -> dict:
    """One run against one lookupd: registration, measured window, restart."""
    topics = [f"topic{j:05d}" for j in range(args.topics)]
    sample = random.sample(topics, min(10, len(topics)))
    cl = Cluster(args, topics)
    deadline = time.monotonic() + args.timeout
    t0 = time.perf_counter()
    lk = await asyncio.to_thread(Nsqlookupd, cmd=cmd)
    tcp_port, http_port = lk.tcp_port, lk.http_port
    out: dict = {"daemon": name}
    tasks: list[asyncio.Task] = []
    try:
        cl.new_epoch(tcp_port)
        tasks = [asyncio.create_task(cl.producer(i, deadline)) for i in range(args.producers)]
        await asyncio.wait_for(cl.all_registered.wait(), deadline - time.monotonic())
        out["register_s"] = time.perf_counter() - t0
        out["register_cpu_s"] = proc_cpu_s(lk.pid)
        await asyncio.sleep(args.settle)
        # -- the measured window
        lat: list[float] = []
        cpu0, w0 = proc_cpu_s(lk.pid), time.perf_counter()
        end = time.monotonic() + args.duration
        interval = args.clients / args.rate
        bad = await asyncio.gather(
            *(lookup_client(http_port, topics, interval, end, lat) for _ in range(args.clients))
        )
        cpu1, w1 = proc_cpu_s(lk.pid), time.perf_counter()
        out["rss_mib"] = proc_rss_mib(lk.pid)
        out["cpu_pct"] = 100 * (cpu1 - cpu0) / (w1 - w0)
        out["requests"] = len(lat)
        out["non200"] = sum(bad)
        out["p50"], out["p99"], out["max"] = (
            percentile(lat, 50),
            percentile(lat, 99),
            max(lat, default=0.0),
        )
        # -- restart on the same ports, everything registers again
        cl.up.clear()
        ts = time.perf_counter()
        await asyncio.to_thread(lk.stop, 60)
        out["stop_s"] = time.perf_counter() - ts
        restart_args = [
            f"--tcp-address=127.0.0.1:{tcp_port}",
            f"--http-address=127.0.0.1:{http_port}",
        ]
        t0 = time.perf_counter()
        lk = await asyncio.to_thread(Nsqlookupd, restart_args, cmd=cmd)
        cl.new_epoch(tcp_port)
        await asyncio.wait_for(cl.all_registered.wait(), deadline - time.monotonic())
        while not await all_listed(http_port, sample, args.producers):
            if time.monotonic() > deadline:
                raise TimeoutError("/lookup never listed every producer")
            await asyncio.sleep(0.01)
        out["reregister_s"] = time.perf_counter() - t0
        out["reregister_cpu_s"] = proc_cpu_s(lk.pid)
        if cl.errors:
            raise RuntimeError(f"{name}: {cl.errors[:3]}")
        return out
    finally:
        cl.stopping = True
        cl.up.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if lk.alive():
            await asyncio.to_thread(lk.stop, 60)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lookupd_scale", description=__doc__)
    ap.add_argument("--producers", type=int, default=200, help="simulated nsqd peers")
    ap.add_argument("--topics", type=int, default=500, help="topics each producer registers")
    ap.add_argument("--channels", type=int, default=2, help="channels per topic")
    ap.add_argument("--clients", type=int, default=50, help="HTTP /lookup clients")
    ap.add_argument("--rate", type=float, default=200, help="/lookup requests/s, all clients")
    ap.add_argument("--duration", type=float, default=30, help="measured window, s")
    ap.add_argument("--ping-interval", type=float, default=15, help="producer PING period, s")
    ap.add_argument("--settle", type=float, default=1, help="pause before the window, s")
    flags.add_runs(ap, 3)
    ap.add_argument("--timeout", type=float, default=150, help="bound of one run, s")
    ap.add_argument("--go-bin", default=GO_LOOKUPD, help="Go nsqlookupd binary")
    ap.add_argument("--only", choices=("nsqpy", "go"), help="run one daemon only")
    ap.add_argument(
        "--checkout",
        action="append",
        default=[],
        metavar="DIR",
        help="also run nsqpy-lookupd from this checkout of nsqpy (repeatable)",
    )
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    daemons: list[tuple[str, list[str] | None]] = []
    if args.only != "go":
        daemons.append(("nsqpy-lookupd", None))
    for checkout in args.checkout:
        # started in the checkout (``python -m`` imports from the working directory first)
        script = 'cd "$1" && shift && exec "$0" -m nsqpy.lookupd "$@"'
        cmd = ["sh", "-c", script, sys.executable, os.path.abspath(checkout)]
        daemons.append((f"nsqpy-lookupd ({checkout})", cmd))
    if args.only != "nsqpy":
        daemons.append(("Go nsqlookupd", [args.go_bin]))
    print(
        f"# {args.producers} producers x {args.topics} topics x {args.channels} channels, "
        f"{args.clients} clients at {args.rate:g} req/s, window {args.duration:g} s, "
        f"PING every {args.ping_interval:g} s",
        flush=True,
    )
    results: dict[str, list[dict]] = {n: [] for n, _ in daemons}
    for r in range(args.runs):
        for name, cmd in daemons:
            res = run(one_run(name, cmd, args))
            results[name].append(res)
            print(
                f"run {r + 1} {name}: register {res['register_s']:.2f} s "
                f"(CPU {res['register_cpu_s']:.2f} s), "
                f"/lookup p50 {res['p50']:.2f} p99 {res['p99']:.2f} max {res['max']:.2f} ms "
                f"({res['requests']} requests, {res['non200']} non-200), "
                f"CPU {res['cpu_pct']:.1f}%, RSS {res['rss_mib']:.1f} MiB, "
                f"SIGTERM to exit {res['stop_s']:.2f} s, "
                f"re-register {res['reregister_s']:.2f} s (CPU {res['reregister_cpu_s']:.2f} s), "
                f"load {_load()}",
                flush=True,
            )
    print()
    print(
        "| daemon | /lookup p50 / p99 / max ms | lookupd CPU % | RSS MiB "
        "| re-register s (its CPU s) | SIGTERM to exit s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in results.items():

        def med(k: str, rs: list[dict] = rs) -> float:
            return statistics.median(x[k] for x in rs)

        print(
            f"| {name} | {med('p50'):.2f} / {med('p99'):.2f} / {med('max'):.2f} "
            f"| {med('cpu_pct'):.1f} | {med('rss_mib'):.1f} "
            f"| {med('reregister_s'):.2f} ({med('reregister_cpu_s'):.2f}) "
            f"| {med('stop_s'):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
