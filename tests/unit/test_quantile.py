"""E2E processing latency quantiles (nsqpy/quantile.py, as nsqd's internal/quantile over
bmizerany/perks) and their Prometheus summary (nsqpy/metrics.py), in process with an injected
clock: the window moving at half its length, the bounded buffer, aggregation, Go's float and
duration texts, and _count/_sum outliving the window. The daemons' /stats and /metrics shapes
are checked in tests/daemon/test_stats_shape.py and test_metrics.py."""

from __future__ import annotations

import math

import pytest
from prometheus_client.core import SummaryMetricFamily

from nsqpy.metrics import _add_summary
from nsqpy.quantile import E2ELatency, aggregate, go_float, nanoseconds_to_human, result_text

EMPTY_E2E = {"count": 0, "percentiles": None}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000_000

    def __call__(self) -> int:
        return self.now


def test_quantile_window_moves_at_half_window():
    clock = FakeClock()
    q = E2ELatency(window_ms=1000, percentiles=[1.0, 0.5], clock_ns=clock)
    for lat_ms in (10, 20, 30):
        q.insert(clock.now - lat_ms * 1_000_000)
    assert q.result() == {
        "count": 3,
        "percentiles": [
            {"quantile": 1, "value": 30_000_000},
            {"quantile": 0.5, "value": 20_000_000},
        ],
    }
    clock.now += 600_000_000  # past half a window: the old samples are still in the other half
    q.insert(clock.now - 5_000_000)
    assert q.result()["count"] == 4
    clock.now += 500_000_000  # another half: the first three are gone
    assert q.result() == {
        "count": 1,
        "percentiles": [{"quantile": 1, "value": 5_000_000}, {"quantile": 0.5, "value": 5_000_000}],
    }
    clock.now += 10_000_000_000  # long idle: everything is gone
    assert q.result()["count"] == 0
    assert q.result()["percentiles"] == [
        {"quantile": 1, "value": 0},
        {"quantile": 0.5, "value": 0},
    ]


def test_quantile_buffer_is_bounded_and_count_exact():
    clock = FakeClock()
    q = E2ELatency(window_ms=60_000, percentiles=[0.5], capacity=100, clock_ns=clock)
    for i in range(10_000):
        q.insert(clock.now - (i % 1000))
    assert q.result()["count"] == 10_000
    assert len(q.snapshot()[1]) == 100
    assert 200 <= q.result()["percentiles"][0]["value"] <= 800  # a uniform sample's median


def test_quantile_aggregate_and_text():
    assert aggregate([None, None], [0.5]) == EMPTY_E2E
    assert go_float(1.0) == 1 and type(go_float(1.0)) is int and go_float(0.99) == 0.99
    assert nanoseconds_to_human(1500) == "1.5us"
    assert nanoseconds_to_human(2_500_000) == "2.5ms"
    assert nanoseconds_to_human(3_000_000_000) == "3.0s"
    assert nanoseconds_to_human(999) == "999.0ns"
    assert result_text(EMPTY_E2E) == ""
    r = {"count": 2, "percentiles": [{"quantile": 1, "value": 2_000_000}]}
    assert result_text(r) == "2.0ms"


def test_summary_count_and_sum_outlive_the_window():
    # the quantiles cover the window; _count and _sum are counters since start (client_golang's
    # Summary): once the window has moved past every FIN the quantiles are NaN, the totals stay
    now = [10_000_000_000]
    e2e = E2ELatency(1000, [0.5], clock_ns=lambda: now[0])  # a 1 s window
    for lat_ms in (10, 20, 30):
        e2e.insert(now[0] - lat_ms * 1_000_000)
    fam = SummaryMetricFamily("x_seconds", "test", labels=["topic"])
    _add_summary(fam, ["topic"], ["t"], [e2e], [0.5])
    got = {(s.name, s.labels.get("quantile")): s.value for s in fam.samples}
    assert got == {
        ("x_seconds", "0.5"): 0.02,
        ("x_seconds_count", None): 3,
        ("x_seconds_sum", None): pytest.approx(0.06),
    }
    now[0] += 5_000_000_000  # five windows later
    e2e.insert(now[0] - 40_000_000)
    now[0] += 5_000_000_000
    fam = SummaryMetricFamily("x_seconds", "test", labels=["topic"])
    _add_summary(fam, ["topic"], ["t"], [e2e], [0.5])
    got = {(s.name, s.labels.get("quantile")): s.value for s in fam.samples}
    assert math.isnan(got.pop(("x_seconds", "0.5")))
    assert got == {("x_seconds_count", None): 4, ("x_seconds_sum", None): pytest.approx(0.1)}
