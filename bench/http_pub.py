"""python -m bench http-pub: HTTP /pub round trips per second on one keep-alive connection.

Strategy: the cost of nsqpy-d's HTTP server per request, with as little client as possible:
one raw socket, one POST /pub at a time (HTTP/1.1 keep-alive), the answer read up to its
Content-Length before the next is sent. Each run starts a fresh daemon (the installed console
script through nsqpy.testing's launcher: loopback, port 0, a temporary --data-path; --variant
code trees alternate with it), publishes --count messages of --size bytes (bounded by
--max-seconds) and stops it. The figure is the median of --runs runs per variant."""

from __future__ import annotations

import os
import socket
import statistics
import time
from typing import Any

from nsqpy.testing import Nsqd

from .startup import script


def _read_answer(sock: socket.socket, buf: bytearray) -> int:
    """Read one HTTP answer off ``sock`` (``buf`` keeps what follows it); its status code."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buf[:end]).decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            total = end + 4 + length
            while len(buf) < total:
                more = sock.recv(65536)
                if not more:
                    raise RuntimeError("connection closed mid-answer")
                buf += more
            del buf[:total]
            return int(head.split(" ", 2)[1])
        more = sock.recv(65536)
        if not more:
            raise RuntimeError("connection closed before an answer")
        buf += more


def one_run(pythonpath: str, count: int, size: int, max_seconds: float) -> dict[str, Any]:
    """One fresh nsqpy-d, ``count`` PUBs in a row; {"count", "seconds", "per_s"}."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    d = Nsqd(
        [f"--mem-queue-size={count + 1}"],
        cmd=script("nsqpy-d"),
        https=False,
        env=env,
        start_timeout=30,
        wait_ping=True,
        max_lines=10_000,
    )
    try:
        body = b"x" * size
        request = (
            b"POST /pub?topic=http_bench HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        with socket.create_connection(("127.0.0.1", d.http_port), timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray()
            sock.sendall(request)  # the topic is created outside the timed part
            _read_answer(sock, buf)
            t0 = time.perf_counter()
            stop_at = t0 + max_seconds
            done = 0
            while done < count and time.perf_counter() < stop_at:
                sock.sendall(request)
                status = _read_answer(sock, buf)
                if status != 200:
                    raise RuntimeError(f"PUB answered {status}")
                done += 1
            seconds = time.perf_counter() - t0
    finally:
        try:
            d.stop(10)
        except AssertionError:
            pass  # it did not exit on SIGTERM and was killed; the figure stands
    return {"count": done, "seconds": seconds, "per_s": done / seconds if seconds else 0.0}


def run_http_pub(
    variants: list[tuple[str, str]],
    runs: int,
    count: int,
    size: int,
    max_seconds: float,
    log: Any = None,
) -> list[dict[str, Any]]:
    """Alternating runs of every variant; one row per variant with every run and the median
    of PUBs per second."""
    per: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in variants}
    for rnd in range(runs):
        for label, pp in variants:
            r = one_run(pp, count, size, max_seconds)
            per[label].append(r)
            if log is not None:
                log(
                    f"[http-pub] round {rnd + 1}/{runs} ({label}): {r['count']} PUBs in "
                    f"{r['seconds']:.3f}s = {r['per_s']:.0f}/s"
                )
    return [
        {
            "mode": "http-pub",
            "variant": label,
            "runs": rs,
            "median_per_s": statistics.median(r["per_s"] for r in rs),
        }
        for label, rs in per.items()
    ]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| code | PUB/s, one keep-alive connection (median) | runs |", "|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['median_per_s']:.0f} | {len(r['runs'])} |")
    return "\n".join(lines)
