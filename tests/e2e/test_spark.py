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
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemons import ROOT, Daemon
from support.nsq_connection import NSQConnection
from support.spark_query import start_query

from nsqpy import wire
from nsqpy.spark.client import BatchPublisher, NSQError, parse_address
from nsqpy.spark.lookup import lookup_producers, parse_lookup
from nsqpy.testing import wait_for
from nsqpy.testing.wire_client import WireClient

JOBS = ROOT / "spark_jobs"
sys.path.insert(0, str(JOBS))

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


# ------------------------------------------------------------------------------------ helpers


def publish(address: str, topic: str, bodies: list[bytes]) -> int:
    with BatchPublisher(address, topic, batch_size=500) as p:
        p.publish(bodies)
    assert p.published == len(bodies)
    return p.published


def consume(
    address: str, topic: str, channel: str, count: int, timeout: float = 30
) -> list[tuple[bytes, bytes]]:
    """Read and FIN ``count`` messages: [(id, body)]."""
    conn = WireClient.connect(parse_address(address))
    try:
        conn.identify({"feature_negotiation": True})
        conn.sub(topic, channel)
        conn.rdy(1000)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"got {len(out)} of {count} messages")
            _, _, mid, body = conn.read_message(left)
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
    with BatchPublisher(nsqd.tcp_address, "pubs", batch_size=100, window=3) as p:
        p.publish(bodies)
        p.send_encoded(1, wire.encode_mpub(b"pubs", [b"one more"])[len(b"MPUB pubs\n") + 4 :])
    assert p.published == 2346
    got = consume(nsqd.tcp_address, "pubs", "c", 2346)
    assert sorted(b for _, b in got) == sorted([*bodies, b"one more"])


def test_producer_raises_on_error_frame(daemon_factory) -> None:
    d = daemon_factory("--max-msg-size=100")
    with BatchPublisher(d.tcp_address, "small") as p:
        p.publish([b"x" * 100])
    with pytest.raises(NSQError) as e, BatchPublisher(d.tcp_address, "small") as p:
        p.publish([b"y" * 101])
    assert e.value.code == "E_BAD_MESSAGE"
    with pytest.raises(NSQError) as e, BatchPublisher(d.tcp_address, "bad/topic") as p:
        p.publish([b"x"])
    assert e.value.code == "E_BAD_TOPIC"
    conn = NSQConnection(d.tcp_address)
    assert conn.connect()["max_rdy_count"] == 2500
    with pytest.raises(NSQError) as e:
        conn.pub("bad/topic", b"x")
    assert e.value.code == "E_BAD_TOPIC"
    conn.close()
    with BatchPublisher(d.tcp_address, "small") as p, pytest.raises(ValueError):
        p.put(b"")
    with pytest.raises(OSError):
        BatchPublisher("127.0.0.1:1", "small", timeout=2)


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


def test_source_options() -> None:
    from nsqpy.spark.options import parse_duration_ms
    from nsqpy.spark.source import SourceOptions

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

    with pytest.raises(ValueError, match="nsqd_http_addresses"):
        SourceOptions({"nsqd_tcp_addresses": "a:1,b:2", "nsqd_http_addresses": "a:2",
                       "topic": "t", "channel": "c", "spool_dir": "/s"})  # fmt: skip


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
    q = start_query(
        lambda: (
            df.writeStream.format("memory")
            .queryName("big_out")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
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
    # admission control: no batch above max_messages_per_trigger
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes and max(sizes) <= 3000, sizes
    end = progress[-1]["sources"][0]["endOffset"]
    assert (json.loads(end) if isinstance(end, str) else end)["position"] == n


def _stats(spool: Path) -> dict:
    try:
        return json.loads((spool / "stats.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stalled_sink_stops_taking_messages(spark, nsqd: Daemon, tmp_path: Path) -> None:
    """A foreachBatch that stalls: the source spools (and FINs) up to max_spool_bytes past the
    last commit, then sets RDY 0; nsqd keeps the rest (its depth), the driver holds no message in
    memory, and its memory stays put while the sink stalls. Released, every message comes
    through once."""
    n, size = 30_000, 1000
    publish(nsqd.tcp_address, "stall", [b"%06d" % i + b"x" * (size - 6) for i in range(n)])
    release = threading.Event()
    ids: list[str] = []

    def sink(batch, batch_id: int) -> None:
        rows = batch.select("id").collect()
        ids.extend(r.id for r in rows)
        if rows:
            release.wait(120)

    spool = tmp_path / "ckpt" / "nsq-spool"
    df = _source(
        spark, tmp_path, nsqd_tcp_addresses=nsqd.tcp_address, topic="stall", channel="c",
        max_spool_bytes=str(4 << 20), spool_segment_bytes=str(1 << 20), max_in_flight="500",
    )  # fmt: skip
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
    q = start_query(writer.start)
    try:
        wait_for(
            lambda: (
                q.exception() is not None
                or (_stats(spool).get("paused_now") and _stats(spool).get("queued") == 0)
            ),
            120,
            0.2,
            "the source paused",
        )
        assert q.exception() is None, q.exception()
        first = _stats(spool)
        st = channel_stats(nsqd, "stall", "c")
        # nsqd keeps what the spool has no room for; nothing is held un-FIN'd
        assert st["depth"] == n - first["spooled"] > 0 and st["in_flight_count"] == 0
        assert first["spool_disk_bytes"] <= (4 << 20) + (1 << 20) + 500 * (size + 200)
        assert first["max_queued"] <= 500  # max_in_flight: what the driver holds in memory
        time.sleep(3)  # stalled a while longer: nothing moves, memory stays
        later = _stats(spool)
        assert later["spooled"] == first["spooled"]
        assert later["max_rss_kib"] <= first["max_rss_kib"] + 8 * 1024
        print(f"\nstalled sink: nsqd depth {st['depth']}, source stats {later}")
        release.set()
        wait_for(lambda: len(ids) >= n or q.exception() is not None, 120, 0.2, "all rows")
        assert q.exception() is None, q.exception()
    finally:
        release.set()
        q.stop()
    assert len(ids) == len(set(ids)) == n


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
    q = start_query(
        lambda: (
            df.writeStream.format("memory")
            .queryName("found_out")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
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
    q = start_query(
        lambda: (
            src.selectExpr("upper(cast(body as string)) as body")
            .writeStream.format("nsq")
            .option("nsqd_tcp_addresses", d.tcp_address)
            .option("topic", "bridge_out")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
    )
    try:
        out = consume(d.tcp_address, "bridge_out", "c", 2000, timeout=120)
        assert q.exception() is None
    finally:
        q.stop()
    assert sorted(b for _, b in out) == sorted(f"BR{i}".encode() for i in range(2000))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_available_now_reads_500000_queued_then_only_the_new_ones(
    spark, daemon_factory, tmp_path: Path
) -> None:
    """Trigger.AvailableNow on a topic with 500,000 queued messages: the query ends by itself
    with all of them; a second run reads only what was published in between."""
    d = daemon_factory("--mem-queue-size=600000")
    n = 500_000
    with BatchPublisher(d.tcp_address, "backfill", batch_size=1000, window=8) as p:
        for i in range(n):
            p.put(b"b%06d" % i)
    d.post("/channel/create", topic="backfill", channel="c")  # before the new ones arrive
    # the topic hands what it held to its first channel as its pump runs (as nsqd's
    # messagePump does), so "available now" means once the channel holds all of it
    wait_for(lambda: d.depth("backfill", "c") == n, 120, 0.2, "the backlog in the channel")
    out = tmp_path / "out"

    def run() -> None:
        # fetch_wait: the run ends at its target, or after this long with nothing arriving; the
        # default 250 ms can pass between two reads of the channel's disk backlog on a loaded
        # machine, ending the run early (the next run would take the rest)
        df = _source(
            spark, tmp_path, nsqd_tcp_addresses=d.tcp_address, topic="backfill", channel="c",
            nsqd_http_addresses=d.http_address, fetch_wait="10s",
        )  # fmt: skip
        q = start_query(
            lambda: (
                df.select("id", "body")
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(availableNow=True)
                .start()
            )
        )
        try:
            assert q.awaitTermination(300), "the AvailableNow query did not end by itself"
            assert q.exception() is None, q.exception()
        finally:
            q.stop()

    def bodies() -> Counter:
        rows = spark.read.schema("id string, body binary").parquet(str(out)).collect()
        return Counter(bytes(r.body) for r in rows)

    run()
    first = bodies()
    assert len(first) == n and max(first.values()) == 1
    publish(d.tcp_address, "backfill", [b"new-%d" % i for i in range(1000)])
    run()
    second = bodies()
    assert len(second) == n + 1000 and max(second.values()) == 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dedup_job_writes_every_message_once(spark, nsqd: Daemon, tmp_path: Path) -> None:
    """spark_jobs/nsq_dedup.py's query: a topic copied to Parquet, one row per message id."""
    import nsq_dedup

    publish(nsqd.tcp_address, "once", [b"o%05d" % i for i in range(5000)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = nsq_dedup.parse_args(
        ["--nsqd-tcp-address", nsqd.tcp_address, "--topic", "once", "--output", str(out),
         "--checkpoint", str(ckpt), "--trigger", "200 milliseconds", "--watermark", "1 hour"]
    )  # fmt: skip
    q = start_query(lambda: nsq_dedup.build_query(spark, args))
    try:
        wait_for(
            lambda: q.exception() is not None or len(set(_committed_bodies(out))) >= 5000,
            150,
            0.5,
            "all rows",
        )
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    rows = spark.read.parquet(str(out)).select("id", "body").collect()
    assert len(rows) == len({r.id for r in rows}) == 5000


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
    q = start_query(lambda: event_counts.build_query(spark, args))

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
@pytest.mark.timeout(600)
def test_kill_driver_three_times_during_200000_messages(
    spark, nsqd: Daemon, tmp_path: Path
) -> None:
    """SIGKILL of the whole driver (Python, JVM, workers: its process group) three times while
    200,000 messages are published, restarting from the checkpoint each time: none missing; the
    duplicates (rows beyond one per message) are counted and bounded by what was in flight at
    each kill (max_in_flight)."""
    n = 200_000
    bodies = [b"k-%06d" % i for i in range(n)]
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    cmd = [
        sys.executable, str(JOBS / "nsq_archive.py"), "--nsqd-tcp-address", nsqd.tcp_address,
        "--topic", "crash", "--channel", "archive", "--output", str(out), "--checkpoint",
        str(ckpt), "--trigger", "200 milliseconds", "--master", "local[2]",
    ]  # fmt: skip
    log = open(tmp_path / "driver.log", "a")  # noqa: SIM115
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    published = [0]

    def publisher(stage: int) -> None:  # 50,000 messages over 10 s
        with BatchPublisher(nsqd.tcp_address, "crash", batch_size=500) as p:
            for i in range(stage * 50_000, (stage + 1) * 50_000, 2500):
                p.publish(bodies[i : i + 2500])
                published[0] += 2500
                time.sleep(0.5)

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

    kills = []
    pubs = []
    driver = None
    try:
        # four drivers, one stage of the stream each; the first three are killed mid-stage
        for stage in range(4):
            driver, lines = start_driver()
            wait_for(
                lambda d=driver, ln=lines: (
                    any(x.startswith("progress") for x in ln) or d.poll() is not None
                ),
                300,
                0.1,
                "the query running",
            )
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            pubs.append(threading.Thread(target=publisher, args=(stage,), daemon=True))
            pubs[-1].start()
            if stage == 3:
                break
            before = total(lines)
            wait_for(lambda d=driver, ln=lines, b=before: total(ln) > b or d.poll() is not None,
                     240)  # fmt: skip
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            time.sleep(random.uniform(0, 1))
            os.killpg(driver.pid, signal.SIGKILL)  # kill -9: the driver and its JVM and workers
            driver.wait(30)
            stats = _stats(ckpt / "nsq-spool")
            kills.append((published[0], len(_committed_bodies(out)), stats.get("spooled")))
        for t in pubs:
            t.join(120)
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
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
        log.close()

    rows = spark.read.parquet(str(out)).select("id", "body").collect()
    got = Counter(r.body for r in rows)
    missing = [b for b in bodies if b not in got]
    duplicates = sum(c - 1 for c in got.values())
    ids_per_body = Counter(body for _, body in {(r.id, r.body) for r in rows})
    stats = _stats(ckpt / "nsq-spool")
    print(
        f"\nkill -9 x3 during {n} messages: kills at (published, in sink, spooled by that "
        f"driver) {kills}; rows={len(rows)} missing={len(missing)} duplicates={duplicates}; "
        f"last source {stats}"
    )
    assert not missing
    from nsqpy.spark.source import DEFAULT_MAX_IN_FLIGHT

    # what was in flight (max_in_flight, the source's default) at each kill, at most
    assert duplicates <= 3 * DEFAULT_MAX_IN_FLIGHT
    assert max(ids_per_body.values()) == 1  # a redelivered message keeps its id
    # every message FIN'd: nothing queued or in flight in nsqd
    st = channel_stats(nsqd, "crash", "archive")
    assert (st["depth"], st["in_flight_count"]) == (0, 0), st
    assert len(kills) == 3 and all(k[0] < n for k in kills)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_nsqd_mid_stream_loses_nothing_it_acknowledged(spark, tmp_path: Path) -> None:
    """nsqd with --mem-queue-size=0 (every message on disk before its OK) is SIGKILLed while the
    source reads and a producer publishes; restarted on the same data path and ports, the query
    carries on: every message nsqd acknowledged is in the output."""
    tcp, http, https = _free_port(), _free_port(), _free_port()
    flags = [f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
             "--mem-queue-size=0", f"--https-address=127.0.0.1:{https}"]  # fmt: skip
    data = tmp_path / "nsqd-data"
    d = Daemon(flags, data)
    acked: list[bytes] = []
    stop = threading.Event()

    def publisher() -> None:
        i = 0
        while not stop.is_set() and i < 40_000:
            batch = [b"n-%06d" % j for j in range(i, i + 200)]
            try:
                with BatchPublisher(f"127.0.0.1:{tcp}", "nk", batch_size=200) as p:
                    p.publish(batch)
                acked.extend(batch)
            except (OSError, NSQError):
                time.sleep(0.05)  # not acknowledged: may or may not be in nsqd
            i += 200

    publish(d.tcp_address, "nk", [b"first"])
    pub = threading.Thread(target=publisher, daemon=True)
    src = _source(spark, tmp_path, nsqd_tcp_addresses=d.tcp_address, topic="nk", channel="c")
    q = start_query(
        lambda: (
            src.writeStream.format("memory")
            .queryName("nk_out")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
    )

    def count() -> int:
        return spark.sql("select count(*) c from nk_out").collect()[0].c

    try:
        wait_for(lambda: count() >= 1 or q.exception() is not None, 120, 0.2)
        pub.start()
        wait_for(lambda: count() >= 5000 or q.exception() is not None, 120, 0.2)
        d.proc.kill()  # SIGKILL
        d.proc.wait(10)
        d = Daemon(flags, data)  # same data path, same ports
        pub.join(240)
        want = set(acked) | {b"first"}
        wait_for(lambda: q.exception() is not None or count() >= len(want), 180, 0.5, "all acked")
        assert q.exception() is None, q.exception()
        rows = spark.sql("select body from nk_out").collect()
    finally:
        stop.set()
        q.stop()
        d.stop()
    got = Counter(bytes(r.body) for r in rows)
    missing = want - set(got)
    print(
        f"\nnsqd kill -9: acknowledged={len(want)} rows={len(rows)} missing={len(missing)} "
        f"duplicates={sum(c - 1 for c in got.values())}"
    )
    assert not missing
