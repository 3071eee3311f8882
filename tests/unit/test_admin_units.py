"""nsqpy-admin in process: the cluster-info layer's merging and aggregation of lookupd and nsqd
answers (nsqadmin's clusterinfo/data.go, as nsqadmin 1.3 shapes them), nsqadmin's summaries, the
stats history ring and sparklines, and the options' validation. Inputs are literal JSON-shaped
dicts: no process, no socket (tests/daemon/test_admin_api.py checks the same against a real
cluster)."""

from __future__ import annotations

import pytest

from nsqpy.admin import summaries
from nsqpy.admin.history import History, sparkline
from nsqpy.admin.options import AdminOptions, normalize_base_path
from nsqpy.internal.clusterinfo import types as ci


def _lookupd_node(port: int, version: str = "1.3.0", topics=("b", "a"), tomb=(False, True)):
    return {
        "remote_address": f"127.0.0.1:{port + 1000}",
        "hostname": "h",
        "broadcast_address": "127.0.0.1",
        "tcp_port": port,
        "http_port": port + 1,
        "version": version,
        "tombstones": list(tomb),
        "topics": list(topics),
    }


def test_merge_lookupd_nodes_unions_by_tcp_address_and_marks_old_versions() -> None:
    a = {"producers": [_lookupd_node(4150), _lookupd_node(5150, "1.2.1")]}
    b = {"producers": [_lookupd_node(4150)]}
    nodes = ci.merge_lookupd_nodes([("lk1:4161", a), ("lk2:4161", b)])
    assert [ci.http_address(p) for p in nodes] == ["127.0.0.1:4151", "127.0.0.1:5151"]
    first = nodes[0]
    assert list(first) == [
        "remote_addresses", "remote_address", "hostname", "broadcast_address", "tcp_port",
        "http_port", "version", "topics", "out_of_date",
    ]  # fmt: skip
    assert first["remote_addresses"] == ["lk1:4161/127.0.0.1:5150", "lk2:4161/127.0.0.1:5150"]
    assert first["topics"] == [
        {"topic": "a", "tombstoned": True},
        {"topic": "b", "tombstoned": False},
    ]
    assert not first["out_of_date"] and nodes[1]["out_of_date"]
    assert ci.find_producer(nodes, "127.0.0.1:5151") is nodes[1]
    assert ci.find_producer(nodes, "127.0.0.1:1") is None


def test_version_key_orders_semver() -> None:
    assert ci.version_key("1.3.0") > ci.version_key("1.3.0-rc1") > ci.version_key("1.2.1")
    assert ci.version_key("garbage") < ci.version_key("0.0.1")


def _nsqd_stats(depth: int, msgs: int, chan_depth: int, paused: bool = False, clients=None):
    return {
        "version": "1.3.0",
        "topics": [
            {
                "topic_name": "t",
                "depth": depth,
                "backend_depth": 1,
                "message_count": msgs,
                "paused": False,
                "channels": [
                    {
                        "channel_name": "c",
                        "depth": chan_depth,
                        "backend_depth": 0,
                        "in_flight_count": 2,
                        "deferred_count": 1,
                        "message_count": msgs,
                        "requeue_count": 3,
                        "timeout_count": 4,
                        "client_count": len(clients or []),
                        "clients": clients,
                        "paused": paused,
                        "e2e_processing_latency": {
                            "count": 10,
                            "percentiles": [{"quantile": 0.99, "value": 5.0}],
                        },
                    }
                ],
                "e2e_processing_latency": {"count": 0, "percentiles": None},
            },
            {"topic_name": "other", "depth": 7, "backend_depth": 0, "message_count": 7},
        ],
    }


def test_topic_aggregation_sums_nodes_and_merges_channels() -> None:
    client = {"hostname": "z", "remote_address": "1.2.3.4:5", "connect_ts": 100, "tls": True}
    rows = ci.node_topic_stats(_nsqd_stats(5, 10, 3, clients=[client]), "n2:1", "host-b", now=160)
    rows += ci.node_topic_stats(_nsqd_stats(2, 4, 1, paused=True), "n1:1", "host-a", now=160)
    rows.sort(key=lambda t: (t["hostname"], t["node"]))
    assert [r["topic_name"] for r in rows] == ["t", "other", "t", "other"] or len(rows) == 4
    total = ci.aggregate_topic("t", rows)
    assert (total["node"], total["depth"], total["message_count"]) == ("*", 7, 14)
    assert total["memory_depth"] == 5 and total["backend_depth"] == 2
    assert [n["node"] for n in total["nodes"]] == ["n1:1", "n2:1"]  # sorted by hostname
    (chan,) = total["channels"]
    assert chan["node"] == "*" and chan["depth"] == 4 and chan["paused"] is True
    assert chan["in_flight_count"] == 4 and chan["requeue_count"] == 6
    assert [n["node"] for n in chan["nodes"]] == ["n1:1", "n2:1"]
    assert chan["clients"][0]["node"] == "n2:1"
    assert chan["clients"][0]["connected"] == 60 * 1_000_000_000
    assert chan["e2e_processing_latency"]["count"] == 20
    assert chan["e2e_processing_latency"]["percentiles"][0]["max"] == 5.0
    assert list(total) == [
        "node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth",
        "message_count", "nodes", "channels", "paused", "e2e_processing_latency",
    ]  # fmt: skip
    # by channel name for one topic, "topic:channel" across topics
    assert list(ci.aggregate_channels(rows, "t")) == ["c"]
    assert list(ci.aggregate_channels(rows)) == ["t:c"]
    counter = summaries.counter_stats(ci.aggregate_channels(rows))
    assert counter == {
        "t:c:n1:1": {"node": "n1:1", "topic_name": "t", "channel_name": "c", "message_count": 4},
        "t:c:n2:1": {"node": "n2:1", "topic_name": "t", "channel_name": "c", "message_count": 10},
    }
    assert summaries.node_totals([r for r in rows if r["node"] == "n2:1"]) == (17, 1)


def test_prometheus_plain_samples() -> None:
    text = "# HELP nsq_topics Topics\n# TYPE nsq_topics gauge\nnsq_topics 3.0\n"
    text += 'nsq_topic_depth{topic="a"} 5.0\nnsq_healthy 1\nbad x\n'
    assert ci.prometheus_plain_samples(text) == {"nsq_topics": 3.0, "nsq_healthy": 1.0}


def test_empty_topic_and_messages() -> None:
    assert ci.aggregate_topic("nope", [])["nodes"] is None
    assert summaries.warn_message([]) == ""
    assert summaries.warn_message(["a\nb", "c"]) == "WARNING: a\nb; c"
    assert str(ci.all_failed("nsqd", ["x", "y"])) == "failed to query any nsqd: x\ny"
    # a pre-1.0 envelope and a missing topic list
    assert ci.node_topic_stats({"data": {"topics": None}}, "n", "h") == []


def test_history_ring_is_bounded_and_rates_follow_counts() -> None:
    h = History(interval=10, window=60)
    for i in range(20):
        h.record(1000 + 10 * i, {("topic", "t"): (i, 100 * i)})
    assert len(h.series[("topic", "t")]) == h.maxlen == 7
    assert h.last_rate(("topic", "t")) == 10.0
    h.record(1200, {("topic", "t"): (0, 5)})  # counter went back (node restarted)
    assert h.last_rate(("topic", "t")) == 0.5
    h.record(1250, {("topic", "u"): (1, 1)})
    assert ("topic", "t") in h.series
    h.record(1261, {("topic", "u"): (1, 1)})  # t not seen for more than the window
    assert ("topic", "t") not in h.series
    svg = sparkline(h.depths(("topic", "u")), "u <depth>")
    assert svg.startswith("<svg") and "u &lt;depth&gt;" in svg and "<polyline" in svg
    assert "no samples" in sparkline([], "x")
    assert 'data-samples="1"' in sparkline([(5.0, 3.0)], "one")


def test_options_validate() -> None:
    with pytest.raises(ValueError, match="required"):
        AdminOptions().validate()
    with pytest.raises(ValueError, match="not both"):
        AdminOptions(nsqd_http_addresses=["a:1"], nsqlookupd_http_addresses=["b:1"]).validate()
    with pytest.raises(ValueError, match="missing port"):
        AdminOptions(nsqd_http_addresses=["nohost"]).validate()
    assert [normalize_base_path(p) for p in ("", "admin", "/a/b/", "/")] == [
        "/",
        "/admin",
        "/a/b",
        "/",
    ]
