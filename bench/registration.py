"""Create-to-/lookup time: how long a topic created on an nsqd takes to show in nsqlookupd.

Strategy: for each pairing of nsqd (nsqpy-d, Go nsqd) and nsqlookupd (nsqpy-lookupd, Go
nsqlookupd) start a fresh lookupd and an nsqd registered with it (loopback, ephemeral ports,
temporary data dir, nsqpy.testing's launcher), wait until /nodes lists the node and then
--settle seconds (default 3: a daemon's first seconds carry its start-up work, nsqpy-d's
deferred imports and collector set-up among them; 0 measures that too), then ``count`` times:
note the monotonic time, POST /topic/create?topic=<new name> on the nsqd, and poll GET
/lookup?topic= on one keep-alive connection to the lookupd until it names a producer. The
time from before the create call to the first answer naming it is the figure (milliseconds;
the create call's own round trip included, as a client library's "create, then look up" sees
it). Pairings run in turn within one round, and rounds repeat (--rounds), so that the machine's
load falls on all of them alike. Every wait is bounded (--timeout per topic).

    .venv/bin/python -m bench.registration                       # all four pairings
    .venv/bin/python -m bench.registration --count 200 --rounds 3 --go-bin /opt/nsq-go/bin

Prints one line per pairing and round, then a Markdown table of p50/p99/max over all rounds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from bench.e2e import percentile
from nsqpy.testing import Nsqd, Nsqlookupd, wait_for


def _lookup_has_producer(conn: http.client.HTTPConnection, topic: str) -> bool:
    conn.request("GET", "/lookup?" + urllib.parse.urlencode({"topic": topic}))
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        return False
    return bool(json.loads(body).get("producers"))


def run_pairing(
    nsqd_cmd: list[str] | None,
    lookupd_cmd: list[str] | None,
    count: int,
    timeout: float,
    settle: float = 3.0,
) -> list[float]:
    """``count`` create-to-/lookup times in milliseconds for one pairing (fresh daemons)."""
    lookupd = Nsqlookupd(cmd=lookupd_cmd)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-reg-") as data:
            lookup_addr = f"127.0.0.1:{lookupd.tcp_port}"
            # Go nsqd: HTTPS is bound only with a certificate; nsqpy-d's launcher binds it anyway.
            nsqd = Nsqd(
                [f"--lookupd-tcp-address={lookup_addr}", "--broadcast-address=127.0.0.1"],
                data_path=data,
                cmd=nsqd_cmd,
                cwd=data,
            )
            try:
                lk = http.client.HTTPConnection("127.0.0.1", lookupd.http_port, timeout=timeout)
                nd = http.client.HTTPConnection("127.0.0.1", nsqd.http_port, timeout=timeout)

                def node_listed() -> bool:
                    lk.request("GET", "/nodes")
                    r = lk.getresponse()
                    body = r.read()
                    return r.status == 200 and bool(json.loads(body).get("producers"))

                wait_for(node_listed, timeout, what="the node in /nodes")
                time.sleep(settle)
                out: list[float] = []
                stamp = time.time_ns()
                for i in range(count):
                    topic = f"reg_{stamp}_{i}"
                    t0 = time.monotonic()
                    nd.request("POST", "/topic/create?" + urllib.parse.urlencode({"topic": topic}))
                    r = nd.getresponse()
                    r.read()
                    if r.status != 200:
                        raise RuntimeError(f"/topic/create {topic}: {r.status}")
                    deadline = t0 + timeout
                    while not _lookup_has_producer(lk, topic):
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"{topic} not in /lookup after {timeout} s")
                    out.append((time.monotonic() - t0) * 1000)
                lk.close()
                nd.close()
                return out
            finally:
                nsqd.stop()
    finally:
        lookupd.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.registration", description=__doc__)
    p.add_argument("--count", type=int, default=200, help="topics per pairing and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per topic at most")
    p.add_argument(
        "--settle", type=float, default=3.0, help="seconds between start-up and the first topic"
    )
    p.add_argument(
        "--go-bin",
        default=os.environ.get("NSQ_GO_BIN", "/opt/nsq-go/bin"),
        help="folder with Go's nsqd and nsqlookupd (pairings with Go skip without them)",
    )
    a = p.parse_args(argv)
    go = Path(a.go_bin)
    nsqds: dict[str, list[str] | None] = {"nsqpy-d": None}
    lookupds: dict[str, list[str] | None] = {"nsqpy-lookupd": None}
    if (go / "nsqd").exists():
        nsqds["Go nsqd"] = [str(go / "nsqd")]
    if (go / "nsqlookupd").exists():
        lookupds["Go nsqlookupd"] = [str(go / "nsqlookupd")]
    results: dict[tuple[str, str], list[float]] = {}
    for rnd in range(a.rounds):
        for nname, ncmd in nsqds.items():
            for lname, lcmd in lookupds.items():
                xs = run_pairing(ncmd, lcmd, a.count, a.timeout, a.settle)
                results.setdefault((nname, lname), []).extend(xs)
                print(
                    f"round {rnd + 1}: {nname} -> {lname}: p50 {statistics.median(xs):.2f} ms, "
                    f"p99 {percentile(sorted(xs), 99):.2f} ms, max {max(xs):.2f} ms",
                    file=sys.stderr,
                )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print("| nsqd -> lookupd | topics | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for (nname, lname), xs in results.items():
        print(
            f"| {nname} -> {lname} | {len(xs)} | {statistics.median(xs):.2f} | "
            f"{percentile(sorted(xs), 99):.2f} | {max(xs):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
