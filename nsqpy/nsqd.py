"""NSQD: the core owner, the registry of topics, channels and clients.

Strategy: one object owns the topics, the GUID factory, the connected clients and the health
string, and runs the queue-scan loop, the diskqueue sync loop and the registration with
nsqlookupd on one event loop. The transports (TCP, HTTP) call into it and server.py binds them
around it; it never imports a transport nor reaches into a socket. Topic and channel creation
and deletion bump ``channels_version`` (the queue scanner refreshes its sample set) and rewrite
nsqd.dat.

Two jobs live beside it, each an object it owns: ``storage`` (storage.py: the data directory
and its lock, nsqd.dat, the backends' flush and sync, the deferred journal; the topics' and
channels' StorageHooks) and ``dead_letters`` (dead_letter.py: per-channel max attempts and the
dead-letter topics).

Data directory (nsqd 1.3's layout, so Go nsqd and nsqpy-d can open each other's):
  nsqd.dat                                   JSON metadata: topics, channels, paused flags
  <topic>.diskqueue.*                        a topic's backend (go-diskqueue files)
  <topic>:<channel>.diskqueue.*              a channel's backend
  nsqpy.deferred.dat                         ours: the deferred-message journal (msgpack, see
                                             deferred_journal.py; nsqd forgets deferred messages)

Publishing to disk: a PUB/MPUB/DPUB whose messages went to a backend (or the deferred journal)
is answered only after those bytes were handed to the OS (flush_backends), so a crash of the
process (kill -9) loses no acknowledged message; fsync runs in a worker thread on --sync-every
/ --sync-timeout, as go-diskqueue syncs after the write it acknowledged.

Replicated topics (--etcd-endpoints): ``replication`` is a ReplicationService (server.py sets
nsqpy/replication's Replication there; this module never imports it), run with the loops and
closed before lookupd registration; it filters that registration (only a replicated topic's
leader registers it). Without the flag it is None and nothing changes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from . import wire
from .channel import Channel
from .client_stats import Client
from .dead_letter import DeadLetters
from .guid import GUIDFactory
from .internal.aiotasks import cancel_and_wait
from .lookup_peer import LookupPeers
from .message import fresh_header
from .options import Options
from .quantile import E2ELatency
from .queue_scan import QueueScanner
from .storage import DEFERRED_FILE, METADATA_FILE, DataDirLocked, Storage
from .topic import Topic, existing

__all__ = ["DEFERRED_FILE", "METADATA_FILE", "NSQD", "DataDirLocked"]

log = logging.getLogger("nsqpy")


class RegisteredClient(Client, Protocol):
    """A client in the registry (client_v2.Connection): its ``stats()`` and ``close()``, which
    nsqd's Client interface calls Stats and Exit (nsqd/client_v2.go)."""

    def close(self) -> None:
        """Close after writing what is buffered (shutdown)."""
        ...


class ReplicationService(Protocol):
    """Replicated topics as the daemon sees them (nsqpy/replication/node.py Replication, made
    by server.py with --etcd-endpoints only)."""

    def registers(self, topic: str) -> bool:
        """Does this node register ``topic`` (and its channels) with nsqlookupd?"""
        ...

    async def run(self) -> None:
        """Join the cluster and run until cancelled (one of the daemon's loops)."""
        ...

    async def close(self) -> None:
        """Leave the cluster (after the loops were cancelled)."""
        ...

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        """The topic's /stats ``replication`` object; None for a topic not replicated."""
        ...


class NSQD:
    """The daemon's state: ``topics`` by name, ``clients`` by id, options, health; its
    ``storage`` (storage.Storage) and ``dead_letters`` (dead_letter.DeadLetters)."""

    def __init__(self, opts: Options) -> None:
        opts.validate()
        self.opts = opts
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, RegisteredClient] = {}
        self.guid = GUIDFactory(opts.node_id)
        self.start_time = int(time.time())
        self.channels_version = 0
        self._client_seq = 0
        self._health_error: str | None = None
        # Set by server.py, which binds the listeners: their addresses, the TLS server context
        # (None without --tls-cert/--tls-key) and the auth servers (tls.py, auth.py).
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self.https_address: tuple[str, int] | None = None
        self.tls_context: Any = None
        self.auth: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self.scanner = QueueScanner(opts, self.channels, lambda: self.channels_version)
        self.storage = Storage(self)
        self.dead_letters = DeadLetters(self, self.storage.metadata_changed)
        # The names the transports and server.py call stay on NSQD, bound to their owners
        # (flush_backends runs before every publish's answer: one call, no extra hop).
        self.data_path = self.storage.data_path
        self.journal = self.storage.journal
        self.flush_backends = self.storage.flush_backends
        self.persist_metadata = self.storage.persist_metadata
        self.metadata_changed = self.storage.metadata_changed
        self.metadata = self.storage.metadata
        self.abandon = self.storage.abandon
        self.load_metadata = self.storage.load_metadata
        self.dead_letter_topic = self.dead_letters.topic_name
        self.set_channel_max_attempts = self.dead_letters.set_channel_max_attempts
        self.replay_dead_letters = self.dead_letters.replay
        self._schedule: Callable[[Callable[[], None]], None] | None = None
        # Topics waiting for their lookupd channel query: the futures of topic_started.
        self._start_waiters: dict[Topic, list[asyncio.Future[None]]] = {}
        # nsqlookupd registration (lookup_peer.py); set by start_loops()
        self.lookup: LookupPeers | None = None
        # Replicated topics, only with --etcd-endpoints (set by server.py); None otherwise.
        self.replication: ReplicationService | None = None

    # ------------------------------------------------------------ health

    @property
    def health(self) -> str:
        """ "OK" or "NOK - <error>", as nsqd's GetHealth."""
        return "OK" if self._health_error is None else f"NOK - {self._health_error}"

    def is_healthy(self) -> bool:
        return self._health_error is None

    def set_health(self, err: Exception | None) -> None:
        if err is None:
            if self._health_error is not None:
                log.info("NSQ: health OK again")
            self._health_error = None
        else:
            self._health_error = str(err)

    # ------------------------------------------------------------ clients

    def next_client_id(self) -> int:
        self._client_seq += 1
        return self._client_seq

    def add_client(self, client: RegisteredClient) -> None:
        self.clients[client.client_id] = client

    def remove_client(self, client: RegisteredClient) -> None:
        self.clients.pop(client.client_id, None)

    # ------------------------------------------------------------ messages, topics, channels

    def new_record(self, body: bytes) -> bytes:
        """A new message record (nsqd layout: timestamp now, attempts 0, fresh ID, body)."""
        return b"".join((fresh_header(time.time_ns()), self.guid.new_id(), body))

    def new_records(self, bodies: list[bytes]) -> list[bytes]:
        """Records for an MPUB: one timestamp, an ID each."""
        return self.guid.new_records(fresh_header(time.time_ns()), bodies)

    def get_topic(self, name: str) -> Topic:
        """The topic ``name``, created if needed (the name must already be valid)."""
        t = self.topics.get(name)
        if t is None:
            ephemeral = name.endswith("#ephemeral")
            t = Topic(
                name,
                self._new_channel,
                self._channels_changed,
                self._ephemeral_topic_gone,
                mem_queue_size=self.opts.mem_queue_size,
                backend=None if ephemeral else self.storage.new_backend(name),
                hooks=self.storage,
                schedule=self._schedule,
            )
            self.topics[name] = t
            log.info("TOPIC(%s): created", name)
            if not ephemeral:
                self.metadata_changed()
            lookup = self.lookup
            if lookup is not None and not self.storage.loading:
                lookup.topic_added(name)
                self._start_waiters[t] = []
                t.starting = lookup.precreate_channels(
                    name, lambda names: self._start_topic(t, names)
                )
                if not t.starting:
                    del self._start_waiters[t]
        return t

    def topic_started(self, t: Topic) -> asyncio.Future[None] | None:
        """None when ``t`` hands out its messages already; else, while the lookupds are asked
        for a new topic's channels, a future of this caller's own (cancelling it touches no
        other waiter) that is done once they are created and the topic started. nsqd's
        GetTopic returns a new topic only after that query (bounded by
        --http-client-request-timeout, lookup_peer.LookupPeers.precreate_channels), so the
        PUB, MPUB, DPUB, SUB and /pub, /mpub, /topic/create that meet a starting topic
        answer after it: a message they published is in every channel lookupd knew of.
        Call on the event loop."""
        waiters = self._start_waiters.get(t) if t.starting else None
        if waiters is None:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        return fut

    def _start_topic(self, t: Topic, channel_names: list[str]) -> None:
        """nsqd's GetTopic after its lookupd query: create the channels other nodes have
        (ephemeral ones excepted), then let the topic's messages flow; the commands waiting
        on topic_started go on (also when the topic was deleted meanwhile)."""
        waiters = self._start_waiters.pop(t, [])
        if self.topics.get(t.name) is t:
            for name in channel_names:
                if name.endswith("#ephemeral") or not wire.is_valid_name(name):
                    continue
                t.get_channel(name)
            t.start()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def get_existing_topic(self, name: str) -> Topic:
        return existing(self.topics, name, "topic")

    def delete_existing_topic(self, name: str) -> None:
        t = existing(self.topics, name, "topic", take=True)
        log.info("TOPIC(%s): deleting", name)
        if self.lookup is not None:
            self.lookup.topic_removed(name)
        self.storage.forget([t.backend, *(ch.backend for ch in t.channels.values())])
        t.close()
        if not t.ephemeral:
            self.metadata_changed()

    def channels(self) -> list[Channel]:
        return [c for t in self.topics.values() for c in t.channels.values()]

    def iter_topics(self) -> Iterator[Topic]:
        return iter(sorted(self.topics.values(), key=lambda t: t.name))

    def _new_channel(self, topic: Topic, name: str) -> Channel:
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        ephemeral = name.endswith("#ephemeral")
        ch = Channel(
            topic.name,
            name,
            max_msg_timeout_ms=self.opts.max_msg_timeout_ms,
            on_last_client_gone=self._ephemeral_channel_gone,
            mem_queue_size=self.opts.mem_queue_size,
            backend=None if ephemeral else self.storage.new_backend(f"{topic.name}:{name}"),
            hooks=self.storage,
        )
        self.dead_letters.apply(ch)
        if self.opts.e2e_processing_latency_percentiles:
            ch.e2e = E2ELatency(
                self.opts.e2e_processing_latency_window_time_ms,
                self.opts.e2e_processing_latency_percentiles,
            )
        return ch

    def _channels_changed(self, topic: Topic, channel: str, added: bool) -> None:
        self.channels_version += 1
        self.metadata_changed()
        lookup = self.lookup
        if lookup is not None and not self.storage.loading:
            if added:
                lookup.channel_added(topic.name, channel)
            else:
                lookup.channel_removed(topic.name, channel)

    def _ephemeral_channel_gone(self, ch: Channel) -> None:
        t = self.topics.get(ch.topic_name)
        if t is not None and t.channels.get(ch.name) is ch:
            log.info("TOPIC(%s): deleting channel %s", t.name, ch.name)
            t.delete_existing_channel(ch.name)

    def _ephemeral_topic_gone(self, t: Topic) -> None:
        if self.topics.get(t.name) is t:
            self.delete_existing_topic(t.name)

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Lock the data path and load nsqd.dat and the deferred journal (call on the event
        loop). Raises DataDirLocked, ValueError (bad nsqd.dat) or OSError."""
        loop = asyncio.get_running_loop()

        def schedule(callback: Callable[[], None]) -> None:
            loop.call_soon(callback)

        self._schedule = schedule
        self.storage.lock()
        self.storage.load_metadata()

    def start_loops(self) -> None:
        """Start the queue-scan and diskqueue-sync loops and, with the listeners bound (their
        ports are the default broadcast ports, as nsqd.New), registration with nsqlookupd."""
        o = self.opts
        if self.http_address is not None and not o.broadcast_http_port:
            o.broadcast_http_port = self.http_address[1]
        if self.tcp_address is not None and not o.broadcast_tcp_port:
            o.broadcast_tcp_port = self.tcp_address[1]
        self._tasks = [
            asyncio.create_task(self.scanner.run()),
            asyncio.create_task(self.storage.sync_loop()),
        ]
        self.lookup = LookupPeers(self)
        repl = self.replication
        if repl is not None:
            self.lookup.registers = repl.registers
            self._tasks.append(asyncio.create_task(repl.run()))
        self.lookup.set_addresses(o.nsqlookupd_tcp_addresses)

    def add_task(self, task: asyncio.Task[None]) -> None:
        """A loop that stops with the daemon (cancelled by close())."""
        self._tasks.append(task)

    async def close(self) -> None:
        """Clean exit, once the clients are gone: stop the loops and lookupd registration,
        then Storage.close (memory, in-flight and deferred messages to disk, nsqd.dat, the
        backends synced and closed)."""
        await cancel_and_wait(self._tasks)
        if self.replication is not None:
            await self.replication.close()
        if self.lookup is not None:
            await self.lookup.close()
            self.lookup = None
        await self.storage.close()
        log.info("NSQ: bye")
