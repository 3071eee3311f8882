"""nsqd's statsd lines (nsqpy/statsd.py, as nsqd/statsd.go) in process: the prefix built from
the host and port, counters sent as differences between pushes, gauges as values, and packets
packed by whole lines. The daemon pushing them over UDP is checked in
tests/daemon/test_statsd.py."""

from __future__ import annotations

from nsqpy.statsd import host_key, metric_lines, pack, resolve_prefix


def test_prefix_as_nsqd_builds_it():
    assert host_key("my.host:4151") == "my_host_4151"
    assert resolve_prefix("nsq.%s", "my.host", 4151) == "nsq.my_host_4151."
    assert resolve_prefix("nsq.%s.", "h", 1) == "nsq.h_1."
    assert resolve_prefix("plain", "h", 1) == "plain."
    assert resolve_prefix("", "h", 1) == ""


def test_counters_are_differences_between_pushes():
    e2e = {"count": 0, "percentiles": None}
    chan = {
        "channel_name": "c",
        "depth": 2,
        "backend_depth": 1,
        "in_flight_count": 3,
        "deferred_count": 4,
        "message_count": 10,
        "requeue_count": 2,
        "timeout_count": 1,
        "client_count": 5,
        "e2e_processing_latency": e2e,
    }
    topic = {
        "topic_name": "t",
        "channels": [chan],
        "depth": 7,
        "backend_depth": 6,
        "message_count": 10,
        "message_bytes": 100,
        "e2e_processing_latency": {
            "count": 3,
            "percentiles": [{"quantile": 0.995, "value": 12}, {"quantile": 1, "value": 13}],
        },
    }
    lines, last = metric_lines([topic], {}, False)
    assert lines == [
        "topic.t.message_count:10|c",
        "topic.t.message_bytes:100|c",
        "topic.t.depth:7|g",
        "topic.t.backend_depth:6|g",
        "topic.t.e2e_processing_latency_100:12|g",  # Go's %.0f of 99.5 rounds half to even
        "topic.t.e2e_processing_latency_100:13|g",
        "topic.t.channel.c.message_count:10|c",
        "topic.t.channel.c.depth:2|g",
        "topic.t.channel.c.backend_depth:1|g",
        "topic.t.channel.c.in_flight_count:3|g",
        "topic.t.channel.c.deferred_count:4|g",
        "topic.t.channel.c.requeue_count:2|c",
        "topic.t.channel.c.timeout_count:1|c",
        "topic.t.channel.c.clients:5|g",
    ]
    topic["message_count"] = 15
    chan["message_count"] = 12
    lines, _ = metric_lines([topic], last, False)
    assert "topic.t.message_count:5|c" in lines
    assert "topic.t.channel.c.message_count:2|c" in lines
    assert "topic.t.channel.c.requeue_count:0|c" in lines


def test_pack_keeps_lines_whole():
    lines = ["a" * 10, "b" * 10, "c" * 30]
    assert pack(lines, "p.", 30) == [
        b"p." + b"a" * 10 + b"\np." + b"b" * 10 + b"\n",
        b"p." + b"c" * 30 + b"\n",  # longer than a packet: alone
    ]
