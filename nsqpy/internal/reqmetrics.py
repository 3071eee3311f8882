"""Request counters and latency histograms that nsqpy-lookupd and nsqpy-admin serve at /metrics.

Strategy: a request adds to plain Python numbers (a dict lookup, a bisect, three additions);
prometheus_client is imported only when a scrape asks for the families (as nsqpy-d's
/metrics does), so a daemon that is never scraped never loads it. :class:`Timings` keeps one
histogram per label-value tuple with Prometheus' cumulative ``le`` buckets in seconds;
:class:`Counts` one counter per tuple. :func:`render` writes a list of families as the text
exposition format 0.0.4 (what ``promtool check metrics`` reads).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["BUCKETS", "CONTENT_TYPE", "Counts", "Timings", "render"]

#: Upper bounds (seconds) of the latency buckets, +Inf implied: 0.5 ms to 10 s.
BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

#: The Content-Type of :func:`render`'s text.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Timings:
    """Durations in seconds per label-value tuple: bucket counts, count and sum."""

    __slots__ = ("buckets", "series")

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        #: label values -> [per-bucket counts (not cumulative; the last is +Inf), count, sum]
        self.series: dict[tuple[str, ...], list[Any]] = {}

    def observe(self, key: tuple[str, ...], seconds: float) -> None:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = [[0] * (len(self.buckets) + 1), 0, 0.0]
        s[0][bisect_left(self.buckets, seconds)] += 1
        s[1] += 1
        s[2] += seconds

    def family(self, name: str, help: str, labels: list[str]) -> Any:
        """A prometheus_client HistogramMetricFamily of every series (cumulative buckets)."""
        from prometheus_client.core import HistogramMetricFamily

        fam = HistogramMetricFamily(name, help, labels=labels)
        bounds = [repr(b) for b in self.buckets] + ["+Inf"]
        for key, (counts, _count, total) in sorted(self.series.items()):
            cumulative = []
            running = 0
            for bound, n in zip(bounds, counts):
                running += n
                cumulative.append((bound, running))
            fam.add_metric(list(key), cumulative, total)
        return fam


class Counts:
    """A counter per label-value tuple."""

    __slots__ = ("series",)

    def __init__(self) -> None:
        self.series: dict[tuple[str, ...], int] = {}

    def inc(self, key: tuple[str, ...], n: int = 1) -> None:
        self.series[key] = self.series.get(key, 0) + n

    def family(self, name: str, help: str, labels: list[str]) -> Any:
        """A prometheus_client CounterMetricFamily (``name`` without ``_total``)."""
        from prometheus_client.core import CounterMetricFamily

        fam = CounterMetricFamily(name, help, labels=labels)
        for key, n in sorted(self.series.items()):
            fam.add_metric(list(key), n)
        return fam


def render(families: Iterable[Any]) -> bytes:
    """The text exposition (0.0.4) of prometheus_client metric families, then
    prometheus_client's process families (``process_*``: CPU, RSS, open fds, start time)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    from prometheus_client.registry import Collector

    fams = list(families)

    class _Once(Collector):
        def collect(self) -> Iterator[Any]:
            return iter(fams)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Once())
    ProcessCollector(registry=reg)
    return generate_latest(reg)
