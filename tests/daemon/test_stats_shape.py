"""/stats and /info field by field against nsqd 1.3's source, and e2e processing latency.

The expected shapes are nsqd v1.3.0's structs, in their field order (Go's encoding/json writes
struct fields in declaration order): the doStats answer in nsqd/http.go (version, health,
start_time, topics, memory `omitempty`, producers), TopicStats and ChannelStats in
nsqd/stats.go, ClientV2Stats in nsqd/client_v2.go (authed, auth_identity, auth_identity_url and
pub_counts are `omitempty`), memStats in nsqd/stats.go, quantile.Result in
internal/quantile/quantile.go ({"count", "percentiles": [{"quantile", "value"}]} with Go's map
keys sorted), and doInfo's anonymous struct. Go's nil slices are JSON null: `topics` when the
topic filter names no topic, `clients` without include_clients, `producers` with no producer
(or without include_clients), `percentiles` when no percentile is configured.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from support.daemons import Daemon

from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(60)

STATS_KEYS = ["version", "health", "start_time", "topics", "memory", "producers"]
TOPIC_KEYS = [
    "topic_name",
    "channels",
    "depth",
    "backend_depth",
    "message_count",
    "message_bytes",
    "paused",
    "e2e_processing_latency",
]
CHANNEL_KEYS = [
    "channel_name",
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "client_count",
    "clients",
    "paused",
    "e2e_processing_latency",
]
CLIENT_HEAD = [
    "client_id",
    "hostname",
    "version",
    "remote_address",
    "state",
    "ready_count",
    "in_flight_count",
    "message_count",
    "finish_count",
    "requeue_count",
    "connect_ts",
    "sample_rate",
    "deflate",
    "snappy",
    "user_agent",
]
CLIENT_OMITEMPTY = ["authed", "auth_identity", "auth_identity_url", "pub_counts"]
CLIENT_TAIL = [
    "tls",
    "tls_cipher_suite",
    "tls_version",
    "tls_negotiated_protocol",
    "tls_negotiated_protocol_is_mutual",
]
MEMORY_KEYS = [
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
    "gc_total_runs",
]
INFO_KEYS = [
    "version",
    "broadcast_address",
    "hostname",
    "http_port",
    "tcp_port",
    "start_time",
    "max_heartbeat_interval",
    "max_output_buffer_size",
    "max_output_buffer_timeout",
    "max_deflate_level",
]
EMPTY_E2E = {"count": 0, "percentiles": None}


def ordered(body: bytes) -> object:
    """JSON with every object as a list of (key, value) pairs, so key order can be checked."""
    return json.loads(body, object_pairs_hook=lambda pairs: pairs)


def keys(pairs: object) -> list[str]:
    assert isinstance(pairs, list)
    return [k for k, _ in pairs]


def get(pairs: object, key: str) -> object:
    assert isinstance(pairs, list)
    return dict(pairs)[key]


def raw_stats(d: Daemon, query: str = "") -> object:
    code, body, _ = d.http("GET", "/stats?format=json" + query)
    assert code == 200, body
    return ordered(body)


def check_client(cl: object, is_producer: bool) -> None:
    ks = keys(cl)
    head, tail = ks[: len(CLIENT_HEAD)], ks[-len(CLIENT_TAIL) :]
    assert head == CLIENT_HEAD
    assert tail == CLIENT_TAIL
    middle = ks[len(CLIENT_HEAD) : -len(CLIENT_TAIL)]
    # omitempty fields, when present, in nsqd's order
    assert middle == [k for k in CLIENT_OMITEMPTY if k in middle]
    assert ("pub_counts" in middle) is is_producer
    d = dict(cl)  # type: ignore[arg-type]
    for k in ("client_id", "hostname", "version", "remote_address", "user_agent"):
        assert isinstance(d[k], str), k
    for k in ("state", "ready_count", "in_flight_count", "message_count", "finish_count"):
        assert type(d[k]) is int, k
    for k in ("requeue_count", "connect_ts", "sample_rate"):
        assert type(d[k]) is int, k
    for k in ("deflate", "snappy", "tls", "tls_negotiated_protocol_is_mutual"):
        assert type(d[k]) is bool, k
    if is_producer:
        for pc in d["pub_counts"]:
            assert keys(pc) == ["topic", "count"]


def test_stats_json_field_order_types_and_nulls(daemon_factory):
    d = daemon_factory()
    c = d.raw()
    p = d.raw()
    try:
        c.identify(client_id="cons", hostname="h1", user_agent="ua/1")
        c.sub("shape", "ch", 5)
        p.identify(client_id="prod", hostname="h2", user_agent="ua/2")
        p.pub("shape", b"hello")
        _, _, msg_id, _ = c.read_message()
        c.cmd(b"FIN", msg_id)
        wait_for(
            lambda: d.stats()["topics"][0]["channels"][0]["clients"][0]["finish_count"] == 1,
            timeout=5,
            what="FIN counted",
        )
        s = raw_stats(d)
        assert keys(s) == STATS_KEYS
        assert get(s, "version") == "1.3.0"
        assert get(s, "health") == "OK"
        assert type(get(s, "start_time")) is int
        assert keys(get(s, "memory")) == MEMORY_KEYS
        assert all(type(v) is int for _, v in get(s, "memory"))  # type: ignore[union-attr]

        [t] = get(s, "topics")  # type: ignore[misc]
        assert keys(t) == TOPIC_KEYS
        td = dict(t)
        assert td["topic_name"] == "shape"
        assert (td["depth"], td["backend_depth"], td["message_count"]) == (0, 0, 1)
        assert (td["message_bytes"], td["paused"]) == (5, False)
        assert keys(td["e2e_processing_latency"]) == ["count", "percentiles"]
        assert dict(td["e2e_processing_latency"]) == EMPTY_E2E

        [ch] = td["channels"]
        assert keys(ch) == CHANNEL_KEYS
        cd = dict(ch)
        assert cd["channel_name"] == "ch"
        counts = [cd[k] for k in CHANNEL_KEYS[1:9]]
        assert counts == [0, 0, 0, 0, 1, 0, 0, 1]
        assert all(type(v) is int for v in counts)
        assert cd["paused"] is False
        assert dict(cd["e2e_processing_latency"]) == EMPTY_E2E
        [cl] = cd["clients"]
        check_client(cl, is_producer=False)
        assert dict(cl)["client_id"] == "cons"

        [prod] = get(s, "producers")  # type: ignore[misc]
        check_client(prod, is_producer=True)
        assert [dict(x) for x in dict(prod)["pub_counts"]] == [{"topic": "shape", "count": 1}]

        # include_clients=false: clients and producers are Go nil slices (null)
        s = raw_stats(d, "&include_clients=false")
        assert get(s, "producers") is None
        [t] = get(s, "topics")  # type: ignore[misc]
        [ch] = dict(t)["channels"]
        assert dict(ch)["clients"] is None and dict(ch)["client_count"] == 1

        # include_mem=false: memory is omitempty
        assert keys(raw_stats(d, "&include_mem=false")) == [k for k in STATS_KEYS if k != "memory"]
        # a topic filter naming no topic: nsqd returns early, topics and producers null
        s = raw_stats(d, "&topic=nope")
        assert get(s, "topics") is None and get(s, "producers") is None
        # a channel filter naming no channel: the topic is skipped, topics is an empty list
        assert get(raw_stats(d, "&topic=shape&channel=nope"), "topics") == []
    finally:
        c.close()
        p.close()


def test_stats_with_no_topics_has_empty_list_and_null_producers(nsqd):
    s = raw_stats(nsqd)
    assert get(s, "topics") == []
    assert get(s, "producers") is None
    code, body, _ = nsqd.http("GET", "/stats")
    assert code == 200 and b"\nTopics: None\n" in body and b"\nProducers: None\n" in body


def test_topic_without_channel_has_empty_channel_list(nsqd):
    assert nsqd.http("POST", "/topic/create?topic=lonely")[0] == 200
    [t] = get(raw_stats(nsqd), "topics")  # type: ignore[misc]
    assert dict(t)["channels"] == []


def test_info_field_order_and_values(nsqd):
    code, body, _ = nsqd.http("GET", "/info")
    assert code == 200
    info = ordered(body)
    assert keys(info) == INFO_KEYS
    d = dict(info)  # type: ignore[arg-type]
    assert d["version"] == "1.3.0"
    assert d["hostname"] == socket.gethostname()
    assert (d["http_port"], d["tcp_port"]) == (nsqd.http_port, nsqd.tcp_port)
    assert d["max_heartbeat_interval"] == 60 * 10**9
    assert d["max_output_buffer_size"] == 64 * 1024
    assert d["max_output_buffer_timeout"] == 30 * 10**9
    assert d["max_deflate_level"] == 6


# ----------------------------------------------------------------------------- e2e latency


def consume_and_fin(d: Daemon, topic: str, channel: str, n: int, hold: float = 0.0) -> None:
    c = d.raw()
    p = d.raw()
    try:
        c.identify()
        c.sub(topic, channel, n)
        wait_for(
            lambda: (d.stats(topic=topic)["topics"] or [{}])[0].get("channels"),
            timeout=5,
            what="channel",
        )
        for i in range(n):
            p.pub(topic, b"m%d" % i)
        ids = [c.read_message()[2] for _ in range(n)]
        if hold:
            time.sleep(hold)
        for mid in ids:
            c.cmd(b"FIN", mid)

        def finished() -> bool:
            ch = d.stats(topic=topic)["topics"][0]["channels"]
            return any(x["channel_name"] == channel and x["in_flight_count"] == 0 for x in ch)

        wait_for(finished, timeout=5, what="FINs")
    finally:
        c.close()
        p.close()


def test_e2e_percentiles_after_fins(daemon_factory):
    d = daemon_factory(
        "--e2e-processing-latency-percentile=0.5,1.0",
        "--e2e-processing-latency-percentile",
        "0.99",
        "--e2e-processing-latency-window-time=1m",
    )
    before = time.time_ns()
    consume_and_fin(d, "lat", "a", 4, hold=0.2)
    consume_and_fin(d, "lat", "b", 2)
    elapsed = time.time_ns() - before
    code, body, _ = d.http("GET", "/stats?format=json&topic=lat")
    assert code == 200
    [t] = get(ordered(body), "topics")  # type: ignore[misc]
    by_name = {dict(c)["channel_name"]: dict(c) for c in dict(t)["channels"]}
    a = by_name["a"]["e2e_processing_latency"]
    assert keys(a) == ["count", "percentiles"]
    assert dict(a)["count"] == 4
    pcts = dict(a)["percentiles"]
    # highest first, as nsqd's FloatArray sorts them; Go writes 1.0 as 1; map keys sorted
    assert [keys(p) for p in pcts] == [["quantile", "value"]] * 3
    assert [dict(p)["quantile"] for p in pcts] == [1, 0.99, 0.5]
    assert b'"quantile":1,' in body
    values = [dict(p)["value"] for p in pcts]
    assert all(type(v) is int for v in values)
    # held 200 ms before FIN: every latency is at least that, and at most the test's runtime
    assert all(0.2e9 <= v <= elapsed for v in values), values
    assert values[0] >= values[1] >= values[2]
    # the topic merges all its channels
    te = dict(dict(t)["e2e_processing_latency"])
    assert te["count"] == 6
    assert [dict(p)["quantile"] for p in te["percentiles"]] == [1, 0.99, 0.5]
    assert dict(te["percentiles"][0])["value"] == values[0]  # the max over both channels
    # text /stats prints them as nsqd's Result.String: "e2e%: 212.3ms, 212.3ms, 201.0ms"
    code, text, _ = d.http("GET", "/stats?topic=lat")
    lines = [ln for ln in text.decode().splitlines() if "[a " in ln or "[lat " in ln]
    assert len(lines) == 2
    for ln in lines:
        e2e = ln.split("e2e%: ", 1)[1]
        assert len(e2e.split(", ")) == 3 and all(x.endswith("ms") for x in e2e.split(", "))


def test_e2e_configured_channel_without_fins_and_topic_without_channels(daemon_factory):
    d = daemon_factory("--e2e-processing-latency-percentile=0.95")
    assert d.http("POST", "/topic/create?topic=empty")[0] == 200
    assert d.http("POST", "/topic/create?topic=idle")[0] == 200
    assert d.http("POST", "/channel/create?topic=idle&channel=c")[0] == 200
    s = {t["topic_name"]: t for t in d.stats()["topics"]}
    assert s["empty"]["e2e_processing_latency"] == EMPTY_E2E  # no channel: nil quantile
    zero = {"count": 0, "percentiles": [{"quantile": 0.95, "value": 0}]}
    assert s["idle"]["e2e_processing_latency"] == zero
    assert s["idle"]["channels"][0]["e2e_processing_latency"] == zero


def test_e2e_bad_percentile_fails_at_start(tmp_path):
    import subprocess
    import sys

    from support.daemons import ROOT

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsqpy",
            "--e2e-processing-latency-percentile=1.5",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert r.returncode == 1
    assert "invalid E2E processing latency percentile: 1.5" in r.stderr
