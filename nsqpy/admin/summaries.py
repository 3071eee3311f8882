"""What nsqadmin's handlers compute from the cluster-info records (nsqadmin/http.go).

Strategy: pure functions over the records nsqpy.internal.clusterinfo.types builds: the warning
text of a partial answer (maybeWarnMsg), /api/counter's per-node message counts and
/api/nodes/:node's totals. The cluster-info layer gathers and adds up; this module only shapes
what one nsqadmin page or answer shows, so nsq_stat and nsq_to_file never load it."""

from __future__ import annotations

from ..internal.clusterinfo.types import Stats


def warn_message(messages: list[str]) -> str:
    """maybeWarnMsg: "" when nothing failed, else "WARNING: " + messages joined by "; "."""
    return "WARNING: " + "; ".join(messages) if messages else ""


def counter_stats(channels: dict[str, Stats]) -> dict[str, Stats]:
    """/api/counter's "stats": one entry per topic, channel and node, keyed
    "topic:channel:node", with that node's message_count for the channel."""
    out: dict[str, Stats] = {}
    for ch in channels.values():
        for row in ch.get("nodes") or []:
            key = f"{ch['topic_name']}:{ch['channel_name']}:{row['node']}"
            entry = out.setdefault(
                key,
                {
                    "node": row["node"],
                    "topic_name": ch["topic_name"],
                    "channel_name": ch["channel_name"],
                    "message_count": 0,
                },
            )
            entry["message_count"] += row["message_count"]
    return out


def node_totals(node_topics: list[Stats]) -> tuple[int, int]:
    """/api/nodes/:node's (total_messages, total_clients): the topics' message counts and the
    channels' client lists."""
    messages = sum(t["message_count"] for t in node_topics)
    clients = sum(len(c.get("clients") or []) for t in node_topics for c in t.get("channels") or [])
    return messages, clients
