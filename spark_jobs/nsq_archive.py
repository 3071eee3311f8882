#!/usr/bin/env python3
"""Archive an NSQ topic to Parquet (or JSON) files with Spark Structured Streaming.

Every message becomes one row (id, body, timestamp, attempts, topic, channel, nsqd_address). The
query's checkpoint holds the source's spool (<checkpoint>/nsq-spool), so a restarted job re-runs
an interrupted batch with the same rows and resumes where it stopped; a message is FIN'd once it
is durable in the spool. Spark's file sink writes each batch once (its _spark_metadata log), so
the archive holds every published message, and a message nsqd redelivered after a crash that the
source did not recognize at most once more (nsq_dedup.py drops those on id).

    python spark_jobs/nsq_archive.py --nsqd-tcp-address 127.0.0.1:4150 --topic events \\
        --channel archive --output /tmp/archive --checkpoint /tmp/archive-ckpt

Runs until SIGTERM/SIGINT or --run-for seconds. Prints one `progress` line per batch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, ROOT)  # run from a checkout: nsqpy without installing it


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nsqd-tcp-address", action="append", default=[], help="repeatable")
    ap.add_argument("--lookupd-http-address", action="append", default=[], help="repeatable")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--channel", default="spark-archive")
    ap.add_argument("--output", required=True, help="directory of the Parquet/JSON files")
    ap.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    ap.add_argument("--format", choices=("parquet", "json"), default="parquet")
    ap.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    ap.add_argument("--max-per-trigger", type=int, default=0, help="messages per batch (0: all)")
    ap.add_argument("--max-in-flight", type=int, default=2500)
    ap.add_argument("--msg-timeout", default="60s")
    ap.add_argument("--run-for", type=float, default=0, help="stop after N seconds (0: never)")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    args = ap.parse_args(argv)
    if not args.nsqd_tcp_address and not args.lookupd_http_address:
        ap.error("give --nsqd-tcp-address and/or --lookupd-http-address")
    return args


def nsq_options(args: argparse.Namespace) -> dict[str, str]:
    return source_options(args, max_in_flight=str(args.max_in_flight), msg_timeout=args.msg_timeout)


def source_options(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    """The nsq source's options from the flags every job takes (topic, channel, checkpoint,
    nsqd and lookupd addresses, max per trigger), ``extra`` after the channel."""
    opts = {
        "topic": args.topic,
        "channel": args.channel,
        **extra,
        "spool_dir": os.path.join(args.checkpoint, "nsq-spool"),
    }
    if args.nsqd_tcp_address:
        opts["nsqd_tcp_addresses"] = ",".join(args.nsqd_tcp_address)
    if args.lookupd_http_address:
        opts["lookupd_http_addresses"] = ",".join(args.lookupd_http_address)
    if args.max_per_trigger:
        opts["max_messages_per_trigger"] = str(args.max_per_trigger)
    return opts


def session(master: str, app: str):  # -> SparkSession
    # Spark's Python workers: this interpreter, and this checkout on their path too.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *paths])
    from pyspark.sql import SparkSession

    from nsqpy.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def build_query(spark, args: argparse.Namespace):  # -> StreamingQuery
    df = spark.readStream.format("nsq").options(**nsq_options(args)).load()
    return start_file_sink(df, args)


def start_file_sink(df, args: argparse.Namespace):  # DataFrame -> StreamingQuery
    """``df`` written as files of --format under --output, one micro-batch every --trigger,
    its progress kept under --checkpoint."""
    return (
        df.writeStream.format(args.format)
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=args.trigger)
        .start()
    )


def watch(query, run_for: float) -> Iterator[None]:
    """Wait on ``query`` (a StreamingQuery) in 0.5 s steps, yielding after each, until it ends,
    SIGTERM or SIGINT arrives, or ``run_for`` seconds (0: no limit) have passed."""
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = time.monotonic() + run_for if run_for else None
    while not stop["now"] and query.isActive:
        if deadline is not None and time.monotonic() >= deadline:
            break
        query.awaitTermination(0.5)
        yield


def run(args: argparse.Namespace) -> int:
    spark = session(args.master, f"nsq-archive-{args.topic}")
    query = build_query(spark, args)
    print(f"started query {query.id} run {query.runId}", flush=True)
    last_batch = -1
    total = 0
    for _ in watch(query, args.run_for):
        for p in query.recentProgress:
            if p["batchId"] > last_batch:
                last_batch = p["batchId"]
                total += p["numInputRows"]
                print(
                    f"progress batch={last_batch} rows={p['numInputRows']} total={total}",
                    flush=True,
                )
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
        return 1
    query.stop()
    print(f"stopped total={total}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(run(parse_args()))
