r"""The driver side of the nsq source: nsqd connections -> write-ahead spool -> FIN.

Strategy: every nsqd connection (`connections_per_nsqd` per nsqd) is an nsqpy.client Conn
(IDENTIFY, TLS, snappy/deflate, AUTH, heartbeats; configured by options.conn_config), all on one
event loop in a daemon thread. A Conn hands each read's message frames over in bulk
(`on_records`), and they become a `_Chunk` of columns (ids, bodies, publish times, attempts)
built with numpy and pyarrow, not per-row objects. The writer thread takes every chunk waiting,
writes them to the spool as one Arrow record batch; the sync thread fsyncs (a group commit: one
fsync for everything that arrived during the previous one), then the loop FINs each chunk's
messages on the connection that delivered them (one write of `FIN <id>\n` lines per chunk). So
a message is FIN'd only once it is durable, and RDY (max_in_flight) bounds what is held in
memory: nsqd sends no more than that un-FIN'd.

Backpressure: when the spool holds more than `max_spool_bytes` past what Spark committed, the
fetchers set RDY 0 (nsqd keeps the messages; its depth grows) until a commit frees room.

Redeliveries: a message spooled but not FIN'd (its connection died first, or the previous driver
was killed between fsync and FIN) comes back from nsqd with the same ID. Such IDs are
"suspects": the last rows of the spool when it is opened, and every ID whose FIN could not be
sent. A delivered message whose (nsqd, id) is a suspect is FIN'd at once and not spooled again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa

from ..client import Config, Conn, Message, NSQError
from ..client.blocking import _LoopThread
from ..message import BODY_START, HEADER_LENGTH, ID_LENGTH, ID_START
from ..wire import encode_command
from .lookup import lookup_producers
from .options import conn_config
from .spool import SCHEMA, Spool
from .trace import trace

log = logging.getLogger("nsqpy.spark")

# message.py's record header, its fields as numpy dtypes: the publish time in nanoseconds,
# attempts, then the ID (HEADER_LENGTH bytes in all)
_TS = np.dtype(">i8")
_ATTEMPTS = np.dtype(">u2")
_ATTEMPTS_AT = _TS.itemsize
_ID = np.dtype(f"S{ID_LENGTH}")
assert _ATTEMPTS_AT + _ATTEMPTS.itemsize == ID_START
assert ID_START + ID_LENGTH == HEADER_LENGTH
#: a ``FIN <id>\n`` command (nsq.io TCP protocol spec, FIN) as a numpy record
_FIN_LINE = np.dtype([("fin", "S4"), ("id", f"S{ID_LENGTH}"), ("nl", "S1")])
_SUSPECTS_MAX = 200_000
#: an Arrow binary view (the C data layout): length, first 4 bytes, buffer index, offset
_VIEW = np.dtype([("len", "<i4"), ("prefix", "S4"), ("buf", "<i4"), ("off", "<i4")])
_VIEW_INLINE = 12  # values up to this long live inside the view itself
_PREFIX = np.dtype("S4")
_TS_TYPE = SCHEMA.field("timestamp").type


class _Chunk:
    """The message frames of one read of one connection, as nsqpy.client.Conn handed them over
    (the read's bytes, each record's start and end); the writer turns whole groups of chunks
    into columns at once (`_record_batch`), and fills in ``fin`` (the chunk's ``FIN <id>\n``
    lines) and ``ids`` (its IDs, for suspects when the FIN cannot be sent)."""

    __slots__ = ("address", "conn", "data", "ends", "fin", "ids", "n", "starts")

    def __init__(self, conn: Conn, data: bytes, starts: list[int], ends: list[int]) -> None:
        self.conn = conn
        self.address = conn.addr
        self.n = len(starts)
        self.data = data
        self.starts = starts
        self.ends = ends
        self.fin = b""
        self.ids: np.ndarray | None = None


def _record_batch(chunks: list[_Chunk], topic: str, channel: str) -> pa.RecordBatch:
    """One Arrow record batch of every message of ``chunks``, built with a fixed number of numpy
    and pyarrow calls per group (none per message): the reads' bytes are joined, the record
    headers gathered at the records' starts (`_at`), and the bodies copied out back to back by
    one Arrow cast of binary views into the joined bytes. Sets each chunk's ``fin`` and
    ``ids``."""
    n = sum(c.n for c in chunks)
    if len(chunks) == 1:
        c = chunks[0]
        blob = c.data
        starts = np.array(c.starts, np.int64)
        ends = np.array(c.ends, np.int64)
    else:
        blob = b"".join([c.data for c in chunks])
        parts_s, parts_e = [], []
        base = 0
        for c in chunks:
            s = np.array(c.starts, np.int64)
            e = np.array(c.ends, np.int64)
            if base:
                s += base
                e += base
            parts_s.append(s)
            parts_e.append(e)
            base += len(c.data)
        starts = np.concatenate(parts_s)
        ends = np.concatenate(parts_e)
    # the record header's fields (message.py: timestamp, attempts, ID), each gathered at once
    ts = _at(blob, _TS)[starts].astype(np.int64) // 1000  # ns -> us
    attempts = _at(blob, _ATTEMPTS)[starts + _ATTEMPTS_AT].astype(np.int32)
    ids = _at(blob, _ID)[starts + ID_START]
    body_starts = starts + BODY_START
    lens = ends - body_starts
    if n and int(lens.min()) > _VIEW_INLINE:
        # Arrow binary views point into the joined bytes where the bodies are (length, first 4
        # bytes, buffer 0, offset); one cast copies them out back to back in C++
        views = np.empty(n, _VIEW)
        views["len"] = lens
        views["prefix"] = _at(blob, _PREFIX)[body_starts]
        views["buf"] = 0
        views["off"] = body_starts
        body_col = pa.Array.from_buffers(
            pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(blob)]
        ).cast(pa.binary())
    else:  # short bodies are stored inside a view: slice them out instead
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lens, out=offsets[1:])
        body = b"".join([blob[s:e] for s, e in zip(body_starts.tolist(), ends.tolist())])
        body_col = pa.BinaryArray.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(body)]
        )
    id_col = pa.StringArray.from_buffers(
        n, pa.py_buffer(np.arange(0, ID_LENGTH * n + 1, ID_LENGTH, dtype=np.int32)),
        pa.py_buffer(ids),
    )  # fmt: skip
    fin = np.empty(n, _FIN_LINE)
    fin["fin"] = b"FIN "
    fin["id"] = ids
    fin["nl"] = b"\n"
    fin_bytes = fin.tobytes()
    at = 0
    for c in chunks:
        c.fin = fin_bytes[_FIN_LINE.itemsize * at : _FIN_LINE.itemsize * (at + c.n)]
        c.ids = ids[at : at + c.n]
        c.data = b""  # the bytes are in the batch now
        at += c.n
    if len(chunks) == 1 or all(c.address == chunks[0].address for c in chunks):
        addrs = _repeat(chunks[0].address, n)
    else:
        addrs = pa.concat_arrays([_repeat(c.address, c.n) for c in chunks])
    return pa.RecordBatch.from_arrays(
        [
            id_col,
            body_col,
            # from buffers: pa.array(int64 ndarray, timestamp type) took ~2 us a row
            pa.Array.from_buffers(_TS_TYPE, n, [None, pa.py_buffer(ts)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(attempts)]),
            _repeat(topic, n),
            _repeat(channel, n),
            addrs,
        ],
        schema=SCHEMA,
    )


def _at(blob: bytes, dtype: np.dtype) -> np.ndarray:
    """``blob`` read as one ``dtype`` item starting at each of its bytes (a stride of one byte,
    no copy): indexing it with byte positions gathers the items there in one 1-D fancy index.
    (A 2-D index of every byte of every item, built per group, cost more: 45 ns a record for
    the 26-byte record header, against 22 for its three fields gathered this way and
    converted.) ``blob`` holds at least one item."""
    return np.ndarray((len(blob) - dtype.itemsize + 1,), dtype, buffer=blob, strides=(1,))


def _repeat(text: str, n: int) -> pa.Array:
    """``text`` ``n`` times as a string column, from buffers: pa.repeat and pa.scalar of a
    Python str import pandas on their first call (~0.3 CPU-s, in the middle of the first group)."""
    b = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(b))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(b * n))


class Fetcher:
    """Connections to every nsqd of the topic, the spool writer, and what Spark asks of them.

    ``opts`` is a source.SourceOptions. Threads: the connections' event loop, the writer, the
    syncer, and one for lookupd.
    """

    def __init__(self, opts: Any, spool: Spool) -> None:
        self.opts = opts
        self.spool = spool
        self.cond = threading.Condition()
        self.queue: list[_Chunk] = []
        self.queue_rows = 0  # rows in queue (received, not yet written)
        self._syncing = False  # the sync thread is in an fsync
        self._group_rows = max(1, opts.max_in_flight // 2)  # see _write_loop
        self.queued = 0
        self.committed = spool.committed  # rows below are committed by Spark (deletable)
        self.paused = False  # RDY 0: spool full, or the AvailableNow target reached
        self.hold = False  # AvailableNow: take nothing more
        self.last_arrival = time.monotonic()
        self.failed = ""  # why the spool cannot be trusted any more (the query must stop)
        self.suspects: OrderedDict[tuple[bytes, bytes], None] = OrderedDict()
        tail = opts.max_in_flight * 2 + 1000
        for key in spool.recent_rows(tail):
            self.suspects[key] = None
        self.counters: dict[str, int] = {
            "received": 0,
            "spooled": 0,
            "groups": 0,
            "redelivered_dropped": 0,
            "fin_failed": 0,
            "lost_connections": 0,
            "nsqd_errors": 0,
            "paused": 0,
            "max_queued": 0,
            "truncated_bytes": spool.truncated_bytes,
        }
        self.nodes: dict[str, _Node] = {}
        self.config: Config = conn_config(opts.conn_options, f"spark-{opts.channel}")
        if opts.msg_timeout_ms:
            self.config.msg_timeout = opts.msg_timeout_ms / 1000
        #: the event loop (a daemon thread) that runs every nsqd connection
        self.lt = _LoopThread("nsq-fetch")
        self.loop = self.lt.loop
        #: seconds the writer spent per step (build the batch, write, fsync, FIN)
        self.timings = dict.fromkeys(("build", "write", "fsync", "fin"), 0.0)
        self._stop = threading.Event()
        self._stats_at = 0.0
        self.sync_cond = threading.Condition()
        self.to_sync: list[tuple[int, list[_Chunk]]] = []
        self._syncer = threading.Thread(target=self._sync_loop, name="nsq-spool-sync")
        self._syncer.daemon = True
        self._syncer.start()
        self._writer = threading.Thread(target=self._write_loop, name="nsq-spool-writer")
        self._writer.daemon = True
        self._writer.start()
        for address in opts.nsqd_tcp_addresses:
            self._add_node(address)
        self._lookup: threading.Thread | None = None
        if opts.lookupd_http_addresses:
            self._lookup = threading.Thread(target=self._lookup_loop, name="nsq-lookupd")
            self._lookup.daemon = True
            self._lookup.start()

    # ------------------------------------------------------------------ nodes

    def _add_node(self, address: str) -> None:
        with self.cond:
            if address in self.nodes or self._stop.is_set():
                return
            node = _Node(self, address)
            self.nodes[address] = node
        self.loop.call_soon_threadsafe(node.start)

    def _lookup_loop(self) -> None:
        opts = self.opts
        while not self._stop.is_set():
            addrs, errors = lookup_producers(opts.lookupd_http_addresses, opts.topic)
            for lookupd, err in errors.items():
                log.warning("nsq source: lookupd %s: %s", lookupd, err)
            for a in addrs:
                self._add_node(a)
            self._stop.wait(opts.lookupd_poll_interval_ms / 1000)

    def rdy_share(self) -> int:
        """RDY per connection: max_in_flight over every connection (0 when paused)."""
        if self.paused or self.hold:
            return 0
        conns = max(1, len(self.nodes) * self.opts.connections_per_nsqd)
        return max(1, self.opts.max_in_flight // conns)

    def refresh_rdy(self) -> None:
        """Send every connection its RDY now (after hold or paused changed), not at the next
        50 ms tick."""

        def send() -> None:
            for node in list(self.nodes.values()):
                node.set_rdy()

        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(send)

    # ------------------------------------------------------------------ fetcher side

    def on_chunk(self, chunk: _Chunk) -> None:
        with self.cond:
            self.queue.append(chunk)
            self.queue_rows += chunk.n
            self.queued += chunk.n
            self.counters["received"] += chunk.n
            if self.queued > self.counters["max_queued"]:
                self.counters["max_queued"] = self.queued
            self.last_arrival = time.monotonic()
            if not self._syncing or self.queue_rows >= self._group_rows:
                self.cond.notify_all()  # the writer takes it now (else: when the fsync ends)

    def drop_suspects(self, conn: Conn, ids: list[bytes]) -> list[bytes]:
        """The IDs among ``ids`` that are not suspects; suspects are FIN'd now (call on the
        loop)."""
        keep, fin = [], []
        addr = conn.addr.encode()
        with self.cond:
            for i in ids:
                if self.suspects.pop((addr, i), 0) is None:
                    fin.append(i)
                else:
                    keep.append(i)
            self.counters["redelivered_dropped"] += len(fin)
        if fin:
            with contextlib.suppress(OSError):
                conn.send(b"".join([b"FIN " + i + b"\n" for i in fin]))
        return keep

    def _suspect(self, chunk: _Chunk) -> None:
        addr = chunk.address.encode()
        ids = (
            chunk.ids.tolist()
            if chunk.ids is not None
            else [chunk.data[s + ID_START : s + ID_START + ID_LENGTH] for s in chunk.starts]
        )
        for i in ids:
            self.suspects[(addr, i)] = None
        while len(self.suspects) > _SUSPECTS_MAX:
            self.suspects.popitem(last=False)

    # ------------------------------------------------------------------ writer

    def _write_loop(self) -> None:
        """Build and append groups; the sync thread makes them durable and FINs them. While an
        fsync runs, what arrives waits for it (up to half of max_in_flight), so a group is
        everything that came in during the previous fsync: one build, one write, one fsync for
        thousands of messages (each group costs a fixed number of numpy and Arrow calls, and
        an executor joins small groups back up)."""
        opts = self.opts
        group_rows = self._group_rows
        while True:
            self.write_stats()
            with self.cond:
                while (
                    not self.queue or (self._syncing and self.queue_rows < group_rows)
                ) and not self._stop.is_set():
                    self.cond.wait(0.2)
                    if time.monotonic() - self._stats_at >= 1:
                        break
                if not self.queue:
                    if self._stop.is_set():
                        break  # stopped, and everything taken was written
                    continue
                chunks, self.queue, self.queue_rows = self.queue, [], 0
            t0 = time.perf_counter()
            try:
                batch = _record_batch(chunks, opts.topic, opts.channel)
                t1 = time.perf_counter()
                end = self.spool.append(batch)
            except Exception:  # noqa: BLE001 - cannot spool: nothing gets FIN'd; nsqd keeps them
                log.exception("nsq source: cannot write the spool %s", opts.spool_dir)
                with self.cond:
                    self.queued -= sum(c.n for c in chunks)
                    self.counters["spool_errors"] = self.counters.get("spool_errors", 0) + 1
                for conn in {id(c.conn): c.conn for c in chunks}.values():
                    self.loop.call_soon_threadsafe(conn.close)  # nsqd requeues what it held
                self._stop.wait(1)
                continue
            with self.sync_cond:
                self.timings["build"] += t1 - t0
                self.timings["write"] += time.perf_counter() - t1
                self.to_sync.append((end, chunks))
                self.sync_cond.notify()
        with self.sync_cond:
            self.to_sync.append((-1, []))
            self.sync_cond.notify()
        self._syncer.join(30)

    def _sync_loop(self) -> None:
        while True:
            with self.sync_cond:
                while not self.to_sync:
                    self.sync_cond.wait()
                todo, self.to_sync = self.to_sync, []
            with self.cond:
                self._syncing = True
            last = todo[-1][0] == -1
            todo = [t for t in todo if t[0] >= 0]
            if todo:
                t0 = time.perf_counter()
                try:
                    self.spool.sync(max(e for e, _ in todo))
                except OSError as e:
                    # what was written may not be durable: FIN none of it, let nsqd requeue it
                    # (close the connections), and fail the query (see NSQStreamReader)
                    log.exception("nsq source: cannot fsync the spool %s", self.opts.spool_dir)
                    self.failed = f"cannot fsync the spool {self.opts.spool_dir}: {e}"
                    for _, chunks in todo:
                        for c in chunks:
                            self.loop.call_soon_threadsafe(c.conn.close)
                    with self.cond:
                        self.hold = True
                        self._syncing = False
                        self.cond.notify_all()
                    if last:
                        return
                    continue
                t1 = time.perf_counter()
                rows = sum(c.n for _, chunks in todo for c in chunks)
                with self.cond:
                    self.queued -= rows  # durable: what is left is sending the FINs
                with self.cond:
                    self.counters["spooled"] += rows
                    self.counters["groups"] += len(todo)
                    self.timings["fsync"] += t1 - t0
                    self._check_room()  # before the FINs: a full spool sends RDY 0 first
                    self._syncing = False
                    self.cond.notify_all()
                done = [c for _, chunks in todo for c in chunks]
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to FIN
                    self.loop.call_soon_threadsafe(self._fin, done)
                self.timings["fin"] += time.perf_counter() - t1
            else:
                with self.cond:
                    self._syncing = False
                    self.cond.notify_all()
            if last:
                return

    def _fin(self, chunks: list[_Chunk]) -> None:
        """On the loop: FIN every message of ``chunks`` (now durable) on the connection that
        delivered it, one write per chunk; those whose connection is gone become suspects."""
        for node in list(self.nodes.values()):
            node.set_rdy()  # RDY 0 before the FINs free nsqd's in-flight slots, when paused
        failed = []
        for c in chunks:
            conn = c.conn
            if conn.is_open:
                conn.send(c.fin)
            else:
                failed.append(c)
        if failed:
            with self.cond:
                for c in failed:
                    self._suspect(c)
                    self.counters["fin_failed"] += c.n

    def _check_room(self) -> None:
        """Pause (RDY 0) above max_spool_bytes past the committed rows; resume below 3/4."""
        used = self.spool.disk_bytes_from(self.committed)
        cap = self.opts.max_spool_bytes
        if not self.paused and used > cap:
            self.paused = True
            self.counters["paused"] += 1
            log.info("nsq source: spool holds %d bytes (> max_spool_bytes): RDY 0", used)
        elif self.paused and used <= cap * 3 // 4:
            self.paused = False

    # ------------------------------------------------------------------ Spark's calls

    def durable_end(self) -> int:
        return self.spool.durable_end

    def wait_for_rows(self, start: int, seconds: float) -> int:
        """The durable end, waiting up to ``seconds`` for it to pass ``start``."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while self.spool.durable_end <= start:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return self.spool.durable_end

    def wait_for_batch(self, end: int, seconds: float, gap: float) -> int:
        """The durable end once it reaches ``end``, or after ``seconds``, or sooner when
        messages stop coming (nothing received for ``gap`` seconds and nothing waiting to be
        made durable, or RDY 0: paused, held, failed)."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while self.spool.durable_end < end:
                now = time.monotonic()
                if now >= deadline or self.paused or self.hold or self.failed:
                    break
                if self.queued == 0 and now - self.last_arrival >= gap:
                    break
                self.cond.wait(min(gap, deadline - now))
            return self.spool.durable_end

    def wait_until_idle(self, target: int, idle_s: float, limit_s: float) -> int:
        """AvailableNow: wait until the durable end reaches ``target``, or nothing has arrived
        for ``idle_s`` and nothing is waiting to be written; returns the durable end."""
        deadline = time.monotonic() + limit_s
        with self.cond:
            while self.spool.durable_end < target:
                now = time.monotonic()
                if now >= deadline:
                    break
                if not self.queue and self.queued == 0 and now - self.last_arrival >= idle_s:
                    break
                self.cond.wait(min(0.05, deadline - now))
            return self.spool.durable_end

    def consumed(self, start: int) -> None:
        """Spark plans a batch from ``start``: it has committed everything below (it plans
        batch N+1 only once batch N is in its commit log, and tells the source of that commit
        only after planning N+1). That frees room in the spool (resumes fetching); the files
        go at commit()."""
        with self.cond:
            if start > self.committed:
                self.committed = start
                self._check_room()

    def commit(self, end: int) -> None:
        self.consumed(end)
        self.spool.delete_below(end)
        with contextlib.suppress(OSError):
            self.spool.set_committed(end)

    def stats(self) -> dict[str, Any]:
        with self.cond:
            out: dict[str, Any] = dict(self.counters)
            out["queued"] = self.queued
            out["writer_seconds"] = {k: round(v, 3) for k, v in self.timings.items()}
            out["suspects"] = len(self.suspects)
            out["paused_now"] = self.paused
            out["connections"] = sum(len(n.conns) for n in self.nodes.values())
        out["durable_end"] = self.spool.durable_end
        out["spool_start"] = self.spool.start
        out["committed"] = self.committed
        out["spool_disk_bytes"] = self.spool.disk_bytes_from(self.spool.start)
        out["max_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["pid"] = os.getpid()
        return out

    def write_stats(self, force: bool = False) -> None:
        """``<spool_dir>/stats.json``: the counters, at most once a second (for people and
        tests: what was received, spooled, dropped as redelivered, the memory high-water)."""
        now = time.monotonic()
        if not force and now - self._stats_at < 1:
            return
        self._stats_at = now
        trace("spool", spooled=self.counters["spooled"], received=self.counters["received"])
        path = os.path.join(self.opts.spool_dir, "stats.json")
        try:
            with open(path + ".tmp", "w") as fh:
                json.dump(self.stats(), fh)
            os.replace(path + ".tmp", path)
        except OSError:
            pass

    def close(self) -> None:
        """Stop taking messages, write and FIN what was received, close everything."""
        with self.cond:
            self.hold = True
            self._stop.set()
            nodes = list(self.nodes.values())
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.lt.run(_gather(*(n.stop() for n in nodes)), 10)
        with self.cond:
            self.cond.notify_all()
        self._writer.join(30)  # the FINs of what it wrote are queued on the loop by now
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.lt.run(_gather(*(n.close() for n in nodes)), 10)
        self.lt.close()
        if self._lookup is not None:
            self._lookup.join(1)
        self.write_stats(force=True)


async def _gather(*coros: Any) -> None:
    await asyncio.gather(*coros, return_exceptions=True)


class _Node:
    """One nsqd: its connections (on the Fetcher's loop), their RDY, and their reconnects;
    each read's message frames become one chunk for the writer. Every method runs on the
    loop."""

    def __init__(self, fetcher: Fetcher, address: str) -> None:
        self.f = fetcher
        self.address = address
        self.conns: list[Conn] = []
        self._rdy: dict[Conn, int] = {}
        self._halt = False
        self._retry_at = 0.0
        self._backoff = 0.5
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """RDY 0 on every connection and connect no more (what arrives is still taken)."""
        self._halt = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        for conn in list(self.conns):
            with contextlib.suppress(OSError):
                conn.set_rdy(0)

    async def close(self) -> None:
        """Close every connection (pending FINs are written first)."""
        conns, self.conns = list(self.conns), []
        for c in conns:
            c.close()
        for c in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(c.closed), 2)

    async def _run(self) -> None:
        f = self.f
        while not self._halt:
            if len(self.conns) < f.opts.connections_per_nsqd:
                if time.monotonic() >= self._retry_at:
                    await self._connect()
            self.set_rdy()
            await asyncio.sleep(0.05)

    async def _connect(self) -> None:
        f = self.f
        opts = f.opts
        while len(self.conns) < opts.connections_per_nsqd and not self._halt:
            conn = Conn(self.address, f.config, self, on_records=self._on_records)
            try:
                await conn.connect()
                await conn.command(
                    encode_command(b"SUB", opts.topic.encode(), opts.channel.encode())
                )
            except (OSError, NSQError, ValueError) as e:
                conn.close()
                self._backoff = min(self._backoff * 2, 15.0)
                self._retry_at = time.monotonic() + self._backoff
                log.warning("nsq source: cannot subscribe on %s: %s", self.address, e)
                return
            if self._halt:
                conn.close()
                return
            self._backoff = 0.5
            self.conns.append(conn)
            self._rdy[conn] = 0
            log.info(
                "nsq source: subscribed to %s/%s on %s", opts.topic, opts.channel, self.address
            )

    def set_rdy(self) -> None:
        """Send each connection its RDY when it changed (0 while the Fetcher is paused or
        holds); run every 50 ms, before each group's FINs, and after a read while paused."""
        share = self.f.rdy_share()
        for conn in list(self.conns):
            want = min(share, conn.max_rdy)
            if self._rdy.get(conn) != want:
                try:
                    conn.set_rdy(want)
                    self._rdy[conn] = want
                except OSError as e:
                    self._drop(conn, str(e))

    def _drop(self, conn: Conn, why: str) -> None:
        conn.close()
        if conn not in self.conns:
            return
        self.conns.remove(conn)
        self._rdy.pop(conn, None)
        self._retry_at = time.monotonic() + 0.5
        with self.f.cond:
            self.f.counters["lost_connections"] += 1
        log.warning("nsq source: lost %s: %s", self.address, why)

    # ------------------------------------------------------------------ Conn's calls

    def _on_records(self, conn: Conn, data: bytes, starts: list[int], ends: list[int]) -> None:
        f = self.f
        if f.suspects:
            ids = [data[s + ID_START : s + ID_START + ID_LENGTH] for s in starts]
            keep = set(f.drop_suspects(conn, ids))
            if len(keep) < len(ids):
                kept = [(s, e) for s, e, i in zip(starts, ends, ids, strict=True) if i in keep]
                if not kept:
                    return
                starts = [s for s, _ in kept]
                ends = [e for _, e in kept]
        f.on_chunk(_Chunk(conn, data, starts, ends))
        if f.paused or f.hold:
            self.set_rdy()

    def on_close(self, conn: Conn) -> None:
        if not self._halt or conn in self.conns:
            self._drop(conn, str(conn.error or "closed by nsqd"))

    def on_error(self, conn: Conn, err: NSQError) -> None:
        with self.f.cond:
            self.f.counters["nsqd_errors"] += 1
        log.debug("nsq source: %s: %s", self.address, err)

    def on_message(self, conn: Conn, msg: Message) -> None:  # pragma: no cover - on_records
        pass

    def on_message_finished(self, conn: Conn, msg: Message) -> None:  # pragma: no cover
        pass

    def on_message_requeued(self, conn: Conn, msg: Message, backoff: bool) -> None:
        pass  # pragma: no cover
