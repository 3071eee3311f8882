"""A timeline of the connector for benchmarks and profiling: NSQPY_SPARK_TRACE=<file>.

Strategy: when the environment variable names a file, `trace(event, **fields)` appends one JSON
line ``{"t": wall seconds, "pid": ..., "event": ..., ...}`` to it with one `open(..., "a")`
write (whole short lines from several processes interleave line by line). Spark's processes
inherit the variable from the driver, so the driver's source process (opened, each batch
planned and committed, the spool's progress) and the executors' Python workers (each partition
read) write to the same file; bench/spark_bench.py --trace reads it back. Unset (the default),
`trace` returns at once."""

from __future__ import annotations

import json
import os
import time
from typing import Any

_PATH = os.environ.get("NSQPY_SPARK_TRACE", "")


def trace(event: str, **fields: Any) -> None:
    """Append ``event`` with ``fields`` (JSON-serialisable) to NSQPY_SPARK_TRACE, if set."""
    if not _PATH:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "event": event, **fields})
    with open(_PATH, "a") as fh:
        fh.write(line + "\n")
