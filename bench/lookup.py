"""GET /message?id= under a deep queue: lookup latency and what the index costs.

Strategy: start an nsqpy-d (bench.target.Daemon, like every mode), give topic "lk" two
channels, "held" (nobody consumes it: every message stays queued there, in memory with
--mem-queue-size above the count, else on disk) and "ids" (read once, to learn a sample of
the IDs, spread over the whole queue), MPUB ``count`` 200-byte bodies, then time
``lookups`` GET /message?id= calls for sampled IDs on one keep-alive HTTP connection, plus
as many for IDs the node never made. Resident memory (VmRSS) is read before the publish and
once /stats shows everything queued. Bounded: every wait has a deadline.

  .venv/bin/python -m bench.lookup --count 1000000               # memory (the default)
  .venv/bin/python -m bench.lookup --count 1000000 --disk        # --mem-queue-size=0"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import time

from bench.target import Daemon, proc_status_kib
from nsqpy import message, wire
from nsqpy.testing.wire_client import WireClient


def _connect(d: Daemon) -> WireClient:
    return WireClient.connect(("127.0.0.1", d.tcp_port), timeout=60, buffer_size=1 << 20)


def run(count: int, lookups: int, disk: bool, deadline_s: float) -> dict:
    flags = ["--mem-queue-size=0"] if disk else [f"--mem-queue-size={count + 10}"]
    d = Daemon(flags)
    deadline = time.monotonic() + deadline_s
    try:
        conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=60)

        def get(path: str, method: str = "GET") -> tuple[int, bytes]:
            conn.request(method, path)
            r = conn.getresponse()
            return r.status, r.read()

        assert get("/topic/create?topic=lk", "POST")[0] == 200
        for ch in ("held", "ids"):
            assert get(f"/channel/create?topic=lk&channel={ch}", "POST")[0] == 200
        rss0 = proc_status_kib(d.proc.pid, "VmRSS")
        pub = _connect(d)
        body = b"x" * 200
        sent = 0
        while sent < count:
            n = min(200, count - sent)
            pub.mpub("lk", [body] * n)  # WireError unless OK
            sent += n
        pub.close()

        def depth() -> int:
            st = json.loads(get("/stats?format=json&topic=lk&channel=held")[1])
            return st["topics"][0]["channels"][0]["depth"]

        while depth() < count:
            if time.monotonic() > deadline:
                raise TimeoutError("messages not all queued in time")
            time.sleep(0.2)
        rss1 = proc_status_kib(d.proc.pid, "VmRSS")

        # learn every 1000th ID (and the last) from channel "ids"
        sub = _connect(d)
        sub.sub("lk", "ids")
        sub.rdy(2500)
        sample: list[str] = []
        got = 0
        fins: list[bytes] = []
        while got < count:
            if time.monotonic() > deadline:
                raise TimeoutError("could not read the IDs in time")
            sub.fill()
            buf = sub.buf
            for ftype, start, end in sub.frames():
                sub.pos = end
                if ftype != wire.FRAME_TYPE_MESSAGE:
                    if buf[start:end] == wire.HEARTBEAT:
                        sub.nop()
                    continue
                msg_id = bytes(buf[start + message.ID_START : start + message.ID_END])
                if got % 1000 == 0 or got == count - 1:
                    sample.append(msg_id.decode())
                got += 1
                fins.append(b"FIN " + msg_id + b"\n")
            if fins:
                sub.send(b"".join(fins))
                fins.clear()
        sub.close()

        random.seed(1)
        ids = [random.choice(sample) for _ in range(lookups)]
        times = []
        where = set()
        for msg_id in ids:
            t0 = time.perf_counter()
            code, raw = get(f"/message?id={msg_id}&topic=lk")
            times.append(time.perf_counter() - t0)
            a = json.loads(raw)
            if code != 200 or not a["found"]:
                raise RuntimeError(f"lookup of {msg_id} failed: {code} {raw[:200]!r}")
            where.update(loc["state"] for loc in a["locations"] if loc["channel"] == "held")
        misses = []
        for i in range(lookups):
            fake = "%016x" % ((int(sample[-1], 16) + 4096 + i) & ((1 << 63) - 1))
            t0 = time.perf_counter()
            code, raw = get(f"/message?id={fake}&topic=lk")
            misses.append(time.perf_counter() - t0)
        ping = []
        for _ in range(lookups):
            t0 = time.perf_counter()
            get("/ping")
            ping.append(time.perf_counter() - t0)
        conn.close()
        ms = 1000.0
        return {
            "count": count,
            "where": sorted(where),
            "found_p50_ms": statistics.median(times) * ms,
            "found_p99_ms": sorted(times)[int(len(times) * 0.99)] * ms,
            "missing_p50_ms": statistics.median(misses) * ms,
            "ping_p50_ms": statistics.median(ping) * ms,
            "rss_per_msg_bytes": (rss1 - rss0) * 1024 / count,
        }
    finally:
        d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=1_000_000, help="messages queued (200 B each)")
    ap.add_argument("--lookups", type=int, default=1000, help="GET /message calls timed")
    ap.add_argument("--disk", action="store_true", help="--mem-queue-size=0: all on disk")
    ap.add_argument("--deadline", type=float, default=600, help="give up after this many s")
    args = ap.parse_args()
    r = run(args.count, args.lookups, args.disk, args.deadline)
    print(json.dumps(r, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
