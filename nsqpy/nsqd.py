"""NSQD: the core owner.

Strategy: one object owns the topics, the GUID factory, the connected clients, the data directory
and the health string, and runs the queue-scan loop, the diskqueue sync loop and the registration
with nsqlookupd on one event loop. The transports (TCP, HTTP) call into it and server.py binds
them around it; it never imports a transport nor reaches into a socket. Topic and channel creation
and deletion bump ``channels_version`` (the queue scanner refreshes its sample set) and rewrite
nsqd.dat.

Data directory (nsqd 1.3's layout, so Go nsqd and nsqpy-d can open each other's):
  nsqd.dat                                   JSON metadata: topics, channels, paused flags
  <topic>.diskqueue.*                        a topic's backend (go-diskqueue files)
  <topic>:<channel>.diskqueue.*              a channel's backend
  nsqpy.deferred.dat                         ours: the deferred-message journal (msgpack, see
                                             deferred_journal.py; nsqd forgets deferred messages)
The directory is locked with flock while the daemon runs, like nsqd's dirlock, so a second
daemon (nsqpy-d or Go nsqd) cannot open it.

Publishing to disk: a PUB/MPUB/DPUB whose messages went to a backend (or the deferred journal)
is answered only after those bytes were handed to the OS (flush_backends), so a crash of the
process (kill -9) loses no acknowledged message; fsync runs in a worker thread on --sync-every
/ --sync-timeout, as go-diskqueue syncs after the write it acknowledged."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import wire
from .channel import Channel
from .deferred_journal import DeferredJournal
from .diskqueue import DiskQueue
from .guid import GUIDFactory
from .internal.fileutil import write_sync_file
from .lookup_peer import LookupPeers
from .message import (
    HEADER_LENGTH,
    encode_record,
    fresh_header,
    record_body,
    record_header,
    record_id,
    with_attempts,
)
from .options import NSQ_VERSION, Options
from .quantile import E2ELatency
from .queue_scan import QueueScanner
from .topic import Topic, TopicError

log = logging.getLogger("nsqpy")


METADATA_FILE = "nsqd.dat"
DEFERRED_FILE = "nsqpy.deferred.dat"


class DataDirLocked(OSError):
    """Another daemon holds the data directory."""


class NSQD:
    """The daemon's state: ``topics`` by name, ``clients`` by id, options, health."""

    def __init__(self, opts: Options) -> None:
        opts.validate()
        self.opts = opts
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, Any] = {}
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
        self.data_path = opts.data_path or "."
        self._lock_fd: int | None = None
        self._meta_timer: asyncio.TimerHandle | None = None
        # A background nsqd.dat rewrite in the default executor, and whether another is due
        # once it ends (a change came meanwhile).
        self._meta_writing: asyncio.Future[None] | None = None
        self._meta_again = False
        self._loading = False
        self._dirty: set[DiskQueue] = set()
        self.journal = DeferredJournal(os.path.join(self.data_path, DEFERRED_FILE))
        self._syncing: set[DiskQueue] = set()
        # Backends with puts or reads not yet synced: the sync loop looks at these only, so an
        # idle daemon with 10,000 channels does no per-channel work.
        self._active: set[DiskQueue] = set()
        self._schedule: Callable[[Callable[[], None]], None] | None = None
        # nsqlookupd registration (lookup_peer.py); set by start_loops()
        self.lookup: LookupPeers | None = None
        # Per-channel --max-attempts set through /channel/create (kept in nsqd.dat).
        self.channel_max_attempts: dict[tuple[str, str], int] = {}

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

    def add_client(self, client: Any) -> None:
        self.clients[client.client_id] = client

    def remove_client(self, client: Any) -> None:
        self.clients.pop(client.client_id, None)

    # ------------------------------------------------------------ messages, topics, channels

    def new_record(self, body: bytes) -> bytes:
        """A new message record (nsqd layout: timestamp now, attempts 0, fresh ID, body)."""
        return b"".join((fresh_header(time.time_ns()), self.guid.new_id(), body))

    def new_records(self, bodies: list[bytes]) -> list[bytes]:
        """Records for an MPUB: one timestamp, an ID each."""
        header = fresh_header(time.time_ns())
        new_id = self.guid.new_id
        join = b"".join
        return [join((header, new_id(), b)) for b in bodies]

    def _backend(self, name: str) -> DiskQueue:
        o = self.opts
        dq = DiskQueue(
            name,
            self.data_path,
            o.max_bytes_per_file,
            HEADER_LENGTH,
            o.max_msg_size + HEADER_LENGTH,
            o.sync_every,
            o.sync_timeout_ms,
            logger=log,
        )
        self._active.add(dq)
        return dq

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
                backend=None if ephemeral else self._backend(name),
                hooks=self,
                schedule=self._schedule,
            )
            self.topics[name] = t
            log.info("TOPIC(%s): created", name)
            if not ephemeral:
                self.metadata_changed()
            lookup = self.lookup
            if lookup is not None and not self._loading:
                lookup.topic_added(name)
                t.starting = lookup.precreate_channels(
                    name, lambda names: self._start_topic(t, names)
                )
        return t

    def _start_topic(self, t: Topic, channel_names: list[str]) -> None:
        """nsqd's GetTopic after its lookupd query: create the channels other nodes have
        (ephemeral ones excepted), then let the topic's messages flow."""
        if self.topics.get(t.name) is not t:
            return
        for name in channel_names:
            if name.endswith("#ephemeral") or not wire.is_valid_name(name):
                continue
            t.get_channel(name)
        t.start()

    def get_existing_topic(self, name: str) -> Topic:
        t = self.topics.get(name)
        if t is None:
            raise TopicError("topic does not exist")
        return t

    def delete_existing_topic(self, name: str) -> None:
        t = self.topics.pop(name, None)
        if t is None:
            raise TopicError("topic does not exist")
        log.info("TOPIC(%s): deleting", name)
        if self.lookup is not None:
            self.lookup.topic_removed(name)
        if t.backend is not None:
            self._dirty.discard(t.backend)
        for ch in t.channels.values():
            if ch.backend is not None:
                self._dirty.discard(ch.backend)
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
            backend=None if ephemeral else self._backend(f"{topic.name}:{name}"),
            hooks=self,
        )
        self.apply_dead_letter(ch)
        if self.opts.e2e_processing_latency_percentiles:
            ch.e2e = E2ELatency(
                self.opts.e2e_processing_latency_window_time_ms,
                self.opts.e2e_processing_latency_percentiles,
            )
        return ch

    # ------------------------------------------------------------ dead letters (beyond nsqd)

    def dead_letter_topic(self, topic: str, channel: str) -> str:
        """``<topic>.<channel><--dead-letter-suffix>``."""
        return f"{topic}.{channel}{self.opts.dead_letter_suffix}"

    def set_channel_max_attempts(self, topic: str, channel: str, n: int) -> None:
        """A channel's own max attempts (0: off for it, whatever --max-attempts says).

        Raises ValueError when the dead-letter topic's name would not be a valid topic name
        (too long, or an ephemeral channel)."""
        if n and not wire.is_valid_name(self.dead_letter_topic(topic, channel)):
            raise ValueError(f"invalid dead-letter topic {self.dead_letter_topic(topic, channel)}")
        self.channel_max_attempts[(topic, channel)] = n
        t = self.topics.get(topic)
        ch = t.channels.get(channel) if t is not None else None
        if ch is not None:
            self.apply_dead_letter(ch)
        self.metadata_changed()

    def apply_dead_letter(self, ch: Channel) -> None:
        n = self.channel_max_attempts.get((ch.topic_name, ch.name), self.opts.max_attempts)
        if n and (
            ch.ephemeral or not wire.is_valid_name(self.dead_letter_topic(ch.topic_name, ch.name))
        ):
            log.warning(
                "CHANNEL(%s:%s): no dead letters: %s is not a valid topic name",
                ch.topic_name,
                ch.name,
                self.dead_letter_topic(ch.topic_name, ch.name),
            )
            n = 0
        ch.set_dead_letter(n, self._dead_letter if n else None)

    def replay_dead_letters(self, topic: str, channel: str, limit: int) -> int:
        """Move up to ``limit`` dead letters of ``topic``/``channel`` (those its dead-letter
        topic still holds itself, oldest first) back into the channel, attempts reset to 0.
        Returns how many; raises TopicError when the topic or channel does not exist, OSError
        when a backend write fails."""
        ch = self.get_existing_topic(topic).get_existing_channel(channel)
        dead = self.topics.get(self.dead_letter_topic(topic, channel))
        if dead is None:
            return 0
        records = dead.take_held(limit)
        if records:
            ch.put_many([with_attempts(r, 0) for r in records])
            self.flush_backends()
            log.info("CHANNEL(%s:%s): %d dead letters replayed", topic, channel, len(records))
        return len(records)

    def _dead_letter(self, ch: Channel, records: list[bytes]) -> bool:
        name = self.dead_letter_topic(ch.topic_name, ch.name)
        try:
            self.get_topic(name).put_many(records, in_order=False)
        except (OSError, TopicError) as e:
            log.error(
                "CHANNEL(%s): failed to move %d messages to %s - %s", ch.name, len(records), name, e
            )
            return False
        log.info("CHANNEL(%s:%s): %d messages to %s", ch.topic_name, ch.name, len(records), name)
        return True

    def _channels_changed(self, topic: Topic, channel: str, added: bool) -> None:
        self.channels_version += 1
        self.metadata_changed()
        lookup = self.lookup
        if lookup is not None and not self._loading:
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

    # ------------------------------------------------------------ durability

    # StorageHooks (backed_queue.py): what topics and channels report.

    def spilled(self, backend: DiskQueue) -> None:
        self._dirty.add(backend)
        self._active.add(backend)

    def backend_read(self, backend: DiskQueue) -> None:
        self._active.add(backend)

    def deferred(self, topic: str, channel: str | None, record: bytes, delay_ms: int) -> None:
        if self._loading:
            return  # restored from the journal: already in it
        due_ms = time.time_ns() // 1_000_000 + delay_ms
        ts, attempts = record_header(record)
        self.journal.add(
            topic, channel, record_id(record), record_body(record), ts, attempts, due_ms
        )

    def deferred_done(self, topic: str, channel: str | None, ids: list[bytes]) -> None:
        done = self.journal.done
        for msg_id in ids:
            done(topic, channel, msg_id)

    def deferred_dropped(self, topic: str, channel: str | None) -> None:
        if channel is None:
            for key in [k for k in self.journal.live if k[0] == topic and k[1] is None]:
                self.journal.done(*key)
        else:
            self.journal.drop(topic, channel)

    def flush_backends(self) -> None:
        """Hand every buffered backend write to the OS (before a publish is acknowledged).

        Raises OSError (and marks the daemon unhealthy) when a write fails; a later success
        makes it healthy again.
        """
        dirty = self._dirty
        error: OSError | None = None
        for dq in list(dirty):
            if dq.closed:
                dirty.discard(dq)
                continue
            try:
                dq.flush()
                dirty.discard(dq)
            except OSError as e:
                error = error or e
        # After the backends: a "done" mark must not reach the OS before the message it
        # moved into a channel's backend.
        if error is None:
            try:
                self.journal.flush()
            except OSError as e:
                error = e
        if error is None and self._health_error is None:
            return
        self.set_health(error)
        if error is not None:
            raise error

    def metadata(self) -> dict[str, Any]:
        """nsqd.dat's content, in nsqd's JSON shape (ephemeral topics/channels left out)."""
        topics = []
        for t in self.topics.values():
            if t.ephemeral:
                continue
            chans = []
            for c in t.channels.values():
                if c.ephemeral:
                    continue
                entry: dict[str, Any] = {"name": c.name, "paused": c.paused}
                n = self.channel_max_attempts.get((t.name, c.name))
                if n is not None:
                    entry["max_attempts"] = n  # nsqpy's; nsqd ignores unknown keys
                chans.append(entry)
            topics.append({"name": t.name, "paused": t.paused, "channels": chans or None})
        return {"topics": topics or None, "version": NSQ_VERSION}

    def metadata_changed(self) -> None:
        """A topic or channel came or went: rewrite nsqd.dat soon, off the event loop. Bursts
        (thousands of topics created at once) are coalesced into one write per 100 ms; nsqd
        rewrites the whole file once per change, which is quadratic in the number of topics.
        The caller has already told the lookupds (lookup_peer writes REGISTER/UNREGISTER at
        once), so registration never waits for this write or its fsync."""
        if self._loading or self._lock_fd is None or self._meta_timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.persist_metadata()
            return
        self._meta_timer = loop.call_later(0.1, self._persist_in_background)

    def _persist_in_background(self) -> None:
        """The coalesced rewrite: nsqd.dat's bytes are taken on the loop (a consistent
        snapshot), the write, fsync and rename run in the default executor. One write at a
        time: a change during a write rewrites the file again once it ends."""
        self._meta_timer = None
        if self._loading or self._lock_fd is None:
            return
        if self._meta_writing is not None:
            self._meta_again = True
            return
        path, data = self._metadata_snapshot()
        fut = asyncio.get_running_loop().run_in_executor(None, write_sync_file, path, data)
        self._meta_writing = fut
        fut.add_done_callback(self._persisted)

    def _persisted(self, fut: asyncio.Future[None]) -> None:
        self._meta_writing = None
        if not fut.cancelled() and fut.exception() is not None:
            log.error("failed to persist metadata - %s", fut.exception())
        if self._meta_again:
            self._meta_again = False
            self._persist_in_background()

    def persist_metadata(self) -> None:
        """Rewrite nsqd.dat now, on the caller's thread (temp file, fsync, rename), as nsqd
        does on every change; used where the answer must wait for it (pause, unpause) and at
        exit. A background rewrite still running is followed by another, so the last file
        written is never older than this one."""
        if self._meta_timer is not None:
            self._meta_timer.cancel()
            self._meta_timer = None
        if self._loading or self._lock_fd is None:
            return
        if self._meta_writing is not None:
            self._meta_again = True
        try:
            write_sync_file(*self._metadata_snapshot())
        except OSError as e:
            log.error("failed to persist metadata - %s", e)

    def _metadata_snapshot(self) -> tuple[str, bytes]:
        """(nsqd.dat's path, its bytes now), logged as nsqd logs each rewrite."""
        path = os.path.join(self.data_path, METADATA_FILE)
        log.info("NSQ: persisting topic/channel metadata to %s", path)
        return path, json.dumps(self.metadata(), separators=(",", ":")).encode()

    def abandon(self) -> None:
        """Start-up failed after open() (a listener could not be bound): release the data
        path and write nothing, as nsqd, whose New() fails before it loads or persists
        anything. close() is then a no-op for the data path."""
        if self._meta_timer is not None:
            self._meta_timer.cancel()
            self._meta_timer = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _lock_data_path(self) -> None:
        os.makedirs(self.data_path, exist_ok=True)
        fd = os.open(self.data_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirLocked(
                    f"failed to lock data-path: cannot flock directory {self.data_path} - "
                    f"{e.strerror} (possibly in use by another instance of nsqd)"
                ) from None
            raise
        self._lock_fd = fd

    def load_metadata(self) -> None:
        """Recreate the topics and channels of nsqd.dat (with their backends and paused
        state) and the deferred messages kept at the last clean exit."""
        path = os.path.join(self.data_path, METADATA_FILE)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        self._loading = True
        try:
            if raw:
                try:
                    meta = json.loads(raw)
                except ValueError as e:
                    raise ValueError(f"failed to parse metadata in {path} - {e}") from None
                for tm in (meta or {}).get("topics") or []:
                    name = tm.get("name", "")
                    if not wire.is_valid_name(name):
                        log.warning("skipping creation of invalid topic %s", name)
                        continue
                    t = self.get_topic(name)
                    if tm.get("paused"):
                        t.pause()
                    for cm in tm.get("channels") or []:
                        cname = cm.get("name", "")
                        if not wire.is_valid_name(cname):
                            log.warning("skipping creation of invalid channel %s", cname)
                            continue
                        if isinstance(cm.get("max_attempts"), int):
                            self.channel_max_attempts[(name, cname)] = cm["max_attempts"]
                        ch = t.get_channel(cname)
                        if cm.get("paused"):
                            ch.pause()
            self._load_deferred()
        finally:
            self._loading = False
        for t in list(self.topics.values()):
            t._flush_queue()  # restored topic-held deferred messages go to existing channels

    def _load_deferred(self) -> None:
        """Replay the deferred journal into the channels (and topics) with the delay left."""
        records = self.journal.load()
        now_ms = time.time_ns() // 1_000_000
        for _, topic_name, channel_name, msg_id, body, ts, attempts, due_ms in records:
            if not wire.is_valid_name(topic_name):
                continue
            t = self.get_topic(topic_name)
            record = encode_record(ts, attempts, msg_id, body)
            delay = max(0, due_ms - now_ms)
            if channel_name is None:
                t._deferred_held.append((record, max(1, delay)))
            elif wire.is_valid_name(channel_name):
                t.get_channel(channel_name).restore_deferred(record, delay)
        if records:
            log.info("NSQ: restored %d deferred messages from %s", len(records), self.journal.path)

    async def _sync_loop(self) -> None:
        """fsync backends on --sync-every / --sync-timeout in a worker thread, and flush what
        requeues and timeouts spilled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0.05)
            try:
                self.flush_backends()
                self.journal.fsync()
            except OSError as e:
                log.error("NSQ: failed to write to a diskqueue - %s", e)
            active = self._active
            for dq in list(active):
                if dq.closed or not dq.unsynced:
                    active.discard(dq)
                elif dq not in self._syncing and dq.needs_sync():
                    self._maybe_sync(loop, dq)

    def _maybe_sync(self, loop: asyncio.AbstractEventLoop, dq: DiskQueue) -> None:
        try:
            job = dq.prepare_sync()
        except OSError as e:
            self.set_health(e)
            log.error("DISKQUEUE(%s): failed to sync - %s", dq.name, e)
            return
        self._syncing.add(dq)
        fut = loop.run_in_executor(None, job)

        def done(f: asyncio.Future[None]) -> None:
            self._syncing.discard(dq)
            exc = f.exception()
            if exc is not None:
                self._active.add(dq)  # try again on the next tick
                log.error("DISKQUEUE(%s): failed to sync - %s", dq.name, exc)
                if isinstance(exc, OSError):
                    self.set_health(exc)

        fut.add_done_callback(done)

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Lock the data path and load nsqd.dat and the deferred journal (call on the event
        loop). Raises DataDirLocked, ValueError (bad nsqd.dat) or OSError."""
        loop = asyncio.get_running_loop()

        def schedule(callback: Callable[[], None]) -> None:
            loop.call_soon(callback)

        self._schedule = schedule
        self._lock_data_path()
        self.load_metadata()

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
            asyncio.create_task(self._sync_loop()),
        ]
        self.lookup = LookupPeers(self)
        self.lookup.set_addresses(o.nsqlookupd_tcp_addresses)

    def add_task(self, task: asyncio.Task[None]) -> None:
        """A loop that stops with the daemon (cancelled by close())."""
        self._tasks.append(task)

    async def close(self) -> None:
        """Clean exit, once the clients are gone: stop the loops and lookupd registration,
        write memory, in-flight and deferred messages to disk, persist metadata, sync and
        close backends."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self.lookup is not None:
            await self.lookup.close()
            self.lookup = None
        while self._meta_writing is not None:
            await asyncio.wait([self._meta_writing])
            await asyncio.sleep(0)  # let _persisted run (it may start the next write)
        self._meta_again = False
        if self._lock_fd is not None:
            self.persist_metadata()
            log.info("NSQ: closing topics")
            self._close_topics()
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("NSQ: bye")

    def _close_topics(self) -> None:
        """Clean exit: memory and in-flight messages to the backends, backends synced and
        closed, every deferred message (DPUB or REQ with a delay) kept in the journal with its
        due time."""
        now_ns = time.monotonic_ns()
        now_ms = time.time_ns() // 1_000_000
        live = self.journal.live
        kept: list[list[Any]] = []
        for t in self.topics.values():
            for record, delay_ms in t.drain_for_exit():
                msg_id = record_id(record)
                if not t.ephemeral and (t.name, None, msg_id) not in live:
                    ts, attempts = record_header(record)
                    due_ms = now_ms + delay_ms
                    kept.append(
                        ["A", t.name, None, msg_id, record_body(record), ts, attempts, due_ms]
                    )
            for ch in t.channels.values():
                try:
                    deferred = ch.drain_for_exit()
                except OSError as e:
                    log.error("CHANNEL(%s): failed to flush to disk - %s", ch.name, e)
                    continue
                if ch.backend is None:
                    continue
                for m in deferred:
                    if (t.name, ch.name, m.id) in live:
                        continue  # a DPUB, journaled with its original due time
                    due_ms = now_ms + max(0, m.pri - now_ns) // 1_000_000
                    kept.append(
                        ["A", t.name, ch.name, m.id, m.body, m.timestamp, m.attempts, due_ms]
                    )
                try:
                    ch.backend.close()
                except OSError as e:
                    log.error("CHANNEL(%s): failed to close diskqueue - %s", ch.name, e)
            if t.backend is not None:
                try:
                    t.backend.close()
                except OSError as e:
                    log.error("TOPIC(%s): failed to close diskqueue - %s", t.name, e)
        try:
            self.journal.close(kept)
            if self.journal.live:
                log.info(
                    "NSQ: kept %d deferred messages in %s",
                    len(self.journal.live),
                    self.journal.path,
                )
        except OSError as e:
            log.error("failed to keep deferred messages - %s", e)
