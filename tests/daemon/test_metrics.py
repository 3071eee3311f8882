"""GET /metrics: Prometheus text exposition read from the live topics and channels.

nsqd has no Prometheus endpoint; nsqpy-d serves one on its HTTP port. Each daemon test scrapes
the real daemon over loopback and parses the answer with prometheus_client's own parser; one
also hands a scrape to ``promtool check metrics`` (Debian's ``prometheus`` package) where
promtool is installed.
"""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.daemons import Daemon

from nsqpy.options import NSQ_VERSION, NSQPY_VERSION
from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(60)


def scrape_text(d: Daemon) -> str:
    code, body, headers = d.http("GET", "/metrics")
    assert code == 200, body
    ctype = {k.lower(): v for k, v in headers.items()}["content-type"]
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    return body.decode()


def scrape(d: Daemon) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of one scrape (sample names as exposed)."""
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(scrape_text(d)):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def family_types(text: str) -> dict[str, str]:
    return {fam.name: fam.type for fam in text_string_to_metric_families(text)}


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


def test_metrics_e2e_latency_is_a_summary(daemon_factory):
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
            n = m.get("nsq_channel_e2e_processing_latency_seconds_count", {}).get(lbl)
            return m if n == 3 else None

        m = wait_for(settled, timeout=5, what="FINs in metrics")
        lat = m["nsq_channel_e2e_processing_latency_seconds"]
        q99 = lat[(("channel", "ch"), ("quantile", "0.99"), ("topic", "lat"))]
        q50 = lat[(("channel", "ch"), ("quantile", "0.5"), ("topic", "lat"))]
        assert 0 < q50 <= q99 < 5
        total = m["nsq_channel_e2e_processing_latency_seconds_sum"][lbl]
        assert 3 * q50 / 2 < total <= 3 * q99  # seconds, the three FINs' latencies summed
        tl = (("topic", "lat"),)
        assert m["nsq_topic_e2e_processing_latency_seconds_count"][tl] == 3
        assert m["nsq_topic_e2e_processing_latency_seconds_sum"][tl] == pytest.approx(total)
        assert "nsq_channel_e2e_processing_latency_count" not in m  # the gauge it replaces
        types = family_types(scrape_text(d))
        assert types["nsq_channel_e2e_processing_latency_seconds"] == "summary"
        assert types["nsq_topic_e2e_processing_latency_seconds"] == "summary"
    finally:
        c.close()
        p.close()


def test_metrics_without_e2e_has_no_latency_samples(nsqd):
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 404  # no topic yet
    assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
    text = scrape_text(nsqd)
    assert "e2e_processing_latency" not in text  # not even the HELP and TYPE lines
    m = scrape(nsqd)
    assert m["nsq_channel_depth"][(("channel", "c"), ("topic", "t"))] == 0


def test_metrics_method_not_allowed(nsqd):
    code, body, _ = nsqd.http("POST", "/metrics", b"")
    assert code == 405


def test_metrics_build_info(nsqd):
    m = scrape(nsqd)
    ((labels, value),) = m["nsq_build_info"].items()
    assert value == 1
    assert dict(labels) == {
        "version": NSQ_VERSION,
        "nsqpy_version": NSQPY_VERSION,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }


def _ephemeral_traffic(d: Daemon) -> tuple[list, dict[str, dict[tuple, float]]]:
    """Consumers on "keep"/"eph#ephemeral" and "gone#ephemeral"/"c" and a channel
    "keep"/"durable", one message per topic FINed by the consumer; the clients (close them)
    and a scrape once every channel and client is there."""
    clients = []
    for topic, channel in (("keep", "eph#ephemeral"), ("gone#ephemeral", "c")):
        c = d.raw()
        clients.append(c)
        c.identify()
        c.sub(topic, channel, 1)
        if topic == "keep":
            assert d.http("POST", "/channel/create?topic=keep&channel=durable")[0] == 200
        assert d.http("POST", f"/pub?topic={topic.replace('#', '%23')}", b"x")[0] == 200
        c.cmd(b"FIN", c.read_message()[2])

    def settled() -> dict | None:
        m = scrape(d)
        return m if m["nsq_channels"][()] == 3 and m["nsq_clients"][()] == 2 else None

    return clients, wait_for(settled, timeout=5, what="three channels")


def test_metrics_exclude_ephemeral(daemon_factory, tmp_path):
    # default: #ephemeral topics and channels are shown like any other
    d = daemon_factory("--e2e-processing-latency-percentile=0.5")
    clients, m = _ephemeral_traffic(d)
    for c in clients:
        c.close()
    assert set(m["nsq_channel_depth"]) == {
        (("channel", "eph#ephemeral"), ("topic", "keep")),
        (("channel", "durable"), ("topic", "keep")),
        (("channel", "c"), ("topic", "gone#ephemeral")),
    }
    assert d.http("GET", "/config/metrics_exclude_ephemeral")[:2] == (200, b"false")
    # with the option set in the config file: left out, the daemon-wide gauges still count them
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text("metrics_exclude_ephemeral = true\n")
    d = daemon_factory("--e2e-processing-latency-percentile=0.5", f"--config={cfg}")
    assert d.http("GET", "/config/metrics_exclude_ephemeral")[:2] == (200, b"true")
    clients, m = _ephemeral_traffic(d)
    try:
        text = scrape_text(d)
        assert "ephemeral" not in text
        assert set(m["nsq_channel_depth"]) == {(("channel", "durable"), ("topic", "keep"))}
        assert set(m["nsq_topic_depth"]) == {(("topic", "keep"),)}
        assert m["nsq_channel_e2e_processing_latency_seconds_count"] == {
            (("channel", "durable"), ("topic", "keep")): 0
        }
        # the topic's merged latency still has the ephemeral channel's FIN, as /stats does
        assert m["nsq_topic_e2e_processing_latency_seconds_count"][(("topic", "keep"),)] == 1
        assert m["nsq_topics"][()] == 2 and m["nsq_channels"][()] == 3
    finally:
        for c in clients:
            c.close()


def test_metrics_exclude_ephemeral_flag_go_syntax(daemon_factory):
    d = daemon_factory("-metrics-exclude-ephemeral=true")
    assert d.http("GET", "/config/metrics_exclude_ephemeral")[:2] == (200, b"true")


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian package 'prometheus' provides it)",
)
def test_promtool_accepts_the_exposition(daemon_factory):
    d = daemon_factory("--e2e-processing-latency-percentile=1.0,0.99,0.5")
    clients, _ = _ephemeral_traffic(d)
    try:
        assert d.http("POST", "/topic/pause?topic=keep")[0] == 200
        text = scrape_text(d)
    finally:
        for c in clients:
            c.close()
    assert "_seconds_count" in text and "nsq_build_info" in text
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr
