"""The polite client: how long a well-behaved client waits while a workload runs.

Strategy: a thread of the bench process (idle otherwise: the workload's connections live in
their own processes) connects to the daemon, sends one PUB to its own topic every 100 ms and
waits for the OK, for as long as the workload runs. The slowest of those round trips is what
the workload made a bystander wait (the event loop held by other clients' traffic); the table
shows it in its own column."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .target import Target

TOPIC = "polite_probe"
INTERVAL_S = 0.1
_OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


@contextmanager
def polite_client(target: Target) -> Iterator[dict[str, Any]]:
    """Run the probe while the ``with`` body runs; the dict it yields gets ``polite_max_ms``,
    ``polite_p99_ms`` and ``polite_count`` (round trips) at the end. A round trip that gets no
    OK within 10 s ends the probe and counts as 10 s."""
    result: dict[str, Any] = {}
    stop = threading.Event()
    rtts: list[float] = []
    cmd = b"PUB " + TOPIC.encode() + b"\n" + (5).to_bytes(4, "big") + b"hello"

    def run() -> None:
        try:
            s = socket.create_connection(target.tcp, timeout=10)
        except OSError:
            return
        with s:
            s.sendall(b"  V2")
            while not stop.wait(INTERVAL_S):
                t0 = time.perf_counter()
                try:
                    s.sendall(cmd)
                    got = b""
                    while len(got) < len(_OK):  # skip nothing: a publisher gets only OKs
                        chunk = s.recv(len(_OK) - len(got))
                        if not chunk:
                            return
                        got += chunk
                except OSError:
                    rtts.append(10.0)
                    return
                rtts.append(time.perf_counter() - t0)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield result
    finally:
        stop.set()
        t.join(15)
        target.delete_topic(TOPIC)
        if rtts:
            ordered = sorted(rtts)
            result["polite_max_ms"] = ordered[-1] * 1e3
            result["polite_p99_ms"] = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3
            result["polite_count"] = len(ordered)
