"""Replicated topics through etcd (nsqpy's own, opt-in): the coordination layer and the data
path. The design (what etcd holds, epochs and fencing, the stream, the high watermark, channel
progress, failover, rejoining) is in docs/replication.md.

Without ``--etcd-endpoints`` no code here runs (nsqd.NSQD imports node.py only then).

Coordination: etcd_gateway.py (etcd 3.4's v3 JSON gateway over aiohttp), records.py (keys,
records, placement, compares), session.py (the node's lease and the leader's fencing deadline),
coordinator.py (topic records: create, elect, ISR changes, watches).

Data path: node.py (this nsqpy-d's membership and roles, publishing, promotion at failover),
stream.py (leader stream, high watermark, follower replica log, rejoining; ``/replica/append``),
progress.py (channel-progress rounds, ``/replica/progress``, filtered promotion), local.py
(this node's copy: replica log queue, reset, /stats), forward.py (publishes made on a node
that does not lead). The TCP handlers are protocol_v2.ReplicatedPublish, the HTTP ones
http_api's ``*_replicated``."""

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
