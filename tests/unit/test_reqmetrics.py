"""internal/reqmetrics.py (the request counters of nsqpy-lookupd's and nsqpy-admin's /metrics)
and metrics_compat's value readers, without a daemon."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from nsqpy.internal.reqmetrics import Counts, Timings, render
from nsqpy.metrics_compat import FAMILIES, family_names, label_names


def test_timings_buckets_are_cumulative_le() -> None:
    t = Timings(buckets=(0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 2.0):  # 0.1 is in the 0.1 bucket: le is "less or equal"
        t.observe(("/x",), v)
    fam = t.family("req_seconds", "h", ["handler"])
    got = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert got[("req_seconds_bucket", "0.1")] == 2
    assert got[("req_seconds_bucket", "1.0")] == 3
    assert got[("req_seconds_bucket", "+Inf")] == 4
    assert got[("req_seconds_count", None)] == 4
    assert abs(got[("req_seconds_sum", None)] - 2.65) < 1e-9


def test_render_is_parseable_with_counters_and_process() -> None:
    c = Counts()
    c.inc(("a",))
    c.inc(("a",), 2)
    text = render([c.family("things", "Things", ["k"])]).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in fams["things"].samples if s.name == "things_total"] == [
        ({"k": "a"}, 3)
    ]
    assert "process_resident_memory_bytes" in text


def _family(scope: str, name: str):
    return next(f for f in FAMILIES if f.scope == scope and f.name == name)


def test_compat_percentiles_are_positional_and_zero_when_missing() -> None:
    one = {"e2e_processing_latency": {"count": 3, "percentiles": [{"quantile": 0.5, "value": 7}]}}
    none = {"e2e_processing_latency": {"count": 0, "percentiles": None}}
    p99 = _family("channel", "e2e_latency_99p").value
    p95 = _family("channel", "e2e_latency_95p").value
    assert p99(one) == 7 and p95(one) == 0  # the first entry, whatever its quantile
    assert p99(none) == 0 and p95(none) == 0
    t95 = _family("topic", "e2e_latency_95_percentile").value
    assert t95(one) == 0  # nsq_exporter's topic collector fails here; nsqpy-d answers 0


def test_compat_names_and_labels() -> None:
    assert "nsq_channel_in_flight_count" in family_names("nsq_exporter")
    assert "nsq_in_flight_count" in family_names("nsq_exporter_v1")
    assert family_names("") == set()
    assert len(family_names("nsq_exporter")) == len(FAMILIES) == 16
    assert len(family_names("nsq_exporter_v1")) == 13  # depth, backend_depth, message_count shared
    assert label_names("nsq_exporter", "channel") == ["channel", "paused", "topic"]
    assert label_names("nsq_exporter_v1", "topic") == ["paused", "topic", "type"]
