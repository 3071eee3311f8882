"""The Spark connector (nsqpy.spark): client, lookupd discovery, spool, and the `nsq` format
on a real local SparkSession (local[2]) against real nsqpy-d processes.

Spark tests share one SparkSession (module scope); the kill-and-restart test runs the archive
job (spark_jobs/nsq_archive.py) as its own driver process group and SIGKILLs it mid-stream.
Every wait has a time limit; every server listens on 127.0.0.1.
"""

from __future__ import annotations

import datetime as dt
import glob
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Daemon, wait_for

from nsqpy import wire
from nsqpy.spark.client import NSQConnection, NSQError, Producer, parse_address
from nsqpy.spark.lookup import lookup_producers, parse_lookup

JOBS = ROOT / "spark_jobs"
sys.path.insert(0, str(JOBS))

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


# ------------------------------------------------------------------------------------ helpers


def publish(address: str, topic: str, bodies: list[bytes]) -> int:
    with Producer(address, topic, batch_size=500) as p:
        p.publish(bodies)
    assert p.published == len(bodies)
    return p.published


def consume(
    address: str, topic: str, channel: str, count: int, timeout: float = 30
) -> list[tuple[bytes, bytes]]:
    """Read and FIN ``count`` messages: [(id, body)]."""
    conn = NSQConnection(address)
    conn.connect()
    try:
        conn.sub(topic, channel)
        conn.rdy(1000)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"got {len(out)} of {count} messages")
            ftype, data = conn.read_frame(left)
            assert ftype == wire.FRAME_TYPE_MESSAGE, data
            _, _, mid, body = wire.decode_message(data)
            conn.fin(mid)
            out.append((mid, body))
        return out
    finally:
        conn.close()


def channel_stats(d: Daemon, topic: str, channel: str) -> dict:
    for t in d.stats(topic=topic)["topics"]:
        if t["topic_name"] == topic:
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    c["finish_count"] = sum(cl.get("finish_count", 0) for cl in c["clients"])
                    return c
    return {}


class FakeLookupd:
    """nsqlookupd's /lookup on 127.0.0.1: ``topics`` maps a topic to its producers' TCP
    addresses; ``legacy`` answers in the pre-1.0 envelope."""

    def __init__(self, topics: dict[str, list[str]], legacy: bool = False) -> None:
        self.topics = topics
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                from urllib.parse import parse_qs, urlparse

                u = urlparse(self.path)
                topic = parse_qs(u.query).get("topic", [""])[0]
                fake.requests.append((u.path, self.headers.get("Accept", "")))
                if u.path != "/lookup" or topic not in fake.topics:
                    body = json.dumps({"message": "TOPIC_NOT_FOUND"}).encode()
                    self.send_response(404)
                else:
                    producers = []
                    for a in fake.topics[topic]:
                        host, port = parse_address(a)
                        producers.append(
                            {
                                "remote_address": f"{host}:40000",
                                "hostname": "fake",
                                "broadcast_address": host,
                                "tcp_port": port,
                                "http_port": 1,
                                "version": "1.3.0",
                            }
                        )
                    doc = {"channels": [], "producers": producers}
                    if legacy:
                        doc = {"status_code": 200, "status_txt": "OK", "data": doc}
                    body = json.dumps(doc).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_lookupd() -> Iterator:
    made: list[FakeLookupd] = []

    def make(topics: dict[str, list[str]], legacy: bool = False) -> FakeLookupd:
        f = FakeLookupd(topics, legacy)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


# ------------------------------------------------------------------------------------ client


def test_producer_publishes_and_checks_ok(nsqd: Daemon) -> None:
    bodies = [f"m{i}".encode() for i in range(2345)]
    with Producer(nsqd.tcp_address, "pubs", batch_size=100, window=3) as p:
        p.publish(bodies)
        p.conn.pub("pubs", b"one more")
    assert p.published == 2345
    got = consume(nsqd.tcp_address, "pubs", "c", 2346)
    assert sorted(b for _, b in got) == sorted([*bodies, b"one more"])


def test_producer_raises_on_error_frame(daemon_factory) -> None:
    d = daemon_factory("--max-msg-size=100")
    with Producer(d.tcp_address, "small") as p:
        p.publish([b"x" * 100])
    with pytest.raises(NSQError) as e:
        with Producer(d.tcp_address, "small") as p:
            p.publish([b"y" * 101])
    assert e.value.code == "E_BAD_MESSAGE"
    conn = NSQConnection(d.tcp_address)
    conn.connect()
    with pytest.raises(NSQError) as e:
        conn.pub("bad/topic", b"x")
    assert e.value.code == "E_BAD_TOPIC"
    conn.close()
    with pytest.raises(ValueError):
        Producer(d.tcp_address, "small").put(b"")


def test_connection_identify_touch_fin(nsqd: Daemon) -> None:
    publish(nsqd.tcp_address, "tf", [b"a", b"b"])
    conn = NSQConnection(nsqd.tcp_address, msg_timeout_ms=1500, heartbeat_interval_ms=1000)
    settings = conn.connect()
    assert settings["msg_timeout"] == 1500 and settings["max_rdy_count"] == conn.max_rdy_count
    conn.sub("tf", "c")
    conn.rdy(2)
    msgs = []
    deadline = time.monotonic() + 10
    while len(msgs) < 2 and time.monotonic() < deadline:
        ftype, data = conn.read_frame(5)
        assert ftype == wire.FRAME_TYPE_MESSAGE
        msgs.append(wire.decode_message(data))
    # TOUCH for 3 s (twice the timeout), through heartbeats (answered with NOP): no timeout.
    end = time.monotonic() + 3
    while time.monotonic() < end:
        conn.send_many(b"TOUCH", [m[2] for m in msgs])
        with pytest.raises(TimeoutError):
            conn.read_frame(0.5)
    st = channel_stats(nsqd, "tf", "c")
    assert st["timeout_count"] == 0 and st["in_flight_count"] == 2
    conn.send_many(b"FIN", [m[2] for m in msgs])
    wait_for(lambda: channel_stats(nsqd, "tf", "c")["finish_count"] == 2, 5)
    conn.close()


# ------------------------------------------------------------------------------------ lookupd


def test_lookup_both_answer_shapes_404_and_dead_lookupd(fake_lookupd) -> None:
    new = fake_lookupd({"t": ["127.0.0.1:4150", "10.0.0.9:4150"]})
    old = fake_lookupd({"t": ["127.0.0.1:4150", "[::1]:4150"]}, legacy=True)
    addrs, errors = lookup_producers([new.address, f"http://{old.address}", "127.0.0.1:9"], "t")
    assert addrs == ["127.0.0.1:4150", "10.0.0.9:4150", "[::1]:4150"]
    assert list(errors) == ["127.0.0.1:9"]
    assert new.requests[0] == ("/lookup", "application/vnd.nsq; version=1.0")
    assert lookup_producers([new.address], "unknown") == ([], {})
    body = b'{"channels":["c"],"producers":[{"broadcast_address":"h","tcp_port":1}]}'
    assert parse_lookup(body) == ["h:1"]


# ------------------------------------------------------------------------- options, spool


def test_source_options_and_spool(tmp_path: Path) -> None:
    from nsqpy.spark.options import parse_duration_ms
    from nsqpy.spark.source import SourceOptions, Spool

    assert parse_duration_ms("1m30s", "x") == 90_000
    assert parse_duration_ms("250ms", "x") == 250
    assert parse_duration_ms("1500", "x") == 1500
    with pytest.raises(ValueError, match="msg_timeout"):
        SourceOptions({"nsqd_tcp_addresses": "a:1", "topic": "t", "channel": "c",
                       "spool_dir": "/s", "msg_timeout": "soon"})  # fmt: skip
    with pytest.raises(ValueError, match="spool_dir"):
        SourceOptions({"nsqd_tcp_addresses": "a:1", "topic": "t", "channel": "c"})
    with pytest.raises(ValueError, match="lookupd"):
        SourceOptions({"topic": "t", "channel": "c", "spool_dir": "/s"})
    o = SourceOptions({"NSQD_TCP_ADDRESSES": "a:1, b:2,a:1", "topic": "t", "channel": "c",
                       "spool_dir": "/s", "max_messages_per_trigger": "7"})  # fmt: skip
    assert o.nsqd_tcp_addresses == ["a:1", "b:2"] and o.max_messages_per_trigger == 7

    s = Spool(str(tmp_path / "sp"), "t", "c", lock_timeout=0.5)
    rows = [("0123456789abcdef", b"\x00body", 123456789, 1, "127.0.0.1:1")]
    s.write(3, rows)
    assert s.load() == {3: rows}
    with pytest.raises(RuntimeError, match="another running"):
        Spool(str(tmp_path / "sp"), "t", "c", lock_timeout=0.3)
    s.close()
    with pytest.raises(RuntimeError, match="one spool_dir per source"):
        Spool(str(tmp_path / "sp"), "other", "c").load()
    s2 = Spool(str(tmp_path / "sp2"), "t", "c")
    s2.write(1, rows)
    s2.delete([1])
    assert s2.load() == {}
    s2.close()


# ------------------------------------------------------------------------- driver protocol


def _crash(reader) -> None:
    """What a killed driver leaves: connections closed without FIN or REQ, spool as it is."""
    f = reader._fetcher
    f._stop.set()
    f._thread.join(5)
    for c in list(f.conns.values()):
        c.close()
    f.spool.close()
    reader._fetcher = None


def _rows(reader, start: dict, end: dict) -> list[tuple]:
    return [r for p in reader.partitions(start, end) for r in p.rows]


def test_reader_replays_spooled_batch_and_drops_stale_one(nsqd: Daemon, tmp_path: Path) -> None:
    """The driver-side calls as Spark makes them, without Spark: a batch Spark logged is
    replayed from the spool with the same rows after a crash; a batch spooled but never logged
    is given up and its messages come back as new; nothing is lost or emitted twice."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from nsqpy.spark.source import NSQStreamReader

    bodies = [f"p{i:03d}".encode() for i in range(300)]
    publish(nsqd.tcp_address, "proto", bodies)
    opts = {
        "nsqd_tcp_addresses": nsqd.tcp_address,
        "topic": "proto",
        "channel": "c",
        "spool_dir": str(tmp_path / "spool"),
    }
    r1 = NSQStreamReader(opts)
    s0 = r1.initialOffset()
    e1 = r1.latestOffset(s0, ReadMaxRows(100))
    assert (e1["batch"], e1["messages"]) == (1, 100)
    batch1 = _rows(r1, s0, e1)
    e2 = r1.latestOffset(e1, ReadMaxRows(100))  # batch 1 committed: FIN'd now
    batch2 = _rows(r1, e1, e2)
    assert len(batch2) == 100
    wait_for(lambda: channel_stats(nsqd, "proto", "c")["finish_count"] == 100, 10)
    _crash(r1)  # batch 2 logged by Spark, not committed

    r2 = NSQStreamReader(opts)
    assert _rows(r2, e1, e2) == batch2  # the re-run batch: same rows
    e3 = r2.latestOffset(e2, ReadAllAvailable())  # batch 2 committed now
    batch3 = _rows(r2, e2, e3)
    _crash(r2)  # batch 3 spooled, never logged by Spark

    r3 = NSQStreamReader(opts)
    got = batch1 + batch2
    start = e2  # Spark's last logged and committed offset
    deadline = time.monotonic() + 30
    while len(got) < 300 and time.monotonic() < deadline:
        end = r3.latestOffset(start, ReadAllAvailable())
        got += _rows(r3, start, end)
        start = end
    r3.commit(start)
    assert sorted(r[1] for r in got) == bodies  # every message once
    assert {r[0] for r in batch3} <= {r[0] for r in got}  # the stale batch came back as new
    # all FIN'd (the finish counts of r1's and r2's connections left with them)
    wait_for(
        lambda: (lambda st: (st["depth"], st["in_flight_count"]) == (0, 0))(
            channel_stats(nsqd, "proto", "c")
        ),
        10,
    )
    r3.stop()
    assert not glob.glob(str(tmp_path / "spool" / "*.msgpack"))


# ------------------------------------------------------------------------------------ Spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory) -> Iterator:
    from pyspark.sql import SparkSession

    from nsqpy.spark import register

    warehouse = tmp_path_factory.mktemp("warehouse")
    s = (
        SparkSession.builder.master("local[2]")
        .appName("nsqpy-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    register(s)
    yield s
    s.stop()


def stop_all(spark) -> None:
    for q in spark.streams.active:
        q.stop()


def _source(spark, tmp_path: Path, **options: str):
    opts = {"spool_dir": str(tmp_path / "ckpt" / "nsq-spool"), **options}
    return spark.readStream.format("nsq").options(**opts).load()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stream_20000_messages_every_id_then_fin(spark, nsqd: Daemon, tmp_path: Path) -> None:
    n = 20_000
    bodies = [f"msg-{i:06d}".encode() for i in range(n)]
    t_pub = time.time()
    publish(nsqd.tcp_address, "big", bodies)
    df = _source(
        spark, tmp_path, nsqd_tcp_addresses=nsqd.tcp_address, topic="big", channel="spark",
        max_messages_per_trigger="3000",
    )  # fmt: skip
    q = (
        df.writeStream.format("memory")
        .queryName("big_out")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            got = spark.sql("select count(*) c from big_out").collect()[0].c
            if got >= n or q.exception() is not None:
                break
            time.sleep(0.5)
        assert q.exception() is None, q.exception()
        rows = spark.sql("select * from big_out").collect()
        # FIN follows the commit: all finished, nothing in flight, nothing queued.
        wait_for(
            lambda: channel_stats(nsqd, "big", "spark")["finish_count"] == n,
            60,
            what="every message FIN'd",
        )
        progress = list(q.recentProgress)
    finally:
        q.stop()
    assert len(rows) == n
    assert sorted(r.body for r in rows) == bodies
    ids = [r.id for r in rows]
    assert len(set(ids)) == n and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    assert {(r.topic, r.channel, r.nsqd_address, r.attempts) for r in rows} == {
        ("big", "spark", nsqd.tcp_address, 1)
    }
    ts = [r.timestamp.timestamp() for r in rows]
    assert t_pub - 5 < min(ts) <= max(ts) < time.time() + 5
    st = channel_stats(nsqd, "big", "spark")
    assert (st["depth"], st["in_flight_count"], st["timeout_count"]) == (0, 0, 0)
    assert not glob.glob(str(tmp_path / "ckpt" / "nsq-spool" / "*.msgpack"))
    # admission control: no batch above max_messages_per_trigger
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes and max(sizes) <= 3000, sizes
    end = progress[-1]["sources"][0]["endOffset"]
    assert (json.loads(end) if isinstance(end, str) else end)["messages"] == n


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_fin_only_after_commit_and_touch_keeps_messages(
    spark, nsqd: Daemon, tmp_path: Path
) -> None:
    """While a batch runs (a slow foreachBatch sink, longer than msg_timeout), its messages are
    in flight, not finished and not timed out; every earlier batch is finished."""
    n = 3000
    publish(nsqd.tcp_address, "slow", [f"s{i}".encode() for i in range(n)])
    seen: list[tuple[int, int, int, int, int]] = []  # batch, rows, finished, in flight, timeouts
    ids: list[str] = []

    def slow_sink(batch, batch_id: int) -> None:
        rows = batch.select("id").collect()
        if not rows:
            return
        ids.extend(r.id for r in rows)
        before = channel_stats(nsqd, "slow", "c")
        time.sleep(3.5)  # > msg_timeout (2 s): only TOUCH keeps them
        after = channel_stats(nsqd, "slow", "c")
        seen.append((batch_id, len(rows), before["finish_count"], after["in_flight_count"],
                     after["timeout_count"]))  # fmt: skip

    df = _source(
        spark, tmp_path, nsqd_tcp_addresses=nsqd.tcp_address, topic="slow", channel="c",
        max_messages_per_trigger="1000", msg_timeout="2s",
    )  # fmt: skip
    q = (
        df.writeStream.foreachBatch(slow_sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(ids) >= n or q.exception() is not None, 150, 0.2, "all batches")
        assert q.exception() is None, q.exception()
        wait_for(lambda: channel_stats(nsqd, "slow", "c")["finish_count"] == n, 30)
    finally:
        q.stop()
    assert len(ids) == n == len(set(ids))
    done = 0
    for _, rows, finished, in_flight, timeouts in seen:
        assert finished == done  # earlier batches FIN'd, this one not
        assert in_flight >= rows  # this batch's messages still held
        assert timeouts == 0
        done += rows
    assert channel_stats(nsqd, "slow", "c")["timeout_count"] == 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stream_discovers_nsqds_through_lookupd(
    spark, daemon_factory, fake_lookupd, tmp_path: Path
) -> None:
    d1, d2 = daemon_factory(), daemon_factory()
    publish(d1.tcp_address, "found", [f"a{i}".encode() for i in range(700)])
    publish(d2.tcp_address, "found", [f"b{i}".encode() for i in range(800)])
    lookupd = fake_lookupd({"found": [d1.tcp_address, d2.tcp_address]})
    df = _source(
        spark, tmp_path, lookupd_http_addresses=f"http://{lookupd.address}", topic="found",
        channel="c", lookupd_poll_interval="1s",
    )  # fmt: skip
    q = (
        df.writeStream.format("memory")
        .queryName("found_out")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        wait_for(
            lambda: (
                q.exception() is not None
                or spark.sql("select count(*) c from found_out").collect()[0].c >= 1500
            ),
            120,
            0.5,
            "1500 rows",
        )
        assert q.exception() is None, q.exception()
        rows = spark.sql("select body, nsqd_address from found_out").collect()
    finally:
        q.stop()
    assert Counter(r.nsqd_address for r in rows) == {d1.tcp_address: 700, d2.tcp_address: 800}
    assert len({r.body for r in rows}) == 1500
    assert lookupd.requests


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sink_round_trip_batch_and_stream(spark, daemon_factory, tmp_path: Path) -> None:
    d = daemon_factory("--max-msg-size=2000")
    # batch: string bodies, 3 partitions, one MPUB window each
    texts = [f"row-{i}" for i in range(5000)]
    df = spark.createDataFrame([(t,) for t in texts], "body string").repartition(3)
    df.write.format("nsq").mode("append").option("nsqd_tcp_addresses", d.tcp_address).option(
        "topic", "sunk"
    ).save()
    got = consume(d.tcp_address, "sunk", "c", 5000)
    assert sorted(b.decode() for _, b in got) == sorted(texts)

    # binary bodies routed by a topic column
    rows = [(bytes([i % 256]) * 3, "even" if i % 2 == 0 else "odd") for i in range(100)]
    spark.createDataFrame(rows, "body binary, topic string").write.format("nsq").mode(
        "append"
    ).option("nsqd_tcp_addresses", d.tcp_address).save()
    assert len(consume(d.tcp_address, "even", "c", 50)) == 50
    assert len(consume(d.tcp_address, "odd", "c", 50)) == 50

    # nsqd refuses a message (too big): the task, so the write, fails
    big = spark.createDataFrame([("x" * 2001,)], "body string")
    with pytest.raises(Exception, match="E_BAD_MESSAGE"):
        big.write.format("nsq").mode("append").option("nsqd_tcp_addresses", d.tcp_address).option(
            "topic", "sunk"
        ).save()

    # streaming: topic -> Spark -> another topic
    publish(d.tcp_address, "bridge_in", [f"br{i}".encode() for i in range(2000)])
    src = _source(spark, tmp_path, nsqd_tcp_addresses=d.tcp_address, topic="bridge_in",
                  channel="c")  # fmt: skip
    q = (
        src.selectExpr("upper(cast(body as string)) as body")
        .writeStream.format("nsq")
        .option("nsqd_tcp_addresses", d.tcp_address)
        .option("topic", "bridge_out")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        out = consume(d.tcp_address, "bridge_out", "c", 2000, timeout=120)
        assert q.exception() is None
    finally:
        q.stop()
    assert sorted(b for _, b in out) == sorted(f"BR{i}".encode() for i in range(2000))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_event_counts_pipeline_to_parquet(spark, nsqd: Daemon, tmp_path: Path) -> None:
    import event_counts
    import publish_events

    t0 = 1_700_000_000.0  # a multiple of 10 s: windows start there
    n, events = publish_events.publish(
        nsqd.tcp_address, "events", count=1200, rate=1e6, start_time=t0, event_spacing=0.02,
        lateness=2.0, flush=True,
    )  # fmt: skip
    assert n == 1200
    publish(nsqd.tcp_address, "events", [b"not json"])
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    args = event_counts.parse_args(
        ["--nsqd-tcp-address", nsqd.tcp_address, "--topic", "events", "--output", out,
         "--checkpoint", ckpt, "--trigger", "500 milliseconds"]
    )  # fmt: skip
    q = event_counts.build_query(spark, args)

    expected: Counter = Counter()
    for e in events:
        ts = dt.datetime.fromisoformat(e["ts"]).timestamp()
        expected[(int(ts // 10) * 10, e["kind"])] += 1

    def result() -> Counter:
        if not (tmp_path / "out" / "_spark_metadata").exists():
            return Counter()
        got: Counter = Counter()
        schema = "window_start timestamp, kind string, events long"
        for r in spark.read.schema(schema).parquet(str(tmp_path / "out")).collect():
            got[(int(r.window_start.timestamp()), r.kind)] += r.events
        return got

    try:
        wait_for(
            lambda: q.exception() is not None or sum(result().values()) >= 1200,
            150,
            1,
            "all windows written",
        )
        assert q.exception() is None, q.exception()
        got = result()
    finally:
        q.stop()
    assert got == expected
    assert len({w for w, _ in expected}) >= 3


# ------------------------------------------------------------------------------------ kill -9


def _committed_bodies(out: Path) -> list[bytes]:
    """Bodies in the files Spark's file sink committed (its _spark_metadata log)."""
    import pyarrow.parquet as pq

    paths: set[str] = set()
    for f in glob.glob(str(out / "_spark_metadata" / "*")):
        if f.endswith(".tmp") or os.path.basename(f).startswith("."):
            continue
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            e = json.loads(line)
            if e.get("action") == "add":
                paths.add(e["path"].removeprefix("file://").removeprefix("file:"))
    bodies: list[bytes] = []
    for p in paths:
        bodies += pq.read_table(p, columns=["body"]).column("body").to_pylist()
    return bodies


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_kill_driver_mid_stream_and_restart_from_checkpoint(
    spark, nsqd: Daemon, tmp_path: Path
) -> None:
    first, second = 15_000, 5_000
    n = first + second
    bodies = [f"k-{i:06d}".encode() for i in range(n)]
    publish(nsqd.tcp_address, "crash", bodies[:first])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    cmd = [
        sys.executable, str(JOBS / "nsq_archive.py"), "--nsqd-tcp-address", nsqd.tcp_address,
        "--topic", "crash", "--channel", "archive", "--output", str(out), "--checkpoint",
        str(ckpt), "--max-per-trigger", "1000", "--trigger", "200 milliseconds",
        "--master", "local[2]",
    ]  # fmt: skip
    log = open(tmp_path / "driver.log", "a")  # noqa: SIM115
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    def start_driver() -> tuple[subprocess.Popen, list[str]]:
        p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=tmp_path,
            start_new_session=True,  # its own process group: the driver, its JVM, its workers
        )  # fmt: skip
        lines: list[str] = []
        assert p.stdout is not None
        threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
        return p, lines

    def total(lines: list[str]) -> int:
        return max([int(ln.split("total=")[1]) for ln in lines if ln.startswith("progress")] + [0])

    driver, lines = start_driver()
    try:
        wait_for(lambda: total(lines) >= 5000 or driver.poll() is not None, 240, 0.1, "5000")
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        time.sleep(0.3)  # into the next batch
        spooled = sorted(os.listdir(ckpt / "nsq-spool"))
        os.killpg(driver.pid, signal.SIGKILL)  # kill -9: the driver and its JVM and workers
        driver.wait(30)
        before = len(_committed_bodies(out))
        publish(nsqd.tcp_address, "crash", bodies[first:])  # published while the driver is down

        driver, lines = start_driver()
        wait_for(
            lambda: driver.poll() is not None or len(set(_committed_bodies(out))) >= n,
            300,
            1,
            "every published message in the sink",
        )
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        driver.send_signal(signal.SIGTERM)  # the Python driver only: a clean stop
        assert driver.wait(90) == 0
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
        log.close()

    rows = spark.read.parquet(str(out)).select("id", "body").collect()
    got = Counter(r.body for r in rows)
    missing = [b for b in bodies if b not in got]
    duplicates = sum(c - 1 for c in got.values())
    ids_per_body = Counter(body for _, body in {(r.id, r.body) for r in rows})
    stats = json.loads((ckpt / "nsq-spool" / "stats.json").read_text())
    print(
        f"\nkill -9 mid-stream: published={n} committed_before_kill={before} "
        f"spool_at_kill={spooled} rows={len(rows)} missing={len(missing)} "
        f"duplicates={duplicates} restarted_source={stats}"
    )
    assert not missing
    assert set(got) == set(bodies)
    # the clean stop FIN'd what the commit log holds: nothing queued or in flight, no batch
    # left in the spool
    st = channel_stats(nsqd, "crash", "archive")
    assert (st["depth"], st["in_flight_count"]) == (0, 0), st
    assert not glob.glob(str(ckpt / "nsq-spool" / "*.msgpack"))
    assert max(ids_per_body.values()) == 1  # a redelivered message keeps its id
    assert 0 < before < n
