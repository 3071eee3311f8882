"""python -m bench.big_mpub: what one huge valid MPUB costs the other clients.

Strategy: a fresh daemon per run (nsqpy-d, or each --daemon LABEL=CMD in turn, alternating, so
a busy neighbour slows them alike) with --mem-queue-size=2000000 (the batch stays in memory).
One connection sends an MPUB of --count one-byte messages (a million fits nsqd's default
--max-body-size of 5 MiB); meanwhile a polite connection publishes one message every 10 ms and
times each OK until the MPUB's OK arrives. Reported per daemon, medians over --runs: the
MPUB's time to OK and the polite client's slowest round trip (what the batch held the loop).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import threading
import time

from .target import Daemon

_SIZE = struct.Struct(">I")


def _read_ok(sock: socket.socket) -> bytes:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + _SIZE.unpack_from(buf)[0]:
        more = sock.recv(65536)
        if not more:
            raise ConnectionError("closed")
        buf += more
    return buf


def one_run(tcp_port: int, count: int) -> tuple[float, float]:
    """(seconds from sending the MPUB to its OK, the polite client's slowest PUB in s)."""
    body = _SIZE.pack(count) + (_SIZE.pack(1) + b"x") * count
    big = socket.create_connection(("127.0.0.1", tcp_port), timeout=300)
    polite = socket.create_connection(("127.0.0.1", tcp_port), timeout=300)
    big.sendall(b"  V2")
    polite.sendall(b"  V2")
    done = threading.Event()
    took: list[float] = []

    def publish() -> None:
        t = time.perf_counter()
        big.sendall(b"MPUB big\n" + _SIZE.pack(len(body)) + body)
        _read_ok(big)
        took.append(time.perf_counter() - t)
        done.set()

    threading.Thread(target=publish, daemon=True).start()
    slowest = 0.0
    while not done.is_set():
        t = time.perf_counter()
        polite.sendall(b"PUB small\n" + _SIZE.pack(1) + b"y")
        _read_ok(polite)
        slowest = max(slowest, time.perf_counter() - t)
        time.sleep(0.01)
    big.close()
    polite.close()
    return took[0], slowest


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.big_mpub", description=__doc__)
    p.add_argument("--count", type=int, default=1_000_000, help="messages in the MPUB")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--daemon", action="append", default=[], metavar="LABEL=CMD")
    args = p.parse_args()
    daemons = [(d.partition("=")[0], d.partition("=")[2] or None) for d in args.daemon]
    daemons = daemons or [("nsqpy", None)]
    results: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in daemons}
    for _ in range(args.runs):
        for label, cmd in daemons:
            d = Daemon(["--mem-queue-size=2000000"], cmd)
            try:
                results[label].append(one_run(d.tcp_port, args.count))
            finally:
                d.stop()
    load = os.getloadavg()
    print(f"MPUB of {args.count} messages, medians of {args.runs}, load {load[0]:.2f}")
    print("| daemon | MPUB to OK, s | polite slowest PUB, ms | every run (slowest, ms) |")
    print("|---|---:|---:|---|")
    for label, runs in results.items():
        ok = statistics.median(r[0] for r in runs)
        slow = statistics.median(r[1] for r in runs) * 1000
        every = ", ".join(f"{r[1] * 1000:.0f}" for r in runs)
        print(f"| {label} | {ok:.2f} | {slow:.1f} | {every} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
