"""This node's part in one replicated topic: its role and what it keeps for it (node.py sets
them, local.py, progress.py and tcp_publish.py read them).

Roles: ``leader`` (the topic record names this node under its current lease: a LeaderStream),
``follower`` (in the placement: a ReplicaLog) or ``none``. Design notes:
docs/architecture-replication.md."""

from __future__ import annotations

import asyncio

from .coordinator import TopicState
from .forward import Forwarder
from .leader_stream import LeaderStream
from .replica_log import ReplicaLog

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"


class TopicRole:
    """This node's part in one replicated topic: ``state`` (record + etcd revision), ``role``,
    the LeaderStream while leader, the ReplicaLog once follower, the Forwarder when not
    leading, ``promoted`` (entries put into the topic at promotions), ``redelivered`` (of
    those, puts into channels the progress record named and did not show finished), ``high``
    (minting node id -> highest message ID put into the topic, progress.py),
    ``progress_sent`` (rounds a follower took) and the progress sender task while leader,
    ``failovers`` (records seen naming a new leader in a later epoch than one this node knew
    led) and ``min_isr_refused`` (publishes this node refused as leader while the ISR was
    below --min-isr)."""

    __slots__ = (
        "failovers",
        "forwarder",
        "held",
        "high",
        "min_isr_refused",
        "progress_sent",
        "progress_task",
        "promoted",
        "redelivered",
        "resets",
        "rlog",
        "role",
        "state",
        "stream",
        "trimmed",
    )

    def __init__(self, state: TopicState) -> None:
        self.state = state
        self.role = NONE
        self.stream: LeaderStream | None = None
        self.rlog: ReplicaLog | None = None
        self.forwarder: Forwarder | None = None
        self.promoted = 0
        self.resets = 0  # times a newer leader emptied this node's copy (_reset_topic)
        self.trimmed = 0  # replica-log entries dropped as finished everywhere (local.trim_log)
        #: The history and entries of the stream this node led last, while no other node
        #: has led since (it may be elected again: they stay its history then).
        self.held: list[bytes] = []
        self.redelivered = 0
        self.high: dict[int, int] = {}
        self.progress_sent = 0
        self.progress_task: asyncio.Task[None] | None = None
        self.failovers = 0
        self.min_isr_refused = 0

    def note_refused(self, min_isr: int) -> None:
        """A publish was answered "not acknowledged": counted in ``min_isr_refused`` when this
        node leads the topic with its ISR below ``min_isr`` (--min-isr)."""
        if self.role == LEADER and len(self.state.record.isr) < min_isr:
            self.min_isr_refused += 1
