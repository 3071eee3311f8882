"""python -m bench <writer|reader|e2e|memory|all|startup|http-pub> [options]

Strategy: each load mode runs against the nsqd named by --nsqd-tcp-address/--nsqd-http-address,
or else against a daemon it starts itself (nsqpy-d, or --nsqd-cmd) on loopback with ephemeral
ports and a temporary data dir, stopped with SIGTERM at the end. Progress goes to stderr, the
summary lines too; the Markdown table to stdout; --json writes every run and the medians.
`startup` times fresh daemons from exec to GET /ping (startup.py); `http-pub` times HTTP
/pub round trips on one keep-alive connection (http_pub.py). `bombs` (and `malformed`, the
same with --mixed) measures what compression bombs and malformed input cost a polite client
and the daemon's memory (bombs.py), alternating the daemons it is given."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from . import flags, report
from .bombs import BombsConfig, run_bombs
from .bombs import table as bombs_table
from .e2e import E2EConfig, run_e2e
from .flags import positive as _positive
from .flags import seconds as _seconds
from .harness import BenchError
from .http_pub import run_http_pub
from .http_pub import table as http_pub_table
from .memory import run_memory
from .polite import polite_client
from .reader import ReaderConfig, run_reader
from .startup import GO_DAEMONS, PY_DAEMONS, StartupConfig, run_startup
from .startup import table as startup_table
from .target import Daemon, Target
from .writer import WriterConfig, run_writer

MODES = ("writer", "reader", "e2e", "memory")

_C = TypeVar("_C")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("target")
    g.add_argument("--nsqd-tcp-address", help="host:port of a running nsqd (else one is started)")
    g.add_argument("--nsqd-http-address", help="host:port of the running nsqd's HTTP API")
    g.add_argument("--nsqd-pid", type=int, help="its process id (memory mode; else found by port)")
    g.add_argument(
        "--nsqd-cmd",
        help="command that starts the daemon (default: this Python's `-m nsqpy`); it gets "
        "--tcp-address, --http-address, --data-path",
    )
    g.add_argument(
        "--daemon-arg", action="append", default=[], help="extra flag for a started daemon"
    )
    g.add_argument(
        "--mem-queue-size",
        type=int,
        help="--mem-queue-size for a started daemon (default: nsqd's 10000; memory mode: "
        "2000000 or --count, whichever is larger)",
    )
    g = common.add_argument_group("run")
    g.add_argument("--runfor", type=_seconds, default=10.0, help="seconds per run (default 10)")
    g.add_argument("--size", type=_positive, default=200, help="message body bytes (default 200)")
    flags.add_json(g)
    g.add_argument("--quiet", action="store_true", help="no progress lines")
    g.add_argument(
        "--polite",
        action="store_true",
        help="during writer/reader/e2e, a polite client PUBs every 100 ms and the slowest OK it "
        "waited for is reported",
    )

    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="nsqd benchmarks: NSQ's bench_writer/bench_reader workloads, "
        "publish-to-deliver latency, resident memory per queued message.",
    )
    sub = p.add_subparsers(dest="mode", required=True)

    w = sub.add_parser("writer", parents=[common], help="MPUB throughput (bench_writer)")
    w.add_argument("--topic", default="sub_bench")
    w.add_argument("--batch-size", type=_positive, default=200)
    w.add_argument("--concurrency", type=_positive, default=2, help="connections (default 2)")
    w.add_argument(
        "--processes",
        type=int,
        default=0,
        help="client processes (default: one per connection, at most one per CPU)",
    )
    w.add_argument("--count", type=_positive, default=10_000_000, help="at most this many")

    r = sub.add_parser("reader", parents=[common], help="SUB+FIN throughput (bench_reader)")
    r.add_argument("--topic", default="sub_bench")
    r.add_argument("--channel", default="ch")
    r.add_argument("--rdy", type=_positive, default=2500)
    r.add_argument("--concurrency", type=_positive, default=2, help="connections (default 2)")
    r.add_argument("--processes", type=int, default=0)
    r.add_argument(
        "--count",
        type=_positive,
        default=2_000_000,
        help="read at most this many (default 2M)",
    )
    r.add_argument(
        "--prefill",
        type=int,
        default=-1,
        help="messages to publish first (untimed); default: top the queue up to --count; "
        "0: read only what is queued (what `writer` left)",
    )

    e = sub.add_parser("e2e", parents=[common], help="publish-to-deliver latency at a fixed rate")
    e.add_argument("--topic", default="e2e_bench")
    e.add_argument("--channel", default="ch")
    e.add_argument("--rate", type=_positive, default=10_000, help="msgs/s (default 10000)")
    e.add_argument("--e2e-batch", type=_positive, default=1, help="1: PUB; N: MPUB of N")
    e.add_argument("--rdy", type=_positive, default=2500)
    e.add_argument("--warmup", type=float, default=1.0, help="seconds left out (default 1)")
    e.add_argument(
        "--output-buffer-timeout", type=int, help="ms, sent in the subscriber's IDENTIFY"
    )
    e.add_argument("--count", type=_positive, default=10_000_000)
    e.add_argument(
        "--samples", metavar="CSV", help="write every measured message's publish time and latency"
    )

    m = sub.add_parser("memory", parents=[common], help="resident bytes per queued message")
    m.add_argument("--topic", default="mem_bench")
    m.add_argument("--channel", default="ch")
    m.add_argument("--count", type=_positive, default=1_000_000)
    m.add_argument("--timeout", type=_seconds, default=120, help="bound on the fill (s)")

    a = sub.add_parser("all", parents=[common], help="writer, reader, e2e, memory; a table")
    a.add_argument("--repeat", type=_positive, default=1, help="rounds; the table shows medians")
    a.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    a.add_argument("--batch-size", type=_positive, default=200)
    a.add_argument("--concurrency", type=_positive, default=2)
    a.add_argument("--processes", type=int, default=0)
    a.add_argument("--rdy", type=_positive, default=2500)
    a.add_argument("--rate", type=_positive, default=10_000)
    a.add_argument("--e2e-batch", type=_positive, default=1)
    a.add_argument("--warmup", type=float, default=1.0)
    a.add_argument("--output-buffer-timeout", type=int)
    a.add_argument("--memory-count", type=_positive, default=1_000_000)
    a.add_argument("--timeout", type=_seconds, default=120)
    s = sub.add_parser(
        "startup",
        help="seconds from exec to GET /ping answering 200 (nsqpy-d, nsqpy-lookupd; Go's too "
        "when /opt/nsq-go/bin has them)",
    )
    flags.add_runs(s, 10)
    s.add_argument(
        "--daemons",
        default=",".join((*PY_DAEMONS, *GO_DAEMONS)),
        help="comma-separated subset of " + ", ".join((*PY_DAEMONS, *GO_DAEMONS)),
    )
    flags.add_variant(s, _VARIANT_HELP)
    flags.add_json(s)
    s.add_argument(
        "--no-compile",
        action="store_true",
        help="do not byte-compile each code tree's nsqpy first (then PYTHONDONTWRITEBYTECODE=1 "
        "means compiling every module at every exec)",
    )

    for name in ("bombs", "malformed"):
        b = sub.add_parser(
            name,
            help="compression bombs (bombs) or mixed malformed input (malformed: bombs --mixed) "
            "against a polite client: its round trips, the daemon's VmRSS",
        )
        b.add_argument("--mixed", action="store_true", help="mixed malformed input, not bombs")
        b.add_argument(
            "--tls",
            action="store_true",
            help="TLS handshakes (IDENTIFY tls_v1, handshake, close) in a loop, not bombs; the "
            "daemons get a throwaway --tls-cert/--tls-key",
        )
        b.add_argument("--conns", type=_positive, default=20, help="attacking connections")
        b.add_argument("--runfor", type=_seconds, default=15.0 if name == "bombs" else 40.0)
        b.add_argument("--kinds", default="", help="comma-separated attacks to play (default all)")
        b.add_argument("--settle", type=_seconds, default=3.0, help="after the attack (s)")
        b.add_argument("--repeat", type=_positive, default=1, help="rounds (medians shown)")
        flags.add_daemon(
            b,
            "a daemon command (as --nsqd-cmd; 'nsqpy' alone: this Python's -m nsqpy); "
            "repeat to alternate several within each round",
        )
        b.add_argument("--nsqd-cmd", help="shorthand for one --daemon")
        b.add_argument("--daemon-arg", action="append", default=[])
        flags.add_json(b, None)

    h = sub.add_parser("http-pub", help="HTTP /pub round trips per second, one connection")
    flags.add_runs(h, 3, of="variant")
    h.add_argument("--count", type=_positive, default=5000, help="PUBs per run (default 5000)")
    h.add_argument("--size", type=_positive, default=200, help="message body bytes")
    h.add_argument("--max-seconds", type=_seconds, default=60.0, help="bound per run")
    flags.add_variant(h, _VARIANT_HELP)
    return p


_VARIANT_HELP = (
    "a code tree put in front of the installed nsqpy (e.g. a git worktree of an older "
    "commit); repeat to alternate several; default: the installed package only"
)


def _variants(args: argparse.Namespace) -> list[tuple[str, str]]:
    return flags.variants(args.variant, "bench")


def run_http_pub_mode(args: argparse.Namespace) -> int:
    try:
        rows = run_http_pub(
            _variants(args), args.runs, args.count, args.size, args.max_seconds, _log
        )
    except (RuntimeError, OSError) as e:
        _log(f"bench: FAILED: {e}")
        return 1
    print(f"\n{args.count} PUBs of {args.size} bytes per run, {os.cpu_count()} CPUs\n")
    print(http_pub_table(rows))
    return 0


def run_bombs_mode(args: argparse.Namespace) -> int:
    daemons = flags.daemons(args.daemon)
    if args.nsqd_cmd:
        daemons.append((args.nsqd_cmd, args.nsqd_cmd))
    if not daemons:
        daemons = [("nsqpy", None)]
    cfg = BombsConfig(
        kinds=args.kinds,
        conns=args.conns,
        runfor=args.runfor,
        settle=args.settle,
        mixed=args.mixed or (args.mode == "malformed"),
        tls=args.tls,
    )
    daemon_args = list(args.daemon_arg)
    if cfg.tls:
        import tempfile

        from .bombs import tls_files

        cert, key = tls_files(tempfile.mkdtemp(prefix="bench-tls-"))
        daemon_args += [f"--tls-cert={cert}", f"--tls-key={key}"]
    started = datetime.datetime.now().astimezone()
    runs: list[dict[str, Any]] = []
    for rnd in range(1, args.repeat + 1):
        for label, cmd in daemons:
            _log(f"bench: round {rnd}/{args.repeat}: {label}")
            d = Daemon(daemon_args, cmd)
            try:
                r = run_bombs(d.target(), cfg)
                if not d.alive():
                    raise BenchError(f"{label} died (exit {d.proc.returncode})")
            except (BenchError, RuntimeError, OSError) as e:
                _log(f"bench: FAILED: {e}")
                return 1
            finally:
                d.stop()
            r["daemon"] = label
            r["round"] = rnd
            runs.append(r)
    rows = []
    for label, _ in daemons:
        mine = [r for r in runs if r["daemon"] == label]
        row = dict(mine[0])
        for k in (
            "rss_start_mib",
            "rss_peak_mib",
            "rss_end_mib",
            "polite_median_ms",
            "polite_max_ms",
            "polite_count",
        ):
            vals = [r[k] for r in mine if r[k] is not None]
            row[k] = statistics.median(vals) if vals else None
        rows.append(row)
    load = os.getloadavg()
    print(
        f"\n{started:%Y-%m-%d %H:%M %Z}, "
        f"{'TLS handshakes' if cfg.tls else 'mixed malformed input' if cfg.mixed else 'bombs'}, "
        f"{cfg.conns} connections for {cfg.runfor:.0f} s, {os.cpu_count()} CPUs (shared), "
        f"load now {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, medians of {args.repeat}\n"
    )
    print(bombs_table(rows))
    if len(runs) > len(rows):
        print("\nEvery run:\n")
        print(bombs_table(runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": started.isoformat(), "argv": sys.argv, "runs": runs}, f, indent=2)
    return 0


def run_startup_mode(args: argparse.Namespace) -> int:
    daemons = tuple(d for d in args.daemons.split(",") if d)
    unknown = set(daemons) - {*PY_DAEMONS, *GO_DAEMONS}
    if unknown:
        raise SystemExit(f"bench: unknown daemon(s) {sorted(unknown)}")
    cfg = StartupConfig(
        runs=args.runs, daemons=daemons, variants=_variants(args), compile=not args.no_compile
    )
    started = datetime.datetime.now().astimezone()
    try:
        rows = run_startup(cfg, _log)
    except (RuntimeError, OSError) as e:
        _log(f"bench: FAILED: {e}")
        return 1
    for d in daemons:
        if d in GO_DAEMONS and not any(r["daemon"] == d for r in rows):
            _log(f"[startup] {d} skipped: no Go binary in /opt/nsq-go/bin ($NSQ_GO_BIN)")
    print(
        f"\n{started:%Y-%m-%d %H:%M %Z}, exec to GET /ping = 200, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, medians of {args.runs}\n"
    )
    print(startup_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": started.isoformat(), "argv": sys.argv, "rows": rows}, f, indent=2)
    return 0


# ---------------------------------------------------------------- targets


@contextmanager
def target_for(args: argparse.Namespace, mem_queue_size: int | None) -> Iterator[Target]:
    """The running nsqd the flags name, or a fresh daemon stopped on the way out."""
    if args.nsqd_tcp_address or args.nsqd_http_address:
        if not (args.nsqd_tcp_address and args.nsqd_http_address):
            raise SystemExit("bench: give both --nsqd-tcp-address and --nsqd-http-address")
        yield Target.running(args.nsqd_tcp_address, args.nsqd_http_address, args.nsqd_pid)
        return
    extra = list(args.daemon_arg)
    if mem_queue_size is not None:
        extra.append(f"--mem-queue-size={mem_queue_size}")
    d = Daemon(extra, args.nsqd_cmd)
    _log(f"bench: started {' '.join(d.argv)} (pid {d.proc.pid}) on {d.target().tcp_address}")
    try:
        yield d.target()
        if not d.alive():
            raise BenchError(
                f"the daemon died (exit {d.proc.returncode}):\n" + "\n".join(d.lines[-30:])
            )
    finally:
        rc = d.stop()
        if rc != 0:
            _log(f"bench: the daemon exited {rc} on SIGTERM; its last lines:")
            for line in d.lines[-20:]:
                _log("  " + line)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _own_daemon(args: argparse.Namespace) -> bool:
    return not (args.nsqd_tcp_address or args.nsqd_http_address)


# ---------------------------------------------------------------- modes


def _config(cls: Callable[..., _C], args: argparse.Namespace, names: str, **kw: Any) -> _C:
    """A mode's config: each of ``names`` (space-separated) copied from the command line under
    its own name, ``progress`` unless --quiet, then ``kw``."""
    return cls(**{n: getattr(args, n) for n in names.split()}, progress=not args.quiet, **kw)


def writer_config(args: argparse.Namespace, **kw: Any) -> WriterConfig:
    return _config(WriterConfig, args, "size batch_size concurrency processes runfor", **kw)


def reader_config(args: argparse.Namespace, **kw: Any) -> ReaderConfig:
    return _config(ReaderConfig, args, "size rdy concurrency processes runfor", **kw)


def e2e_config(args: argparse.Namespace, **kw: Any) -> E2EConfig:
    names = "size rate rdy runfor warmup output_buffer_timeout"
    return _config(E2EConfig, args, names, batch=args.e2e_batch, **kw)


def memory_mqs(args: argparse.Namespace, count: int) -> int:
    return args.mem_queue_size if args.mem_queue_size is not None else max(2_000_000, count)


def run_single(args: argparse.Namespace) -> list[dict[str, Any]]:
    mode = args.mode
    if mode == "memory":
        with target_for(args, memory_mqs(args, args.count)) as t:
            return [
                run_memory(
                    t,
                    topic=args.topic,
                    channel=args.channel,
                    count=args.count,
                    size=args.size,
                    timeout=args.timeout,
                    progress=not args.quiet,
                    cleanup=not _own_daemon(args),
                )
            ]
    with target_for(args, args.mem_queue_size) as t:
        if mode == "writer":
            cfg = writer_config(args, topic=args.topic, count=args.count)
            return [_probed(args, t, run_writer, cfg)]
        if mode == "reader":
            rcfg = reader_config(
                args,
                topic=args.topic,
                channel=args.channel,
                count=args.count,
                prefill=args.prefill,
            )
            return [_probed(args, t, run_reader, rcfg)]
        ecfg = e2e_config(
            args, topic=args.topic, channel=args.channel, count=args.count, samples=args.samples
        )
        return [_probed(args, t, run_e2e, ecfg)]


def run_all(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"bench: unknown mode {m!r} in --modes")
    runs: list[dict[str, Any]] = []
    for rnd in range(1, args.repeat + 1):
        _log(f"bench: round {rnd}/{args.repeat}")
        if any(m in modes for m in ("writer", "reader", "e2e")):
            with target_for(args, args.mem_queue_size) as t:
                if not _own_daemon(args):
                    for topic in ("sub_bench", "e2e_bench"):
                        t.delete_topic(topic)
                if "writer" in modes:
                    runs.append(_round(rnd, _probed(args, t, run_writer, writer_config(args))))
                if "reader" in modes:
                    # Read what the writer left (bench_reader after bench_writer); without a
                    # writer run, fill the topic first.
                    cfg = reader_config(args, prefill=0 if "writer" in modes else -1)
                    if "writer" in modes:
                        cfg.count = 1 << 62
                    runs.append(_round(rnd, _probed(args, t, run_reader, cfg)))
                # Whatever writer and reader left would sit in the daemon's memory during the
                # e2e run (and, in nsqpy, lengthen its garbage-collector pauses): drop it.
                t.delete_topic("sub_bench")
                if "e2e" in modes:
                    runs.append(_round(rnd, _probed(args, t, run_e2e, e2e_config(args))))
        if "memory" in modes:
            with target_for(args, memory_mqs(args, args.memory_count)) as t:
                r = run_memory(
                    t,
                    count=args.memory_count,
                    size=args.size,
                    timeout=args.timeout,
                    progress=not args.quiet,
                    cleanup=not _own_daemon(args),
                )
                runs.append(_round(rnd, r))
    rows = []
    for m in modes:
        of_mode = [r for r in runs if r["mode"] == m]
        if of_mode:
            rows.append(report.median_row(of_mode))
    return runs, rows


@contextmanager
def _probe(args: argparse.Namespace, t: Target) -> Iterator[dict[str, Any]]:
    """The polite client (bench/polite.py) around one run when --polite is given."""
    if not getattr(args, "polite", False):
        yield {}
        return
    with polite_client(t) as found:
        yield found


def _probed(args: argparse.Namespace, t: Target, run: Any, *a: Any) -> dict[str, Any]:
    with _probe(args, t) as found:
        r = run(t, *a)
    r.update(found)
    return r


def _round(rnd: int, r: dict[str, Any]) -> dict[str, Any]:
    r["round"] = rnd
    _log(report.summary_line(r))
    return r


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.mode == "startup":
        return run_startup_mode(args)
    if args.mode == "http-pub":
        return run_http_pub_mode(args)
    if args.mode in ("bombs", "malformed"):
        return run_bombs_mode(args)
    started = datetime.datetime.now().astimezone()
    try:
        if args.mode == "all":
            runs, rows = run_all(args)
        else:
            runs = run_single(args)
            for r in runs:
                _log(report.summary_line(r))
            rows = runs
    except (BenchError, RuntimeError, OSError) as e:
        _log(f"bench: FAILED: {e}")
        return 1
    except KeyboardInterrupt:
        _log("bench: interrupted")
        return 130
    target = args.nsqd_cmd or "nsqpy-d" if _own_daemon(args) else f"nsqd at {args.nsqd_tcp_address}"
    print(
        f"\n{started:%Y-%m-%d %H:%M %Z}, {target}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
        + (f", medians of {args.repeat} runs" if args.mode == "all" and args.repeat > 1 else "")
        + "\n"
    )
    print(report.table(rows))
    if len(runs) > len(rows):
        print("\nEvery run:\n")
        print(report.runs_detail(runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"date": started.isoformat(), "argv": sys.argv, "runs": runs, "medians": rows},
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
