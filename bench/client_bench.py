"""NSQ's bench_writer/bench_reader work done through three clients against one nsqpy-d:
nsqpy.client, pynsq (tornado) and go-nsq (Go's own bench_writer and bench_reader).

The work is NSQ v1.3.0's bench/ programs' (see bench/nsq_tools.py): the writer opens two
connections (GOMAXPROCS on this 2-core machine), each sending MPUBs of ``--batch-size``
bodies of ``--size`` bytes one after another (the next once the last is answered) for
``--writer-runfor`` seconds; the reader opens two connections, SUB, RDY ``--rdy`` each, one FIN
per message, for ``--reader-runfor`` seconds on the backlog the writer left. Each client runs
in its own process (``--role``, printing its result in bench_writer's line format); every run
gets a fresh nsqpy-d; the clients alternate run by run and the table gives medians (msgs/s)
with the load average. A run whose backlog ran out before the reader's time is marked
"exhausted" (its reader rate is then understated: raise --writer-runfor).

    python -m bench.client_bench                     # 3 runs, 5 s writer, 3 s reader
    python -m bench.client_bench --runs 5 --clients nsqpy,go

Go's tools are /opt/nsq-go/bin/bench_writer and bench_reader ($NSQ_GO_BIN), built by
.ci/install-go-nsq; when missing, the Go column is skipped and the output says so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .nsq_tools import GO_BIN, note_run, run_tool
from .target import Daemon

ROOT = Path(__file__).resolve().parent.parent
CONNS = 2
TOPIC = "sub_bench"


def _line(n: int, size: int, secs: float) -> str:
    """bench_writer's result line (bench/nsq_tools.py parses it)."""
    mb = n * size / 1024 / 1024 / secs
    return f"duration: {secs:.6f}s - {mb:.3f}mb/s - {n / secs:.3f}ops/s"


# ---------------------------------------------------------------- nsqpy.client roles


async def _nsqpy_writer(addr: str, runfor: float, size: int, batch: int) -> str:
    from nsqpy.client import Producer

    body = b"a" * size
    bodies = [body] * batch
    producers = [Producer(addr) for _ in range(CONNS)]
    for p in producers:
        await p.connect()
    end = time.monotonic() + runfor
    start = time.monotonic()
    counts = [0] * CONNS

    async def loop(i: int) -> None:
        p = producers[i]
        while time.monotonic() < end:
            await p.multi_publish(TOPIC, bodies)
            counts[i] += batch

    await asyncio.gather(*(loop(i) for i in range(CONNS)))
    secs = time.monotonic() - start
    for p in producers:
        await p.stop()
    return _line(sum(counts), size, secs)


async def _nsqpy_reader(addr: str, runfor: float, size: int, rdy: int) -> str:
    from nsqpy.client import Config, Consumer

    consumers = []
    for _ in range(CONNS):
        c = Consumer(TOPIC, "ch", Config(max_in_flight=rdy))
        c.add_handler(lambda m: None)  # returns: FIN
        consumers.append(c)
    start = time.monotonic()
    for c in consumers:
        await c.connect_to_nsqd(addr)
    await asyncio.sleep(runfor)
    n = sum(c.stats().finished for c in consumers)
    secs = time.monotonic() - start
    for c in consumers:
        c.change_max_in_flight(0)
    for c in consumers:
        await c.stop(5)
    return _line(n, size, secs)


# ---------------------------------------------------------------- pynsq roles


def _pynsq_writer(addr: str, runfor: float, size: int, batch: int) -> str:
    import nsq
    import tornado.ioloop

    loop = tornado.ioloop.IOLoop.current()
    bodies = [b"a" * size] * batch
    writers = [nsq.Writer([addr]) for _ in range(CONNS)]
    state = {"n": 0, "start": 0.0, "end": 0.0, "running": 0}

    def chain(w: Any) -> None:
        def cb(conn: Any = None, data: Any = None) -> None:
            if isinstance(data, nsq.Error):
                raise SystemExit(f"pynsq publish error: {data}")
            if data is not None:
                state["n"] += batch
            if time.monotonic() >= state["end"]:
                state["running"] -= 1
                if not state["running"]:
                    loop.stop()
                return
            w.mpub(TOPIC, bodies, callback=cb)

        return cb

    def begin() -> None:
        if not all(w.conns for w in writers):
            loop.call_later(0.01, begin)
            return
        state["start"] = time.monotonic()
        state["end"] = state["start"] + runfor
        state["running"] = CONNS
        for w in writers:
            chain(w)()

    loop.call_later(0.01, begin)
    loop.start()
    return _line(int(state["n"]), size, time.monotonic() - state["start"])


def _pynsq_reader(addr: str, runfor: float, size: int, rdy: int) -> str:
    import nsq
    import tornado.ioloop

    loop = tornado.ioloop.IOLoop.current()
    count = [0]

    def handler(msg: Any) -> bool:
        count[0] += 1
        return True  # FIN

    start = time.monotonic()
    readers = [
        nsq.Reader(
            topic=TOPIC,
            channel="ch",
            message_handler=handler,
            nsqd_tcp_addresses=[addr],
            max_in_flight=rdy,
        )
        for _ in range(CONNS)
    ]
    loop.call_later(runfor, loop.stop)
    loop.start()
    n = count[0]
    secs = time.monotonic() - start
    for r in readers:
        r.close()
    return _line(n, size, secs)


# ---------------------------------------------------------------- driver


def _role(args: argparse.Namespace) -> int:
    client, _, kind = args.role.partition("-")
    a = args.nsqd_tcp_address
    if client == "nsqpy":
        import uvloop

        if kind == "writer":
            coro = _nsqpy_writer(a, args.runfor, args.size, args.batch_size)
        else:
            coro = _nsqpy_reader(a, args.runfor, args.size, args.rdy)
        print(uvloop.run(coro), flush=True)
    elif kind == "writer":
        print(_pynsq_writer(a, args.runfor, args.size, args.batch_size), flush=True)
    else:
        print(_pynsq_reader(a, args.runfor, args.size, args.rdy), flush=True)
    return 0


def _argv(client: str, kind: str, addr: str, args: argparse.Namespace) -> list[str]:
    runfor = args.writer_runfor if kind == "writer" else args.reader_runfor
    if client == "go":
        tool = os.path.join(GO_BIN, f"bench_{kind}")
        common = [tool, "--nsqd-tcp-address", addr, "--size", str(args.size), "--topic", TOPIC]
        common += ["--runfor", f"{runfor}s"]
        if kind == "writer":
            return [*common, "--batch-size", str(args.batch_size)]
        return [*common, "--channel", "ch", "--rdy", str(args.rdy)]
    argv = [sys.executable, "-m", "bench.client_bench", "--role", f"{client}-{kind}"]
    argv += ["--nsqd-tcp-address", addr, "--runfor", str(runfor), "--size", str(args.size)]
    return [*argv, "--batch-size", str(args.batch_size), "--rdy", str(args.rdy)]


def one_run(client: str, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh nsqpy-d; the client's writer, then its reader: {"writer", "reader", "left"}."""
    d = Daemon([])
    try:
        addr = f"127.0.0.1:{d.tcp_port}"
        w = run_tool(_argv(client, "writer", addr, args), timeout=args.writer_runfor + 60)
        d.target().create_channel(TOPIC, "ch")
        r = run_tool(_argv(client, "reader", addr, args), timeout=args.reader_runfor + 60)
        left = d.target().queued(TOPIC, "ch")[0]
        return {"writer": w, "reader": r, "left": left}
    finally:
        d.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.client_bench", description=__doc__)
    p.add_argument("--runs", type=int, default=3, help="runs per client, alternating")
    p.add_argument("--clients", default="nsqpy,pynsq,go", help="comma-separated")
    p.add_argument("--writer-runfor", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--reader-runfor", type=float, default=3.0, help="seconds (default 3)")
    p.add_argument("--size", type=int, default=200, help="body bytes (default 200)")
    p.add_argument("--batch-size", type=int, default=200, help="MPUB batch (default 200)")
    p.add_argument("--rdy", type=int, default=2500, help="reader RDY per connection")
    p.add_argument("--role", help=argparse.SUPPRESS)
    p.add_argument("--nsqd-tcp-address", help=argparse.SUPPRESS)
    p.add_argument("--runfor", type=float, default=5.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role:
        return _role(args)
    clients = [c for c in args.clients.split(",") if c]
    if "go" in clients and not all(
        os.access(os.path.join(GO_BIN, f"bench_{k}"), os.X_OK) for k in ("writer", "reader")
    ):
        print(
            f"bench.client_bench: {GO_BIN}/bench_writer or bench_reader missing (run "
            ".ci/install-go-nsq): the go column is skipped",
            file=sys.stderr,
        )
        clients.remove("go")
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    for i in range(args.runs):
        for c in clients:
            try:
                r = one_run(c, args)
            except (ValueError, subprocess.TimeoutExpired, OSError) as e:
                print(f"bench.client_bench: {c} run {i + 1} failed: {e}", file=sys.stderr)
                return 1
            note_run(runs, c, i, r, label_width=6, rate_width=10, unit="msgs/s")
    label = {"nsqpy": "nsqpy.client", "pynsq": "pynsq 0.9", "go": "go-nsq (bench_*)"}
    print(
        f"\nbench_writer/bench_reader work against one nsqpy-d, medians of {args.runs} "
        f"(MPUB {args.batch_size} x {args.size} B, {CONNS} conns; reader RDY {args.rdy} x "
        f"{CONNS}, FIN each):\n"
    )
    print("| client | writer msgs/s | reader msgs/s | load (median) |")
    print("|---|---:|---:|---:|")
    for c, rs in runs.items():
        w = statistics.median(r["writer"] for r in rs)
        rd = statistics.median(r["reader"] for r in rs)
        ld = statistics.median(r["load"] for r in rs)
        print(f"| {label.get(c, c)} | {w:,.0f} | {rd:,.0f} | {ld:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
