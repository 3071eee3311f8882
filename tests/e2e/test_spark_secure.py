"""The Spark connector over TLS (a verified client certificate, --tls-required), compression and
AUTH: the `nsq` source reads every message from nsqpy-d and from Go nsqd 1.3 run that way, and
the `nsq` sink publishes to them the same way.

Each broker runs with TLS required on TCP (certificates from tests/daemon/test_tls.py's Certs,
made by trustme), a client certificate required and verified, and an auth server
(tests/daemon/test_auth.py's AuthServer, secret "pubsub": publish and subscribe on `orders`).
The test publishes N messages over TLS+AUTH, streams them through the source into a memory
table until every body is there, checks on nsqd's /stats that the source's connection used TLS,
the compression asked for, and AUTH, and that every message was FIN'd; then the sink writes N
more over TLS+AUTH and the channel's depth shows them. One SparkSession for the module; Go nsqd
comes from tests/support/gobin.py (skipped, saying why, where it is missing). Every wait is
bounded."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import gobin
from support.daemons import Daemon
from support.spark_query import start_query

from nsqpy.testing import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "daemon"))

from test_auth import STANDARD, AuthServer  # noqa: E402
from test_tls import Certs  # noqa: E402

from nsqpy.spark.client import BatchPublisher  # noqa: E402
from nsqpy.spark.options import conn_config  # noqa: E402
from nsqpy.spark.source import DEFAULT_MAX_IN_FLIGHT, NSQD_MAX_RDY_COUNT  # noqa: E402

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

N = 5000


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("spark-certs"))


@pytest.fixture(scope="module")
def authd(tmp_path_factory) -> Iterator[AuthServer]:
    s = AuthServer(tmp_path_factory.mktemp("spark-authd"))
    s.set(STANDARD)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def spark(tmp_path_factory) -> Iterator:
    from pyspark.sql import SparkSession

    from nsqpy.spark import register

    s = (
        SparkSession.builder.master("local[2]")
        .appName("nsqpy-tests-secure")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    register(s)
    yield s
    s.stop()


def secure_flags(certs: Certs, authd: AuthServer) -> list[str]:
    """The same flags for nsqpy-d and Go nsqd: TLS required on TCP, client certificates
    required and verified, AUTH through the auth server."""
    return [
        *certs.flags(),
        f"--tls-root-ca-file={certs.ca_file}",
        "--tls-client-auth-policy=require-verify",
        "--tls-required=tcp-https",
        f"--auth-http-address={authd.address}",
    ]


def conn_options(certs: Certs, compression: str) -> dict[str, str]:
    return {
        "tls": "true",
        "tls_ca_file": certs.ca_file,
        "tls_cert": certs.client_cert,
        "tls_key": certs.client_key,
        "compression": compression,
        "auth_secret": "pubsub",
    }


def clients(d, topic: str, channel: str) -> list[dict]:
    code, body, _ = d.http("GET", "/stats?format=json&include_clients=true")
    assert code == 200, body
    for t in json.loads(body)["topics"]:
        if t["topic_name"] == topic:
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return c["clients"]
    return []


def channel(d, topic: str, name: str) -> dict:
    code, body, _ = d.http("GET", f"/stats?format=json&topic={topic}")
    assert code == 200, body
    for t in json.loads(body)["topics"]:
        for c in t["channels"]:
            if t["topic_name"] == topic and c["channel_name"] == name:
                return c
    return {}


@pytest.fixture(params=["nsqpy-d", "go-nsqd"])
def broker(request, tmp_path: Path, certs: Certs, authd: AuthServer) -> Iterator[tuple]:
    flags = secure_flags(certs, authd)
    if request.param == "nsqpy-d":
        d = Daemon(flags, tmp_path / "data")
        yield request.param, d, "snappy"
        assert d.stop() == 0, d.log_text()[-3000:]
    else:
        gobin.require("nsqd")  # skips, saying why, without Go's nsqd 1.3
        g = gobin.start_go_nsqd(tmp_path / "go", *flags)
        yield request.param, g, "deflate"
        g.stop()


@pytest.mark.timeout(180)
def test_spark_source_and_sink_over_tls_with_auth(spark, broker, certs, tmp_path) -> None:
    name, d, compression = broker
    opts = conn_options(certs, compression)
    bodies = [b"secure-%05d" % i for i in range(N)]
    config = conn_config(opts, "test-publisher")
    with BatchPublisher(d.tcp_address, "orders", batch_size=400, config=config) as p:
        p.publish(bodies)
    assert p.published == N

    ckpt = tmp_path / "ckpt"
    df = (
        spark.readStream.format("nsq")
        .options(**opts)
        .option("nsqd_tcp_addresses", d.tcp_address)
        .option("topic", "orders")
        .option("channel", "spark")
        .option("spool_dir", str(ckpt / "nsq-spool"))
        .load()
    )
    table = f"secure_{name.replace('-', '_')}"
    q = start_query(
        lambda: (
            df.writeStream.format("memory")
            .queryName(table)
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
    )
    try:
        # the source's connections: ceil(max_in_flight / nsqd's max RDY) of them by default
        n_conns = -(-DEFAULT_MAX_IN_FLIGHT // NSQD_MAX_RDY_COUNT)
        wait_for(
            lambda: len(clients(d, "orders", "spark")) == n_conns, 30, what="the source's conns"
        )
        conns = clients(d, "orders", "spark")
        deadline = time.monotonic() + 90
        got = 0
        while time.monotonic() < deadline and q.exception() is None:
            got = spark.sql(f"select count(*) c from {table}").collect()[0].c
            if got >= N:
                break
            time.sleep(0.3)
        assert q.exception() is None, q.exception()
        rows = spark.sql(f"select body, nsqd_address from {table}").collect()
        wait_for(
            lambda: (
                channel(d, "orders", "spark").get("in_flight_count") == 0
                and channel(d, "orders", "spark").get("depth") == 0
            ),
            30,
            what="every message FIN'd",
        )
    finally:
        q.stop()
    assert sorted(r.body for r in rows) == bodies  # each once
    assert {r.nsqd_address for r in rows} == {d.tcp_address}
    for client in conns:
        assert client["tls"] is True and client["authed"] is True, client
        assert client[compression] is True, client
        assert client["auth_identity"] == "alice", client
    assert channel(d, "orders", "spark")["message_count"] == N
    print(f"\n{name}: spark source read {len(rows)} of {N} over TLS+{compression}+AUTH")

    # the sink, over TLS + AUTH too (the other compression)
    other = "deflate" if compression == "snappy" else "snappy"
    out = spark.range(0, N, 1, numPartitions=2).selectExpr(
        "cast(concat('sunk-', cast(id as string)) as binary) as body"
    )
    out.write.format("nsq").mode("append").options(**conn_options(certs, other)).option(
        "nsqd_tcp_addresses", d.tcp_address
    ).option("topic", "orders").save()
    wait_for(lambda: channel(d, "orders", "spark").get("depth") == N, 15, what="sunk depth")
    print(f"{name}: spark sink wrote {N} over TLS+{other}+AUTH")


def test_spark_conn_options_checked(certs) -> None:
    cfg = conn_config(
        {**conn_options(certs, "deflate"), "deflate_level": "3", "tls_verify": "false"}, "x"
    )
    assert cfg.tls_v1 and cfg.deflate and not cfg.snappy and cfg.deflate_level == 3
    assert cfg.tls_insecure_skip_verify and cfg.auth_secret == "pubsub"
    assert cfg.tls_root_ca_file == certs.ca_file and cfg.tls_key == certs.client_key
    bad = [
        ({"tls_ca_file": certs.ca_file}, "tls_ca_file: set tls=true"),
        ({"tls": "maybe"}, "option tls:"),
        ({"tls": "true", "tls_key": certs.client_key}, "tls_key: set tls_cert"),
        ({"tls": "true", "tls_cert": "/nonexistent.pem"}, "tls_cert: no file"),
        ({"compression": "lz4"}, "option compression"),
        ({"compression": "deflate", "deflate_level": "10"}, "deflate_level"),
        ({"deflate_level": "3"}, "set compression=deflate"),
    ]
    for options, message in bad:
        with pytest.raises(ValueError, match=message):
            conn_config(options, "x")
