"""The executor side of the nsq source: what a Spark task unpickles and runs to read its rows.

Strategy: Spark plans a streaming Python source's reads once per query (pyspark's
plan_data_source_read) by pickling the stream reader into the read function that every task of
every batch runs in an executor's Python worker. Unpickling names the classes' modules, and a
worker imports each once (workers are reused between tasks and batches). So what a task needs
lives here, importing only the spool's reader (pyarrow) and pyspark's InputPartition, never the
driver's side (nsqpy.spark.fetch: nsqd connections, nsqpy.client, asyncio, numpy; options;
the sink): `NSQStreamReader` pickles itself as a :class:`SpoolReader`, and partitions are
:class:`NSQPartition`. A partition names a range of spool rows (segment, byte range, rows), never
the rows themselves; `SpoolReader.read` reads that range through pyarrow.fs (spool.read_slice)
and yields Arrow record batches of the source's schema (spool.SCHEMA, SCHEMA_DDL here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .spool import Slice, read_slice
from .trace import trace

try:  # pyspark is an optional dependency (the `spark` extra)
    from pyspark.sql.datasource import InputPartition
except ImportError as e:  # pragma: no cover
    raise ImportError(
        "nsqpy.spark needs pyspark>=4.2 (pip install 'nsqpy[spark]') and a Java 17 runtime"
    ) from e

#: The source's rows (DDL). `timestamp` is the message's publish time (nsqd's nanoseconds,
#: at microsecond precision).
SCHEMA_DDL = (
    "id string, body binary, timestamp timestamp, attempts int, "
    "topic string, channel string, nsqd_address string"
)


class NSQPartition(InputPartition):
    """A range of spool rows: where an executor reads them (no rows inside). ``base`` is the
    spool's directory or URI as executors reach it (the option spool_read_uri)."""

    def __init__(self, base: str, sl: Slice) -> None:
        super().__init__(None)
        self.base = base
        self.slice = sl


class SpoolReader:
    """The stream reader as executors see it: only ``read``. (Spark calls nothing else on the
    reader it unpickles in a task.)"""

    def read(self, partition: Any) -> Iterator[Any]:
        """The partition's rows as pyarrow RecordBatches (about 65,536 rows each)."""
        if not isinstance(partition, NSQPartition):
            raise TypeError(f"nsq source: not an nsq partition: {type(partition).__name__}")
        trace("read", rows=partition.slice.rows)
        yield from read_slice(partition.base, partition.slice)
        trace("read_done", rows=partition.slice.rows)
