"""This node's part in one replicated topic: its role and what it keeps for it (node.py sets
them, local.py, progress.py and tcp_publish.py read them).

Roles: ``leader`` (the topic record names this node under its current lease: a LeaderStream),
``follower`` (in the placement: a ReplicaLog) or ``none``. Design notes:
docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .coordinator import TopicState
from .forward import Forwarder
from .leader_stream import LeaderStream
from .replica_log import ReplicaLog

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"


@dataclass(eq=False, slots=True)
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

    state: TopicState
    role: str = NONE
    stream: LeaderStream | None = None
    rlog: ReplicaLog | None = None
    forwarder: Forwarder | None = None
    promoted: int = 0
    resets: int = 0  # times a newer leader emptied this node's copy (_reset_topic)
    trimmed: int = 0  # replica-log entries dropped as finished everywhere (local.trim_log)
    #: The history and entries of the stream this node led last, while no other node has led
    #: since (it may be elected again: they stay its history then).
    held: list[bytes] = field(default_factory=list)
    redelivered: int = 0
    high: dict[int, int] = field(default_factory=dict)
    progress_sent: int = 0
    progress_task: asyncio.Task[None] | None = None
    failovers: int = 0
    min_isr_refused: int = 0

    def note_refused(self, min_isr: int) -> None:
        """A publish was answered "not acknowledged": counted in ``min_isr_refused`` when this
        node leads the topic with its ISR below ``min_isr`` (--min-isr)."""
        if self.role == LEADER and len(self.state.record.isr) < min_isr:
            self.min_isr_refused += 1
