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
transports. Design notes: docs/architecture-replication.md.

Client
------
etcd 3.4 (Debian's etcd-server) through its v3 JSON gateway with aiohttp (etcd_gateway.py):
aiohttp is already an nsqpy dependency and native asyncio, the gateway serves every RPC used here
(range, put, txn, lease grant/keepalive/revoke, watch), and nothing needs gRPC or a compiler.
aetcd (asyncio over gRPC) would add grpcio and protobuf for the same calls; etcd3gw speaks the
same gateway synchronously, which an event loop cannot afford.

What etcd holds
---------------
Under one root per cluster, ``/nsqpy/<cluster>/`` (records.default_root; configurable):

``<root>nodes/<node_id>``
    ``{"v":1,"node_id":"n1","tcp":"127.0.0.1:4150","http":"127.0.0.1:4151","tags":{}}``,
    written under the node's lease (session.NodeSession): the key exists exactly while the lease
    is alive, so the key set is the live membership and the key's lease id says *which* life of
    the node it is (a node that restarts gets a new lease).
``<root>topics/<topic>``
    ``{"v":1,"topic":"t","replicas":3,"placement":["a","b","c"],"leader":"a",
    "leader_lease":"7587869…","isr":["a","b","c"],"epoch":1}`` (records.TopicRecord): R, the
    placement (R node ids), the leader and the lease it was elected under, the in-sync replicas
    (leader first) and the epoch. No lease: it outlives every node.

Values are UTF-8 JSON objects with sorted keys and no spaces; "v" is the layout version and a
reader refuses one it does not know. Lease ids are decimal strings (int64, as etcd prints them).

Epochs and fencing
------------------
Every leader change is one transaction that writes epoch + 1 and compares (coordinator.py) that
the record is at the revision read (so at the epoch read: two candidates cannot both win), that
the old leader's node key no longer holds ``leader_lease`` (its lease lapsed on the server) and
that the candidate's key holds the lease written into the record. ISR changes keep the epoch and
compare the same revision plus the leader's own lease, so a deposed leader's ISR update fails
(:class:`Fenced`). etcd only expires a lease TTL after the last keepalive it processed, and an
election needs that expiry first; the leader counts the TTL from when it *sent* its last
successful keepalive, on its monotonic clock, minus a margin (session.LeaseClock), so its
``may_acknowledge()`` turns False before any other node can be elected in its place.

What the data path does with it (node.py says what is not done yet)
-------------------------------------------------------------------
- nsqpy-d with ``--etcd-endpoints`` makes a :class:`NodeSession` (``join()`` at start,
  ``leave()`` at exit) and a :class:`Coordinator`, and runs ``run_failover()`` and
  ``watch_topics()``.
- ``/topic/create?topic=T&replicas=R`` (or ``--replicas``) calls ``create_topic(T, R)``; every
  node learns the record from ``watch_topics()`` and the placed nodes open the topic as leader
  or follower of its epoch.
- The leader appends each PUB/MPUB/DPUB and streams it to the followers tagged with its epoch;
  followers refuse records of an older epoch. It answers OK once the ISR has the record durable
  *and* ``may_acknowledge(state)`` is True; a follower lagging past the bound is dropped with
  ``shrink_isr`` and re-admitted with ``expand_isr`` once caught up, across leader changes too
  (leader_stream.py "Rejoining"). A :class:`Fenced` answer means it was deposed: it stops
  acknowledging; rejoining, its own copy of the topic (its unacknowledged tail included) is
  emptied and its replica log rebuilt from the new leader's history.
- Producers on a follower are forwarded to ``record.leader``; only the leader registers the
  topic's channels with nsqlookupd.
"""

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
