# Messages per second from nsqpy-d into a Spark sink through the `nsq` source (nsqpy.spark).
#
#   .venv/bin/python bench/spark_bench.py                      # defaults: 200,000 x 100 B
#   .venv/bin/python bench/spark_bench.py --count 100000 --config 2500x1 --sink parquet
#
# Strategy: start nsqpy-d (or use --nsqd-tcp-address), pre-fill one topic per configuration with
# --count messages of --size bytes by MPUB (untimed), then run a streaming query nsq -> sink
# (Spark's `noop` sink, or Parquet files) on one local SparkSession until every message has
# been through a committed batch, or --max-seconds. The figure is rows / (end of the last
# batch - start of the first batch with rows), from the query's own progress reports, so the
# JVM and session start-up are left out; the wall rate from query start is printed too. A
# configuration `MxC` is max_in_flight=M over C connections to the nsqd (nsqd caps RDY at 2500
# per connection). Each run is bounded by --count and --max-seconds; the daemon is stopped at
# the end.
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
sys.path.insert(0, str(ROOT))

from bench.target import Daemon  # noqa: E402
from nsqpy.spark.client import Producer  # noqa: E402


def _progress_time(p: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()


def prefill(address: str, topic: str, count: int, size: int) -> float:
    body = b"x" * size
    t = time.monotonic()
    with Producer(address, topic, batch_size=500, window=8) as p:
        for i in range(count):
            p.put(b"%010d" % i + body[10:] if size > 10 else body)
    return count / (time.monotonic() - t)


def run_one(spark, address: str, args: argparse.Namespace, config: str, idx: int) -> dict:
    mif, _, conns = config.partition("x")
    topic = f"spark_bench_{idx}"
    pub_rate = prefill(address, topic, args.count, args.size)
    work = tempfile.mkdtemp(prefix="spark-bench-")
    opts = {
        "nsqd_tcp_addresses": address,
        "topic": topic,
        "channel": "bench",
        "max_in_flight": mif,
        "connections_per_nsqd": conns or "1",
        "spool_dir": os.path.join(work, "ckpt", "nsq-spool"),
    }
    if args.max_per_trigger:
        opts["max_messages_per_trigger"] = str(args.max_per_trigger)
    df = spark.readStream.format("nsq").options(**opts).load()
    w = df.writeStream.option("checkpointLocation", os.path.join(work, "ckpt"))
    if args.sink == "parquet":
        w = w.format("parquet").option("path", os.path.join(work, "out"))
    else:
        w = w.format("noop")
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
    finally:
        q.stop()
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
        "config": config,
        "sink": args.sink,
        "count": args.count,
        "size": args.size,
        "rows": total,
        "batches": len(batches),
        "mean_batch": round(total / len(batches)),
        "max_batch": max(sizes),
        "seconds": round(end - start, 3),
        "msgs_per_s": round(total / (end - start)),
        "wall_msgs_per_s": round(total / t_wall),
        "prefill_msgs_per_s": round(pub_rate),
        "complete": total >= args.count,
        "mean_batch_ms": {k: round(v) for k, v in sorted(phases.items())},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="nsqpy-d -> Spark (nsq source) throughput")
    ap.add_argument("--count", type=int, default=200_000, help="messages per run")
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        help="max_in_flight x connections, e.g. 2500x1 (repeatable; default 2500x1, 10000x4)",
    )
    ap.add_argument("--sink", choices=("noop", "parquet"), default="noop")
    ap.add_argument("--max-per-trigger", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=120, help="per run")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--nsqd-tcp-address", help="use a running nsqd instead of starting nsqpy-d")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.count <= 0 or args.size <= 0:
        ap.error("--count and --size must be positive")
    configs = args.config or ["2500x1", "10000x4"]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    daemon = None
    if args.nsqd_tcp_address:
        address = args.nsqd_tcp_address
    else:  # all messages stay in memory: the connector is measured, not the diskqueue
        daemon = Daemon([f"--mem-queue-size={args.count + 1000}"])
        address = f"127.0.0.1:{daemon.tcp_port}"
    results = []
    try:
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
        for i, config in enumerate(configs):
            r = run_one(spark, address, args, config, i)
            results.append(r)
            print(
                f"spark-bench {config} ({args.sink}): {r['rows']} msgs of {args.size} B in "
                f"{r['batches']} batches (mean {r['mean_batch']}, max {r['max_batch']}): "
                f"{r['msgs_per_s']} msgs/s (wall from query start {r['wall_msgs_per_s']}/s); "
                f"mean batch ms {r['mean_batch_ms']}",
                file=sys.stderr,
                flush=True,
            )
        spark.stop()
    finally:
        if daemon is not None:
            daemon.stop()
    print("| config | sink | msgs | size | batches | msgs/s | wall msgs/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['config']} | {r['sink']} | {r['rows']} | {r['size']} | {r['batches']} | "
            f"{r['msgs_per_s']} | {r['wall_msgs_per_s']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(r["complete"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
