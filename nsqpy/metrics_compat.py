"""nsq_exporter's metric families on nsqpy-d's own GET /metrics (``--metrics-compat``).

Strategy: lovoo/nsq_exporter scrapes nsqd's ``/stats?format=json`` and turns each topic and
channel into gauges; dashboards and alerts written for it keep working when nsqpy-d serves the
same families itself. :data:`FAMILIES` is the one table of them, transcribed from that
exporter's collectors (repository github.com/lovoo/nsq_exporter, files
collector/stats_topic.go, collector/stats_channel.go and collector/stats.go; release 2.0.2 and,
for the older layout, 1.0.1). A scrape builds the same /stats dicts nsqpy-d answers /stats
with (stats.get_stats, without client detail) and reads each value from them as the exporter
reads its JSON, so the numbers are the ones the exporter would show for this daemon.

Two layouts (the option's values):

``nsq_exporter`` (releases 2.x, the current one)
    ``nsq_topic_<name>{topic, paused}`` and ``nsq_channel_<name>{topic, channel, paused}``.
    Four of these names are also nsqpy's own families (``nsq_topic_depth``,
    ``nsq_topic_backend_depth``, ``nsq_channel_depth``, ``nsq_channel_backend_depth``); an
    exposition holds one family per name, so with this layout those four are served in the
    exporter's shape (its help text, the extra ``paused`` label) instead of nsqpy's. Same
    type (gauge) and same values: a query selecting by topic and channel reads both.
``nsq_exporter_v1`` (releases 1.0.x)
    ``nsq_<name>{type, topic, paused}`` for topics and ``nsq_<name>{type, topic, channel,
    paused}`` for channels, ``type`` being "topic" or "channel": ``nsq_depth``,
    ``nsq_backend_depth`` and ``nsq_message_count`` carry series of both kinds in one family.

Values as the exporter computes them: counts as gauges (``message_count``, ``requeue_count``
and ``timeout_count`` are nsqd's running totals, exported as gauges all the same); ``paused``
is Go's strconv.FormatBool ("true"/"false"); a channel's ``e2e_latency_99p`` and
``e2e_latency_95p`` are the first and second entries of its /stats ``percentiles`` list in
nanoseconds (whatever quantiles --e2e-processing-latency-percentile named, in its order), 0
when the list is shorter; the topic's ``*_percentile`` pair reads the topic's merged list the
same way (the exporter's getPercentile indexes the second entry without a length check and
fails its scrape when only one percentile is configured; nsqpy-d answers 0 there). Labels are
given in the order client_golang writes them (sorted by name). The exporter's own
``nsq_exporter_scrape_duration_seconds`` and its opt-in per-client collector (``stats.clients``)
are not served. --metrics-exclude-ephemeral applies to these families too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from .stats import get_stats

if TYPE_CHECKING:
    from .nsqd import NSQD

__all__ = ["FAMILIES", "LAYOUTS", "Family", "collect", "family_names", "label_names"]

#: The values --metrics-compat takes ("" = off).
LAYOUTS = ("nsq_exporter", "nsq_exporter_v1")

TOPIC = "topic"
CHANNEL = "channel"
_EPHEMERAL = "#ephemeral"


def _percentile(index: int) -> Callable[[dict[str, Any]], float]:
    """The exporter's percentileValue/getPercentile: entry ``index`` of the /stats
    e2e_processing_latency percentiles list (its "value", ns), 0 when there is none."""

    def value(d: dict[str, Any]) -> float:
        ps = d["e2e_processing_latency"]["percentiles"] or ()
        return float(ps[index]["value"]) if index < len(ps) else 0.0

    return value


def _key(key: str) -> Callable[[dict[str, Any]], float]:
    return lambda d: float(d[key])


@dataclass(frozen=True)
class Family:
    """One nsq_exporter gauge: ``scope`` TOPIC or CHANNEL, ``name`` as the collector names it
    (the part after the namespace and subsystem), ``help`` its help text word for word,
    ``value`` reads it from one /stats topic or channel dict."""

    scope: str
    name: str
    help: str
    value: Callable[[dict[str, Any]], float]

    def full_name(self, layout: str) -> str:
        """The exposed name: ``nsq_<scope>_<name>`` (2.x), ``nsq_<name>`` (1.0.x)."""
        if layout == "nsq_exporter_v1":
            return f"nsq_{self.name}"
        return f"nsq_{self.scope}_{self.name}"


# Transcribed from github.com/lovoo/nsq_exporter collector/stats_topic.go (TopicStats) and
# collector/stats_channel.go (ChannelStats), in their order; the values as collector/stats.go
# reads /stats. Every family is a GaugeVec. client_count is len(channel.Clients) there, the
# "client_count" key of /stats here (the same number).
FAMILIES: tuple[Family, ...] = (
    Family(TOPIC, "channel_count", "Number of channels", lambda d: float(len(d["channels"]))),
    Family(TOPIC, "depth", "Queue depth", _key("depth")),
    Family(TOPIC, "backend_depth", "Queue backend depth", _key("backend_depth")),
    Family(TOPIC, "e2e_latency_99_percentile", "Queue e2e latency 99th percentile", _percentile(0)),
    Family(TOPIC, "e2e_latency_95_percentile", "Queue e2e latency 95th percentile", _percentile(1)),
    Family(TOPIC, "message_count", "Queue message count", _key("message_count")),
    Family(CHANNEL, "client_count", "Number of clients", _key("client_count")),
    Family(CHANNEL, "depth", "Queue depth", _key("depth")),
    Family(CHANNEL, "backend_depth", "Queue backend depth", _key("backend_depth")),
    Family(CHANNEL, "message_count", "Queue message count", _key("message_count")),
    Family(CHANNEL, "in_flight_count", "In flight count", _key("in_flight_count")),
    Family(CHANNEL, "e2e_latency_99p", "e2e latency 99th percentile", _percentile(0)),
    Family(CHANNEL, "e2e_latency_95p", "e2e latency 95th percentile", _percentile(1)),
    Family(CHANNEL, "deferred_count", "Deferred count", _key("deferred_count")),
    Family(CHANNEL, "requeue_count", "Requeue Count", _key("requeue_count")),
    Family(CHANNEL, "timeout_count", "Timeout count", _key("timeout_count")),
)


def label_names(layout: str, scope: str) -> list[str]:
    """The label names of a ``scope`` series, sorted as client_golang writes them:
    channel, paused, topic (2.x: no type) / channel, paused, topic, type (1.0.x)."""
    names = [TOPIC, "paused"] + ([CHANNEL] if scope == CHANNEL else [])
    if layout == "nsq_exporter_v1":
        names.append("type")
    return sorted(names)


def family_names(layout: str) -> set[str]:
    """Every family name ``layout`` exposes (empty for "" = off)."""
    if not layout:
        return set()
    return {f.full_name(layout) for f in FAMILIES}


def _labels(layout: str, topic: dict[str, Any], channel: dict[str, Any] | None) -> list[str]:
    values = {TOPIC: topic["topic_name"]}
    if channel is None:
        values["paused"] = "true" if topic["paused"] else "false"
        values["type"] = TOPIC
    else:
        values[CHANNEL] = channel["channel_name"]
        values["paused"] = "true" if channel["paused"] else "false"
        values["type"] = CHANNEL
    return [values[n] for n in label_names(layout, CHANNEL if channel else TOPIC)]


def collect(nsqd: NSQD, layout: str) -> Iterator[Metric]:
    """The families of ``layout`` for the daemon's topics and channels now (see the module
    docstring); nothing when ``layout`` is empty."""
    if not layout:
        return
    skip_ephemeral = nsqd.opts.metrics_exclude_ephemeral
    topics, _ = get_stats(nsqd, include_clients=False)
    out: dict[str, GaugeMetricFamily] = {}
    for f in FAMILIES:
        name = f.full_name(layout)
        if name not in out:  # 1.0.x: one family for the topic and the channel gauge
            out[name] = GaugeMetricFamily(name, f.help, labels=label_names(layout, f.scope))
    topic_rows = [f for f in FAMILIES if f.scope == TOPIC]
    channel_rows = [f for f in FAMILIES if f.scope == CHANNEL]
    for t in topics or ():
        if skip_ephemeral and t["topic_name"].endswith(_EPHEMERAL):
            continue
        tl = _labels(layout, t, None)
        for f in topic_rows:
            _add(out[f.full_name(layout)], layout, TOPIC, tl, f.value(t))
        for c in t["channels"]:
            if skip_ephemeral and c["channel_name"].endswith(_EPHEMERAL):
                continue
            cl = _labels(layout, t, c)
            for f in channel_rows:
                _add(out[f.full_name(layout)], layout, CHANNEL, cl, f.value(c))
    yield from out.values()


def _add(fam: GaugeMetricFamily, layout: str, scope: str, values: list[str], v: float) -> None:
    """One sample; its own label names (a 1.0.x family mixes topic and channel series)."""
    fam.samples.append(Sample(fam.name, dict(zip(label_names(layout, scope), values)), v))
