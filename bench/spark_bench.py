"""Messages per second from an nsqd into a Spark sink through the `nsq` source (nsqpy.spark),
beside the nsqd's own bench reader figure, in the same run.

  .venv/bin/python bench/spark_bench.py                   # 1,000,000 x 100 B, local[2], x3
  .venv/bin/python bench/spark_bench.py --nsqd-cmd /opt/nsq-go/bin/nsqd   # Go nsqd as broker
  .venv/bin/python bench/spark_bench.py --count 200000 --repeat 1 --sink noop --sink nsq
  .venv/bin/python bench/spark_bench.py --source nsq --source synthetic --sink noop \
      --sink parquet --no-reader --warmup 200000   # the source beside Spark alone, one run

Strategy: start the broker (nsqpy-d, or --nsqd-cmd; all messages in memory: the connector is
measured, not the diskqueue), then for each round, alternating: `python -m bench reader` on
--count pre-published messages (nsqd's own figure: SUB+FIN, RDY 2500, 2 connections), and for
each sink (`noop`, `parquet`) pre-fill a fresh topic with --count messages of --size bytes by
MPUB (untimed) and run a streaming query nsq -> sink with the source's default options on one
local SparkSession until every message has been through a committed batch (or --max-seconds).
The figure is rows / (end of the last batch - start of the first batch with rows), from the
query's own progress reports, so JVM and query start-up are left out; the wall rate from query
start is printed too. Medians over --repeat rounds. Every run is bounded by --count and
--max-seconds; the broker is stopped at the end, Parquet output deleted after each run. The
nsq sink is measured the other way round: --count rows made by Spark written to a topic.
With `--source nsq --source synthetic` every round runs each sink from both sources, alternating
with the rest, and the medians' ratio (nsq source / Spark alone) is printed per sink.
`first batch s` is the start of the first batch with rows less the query's start. `--warmup N`
runs an untimed N-message query first into each of noop and parquet that the rounds run (the
session's first query starts Spark's code paths and the executors' Python workers, a sink's
first query its own code paths: their figures are printed as "spark SINK (cold)"), and with the
nsq sink among the sinks an N-row sink write too ("spark nsq sink (cold)": the write path
starts Python workers of its own). `--sink fetch`
runs the source's driver side alone (no Spark). `--trace FILE` collects the connector's timeline
(nsqpy.spark.trace: the source opening, each batch planned and committed, each partition read,
the spool's progress each second, each sink task's split of its time) as JSON lines."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# behind site-packages: an installed nsqpy (a compiled build) is the one measured, as it is in
# Spark's Python workers; the checkout's serves only when none is installed
sys.path.append(str(ROOT))

from bench.target import Daemon  # noqa: E402
from nsqpy.spark.client import BatchPublisher  # noqa: E402


class MachineCPU:
    """CPU time spent by the whole machine and by kinds of process, sampled every ``period_s``
    seconds in a thread from /proc (Linux): ``machine`` is /proc/stat's busy time (all processes,
    others' included: the machine is shared), ``broker`` the broker's pid, ``jvm`` processes
    named java (Spark's driver JVM: executors run in it with local[N]), ``python`` the other
    Python processes (Spark's Python workers, the source's driver-side process); the kinds
    count only the bench's own process tree and the broker. ``bench`` is the bench's own
    process: this sampler and its polling of the query's progress, about 0.07 CPU-seconds a
    second, which counted as ``python`` would grow with a run's length (`--sink fetch` runs
    the source's driver side in it, and counts it as ``python`` again).
    ``between(t0, t1)`` gives each kind's CPU-seconds between two time.time() instants (the
    samples nearest inside them: within ``period_s``)."""

    KINDS = ("machine", "broker", "jvm", "python", "bench")

    def __init__(self, broker_pid: int, period_s: float = 0.1) -> None:
        import threading

        self.broker_pid = broker_pid
        self.root_pid = os.getpid()
        self.period_s = period_s
        self.tick = os.sysconf("SC_CLK_TCK")
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._seen: dict[int, tuple[str, int]] = {}  # pid -> (kind, last jiffies)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="machine-cpu")
        self._thread.start()

    def _kind(self, pid: int, comm: str) -> str | None:
        if pid == self.broker_pid:
            return "broker"
        if pid == self.root_pid:
            return "bench"
        if comm == "java":
            return "jvm"
        if comm.startswith("python"):
            return "python"
        return None

    def _sample(self) -> dict[str, float]:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        busy = f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)
        procs: dict[int, tuple[int, str, int]] = {}  # pid -> (ppid, comm, jiffies)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as fh:
                    head, _, rest = fh.read().rpartition(")")
            except OSError:
                continue
            v = rest.split()
            procs[int(entry.name)] = (int(v[1]), head.partition("(")[2], int(v[11]) + int(v[12]))
        # only this process's tree (Spark's JVM, its Python workers, the broker): other people's
        # processes on a shared machine count in "machine" alone
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [self.root_pid, self.broker_pid]
        tree: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid not in tree:
                tree.add(pid)
                todo.extend(children.get(pid, ()))
        for pid in tree & procs.keys():
            kind = self._kind(pid, procs[pid][1])
            if kind is not None:
                self._seen[pid] = (kind, procs[pid][2])
        out = dict.fromkeys(self.KINDS, 0.0)
        out["machine"] = busy / self.tick
        for kind, jiffies in self._seen.values():
            out[kind] += jiffies / self.tick
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._sample()))
            self._stop.wait(self.period_s)

    def between(self, t0: float, t1: float) -> dict[str, float]:
        inside = [s for t, s in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            return {}
        return {k: round(inside[-1][k] - inside[0][k], 2) for k in self.KINDS}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


CPU: MachineCPU | None = None  # set by main()


def _cpu_fields(t0: float, t1: float, rows: int, driver_here: bool = False) -> dict[str, Any]:
    """The run's CPU-seconds by kind between t0 and t1 (time.time()), and per 1,000,000 rows;
    ``driver_here``: the source's driver side ran in the bench's process (its CPU is then
    counted as ``python``)."""
    if CPU is None or rows <= 0:
        return {}
    cpu = CPU.between(t0, t1)
    if not cpu:
        return {}
    if driver_here:
        cpu["python"] = round(cpu["python"] + cpu["bench"], 2)
    return {"cpu_s_by_kind": cpu, "machine_cpu_s_per_m": round(cpu["machine"] * 1e6 / rows, 2)}


def _progress_time(p: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()


def _mark(args: argparse.Namespace, event: str, **fields: Any) -> None:
    """A line in the --trace timeline (the connector's own lines: nsqpy.spark.trace)."""
    if args.trace:
        line = json.dumps({"t": time.time(), "pid": os.getpid(), "event": event, **fields})
        with open(args.trace, "a") as fh:
            fh.write(line + "\n")


def prefill(address: str, topic: str, count: int, size: int) -> float:
    body = b"x" * size
    t = time.monotonic()
    with BatchPublisher(address, topic, batch_size=500, window=8) as p:
        for i in range(count):
            p.put(b"%010d" % i + body[10:] if size > 10 else body)
    return count / (time.monotonic() - t)


def synthetic_data_source() -> Any:
    """``--source synthetic``: Spark's own ceiling on this machine. A streaming Python Data Source
    with the nsq source's schema whose executors yield in-memory Arrow batches, no broker, no
    spool, no file read: what Spark does with the rows is all that is left. Everything is
    available at once (latestOffset is the row count; `max_messages_per_trigger` cuts batches as
    in the nsq source), partitions hold `max_rows_per_partition` rows (100,000, the nsq source's
    default), and read() yields one batch of 65,536 rows (and a slice of it at a partition's
    end), as the nsq source's read_slice yields batches of about 65,536 rows.

    The batch holds rows like the ones the nsq source reads after `prefill`: row i has the body
    ``b"%010d" % i`` followed by x's, a 16-hex-digit ID of its own and a publish time 1 us after
    row i - 1's, so that every 65,536 rows differ. Rows of one constant value would be far
    cheaper for Parquet to write, through its dictionary and run-length encodings, than the
    messages, and the ratio to Spark alone would measure the data as much as the connector. A
    worker builds the batch once (a few ms) and keeps it.

    The classes are made here, in a function, so that cloudpickle sends them to the Python
    workers by value (the bench is not importable there)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from nsqpy.spark.source import SCHEMA_DDL

    class Part(InputPartition):
        def __init__(self, start: int, rows: int) -> None:
            super().__init__(None)
            self.start, self.rows = start, rows

    class Reader(DataSourceStreamReader):
        def __init__(self, options: dict) -> None:
            self.count = int(options["count"])
            self.size = int(options.get("size", 100))
            self.per_trigger = int(options.get("max_messages_per_trigger") or 0)
            self.per_part = int(options.get("max_rows_per_partition") or 100_000)

        def initialOffset(self) -> dict:
            return {"position": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.per_trigger) if self.per_trigger else ReadAllAvailable()

        def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
            pos = int(start["position"]) if start else 0
            end = self.count
            if isinstance(limit, ReadMaxRows):
                end = min(end, pos + int(limit.max_rows))
            return {"position": end}

        def partitions(self, start: dict, end: dict) -> list:
            s, e = int(start["position"]), int(end["position"])
            return [Part(p, min(self.per_part, e - p)) for p in range(s, e, self.per_part)]

        def read(self, partition: Any) -> Any:
            import sys
            import types

            # one batch of rows per worker process and body size, built at its first task
            # (workers are reused across tasks and queries): Spark is measured, not numpy
            cache = sys.modules.setdefault(
                "_nsqpy_bench_synthetic", types.ModuleType("_nsqpy_bench_synthetic")
            )
            rb = getattr(cache, f"rows_{self.size}", None)
            if rb is None:
                rb = _rows(self.size)
                setattr(cache, f"rows_{self.size}", rb)
            left = partition.rows
            while left > 0:
                k = min(rb.num_rows, left)
                yield rb if k == rb.num_rows else rb.slice(0, k)
                left -= k

    def _rows(size: int, n: int = 65_536) -> Any:
        """Rows 0 to n - 1 as prefill publishes them: each body its row number in 10 digits
        then x's, each ID its row number in 16 hex digits, publish times 1 us apart."""
        import numpy as np
        import pyarrow as pa

        from nsqpy.spark.spool import SCHEMA

        row = np.arange(n, dtype=np.uint64)
        ids = np.empty((n, 16), np.uint8)
        hex_digits = np.frombuffer(b"0123456789abcdef", np.uint8)
        r = row.copy()
        for k in range(15, -1, -1):
            ids[:, k] = hex_digits[r & np.uint64(15)]
            r >>= np.uint64(4)
        body = np.full((n, size), ord("x"), np.uint8)
        if size > 10:
            r = row.copy()
            for k in range(9, -1, -1):
                r, d = np.divmod(r, np.uint64(10))
                body[:, k] = d + ord("0")
        ts = (1_700_000_000_000_000 + row).astype(np.int64)  # microseconds

        def column(kind: Any, values: np.ndarray, width: int) -> pa.Array:
            offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
            return pa.Array.from_buffers(
                kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
            )

        def const(text: bytes) -> pa.Array:
            return column(pa.string(), np.frombuffer(text * n, np.uint8), len(text))

        return pa.RecordBatch.from_arrays(
            [
                column(pa.string(), ids, 16),
                column(pa.binary(), body, size),
                pa.Array.from_buffers(SCHEMA.field("timestamp").type, n, [None, pa.py_buffer(ts)]),
                pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.ones(n, np.int32))]),
                const(b"bench"),
                const(b"synthetic"),
                const(b"127.0.0.1:4150"),
            ],
            schema=SCHEMA,
        )

    class Synthetic(DataSource):
        @classmethod
        def name(cls) -> str:
            return "nsq_synthetic"

        def schema(self) -> str:
            return SCHEMA_DDL

        def streamReader(self, schema: Any) -> Any:
            return Reader(self.options)

    return Synthetic


def run_one(
    spark,
    address: str,
    args: argparse.Namespace,
    sink: str,
    topic: str,
    source: str = "nsq",
    variant: str = "",
) -> dict:
    import shutil

    synthetic = source == "synthetic"
    pub_rate = 0.0 if synthetic else prefill(address, topic, args.count, args.size)
    work = tempfile.mkdtemp(prefix="spark-bench-")
    opts = {  # the defaults: only what the source requires
        "nsqd_tcp_addresses": address,
        "topic": topic,
        "channel": "bench",
        "spool_dir": os.path.join(work, "ckpt", "nsq-spool"),
    }
    if synthetic:
        opts = {"count": str(args.count), "size": str(args.size)}
    for kv in args.option + _variants(args).get(variant, []):
        k, _, v = kv.partition("=")
        opts[k] = v
    fmt = "nsq_synthetic" if synthetic else "nsq"
    df = spark.readStream.format(fmt).options(**opts).load()
    w = df.writeStream.option("checkpointLocation", os.path.join(work, "ckpt"))
    if sink == "parquet":
        w = w.format("parquet").option("path", os.path.join(work, "out"))
    else:
        w = w.format("noop")
    _mark(args, "query_start", sink=sink, topic=topic)
    t0 = time.time()
    q = w.start()
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + args.max_seconds
    total = 0
    try:
        while time.monotonic() < deadline and total < args.count:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            for p in q.recentProgress:
                if p["numInputRows"] and p["batchId"] not in seen:
                    seen[p["batchId"]] = p
            total = sum(p["numInputRows"] for p in seen.values())
            time.sleep(0.1)
        t_wall = time.time() - t0
        _mark(args, "query_done", sink=sink, topic=topic)
    finally:
        q.stop()
        stats_file = Path(opts.get("spool_dir", work)) / "stats.json"
        stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        shutil.rmtree(work, ignore_errors=True)
    batches = sorted(seen.values(), key=lambda p: p["batchId"])
    if not batches:
        raise RuntimeError("no batch with rows")
    start = _progress_time(batches[0])
    end = max(_progress_time(p) + p["durationMs"]["triggerExecution"] / 1000 for p in batches)
    sizes = [p["numInputRows"] for p in batches]
    phases: dict[str, float] = {}
    for p in batches:
        for k, v in p["durationMs"].items():
            phases[k] = phases.get(k, 0) + v / len(batches)
    return {
        "mode": f"spark {sink}"
        + (" (synthetic)" if synthetic else "")
        + (f" [{variant}]" if variant else ""),
        "count": args.count,
        "size": args.size,
        "rows": total,
        "batches": len(batches),
        "mean_batch": round(total / len(batches)),
        "max_batch": max(sizes),
        "seconds": round(end - start, 3),
        "msgs_per_s": round(total / (end - start)),
        "wall_msgs_per_s": round(total / t_wall),
        "first_batch_s": round(start - t0, 3),
        "prefill_msgs_per_s": round(pub_rate),
        "complete": total >= args.count,
        "mean_batch_ms": {k: round(v) for k, v in sorted(phases.items())},
        "source_max_rss_kib": stats.get("max_rss_kib"),
        **_cpu_fields(start, end, total),
    }


def _variants(args: argparse.Namespace) -> dict[str, list[str]]:
    """``--variant NAME=k=v,k=v``: NAME -> its source options (k=v)."""
    out: dict[str, list[str]] = {}
    for spec in args.variant:
        name, _, kvs = spec.partition("=")
        out[name] = [kv for kv in kvs.split(",") if kv]
    return out


def _cpu_cell(rs: list[dict]) -> str:
    """The median run's (by machine CPU) CPU-seconds per 1M rows, by kind."""
    runs = sorted((r for r in rs if "cpu_s_by_kind" in r), key=lambda r: r["machine_cpu_s_per_m"])
    if not runs:
        return "-"
    r = runs[len(runs) // 2]
    per_m = {k: v * 1e6 / r["rows"] for k, v in r["cpu_s_by_kind"].items()}
    m, b, j, py = (per_m[k] for k in ("machine", "broker", "jvm", "python"))
    return f"{m:.1f} ({b:.1f} / {j:.1f} / {py:.1f})"


def run_sink(spark, daemon: Any, args: argparse.Namespace, topic: str) -> dict:
    """The sink: --count rows of --size-byte bodies made by Spark (2 partitions) written with
    df.write.format("nsq") (pipelined MPUB from the executors); the topic is deleted after."""
    from pyspark.sql import functions as F

    df = spark.range(0, args.count, 1, numPartitions=2).select(
        F.lpad(F.col("id").cast("string"), args.size, "x").cast("binary").alias("body")
    )
    t = time.monotonic()
    w0 = time.time()
    df.write.format("nsq").mode("append").option(
        "nsqd_tcp_addresses", f"127.0.0.1:{daemon.tcp_port}"
    ).option("topic", topic).save()
    dt = time.monotonic() - t
    depth = daemon.depth(topic)
    daemon.post("/topic/delete", topic=topic)
    return {
        "mode": "spark nsq sink",
        "count": args.count,
        "size": args.size,
        "rows": depth,
        "seconds": round(dt, 3),
        "msgs_per_s": round(args.count / dt),
        "complete": depth == args.count,
        **_cpu_fields(w0, w0 + dt, args.count),
    }


def run_fetch(address: str, args: argparse.Namespace, topic: str) -> dict:
    """The source's driver side alone, no Spark: a Fetcher with the source's default options
    spools --count pre-published messages (receive, Arrow group, write, fsync, FIN), committing
    what is durable every 0.2 s as Spark would; rows / seconds from the first row spooled."""
    import shutil

    from nsqpy.spark.fetch import Fetcher
    from nsqpy.spark.source import SourceOptions
    from nsqpy.spark.spool import Spool

    prefill(address, topic, args.count, args.size)
    work = tempfile.mkdtemp(prefix="spark-bench-fetch-")
    opts = {"nsqd_tcp_addresses": address, "topic": topic, "channel": "bench",
            "spool_dir": os.path.join(work, "spool")}  # fmt: skip
    for kv in args.option:
        k, _, v = kv.partition("=")
        opts[k] = v
    o = SourceOptions(opts)
    spool = Spool(o.spool_dir, segment_bytes=min(o.spool_segment_bytes, o.max_spool_bytes // 4))
    cpu0 = time.process_time()
    t0 = time.monotonic()
    wall0 = time.time() - t0  # monotonic -> time.time()
    f = Fetcher(o, spool)
    first = None
    deadline = time.monotonic() + args.max_seconds
    try:
        while time.monotonic() < deadline:
            end = f.wait_for_rows(f.committed, 0.2)
            if end and first is None:
                first = time.monotonic()
            f.commit(end)
            if end >= args.count:
                break
        t_end = time.monotonic()
        stats = f.stats()
    finally:
        f.close()
        spool.close()
        shutil.rmtree(work, ignore_errors=True)
    rows = stats["durable_end"]
    return {
        "mode": "fetch only",
        "count": args.count,
        "size": args.size,
        "rows": rows,
        "seconds": round(t_end - (first or t0), 3),
        "msgs_per_s": round(rows / (t_end - (first or t0))),
        "first_rows_s": round((first or t_end) - t0, 3),
        "cpu_s": round(time.process_time() - cpu0, 2),
        "groups": stats["groups"],
        "writer_seconds": stats["writer_seconds"],
        "complete": rows >= args.count,
        **_cpu_fields(wall0 + (first or t0), wall0 + t_end, rows, driver_here=True),
    }


def run_reader(daemon: Any, args: argparse.Namespace, topic: str) -> dict:
    """nsqd's own figure: `python -m bench reader` (SUB+FIN, RDY 2500, 2 connections) on
    --count pre-published messages of the same size, against the same daemon."""
    import subprocess

    out = tempfile.mktemp(suffix=".json", prefix="spark-bench-reader-")
    cmd = [
        sys.executable, "-m", "bench", "reader", "--quiet", "--json", out,
        "--nsqd-tcp-address", f"127.0.0.1:{daemon.tcp_port}",
        "--nsqd-http-address", f"127.0.0.1:{daemon.http_port}",
        "--nsqd-pid", str(daemon.pid), "--topic", topic,
        "--count", str(args.count), "--size", str(args.size),
    ]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, timeout=600)
    r = json.loads(Path(out).read_text())["runs"][0]
    os.unlink(out)
    return {
        "mode": "bench reader",
        "count": r["count"],
        "size": args.size,
        "rows": r["count"],
        "msgs_per_s": round(r["msgs_per_s"]),
        "complete": True,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="nsqd -> Spark (nsq source) throughput")
    ap.add_argument("--count", type=int, default=1_000_000, help="messages per run")
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument(
        "--sink",
        action="append",
        choices=("noop", "parquet", "nsq", "fetch"),
        default=[],
        help="noop, parquet: the source into that sink; nsq: the nsq sink; fetch: the source's "
        "driver side alone, no Spark (repeatable)",
    )
    ap.add_argument(
        "--source",
        action="append",
        choices=("nsq", "synthetic"),
        default=[],
        help="nsq (default): the nsq source on pre-published messages; synthetic: a Data Source "
        "of the same schema yielding in-memory Arrow batches, no broker (Spark's own ceiling); "
        "repeatable: both run in every round, alternating, and the ratios are printed",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds (medians are reported)")
    ap.add_argument("--no-reader", action="store_true", help="skip the bench reader runs")
    ap.add_argument("--option", action="append", default=[], help="source option k=v")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=k=v,k=v",
        help="source options of a variant (on top of --option); each source runs once per "
        "variant in every round, alternating, reported as 'spark SINK [NAME]' (repeatable; "
        "NAME= alone: --option only)",
    )
    ap.add_argument("--max-seconds", type=float, default=180, help="per run")
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="first run an untimed query of this many messages into each of the sinks noop and "
        "parquet that the rounds run, noop when they run neither (a SparkSession's first "
        "query starts the JVM's code paths and the executors' Python workers, a sink's first "
        "query its own code paths); reported as 'spark SINK (cold)'; with --sink nsq, an "
        "N-row sink write as well ('spark nsq sink (cold)')",
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--nsqd-cmd", help="the broker's command (default nsqpy-d), e.g. Go nsqd")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--trace", help="append the connector's timeline here (NSQPY_SPARK_TRACE, JSON lines)"
    )
    args = ap.parse_args()
    if args.count <= 0 or args.size <= 0 or args.repeat <= 0:
        ap.error("--count, --size and --repeat must be positive")
    sinks = args.sink or ["noop", "parquet", "nsq"]
    sources = list(dict.fromkeys(args.source or ["nsq"]))

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.trace:
        os.environ["NSQPY_SPARK_TRACE"] = os.path.abspath(args.trace)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # all messages stay in memory: the connector is measured, not the diskqueue
    daemon = Daemon([f"--mem-queue-size={args.count + 1000}"], cmd=args.nsqd_cmd)
    address = f"127.0.0.1:{daemon.tcp_port}"
    broker = "Go nsqd" if args.nsqd_cmd and "nsqpy" not in args.nsqd_cmd else "nsqpy-d"
    global CPU
    CPU = MachineCPU(daemon.proc.pid) if os.path.exists("/proc/stat") else None
    results: list[dict] = []
    try:
        spark = None
        if set(sinks) - {"fetch"}:
            from pyspark.sql import SparkSession

            from nsqpy.spark import register

            spark = (
                SparkSession.builder.master(args.master)
                .appName("nsqpy-spark-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            if "synthetic" in sources:
                spark.dataSource.register(synthetic_data_source())
        if args.warmup and spark is not None:
            wargs = argparse.Namespace(**{**vars(args), "count": args.warmup})
            # every sink the rounds run: a sink's first query compiles its code paths in the
            # JVM (the Parquet writer's cost about 3 JVM CPU-seconds), which would fall on
            # whichever source the first round runs first
            for sink in [s for s in sinks if s in ("noop", "parquet")] or ["noop"]:
                topic = f"spark_bench_warmup_{sink}"
                r = run_one(spark, address, wargs, sink, topic, sources[0])
                r["mode"] = f"spark {sink} (cold)"
                results.append(r)
                print(f"spark-bench {broker} warm-up: {json.dumps(r)}", file=sys.stderr,
                      flush=True)  # fmt: skip
            if "nsq" in sinks:  # the sink's write path starts its own Python workers
                r = run_sink(spark, daemon, wargs, "spark_bench_warmup_sink")
                r["mode"] = "spark nsq sink (cold)"
                results.append(r)
                print(f"spark-bench {broker} warm-up: {json.dumps(r)}", file=sys.stderr,
                      flush=True)  # fmt: skip
        for rnd in range(args.repeat):
            # (source, what): the reader, the sink and fetch only with the nsq source
            runs = [] if args.no_reader or "nsq" not in sources else [("nsq", "reader")]
            for what in sinks:
                for source in sources:
                    if what in ("noop", "parquet"):
                        runs += [(source, what, v) for v in _variants(args) or [""]]
                    elif source == "nsq":  # the nsq sink, fetch: no source options
                        runs.append((source, what, ""))
            for source, what, variant in runs if rnd % 2 == 0 else runs[::-1]:  # alternate
                topic = f"spark_bench_{rnd}_{what}_{source}_{len(results)}"
                if what == "reader":
                    r = run_reader(daemon, args, topic)
                elif what == "nsq":
                    r = run_sink(spark, daemon, args, topic)
                elif what == "fetch":
                    r = run_fetch(address, args, topic)
                else:
                    r = run_one(spark, address, args, what, topic, source, variant)
                r["round"] = rnd
                results.append(r)
                print(f"spark-bench {broker} round {rnd}: {json.dumps(r)}", file=sys.stderr,
                      flush=True)  # fmt: skip
        if spark is not None:
            spark.stop()
    finally:
        daemon.stop()
        if CPU is not None:
            CPU.stop()
    print(f"{broker}, {args.count} x {args.size} B, {args.master}, median of {args.repeat}:\n")
    print(
        "| mode | msgs/s (median) | runs | wall msgs/s | first batch s | batches (mean size) "
        "| CPU-s per 1M: machine (broker / JVM / Python) |"
    )
    print("|---|---:|---|---:|---:|---|---|")
    for mode in dict.fromkeys(r["mode"] for r in results):
        rs = [r for r in results if r["mode"] == mode]
        rates = sorted(r["msgs_per_s"] for r in rs)
        med = rates[len(rates) // 2]
        wall = sorted(r.get("wall_msgs_per_s", 0) for r in rs)[len(rs) // 2]
        batches = ", ".join(f"{r['batches']} ({r['mean_batch']})" for r in rs if "batches" in r)
        firsts = sorted(r["first_batch_s"] for r in rs if "first_batch_s" in r)
        first = f"{firsts[len(firsts) // 2]:.2f}" if firsts else "-"
        print(
            f"| {mode} | {med:,} | {', '.join(f'{x:,}' for x in rates)} | "
            f"{wall:,} | {first} | {batches or '-'} | {_cpu_cell(rs)} |"
        )
    medians = {
        mode: sorted(r["msgs_per_s"] for r in results if r["mode"] == mode)
        for mode in dict.fromkeys(r["mode"] for r in results)
    }
    for sink in ("noop", "parquet"):
        for v in _variants(args) or [""]:
            tag = f" [{v}]" if v else ""
            nsq = medians.get(f"spark {sink}{tag}")
            alone = medians.get(f"spark {sink} (synthetic){tag}")
            if nsq and alone:
                ratio = nsq[len(nsq) // 2] / alone[len(alone) // 2]
                print(
                    f"\nnsq source / Spark alone into {sink}{tag}: {ratio:.2f}x (medians)", end=""
                )
    print()
    cores = os.cpu_count() or 1
    print(
        f"\nCPU budget: {cores} cores x (1,000,000 / rate) s, i.e. "
        + ", ".join(
            f"{cores * 1e6 / r:.1f} CPU-s per 1M at {r:,} msgs/s" for r in (250_000, 300_000)
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(r["complete"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
