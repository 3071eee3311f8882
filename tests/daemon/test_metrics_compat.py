"""--metrics-compat: lovoo/nsq_exporter's families on nsqpy-d's GET /metrics.

The live scrape of a real daemon is compared with nsqpy.metrics_compat.FAMILIES (the table
transcribed from the exporter's collectors) name for name, type for type, label set for label
set and help text for help text, the values with what /stats says for the same topic and
channel; without the option none of those names appears. promtool's verdict: the exporter's
``*_count`` gauges break its "_count suffix" lint rule (and only that), which the names keep.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.daemons import Daemon

from nsqpy.metrics_compat import CHANNEL, FAMILIES, TOPIC, label_names
from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(90)


def _scrape(d: Daemon) -> str:
    code, body, _ = d.http("GET", "/metrics")
    assert code == 200, body
    return body.decode()


def _families(text: str) -> dict[str, object]:
    return {fam.name: fam for fam in text_string_to_metric_families(text)}


def _traffic(d: Daemon) -> tuple[list, dict]:
    """Topic "ct" with channel "ch" (one consumer, one message in flight, one requeue, one
    deferred) and a paused channel "idle"; topic "solo" without channels; returns the
    clients (close them) and the /stats JSON once settled."""
    c = d.raw()
    p = d.raw()
    c.identify()
    c.sub("ct", "ch", 1)
    for i in range(3):
        p.pub("ct", b"m%d" % i)
    p.cmd(b"DPUB", b"ct", b"60000", body=b"later")
    p.expect_response()
    _, _, msg_id, _ = c.read_message()
    c.cmd(b"REQ", msg_id, b"0")
    c.read_message()
    assert d.http("POST", "/channel/create?topic=ct&channel=idle")[0] == 200
    assert d.http("POST", "/channel/pause?topic=ct&channel=idle")[0] == 200
    assert d.http("POST", "/topic/create?topic=solo")[0] == 200

    def settled() -> dict | None:
        code, body, _ = d.http("GET", "/stats?format=json")
        s = json.loads(body)
        ch = next(t for t in s["topics"] if t["topic_name"] == "ct")["channels"]
        return s if any(x["requeue_count"] == 1 for x in ch) else None

    return [c, p], wait_for(settled, timeout=10, what="REQ in /stats")


def _stats_rows(stats: dict) -> tuple[dict, dict]:
    topics = {t["topic_name"]: t for t in stats["topics"]}
    channels = {
        (t["topic_name"], c["channel_name"]): c for t in stats["topics"] for c in t["channels"]
    }
    return topics, channels


@pytest.mark.parametrize("layout", ["nsq_exporter", "nsq_exporter_v1"])
def test_compat_families_match_the_table(daemon_factory, layout):
    d = daemon_factory(
        f"--metrics-compat={layout}", "--e2e-processing-latency-percentile=0.99,0.95"
    )
    assert d.http("GET", "/config/metrics_compat")[:2] == (200, layout.encode())
    clients, stats = _traffic(d)
    try:
        text = _scrape(d)
    finally:
        for c in clients:
            c.close()
    fams = _families(text)
    topics, channels = _stats_rows(stats)
    for f in FAMILIES:
        name = f.full_name(layout)
        fam = fams[name]
        assert fam.type == "gauge", name
        assert fam.documentation == f.help, name
        mine = [s for s in fam.samples if set(s.labels) == set(label_names(layout, f.scope))]
        if layout == "nsq_exporter_v1":
            mine = [s for s in mine if s.labels["type"] == f.scope]
        if f.scope == TOPIC:
            assert {s.labels["topic"] for s in mine} == {"ct", "solo"}, name
            for s in mine:
                t = topics[s.labels["topic"]]
                assert s.labels["paused"] == "false"
                assert s.value == f.value(t), name
        else:
            assert {(s.labels["topic"], s.labels["channel"]) for s in mine} == set(channels)
            for s in mine:
                c = channels[(s.labels["topic"], s.labels["channel"])]
                assert s.labels["paused"] == ("true" if c["paused"] else "false")
                assert s.value == f.value(c), name
    # every sample of these families is a topic or channel series of the table's label sets
    for name in {f.full_name(layout) for f in FAMILIES}:
        for s in fams[name].samples:
            assert list(s.labels) in (label_names(layout, TOPIC), label_names(layout, CHANNEL))
    # spot values, as the exporter computes them
    n = "nsq_channel_" if layout == "nsq_exporter" else "nsq_"
    ch = [s for s in fams[f"{n}requeue_count"].samples if s.labels.get("channel") == "ch"]
    assert [s.value for s in ch] == [1]
    inflt = fams[f"{n}in_flight_count"].samples
    assert [s.value for s in inflt if s.labels.get("channel") == "ch"] == [1]
    paused = [s for s in fams[f"{n}client_count"].samples if s.labels.get("channel") == "idle"]
    assert [(s.labels["paused"], s.value) for s in paused] == [("true", 0)]
    # native families stay beside them
    assert "nsq_channel_requeued" in fams and "nsq_topic_messages" in fams
    if layout == "nsq_exporter":  # shared names take the exporter's shape
        assert fams["nsq_topic_depth"].documentation == "Queue depth"
        assert all("paused" in s.labels for s in fams["nsq_channel_depth"].samples)


def test_compat_off_by_default(nsqd):
    assert nsqd.http("POST", "/pub?topic=t", b"x")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
    assert nsqd.http("GET", "/config/metrics_compat")[:2] == (200, b"")
    fams = _families(_scrape(nsqd))
    # nsqpy's own families whose names the 2.x layout also uses
    native = {"nsq_topic_depth", "nsq_topic_backend_depth", "nsq_channel_depth"}
    native.add("nsq_channel_backend_depth")
    for layout in ("nsq_exporter", "nsq_exporter_v1"):
        names = {f.full_name(layout) for f in FAMILIES}
        assert names - native and not (names - native) & set(fams), layout
    for name in native:  # present in nsqpy's shape, not the exporter's
        assert fams[name].documentation != "Queue depth"
        assert fams[name].documentation != "Queue backend depth"
        assert all("paused" not in s.labels for s in fams[name].samples), name


def test_compat_refuses_an_unknown_layout(daemon_factory):
    with pytest.raises(Exception, match="metrics-compat"):
        daemon_factory("--metrics-compat=statsd")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
@pytest.mark.parametrize("layout", ["nsq_exporter", "nsq_exporter_v1"])
def test_promtool_with_compat(daemon_factory, layout):
    d = daemon_factory(f"--metrics-compat={layout}", "--e2e-processing-latency-percentile=0.99")
    clients, _ = _traffic(d)
    try:
        text = _scrape(d)
    finally:
        for c in clients:
            c.close()
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    problems = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    # 0: clean; 3: lint problems only (1 would be a parse error)
    assert r.returncode in (0, 3), r.stdout + r.stderr
    compat = {f.full_name(layout) for f in FAMILIES}
    for line in problems:
        name, _, why = line.partition(" ")
        assert name in compat and '"_count" suffix' in why, line
