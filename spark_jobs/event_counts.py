#!/usr/bin/env python3
"""Windowed event counts from an NSQ topic of JSON events, with Spark Structured Streaming.

The pipeline: NSQ topic -> parse each body as JSON with a fixed schema (spark_jobs/
publish_events.py writes such events) -> event-time watermark -> drop NSQ redeliveries by
message id within the watermark -> per (window, kind): events, distinct users, value sum ->
Parquet files (append mode: a window is written once the watermark has passed its end), or the
console (--console, update mode: every changed window, each trigger). Bodies that are not valid
events are counted in a separate `_invalid` kind.

    python spark_jobs/event_counts.py --nsqd-tcp-address 127.0.0.1:4150 --topic events \\
        --output /tmp/event-counts --checkpoint /tmp/event-counts-ckpt
    python spark_jobs/event_counts.py --nsqd-tcp-address 127.0.0.1:4150 --topic events --console

Runs until SIGTERM/SIGINT or --run-for seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsq_archive import session, source_options, watch  # noqa: E402  (also puts this checkout on the path)

EVENT_SCHEMA = "event_id long, ts timestamp, user string, kind string, value double"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nsqd-tcp-address", action="append", default=[], help="repeatable")
    ap.add_argument("--lookupd-http-address", action="append", default=[], help="repeatable")
    ap.add_argument("--topic", default="events")
    ap.add_argument("--channel", default="spark-event-counts")
    ap.add_argument("--output", help="Parquet directory (not with --console)")
    ap.add_argument("--checkpoint", help="checkpoint directory (default: a temp dir)")
    ap.add_argument("--console", action="store_true", help="print windows instead of Parquet")
    ap.add_argument("--window", default="10 seconds")
    ap.add_argument("--watermark", default="5 seconds", help="allowed event lateness")
    ap.add_argument("--trigger", default="2 seconds")
    ap.add_argument("--max-per-trigger", type=int, default=0)
    ap.add_argument("--run-for", type=float, default=0, help="stop after N seconds (0: never)")
    ap.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    args = ap.parse_args(argv)
    if not args.nsqd_tcp_address and not args.lookupd_http_address:
        ap.error("give --nsqd-tcp-address and/or --lookupd-http-address")
    if not args.console and not args.output:
        ap.error("give --output DIR (Parquet) or --console")
    if not args.checkpoint:
        args.checkpoint = tempfile.mkdtemp(prefix="event-counts-ckpt-")
    return args


def windowed_counts(events, window: str, watermark: str):  # DataFrame -> DataFrame
    """The pipeline on a DataFrame of the nsq source's schema."""
    from pyspark.sql import functions as F

    parsed = events.select(
        F.col("id"),
        F.col("timestamp").alias("published"),
        F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("e"),
    )
    valid = F.col("e.ts").isNotNull() & F.col("e.kind").isNotNull()
    flat = parsed.select(
        "id",
        # an unparseable body keeps its publish time and lands in kind "_invalid"
        F.when(valid, F.col("e.ts")).otherwise(F.col("published")).alias("ts"),
        F.when(valid, F.col("e.kind")).otherwise(F.lit("_invalid")).alias("kind"),
        F.col("e.user").alias("user"),
        F.coalesce(F.col("e.value"), F.lit(0.0)).alias("value"),
    )
    return (
        flat.withWatermark("ts", watermark)
        .dropDuplicatesWithinWatermark(["id"])  # an NSQ redelivery counts once
        .where(F.col("kind") != "_flush")
        .groupBy(F.window("ts", window).alias("w"), "kind")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.approx_count_distinct("user").alias("users"),
            F.sum("value").alias("value_sum"),
        )
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "kind",
            "events",
            "users",
            "value_sum",
        )
    )


def nsq_options(args: argparse.Namespace) -> dict[str, str]:
    return source_options(args)


def build_query(spark, args: argparse.Namespace):  # -> StreamingQuery
    events = spark.readStream.format("nsq").options(**nsq_options(args)).load()
    counts = windowed_counts(events, args.window, args.watermark)
    w = counts.writeStream.option("checkpointLocation", args.checkpoint).trigger(
        processingTime=args.trigger
    )
    if args.console:
        return w.format("console").outputMode("update").option("truncate", "false").start()
    return w.format("parquet").outputMode("append").option("path", args.output).start()


def main() -> int:
    args = parse_args()
    spark = session(args.master, f"nsq-event-counts-{args.topic}")
    query = build_query(spark, args)
    print(f"started query {query.id}; checkpoint {args.checkpoint}", flush=True)
    for _ in watch(query, args.run_for):
        pass
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
        return 1
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
