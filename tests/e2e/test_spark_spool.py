"""The nsq source's write-ahead spool and driver protocol without a JVM: the Arrow IPC segments
(append, torn tail, slices, deletion), and the reader's calls as Spark makes them against a real
nsqpy-d (FIN after the durable write, offsets = spool positions, replay after a crash, admission
control, backpressure, AvailableNow's target). Every wait has a time limit.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from support.daemons import Daemon

from nsqpy.spark.client import BatchPublisher
from nsqpy.spark.spool import SCHEMA, Spool, read_slice
from nsqpy.testing import wait_for


def _batch(first: int, n: int, addr: str = "127.0.0.1:1") -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"{i:016x}" for i in range(first, first + n)], pa.string()),
            pa.array([b"body-%d" % i for i in range(first, first + n)], pa.binary()),
            pa.array([i * 1000 for i in range(first, first + n)], SCHEMA.field(2).type),
            pa.array([1] * n, pa.int32()),
            pa.repeat("t", n),
            pa.repeat("c", n),
            pa.repeat(addr, n),
        ],
        schema=SCHEMA,
    )


def _read(spool_dir: str, sp: Spool, start: int, end: int, max_rows: int) -> list[bytes]:
    out: list[bytes] = []
    for sl in sp.slices(start, end, max_rows):
        assert sl.rows <= max_rows
        for rb in read_slice(spool_dir, sl):
            assert rb.schema.equals(SCHEMA)
            out += rb.column("body").to_pylist()
    return out


def test_sync_thread_while_the_writer_rolls_segments(tmp_path: Path) -> None:
    """The source fsyncs from its own thread while the writer appends (and rolls to a new
    segment when one is full): never an fsync of a closed descriptor, and every group below a
    sync's end is on disk (the full segment is synced before it is closed)."""
    d = str(tmp_path / "sp")
    sp = Spool(d, segment_bytes=2000)
    errors: list[BaseException] = []
    ends: list[int] = [0]
    stop = threading.Event()

    def syncer() -> None:
        while not stop.is_set() or ends[-1] > sp.durable_end:
            try:
                sp.sync(ends[-1])
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    t = threading.Thread(target=syncer)
    t.start()
    pos = 0
    for _ in range(400):
        pos = sp.append(_batch(pos, 3))
        ends.append(pos)
    stop.set()
    t.join(60)
    assert not t.is_alive() and not errors, errors
    assert sp.durable_end == pos == 1200 and len(sp.segments) > 20
    assert _read(d, sp, 0, pos, 500) == [b"body-%d" % i for i in range(pos)]
    sp.close()


def test_spool_segments_slices_torn_tail_and_delete(tmp_path: Path) -> None:
    d = str(tmp_path / "sp")
    sp = Spool(d, segment_bytes=4000)
    pos = 0
    for n in (10, 25, 7, 40, 3, 60):
        end = sp.append(_batch(pos, n))
        sp.sync(end)
        pos = end
    assert sp.durable_end == pos == 145
    assert len(sp.segments) > 1  # rolled over at segment_bytes
    want = [b"body-%d" % i for i in range(145)]
    for start, end, step in ((0, 145, 1000), (3, 140, 11), (12, 13, 5), (40, 100, 7)):
        assert _read(d, sp, start, end, step) == want[start:end]
    # through a URI too
    assert _read("file://" + d, sp, 5, 50, 9) == want[5:50]
    with pytest.raises(LookupError):
        sp.slices(0, 146, 10)
    assert (b"127.0.0.1:1", b"%016x" % 144) in sp.recent_rows(5)
    sp.close()

    # a torn tail (killed mid-write) is cut off; the positions carry on
    last = os.path.join(d, sorted(n for n in os.listdir(d) if n.endswith(".arrows"))[-1])
    with open(last, "ab") as f:
        f.write(_batch(145, 30).serialize().to_pybytes()[:-50])
    sp = Spool(d, segment_bytes=4000)
    assert sp.durable_end == 145 and sp.truncated_bytes > 0
    sp.sync(sp.append(_batch(145, 5)))
    assert _read(d, sp, 140, 150, 100) == [b"body-%d" % i for i in range(140, 150)]
    # whole segments below a committed end go; the newest stays (it keeps the position)
    first_segments = len(sp.segments)
    assert sp.delete_below(100) >= 1 and len(sp.segments) < first_segments
    assert 0 < sp.start <= 100
    with pytest.raises(LookupError):
        sp.slices(0, 10, 10)
    sp.delete_below(150)
    assert len(sp.segments) == 1 and sp.segments[0].end == 150
    with pytest.raises(RuntimeError, match="another running"):
        Spool(d, lock_timeout=0.3)
    sp.close()
    sp = Spool(d)
    assert sp.durable_end == 150
    sp.close()


# ------------------------------------------------------------------------- driver protocol


def publish(address: str, topic: str, bodies: list[bytes]) -> None:
    with BatchPublisher(address, topic, batch_size=500) as p:
        p.publish(bodies)


def channel(d: Daemon, topic: str, ch: str) -> dict:
    for t in d.stats(topic=topic)["topics"]:
        for c in t["channels"]:
            if c["channel_name"] == ch:
                c["finish_count"] = sum(cl.get("finish_count", 0) for cl in c["clients"])
                return c
    return {"finish_count": 0, "depth": 0, "in_flight_count": 0}


def _crash(reader) -> None:
    """What a killed driver leaves: connections closed without FIN or REQ, spool as it is."""
    f = reader._fetcher

    async def abort() -> None:
        for n in f.nodes.values():
            n._halt = True
            for c in n.conns:
                if c._transport is not None:
                    c._transport.abort()  # what is buffered (FINs) is dropped

    f.lt.run(abort(), 5)
    f._stop.set()
    f._writer.join(5)
    f.lt.close()
    reader._spool.close()
    reader._fetcher = None


def _rows(reader, start: dict, end: dict) -> list[tuple]:
    out = []
    for p in reader.partitions(start, end):
        for rb in reader.read(p):
            out += list(zip(rb.column("id").to_pylist(), rb.column("body").to_pylist()))
    return out


def test_reader_fins_after_spool_and_replays_after_crash(nsqd: Daemon, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

    from nsqpy.spark.source import NSQStreamReader

    bodies = [f"p{i:04d}".encode() for i in range(3000)]
    publish(nsqd.tcp_address, "proto", bodies)
    opts = {
        "nsqd_tcp_addresses": nsqd.tcp_address,
        "topic": "proto",
        "channel": "c",
        "spool_dir": str(tmp_path / "spool"),
    }
    r1 = NSQStreamReader(opts)
    s0 = r1.initialOffset()
    assert s0 == {"position": 0}
    # FIN'd as soon as spooled: before any batch is planned
    wait_for(lambda: channel(nsqd, "proto", "c")["finish_count"] == 3000, 20, what="all FIN'd")
    e1 = r1.latestOffset(s0, ReadMaxRows(1000))
    assert e1 == {"position": 1000}
    b1 = _rows(r1, s0, e1)
    e2 = r1.latestOffset(e1, ReadMaxBytes(20_000))  # groups' bytes: at least one group
    assert 1000 < e2["position"] <= 3000
    b2 = _rows(r1, e1, e2)
    _crash(r1)  # batch 2 planned, not committed

    r2 = NSQStreamReader(opts)
    assert _rows(r2, e1, e2) == b2  # the re-run batch: same rows
    e3 = r2.latestOffset(e2, ReadAllAvailable())
    b3 = _rows(r2, e2, e3)
    r2.commit(e3)
    got = b1 + b2 + b3
    assert sorted(b for _, b in got) == bodies and len({i for i, _ in got}) == 3000
    st = channel(nsqd, "proto", "c")
    assert (st["depth"], st["in_flight_count"]) == (0, 0)
    # nothing new: latestOffset waits fetch_wait and answers the same offset
    t = time.monotonic()
    assert r2.latestOffset(e3, ReadAllAvailable()) == e3
    assert time.monotonic() - t >= 0.2
    r2.stop()


def test_backpressure_pauses_at_max_spool_bytes(nsqd: Daemon, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from nsqpy.spark.source import NSQStreamReader

    publish(nsqd.tcp_address, "full", [b"x" * 1000 for _ in range(5000)])
    r = NSQStreamReader(
        {
            "nsqd_tcp_addresses": nsqd.tcp_address,
            "topic": "full",
            "channel": "c",
            "spool_dir": str(tmp_path / "spool"),
            "max_spool_bytes": str(1 << 20),
            "spool_segment_bytes": str(256 << 10),
            "max_in_flight": "200",
        }
    )
    s = r.initialOffset()
    f = r._fetcher
    wait_for(lambda: f.paused, 20, what="paused")
    wait_for(lambda: f.queued == 0, 10)
    held = f.durable_end()
    assert held * 1000 < (1 << 20) + 2 * (256 << 10) + 200 * 1100
    st = channel(nsqd, "full", "c")
    assert st["depth"] + st["in_flight_count"] == 5000 - held
    assert st["in_flight_count"] == 0  # RDY 0: nothing taken, nothing held un-FIN'd
    # commits free room: it resumes, and every message comes through
    got = 0
    deadline = time.monotonic() + 60
    while got < 5000 and time.monotonic() < deadline:
        e = r.latestOffset(s, ReadAllAvailable())
        got += e["position"] - s["position"]
        r.commit(e)
        s = e
    assert got == 5000 and f.counters["paused"] >= 1
    r.stop()


def test_available_now_target_from_stats(nsqd: Daemon, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from nsqpy.spark.source import NSQStreamReader

    publish(nsqd.tcp_address, "avail", [b"a%d" % i for i in range(4000)])
    opts = {
        "nsqd_tcp_addresses": nsqd.tcp_address,
        "nsqd_http_addresses": nsqd.http_address,
        "topic": "avail",
        "channel": "c",
        "spool_dir": str(tmp_path / "spool"),
    }

    def run() -> int:
        r = NSQStreamReader(opts)
        s = r.initialOffset()
        r.prepareForTriggerAvailableNow()
        first = s["position"]
        publish(nsqd.tcp_address, "avail", [b"later"] * 100)  # after the start: not this run
        while True:
            e = r.latestOffset(s, ReadMaxRows(1500))
            if e == s:
                break
            assert e["position"] - s["position"] <= 1500
            r.commit(e)
            s = e
        r.stop()
        return s["position"] - first

    assert run() == 4000
    assert run() == 100  # the second run: what was published in between


def test_sink_mpub_bodies_match_the_wire_encoder() -> None:
    """The nsq sink's MPUB bodies, built from Arrow buffers, are byte for byte what
    nsqpy.wire encodes, for one-size and mixed-size bodies, sliced arrays, string columns and
    the batch_size / batch_bytes cuts; an empty body is refused."""
    from nsqpy import wire
    from nsqpy.spark.sink import mpub_bodies

    def expect(bodies: list[bytes], size: int, limit: int) -> list[tuple[int, bytes]]:
        out, i = [], 0
        while i < len(bodies):
            j = i + 1
            while j < len(bodies) and j - i < size:
                if sum(len(b) + 4 for b in bodies[i : j + 1]) + 4 > limit:
                    break
                j += 1
            body = wire.encode_mpub(b"t", bodies[i:j])[len(b"MPUB t\n") + 4 :]
            out.append((j - i, body))
            i = j
        return out

    mixed = [b"a", b"bcd", b"x" * 10, b"yy"] * 30
    same = [b"%03d" % i for i in range(100)]
    for arr, py in (
        (pa.array(mixed, pa.binary()).slice(3, 100), mixed[3:103]),
        (pa.array(same, pa.binary()), same),
        (pa.array([b.decode() for b in mixed], pa.string()), mixed),
        (pa.array(same, pa.large_binary()).slice(7), same[7:]),
    ):
        assert list(mpub_bodies(arr, 500, 1 << 20)) == expect(py, 500, 1 << 20)
        assert list(mpub_bodies(arr, 7, 1 << 20)) == expect(py, 7, 1 << 20)
        got = list(mpub_bodies(arr, 500, 64))
        assert sum(c for c, _ in got) == len(py) and all(len(b) <= 64 for _, b in got)
    with pytest.raises(ValueError, match="empty"):
        list(mpub_bodies(pa.array([b"a", b""]), 500, 1 << 20))


def test_executor_read_path_imports_only_the_reader(tmp_path: Path) -> None:
    """What a Spark task unpickles to read the source (the data source, the stream reader and a
    partition, pickled by pyspark's cloudpickle as plan_data_source_read does) loads, in a fresh
    interpreter, only the read side: no nsqd connections (nsqpy.spark.fetch, nsqpy.client), no
    daemon modules (nsqpy.options), no sink, no aiohttp or click; and it reads the rows."""
    import subprocess
    import sys

    from pyspark import cloudpickle

    from nsqpy.spark.datasource import NSQDataSource
    from nsqpy.spark.reader import NSQPartition, SpoolReader
    from nsqpy.spark.source import NSQStreamReader

    d = str(tmp_path / "sp")
    sp = Spool(d)
    sp.sync(sp.append(_batch(0, 7)))
    sp.sync(sp.append(_batch(7, 5)))
    opts = {"nsqd_tcp_addresses": "127.0.0.1:1", "topic": "t", "channel": "c", "spool_dir": d}
    reader = NSQStreamReader(opts)
    parts = [NSQPartition(d, sl) for sl in sp.slices(2, 12, 6)]
    sp.close()
    assert isinstance(cloudpickle.loads(cloudpickle.dumps(reader)), SpoolReader)
    blob = tmp_path / "task.pickle"
    blob.write_bytes(cloudpickle.dumps((NSQDataSource(opts), reader, parts)))
    code = (
        "import pickle, sys\n"
        f"ds, reader, parts = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        "rows = [b for p in parts for rb in reader.read(p)\n"
        "        for b in rb.column('body').to_pylist()]\n"
        "print(len(rows), rows[0].decode(), rows[-1].decode())\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('nsqpy', 'aiohttp', "
        "'click')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out[0] == "10 body-2 body-11"
    loaded = set(out[1].split())
    assert "nsqpy.spark.reader" in loaded
    heavy = {"nsqpy.spark.fetch", "nsqpy.spark.source", "nsqpy.spark.sink", "nsqpy.spark.client",
             "nsqpy.spark.options", "nsqpy.client", "nsqpy.options", "aiohttp",
             "click"}  # fmt: skip
    assert not loaded & heavy, loaded & heavy
