"""The NSQ sink for Spark: `df.write.format("nsq")` and `df.writeStream.format("nsq")`.

Strategy: each Spark task publishes its partition's `body` column with pipelined MPUB (up to
`mpub_window` MPUBs unanswered, every answer checked for OK) over its own connection (an
nsqpy.client Conn through client.Producer: TLS, snappy/deflate and AUTH as the options say, see
options.conn_config), to one of
the nsqds named by nsqd_tcp_addresses (or found through lookupd), picked by partition number so
tasks spread over the daemons; when that nsqd cannot be reached the next one is tried. The
writers are Spark's Arrow writers: the task gets Arrow record batches, and an MPUB body
(`[count]([size][bytes])*`) is assembled from the column's offsets and data buffers with numpy,
no Python object per row. Any answer other than OK raises, so the task fails and Spark retries
it (`spark.task.maxFailures`): what a failed task had already published stays published, so
the sink is at-least-once.

Options: nsqd_tcp_addresses and/or lookupd_http_addresses, topic (or a string `topic` column),
batch_size (5000), batch_bytes (1 MiB), mpub_window (4), and the connection options of
options.conn_config: tls, tls_ca_file, tls_cert, tls_key, tls_verify, compression
(none|snappy|deflate), deflate_level, auth_secret (the certificate files are read on the
executors)."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from .client import BatchPublisher, split_addresses
from .lookup import lookup_producers
from .options import CONN_OPTIONS, conn_config, int_option
from .trace import trace

log = logging.getLogger("nsqpy.spark")

_SIZE = struct.Struct(">I")


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
        # one MPUB per 5,000 messages or 1 MiB: each MPUB is a round trip and a crossing from
        # the task's thread to the connection's loop and back (500 a batch spent most of a
        # task's time waiting on them)
        self.batch_size: int = int_option(o, "batch_size", 5000)
        self.batch_bytes: int = int_option(o, "batch_bytes", 1 << 20)
        self.window: int = int_option(o, "mpub_window", 4)
        #: the connection options (TLS, compression, AUTH): see options.conn_config
        self.conn_options = {k: str(o[k]) for k in CONN_OPTIONS if o.get(k) is not None}
        conn_config(self.conn_options, "check", check_files=False)

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

    def _producer(self, topic: str, partition: int) -> BatchPublisher:
        addrs = self._addresses(topic)
        errors = []
        config = conn_config(self.conn_options, f"spark-sink-{partition}")
        for i in range(len(addrs)):
            address = addrs[(partition + i) % len(addrs)]
            try:
                return BatchPublisher(
                    address,
                    topic,
                    batch_size=self.batch_size,
                    batch_bytes=self.batch_bytes,
                    window=self.window,
                    config=config,
                )
            except OSError as e:
                errors.append(f"{address}: {e}")
        raise ConnectionError("cannot reach any nsqd: " + "; ".join(errors))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        producers: dict[str, BatchPublisher] = {}
        t_start = time.perf_counter()
        t_spark = t_encode = t_send = 0.0  # waiting for Spark's batches, encoding, publishing
        rows = 0
        try:
            t = time.perf_counter()
            for rb in iterator:
                t_spark += time.perf_counter() - t
                rows += rb.num_rows
                if rb.num_rows == 0:
                    continue
                body = rb.column(self.body_index)
                if body.null_count:
                    raise ValueError("the nsq sink cannot publish a null body")
                if self.topic_index is None:
                    groups = [(self.topic, body)]
                else:
                    topics = rb.column(self.topic_index)
                    if topics.null_count:
                        raise ValueError("the nsq sink cannot publish to a null topic")
                    groups = [
                        (t, body.filter(pa.compute.equal(topics, t)))
                        for t in pa.compute.unique(topics).to_pylist()
                    ]
                for topic, bodies in groups:
                    p = producers.get(topic)
                    if p is None:
                        if not topic:
                            raise ValueError("the nsq sink cannot publish to an empty topic")
                        p = producers[topic] = self._producer(topic, partition)
                    t = time.perf_counter()
                    for count, mpub in mpub_bodies(bodies, self.batch_size, self.batch_bytes):
                        t1 = time.perf_counter()
                        t_encode += t1 - t
                        p.send_encoded(count, mpub)
                        t = time.perf_counter()
                        t_send += t - t1
                t = time.perf_counter()
            t = time.perf_counter()
            for p in producers.values():
                p.flush()
            t_send += time.perf_counter() - t
        finally:
            for p in producers.values():
                p.close()
        published = sum(p.published for p in producers.values())
        address = ",".join(sorted({p.address for p in producers.values()}))
        trace(
            "sink_task", partition=partition, rows=rows, seconds=time.perf_counter() - t_start,
            spark_s=t_spark, encode_s=t_encode, publish_s=t_send,
        )  # fmt: skip
        return NSQCommitMessage(published, address)


def mpub_bodies(column: pa.Array, batch_size: int, batch_bytes: int) -> Iterator[tuple[int, bytes]]:
    """MPUB bodies for a binary or string Arrow array: ``(count, [4-byte count]([4-byte size]
    [bytes])*)`` of at most ``batch_size`` messages and about ``batch_bytes`` bytes each (a
    message larger than that goes alone). Raises ValueError on an empty message."""
    t = column.type
    if pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        otype: Any = np.int64
    elif pa.types.is_binary(t) or pa.types.is_string(t):
        otype = np.int32
    else:
        raise ValueError(f"column 'body' must be binary or string, not {t}")
    n = len(column)
    bufs = column.buffers()
    offsets = np.frombuffer(bufs[1], otype)[column.offset : column.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    sizes = np.diff(offsets)
    if n and sizes.min() <= 0:
        raise ValueError("NSQ messages cannot be empty")
    # where each MPUB ends: at most batch_size messages, about batch_bytes bytes
    i = 0
    while i < n:
        j = min(n, i + batch_size)
        limit = offsets[i] + batch_bytes - 4 * (j - i)
        if offsets[j] > limit:
            j = max(i + 1, int(np.searchsorted(offsets, limit, side="right")) - 1)
        yield j - i, _encode_mpub(offsets[i : j + 1], sizes[i:j], data)
        i = j


def _encode_mpub(offsets: np.ndarray, sizes: np.ndarray, data: np.ndarray) -> bytes:
    count = len(sizes)
    start, end = int(offsets[0]), int(offsets[-1])
    head = count.to_bytes(4, "big")
    size = int(sizes[0])
    if int(sizes.max()) == size == int(sizes.min()):  # all one size: two strided copies
        out = np.empty((count, 4 + size), np.uint8)
        out[:, :4] = np.frombuffer(size.to_bytes(4, "big"), np.uint8)
        out[:, 4:] = data[start:end].reshape(count, size)
        return head + out.tobytes()
    pack = _SIZE.pack
    blob = data[start:end].tobytes()
    rel = (offsets - start).tolist()
    return head + b"".join(
        [pack(rel[k + 1] - rel[k]) + blob[rel[k] : rel[k + 1]] for k in range(count)]
    )


class NSQWriter(_NSQWriterBase, DataSourceArrowWriter):
    """``df.write.format("nsq").mode("append")``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(getattr(m, "published", 0) for m in messages if m is not None)
        log.info("nsq sink: published %d messages", n)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(getattr(m, "published", 0) for m in messages if m is not None)
        log.warning("nsq sink: write aborted after %d messages were published", n)


class NSQStreamWriter(_NSQWriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("nsq")``."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        n = sum(getattr(m, "published", 0) for m in messages if m is not None)
        log.info("nsq sink: batch %d published %d messages", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("nsq sink: batch %d aborted", batchId)
