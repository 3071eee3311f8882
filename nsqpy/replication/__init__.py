"""Replicated topics: the coordination layer through etcd and the data path.

Opt-in: without ``--etcd-endpoints`` no code here runs (server.py imports node.py,
tcp_publish.py and http_routes.py only then). Modules: etcd_gateway.py (etcd client),
records.py (keys, records, placement, compares), session.py (lease, fencing deadline),
coordinator.py (topic records: create, elect, ISR, watches) - the coordination layer;
node.py (this nsqpy-d's membership and roles, publishing, promotion at failover), role.py
(this node's part in one topic), broker.py (the daemon as replication sees it), entries.py
(the stream's entries and names), replica_log.py (a follower's log), link.py (a leader's
sender to one follower, sans-IO), leader_stream.py (the leader's stream, commit point and
high watermark; rejoining), progress.py (channel-progress rounds, ``/replica/progress``, and
the filtered promotion), local.py (this node's copy: replica log queue, reset, /stats),
forward.py (publishes made on a non-leader) - the data path; tcp_publish.py (PUB, MPUB, DPUB
through the protocol core's PublishReplication) and http_routes.py (the HTTP routes) - the
transports.

The design (what etcd holds, epochs and fencing, the stream, the high watermark, channel
progress, failover, rejoining) is in docs/replication.md; the modules and their seams in
docs/architecture-replication.md."""

from __future__ import annotations

from .coordinator import (
    Contended,
    Coordinator,
    Fenced,
    Member,
    NodeChange,
    NoEligibleLeader,
    TopicChange,
    TopicMissing,
    TopicState,
)
from .etcd_gateway import EtcdClient, EtcdError, EtcdUnavailable, WatchCompacted
from .records import (
    Keys,
    NodeInfo,
    NotEnoughNodes,
    RecordError,
    ReplicationError,
    TopicRecord,
    choose_leader,
    choose_placement,
    default_root,
)
from .session import LeaseClock, NodeIdTaken, NodeSession

__all__ = [
    "Contended",
    "Coordinator",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailable",
    "Fenced",
    "Keys",
    "LeaseClock",
    "Member",
    "NoEligibleLeader",
    "NodeChange",
    "NodeIdTaken",
    "NodeInfo",
    "NodeSession",
    "NotEnoughNodes",
    "RecordError",
    "ReplicationError",
    "TopicChange",
    "TopicMissing",
    "TopicRecord",
    "TopicState",
    "WatchCompacted",
    "choose_leader",
    "choose_placement",
    "default_root",
]
