"""`nsqpy <tool>` against Go's own tool on the same work: seconds for N messages, medians.

One nsqpy-d on loopback (nsqpy.testing.Nsqd, a temporary data path); per run and per tool, Go
then nsqpy (alternating, so load drifts hit both): ``nsq_tail -n N`` reading a backlog of N
100-byte messages to /dev/null, ``to_nsq`` publishing N lines from a file, and ``nsq_to_file
--sync-interval=1s`` until its channel holds nothing and has nothing in flight (the last
messages wait for a sync tick, up to 1 s for both). Go's tools come from /opt/nsq-go/bin
(``$NSQ_GO_BIN``). The load average is printed before and after.

    python -m bench.tools_vs_go                      # 3 runs of 100,000 messages
    python -m bench.tools_vs_go --runs 5 --messages 50000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nsqpy.testing import Nsqd

GO_BIN = Path(os.environ.get("NSQ_GO_BIN") or "/opt/nsq-go/bin")
TOOLS = ("nsq_tail", "to_nsq", "nsq_to_file")


def _cmd(which: str, tool: str) -> list[str]:
    if which == "go":
        return [str(GO_BIN / tool)]
    return [sys.executable, "-m", "nsqpy.tools", tool]


def _backlog(nsqd: Nsqd, topic: str, channel: str, n: int) -> None:
    nsqd.post("/topic/create", topic=topic)
    nsqd.post("/channel/create", topic=topic, channel=channel)
    for i in range(0, n, 5000):
        nsqd.post("/mpub", b"\n".join([b"y" * 100] * min(5000, n - i)), topic=topic)


def _settled(nsqd: Nsqd, topic: str, channel: str, n: int) -> bool:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        for c in t.get("channels") or []:
            if c["channel_name"] == channel:
                return c["message_count"] >= n and not c["depth"] and not c["in_flight_count"]
    return False


def one(nsqd: Nsqd, which: str, tool: str, run: int, n: int, tmp: Path) -> float:
    """Seconds for ``which``'s ``tool`` to handle ``n`` messages."""
    topic = f"{tool}_{which}_{run}"
    addr = f"--nsqd-tcp-address={nsqd.tcp_address}"
    if tool == "to_nsq":
        lines = tmp / "lines.txt"
        if not lines.exists():
            lines.write_bytes(b"".join(b"%099d\n" % i for i in range(n)))
        t0 = time.monotonic()
        with lines.open("rb") as stdin:
            subprocess.run(
                [*_cmd(which, tool), f"--topic={topic}", addr],
                stdin=stdin,
                stderr=subprocess.DEVNULL,
                check=True,
                timeout=600,
            )
        return time.monotonic() - t0
    _backlog(nsqd, topic, "c", n)
    if tool == "nsq_tail":
        t0 = time.monotonic()
        subprocess.run(
            [*_cmd(which, tool), f"--topic={topic}", "--channel=c", addr, "-n", str(n)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=600,
        )
        return time.monotonic() - t0
    out = tmp / topic
    out.mkdir()
    t0 = time.monotonic()
    p = subprocess.Popen(
        [
            *_cmd(which, tool),
            f"--topic={topic}",
            "--channel=c",
            addr,
            f"--output-dir={out}",
            "--sync-interval=1s",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        while not _settled(nsqd, topic, "c", n):
            if time.monotonic() - t0 > 600 or p.poll() is not None:
                raise SystemExit(f"bench.tools_vs_go: {which} {tool} did not finish")
            time.sleep(0.05)
        return time.monotonic() - t0
    finally:
        p.terminate()
        p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.tools_vs_go", description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args()
    for tool in TOOLS:
        if not (GO_BIN / tool).exists():
            raise SystemExit(f"bench.tools_vs_go: {GO_BIN / tool} missing (.ci/install-go-nsq)")
    print(f"load before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    times: dict[tuple[str, str], list[float]] = {}
    nsqd = Nsqd()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-tools-") as d:
            for run in range(args.runs):
                for tool in TOOLS:
                    for which in ("go", "py"):
                        s = one(nsqd, which, tool, run, args.messages, Path(d))
                        times.setdefault((tool, which), []).append(s)
                        print(f"run {run + 1} {tool} {which}: {s:.2f} s", file=sys.stderr)
    finally:
        nsqd.stop()
    print(f"load after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(f"| tool ({args.messages} messages) | Go s (median) | nsqpy s (median) | nsqpy/Go |")
    print("|---|---|---|---|")
    for tool in TOOLS:
        go = statistics.median(times[(tool, "go")])
        py = statistics.median(times[(tool, "py")])
        print(f"| {tool} | {go:.2f} | {py:.2f} | {py / go:.2f} |")


if __name__ == "__main__":
    main()
