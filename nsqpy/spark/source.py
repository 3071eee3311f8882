"""The NSQ streaming source for Spark (Python Data Source API, Spark >= 4.2).

Strategy: a write-ahead spool makes NSQ look like Kafka. The driver-side reader (which Spark
keeps alive for the whole query in one Python process) runs a fetch.Fetcher: nsqd's messages are
appended to the spool (spool.py: Arrow IPC segments in `spool_dir`, fsync'd in groups) and FIN'd
as soon as the write holding them is durable. From then on the spool, not nsqd, is the
replayable log, and the source's offsets are positions in it (`{"position": N}`: N rows spooled
before). latestOffset(start, limit) returns the spool's durable end, cut by Spark's admission
control (max_messages_per_trigger, max_bytes_per_trigger); partitions(start, end) names spool
ranges (segment, byte range, rows), so no row goes through a pickle; read() on an executor reads
its range through pyarrow.fs and yields Arrow record batches (the reader pickles itself as
reader.SpoolReader, so executors import only that read side); commit(end) deletes the whole
segments below end. nsqd keeps streaming while Spark runs a batch; RDY (max_in_flight) bounds
what the driver holds in memory, and max_spool_bytes what the spool holds past the last commit
(above it RDY goes to 0 and nsqd keeps the messages).

Trigger.AvailableNow: prepareForTriggerAvailableNow stops taking messages for a moment, asks
every nsqd's /stats for the channel's depth + in-flight count, and sets the target to the
spool's end plus that; batches run until the spool reaches the target, or nothing more arrives
for fetch_wait (an nsqd whose /stats cannot be read, or messages taken by another consumer of
the channel), and then the query ends.

Options (all strings, as Spark passes them; see SourceOptions and docs/spark.md):
nsqd_tcp_addresses / lookupd_http_addresses, topic, channel, spool_dir, spool_read_uri,
max_in_flight, max_spool_bytes, spool_segment_bytes, max_messages_per_trigger,
max_bytes_per_trigger, nsqd_http_addresses, msg_timeout, fetch_wait, lookupd_poll_interval,
connections_per_nsqd, max_rows_per_partition, min_batch_rows, max_batch_delay, and the
connection options of options.conn_config: tls, tls_ca_file, tls_cert, tls_key, tls_verify
(TLS, a client certificate), compression (none|snappy|deflate), deflate_level, auth_secret."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .client import split_addresses
from .fetch import Fetcher
from .lookup import HTTP_ADDRESSES, channel_backlog
from .options import CONN_OPTIONS, conn_config, int_option, parse_duration_ms
from .reader import SCHEMA_DDL, NSQPartition, SpoolReader
from .spool import Spool
from .trace import trace

try:  # pyspark is an optional dependency (the `spark` extra)
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError as e:  # pragma: no cover
    raise ImportError(
        "nsqpy.spark needs pyspark>=4.2 (pip install 'nsqpy[spark]') and a Java 17 runtime"
    ) from e

log = logging.getLogger("nsqpy.spark")

__all__ = ["SCHEMA_DDL", "NSQStreamReader", "SourceOptions"]

#: RDY over all connections: messages received and not yet durable. The window of the
#: receive -> write -> fsync -> FIN round trip, so it bounds the rate (2,500 gave ~100-230k
#: msgs/s, 10,000 about twice that) and what the driver holds in memory (~150 B a 100-byte
#: message: 1.5 MB).
DEFAULT_MAX_IN_FLIGHT = 10_000
#: nsqd's default --max-rdy-count: the RDY one connection may have
NSQD_MAX_RDY_COUNT = 2500

#: how long the query's first latestOffset waits for the first rows (seconds)
_FIRST_ROWS_WAIT = 3.0
#: rows a batch waits for (up to max_batch_delay) while messages pour in: each micro-batch costs
#: Spark a fixed ~0.15 CPU-s in its JVM (planning, the offset and commit logs, tasks), so a
#: backlog drained in batches of 100,000 rows spends about as much CPU on batches as on rows
DEFAULT_MIN_BATCH_ROWS = 200_000
#: what counts as "messages keep arriving" while a batch waits for min_batch_rows (seconds)
_ARRIVAL_GAP = 0.05


# ------------------------------------------------------------------------------------ options


class SourceOptions:
    """The source's options, checked (every error names the option)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        o = {str(k).lower(): v for k, v in options.items()}
        self.nsqd_tcp_addresses = split_addresses(o.get("nsqd_tcp_addresses"))
        self.lookupd_http_addresses = split_addresses(o.get("lookupd_http_addresses"))
        if not self.nsqd_tcp_addresses and not self.lookupd_http_addresses:
            raise ValueError("set nsqd_tcp_addresses and/or lookupd_http_addresses")
        self.topic = str(o.get("topic") or "")
        self.channel = str(o.get("channel") or "")
        if not self.topic or not self.channel:
            raise ValueError("the nsq source needs the options topic and channel")
        spool = o.get("spool_dir")
        if not spool:
            raise ValueError(
                "the nsq source needs the option spool_dir: a durable directory that survives a "
                "driver restart, one per source, e.g. <checkpointLocation>/nsq-spool"
            )
        self.spool_dir = str(spool)
        if "://" in self.spool_dir and not self.spool_dir.startswith("file://"):
            raise ValueError("spool_dir must be a local or mounted path (no hdfs://, s3a:// ...)")
        self.spool_dir = self.spool_dir.removeprefix("file://")
        self.spool_read_uri = str(o.get("spool_read_uri") or "") or self.spool_dir
        self.max_in_flight: int = int_option(o, "max_in_flight", DEFAULT_MAX_IN_FLIGHT)
        self.max_messages_per_trigger: int | None = int_option(o, "max_messages_per_trigger", None)
        self.max_bytes_per_trigger: int | None = int_option(o, "max_bytes_per_trigger", None)
        self.max_spool_bytes: int = int_option(o, "max_spool_bytes", 512 << 20, low=1 << 16)
        self.spool_segment_bytes: int = int_option(o, "spool_segment_bytes", 64 << 20, 1 << 12)
        self.nsqd_http_addresses = split_addresses(o.get("nsqd_http_addresses"))
        self.msg_timeout_ms = parse_duration_ms(o.get("msg_timeout", "60s"), "msg_timeout")
        if self.msg_timeout_ms < 1000:
            raise ValueError("option msg_timeout: nsqd accepts 1s at least")
        self.fetch_wait_ms = parse_duration_ms(o.get("fetch_wait", "250ms"), "fetch_wait")
        self.lookupd_poll_interval_ms = parse_duration_ms(
            o.get("lookupd_poll_interval", "60s"), "lookupd_poll_interval"
        )
        # enough connections for max_in_flight at nsqd's default --max-rdy-count (2500)
        self.connections_per_nsqd: int = int_option(
            o, "connections_per_nsqd", -(-self.max_in_flight // NSQD_MAX_RDY_COUNT)
        )
        self.max_rows_per_partition: int = int_option(o, "max_rows_per_partition", 100_000)
        self.min_batch_rows: int = int_option(o, "min_batch_rows", DEFAULT_MIN_BATCH_ROWS, low=0)
        self.max_batch_delay_ms = parse_duration_ms(
            o.get("max_batch_delay", "500ms"), "max_batch_delay"
        )
        #: the connection options (TLS, compression, AUTH): see options.conn_config
        self.conn_options = {k: str(o[k]) for k in CONN_OPTIONS if o.get(k) is not None}
        conn_config(self.conn_options, "check", check_files=False)
        if self.nsqd_http_addresses and len(self.nsqd_http_addresses) != len(
            self.nsqd_tcp_addresses
        ):
            raise ValueError(
                "option nsqd_http_addresses: give one per nsqd_tcp_addresses entry, in order"
            )


# ------------------------------------------------------------------------------------ Spark API


def _position(offset: Mapping[str, Any]) -> int:
    if "position" not in offset:
        raise RuntimeError(
            f"offset {dict(offset)} is not a spool position: this checkpoint was written by an "
            "older nsq source; start the query with a new checkpointLocation"
        )
    return int(offset["position"])


class NSQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("nsq")``: see the module comment for the protocol."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Also built on executors to call read(): no connections, no spool here.
        trace("reader")
        self.opts = SourceOptions(options)
        self._fetcher: Fetcher | None = None
        self._spool: Spool | None = None
        self._target: int | None = None  # AvailableNow: where this run ends
        self._target_final = False
        self._available_now = False
        self._first_plan = True
        self._last_plan: tuple[float, int] | None = None  # (time, end) of the previous plan

    def _f(self) -> Fetcher:
        if self._fetcher is None:
            o = self.opts
            # a quarter of the room at most: committing frees whole segments
            seg = min(o.spool_segment_bytes, o.max_spool_bytes // 4)
            self._spool = Spool(o.spool_dir, segment_bytes=seg)
            self._fetcher = Fetcher(o, self._spool)
        return self._fetcher

    def initialOffset(self) -> dict:
        trace("initialOffset")
        f = self._f()  # subscribe now: messages arrive while Spark sets up
        return {"position": f.spool.committed}

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.max_messages_per_trigger:
            return ReadMaxRows(o.max_messages_per_trigger)
        if o.max_bytes_per_trigger:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        f = self._f()
        o = self.opts
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(n.conns for n in f.nodes.values()):
            time.sleep(0.01)
        with f.cond:
            f.hold = True  # RDY 0: what nsqd counts next is what we have not taken
        f.wait_until_idle(1 << 62, 0.05, 5)
        backlog: int | None = 0
        http = dict(zip(o.nsqd_tcp_addresses, o.nsqd_http_addresses, strict=False))
        for address in list(f.nodes):
            h = http.get(address) or HTTP_ADDRESSES.get(address)
            try:
                if h is None:
                    raise LookupError("its HTTP address is unknown (set nsqd_http_addresses)")
                if backlog is not None:
                    backlog += channel_backlog(h, o.topic, o.channel)
            except (OSError, ValueError, LookupError) as e:
                log.info("nsq source: no /stats from %s (%s): reading until idle", address, e)
                backlog = None
        end = f.durable_end()
        self._target = end + backlog if backlog is not None else None
        self._target_final = False
        self._available_now = True
        log.info("nsq source: AvailableNow from %d to %s", end, self._target or "idle")
        with f.cond:
            f.hold = False
            # "idle" counts from here, not from the last message before the hold
            f.last_arrival = time.monotonic()
        f.refresh_rdy()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:
            raise RuntimeError("the nsq source needs Spark >= 4.2 (latestOffset(start, limit))")
        f = self._f()
        o = self.opts
        pos = _position(start)
        if pos < f.spool.start or pos > f.durable_end():
            raise RuntimeError(
                f"the query is at spool position {pos}, but {o.spool_dir} holds "
                f"[{f.spool.start}, {f.durable_end()}): was spool_dir changed, emptied, or "
                "shared by two queries? (A lost spool loses what it held: see docs/spark.md.)"
            )
        if f.failed:
            raise RuntimeError(f"nsq source: {f.failed}")
        f.consumed(pos)
        if self._available_now:
            end = self._available_now_end(f, pos)
        elif self._first_plan:
            # The query's first batch: Spark runs batch 0 whatever it holds, so give the
            # connections time to subscribe and the backlog time to start flowing (a sliver of
            # a first batch costs a whole batch's overhead)
            end = f.wait_for_rows(pos, max(o.fetch_wait_ms / 1000, _FIRST_ROWS_WAIT))
            if end > pos:
                self._last_plan = (time.monotonic(), end)  # the rate from here
                time.sleep(o.fetch_wait_ms / 1000)
                end = self._fill(f, pos, f.durable_end(), limit)
        else:
            end = self._fill(f, pos, f.wait_for_rows(pos, o.fetch_wait_ms / 1000), limit)
        self._first_plan = False
        self._last_plan = (time.monotonic(), end)
        limit = limit if limit is not None else ReadAllAvailable()
        if isinstance(limit, ReadMinRows) and end - pos < int(limit.min_rows):
            end = pos
        if isinstance(limit, ReadMaxRows):
            end = min(end, pos + max(1, int(limit.max_rows)))
        max_bytes = None
        if isinstance(limit, ReadMaxBytes):
            max_bytes = int(limit.max_bytes)
        elif not isinstance(limit, ReadAllAvailable):
            max_bytes = o.max_bytes_per_trigger
        if max_bytes and end > pos:
            end = f.spool.end_within_bytes(pos, end, max_bytes)
        f.write_stats()
        trace("latestOffset", start=pos, end=end)
        return {"position": end}

    def _fill(self, f: Fetcher, pos: int, end: int, limit: ReadLimit | None) -> int:
        """Fewer, larger batches while a backlog drains: when the rows since the previous plan
        came fast enough to make min_batch_rows within max_batch_delay, wait for them (or until
        messages stop arriving); a slow stream's batch is planned at once."""
        o = self.opts
        want = o.min_batch_rows
        if isinstance(limit, ReadMaxRows):
            want = min(want, int(limit.max_rows))
        have = end - pos
        if have <= 0 or have >= want or self._last_plan is None:
            return end
        t0, end0 = self._last_plan
        now = time.monotonic()
        rate = (end - end0) / max(now - t0, 1e-3)  # rows/s made durable since the last plan
        delay = o.max_batch_delay_ms / 1000
        if rate <= 0 or (want - have) / rate > delay:
            return end
        return f.wait_for_batch(pos + want, delay, _ARRIVAL_GAP)

    def _available_now_end(self, f: Fetcher, pos: int) -> int:
        """AvailableNow: the end for the next batch; once the target is reached (or nothing came
        for fetch_wait) it is final, RDY goes to 0, and the query ends there."""
        if self._target_final:
            assert self._target is not None
            return min(self._target, f.durable_end())
        target = self._target if self._target is not None else 1 << 62
        end = f.durable_end()
        if pos < end < target:
            return end  # a batch to run while the rest arrives
        end = f.wait_until_idle(target, self.opts.fetch_wait_ms / 1000, 3600)
        self._target = min(target, end)
        self._target_final = True
        with f.cond:
            f.hold = True
        return self._target

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        f = self._f()
        s, e = _position(start), _position(end)
        try:
            slices = f.spool.slices(s, e, self.opts.max_rows_per_partition)
        except LookupError as err:
            raise RuntimeError(
                f"nsq source: batch [{s}, {e}) cannot be read: {err} (was spool_dir changed or "
                "emptied?)"
            ) from None
        trace("partitions", start=s, end=e, n=len(slices))
        return [NSQPartition(self.opts.spool_read_uri, sl) for sl in slices]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return SpoolReader().read(partition)

    def __reduce__(self) -> tuple[Any, ...]:
        # Spark pickles the reader into every task's read function: executors get only the
        # read side (reader.py), so a task's worker imports no connections, numpy or options
        return (SpoolReader, ())

    def commit(self, end: dict) -> None:
        f = self._f()
        trace("commit", end=_position(end))
        f.commit(_position(end))
        f.write_stats()

    def stop(self) -> None:
        f, self._fetcher = self._fetcher, None
        if f is None:
            return
        f.close()
        if self._spool is not None:
            self._spool.close()
            self._spool = None
