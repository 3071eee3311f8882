"""PUB, MPUB and DPUB of replicated topics on the TCP port: the protocol core's
PublishReplication (protocol_v2.py), attached by server.py with --etcd-endpoints only.

Strategy: the core stays sans-IO; everything here that waits does it through a future handed
to the connection (``Wait(WAIT_FUTURE, ...)``). The core reads the topic name and DPUB's delay
and authorizes; for a topic with a replication record (or one a first publish makes:
Replication.wants_record) it calls :meth:`TCPPublish.publish`, which hands the messages to
Replication.publish (node.py): into the local topic and its stream on the leader, forwarded to
the leader elsewhere. Its answer is a bool or a future of one: OK (ProtocolV2.published), or
nsqd's fatal E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED when not acknowledged, its text
saying why (local.refusal: the etcd lease in doubt, the ISR too small...). A first
publish to a topic with no record on a node with --replicas > 1 suspends while the record is
made (Replication.ensure), then runs again. One future per command; no task per message.

Pipelining. A connection may have up to MAX_PIPELINED replicated publishes waiting for their
commits at once (go-nsq's producer sends every concurrent publish over one connection): each
goes into the connection's :class:`PublishPipeline` and the parser goes on to the next command.
Answers keep the commands' order: the pipeline answers its publishes oldest first as their
futures complete, and any other command (an R=1 publish, NOP, FIN, RDY, SUB, ...) waits for
the pipeline to be empty (:meth:`TCPPublish.hold`), as does a publish that finds it full. A
publish not acknowledged closes the connection with its error after the answers of those
before it; the ones behind it get no answer (their producer retries: at-least-once, as for
any connection lost with publishes in flight). A connection's pipeline exists while it holds
publishes (``TCPPublish.pipelines``); the core keeps no replication state of its own.

Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from ..protocol_v2 import (
    CLOSE,
    SUSPEND,
    WAIT_FUTURE,
    ClientState,
    ProtocolV2,
    Publish,
    Wait,
)
from ..topic import TopicError
from ..wire import ClientError, FatalClientError
from . import local
from .node import Replication
from .role import TopicRole

#: Most replicated publishes one connection has waiting for their commits at once.
MAX_PIPELINED = 64

#: What a publish's future gave: True (acknowledged), False, or the exception it raised.
Answer = bool | BaseException
#: Finishes one pipelined publish with its answer; raises its ClientError.
Then = Callable[[Answer], int]


class TCPPublish:
    """The core's PublishReplication over ``repl`` (node.Replication); ``core`` is the daemon's
    ProtocolV2. ``pipelines``: connection -> its PublishPipeline, while it holds publishes."""

    __slots__ = ("core", "pipelines", "repl")

    def __init__(self, core: ProtocolV2, repl: Replication) -> None:
        self.core = core
        self.repl = repl
        self.pipelines: dict[ClientState, PublishPipeline] = {}

    def replicates(self, topic: str) -> bool:
        return topic in self.repl.topics or self.repl.wants_record(topic)

    def hold(self, c: ClientState, retry: Callable[[], int]) -> int:
        pipeline = self.pipelines.get(c)
        if pipeline is None or not pipeline.entries:
            return 0
        c.wait = Wait(WAIT_FUTURE, pipeline.until(0), lambda _: retry())
        return SUSPEND

    def publish(self, c: ClientState, pub: Publish, retry: Callable[[], int]) -> int:
        """A replicated publish (see the module docstring): its record made first when it has
        none, room in the pipeline, then Replication.publish. Each step that waits runs
        ``retry`` later."""
        repl = self.repl
        tr = repl.topics.get(pub.topic)
        if tr is None:
            return self._ensure(c, pub.topic, pub.cmd.failed, retry)
        pipeline = self.pipelines.get(c)
        if pipeline is not None and len(pipeline.entries) >= MAX_PIPELINED:
            c.wait = Wait(WAIT_FUTURE, pipeline.until(MAX_PIPELINED - 1), lambda _: retry())
            return SUSPEND
        return self._publish(c, tr, pub)

    def _publish(self, c: ClientState, tr: TopicRole, pub: Publish) -> int:
        cmd, name, bodies, delay = pub
        try:
            answer = self.repl.publish(tr, name, bodies, delay)
        except (TopicError, OSError) as e:
            raise FatalClientError(cmd.failed, f"{cmd.name} failed {e}") from None
        n = len(bodies)
        core = self.core
        repl = self.repl

        def then(ok: Answer) -> int:
            if ok is not True:
                # counted for /metrics (nsq_replication_min_isr_refused_total)
                tr.note_refused(repl.opts.min_isr)
                why = local.refusal(
                    repl.session, repl.coordinator, repl.topics.get(name), name, repl.opts.min_isr
                )
                raise FatalClientError(cmd.failed, f"{cmd.name} failed {why}")
            return core.published(c, name, n)

        pipeline = self.pipelines.get(c)
        if isinstance(answer, bool):
            if pipeline is None or not pipeline.entries:
                return then(answer)
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            done.set_result(answer)  # answered in its turn, after those before it
            fut: asyncio.Future[bool] = done
        else:
            fut = answer
        if pipeline is None:
            pipeline = self.pipelines[c] = PublishPipeline(core, c, self._emptied)
        pipeline.add(fut, then)
        return 0

    def _emptied(self, pipeline: PublishPipeline) -> None:
        if self.pipelines.get(pipeline.c) is pipeline:
            del self.pipelines[pipeline.c]

    def _ensure(self, c: ClientState, name: str, code: str, retry: Callable[[], int]) -> int:
        repl = self.repl
        job = asyncio.ensure_future(repl.ensure(name, repl.opts.replicas))

        def then(answer: TopicRole | BaseException) -> int:
            if isinstance(answer, BaseException) or name not in repl.topics:
                raise FatalClientError(code, f"{code[2:]} replicated topic: {answer}")
            return retry()

        c.wait = Wait(WAIT_FUTURE, job, then)
        return SUSPEND


class PublishPipeline:
    """One connection's replicated publishes waiting for their commits, oldest first (module
    docstring, "Pipelining"): ``entries`` of (future, then); ``then(answer)`` answers the
    command (ProtocolV2.published) or raises its ClientError. ``until(n)`` is a future
    answered once at most ``n`` entries wait (what a suspended command waits on);
    ``on_empty(self)`` is called whenever the last entry was answered."""

    __slots__ = ("c", "core", "entries", "limit", "on_empty", "waiter")

    def __init__(
        self,
        core: ProtocolV2,
        c: ClientState,
        on_empty: Callable[[PublishPipeline], None] | None = None,
    ) -> None:
        self.core = core
        self.c = c
        self.entries: deque[tuple[asyncio.Future[bool], Then]] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.limit = 0
        self.on_empty = on_empty

    def add(self, fut: asyncio.Future[bool], then: Then) -> None:
        self.entries.append((fut, then))
        fut.add_done_callback(self._done)

    def until(self, n: int) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self.entries) <= n or self.c.closed:
            waiter.set_result(None)
        else:
            self.waiter, self.limit = waiter, n
        return waiter

    def _done(self, _fut: asyncio.Future[bool]) -> None:
        entries = self.entries
        c = self.c
        act = 0
        while entries and entries[0][0].done():
            fut, then = entries.popleft()
            answer: Answer
            if fut.cancelled():
                answer = False
            else:
                exc = fut.exception()
                answer = fut.result() if exc is None else exc
            if c.closed:
                continue  # nobody to answer; the futures' exceptions are retrieved
            try:
                act |= then(answer)
            except ClientError as e:
                act |= self.core.error(c, e)
            if act & CLOSE:
                break
        if act & CLOSE:
            for fut, _ in entries:
                fut.remove_done_callback(self._done)
            entries.clear()
            c.close()
        elif not c.closed:
            # every answer this pass resolved is in ``out`` already (the commit point answers
            # all its waiters before any of these callbacks runs): written now, in one write
            c.flush()
        waiter = self.waiter
        if waiter is not None and (len(entries) <= self.limit or c.closed):
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)
        if not entries and self.on_empty is not None:
            self.on_empty(self)
