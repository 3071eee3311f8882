# The NSQ streaming source for Spark (Python Data Source API, Spark >= 4.2).
#
# Strategy: NSQ has no offsets, so the offsets are ours: `{"batch": N, "messages": M}`, the N-th
# micro-batch this source produced and the running message count. The driver-side reader (which
# Spark keeps alive for the whole query in one Python process) owns the nsqd connections through
# a `_Fetcher`: an I/O thread that reads every connection, answers heartbeats, keeps the received
# messages (`pending`) and TOUCHes every message it holds so none times out while a batch runs.
#
# latestOffset(start, limit) cuts the next batch out of `pending` (at most the read limit: Spark's
# admission control), writes its rows durably to the spool (`<spool_dir>/<N>.msgpack`: temp file,
# fsync, rename) and only then returns its offset. partitions(start, end) hands the rows to the
# executors inside the partitions; after a driver restart it reads them back from the spool, so
# a re-run batch has the same rows. A message is FIN'd, on the connection that delivered it, only
# once Spark has committed its batch: in commit(end), or earlier in latestOffset(start) /
# partitions(start, end), which Spark calls only when every batch up to `start` is in the
# query's commit log (it plans batch N+1 only after batch N is committed). That matters: Spark
# calls commit() for batch N only when batch N+1 is planned, and with max_in_flight messages held
# nsqd would send nothing more, so waiting for commit() alone could stall the query.
#
# What nsqd redelivers is recognized by message ID. IDs of uncommitted batches (ours, or loaded
# from the spool at start) are "owned": a redelivered copy is held, not emitted again, and FIN'd
# when that batch commits. IDs of committed batches whose delivery could not be FIN'd (the
# connection died, or the batch was committed by a previous driver) become tombstones for a
# while (2 x msg_timeout + 2 min): a redelivered copy is FIN'd at once. What is left are the
# duplicates no reader can see (redelivered after that window, or to another consumer).
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import selectors
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgpack

from .client import (
    Message,
    NSQConnection,
    decode_message_frame,
    split_addresses,
)
from .lookup import lookup_producers
from .options import int_option, parse_duration_ms

try:  # pyspark is an optional dependency (the `spark` extra)
    from pyspark.sql.datasource import (
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
    )
except ImportError as e:  # pragma: no cover
    raise ImportError(
        "nsqpy.spark needs pyspark>=4.2 (pip install 'nsqpy[spark]') and a Java 17 runtime"
    ) from e

log = logging.getLogger("nsqpy.spark")

#: The source's rows (DDL). `timestamp` is the message's publish time (nsqd's nanoseconds,
#: at microsecond precision).
SCHEMA_DDL = (
    "id string, body binary, timestamp timestamp, attempts int, "
    "topic string, channel string, nsqd_address string"
)

SPOOL_VERSION = 1
_SPOOL_RE = re.compile(r"^(\d{12})\.msgpack$")


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
        self.max_in_flight: int = int_option(o, "max_in_flight", 2500)
        self.max_messages_per_trigger: int | None = int_option(o, "max_messages_per_trigger", None)
        self.msg_timeout_ms = parse_duration_ms(o.get("msg_timeout", "60s"), "msg_timeout")
        if self.msg_timeout_ms < 1000:
            raise ValueError("option msg_timeout: nsqd accepts 1s at least")
        touch = o.get("touch_interval")
        self.touch_interval_ms = (
            parse_duration_ms(touch, "touch_interval")
            if touch
            else max(500, self.msg_timeout_ms // 3)
        )
        self.fetch_wait_ms = parse_duration_ms(o.get("fetch_wait", "250ms"), "fetch_wait")
        self.lookupd_poll_interval_ms = parse_duration_ms(
            o.get("lookupd_poll_interval", "60s"), "lookupd_poll_interval"
        )
        self.connections_per_nsqd: int = int_option(o, "connections_per_nsqd", 1)
        self.max_rows_per_partition: int = int_option(o, "max_rows_per_partition", 10000)
        self.tombstone_ttl_s = 2 * self.msg_timeout_ms / 1000 + 120


# ------------------------------------------------------------------------------------ spool


class Spool:
    """Durable rows of the batches this source planned and Spark has not committed.

    One msgpack file per batch, ``<dir>/<batch:012d>.msgpack``: written to a temp file,
    fsync'd, renamed over, and the directory fsync'd, before the batch's offset is returned.
    A file lock keeps a second reader off the same directory.
    """

    def __init__(self, path: str, topic: str, channel: str, lock_timeout: float = 30) -> None:
        self.path = path
        self.topic = topic
        self.channel = channel
        os.makedirs(path, exist_ok=True)
        self._lock_fd = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self._lock_fd)
                    raise RuntimeError(
                        f"spool_dir {path} is used by another running nsq source"
                    ) from None
                time.sleep(0.2)

    def file(self, seq: int) -> str:
        return os.path.join(self.path, f"{seq:012d}.msgpack")

    def write(self, seq: int, rows: list[tuple]) -> None:
        doc = {
            "version": SPOOL_VERSION,
            "batch": seq,
            "topic": self.topic,
            "channel": self.channel,
            "rows": rows,
        }
        final = self.file(seq)
        tmp = os.path.join(self.path, f".{seq:012d}.msgpack.tmp")
        with open(tmp, "wb") as f:
            f.write(msgpack.packb(doc, use_bin_type=True))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self) -> dict[int, list[tuple]]:
        """Every spooled batch: ``{batch: rows}``."""
        out: dict[int, list[tuple]] = {}
        for name in sorted(os.listdir(self.path)):
            m = _SPOOL_RE.match(name)
            if not m:
                continue
            with open(os.path.join(self.path, name), "rb") as f:
                doc = msgpack.unpackb(f.read(), raw=False)
            if doc.get("version") != SPOOL_VERSION:
                raise RuntimeError(f"{name}: unknown spool version {doc.get('version')}")
            if (doc.get("topic"), doc.get("channel")) != (self.topic, self.channel):
                raise RuntimeError(
                    f"spool_dir {self.path} holds batches of {doc.get('topic')}/"
                    f"{doc.get('channel')}, not {self.topic}/{self.channel}: use one spool_dir "
                    "per source"
                )
            out[int(m.group(1))] = [tuple(r) for r in doc["rows"]]
        return out

    def delete(self, seqs: list[int]) -> None:
        for seq in seqs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.file(seq))

    def write_stats(self, stats: dict[str, int]) -> None:
        tmp = os.path.join(self.path, ".stats.json.tmp")
        with open(tmp, "w") as f:
            json.dump(stats, f)
        os.replace(tmp, os.path.join(self.path, "stats.json"))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


# ------------------------------------------------------------------------------------ fetcher


class _Owned:
    """A message ID that belongs to a planned batch, and its live delivery if we have one."""

    __slots__ = ("msg", "seq")

    def __init__(self, seq: int, msg: Message | None) -> None:
        self.seq = seq
        self.msg = msg


class _Fetcher:
    """The driver side: connections, the I/O thread, held messages, batches and the spool."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.cond = threading.Condition()
        self.pending: dict[bytes, Message] = {}
        self.owned: dict[bytes, _Owned] = {}
        self.tombstones: dict[bytes, float] = {}
        self.batches: dict[int, list[tuple]] = {}
        self.committed = -1  # highest batch known committed in Spark's commit log
        self.resolved = False  # stale spool batches sorted out (first word from Spark)
        self.conns: dict[str, NSQConnection] = {}
        self.retry: dict[str, tuple[float, float]] = {}  # key -> (next attempt, backoff s)
        self.lookup_addresses: list[str] = []
        self.counters = {
            "received": 0,
            "emitted": 0,
            "finished": 0,
            "redelivered_held": 0,
            "redelivered_finished": 0,
            "replayed_batches": 0,
            "lost_connections": 0,
            "nsqd_errors": 0,
        }
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        self.spool = Spool(opts.spool_dir, opts.topic, opts.channel)
        for seq, rows in self.spool.load().items():
            self.batches[seq] = rows
            for r in rows:
                self.owned[r[0].encode()] = _Owned(seq, None)
        if self.batches:
            log.info("nsq source: %d batches in the spool %s", len(self.batches), opts.spool_dir)
        self._thread = threading.Thread(target=self._run, name="nsq-source-io", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------- I/O thread

    def _run(self) -> None:
        opts = self.opts
        next_lookup = 0.0
        next_touch = time.monotonic() + opts.touch_interval_ms / 1000
        while not self._stop.is_set():
            now = time.monotonic()
            if opts.lookupd_http_addresses and now >= next_lookup:
                addrs, errors = lookup_producers(opts.lookupd_http_addresses, opts.topic)
                for lookupd, err in errors.items():
                    log.warning("nsq source: lookupd %s: %s", lookupd, err)
                if addrs or not errors:
                    self.lookup_addresses = addrs
                next_lookup = now + opts.lookupd_poll_interval_ms / 1000
            self._connect_missing(now)
            try:
                events = self._sel.select(timeout=0.05) if self.conns else []
            except OSError:
                events = []
            if not self.conns:
                self._stop.wait(0.05)
            for key, _ in events:
                conn = key.data
                try:
                    frames = conn.read_available()
                except ConnectionError as e:
                    self._drop(conn, str(e))
                    continue
                msgs = []
                for ftype, data in frames:
                    if ftype == 2:
                        msgs.append(decode_message_frame(data, conn))
                    elif ftype == 1:
                        self.counters["nsqd_errors"] += 1
                        log.debug("nsq source: %s: %s", conn.address, data[:200])
                if msgs:
                    self._on_messages(msgs)
            if now >= next_touch:
                self._touch_all()
                self._expire_tombstones(now)
                next_touch = now + opts.touch_interval_ms / 1000

    def _wanted(self) -> list[str]:
        addrs = list(self.opts.nsqd_tcp_addresses)
        for a in self.lookup_addresses:
            if a not in addrs:
                addrs.append(a)
        return [f"{a}#{i}" for a in addrs for i in range(self.opts.connections_per_nsqd)]

    def _connect_missing(self, now: float) -> None:
        changed = False
        for key in self._wanted():
            if key in self.conns:
                continue
            at, backoff = self.retry.get(key, (0.0, 0.5))
            if now < at:
                continue
            address = key.rpartition("#")[0]
            conn = NSQConnection(
                address,
                timeout=5,  # this thread also reads and TOUCHes: never stall it for long
                msg_timeout_ms=self.opts.msg_timeout_ms,
                client_id=f"spark-{self.opts.channel}",
            )
            try:
                conn.connect()
                conn.sub(self.opts.topic, self.opts.channel)
                if conn.sock is None:
                    raise ConnectionError("closed")
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            except Exception as e:  # noqa: BLE001 - any failure: retry later
                conn.close()
                backoff = min(backoff * 2, 15.0)
                self.retry[key] = (now + backoff, backoff)
                log.warning("nsq source: cannot subscribe on %s: %s", address, e)
                continue
            self.retry.pop(key, None)
            with self.cond:
                self.conns[key] = conn
            changed = True
            log.info(
                "nsq source: subscribed to %s/%s on %s", self.opts.topic, self.opts.channel, address
            )
        if changed:
            self._distribute_rdy()

    def _distribute_rdy(self) -> None:
        conns = list(self.conns.values())
        if not conns:
            return
        share = max(1, self.opts.max_in_flight // len(conns))
        for conn in conns:
            try:
                conn.rdy(min(share, conn.max_rdy_count))
            except OSError:
                pass  # the read side notices and drops it

    def _drop(self, conn: NSQConnection, why: str) -> None:
        with contextlib.suppress(KeyError, ValueError):
            if conn.sock is not None:
                self._sel.unregister(conn.sock)
        conn.close()
        with self.cond:
            for key, c in list(self.conns.items()):
                if c is conn:
                    del self.conns[key]
                    self.retry[key] = (time.monotonic() + 0.5, 0.5)
            # nsqd requeues what this connection held: drop the unplanned ones (they come back);
            # planned ones stay owned and their redelivery is recognized by ID.
            for mid in [m for m, msg in self.pending.items() if msg.conn is conn]:
                del self.pending[mid]
            self.counters["lost_connections"] += 1
        log.warning("nsq source: lost %s: %s", conn.address, why)
        self._distribute_rdy()

    def _on_messages(self, msgs: list[Message]) -> None:
        """Messages of one read: new ones to `pending`; redeliveries of planned ones held (or
        FIN'd when their batch is committed)."""
        with self.cond:
            self.counters["received"] += len(msgs)
            owned, pending, tombstones = self.owned, self.pending, self.tombstones
            for msg in msgs:
                o = owned.get(msg.id)
                if o is not None:  # a redelivery of a planned message
                    o.msg = msg
                    if o.seq <= self.committed:
                        self._fin({msg.conn: [msg.id]})
                        del owned[msg.id]
                        self.counters["redelivered_finished"] += 1
                    else:
                        self.counters["redelivered_held"] += 1
                elif tombstones and tombstones.pop(msg.id, None) is not None:
                    self._fin({msg.conn: [msg.id]})
                    self.counters["redelivered_finished"] += 1
                else:
                    pending[msg.id] = msg
            self.cond.notify_all()

    def _touch_all(self) -> None:
        by_conn: dict[NSQConnection, list[bytes]] = {}
        with self.cond:
            for msg in self.pending.values():
                by_conn.setdefault(msg.conn, []).append(msg.id)
            for o in self.owned.values():
                if o.msg is not None and o.msg.conn.alive:
                    by_conn.setdefault(o.msg.conn, []).append(o.msg.id)
        for conn, ids in by_conn.items():
            with contextlib.suppress(OSError):
                conn.send_many(b"TOUCH", ids)

    def _expire_tombstones(self, now: float) -> None:
        with self.cond:
            expired = [k for k, t in self.tombstones.items() if t <= now]
            for k in expired:
                del self.tombstones[k]

    def _fin(self, by_conn: dict[NSQConnection, list[bytes]]) -> list[bytes]:
        """FIN in bulk per connection; returns the IDs that could not be sent."""
        failed: list[bytes] = []
        for conn, ids in by_conn.items():
            try:
                conn.send_many(b"FIN", ids)
                self.counters["finished"] += len(ids)
            except OSError:
                failed.extend(ids)
        return failed

    # -------------------------------------------------------------- driver calls (under cond)

    def resolve(self, last_logged: int) -> None:
        """On Spark's first call: spooled batches after ``last_logged`` were never logged by
        Spark (the driver died between our answer and its offset log): their messages are new
        data again."""
        if self.resolved:
            return
        self.resolved = True
        stale = sorted(s for s in self.batches if s > last_logged)
        for seq in stale:
            for r in self.batches.pop(seq):
                o = self.owned.pop(r[0].encode(), None)
                if o is not None and o.msg is not None and o.msg.conn.alive:
                    self.pending[o.msg.id] = o.msg
        if stale:
            self.spool.delete(stale)
            log.info("nsq source: dropped %d spooled batches Spark never logged", len(stale))

    def commit_through(self, seq: int) -> None:
        """Spark has committed every batch up to ``seq``: FIN their messages, drop their
        spool files."""
        if seq <= self.committed:
            return
        self.committed = seq
        by_conn: dict[NSQConnection, list[bytes]] = {}
        dead: list[bytes] = []
        done = [s for s in self.batches if s <= seq]
        for s in done:
            for r in self.batches.pop(s):
                mid = r[0].encode()
                o = self.owned.pop(mid, None)
                if o is None:
                    continue
                if o.msg is not None and o.msg.conn.alive:
                    by_conn.setdefault(o.msg.conn, []).append(mid)
                else:
                    dead.append(mid)
        dead += self._fin(by_conn)
        expiry = time.monotonic() + self.opts.tombstone_ttl_s
        for mid in dead:
            self.tombstones[mid] = expiry
        while len(self.tombstones) > 2_000_000:
            self.tombstones.pop(next(iter(self.tombstones)))
        self.spool.delete(done)

    def next_batch(self, seq: int, limit: ReadLimit) -> list[tuple]:
        """Cut batch ``seq`` out of the pending messages (waiting up to fetch_wait for them),
        spool it, and return its rows ([] when there is nothing to read)."""
        opts = self.opts
        if isinstance(limit, ReadMaxRows):
            cap = max(1, int(limit.max_rows))
        else:
            cap = opts.max_in_flight
        need = int(limit.min_rows) if isinstance(limit, ReadMinRows) else 1
        with self.cond:
            held = sum(1 for o in self.owned.values() if o.msg is not None)
            want = max(1, min(cap, opts.max_in_flight - held))
            deadline = time.monotonic() + opts.fetch_wait_ms / 1000
            quiet = min(0.05, opts.fetch_wait_ms / 1000)
            seen = len(self.pending)
            last_change = time.monotonic()
            while len(self.pending) < want:
                now = time.monotonic()
                if now >= deadline or (self.pending and now - last_change >= quiet):
                    break
                self.cond.wait(min(deadline - now, quiet))
                if len(self.pending) != seen:
                    seen = len(self.pending)
                    last_change = time.monotonic()
            if len(self.pending) < need:
                return []
            take = []
            for mid in self.pending:
                take.append(mid)
                if len(take) >= cap:
                    break
            rows = []
            for mid in take:
                msg = self.pending.pop(mid)
                self.owned[mid] = _Owned(seq, msg)
                addr = msg.conn.address
                rows.append((mid.decode(), msg.body, msg.timestamp_ns, msg.attempts, addr))
            self.batches[seq] = rows
            self.counters["emitted"] += len(rows)
        if rows:
            self.spool.write(seq, rows)
        return rows

    def rows_between(self, start: int, end: int) -> list[list[tuple]]:
        out = []
        with self.cond:
            for seq in range(start + 1, end + 1):
                rows = self.batches.get(seq)
                if rows is None:
                    raise RuntimeError(
                        f"nsq source: batch {seq} is not in the spool {self.opts.spool_dir}; it "
                        "cannot be replayed (was spool_dir changed or emptied?)"
                    )
                out.append(rows)
        return out

    def write_stats(self) -> None:
        with contextlib.suppress(OSError):
            self.spool.write_stats(dict(self.counters))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with self.cond:
            conns = list(self.conns.values())
            self.conns.clear()
            unplanned = list(self.pending.values())
            self.pending.clear()
        by_conn: dict[NSQConnection, list[bytes]] = {}
        for msg in unplanned:
            by_conn.setdefault(msg.conn, []).append(msg.id)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.rdy(0)
                # unplanned messages go back at once (nsqd would wait for msg_timeout)
                conn.send(b"".join(b"REQ " + i + b" 0\n" for i in by_conn.get(conn, [])))
            conn.close()
        self.write_stats()
        self.spool.close()
        self._sel.close()


def committed_in_checkpoint(opts: SourceOptions) -> int | None:
    """The last batch of this source in the query's commit log, when spool_dir is a directory
    of the query's checkpoint (``<checkpointLocation>/nsq-spool``); else None.

    Reads ``commits/<N>`` (the highest N) and this source's line of ``offsets/<N>`` (the one
    whose topic, channel and spool name are ours)."""
    spool = os.path.normpath(opts.spool_dir)
    ckpt = os.path.dirname(spool)
    try:
        commits = [int(n) for n in os.listdir(os.path.join(ckpt, "commits")) if n.isdigit()]
        if not commits:
            return None
        with open(os.path.join(ckpt, "offsets", str(max(commits)))) as fh:
            lines = fh.read().splitlines()
    except (OSError, ValueError):
        return None
    ours = (opts.topic, opts.channel, os.path.basename(spool))
    for line in lines[2:]:
        try:
            off = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(off, dict)
            and (off.get("topic"), off.get("channel"), off.get("spool")) == ours
        ):
            return int(off["batch"])
    return None


# ------------------------------------------------------------------------------------ Spark API


class NSQPartition(InputPartition):
    """Rows of one planned batch (or a slice of it), shipped to the executor that reads them."""

    def __init__(self, topic: str, channel: str, rows: list[tuple]) -> None:
        super().__init__(None)
        self.topic = topic
        self.channel = channel
        self.rows = rows


def _arrow_batch(partition: NSQPartition) -> Any:
    import pyarrow as pa

    rows = partition.rows
    n = len(rows)
    ids, bodies, ts, attempts, addrs = zip(*rows, strict=True) if rows else ((),) * 5
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.string()),
            pa.array(bodies, pa.binary()),
            pa.array([t // 1000 for t in ts], pa.timestamp("us", tz="UTC")),
            pa.array(attempts, pa.int32()),
            pa.array([partition.topic] * n, pa.string()),
            pa.array([partition.channel] * n, pa.string()),
            pa.array(addrs, pa.string()),
        ],
        names=["id", "body", "timestamp", "attempts", "topic", "channel", "nsqd_address"],
    )


class NSQStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("nsq")``: see the module comment for the protocol."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Also built on executors to call read(): no connections here.
        self.opts = SourceOptions(options)
        self._fetcher: _Fetcher | None = None

    def _f(self) -> _Fetcher:
        if self._fetcher is None:
            self._fetcher = _Fetcher(self.opts)
        return self._fetcher

    def initialOffset(self) -> dict:
        self._f()  # subscribe now: messages arrive while Spark sets up
        return {"batch": 0, "messages": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:
            raise RuntimeError("the nsq source needs Spark >= 4.2 (latestOffset(start, limit))")
        f = self._f()
        seq = int(start["batch"])
        with f.cond:
            f.resolve(seq)
            f.commit_through(seq)  # Spark plans batch seq+1 only after seq is committed
        rows = f.next_batch(seq + 1, limit if limit is not None else ReadAllAvailable())
        f.write_stats()
        if not rows:
            return start
        return {
            "batch": seq + 1,
            "messages": int(start.get("messages", 0)) + len(rows),
            "topic": self.opts.topic,
            "channel": self.opts.channel,
            "spool": os.path.basename(os.path.normpath(self.opts.spool_dir)),
        }

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        f = self._f()
        s, e = int(start["batch"]), int(end["batch"])
        with f.cond:
            if not f.resolved:
                f.counters["replayed_batches"] += max(0, e - s)
            f.resolve(e)
            f.commit_through(s)  # Spark runs batch e only once everything up to s is committed
        step = self.opts.max_rows_per_partition
        parts: list[InputPartition] = []
        for rows in f.rows_between(s, e):
            for i in range(0, len(rows), step):
                parts.append(NSQPartition(self.opts.topic, self.opts.channel, rows[i : i + step]))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, NSQPartition)
        if partition.rows:
            yield _arrow_batch(partition)

    def commit(self, end: dict) -> None:
        f = self._f()
        with f.cond:
            f.commit_through(int(end["batch"]))
        f.write_stats()

    def stop(self) -> None:
        f, self._fetcher = self._fetcher, None
        if f is None:
            return
        # Spark tells a source of a commit only when it plans the next batch; on a clean stop,
        # the query's own commit log (when spool_dir sits in the checkpoint) says how far it got.
        done = committed_in_checkpoint(self.opts)
        if done is not None:
            with f.cond:
                f.commit_through(done)
        f.close()
