"""Scale check: many topics, channels and consumer connections on one daemon.

    python -m bench.scale [--topics 1000] [--idle-channels 10000] [--idle-seconds 10]

1. Starts nsqpy-d (loopback, ephemeral ports, temp data dir), creates --topics topics with two
   channels each over HTTP, and connects one consumer per channel (2 x topics connections, each
   SUB + RDY 10).
2. Publishes one message to every topic (pipelined PUBs on one connection) and waits until every
   consumer got its message: delivery continues at that scale.
3. Measures the daemon's CPU while those connections sit idle, then adds topics until there are
   --idle-channels channels, disconnects every consumer and measures the idle CPU again: the
   queue-scan loop samples 20 channels per 100 ms instead of walking them all.

Prints a Markdown table. Every step is bounded in time; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import resource
import sys
import time

from nsqpy import message, wire
from nsqpy.testing import Nsqd
from nsqpy.testing.wire_client import WireClient


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid: int, seconds: float) -> float:
    """Percent of one core the daemon used over ``seconds`` of wall time."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def create(http_port: int, topics: range) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
    for i in topics:
        for path in (
            f"/topic/create?topic=t{i}",
            f"/channel/create?topic=t{i}&channel=a",
            f"/channel/create?topic=t{i}&channel=b",
        ):
            conn.request("POST", path)
            r = conn.getresponse()
            r.read()
            assert r.status == 200, (path, r.status)
    conn.close()


async def consumers(port: int, topics: int, deadline: float, publish) -> tuple[int, float]:
    """Connect 2 x topics consumers, publish, and count deliveries; returns (received, s)."""
    got = 0
    done = asyncio.Event()
    writers = []

    async def one(topic: int, channel: str, ready: asyncio.Event) -> None:
        nonlocal got
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)
        writer.write(
            wire.MAGIC_V2
            + wire.encode_command(b"SUB", b"t%d" % topic, channel.encode())
            + b"RDY 10\n"
        )
        buf = bytearray()
        subscribed = False
        while True:
            data = await reader.read(65536)
            if not data:
                return
            buf += data
            used = 0
            for ftype, start, end in wire.iter_frames(buf):
                used = end
                payload = buf[start:end]
                if ftype == wire.FRAME_TYPE_RESPONSE and payload == wire.OK and not subscribed:
                    subscribed = True
                    ready.set()
                elif ftype == wire.FRAME_TYPE_MESSAGE:
                    writer.write(b"FIN " + payload[message.ID_SLICE] + b"\n")
                    got += 1
                    if got == 2 * topics:
                        done.set()
                elif payload == wire.HEARTBEAT:
                    writer.write(b"NOP\n")
            del buf[:used]

    readies = []
    tasks = []
    for i in range(topics):
        for ch in ("a", "b"):
            ev = asyncio.Event()
            readies.append(ev)
            tasks.append(asyncio.create_task(one(i, ch, ev)))
    await asyncio.wait_for(
        asyncio.gather(*(e.wait() for e in readies)), max(1, deadline - time.monotonic())
    )
    t0 = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, publish)
    try:
        await asyncio.wait_for(done.wait(), max(1, deadline - time.monotonic()))
    except TimeoutError:
        pass
    elapsed = time.monotonic() - t0
    idle = await asyncio.get_running_loop().run_in_executor(None, idle_cpu_hook[0])
    idle_cpu_hook[1] = idle
    for w in writers:
        w.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return got, elapsed


idle_cpu_hook: list = [None, None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--idle-channels", type=int, default=10000)
    ap.add_argument("--idle-seconds", type=float, default=10)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = []
    # nsqpy.testing's launcher: loopback, ports from its log lines, a temporary data dir
    daemon = Nsqd(https=False, max_lines=10_000)
    proc, tcp, http_port = daemon.proc, daemon.tcp_port, daemon.http_port
    try:
        t0 = time.monotonic()
        create(http_port, range(args.topics))
        rows.append(
            (
                "create topics + channels over HTTP",
                f"{args.topics} topics, {2 * args.topics} channels",
                f"{time.monotonic() - t0:.1f} s",
            )
        )

        def publish() -> None:
            c = WireClient.connect(("127.0.0.1", tcp), timeout=10)
            try:
                for i in range(args.topics):
                    c.command(b"PUB", b"t%d" % i, body=b"hello %d" % i)
                for _ in range(args.topics):
                    c.expect_ok()
            finally:
                c.close()

        idle_cpu_hook[0] = lambda: idle_cpu(proc.pid, args.idle_seconds)
        got, elapsed = asyncio.run(
            consumers(tcp, args.topics, time.monotonic() + args.timeout, publish)
        )
        rows.append(
            (
                "deliver one message per channel",
                f"{2 * args.topics} consumer connections",
                f"{got}/{2 * args.topics} delivered in {elapsed:.2f} s",
            )
        )
        rows.append(
            (
                "idle daemon CPU",
                f"{2 * args.topics} idle connections, {2 * args.topics} channels",
                f"{idle_cpu_hook[1]:.1f}% of a core",
            )
        )
        extra = max(0, args.idle_channels // 2 - args.topics)
        create(http_port, range(args.topics, args.topics + extra))
        n_channels = 2 * (args.topics + extra)
        time.sleep(1)
        rows.append(
            (
                "idle daemon CPU",
                f"{n_channels} channels, no connections",
                f"{idle_cpu(proc.pid, args.idle_seconds):.1f}% of a core",
            )
        )
        with open(f"/proc/{proc.pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        rows.append(("daemon resident memory", f"{n_channels} channels", f"{rss // 1024} MiB"))
    finally:
        daemon.stop(120)
    print("| step | scale | result |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
