# The NSQ sink for Spark: `df.write.format("nsq")` and `df.writeStream.format("nsq")`.
#
# Strategy: each Spark task publishes its partition's `body` column with batched MPUB (a few
# MPUBs in flight, every answer checked for OK) over its own connection, to one of the nsqds named
# by nsqd_tcp_addresses (or found through lookupd), picked by partition number so tasks spread
# over the daemons; when that nsqd cannot be reached the next one is tried. Any answer other than
# OK raises, so the task fails and Spark retries it (`spark.task.maxFailures`): what a failed
# task had already published stays published, so the sink is at-least-once.
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from .client import Producer, split_addresses
from .lookup import lookup_producers
from .options import int_option

log = logging.getLogger("nsqpy.spark")


class NSQCommitMessage(WriterCommitMessage):
    """What one task published."""

    def __init__(self, published: int, address: str) -> None:
        self.published = published
        self.address = address


class _NSQWriterBase:
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        o = {str(k).lower(): v for k, v in options.items()}
        if overwrite:
            raise ValueError("the nsq sink only appends (use mode 'append')")
        self.nsqd_tcp_addresses = split_addresses(o.get("nsqd_tcp_addresses"))
        self.lookupd_http_addresses = split_addresses(o.get("lookupd_http_addresses"))
        if not self.nsqd_tcp_addresses and not self.lookupd_http_addresses:
            raise ValueError("set nsqd_tcp_addresses and/or lookupd_http_addresses")
        names = [f.name for f in schema.fields]
        if "body" not in names:
            raise ValueError(f"the nsq sink publishes the column 'body'; the columns are {names}")
        self.body_index = names.index("body")
        body_type = schema.fields[self.body_index].dataType
        if not isinstance(body_type, (BinaryType, StringType)):
            raise ValueError(f"column 'body' must be binary or string, not {body_type}")
        self.topic = str(o.get("topic") or "")
        self.topic_index: int | None = None
        if not self.topic:
            if "topic" not in names or not isinstance(
                schema.fields[names.index("topic")].dataType, StringType
            ):
                raise ValueError("set the option topic (or give a string column 'topic')")
            self.topic_index = names.index("topic")
        self.batch_size: int = int_option(o, "batch_size", 500)
        self.batch_bytes: int = int_option(o, "batch_bytes", 1 << 20)
        self.window: int = int_option(o, "mpub_window", 4)

    def _addresses(self, topic: str) -> list[str]:
        addrs = list(self.nsqd_tcp_addresses)
        if self.lookupd_http_addresses:
            found, errors = lookup_producers(self.lookupd_http_addresses, topic)
            for a in found:
                if a not in addrs:
                    addrs.append(a)
            if not addrs:
                raise RuntimeError(
                    f"no nsqd has topic {topic} in lookupd ({errors or 'no producers'}); set "
                    "nsqd_tcp_addresses to create it"
                )
        return addrs

    def _producer(self, topic: str, partition: int) -> Producer:
        addrs = self._addresses(topic)
        errors = []
        for i in range(len(addrs)):
            address = addrs[(partition + i) % len(addrs)]
            try:
                return Producer(
                    address,
                    topic,
                    batch_size=self.batch_size,
                    batch_bytes=self.batch_bytes,
                    window=self.window,
                )
            except OSError as e:
                errors.append(f"{address}: {e}")
        raise ConnectionError("cannot reach any nsqd: " + "; ".join(errors))

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        producers: dict[str, Producer] = {}
        body_index = self.body_index
        topic_index = self.topic_index
        try:
            for row in iterator:
                body = row[body_index]
                if body is None:
                    raise ValueError("the nsq sink cannot publish a null body")
                if isinstance(body, str):
                    body = body.encode("utf-8")
                elif not isinstance(body, bytes):
                    body = bytes(body)
                topic = self.topic if topic_index is None else row[topic_index]
                p = producers.get(topic)
                if p is None:
                    if not topic:
                        raise ValueError("the nsq sink cannot publish to a null topic")
                    p = producers[topic] = self._producer(topic, partition)
                p.put(body)
            for p in producers.values():
                p.flush()
        finally:
            for p in producers.values():
                p.close()
        published = sum(p.published for p in producers.values())
        address = ",".join(sorted({p.conn.address for p in producers.values()}))
        return NSQCommitMessage(published, address)


class NSQWriter(_NSQWriterBase, DataSourceWriter):
    """``df.write.format("nsq").mode("append")``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(getattr(m, "published", 0) for m in messages if m is not None)
        log.info("nsq sink: published %d messages", n)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(getattr(m, "published", 0) for m in messages if m is not None)
        log.warning("nsq sink: write aborted after %d messages were published", n)


class NSQStreamWriter(_NSQWriterBase, DataSourceStreamWriter):
    """``df.writeStream.format("nsq")``."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        n = sum(getattr(m, "published", 0) for m in messages if m is not None)
        log.info("nsq sink: batch %d published %d messages", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("nsq sink: batch %d aborted", batchId)
