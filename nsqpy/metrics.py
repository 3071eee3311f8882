# Prometheus: GET /metrics on the HTTP port (nsqd has no such endpoint; this goes beyond it).
#
# Strategy: nothing is counted for Prometheus on the message path. One custom Collector reads
# the live topics and channels when a scrape arrives (the same counters /stats reads) and yields
# metric families; the registry is per daemon and also holds prometheus_client's process
# collector (CPU, RSS, open fds, start time) and its Python GC and platform collectors.
#
# Names (labels topic, channel):
#   nsq_topic_depth, nsq_topic_backend_depth, nsq_topic_paused        gauges
#   nsq_topic_messages_total, nsq_topic_message_bytes_total           counters
#   nsq_channel_depth, _backend_depth, _in_flight, _deferred,
#   _clients, _paused                                                  gauges
#   nsq_channel_messages_total, _requeued_total, _timed_out_total,
#   _dead_lettered_total (nsqpy's dead letters)                        counters
#   nsq_{topic,channel}_e2e_processing_latency_seconds{quantile=..}   gauge per percentile
#   nsq_{topic,channel}_e2e_processing_latency_count                  FINs in the window (gauge)
#   nsq_clients (connected TCP clients), nsq_topics, nsq_channels, nsq_healthy  gauges
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    exposition,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import stats

if TYPE_CHECKING:
    from .nsqd import NSQD

__all__ = ["CONTENT_TYPE", "NsqCollector", "build_registry", "scrape"]

#: The classic text format generate_latest writes (prometheus_client >= 0.22 calls 1.0.0 "latest").
CONTENT_TYPE: str = getattr(
    exposition, "CONTENT_TYPE_PLAIN_0_0_4", "text/plain; version=0.0.4; charset=utf-8"
)

_TOPIC = ["topic"]
_CHANNEL = ["topic", "channel"]


class NsqCollector(Collector):
    """Reads the daemon's topics and channels on each scrape."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd

    def collect(self) -> Iterator[Metric]:
        nsqd = self.nsqd
        g = GaugeMetricFamily
        c = CounterMetricFamily
        t_depth = g("nsq_topic_depth", "Messages queued in the topic", labels=_TOPIC)
        t_bdepth = g("nsq_topic_backend_depth", "Messages queued on disk", labels=_TOPIC)
        t_paused = g("nsq_topic_paused", "1 when the topic is paused", labels=_TOPIC)
        t_msgs = c("nsq_topic_messages", "Messages published to the topic", labels=_TOPIC)
        t_bytes = c("nsq_topic_message_bytes", "Bytes published to the topic", labels=_TOPIC)
        t_e2e = g(
            "nsq_topic_e2e_processing_latency_seconds",
            "Publish-to-FIN latency percentiles over all channels (window)",
            labels=["topic", "quantile"],
        )
        t_e2e_n = g(
            "nsq_topic_e2e_processing_latency_count",
            "FINs in the e2e latency window, all channels",
            labels=_TOPIC,
        )
        ch_depth = g("nsq_channel_depth", "Messages waiting in the channel", labels=_CHANNEL)
        ch_bdepth = g("nsq_channel_backend_depth", "Channel messages on disk", labels=_CHANNEL)
        ch_inflt = g("nsq_channel_in_flight", "Messages in flight", labels=_CHANNEL)
        ch_def = g("nsq_channel_deferred", "Deferred messages", labels=_CHANNEL)
        ch_clients = g("nsq_channel_clients", "Consumers subscribed", labels=_CHANNEL)
        ch_paused = g("nsq_channel_paused", "1 when the channel is paused", labels=_CHANNEL)
        ch_msgs = c("nsq_channel_messages", "Messages put to the channel", labels=_CHANNEL)
        ch_req = c("nsq_channel_requeued", "Messages requeued", labels=_CHANNEL)
        ch_to = c("nsq_channel_timed_out", "Messages that timed out in flight", labels=_CHANNEL)
        ch_dead = c(
            "nsq_channel_dead_lettered",
            "Messages moved to the dead-letter topic after --max-attempts",
            labels=_CHANNEL,
        )
        ch_e2e = g(
            "nsq_channel_e2e_processing_latency_seconds",
            "Publish-to-FIN latency percentiles (window)",
            labels=["topic", "channel", "quantile"],
        )
        ch_e2e_n = g(
            "nsq_channel_e2e_processing_latency_count",
            "FINs in the e2e latency window",
            labels=_CHANNEL,
        )
        n_channels = 0
        for t in list(nsqd.topics.values()):
            tl = [t.name]
            t_depth.add_metric(tl, t.depth)
            t_bdepth.add_metric(tl, t.backend_depth)
            t_paused.add_metric(tl, 1 if t.paused else 0)
            t_msgs.add_metric(tl, t.message_count)
            t_bytes.add_metric(tl, t.message_bytes)
            _add_e2e(t_e2e, t_e2e_n, tl, stats.topic_e2e(t))
            for ch in list(t.channels.values()):
                n_channels += 1
                cl = [t.name, ch.name]
                ch_depth.add_metric(cl, ch.depth)
                ch_bdepth.add_metric(cl, ch.backend_depth)
                ch_inflt.add_metric(cl, len(ch.in_flight))
                ch_def.add_metric(cl, len(ch.deferred))
                ch_clients.add_metric(cl, len(ch.clients))
                ch_paused.add_metric(cl, 1 if ch.paused else 0)
                ch_msgs.add_metric(cl, ch.message_count)
                ch_req.add_metric(cl, ch.requeue_count)
                ch_to.add_metric(cl, ch.timeout_count)
                ch_dead.add_metric(cl, ch.dead_letter_count)
                if ch.e2e is not None:
                    _add_e2e(ch_e2e, ch_e2e_n, cl, ch.e2e.result())
        yield from (t_depth, t_bdepth, t_paused, t_msgs, t_bytes, t_e2e, t_e2e_n)
        yield from (ch_depth, ch_bdepth, ch_inflt, ch_def, ch_clients, ch_paused)
        yield from (ch_msgs, ch_req, ch_to, ch_dead, ch_e2e, ch_e2e_n)
        yield g("nsq_topics", "Topics", value=len(nsqd.topics))
        yield g("nsq_channels", "Channels", value=n_channels)
        yield g("nsq_clients", "Connected TCP clients", value=len(nsqd.clients))
        yield g("nsq_healthy", "1 when /ping answers OK", value=1 if nsqd.is_healthy() else 0)


def _add_e2e(
    values: GaugeMetricFamily, count: GaugeMetricFamily, labels: list[str], r: dict[str, Any]
) -> None:
    if r["percentiles"] is None:
        return
    count.add_metric(labels, r["count"])
    for p in r["percentiles"]:
        values.add_metric([*labels, repr(float(p["quantile"]))], p["value"] / 1e9)


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
