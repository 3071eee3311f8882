"""Prometheus: GET /metrics on the HTTP port (nsqd has no such endpoint; this goes beyond it).

Strategy: nothing is counted for Prometheus on the message path. One custom Collector reads the
live topics and channels when a scrape arrives (the same counters /stats reads) and yields metric
families; the registry is per daemon and also holds prometheus_client's process collector (CPU,
RSS, open fds, start time) and its Python GC and platform collectors. The text is the classic
exposition format 0.0.4, which ``promtool check metrics`` accepts.

Names (labels topic, channel):

- ``nsq_topic_depth``, ``nsq_topic_backend_depth``, ``nsq_topic_paused``: gauges
- ``nsq_topic_messages_total``, ``nsq_topic_message_bytes_total``: counters
- ``nsq_channel_depth``, ``_backend_depth``, ``_in_flight``, ``_deferred``, ``_clients``,
  ``_paused``: gauges
- ``nsq_channel_messages_total``, ``_requeued_total``, ``_timed_out_total``,
  ``_dead_lettered_total`` (nsqpy's dead letters): counters
- ``nsq_{topic,channel}_e2e_processing_latency_seconds``: a Summary, only with
  --e2e-processing-latency-percentile. As client_golang's Summary: the ``quantile`` samples are
  over the sliding window (--e2e-processing-latency-window-time, NaN when the window has no FIN),
  ``_count`` and ``_sum`` are FINs and their summed latency since the channel was created or
  the daemon started (counters). A topic's summary merges its channels' (nsqd's
  AggregateChannelE2eProcessingLatency).
- ``nsq_topics``, ``nsq_channels``, ``nsq_clients`` (connected TCP clients), ``nsq_healthy``:
  gauges over the whole daemon
- ``nsq_build_info{version, nsqpy_version, python_version, python_implementation}``: 1 (the
  ``<app>_build_info`` convention: the labels carry the facts)

--metrics-exclude-ephemeral (nsqpy's, after nsqd's --statsd-exclude-ephemeral) leaves
``#ephemeral`` topics (with all their channels) and ``#ephemeral`` channels out of the per-topic
and per-channel families; the daemon-wide gauges (``nsq_topics``, ``nsq_channels``,
``nsq_clients``) and a kept topic's merged latency still count them, as /stats does.

--metrics-compat=nsq_exporter (or nsq_exporter_v1) adds lovoo/nsq_exporter's families
(metrics_compat.py); where one of its names is also a name above, its shape replaces nsqpy's.
With --etcd-endpoints, the ``nsq_replication_*`` families of replicated topics follow
(replication/metrics.py).
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    exposition,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from . import metrics_compat, quantile
from .options import NSQ_VERSION, NSQPY_VERSION

if TYPE_CHECKING:
    from .nsqd import NSQD

__all__ = ["CONTENT_TYPE", "NsqCollector", "build_info_labels", "build_registry", "scrape"]

#: The classic text format generate_latest writes (prometheus_client >= 0.22 calls 1.0.0 "latest").
CONTENT_TYPE: str = getattr(
    exposition, "CONTENT_TYPE_PLAIN_0_0_4", "text/plain; version=0.0.4; charset=utf-8"
)

_TOPIC = ["topic"]
_CHANNEL = ["topic", "channel"]
_EPHEMERAL = "#ephemeral"

_G = GaugeMetricFamily
_C = CounterMetricFamily
_Row = tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str, Callable[[Any], float]]

#: The per-topic families in exposition order: (kind, name, help, the value of one Topic).
_TOPICS: tuple[_Row, ...] = (
    (_G, "nsq_topic_depth", "Messages queued in the topic", lambda t: t.depth),
    (_G, "nsq_topic_backend_depth", "Messages queued on disk", lambda t: t.backend_depth),
    (_G, "nsq_topic_paused", "1 when the topic is paused", lambda t: 1 if t.paused else 0),
    (_C, "nsq_topic_messages", "Messages published to the topic", lambda t: t.message_count),
    (_C, "nsq_topic_message_bytes", "Bytes published to the topic", lambda t: t.message_bytes),
)

#: The per-channel families in exposition order: (kind, name, help, the value of one Channel).
_CHANNELS: tuple[_Row, ...] = (
    (_G, "nsq_channel_depth", "Messages waiting in the channel", lambda c: c.depth),
    (_G, "nsq_channel_backend_depth", "Channel messages on disk", lambda c: c.backend_depth),
    (_G, "nsq_channel_in_flight", "Messages in flight", lambda c: len(c.in_flight)),
    (_G, "nsq_channel_deferred", "Deferred messages", lambda c: len(c.deferred)),
    (_G, "nsq_channel_clients", "Consumers subscribed", lambda c: len(c.clients)),
    (_G, "nsq_channel_paused", "1 when the channel is paused", lambda c: 1 if c.paused else 0),
    (_C, "nsq_channel_messages", "Messages put to the channel", lambda c: c.message_count),
    (_C, "nsq_channel_requeued", "Messages requeued", lambda c: c.requeue_count),
    (_C, "nsq_channel_timed_out", "Messages that timed out in flight", lambda c: c.timeout_count),
    (
        _C,
        "nsq_channel_dead_lettered",
        "Messages moved to the dead-letter topic after --max-attempts",
        lambda c: c.dead_letter_count,
    ),
)


def build_info_labels() -> dict[str, str]:
    """nsq_build_info's labels: ``version`` is the NSQ version nsqpy-d speaks (as /info's),
    ``nsqpy_version`` nsqpy's own, then the Python that runs it (``3.12.3``, ``CPython``)."""
    return {
        "version": NSQ_VERSION,
        "nsqpy_version": NSQPY_VERSION,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }


class NsqCollector(Collector):
    """Reads the daemon's topics and channels on each scrape (see the module docstring)."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        info = build_info_labels()
        self._build_info = GaugeMetricFamily(
            "nsq_build_info", "Versions nsqpy-d was built with (value 1)", labels=list(info)
        )
        self._build_info.add_metric(list(info.values()), 1)

    def collect(self) -> Iterator[Metric]:
        nsqd = self.nsqd
        compat = nsqd.opts.metrics_compat
        taken = metrics_compat.family_names(compat)
        for fam in self._native():
            if fam.name not in taken:
                yield fam
        yield from metrics_compat.collect(nsqd, compat)
        repl = nsqd.replication
        if repl is not None:
            from .replication import metrics as replication_metrics

            yield from replication_metrics.collect(repl)

    def _native(self) -> Iterator[Metric]:
        nsqd = self.nsqd
        skip_ephemeral = nsqd.opts.metrics_exclude_ephemeral
        t_fams = [(kind(name, text, labels=_TOPIC), read) for kind, name, text, read in _TOPICS]
        t_e2e = SummaryMetricFamily(
            "nsq_topic_e2e_processing_latency_seconds",
            "Publish-to-FIN latency over all channels: quantiles over the window, "
            "count and sum since start",
            labels=_TOPIC,
        )
        ch_fams = [
            (kind(name, text, labels=_CHANNEL), read) for kind, name, text, read in _CHANNELS
        ]
        ch_e2e = SummaryMetricFamily(
            "nsq_channel_e2e_processing_latency_seconds",
            "Publish-to-FIN latency: quantiles over the window, count and sum since start",
            labels=_CHANNEL,
        )
        percentiles = nsqd.opts.e2e_processing_latency_percentiles
        n_channels = 0
        for t in list(nsqd.topics.values()):
            chans = list(t.channels.values())
            n_channels += len(chans)
            if skip_ephemeral and t.name.endswith(_EPHEMERAL):
                continue
            tl = [t.name]
            for fam, read in t_fams:
                fam.add_metric(tl, read(t))
            t_streams = [ch.e2e for ch in chans if ch.e2e is not None]
            if t_streams:
                _add_summary(t_e2e, _TOPIC, tl, t_streams, percentiles)
            for ch in chans:
                if skip_ephemeral and ch.name.endswith(_EPHEMERAL):
                    continue
                cl = [t.name, ch.name]
                for fam, read in ch_fams:
                    fam.add_metric(cl, read(ch))
                if ch.e2e is not None:
                    _add_summary(ch_e2e, _CHANNEL, cl, [ch.e2e], percentiles)
        yield from (fam for fam, _ in t_fams)
        if percentiles:
            yield t_e2e
        yield from (fam for fam, _ in ch_fams)
        if percentiles:
            yield ch_e2e
        yield _G("nsq_topics", "Topics", value=len(nsqd.topics))
        yield _G("nsq_channels", "Channels", value=n_channels)
        yield _G("nsq_clients", "Connected TCP clients", value=len(nsqd.clients))
        yield _G("nsq_healthy", "1 when /ping answers OK", value=1 if nsqd.is_healthy() else 0)
        yield self._build_info


def _add_summary(
    family: SummaryMetricFamily,
    label_names: list[str],
    labels: list[str],
    streams: list[quantile.E2ELatency],
    percentiles: list[float],
) -> None:
    """One labelled summary of ``streams`` (merged): a ``quantile`` sample per percentile over
    the window in seconds (NaN while the window holds no FIN, as client_golang writes an empty
    Summary), then ``_count`` and ``_sum`` since the streams were made."""
    r = quantile.aggregate(streams, percentiles)
    names = [*label_names, "quantile"]
    for p in r["percentiles"] or ():
        value = p["value"] / 1e9 if r["count"] else math.nan
        q = repr(float(p["quantile"]))
        family.samples.append(Sample(family.name, dict(zip(names, [*labels, q])), value))
    total_ns = sum(s.total_ns for s in streams)
    family.add_metric(labels, sum(s.total_count for s in streams), total_ns / 1e9)


def build_registry(nsqd: NSQD) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    reg.register(NsqCollector(nsqd))
    return reg


def scrape(registry: CollectorRegistry) -> bytes:
    """The text exposition format (version 0.0.4)."""
    return generate_latest(registry)
