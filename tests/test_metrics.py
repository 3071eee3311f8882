"""GET /metrics: Prometheus text exposition read from the live topics and channels.

nsqd has no Prometheus endpoint; nsqpy-d serves one on its HTTP port. Each test scrapes the
real daemon over loopback and parses the answer with prometheus_client's own parser.
"""

from __future__ import annotations

import pytest
from conftest import Daemon, wait_for
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(60)


def scrape(d: Daemon) -> dict[str, dict[tuple, float]]:
    """{family name: {sorted label items: value}} of one scrape (sample names as exposed)."""
    code, body, headers = d.http("GET", "/metrics")
    assert code == 200, body
    ctype = {k.lower(): v for k, v in headers.items()}["content-type"]
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_metrics_show_topic_depth_of_queued_messages(nsqd):
    # the must-show: `curl /metrics` parses and shows a topic's depth
    assert nsqd.http("POST", "/mpub?topic=queued", b"a\nb\nc\nd\ne")[0] == 200
    m = scrape(nsqd)
    assert m["nsq_topic_depth"][(("topic", "queued"),)] == 5
    assert m["nsq_topic_backend_depth"][(("topic", "queued"),)] == 0
    assert m["nsq_topic_messages_total"][(("topic", "queued"),)] == 5
    assert m["nsq_topic_message_bytes_total"][(("topic", "queued"),)] == 5
    assert m["nsq_topic_paused"][(("topic", "queued"),)] == 0
    assert m["nsq_topics"][()] == 1
    assert m["nsq_healthy"][()] == 1
    # prometheus_client's process collector
    assert m["process_resident_memory_bytes"][()] > 0
    assert "process_open_fds" in m and "python_info" in m


def test_metrics_channels_in_flight_deferred_clients(nsqd):
    c = nsqd.raw()
    p = nsqd.raw()
    try:
        c.identify()
        c.sub("mt", "ch", 1)
        for i in range(3):
            p.pub("mt", b"x%d" % i)
        p.cmd(b"DPUB", b"mt", b"60000", body=b"later")
        p.expect_response()
        _, _, msg_id, _ = c.read_message()
        c.cmd(b"REQ", msg_id, b"0")  # requeued, then delivered again
        c.read_message()
        lbl = (("channel", "ch"), ("topic", "mt"))

        def settled() -> dict | None:
            m = scrape(nsqd)
            return m if m["nsq_channel_requeued_total"].get(lbl) == 1 else None

        m = wait_for(settled, timeout=5, what="REQ counted")
        assert m["nsq_channel_in_flight"][lbl] == 1
        assert m["nsq_channel_deferred"][lbl] == 1
        assert m["nsq_channel_depth"][lbl] == 2
        assert m["nsq_channel_clients"][lbl] == 1
        assert m["nsq_channel_messages_total"][lbl] == 4
        assert m["nsq_channel_timed_out_total"][lbl] == 0
        assert m["nsq_channel_backend_depth"][lbl] == 0
        assert m["nsq_channels"][()] == 1
        assert m["nsq_clients"][()] == 2
    finally:
        c.close()
        p.close()


def test_metrics_e2e_latency_when_configured(daemon_factory):
    d = daemon_factory("--e2e-processing-latency-percentile=0.99,0.5")
    c = d.raw()
    p = d.raw()
    try:
        c.identify()
        c.sub("lat", "ch", 5)
        for i in range(3):
            p.pub("lat", b"m%d" % i)
        for _ in range(3):
            c.cmd(b"FIN", c.read_message()[2])
        lbl = (("channel", "ch"), ("topic", "lat"))

        def settled() -> dict | None:
            m = scrape(d)
            n = m.get("nsq_channel_e2e_processing_latency_count", {}).get(lbl)
            return m if n == 3 else None

        m = wait_for(settled, timeout=5, what="FINs in metrics")
        lat = m["nsq_channel_e2e_processing_latency_seconds"]
        q99 = lat[(("channel", "ch"), ("quantile", "0.99"), ("topic", "lat"))]
        q50 = lat[(("channel", "ch"), ("quantile", "0.5"), ("topic", "lat"))]
        assert 0 < q50 <= q99 < 5
        assert m["nsq_topic_e2e_processing_latency_count"][(("topic", "lat"),)] == 3
    finally:
        c.close()
        p.close()


def test_metrics_without_e2e_has_no_latency_samples(nsqd):
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 404  # no topic yet
    assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
    m = scrape(nsqd)
    assert "nsq_channel_e2e_processing_latency_seconds" not in m
    assert m["nsq_channel_depth"][(("channel", "c"), ("topic", "t"))] == 0


def test_metrics_method_not_allowed(nsqd):
    code, body, _ = nsqd.http("POST", "/metrics", b"")
    assert code == 405
