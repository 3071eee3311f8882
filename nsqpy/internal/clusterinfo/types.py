"""The cluster's records, built from the JSON the daemons answer (Go's internal/clusterinfo
types.go and the pure half of data.go).

Strategy: pure functions from decoded JSON dicts (lookupd's /nodes and /lookup, nsqd's /info
and /stats?format=json) to the records nsqadmin 1.3's API answers and nsq_stat prints, with
Go's field order and Go's aggregation rules (TopicStats.Add, ChannelStats.Add,
E2eProcessingLatencyAggregate.Add, GetLookupdProducers' merge by TCP address, out_of_date by
version). No sockets, no asyncio: data.py fetches, this module aggregates, and nsqpy-admin's
API and pages and the tools read the result. See docs/architecture-clusterinfo.md.

Records are plain dicts in the shape nsqadmin's JSON has them (types.go):
  producer info (an nsqd as lookupd or nsqd describes it; Go's clusterinfo.Producer):
            remote_addresses, remote_address, hostname, broadcast_address, tcp_port,
            http_port, version, topics [{topic, tombstoned}], out_of_date
  topic stats: node, hostname, topic_name, depth, memory_depth, backend_depth, message_count,
            nodes, channels, paused, e2e_processing_latency
  channel stats: node, hostname, topic_name, channel_name, depth, memory_depth,
            backend_depth, in_flight_count, deferred_count, requeue_count, timeout_count,
            message_count, client_count, nodes, clients, paused, e2e_processing_latency
  client stats: node, remote_address, version, client_id, hostname, user_agent, connect_ts,
            connected (ns), in_flight_count, ready_count, finish_count, requeue_count,
            message_count, sample_rate, deflate, snappy, authed, auth_identity,
            auth_identity_url, tls, tls_cipher_suite, tls_version, tls_negotiated_protocol,
            tls_negotiated_protocol_is_mutual
  nsqpy-d's dead letters add max_attempts and dead_letter_count to the channel stats of the
            channels that have them on (after e2e_processing_latency; absent elsewhere)
One deliberate difference: Go's TopicStats.Add reuses the first node's channel object as the
cluster-wide channel (so that node's own row is lost from "nodes"); here the cluster-wide
channel of a topic is built as /api/topics/:topic/:channel builds it (node "*", every node)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from ..netaddr import join_host_port, split_host_port_lenient

#: An nsqd as lookupd or nsqd describes it (Go's clusterinfo.Producer): see the module text.
ProducerInfo = dict[str, Any]
#: A topic, channel or client stats record: see the module text.
Stats = dict[str, Any]


class UpstreamError(Exception):
    """Every daemon asked failed ("failed to query any nsqd: ..."): nsqadmin's 502
    UPSTREAM_ERROR."""


def err_list(errors: Iterable[str]) -> str:
    """clusterinfo.ErrList.Error(): the errors joined by newlines."""
    return "\n".join(errors)


def all_failed(kind: str, errors: list[str]) -> UpstreamError:
    """The error Go returns when every nsqd (``kind`` "nsqd") or nsqlookupd failed."""
    return UpstreamError(f"failed to query any {kind}: {err_list(errors)}")


# ---------------------------------------------------------------------------- versions

_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def version_key(version: str) -> tuple[int, int, int, int, str]:
    """A sort key for a semver string (blang/semver order; an unparsable one is 0.0.0)."""
    m = _SEMVER.match(version or "")
    if not m:
        return (0, 0, 0, 1, "")
    pre = m.group(4) or ""
    # a pre-release sorts before its release
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if pre else 1, pre)


# ---------------------------------------------------------------------------- producers


def http_address(p: ProducerInfo) -> str:
    """Producer.HTTPAddress(): broadcast_address:http_port ("[v6]:port" for IPv6)."""
    return join_host_port(str(p.get("broadcast_address", "")), int(p.get("http_port", 0)))


def tcp_address(p: ProducerInfo) -> str:
    """Producer.TCPAddress(): broadcast_address:tcp_port."""
    return join_host_port(str(p.get("broadcast_address", "")), int(p.get("tcp_port", 0)))


def producer_from_lookupd(d: dict[str, Any]) -> ProducerInfo:
    """A lookupd /nodes or /lookup entry as a ProducerInfo (topics paired with their
    tombstone flags; /lookup entries have no topics: null)."""
    topics = d.get("topics") or []
    tombstones = d.get("tombstones") or []
    pt = [
        {"topic": t, "tombstoned": bool(tombstones[i]) if i < len(tombstones) else False}
        for i, t in enumerate(topics)
    ]
    return {
        "remote_addresses": None,
        "remote_address": d.get("remote_address", ""),
        "hostname": d.get("hostname", ""),
        "broadcast_address": d.get("broadcast_address", ""),
        "tcp_port": int(d.get("tcp_port") or 0),
        "http_port": int(d.get("http_port") or 0),
        "version": d.get("version", ""),
        "topics": pt or None,
        "out_of_date": False,
    }


def producer_from_nsqd(info: dict[str, Any], topics: list[str], addr: str) -> ProducerInfo:
    """GetNSQDProducers/GetNSQDTopicProducers: a ProducerInfo from nsqd's /info and the topic
    names of its /stats; a missing broadcast address or hostname falls back to ``addr``'s host
    (and its port for the HTTP port), as nsqadmin does for old nsqds."""
    host, port = split_host_port_lenient(addr)
    broadcast = info.get("broadcast_address") or ""
    http_port = int(info.get("http_port") or 0)
    if not broadcast:
        broadcast = host
        http_port = port
    return {
        "remote_addresses": None,
        "remote_address": "",
        "hostname": info.get("hostname") or host,
        "broadcast_address": broadcast,
        "tcp_port": int(info.get("tcp_port") or 0),
        "http_port": http_port,
        "version": info.get("version", ""),
        "topics": [{"topic": t, "tombstoned": False} for t in topics] or None,
        "out_of_date": False,
    }


def merge_lookupd_nodes(answers: list[tuple[str, dict[str, Any]]]) -> list[ProducerInfo]:
    """GetLookupdProducers: the nodes of every lookupd's /nodes answer (``(lookupd address,
    body)`` pairs, in the order the lookupds are configured), one producer per TCP address with
    ``remote_addresses`` "lookupd/remote" for each lookupd that knows it, topics sorted,
    ``out_of_date`` when its version is older than the newest seen; sorted by hostname (then
    HTTP address, so equal hostnames keep a stable order)."""
    by_addr: dict[str, ProducerInfo] = {}
    order: list[ProducerInfo] = []
    newest = version_key("0.0.0")
    for lookupd_addr, body in answers:
        for entry in body.get("producers") or []:
            p = producer_from_lookupd(entry)
            key = tcp_address(p)
            seen = by_addr.get(key)
            if seen is None:
                if p["topics"]:
                    p["topics"].sort(key=lambda t: t["topic"])
                p["remote_addresses"] = []
                by_addr[key] = seen = p
                order.append(p)
                newest = max(newest, version_key(p["version"]))
            remote = p["remote_address"] or "N/A"
            seen["remote_addresses"].append(f"{lookupd_addr}/{remote}")
    for p in order:
        p["out_of_date"] = version_key(p["version"]) < newest
    order.sort(key=lambda p: (p["hostname"], http_address(p)))
    return order


def merge_topic_producers(answers: list[dict[str, Any]]) -> list[ProducerInfo]:
    """GetLookupdTopicProducers: the producers of every lookupd's /lookup answer, the first
    seen per HTTP address, in the order seen."""
    out: list[ProducerInfo] = []
    seen: set[str] = set()
    for body in answers:
        for entry in body.get("producers") or []:
            p = producer_from_lookupd(entry)
            addr = http_address(p)
            if addr not in seen:
                seen.add(addr)
                out.append(p)
    return out


def union_sorted(lists: Iterable[Iterable[str] | None]) -> list[str]:
    """stringy.Uniq then sort.Strings: every name once, sorted."""
    names: set[str] = set()
    for names_list in lists:
        names.update(names_list or ())
    return sorted(names)


def find_producer(producers: list[ProducerInfo], node: str) -> ProducerInfo | None:
    """Producers.Search: the producer whose HTTP address is ``node``."""
    for p in producers:
        if http_address(p) == node:
            return p
    return None


# ---------------------------------------------------------------------------- e2e latency


def e2e_from_nsqd(d: dict[str, Any] | None) -> Stats:
    """nsqd's e2e_processing_latency as nsqadmin decodes it into an
    E2eProcessingLatencyAggregate: each percentile gains min, max and average (its value) and
    count (the stream's count); topic, channel and host are what the JSON has (nsqd sends
    none: "", as Go's answers show for each node's row)."""
    d = d or {}
    count = int(d.get("count") or 0)
    percentiles = []
    for p in d.get("percentiles") or []:
        q = dict(p)
        q["min"] = q["max"] = q["average"] = float(q.get("value", 0.0))
        q["count"] = float(count)
        percentiles.append(dict(sorted(q.items())))  # a Go map: encoded with sorted keys
    return {
        "count": count,
        "percentiles": percentiles or None,
        "topic": str(d.get("topic") or ""),
        "channel": str(d.get("channel") or ""),
        "host": str(d.get("host") or ""),
    }


def e2e_add(agg: Stats, other: Stats | None) -> None:
    """E2eProcessingLatencyAggregate.Add: merge ``other`` into ``agg`` per quantile (max of
    maxes, running average weighted by count), host becomes "*", highest percentile first."""
    agg["host"] = "*"
    if other is None:
        return
    agg["count"] += other.get("count", 0)
    mine: list[dict[str, float]] = agg["percentiles"] or []
    for value in other.get("percentiles") or []:
        slot = next((p for p in mine if p.get("quantile") == value.get("quantile")), None)
        if slot is None:
            slot = {"quantile": value.get("quantile", 0.0)}
            mine.append(slot)
        slot["max"] = max(value.get("max", 0.0), slot.get("max", 0.0))
        # Go takes the min of the two *max* values here; kept for the same answers.
        slot["min"] = min(value.get("max", 0.0), slot.get("max", 0.0))
        slot["count"] = slot.get("count", 0.0) + value.get("count", 0.0)
        if slot["count"] == 0:
            slot["average"] = 0.0
            continue
        delta = value.get("average", 0.0) - slot.get("average", 0.0)
        slot["average"] = slot.get("average", 0.0) + delta * value.get("count", 0.0) / slot["count"]
    # Go sorts on a "percentile" key no entry has: the order stays as added
    mine.sort(key=lambda p: p.get("percentile", 0.0), reverse=True)
    agg["percentiles"] = [dict(sorted(p.items())) for p in mine] or None  # Go maps


# ---------------------------------------------------------------------------- nsqd stats


def client_from_nsqd(c: dict[str, Any], node: str, now: float | None = None) -> Stats:
    """One client of nsqd's /stats as nsqadmin's ClientStats; ``connected`` is nanoseconds
    since connect_ts, measured from ``now`` (Unix seconds, default the clock) truncated to a
    second as nsqadmin does."""
    now_s = int(time.time() if now is None else now)
    connect_ts = int(c.get("connect_ts") or 0)
    return {
        "node": node,
        "remote_address": c.get("remote_address", ""),
        "version": c.get("version", ""),
        "client_id": c.get("client_id", ""),
        "hostname": c.get("hostname", ""),
        "user_agent": c.get("user_agent", ""),
        "connect_ts": connect_ts,
        "connected": (now_s - connect_ts) * 1_000_000_000,
        **_counts(
            c,
            "in_flight_count",
            "ready_count",
            "finish_count",
            "requeue_count",
            "message_count",
            "sample_rate",
        ),
        "deflate": bool(c.get("deflate")),
        "snappy": bool(c.get("snappy")),
        "authed": bool(c.get("authed")),
        "auth_identity": c.get("auth_identity", ""),
        "auth_identity_url": c.get("auth_identity_url", ""),
        "tls": bool(c.get("tls")),
        "tls_cipher_suite": c.get("tls_cipher_suite", ""),
        "tls_version": c.get("tls_version", ""),
        "tls_negotiated_protocol": c.get("tls_negotiated_protocol", ""),
        "tls_negotiated_protocol_is_mutual": bool(c.get("tls_negotiated_protocol_is_mutual")),
    }


#: A channel row's counters taken as they are from nsqd's /stats (in the row's key order).
_CHANNEL_COUNTERS = (
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)


def _counts(c: dict[str, Any], *keys: str) -> dict[str, int]:
    """Counters of an nsqd /stats object, in the order of ``keys``: ints, 0 where missing or
    null (Go's zero value)."""
    return {k: int(c.get(k) or 0) for k in keys}


def _channel_from_nsqd(
    c: dict[str, Any], node: str, hostname: str, topic: str, now: float | None
) -> Stats:
    depth = int(c.get("depth") or 0)
    backend = int(c.get("backend_depth") or 0)
    clients = c.get("clients")
    row = {
        "node": node,
        "hostname": hostname,
        "topic_name": topic,
        "channel_name": c.get("channel_name", ""),
        "depth": depth,
        "memory_depth": depth - backend,
        "backend_depth": backend,
        **_counts(c, *_CHANNEL_COUNTERS),
        "nodes": None,
        "clients": None if clients is None else [client_from_nsqd(x, node, now) for x in clients],
        "paused": bool(c.get("paused")),
        "e2e_processing_latency": e2e_from_nsqd(c.get("e2e_processing_latency")),
    }
    if "max_attempts" in c:  # nsqpy-d's dead letters, where they are on (Go's nsqd: never)
        row["max_attempts"] = int(c.get("max_attempts") or 0)
        row["dead_letter_count"] = int(c.get("dead_letter_count") or 0)
    return row


def node_topic_stats(
    body: dict[str, Any],
    node: str,
    hostname: str,
    selected_topic: str = "",
    now: float | None = None,
) -> list[Stats]:
    """The topics of one nsqd's /stats?format=json answer as nsqadmin's per-node TopicStats
    (node = its HTTP address, memory_depth = depth - backend_depth, channels likewise, clients
    tagged with the node); only ``selected_topic`` when given. A pre-1.0 {"data": ...}
    envelope is unwrapped. A replicated topic's ``replication`` object (nsqpy-d with
    --etcd-endpoints) is kept as it is; other topics' rows have no such key, as in nsqadmin."""
    if "topics" not in body and isinstance(body.get("data"), dict):
        body = body["data"]
    out = []
    for t in body.get("topics") or []:
        name = t.get("topic_name", "")
        if selected_topic and name != selected_topic:
            continue
        depth = int(t.get("depth") or 0)
        backend = int(t.get("backend_depth") or 0)
        channels = t.get("channels")
        row: Stats = {
            "node": node,
            "hostname": hostname,
            "topic_name": name,
            "depth": depth,
            "memory_depth": depth - backend,
            "backend_depth": backend,
            "message_count": int(t.get("message_count") or 0),
            "nodes": None,
            "channels": None
            if channels is None
            else [_channel_from_nsqd(c, node, hostname, name, now) for c in channels],
            "paused": bool(t.get("paused")),
            "e2e_processing_latency": e2e_from_nsqd(t.get("e2e_processing_latency")),
        }
        repl = t.get("replication")
        if isinstance(repl, dict):  # nsqpy-d's replicated topics only (docs/replication.md)
            row["replication"] = repl
        out.append(row)
    return out


def _by_host(s: Stats) -> tuple[str, str]:
    return (s.get("hostname", ""), s.get("node", ""))


def new_channel_total(topic: str, channel: str, node: str = "*") -> Stats:
    """An empty cluster-wide ChannelStats, to Add node rows to."""
    return {
        "node": node,
        "hostname": "",
        "topic_name": topic,
        "channel_name": channel,
        "depth": 0,
        "memory_depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "message_count": 0,
        "client_count": 0,
        "nodes": None,
        "clients": None,
        "paused": False,
        "e2e_processing_latency": None,
    }


_CHANNEL_SUMS = ("depth", "memory_depth", "backend_depth", *_CHANNEL_COUNTERS)


def channel_add(total: Stats, a: Stats) -> None:
    """ChannelStats.Add: sums, paused if any node is, the node row appended (sorted by host),
    e2e merged, clients gathered (sorted by hostname)."""
    total["node"] = "*"
    for k in _CHANNEL_SUMS:
        total[k] += a[k]
    if "max_attempts" in a:  # nsqpy-d's dead letters: the largest budget, the letters summed
        total["max_attempts"] = max(total.get("max_attempts", 0), a["max_attempts"])
        total["dead_letter_count"] = total.get("dead_letter_count", 0) + a["dead_letter_count"]
    if a["paused"]:
        total["paused"] = True
    _add_node(total, a, total["channel_name"])
    if a.get("clients"):
        total["clients"] = sorted(
            [*(total["clients"] or []), *a["clients"]], key=lambda c: c["hostname"]
        )


def new_topic_total(topic: str) -> Stats:
    """An empty cluster-wide TopicStats, to Add node rows to."""
    return {
        "node": "",
        "hostname": "",
        "topic_name": topic,
        "depth": 0,
        "memory_depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "nodes": None,
        "channels": None,
        "paused": False,
        "e2e_processing_latency": None,
    }


def topic_add(total: Stats, a: Stats) -> None:
    """TopicStats.Add: sums, paused if any node is, each channel merged into the cluster-wide
    channel of its name (see the module comment), the node row appended (sorted by host)."""
    total["node"] = "*"
    for k in ("depth", "memory_depth", "backend_depth", "message_count"):
        total[k] += a[k]
    if a["paused"]:
        total["paused"] = True
    channels: list[Stats] = total["channels"] or []
    for ch in a.get("channels") or []:
        agg = next((c for c in channels if c["channel_name"] == ch["channel_name"]), None)
        if agg is None:
            agg = new_channel_total(total["topic_name"], ch["channel_name"])
            channels.append(agg)
        channel_add(agg, ch)
    total["channels"] = channels or None
    _add_node(total, a, "")


def _add_node(total: Stats, a: Stats, channel: str) -> None:
    """What TopicStats.Add and ChannelStats.Add share: the node row ``a`` appended to
    ``total``'s (sorted by host), its e2e percentiles merged into the total's (made empty for
    ``channel`` at the first row)."""
    total["nodes"] = sorted([*(total["nodes"] or []), a], key=_by_host)
    if total["e2e_processing_latency"] is None:
        total["e2e_processing_latency"] = {
            "count": 0,
            "percentiles": None,
            "topic": total["topic_name"],
            "channel": channel,
            "host": total["node"],
        }
    e2e_add(total["e2e_processing_latency"], a.get("e2e_processing_latency"))


def aggregate_topic(topic: str, node_topics: list[Stats]) -> Stats:
    """/api/topics/:topic's TopicStats: every node's row of ``topic`` added up."""
    total = new_topic_total(topic)
    for t in node_topics:
        if t["topic_name"] == topic:
            topic_add(total, t)
    return total


def aggregate_channels(node_topics: list[Stats], selected_topic: str = "") -> dict[str, Stats]:
    """GetNSQDStats' channel map: cluster-wide ChannelStats keyed by channel name when
    ``selected_topic`` is given, else by "topic:channel"."""
    out: dict[str, Stats] = {}
    for t in node_topics:
        for ch in t.get("channels") or []:
            name = ch["channel_name"]
            key = name if selected_topic else f"{t['topic_name']}:{name}"
            agg = out.get(key)
            if agg is None:
                agg = out[key] = new_channel_total(t["topic_name"], name, node=ch["node"])
            channel_add(agg, ch)
    return out


def prometheus_plain_samples(text: str) -> dict[str, float]:
    """The samples without labels of a Prometheus text exposition ("name value [ts]" lines),
    by name; comments and labelled samples are skipped, unparsable values too."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "{" in line:
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        try:
            out[parts[0]] = float(parts[1])
        except ValueError:
            continue
    return out
