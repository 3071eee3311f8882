"""nsqpy-d's replication: this node's membership, the topic records it follows, its role per
topic (leader, follower, none) and the data path of replicated topics. docs/replication.md
explains failover, channel progress and rejoining.

Made only with ``--etcd-endpoints``. ``run()`` joins etcd (NodeSession: node id =
str(--node-id)) and runs three loops: the topic watch (Coordinator.watch_topics, applied by
:meth:`Replication.apply`), the failover loop (Coordinator.run_failover) and the membership
watch (node id -> HTTP address). ``close()`` stops them and revokes the lease.

A leader keeps a LeaderStream (leader_stream.py) per epoch; a follower keeps a ReplicaLog
(replica_log.py); both open the local topic. Publishes elsewhere are forwarded (forward.py).
Only the leader registers the topic and its channels with nsqlookupd (:meth:`registers`). A
follower elected leader promotes its replica log into the topic's channels, filtered by the
last progress record (:meth:`_promote`, progress.py), keeps what it drained as its stream's
history (:meth:`_history`), and links every other placement node; a rejoining node that is
dirty is reset (:meth:`_reset_topic`), a clean one is caught up, and both are re-admitted to
the ISR (:meth:`_change_isr`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ..internal.aiotasks import cancel_and_wait
from ..topic import Topic, TopicError
from . import local, progress
from .broker import Broker
from .coordinator import Coordinator, Fenced, TopicState
from .courier import Courier
from .etcd_gateway import EtcdClient, EtcdError
from .forward import Forwarder
from .leader_stream import LeaderStream
from .local import LOG_SUFFIX
from .records import Keys, NodeInfo, ReplicationError, default_root
from .replica_log import ReplicaLog
from .role import FOLLOWER, LEADER, NONE, TopicRole
from .session import NodeSession

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("nsqpy.replication")

RETRY_DELAY = 0.5


class Replication:
    """See the module docstring. ``topics``: topic name -> TopicRole for every record known."""

    def __init__(self, nsqd: Broker) -> None:
        """``nsqd``: the daemon (nsqd.NSQD, seen through broker.Broker)."""
        self.nsqd = nsqd
        o = nsqd.opts
        self.opts = o
        self.node_id = str(o.node_id)
        self.endpoints = [e.strip() for e in o.etcd_endpoints.split(",") if e.strip()]
        self.keys = Keys(default_root(o.etcd_cluster))
        self.ack_all = o.replica_ack == "all-isr"
        self.timeout = o.replica_timeout_ms / 1000.0
        self.topics: dict[str, TopicRole] = {}
        self.logs: dict[str, ReplicaLog] = {}
        self.couriers: dict[str, Courier] = {}  # follower node id -> its courier
        self.trimming: set[str] = set()  # topics whose replica log a _trim task works on
        self.members: dict[str, str] = {}  # node id -> HTTP address
        #: node id -> TCP address: the replication stream's (courier.py, stream_server.py)
        self.stream_members: dict[str, str] = {}
        #: Topics that stay R=1 on this node: those it had before joining, and explicit
        #: /topic/create?replicas=1 ones.
        self.local_only: set[str] = set()
        self.client: EtcdClient | None = None
        self.session: NodeSession | None = None
        self.coordinator: Coordinator | None = None
        self.http: aiohttp.ClientSession | None = None
        self.progress = progress.ProgressStore(nsqd.data_path)
        self.progress.sweep()
        self.rounds = progress.Rounds(self)
        self.joined = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._side: set[asyncio.Future[Any]] = set()

    # ------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Join (retrying while etcd is unreachable), then run the loops until cancelled."""
        import aiohttp

        nsqd = self.nsqd
        self.local_only.update(n for n in nsqd.topics if n not in self.topics)
        self.http = aiohttp.ClientSession()
        self.client = EtcdClient(self.endpoints)
        tcp = nsqd.tcp_address
        http = nsqd.http_address
        bcast = self.opts.broadcast_address
        info = NodeInfo(
            self.node_id,
            tcp=f"{bcast}:{tcp[1]}" if tcp else "",
            http=f"{bcast}:{http[1]}" if http else "",
        )
        self.session = NodeSession(self.client, self.keys, info, ttl=self.opts.etcd_lease_ttl)
        while True:
            try:
                lease = await self.session.join()
                break
            except ReplicationError as exc:
                log.error("REPLICATION: cannot join etcd %s: %s", self.endpoints, exc)
                await asyncio.sleep(RETRY_DELAY)
        self.coordinator = Coordinator(self.session)
        log.info("REPLICATION: node %s joined (lease %x)", self.node_id, lease)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._watch_members()),
            loop.create_task(self._watch_topics()),
            loop.create_task(self.coordinator.run_failover()),
            loop.create_task(self._watch_lease()),
        ]
        self.joined.set()
        await asyncio.gather(*self._tasks)

    async def close(self) -> None:
        leading = [tr for tr in self.topics.values() if tr.role == LEADER and tr.stream]
        if leading:  # a clean exit: the followers get the channels' last progress
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.gather(*(self.rounds.round(tr) for tr in leading)),
                    self.timeout,
                )
        await cancel_and_wait([*self._tasks, *self._side])
        for tr in self.topics.values():
            if tr.stream is not None:
                tr.stream.close(False)
            if tr.forwarder is not None:
                tr.forwarder.close()
        for c in self.couriers.values():
            c.close()
        for rlog in self.logs.values():
            with contextlib.suppress(OSError):
                rlog.close()
        if self.session is not None:
            await self.session.leave()
        if self.client is not None:
            await self.client.close()
        if self.http is not None:
            await self.http.close()

    def courier(self, node: str) -> Courier:
        """The courier of follower ``node``: every topic this node leads sends its appends to
        ``node`` through it (courier.py)."""
        c = self.couriers.get(node)
        if c is None:
            c = self.couriers[node] = Courier(
                node,
                lambda n: self.members.get(n, ""),
                self.timeout,
                lambda n: self.stream_members.get(n, ""),
            )
        return c

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Future[Any] = asyncio.ensure_future(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _watch_members(self) -> None:
        assert self.coordinator is not None
        while True:
            try:
                async for ch in self.coordinator.watch_members():
                    if ch.member is None:
                        self.members.pop(ch.node_id, None)
                        self.stream_members.pop(ch.node_id, None)
                    else:
                        self.members[ch.node_id] = ch.member.info.http
                        self.stream_members[ch.node_id] = ch.member.info.tcp
            except EtcdError as exc:
                log.warning("REPLICATION: member watch: %s", exc)
                await asyncio.sleep(RETRY_DELAY)

    async def _watch_topics(self) -> None:
        assert self.coordinator is not None
        while True:
            try:
                async for ch in self.coordinator.watch_topics():
                    self.apply(ch.topic, ch.state)
            except EtcdError as exc:
                log.warning("REPLICATION: topic watch: %s", exc)
                await asyncio.sleep(RETRY_DELAY)

    async def _watch_lease(self) -> None:
        """The lease expired on the server: step down everywhere, join again as a new member."""
        session = self.session
        assert session is not None
        while True:
            await session.lost.wait()
            log.error("REPLICATION: lease lost: stepping down, joining again")
            for tr in self.topics.values():
                if tr.role == LEADER:
                    self._step_down(tr)
            while True:
                try:
                    await session.rejoin()
                    break
                except ReplicationError as exc:
                    log.error("REPLICATION: rejoin failed: %s", exc)
                    await asyncio.sleep(RETRY_DELAY)

    # ------------------------------------------------------------ records and roles

    def registers(self, topic: str) -> bool:
        """Does this node register ``topic`` (and its channels) with nsqlookupd? Yes unless
        the topic is replicated and another node leads it."""
        tr = self.topics.get(topic)
        return tr is None or tr.role == LEADER

    def wants_record(self, topic: str) -> bool:
        """Should a publish to ``topic``, which has no record yet, create one first?"""
        return (
            self.opts.replicas > 1
            and topic not in self.local_only
            and not topic.endswith("#ephemeral")
        )

    async def ensure(self, topic: str, replicas: int) -> TopicRole:
        """The record of ``topic``, created with R=``replicas`` when absent; applied here at
        once (the watch brings it too). ReplicationError (NotEnoughNodes, EtcdError...)."""
        await asyncio.wait_for(self.joined.wait(), self.timeout * 5)
        assert self.coordinator is not None
        state, created = await self.coordinator.create_topic(topic, replicas)
        if created:
            log.info("REPLICATION: topic %s created: %s", topic, state.record.encode().decode())
        self.apply(topic, state)
        return self.topics[topic]

    def apply(self, topic: str, state: TopicState | None) -> None:
        """A record as read or watched: take this node's role in it."""
        tr = self.topics.get(topic)
        if state is None:  # the record was deleted (with the topic): drop this node's copy
            if tr is not None:
                self._step_down(tr)
                del self.topics[topic]
            local.drop_copy(self.nsqd, self.logs.pop(topic, None), topic)
            self.progress.forget(topic)
            return
        if tr is not None and tr.state.revision >= state.revision:
            return
        session = self.session
        assert session is not None
        rec = state.record
        old_epoch = tr.state.record.epoch if tr is not None else -1
        fresh = tr is None
        if tr is None:
            tr = self.topics[topic] = TopicRole(state)
        elif tr.state.record.leader and rec.leader != tr.state.record.leader:
            if rec.epoch > old_epoch:
                tr.failovers += 1
        tr.state = state
        rlog = self.logs.get(topic)
        if rlog is not None:
            rlog.fence(rec.epoch)
        if rec.leader == self.node_id and rec.leader_lease == session.lease_id:
            if tr.role == LEADER and tr.stream is not None and rec.epoch == old_epoch:
                tr.stream.set_links(self._followers(tr), self._others(tr))
                return
            if tr.role == LEADER:
                self._step_down(tr)
            self._lead(tr)
        else:
            if tr.role == LEADER:
                self._step_down(tr)
            if rec.leader != self.node_id:
                tr.held = []
            tr.role = FOLLOWER if self.node_id in rec.placement else NONE
            t = self.nsqd.topics.get(topic)
            lookup = self.nsqd.lookup
            if fresh and t is not None and lookup is not None:
                # made here before its record was known (a publish that made the record, an
                # MPUB's precheck, a SUB): registered then, so take that back
                lookup.unregister_topic(t)
            if tr.role == FOLLOWER:
                self.replica_log(topic)
                self.nsqd.get_topic(topic)
            elif topic in self.logs:  # placed off the topic (placement.py)
                local.leave_placement(self.nsqd, self.logs.pop(topic), self.progress, topic)

    def _followers(self, tr: TopicRole) -> list[str]:
        return [n for n in tr.state.record.isr if n != self.node_id]

    def _others(self, tr: TopicRole) -> list[str]:
        """The placement nodes out of the ISR: linked too, to catch up and rejoin it."""
        rec = tr.state.record
        return [n for n in rec.placement if n not in rec.isr and n != self.node_id]

    def _lead(self, tr: TopicRole) -> None:
        rec = tr.state.record
        topic = rec.topic
        tr.role = LEADER
        if tr.forwarder is not None:
            tr.forwarder.close()
            tr.forwarder = None
        existed = topic in self.nsqd.topics
        t = self.nsqd.get_topic(topic)
        self._promote(tr, t)
        rlog = self.logs.get(topic)
        tr.stream = LeaderStream(
            topic,
            rec.epoch,
            self.http,
            lambda node: self.members.get(node, ""),
            lambda: self.allowed(tr),
            lambda node: self._lagging(tr, node),
            self.timeout,
            lambda node: self._spawn(self._change_isr(tr, node, grow=True)),
            (lambda plain, deferred: local.put_committed(self.nsqd, tr, plain, deferred))
            if self.ack_all
            else None,
            courier_of=self.courier,
        )
        drained = rlog.take_retained() if rlog is not None else []
        held, tr.held = tr.held, []
        tr.stream.set_history(local.new_history(held, drained))
        tr.stream.set_links(self._followers(tr), self._others(tr))
        tr.progress_task = asyncio.get_running_loop().create_task(self.rounds.loop(tr))
        lookup = self.nsqd.lookup
        if lookup is not None and existed:
            lookup.register_topic(t)
        log.info("REPLICATION: topic %s: leader at epoch %d, isr %s", topic, rec.epoch, rec.isr)

    def _promote(self, tr: TopicRole, t: Topic) -> None:
        """Put every replica-log entry this node has not put into its topic yet, into the
        channels the last progress record does not show finished it (progress.Promotion)."""
        rlog = self.logs.get(t.name) or (
            self.replica_log(t.name) if local.has_log(self.nsqd, t.name) else None
        )
        record = self.progress.load(t.name)
        if rlog is None:
            self.progress.forget(t.name)
            return
        plan = progress.Promotion(t, record)
        n = 0
        while True:
            batch = rlog.drain()
            if not batch:
                break
            plan.put(batch)
            n += len(batch)
        progress.note_high(tr.high, plan.high)
        if n:
            self.nsqd.flush_backends()
            self._spawn(asyncio.get_running_loop().run_in_executor(None, rlog.sync_job()))
            tr.promoted += n
            tr.redelivered += plan.redelivered
            log.info(
                "REPLICATION: topic %s: %d replicated messages gone through, %d put into "
                "channels that may have delivered them (progress of %s)",
                t.name,
                n,
                plan.redelivered,
                sorted(record) if record else "no channel",
            )
        self.progress.forget(t.name)

    async def progress_received(self, topic: str, epoch: int, body: bytes) -> int:
        """POST /replica/progress on a follower: keep the round (side file written before the
        answer), then trim the replica log of what every channel finished (local.trim_log);
        returns the rounds taken for ``topic``. ValueError (bad body), StaleEpoch
        (older than an epoch seen), OSError (the file)."""
        rlog = self.logs.get(topic)
        tr = self.topics.get(topic)
        newest = max(
            rlog.min_epoch if rlog is not None else 0,
            tr.state.record.epoch if tr is not None else 0,
        )
        leading = tr is not None and tr.role == LEADER
        rounds = await self.progress.receive(topic, epoch, body, -1 if leading else newest)
        if rlog is not None and tr is not None and topic not in self.trimming:
            self.trimming.add(topic)
            job = local.trim_slices(
                tr,
                lambda: None if tr.role == LEADER or self.logs.get(topic) is not rlog else rlog,
                lambda: self.progress.load(topic),
            )
            self._spawn(job)
            job.add_done_callback(lambda _: self.trimming.discard(topic))
        return rounds

    def _step_down(self, tr: TopicRole) -> None:
        if tr.progress_task is not None:
            tr.progress_task.cancel()
            tr.progress_task = None
        if tr.stream is not None:
            s = tr.stream
            tr.held = s.history + s.entries
            s.close(False)
            tr.stream = None
        was_leader = tr.role == LEADER
        tr.role = NONE
        t = self.nsqd.topics.get(tr.state.record.topic)
        lookup = self.nsqd.lookup
        if was_leader and t is not None and lookup is not None:
            lookup.unregister_topic(t)

    def _lagging(self, tr: TopicRole, node: str) -> None:
        if node in tr.state.record.isr:
            self._spawn(self._change_isr(tr, node, grow=False))

    async def _change_isr(self, tr: TopicRole, node: str, grow: bool) -> None:
        """Add ``node`` to the topic's ISR in etcd (``grow``) or drop it; a Fenced answer
        (this node was deposed) steps down, another refusal is logged (a refused readmission
        leaves the follower catching up, retried when it is caught up)."""
        c = self.coordinator
        assert c is not None
        try:
            change = c.expand_isr if grow else c.shrink_isr
            state = await change(tr.state, node)
        except Fenced as exc:
            log.warning("REPLICATION: %s", exc)
            self._step_down(tr)
            return
        except ReplicationError as exc:
            what = "readmitting" if grow else "dropping"
            where = "" if grow else " from the isr"
            log.warning(
                "REPLICATION: topic %s: %s %s%s: %s", tr.state.record.topic, what, node, where, exc
            )
            stream = tr.stream
            link = stream.links.get(node) if grow and stream is not None else None
            if link is not None:
                link.in_isr = False  # catching up again; retried when it is caught up
            return
        log.info("REPLICATION: topic %s: isr now %s", state.record.topic, state.record.isr)
        self.apply(state.record.topic, state)

    def allowed(self, tr: TopicRole) -> bool:
        """May the leader acknowledge now: lease certainly alive, ISR at least --min-isr."""
        c = self.coordinator
        return (
            c is not None
            and tr.role == LEADER
            and c.may_acknowledge(tr.state)
            and len(tr.state.record.isr) >= self.opts.min_isr
        )

    # ------------------------------------------------------------ replica logs

    def replica_log(self, topic: str) -> ReplicaLog:
        rlog = self.logs.get(topic)
        if rlog is None:
            rlog = self.logs[topic] = ReplicaLog(
                topic,
                local.log_queue(self.nsqd, topic),
                os.path.join(self.nsqd.data_path, f"{topic}{LOG_SUFFIX}.last"),
                lambda: local.dirty(self.nsqd.topics.get(topic), self.topics.get(topic)),
                lambda epoch: self._reset_topic(topic, epoch),
                self.opts.replica_sync == "fsync",
            )
            tr = self.topics.get(topic)
            if tr is not None:
                rlog.fence(tr.state.record.epoch)
        return rlog

    def _reset_topic(self, topic: str, epoch: int) -> bool:
        """The leader of ``epoch`` resets this node's copy (replica log and topic): empty the
        topic and its channels (its own old data: every acknowledged message of it is on that
        leader). False (refused, the leader asks again) unless this node holds the record of
        that very epoch naming another leader: a reset is destructive, so it never follows a
        deposed leader that reached this node before the newer record did."""
        tr = self.topics.get(topic)
        if tr is None or tr.role == LEADER or tr.state.record.epoch != epoch:
            return False
        t = self.nsqd.topics.get(topic)
        if t is not None:
            log.warning(
                "REPLICATION: topic %s: %d messages of this node's own dropped (a deposed "
                "leader's data: the leader's history replaces it)",
                topic,
                local.empty_topic(t),
            )
        tr.resets += 1
        return True

    # ------------------------------------------------------------ publishing

    def replicate(
        self, tr: TopicRole, records: list[bytes], delay_ms: int = 0
    ) -> bool | asyncio.Future[bool]:
        """Leader: stream ``records`` (all-isr: put into the topic once committed; leader:
        already in the local topic). Returns a future answered True/False (all-isr), or a
        bool at once (--replica-ack=leader, or no stream)."""
        stream = tr.stream
        if stream is None:
            return False
        end = stream.append(records, delay_ms)
        if not self.ack_all:
            return self.allowed(tr)
        return stream.commit_waiter(end)

    def publish(
        self, tr: TopicRole, name: str, bodies: list[bytes], delay_ms: int
    ) -> bool | asyncio.Future[bool]:
        """Publish ``bodies`` to the replicated topic ``name``: on its leader into the stream
        (records made here) and into the local topic once committed (all-isr: the high
        watermark, local.put_committed) or at once (leader: as for R=1, put and flush_backends);
        elsewhere to the leader. Returns a bool or a future of one (True: acknowledged).
        Raises TopicError (the topic is being deleted) / OSError from a local put."""
        if tr.role != LEADER:
            return self.forward(tr, bodies, delay_ms)
        nsqd = self.nsqd
        topic = nsqd.get_topic(name)
        if topic.exiting:
            raise TopicError("exiting")
        records = [nsqd.new_record(bodies[0])] if delay_ms else nsqd.new_records(bodies)
        if not self.ack_all:
            if delay_ms:
                topic.put_deferred(records[0], delay_ms)
                progress.note_records(tr.high, [], [(records[0], delay_ms)])
            else:
                topic.put_many(records)
                progress.note_records(tr.high, records, [])
            nsqd.flush_backends()
        return self.replicate(tr, records, delay_ms)

    async def delete_topic(self, topic: str) -> None:
        """/topic/delete of a replicated topic: its record goes from etcd, and every node,
        this one at once, drops its copy (:meth:`apply` with None). EtcdError."""
        assert self.coordinator is not None
        await self.coordinator.delete_topic(topic)
        self.apply(topic, None)

    async def publish_http(self, name: str, bodies: list[bytes], delay_ms: int) -> bool:
        """HTTP /pub and /mpub of a replicated topic (or one to be made so): True once
        acknowledged. ReplicationError / TimeoutError when the record cannot be made,
        TopicError / OSError from the local put."""
        tr = self.topics.get(name)
        if tr is None:
            tr = await self.ensure(name, self.opts.replicas)
        answer = self.publish(tr, name, bodies, delay_ms)
        ok = answer if isinstance(answer, bool) else bool(await answer)
        if not ok:
            tr.note_refused(self.opts.min_isr)
        return ok

    def forward(
        self, tr: TopicRole, bodies: list[bytes], delay_ms: int = 0
    ) -> asyncio.Future[bool]:
        """Not the leader: a future answered True once the leader acknowledged ``bodies``."""
        fwd = tr.forwarder
        if fwd is None:
            topic = tr.state.record.topic
            fwd = tr.forwarder = Forwarder(
                topic, self.http, lambda: self._leader_http(topic), self.timeout * 5
            )
        return fwd.submit(bodies, delay_ms)

    def _leader_http(self, topic: str) -> str:
        tr = self.topics.get(topic)
        if tr is None or not tr.state.record.leader or tr.role == LEADER:
            return ""
        return self.members.get(tr.state.record.leader, "")

    # ------------------------------------------------------------ /stats

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        """The topic's /stats ``replication`` object (local.role_stats); None for a topic with
        no record."""
        tr = self.topics.get(topic)
        if tr is None:
            return None
        received = self.progress.rounds.get(topic, 0)
        return local.role_stats(tr, self.logs.get(topic), received)
