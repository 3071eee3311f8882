#!/usr/bin/env python3
"""Copy an NSQ topic to Parquet exactly once, with Spark Structured Streaming.

At-least-once from the `nsq` source (a message nsqd redelivered before its FIN arrived comes
again, with the same `id`) plus two things make the output exactly the published set:
Spark's file sink writes a batch that is re-run after a crash once (its `_spark_metadata` log),
and `dropDuplicatesWithinWatermark(["id"])` drops a second copy of a message id seen within the
watermark (on the publish `timestamp`; a redelivery keeps the original publish time, so the
watermark only has to cover how late a redelivery can be, not how late it is processed).

    python spark_jobs/nsq_dedup.py --nsqd-tcp-address 127.0.0.1:4150 --topic events \\
        --output /tmp/events-once --checkpoint /tmp/events-once-ckpt --watermark "10 minutes"

Runs until SIGTERM/SIGINT or --run-for seconds (the nsq_archive.py options, plus --watermark).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nsq_archive  # noqa: E402  (also puts this checkout on the path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--watermark", default="10 minutes", help="how late a redelivery can be")
    known, rest = extra.parse_known_args(argv)
    args = nsq_archive.parse_args(rest)
    args.watermark = known.watermark
    return args


def build_query(spark, args: argparse.Namespace):  # -> StreamingQuery
    df = spark.readStream.format("nsq").options(**nsq_archive.nsq_options(args)).load()
    once = df.withWatermark("timestamp", args.watermark).dropDuplicatesWithinWatermark(["id"])
    return nsq_archive.start_file_sink(once, args)


if __name__ == "__main__":
    nsq_archive.build_query = build_query  # the archive job's run loop, this query
    sys.exit(nsq_archive.run(parse_args()))
