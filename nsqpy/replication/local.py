"""This node's own copy of a replicated topic: the replica log's DiskQueue, whether
the local topic holds messages of an earlier leadership, emptying it at a reset, the
``replication`` object of the topic's /stats, and the words of a refused publish. Free
functions over the daemon's objects, so that node.py's Replication keeps the roles and the
coordination only.

Replica log files: ``<data-path>/<topic>#replica.diskqueue.*`` (go-diskqueue's format, with
nsqd's record sizes plus entries.ENTRY's header); '#' cannot appear in a topic name except in
"#ephemeral", so "<topic>#replica" names no topic's or channel's queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..diskqueue import FramedDiskQueue
from ..topic import Topic, TopicError
from . import progress
from .broker import Broker
from .entries import ENTRY, MAX_RETAINED, RECORD_HEADER, entry_name
from .replica_log import ReplicaLog
from .role import LEADER, TopicRole

if TYPE_CHECKING:
    from .coordinator import Coordinator
    from .session import NodeSession

log = logging.getLogger("nsqpy.replication")

#: The replica log's DiskQueue name is the topic's plus this.
LOG_SUFFIX = "#replica"
#: Most entries one progress round trims from a follower's replica log (a round a second:
#: well above what a second of replicated publishing appends), in slices of TRIM_SLICE with
#: the event loop served between them (a slice is a few milliseconds).
TRIM_PER_ROUND = 200_000
TRIM_SLICE = 2_000


def log_queue(nsqd: Broker, topic: str) -> FramedDiskQueue:
    """The DiskQueue of ``topic``'s replica log in ``nsqd``'s data path, sized as the daemon's
    backends (--max-bytes-per-file, --max-msg-size plus the entry header, --sync-every,
    --sync-timeout)."""
    o = nsqd.opts
    hs = ENTRY.size + RECORD_HEADER
    return FramedDiskQueue(
        topic + LOG_SUFFIX,
        nsqd.data_path,
        o.max_bytes_per_file,
        hs,
        o.max_msg_size + hs,
        o.sync_every,
        o.sync_timeout_ms,
        logger=log,
    )


def put_committed(
    nsqd: Broker, tr: TopicRole, plain: list[bytes], deferred: list[tuple[bytes, int]]
) -> bool:
    """The leader stream's on_commit (--replica-ack=all-isr, the high watermark): committed
    records into the topic of node.TopicRole ``tr``, in seq order, one put_many and a
    put_deferred per DPUB record (delay in ms), then one flush; the highest IDs noted for the
    progress rounds. False when the put failed (their publishers are refused)."""
    name = tr.state.record.topic
    try:
        t = nsqd.get_topic(name)
        if plain:
            t.put_many(plain)
        for r, d in deferred:
            t.put_deferred(r, d)
    except (TopicError, OSError) as exc:
        log.error("REPLICATION: topic %s: committed messages not put: %s", name, exc)
        return False
    nsqd.flush_backends()
    progress.note_records(tr.high, plain, deferred)
    return True


def new_history(held: list[bytes], drained: list[bytes]) -> list[bytes]:
    """A new leader's history (leader_stream.py "Rejoining"): ``held`` (what it led last, when no
    other node led since; entries named before the first drained one) then ``drained`` (what
    it drained from its replica log at this promotion); the last MAX_RETAINED entries."""
    if drained and held:
        first = entry_name(drained[0])
        held = [e for e in held if entry_name(e) < first]
    history = held + drained if held else drained
    return history[-MAX_RETAINED:]


def trim_log(
    rlog: ReplicaLog,
    record: dict[str, progress.ChannelProgress | None] | None,
    limit: int = TRIM_PER_ROUND,
) -> int:
    """A follower's replica log (replica_log.ReplicaLog ``rlog``) loses the entries at its front
    that every channel of the progress ``record`` (progress.ProgressStore.load: channel ->
    ChannelProgress, or None for a channel whose progress is unknown) finished; nothing when
    there is no record or a channel is unknown. Returns how many entries went."""
    channels = [c for c in (record or {}).values() if c is not None]
    if not channels or len(channels) != len(record or {}):
        return 0
    guid_of = progress.guid_of

    def finished(rec: bytes) -> bool:
        g = guid_of(rec)
        return all(c.finished(g) for c in channels)

    return rlog.trim(finished, limit)


def trim_slices(
    tr: TopicRole,
    rlog_now: Callable[[], ReplicaLog | None],
    record: Callable[[], dict[str, progress.ChannelProgress | None] | None],
) -> asyncio.Task[None]:
    """A task trimming a follower's replica log after a progress round (trim_log), in slices
    of TRIM_SLICE entries with the event loop served between them, at most TRIM_PER_ROUND;
    ``rlog_now()`` gives the log, or None once this node leads or the log was replaced (the
    task then stops); ``record()`` the topic's progress record. Counts ``tr.trimmed``; an
    OSError is logged."""

    async def run() -> None:
        topic = tr.state.record.topic
        try:
            for _ in range(TRIM_PER_ROUND // TRIM_SLICE):
                rlog = rlog_now()
                if rlog is None:
                    return
                n = trim_log(rlog, record(), TRIM_SLICE)
                tr.trimmed += n
                if n < TRIM_SLICE:
                    return
                await asyncio.sleep(0)
        except OSError as exc:
            log.error("REPLICATION: topic %s: trimming the replica log: %s", topic, exc)

    return asyncio.get_running_loop().create_task(run())


def drop_copy(nsqd: Broker, rlog: ReplicaLog | None, topic: str) -> None:
    """A replicated topic was deleted: this node's topic (if any) is deleted as /topic/delete
    deletes it, and its replica log (replica_log.ReplicaLog or None) closed and removed, with its
    ``.last`` file."""
    if topic in nsqd.topics:
        nsqd.delete_existing_topic(topic)
    if rlog is not None:
        rlog.close()
        rlog.dq.delete()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(nsqd.data_path, f"{topic}{LOG_SUFFIX}.last"))


def has_log(nsqd: Broker, topic: str) -> bool:
    """Is there a replica log of ``topic`` on disk (its diskqueue meta file), opened or not?"""
    meta = os.path.join(nsqd.data_path, f"{topic}{LOG_SUFFIX}.diskqueue.meta.dat")
    return os.path.exists(meta)


def leave_placement(
    nsqd: Broker, rlog: ReplicaLog, store: progress.ProgressStore, topic: str
) -> None:
    """This node was placed off ``topic`` (placement.py): its replica log ``rlog`` goes (closed
    and removed, with its ``.last`` file) and the progress kept for it in ``store``; its topic
    stays, with whatever it still holds for consumers connected here (a former leader's)."""
    with contextlib.suppress(OSError):
        rlog.close()
        rlog.dq.delete()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(nsqd.data_path, f"{topic}{LOG_SUFFIX}.last"))
    store.forget(topic)
    log.info("REPLICATION: topic %s: this node left its placement", topic)


def dirty(t: Topic | None, tr: TopicRole | None) -> bool:
    """Does this node's own copy ``t`` of a replicated topic (None: none) hold messages while
    this node does not lead it (node.TopicRole ``tr``, None: no record)? Only an earlier
    leadership of this node put them there (a follower's topic gets nothing until it is
    promoted)."""
    if t is None or (tr is not None and tr.role == LEADER):
        return False
    return holds_messages(t)


def holds_messages(t: Topic) -> bool:
    """Does topic ``t`` (or a channel of it) hold a message: queued, in flight or deferred?"""
    return bool(
        t.depth or any(c.depth or c.in_flight or c.deferred for c in list(t.channels.values()))
    )


def empty_topic(t: Topic) -> int:
    """Empty topic ``t`` and its channels; returns how many messages were dropped."""
    dropped = t.depth
    t.empty()
    for c in list(t.channels.values()):
        dropped += c.depth + len(c.in_flight) + len(c.deferred)
        c.empty()
    return int(dropped)


def role_stats(tr: TopicRole, rlog: ReplicaLog | None, progress_received: int) -> dict[str, Any]:
    """The ``replication`` object of a replicated topic's /stats entry (node.TopicRole ``tr``,
    its ReplicaLog ``rlog`` or None): the record (replicas, placement, leader, isr, epoch),
    this node's role, ``lag`` (entries the slowest in-sync follower has not acknowledged),
    ``followers`` (on the leader: node id -> {"lag": entries not acknowledged, "in_isr": bool,
    "lag_seconds": seconds since it last acknowledged while entries were pending for it, 0
    when caught up}, for every linked placement node, catching-up ones included),
    ``replica_log_depth``, the counters (promoted, redelivered, progress_sent,
    progress_received, undelivered, resets, trimmed: replica-log entries dropped as finished
    on every channel, failovers: new leaders seen, min_isr_refused: publishes refused as
    leader with the ISR below --min-isr)."""
    rec = tr.state.record
    lag = 0
    followers: dict[str, dict[str, Any]] = {}
    s = tr.stream
    if s is not None:
        now = time.monotonic()
        for node, lk in s.links.items():
            behind = s.next_seq - lk.acked
            since = lk.behind_since
            followers[node] = {
                "lag": behind,
                "in_isr": bool(lk.in_isr),
                "lag_seconds": round(now - since, 3) if since else 0,
            }
            if lk.in_isr:
                lag = max(lag, behind)
    return {
        "replicas": rec.replicas,
        "placement": list(rec.placement),
        "leader": rec.leader,
        "isr": list(rec.isr),
        "epoch": rec.epoch,
        "role": tr.role,
        "lag": lag,
        "followers": followers,
        "replica_log_depth": rlog.dq.depth if rlog is not None else 0,
        "promoted": tr.promoted,
        "redelivered": tr.redelivered,
        "progress_sent": tr.progress_sent,
        "progress_received": progress_received,
        "undelivered": s.dropped if s is not None else 0,
        "resets": tr.resets,
        "trimmed": tr.trimmed,
        "failovers": tr.failovers,
        "min_isr_refused": tr.min_isr_refused,
    }


def refusal(
    session: NodeSession | None,
    coordinator: Coordinator | None,
    tr: TopicRole | None,
    topic: str,
    min_isr: int,
) -> str:
    """Why a publish to ``topic`` on this node was not acknowledged, the words of its
    E_PUB_FAILED (HTTP 503 PUB_FAILED); the node's session, coordinator, the topic's role
    (None: no record) and --min-isr. This node's etcd lease in doubt (NodeSession.refusal),
    else (not the leader) the leader's own words (Forwarder.refused), else leadership lost,
    else the ISR below --min-isr, else the in-sync replicas' silence."""
    why = session.refusal() if session is not None else "not joined to etcd"
    if why or tr is None:
        return why or "not acknowledged"
    if tr.role != LEADER:
        fwd = tr.forwarder
        if fwd is not None and fwd.refused:
            return f"refused by the leader: {fwd.refused}"
        return "not acknowledged by the leader"
    rec = tr.state.record
    if session is None or coordinator is None or not coordinator.may_acknowledge(tr.state):
        return f"this node no longer leads {topic} (epoch {rec.epoch})"
    if len(rec.isr) < min_isr:
        return f"in-sync replicas {','.join(rec.isr)} fewer than --min-isr={min_isr}"
    return "not acknowledged by the in-sync replicas"
