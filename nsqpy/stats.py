"""/stats: the same JSON and text shapes as nsqd 1.3 (nsqd/stats.go, nsqd/http.go doStats), so
nsq_stat and nsqadmin read nsqpy-d unchanged.

Strategy: plain dicts built on request, keys in nsqd's order; Go's nil slices become JSON null
where nsqd's would. Memory figures come from Python's allocator and /proc (Go's heap figures
have no Python equivalent; the keys are kept so readers do not break). A replicated topic
(--etcd-endpoints) gets one more key, "replication": {"replicas", "leader", "isr", "epoch",
"role", "lag", "followers", "replica_log_depth", "promoted", ...} (replication/local.py
role_stats lists every key); no other topic does, so the shape of an R=1 node is nsqd's."""

from __future__ import annotations

import gc
import resource
import sys
import time
from typing import TYPE_CHECKING, Any, cast

from . import quantile
from .client_stats import Client, ClientStats
from .internal.gcpacer import pause_percentiles
from .internal.godur import format_go_duration_ms
from .internal.godur import format_go_duration_ns as go_duration_ns
from .internal.gotime import rfc3339
from .internal.netaddr import split_host_port
from .options import NSQ_VERSION, version_string

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

_EMPTY_E2E: dict[str, Any] = {"count": 0, "percentiles": None}


def client_stats(client: Client, topic_filter: str = "") -> dict[str, Any]:
    """One client as nsqd's ClientV2Stats (omitempty fields left out when empty), from its
    ``stats()`` record."""
    return _client_json(client.stats(), topic_filter)


def _client_json(s: ClientStats, topic_filter: str) -> dict[str, Any]:
    codec = s.codec
    d: dict[str, Any] = {
        "client_id": s.client_name,
        "hostname": s.hostname,
        "version": "V2",
        "remote_address": s.remote_address,
        "state": s.state,
        "ready_count": s.ready_count,
        "in_flight_count": s.in_flight_count,
        "message_count": s.message_count,
        "finish_count": s.finish_count,
        "requeue_count": s.requeue_count,
        "connect_ts": s.connect_ts,
        "sample_rate": s.sample_rate,
        "deflate": codec == "deflate",
        "snappy": codec == "snappy",
        "user_agent": s.user_agent,
    }
    if s.authed:  # authed, auth_identity*: omitempty
        d["authed"] = True
    if s.auth_identity:
        d["auth_identity"] = s.auth_identity
    if s.auth_identity_url:
        d["auth_identity_url"] = s.auth_identity_url
    pub = [
        {"topic": t, "count": n}
        for t, n in s.pub_counts.items()
        if not topic_filter or t == topic_filter
    ]
    if pub:
        # nsqd stops after the first topic its map yields (a `break` in ClientV2.Stats), so it
        # shows one random topic per producer; we list them all.
        d["pub_counts"] = pub
    d.update(
        {
            "tls": s.tls,
            "tls_cipher_suite": s.tls_cipher_suite,
            "tls_version": s.tls_version,
            "tls_negotiated_protocol": "",
            "tls_negotiated_protocol_is_mutual": False,
        }
    )
    return d


def channel_stats(ch: Channel, include_clients: bool, topic_filter: str) -> dict[str, Any]:
    members = cast("list[Client]", list(ch.clients.values()))
    clients = [client_stats(c, topic_filter) for c in members] if include_clients else None
    out = {
        "channel_name": ch.name,
        "depth": ch.depth,
        "backend_depth": ch.backend_depth,
        "in_flight_count": len(ch.in_flight),
        "deferred_count": len(ch.deferred),
        "message_count": ch.message_count,
        "requeue_count": ch.requeue_count,
        "timeout_count": ch.timeout_count,
        "client_count": len(ch.clients),
        "clients": clients,
        "paused": ch.paused,
        "e2e_processing_latency": dict(_EMPTY_E2E) if ch.e2e is None else ch.e2e.result(),
    }
    if ch.max_attempts:  # nsqpy's dead letters: only where they are on, so nsqd's shape stays
        out["max_attempts"] = ch.max_attempts
        out["dead_letter_count"] = ch.dead_letter_count
    return out


def topic_stats(t: Topic, channels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "topic_name": t.name,
        "channels": channels,
        "depth": t.depth,
        "backend_depth": t.backend_depth,
        "message_count": t.message_count,
        "message_bytes": t.message_bytes,
        "paused": t.paused,
        "e2e_processing_latency": topic_e2e(t),
    }


def topic_e2e(t: Topic) -> dict[str, Any]:
    """nsqd's AggregateChannelE2eProcessingLatency: every channel of the topic merged (whatever
    the channel filter), nil (count 0, percentiles null) when no channel tracks latency."""
    streams = [c.e2e for c in t.channels.values() if c.e2e is not None]
    if not streams:
        return dict(_EMPTY_E2E)
    return quantile.aggregate(streams, streams[0].percentiles)


def get_stats(
    nsqd: NSQD, topic: str = "", channel: str = "", include_clients: bool = True
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
    """(topics, producers) as nsqd's GetStats: sorted by name, filtered by topic/channel."""
    if topic:
        t = nsqd.topics.get(topic)
        if t is None:  # nsqd returns early here: no topics, no producers
            return None, None
        real_topics = [t]
    else:
        real_topics = sorted(nsqd.topics.values(), key=lambda x: x.name)
    topics = []
    repl = nsqd.replication
    for t in real_topics:
        if channel:
            ch = t.channels.get(channel)
            if ch is None:
                continue
            chans = [ch]
        else:
            chans = sorted(t.channels.values(), key=lambda x: x.name)
        ts = topic_stats(t, [channel_stats(c, include_clients, topic) for c in chans])
        if repl is not None:  # beyond nsqd: replicated topics only (replication/node.py)
            extra = repl.topic_stats(t.name)
            if extra is not None:
                ts["replication"] = extra
        topics.append(ts)
    return topics, (_producers(nsqd, topic) if include_clients else None)


def _producers(nsqd: NSQD, topic: str) -> list[dict[str, Any]] | None:
    clients: list[Client] = list(nsqd.clients.values())
    snapshots = [c.stats() for c in clients]
    out = [_client_json(s, topic) for s in snapshots if s.pub_counts]
    return out or None


def mem_stats() -> dict[str, Any]:
    """nsqd's memory keys, filled from CPython's allocator, gc and the process RSS."""
    rss = _rss_bytes()
    gc_runs = sum(s.get("collections", 0) for s in gc.get_stats())
    p100, p99, p95 = pause_percentiles()
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": rss,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": p100,
        "gc_pause_usec_99": p99,
        "gc_pause_usec_95": p95,
        "next_gc_bytes": 0,
        "gc_total_runs": gc_runs,
    }


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def stats_json(
    nsqd: NSQD, topic: str, channel: str, include_clients: bool, include_mem: bool
) -> dict[str, Any]:
    topics, producers = get_stats(nsqd, topic, channel, include_clients)
    d: dict[str, Any] = {
        "version": NSQ_VERSION,
        "health": nsqd.health,
        "start_time": nsqd.start_time,
        "topics": topics,
    }
    if include_mem:
        d["memory"] = mem_stats()
    d["producers"] = producers
    return d


def _client_line(c: dict[str, Any]) -> str:
    try:  # Go: _, port, _ := net.SplitHostPort(s.RemoteAddress) (a unix client: "")
        port = str(split_host_port(c["remote_address"])[1])
    except ValueError:
        port = ""
    ident = f"{c['hostname']}:{port} {c['user_agent']}"
    connected = format_go_duration_ms((int(time.time()) - c["connect_ts"]) * 1000)
    if c.get("pub_counts"):
        total = sum(p["count"] for p in c["pub_counts"])
        topics = ",".join(f"{p['topic']}={p['count']}" for p in c["pub_counts"])
        return (
            f"[{c['version']} {ident:<21}] msgs: {total:<8d} topics: {topics} "
            f"connected: {connected}"
        )
    return (
        f"[{c['version']} {ident:<21}] state: {c['state']} inflt: {c['in_flight_count']:<4d} "
        f"rdy: {c['ready_count']:<4d} fin: {c['finish_count']:<8d} "
        f"re-q: {c['requeue_count']:<8d} msgs: {c['message_count']:<8d} connected: {connected}"
    )


def stats_text(
    nsqd: NSQD, topic: str, channel: str, include_clients: bool, include_mem: bool
) -> str:
    """The plain-text /stats page, laid out as nsqd's printStats writes it (nsqd/http.go)."""
    topics, producers = get_stats(nsqd, topic, channel, include_clients)
    # nsqd measures uptime from its start instant; start_time is whole seconds here, so this is
    # the time since that second (start_time + uptime = now), printed at Go's precision.
    uptime_ns = time.time_ns() - nsqd.start_time * 1_000_000_000
    out = [
        f"{version_string()}\n",
        f"start_time {rfc3339(nsqd.start_time)}\n",
        f"uptime {go_duration_ns(uptime_ns)}\n",
        f"\nHealth: {nsqd.health}\n",
    ]
    if include_mem:
        out.append("\nMemory:\n")
        out += [f"   {k:<25}\t{v}\n" for k, v in mem_stats().items()]
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for t in topics or []:
        prefix = "*P " if t["paused"] else "   "
        out.append(
            f"\n{prefix}[{t['topic_name']:<15}] depth: {t['depth']:<5d} "
            f"be-depth: {t['backend_depth']:<5d} msgs: {t['message_count']:<8d} e2e%: "
            + quantile.result_text(t["e2e_processing_latency"])
            + "\n"
        )
        for c in t["channels"]:
            prefix = "   *P " if c["paused"] else "      "
            out.append(
                f"{prefix}[{c['channel_name']:<25}] depth: {c['depth']:<5d} "
                f"be-depth: {c['backend_depth']:<5d} inflt: {c['in_flight_count']:<4d} "
                f"def: {c['deferred_count']:<4d} re-q: {c['requeue_count']:<5d} "
                f"timeout: {c['timeout_count']:<5d} msgs: {c['message_count']:<8d} e2e%: "
                + quantile.result_text(c["e2e_processing_latency"])
                + "\n"
            )
            out += [f"        {_client_line(cl)}\n" for cl in c["clients"] or []]
    if not producers:
        out.append("\nProducers: None\n")
    else:
        out.append("\nProducers:\n")
        out += [f"   {_client_line(p)}\n" for p in producers]
    return "".join(out)
