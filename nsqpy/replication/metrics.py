"""Prometheus families of replicated topics (``nsq_replication_*`` on GET /metrics).

Strategy: read at scrape time from what /stats' per-topic ``replication`` object holds
(node.Replication.topic_stats, local.role_stats): one pass over the topic records this node
knows, nothing counted on the publish path for Prometheus. Only with --etcd-endpoints (the
collector in nsqpy/metrics.py calls :func:`collect` only when replication runs). Every node
serves every topic record it knows, with this node's view: the record facts (replicas, ISR,
epoch) are the same on all nodes, ``is_leader``, ``in_isr`` and the counters are this node's,
and the per-follower families come from the leader only (it alone streams to followers).

Families (label ``topic``; per follower also ``follower``, the follower's node id):

- ``nsq_replication_replicas``: placement size R; ``nsq_replication_isr``: in-sync replicas
  (leader included); ``nsq_replication_min_isr``: this node's --min-isr (per topic, so that
  ``nsq_replication_isr < nsq_replication_min_isr`` matches series one to one)
- ``nsq_replication_is_leader``, ``nsq_replication_in_isr``: 1/0 for this node
- ``nsq_replication_epoch``: the record's epoch
- ``nsq_replication_replica_log_depth``: entries in this node's replica log
- ``nsq_replication_follower_lag_entries{topic, follower}``: entries the follower has not
  acknowledged; ``nsq_replication_follower_lag_seconds{topic, follower}``: seconds since it
  last acknowledged while entries were pending for it (0 when caught up; it grows while a
  follower is stalled or down); ``nsq_replication_follower_in_isr{topic, follower}``: 1/0
- counters (``_total``): ``promoted`` (replica-log entries put into the topic at
  promotions), ``redelivered`` (of those, puts into channels that may have had them),
  ``trimmed`` (replica-log entries dropped as finished everywhere), ``failovers`` (new
  leaders seen in later epochs), ``min_isr_refused`` (publishes refused as leader with the
  ISR below --min-isr), ``resets`` (times a newer leader emptied this node's copy),
  ``progress_sent`` / ``progress_received`` (channel-progress rounds)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["COUNTERS", "NAMES", "collect"]

_TOPIC = ["topic"]
_FOLLOWER = ["topic", "follower"]

#: Counter families: (name without ``nsq_replication_`` and ``_total``, /stats key, help).
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("promoted", "promoted", "Replica-log entries put into the topic when this node was promoted"),
    (
        "redelivered",
        "redelivered",
        "Promoted entries put into channels that may already have delivered them",
    ),
    ("trimmed", "trimmed", "Replica-log entries dropped as finished on every channel"),
    ("failovers", "failovers", "New leaders of the topic this node saw elected"),
    (
        "min_isr_refused",
        "min_isr_refused",
        "Publishes this node refused as leader while the ISR was below --min-isr",
    ),
    ("resets", "resets", "Times a newer leader emptied this node's copy of the topic"),
    ("progress_sent", "progress_sent", "Channel-progress rounds sent to followers"),
    ("progress_received", "progress_received", "Channel-progress rounds taken from a leader"),
)

#: Every sample name :func:`collect` writes (alert rules are checked against it).
NAMES: frozenset[str] = frozenset(
    [
        f"nsq_replication_{n}"
        for n in (
            "replicas",
            "isr",
            "min_isr",
            "is_leader",
            "in_isr",
            "epoch",
            "replica_log_depth",
            "follower_lag_entries",
            "follower_lag_seconds",
            "follower_in_isr",
        )
    ]
    + [f"nsq_replication_{name}_total" for name, _, _ in COUNTERS]
)


def collect(repl: Any) -> Iterator[Metric]:
    """The families for every topic record ``repl`` (replication.node.Replication) knows."""
    g = GaugeMetricFamily
    p = "nsq_replication_"
    replicas = g(p + "replicas", "Placement size of the topic (R)", labels=_TOPIC)
    isr = g(p + "isr", "In-sync replicas of the topic, leader included", labels=_TOPIC)
    min_isr = g(p + "min_isr", "This node's --min-isr", labels=_TOPIC)
    leader = g(p + "is_leader", "1 when this node leads the topic", labels=_TOPIC)
    in_isr = g(p + "in_isr", "1 when this node is in the topic's ISR", labels=_TOPIC)
    epoch = g(p + "epoch", "Epoch of the topic's record", labels=_TOPIC)
    depth = g(p + "replica_log_depth", "Entries in this node's replica log", labels=_TOPIC)
    f_lag = g(
        p + "follower_lag_entries",
        "Entries the follower has not acknowledged (on the leader)",
        labels=_FOLLOWER,
    )
    f_secs = g(
        p + "follower_lag_seconds",
        "Seconds since the follower last acknowledged while entries were pending for it "
        "(0 when caught up; on the leader)",
        labels=_FOLLOWER,
    )
    f_isr = g(p + "follower_in_isr", "1 when the follower is in the ISR", labels=_FOLLOWER)
    counters = [
        (CounterMetricFamily(p + name, help, labels=_TOPIC), key) for name, key, help in COUNTERS
    ]
    node = repl.node_id
    mine = repl.opts.min_isr
    for topic in sorted(repl.topics):
        r = repl.topic_stats(topic)
        if r is None:
            continue
        tl = [topic]
        replicas.add_metric(tl, r["replicas"])
        isr.add_metric(tl, len(r["isr"]))
        min_isr.add_metric(tl, mine)
        leader.add_metric(tl, 1 if r["role"] == "leader" else 0)
        in_isr.add_metric(tl, 1 if node in r["isr"] else 0)
        epoch.add_metric(tl, r["epoch"])
        depth.add_metric(tl, r["replica_log_depth"])
        for follower, f in sorted(r["followers"].items()):
            fl = [topic, follower]
            f_lag.add_metric(fl, f["lag"])
            f_secs.add_metric(fl, f["lag_seconds"])
            f_isr.add_metric(fl, 1 if f["in_isr"] else 0)
        for fam, key in counters:
            fam.add_metric(tl, r[key])
    yield from (replicas, isr, min_isr, leader, in_isr, epoch, depth, f_lag, f_secs, f_isr)
    for fam, _ in counters:
        yield fam
