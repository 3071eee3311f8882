"""NSQ's own benchmark clients against nsqpy-d and Go nsqd, side by side: the figures NSQ users
quote.

``bench_writer`` and ``bench_reader`` are nsqio/nsq v1.3.0's bench/ programs (.ci/install-go-nsq
builds them into /opt/nsq-go/bin beside Go's daemons). Each opens GOMAXPROCS connections (two
on a 2-core machine). One run, per daemon: a fresh daemon (loopback, port 0, a temporary data
path, nsqd's default --mem-queue-size 10000, so most of the backlog is on disk), then
``bench_writer`` (MPUB of ``--batch-size`` bodies of ``--size`` bytes for ``--writer-runfor``
seconds), then ``bench_reader`` (SUB, RDY ``--rdy``, one FIN per message, for
``--reader-runfor`` seconds) on the backlog the writer left; each prints its ops/s, read here
from its last log line. The daemons alternate run by run, and the table gives the medians and
each daemon's ratio to the last one named (Go nsqd by default), and beside them the CPU time
(user + system) that the daemon and bench_reader each spent while the reader ran, per message
read: on a machine of few cores they share them, so the reader's rate is bounded by the sum.

bench_reader counts for a fixed time, so a backlog that runs out early would understate the
rate: the reader's time is shorter than the writer's, and a run whose channel is empty at the
end is marked "exhausted" (then raise --writer-runfor).

    python -m bench.nsq_tools                          # nsqpy-d (this Python) vs Go nsqd, 5 runs
    python -m bench.nsq_tools --runs 3 --daemon pure="env PYTHONPATH=/src python -m nsqpy"

Exit status 1 when a tool or a daemon fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

from . import flags
from .target import Daemon, proc_cpu_seconds

GO_BIN = os.environ.get("NSQ_GO_BIN", "/opt/nsq-go/bin")
_OPS = re.compile(r"duration: (\S+) - ([0-9.]+)mb/s - ([0-9.]+)ops/s")


def _tool(name: str) -> str:
    path = os.path.join(GO_BIN, name)
    if not os.access(path, os.X_OK):
        raise SystemExit(f"bench.nsq_tools: {path} missing (run .ci/install-go-nsq)")
    return path


def run_tool(argv: list[str], timeout: float) -> float:
    """Run one NSQ bench tool; its ops/s (ValueError when it printed no result line)."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    m = None
    for line in (p.stderr + p.stdout).splitlines():
        m = _OPS.search(line) or m
    if p.returncode != 0 or m is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise ValueError(f"{argv[0]} exited {p.returncode}: {' | '.join(tail)}")
    return float(m.group(3))


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one_run(cmd: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """One daemon, writer then reader; {"writer": ops/s, "reader": ops/s, "left": depth,
    "reader_cpu_us": {"daemon": µs, "tool": µs}}: the CPU time (user + system) the daemon and
    bench_reader each spent while the reader ran, per message it read. On a machine with few
    cores the two share them, so the reader's rate is bounded by their sum."""
    d = Daemon([], cmd=cmd)
    try:
        addr = f"127.0.0.1:{d.tcp_port}"
        common = ["--nsqd-tcp-address", addr, "--size", str(args.size), "--topic", "sub_bench"]
        writer = run_tool(
            [
                _tool("bench_writer"),
                *common,
                "--runfor",
                f"{args.writer_runfor}s",
                "--batch-size",
                str(args.batch_size),
            ],
            timeout=args.writer_runfor + 60,
        )
        daemon_cpu = proc_cpu_seconds(d.proc.pid)
        tool_cpu = _children_cpu()
        reader = run_tool(
            [
                _tool("bench_reader"),
                *common,
                "--runfor",
                f"{args.reader_runfor}s",
                "--channel",
                "ch",
                "--rdy",
                str(args.rdy),
            ],
            timeout=args.reader_runfor + 60,
        )
        daemon_cpu = proc_cpu_seconds(d.proc.pid) - daemon_cpu
        tool_cpu = _children_cpu() - tool_cpu
        read = max(reader * args.reader_runfor, 1.0)
        left = d.target().queued("sub_bench", "ch")[0]
        return {
            "writer": writer,
            "reader": reader,
            "left": left,
            # CPU per message read while bench_reader ran, microseconds (user + system)
            "reader_cpu_us": {"daemon": daemon_cpu / read * 1e6, "tool": tool_cpu / read * 1e6},
        }
    finally:
        d.stop()


def note_run(
    runs: dict[str, list[dict[str, Any]]],
    label: str,
    i: int,
    r: dict[str, Any],
    *,
    label_width: int,
    rate_width: int,
    unit: str,
) -> None:
    """Run ``i`` (from 0) of ``label``: ``r`` (writer and reader rates, messages ``left``)
    gets the 1-minute load average, joins ``runs[label]`` and is printed as one line."""
    r["load"] = os.getloadavg()[0]
    runs[label].append(r)
    flag = "  exhausted" if not r["left"] else ""
    cpu = r.get("reader_cpu_us")
    cpu_text = f"  CPU µs/msg {cpu['daemon']:.2f} + {cpu['tool']:.2f}" if cpu else ""
    print(
        f"run {i + 1} {label:>{label_width}}: writer {r['writer']:>{rate_width},.0f} {unit}   "
        f"reader {r['reader']:>{rate_width},.0f} {unit}   left {r['left']:,}  "
        f"load {r['load']:.2f}{cpu_text}{flag}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.nsq_tools", description=__doc__.split("\n")[0]
    )
    flags.add_runs(p, 5)
    p.add_argument("--writer-runfor", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--reader-runfor", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--size", type=int, default=200, help="message body bytes (default 200)")
    p.add_argument("--batch-size", type=int, default=200, help="MPUB batch (default 200)")
    p.add_argument("--rdy", type=int, default=2500, help="reader RDY (default 2500)")
    flags.add_daemon(
        p,
        "a daemon command (default: nsqpy-d as this Python runs it, then Go nsqd); the last one "
        "named is the base of the ratios",
    )
    flags.add_json(p)
    args = p.parse_args(argv)
    daemons = flags.daemons(args.daemon) or [
        ("nsqpy-d", None),
        ("go-nsqd", os.path.join(GO_BIN, "nsqd")),
    ]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in daemons}
    for i in range(args.runs):
        for label, cmd in daemons:
            try:
                r = one_run(cmd, args)
            except (ValueError, subprocess.TimeoutExpired, OSError, AssertionError) as e:
                print(f"bench.nsq_tools: {label} run {i + 1} failed: {e}", file=sys.stderr)
                return 1
            note_run(runs, label, i, r, label_width=10, rate_width=12, unit="ops/s")
            time.sleep(1)  # let the previous daemon's files go before the next starts
    base = daemons[-1][0]
    med = {
        label: {k: statistics.median(r[k] for r in rs) for k in ("writer", "reader")}
        for label, rs in runs.items()
    }
    cpu = {
        label: {k: statistics.median(r["reader_cpu_us"][k] for r in rs) for k in ("daemon", "tool")}
        for label, rs in runs.items()
    }
    print(f"\nNSQ 1.3.0 bench_writer/bench_reader, medians of {args.runs}, ratios to {base}:\n")
    print(
        "| daemon | PUB (bench_writer) ops/s | ratio | SUB+FIN (bench_reader) ops/s | ratio "
        "| CPU µs per message read: daemon, bench_reader |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, m in med.items():
        w = m["writer"] / med[base]["writer"]
        r = m["reader"] / med[base]["reader"]
        c = cpu[label]
        print(
            f"| {label} | {m['writer']:,.0f} | {w:.2f}x | {m['reader']:,.0f} | {r:.2f}x "
            f"| {c['daemon']:.2f}, {c['tool']:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "argv": [shlex.quote(a) for a in sys.argv],
                    "runs": runs,
                    "medians": med,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
