"""The daemon's persistence: the data directory, nsqd.dat, the backends' sync and the journal.

Strategy: NSQD owns one Storage and hands it to every topic and channel as their StorageHooks
(backed_queue.py), so the registry never touches a file. Storage keeps:

- the data-directory lock (flock on the directory, as nsqd's dirlock: a second daemon, nsqpy-d
  or Go nsqd, cannot open it);
- nsqd.dat (nsqd 1.3's JSON: topics, channels, paused flags; plus our per-channel
  ``max_attempts``), rewritten in a coalesced background write after a change and on the
  caller's thread where the answer waits for it;
- the backends (go-diskqueue files ``<topic>.diskqueue.*`` and ``<topic>:<channel>.diskqueue.*``):
  which hold writes not yet handed to the OS (flushed before a publish is acknowledged, so a
  kill -9 loses no acknowledged message) and which hold puts or reads not yet fsynced (the sync
  loop fsyncs them in a worker thread on --sync-every / --sync-timeout, as go-diskqueue syncs
  after the write it acknowledged);
- the deferred journal (nsqpy.deferred.dat, deferred_journal.py; nsqd forgets deferred
  messages), replayed at start and rewritten at a clean exit.

Errors: a failed backend write marks the daemon unhealthy (NSQD.set_health) until a later
write succeeds; a failed nsqd.dat rewrite is logged, as nsqd logs it."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from . import wire
from .deferred_journal import DeferredJournal
from .internal import gojson
from .internal.fileutil import write_sync_file
from .message import HEADER_LENGTH, encode_record, record_body, record_header, record_id
from .options import NSQ_VERSION

if TYPE_CHECKING:
    from .dead_letter import DeadLetters
    from .diskqueue import DiskQueue
    from .options import Options
    from .topic import Topic


class StorageHost(Protocol):
    """What Storage needs of its NSQD (nsqd.py): options, topics, health, dead letters."""

    opts: Options
    topics: dict[str, Topic]
    dead_letters: DeadLetters

    def get_topic(self, name: str) -> Topic: ...

    def is_healthy(self) -> bool: ...

    def set_health(self, err: Exception | None) -> None: ...


log = logging.getLogger("nsqpy")

METADATA_FILE = "nsqd.dat"
DEFERRED_FILE = "nsqpy.deferred.dat"


class DataDirLocked(OSError):
    """Another daemon holds the data directory."""


class Storage:
    """Persistence of one NSQD (``nsqd``): its data path, backends, nsqd.dat and journal.

    Implements backed_queue.StorageHooks for the topics and channels. ``loading`` is True while
    nsqd.dat and the journal are being replayed (nothing is written or journaled then)."""

    def __init__(self, nsqd: StorageHost) -> None:
        self.nsqd = nsqd
        self.opts = nsqd.opts
        self.data_path = self.opts.data_path or "."
        self.loading = False
        self._lock_fd: int | None = None
        self._meta_timer: asyncio.TimerHandle | None = None
        # A background nsqd.dat rewrite in the default executor, and whether another is due
        # once it ends (a change came meanwhile).
        self._meta_writing: asyncio.Future[None] | None = None
        self._meta_again = False
        # Backends with writes not yet handed to the OS.
        self._dirty: set[DiskQueue] = set()
        self.journal = DeferredJournal(os.path.join(self.data_path, DEFERRED_FILE))
        self._syncing: set[DiskQueue] = set()
        # Backends with puts or reads not yet synced: the sync loop looks at these only, so an
        # idle daemon with 10,000 channels does no per-channel work.
        self._active: set[DiskQueue] = set()

    @property
    def locked(self) -> bool:
        """The data path is ours (between lock() and close() or abandon())."""
        return self._lock_fd is not None

    # ------------------------------------------------------------ backends

    def new_backend(self, name: str) -> DiskQueue:
        """The diskqueue ``name`` in the data path (created or reopened), with nsqd's sizes:
        records of 26 bytes (the message header) up to --max-msg-size + 26."""
        from .diskqueue import DiskQueue  # at the first topic or channel, not at start-up

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

    def forget(self, backends: Iterable[DiskQueue | None]) -> None:
        """These backends are going away (their topic is deleted): no flush for them."""
        for dq in backends:
            if dq is not None:
                self._dirty.discard(dq)

    # StorageHooks (backed_queue.py): what topics and channels report.

    def spilled(self, backend: DiskQueue) -> None:
        self._dirty.add(backend)
        self._active.add(backend)

    def backend_read(self, backend: DiskQueue) -> None:
        self._active.add(backend)

    def deferred(self, topic: str, channel: str | None, record: bytes, delay_ms: int) -> None:
        if self.loading:
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
        nsqd = self.nsqd
        if error is None and nsqd.is_healthy():
            return
        nsqd.set_health(error)
        if error is not None:
            raise error

    async def sync_loop(self) -> None:
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
            self.nsqd.set_health(e)
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
                    self.nsqd.set_health(exc)

        fut.add_done_callback(done)

    # ------------------------------------------------------------ nsqd.dat

    def metadata(self) -> dict[str, Any]:
        """nsqd.dat's content, in nsqd's JSON shape (ephemeral topics/channels left out)."""
        max_attempts = self.nsqd.dead_letters.max_attempts
        topics = []
        for t in self.nsqd.topics.values():
            if t.ephemeral:
                continue
            chans = []
            for c in t.channels.values():
                if c.ephemeral:
                    continue
                entry: dict[str, Any] = {"name": c.name, "paused": c.paused}
                n = max_attempts.get((t.name, c.name))
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
        if self.loading or self._lock_fd is None or self._meta_timer is not None:
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
        if self.loading or self._lock_fd is None:
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
        if self.loading or self._lock_fd is None:
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
        return path, gojson.encode(self.metadata())

    # ------------------------------------------------------------ open, load, close

    def lock(self) -> None:
        """Create and flock the data path. Raises DataDirLocked (held by another daemon) or
        OSError."""
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

    def load_metadata(self) -> None:
        """Recreate the topics and channels of nsqd.dat (with their backends and paused
        state) and the deferred messages kept at the last clean exit. Raises ValueError when
        nsqd.dat is not JSON, OSError when a file cannot be read."""
        path = os.path.join(self.data_path, METADATA_FILE)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        nsqd = self.nsqd
        self.loading = True
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
                    t = nsqd.get_topic(name)
                    if tm.get("paused"):
                        t.pause()
                    for cm in tm.get("channels") or []:
                        cname = cm.get("name", "")
                        if not wire.is_valid_name(cname):
                            log.warning("skipping creation of invalid channel %s", cname)
                            continue
                        if isinstance(cm.get("max_attempts"), int):
                            nsqd.dead_letters.max_attempts[(name, cname)] = cm["max_attempts"]
                        ch = t.get_channel(cname)
                        if cm.get("paused"):
                            ch.pause()
            self._load_deferred()
        finally:
            self.loading = False
        for t in list(nsqd.topics.values()):
            t._flush_queue()  # restored topic-held deferred messages go to existing channels

    def _load_deferred(self) -> None:
        """Replay the deferred journal into the channels (and topics) with the delay left."""
        records = self.journal.load()
        now_ms = time.time_ns() // 1_000_000
        for _, topic_name, channel_name, msg_id, body, ts, attempts, due_ms in records:
            if not wire.is_valid_name(topic_name):
                continue
            t = self.nsqd.get_topic(topic_name)
            record = encode_record(ts, attempts, msg_id, body)
            delay = max(0, due_ms - now_ms)
            if channel_name is None:
                t._deferred_held.append((record, max(1, delay)))
            elif wire.is_valid_name(channel_name):
                t.get_channel(channel_name).restore_deferred(record, delay)
        if records:
            log.info("NSQ: restored %d deferred messages from %s", len(records), self.journal.path)

    async def close(self) -> None:
        """Clean exit (the loops stopped): wait for a background nsqd.dat write, persist the
        metadata, write memory, in-flight and deferred messages to disk, sync and close the
        backends, release the data path."""
        while self._meta_writing is not None:
            await asyncio.wait([self._meta_writing])
            await asyncio.sleep(0)  # let _persisted run (it may start the next write)
        self._meta_again = False
        if self._lock_fd is not None:
            self.persist_metadata()
            log.info("NSQ: closing topics")
            self._close_topics(list(self.nsqd.topics.values()))
            os.close(self._lock_fd)
            self._lock_fd = None

    def _close_topics(self, topics: list[Topic]) -> None:
        """Clean exit: memory and in-flight messages to the backends, backends synced and
        closed, every deferred message (DPUB or REQ with a delay) kept in the journal with its
        due time."""
        now_ns = time.monotonic_ns()
        now_ms = time.time_ns() // 1_000_000
        live = self.journal.live
        kept: list[list[Any]] = []
        for t in topics:
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
