"""A topic: the stream producers publish to.

Strategy: a put is a synchronous call chain on message records (immutable bytes in nsqd's
layout, see message.py). With at least one channel and not paused, each record goes to every
channel at once, the same bytes for all (a copy costs nothing); with no channel, or while
paused, records wait in the topic's own queue and flow to the channels as soon as there is
one (or on unpause), as nsqd's topic messagePump does. A first and only channel takes the
held memory queue over whole (Channel.adopt_queue: no copy, however long the backlog); with
more channels each gets the records. DPUB messages enter each channel's deferred queue.

Storage (backed_queue.py): at most ``mem_queue_size`` held records stay in memory, the rest go to
the topic's backend (a DiskQueue named after the topic); when channels appear the backend is drained
into them a chunk per event-loop pass, so a large backlog never stalls other clients. Deferred
messages held by the topic stay in memory (and in the daemon's deferred journal) so they keep
their delay. Ephemeral topics have no backend.

Behaviour follows nsqd/topic.go."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .backed_queue import BackedQueue, StorageHooks
from .channel import Channel
from .message import HEADER_LENGTH, ID_END, ID_START, record_id

if TYPE_CHECKING:
    from .diskqueue import DiskQueue

log = logging.getLogger("nsqpy")

#: Backend records moved to the channels per event-loop pass while a topic drains its backlog:
#: small enough that this background copy never holds the loop long (and leaves the consumers
#: most of each pass), large enough to stay ahead of them.
DRAIN_CHUNK = 500

_HEADER = HEADER_LENGTH
_T = TypeVar("_T")


class TopicError(Exception):
    """Topic operation refused (text as nsqd: "exiting", "channel does not exist")."""


def existing(named: dict[str, _T], name: str, kind: str, take: bool = False) -> _T:
    """The topic or channel ``name`` of ``named`` (removed from it when ``take``), or
    TopicError with nsqd's text "<kind> does not exist" (GetExistingTopic,
    GetExistingChannel, DeleteExistingTopic, DeleteExistingChannel)."""
    found = named.pop(name, None) if take else named.get(name)
    if found is None:
        raise TopicError(f"{kind} does not exist")
    return found


class Topic(BackedQueue):
    """One topic: ``channels`` by name, counters ``message_count`` and ``message_bytes``."""

    __slots__ = (
        "_deferred_held",
        "_drain_scheduled",
        "_new_channel",
        "_on_channels_changed",
        "_on_last_channel_gone",
        "_schedule",
        "channels",
        "ephemeral",
        "exiting",
        "framed_drain",
        "message_bytes",
        "message_count",
        "paused",
        "starting",
    )

    def __init__(
        self,
        name: str,
        new_channel: Callable[[Topic, str], Channel],
        on_channels_changed: Callable[[Topic, str, bool], None] | None = None,
        on_last_channel_gone: Callable[[Topic], None] | None = None,
        *,
        mem_queue_size: int = 10000,
        backend: DiskQueue | None = None,
        hooks: StorageHooks | None = None,
        schedule: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        super().__init__(name, mem_queue_size, backend, hooks)
        self.ephemeral = name.endswith("#ephemeral")
        self.paused = False
        # True while the topic waits to learn its channels from nsqlookupd (nsqd starts a new
        # topic's messagePump only after that): messages are held, as while paused.
        self.starting = False
        self.exiting = False
        # A diskqueue backlog reaches a sole channel as the chunks read from the file: fewer
        # objects per record compiled, but more interpreted steps per record than cutting the
        # records out at once (measured: bench.nsq_tools, CPU per message read), so only then.
        self.framed_drain = backend is not None and backend.compiled_codec
        self.channels: dict[str, Channel] = {}
        self._deferred_held: list[tuple[bytes, int]] = []
        self.message_count = 0
        self.message_bytes = 0
        self._new_channel = new_channel
        self._on_channels_changed = on_channels_changed
        self._on_last_channel_gone = on_last_channel_gone
        self._schedule = schedule
        self._drain_scheduled = False

    @property
    def depth(self) -> int:
        """Messages held by the topic itself (no channel yet, or paused): memory + backend."""
        backend = self.backend
        n = len(self._queue) + len(self._deferred_held)
        return n + (backend.depth if backend is not None else 0)

    def __repr__(self) -> str:
        return f"Topic({self.name})"

    # ---------------------------------------------------------------- publish

    def put(self, record: bytes) -> None:
        """Publish one message record. Raises TopicError("exiting") once the topic is being
        deleted, OSError when a backend write failed."""
        self.put_many([record])

    def put_many(self, records: list[bytes], in_order: bool = True) -> None:
        """Publish a batch (MPUB). ``in_order``: the records' IDs increase, as fresh records
        from NSQD.new_records do; pass False for records made elsewhere (dead letters)."""
        if self.exiting:
            raise TopicError("exiting")
        self.message_count += len(records)
        self.message_bytes += sum(map(len, records)) - _HEADER * len(records)
        if self.channels and not self.paused and not self.starting:
            backend = self.backend
            if backend is not None and backend.depth:
                # A backlog is being moved to the channels (_drain_step): queue behind it, so
                # the channels receive the topic's messages in order (msg_index relies on
                # it; an interleaving would make every drained record a "stray").
                self._spill(records, in_order)
                self._flush_queue()
            else:
                self._fan_out(records, in_order)
        else:
            self._hold(records, in_order)

    def put_deferred(self, record: bytes, delay_ms: int) -> None:
        """Publish one message to be delivered ``delay_ms`` ms from now (DPUB)."""
        if self.exiting:
            raise TopicError("exiting")
        self.message_count += 1
        self.message_bytes += len(record) - _HEADER
        if self.channels and not self.paused and not self.starting:
            self._fan_out_deferred([(record, delay_ms)])
        else:
            self._deferred_held.append((record, delay_ms))
            if self._hooks is not None and self.backend is not None:
                self._hooks.deferred(self.name, None, record, delay_ms)

    def _hold(self, records: list[bytes], in_order: bool = False) -> None:
        """Keep records for later channels (raises OSError when a backend write fails)."""
        self._enqueue_many(records, in_order)

    def _fan_out(self, records: list[bytes], in_order: bool = False) -> None:
        """Give each channel the records; a backend write failure on one channel does not stop
        the others, and is raised once all were tried."""
        error: OSError | None = None
        for ch in list(self.channels.values()):
            try:
                if len(records) == 1:
                    ch.put(records[0])
                else:
                    ch.put_many(records, in_order)
            except OSError as e:
                self._put_failed(ch, e)
                error = error or e
        if error is not None:
            raise error

    def _put_failed(self, ch: Channel, e: OSError) -> None:
        log.error("TOPIC(%s) ERROR: failed to put msg to channel(%s) - %s", self.name, ch.name, e)

    def _fan_out_deferred(self, items: list[tuple[bytes, int]]) -> None:
        for ch in list(self.channels.values()):
            for record, delay_ms in items:
                ch.put_deferred(record, delay_ms)

    def _flush_queue(self) -> None:
        if not self.channels or self.paused or self.starting:
            return
        if self._queue and not (
            len(self.channels) == 1 and next(iter(self.channels.values())).adopt_queue(self)
        ):
            held = list(self._queue)
            in_order = self._mem_index.in_order
            self._mem_clear()
            try:
                self._fan_out(held, in_order)
            except OSError:
                pass  # logged per channel by _fan_out; nothing more to do off a publish
        if self._deferred_held:
            items = self._deferred_held
            self._deferred_held = []
            self._fan_out_deferred(items)
            if self._hooks is not None and self.backend is not None:
                self._hooks.deferred_done(self.name, None, [record_id(r) for r, _ in items])
        if self.backend is not None and self.backend.depth and not self._drain_scheduled:
            if self._schedule is None:
                while self._drain_step():
                    pass
            else:
                self._drain_scheduled = True
                self._schedule(self._drain_later)

    def _drain_later(self) -> None:
        self._drain_scheduled = False
        if self._drain_step() and self._schedule is not None:
            self._drain_scheduled = True
            self._schedule(self._drain_later)

    def locate(self, msg_id: bytes) -> tuple[str, bytes, tuple[int, int] | None] | None:
        """Where the topic itself holds the message ``msg_id`` (no channel yet, paused):
        ("memory" | "disk", record, disk position or None), ("deferred", record, None), or
        None. Bounded time for memory and disk (msg_index); deferred messages held by the
        topic are looked through one by one (there are few: DPUBs before the first channel)."""
        for record, _delay in self._deferred_held:
            if record[ID_START:ID_END] == msg_id:
                return "deferred", record, None
        return self.locate_queued(msg_id)

    def _drain_step(self) -> bool:
        """Move up to DRAIN_CHUNK backend records to the channels; True if more remain."""
        backend = self.backend
        if backend is None or self.exiting or not self.channels or self.paused or self.starting:
            return False
        index = self._disk_index
        in_order = index is not None and index.in_order
        if self.framed_drain and len(self.channels) == 1:
            # One channel: the chunks read from the file go to it as they are (no record is
            # cut out unless the channel's memory is full; Channel.put_framed).
            ch = next(iter(self.channels.values()))
            got = 0
            while got < DRAIN_CHUNK:
                buf, offs = self._next_backend_framed("TOPIC", DRAIN_CHUNK - got)
                if not offs:
                    break
                got += len(offs) - 1
                try:
                    ch.put_framed(buf, offs, in_order)
                except OSError as e:
                    self._put_failed(ch, e)
                if len(self.channels) != 1 or self.paused or self.exiting:
                    break  # changed by the channel's consumers: the next step looks again
        else:
            records: list[bytes] = []
            while len(records) < DRAIN_CHUNK:
                have = len(records)
                self._next_backend_records("TOPIC", DRAIN_CHUNK - have, records)
                if len(records) == have:
                    break
            got = len(records)
            if records:
                try:
                    self._fan_out(records, in_order)
                except OSError:
                    pass  # logged per channel
        if got and self._hooks is not None:
            self._hooks.backend_read(backend)
        return backend.depth > 0

    # ---------------------------------------------------------------- channels

    def get_channel(self, name: str) -> Channel:
        """The channel ``name``, created if needed (held messages then flow to it)."""
        ch = self.channels.get(name)
        if ch is None:
            ch = self._new_channel(self, name)
            self.channels[name] = ch
            if self._on_channels_changed is not None:
                self._on_channels_changed(self, name, True)
            self._flush_queue()
        return ch

    def get_existing_channel(self, name: str) -> Channel:
        return existing(self.channels, name, "channel")

    def delete_existing_channel(self, name: str) -> None:
        """Delete a channel (its consumers are disconnected). Raises TopicError if absent."""
        existing(self.channels, name, "channel", take=True).close()
        if self._on_channels_changed is not None:
            self._on_channels_changed(self, name, False)
        if not self.channels and self.ephemeral and self._on_last_channel_gone is not None:
            self._on_last_channel_gone(self)

    # ---------------------------------------------------------------- admin

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._flush_queue()

    def start(self) -> None:
        """End the ``starting`` hold: held messages flow to the channels."""
        self.starting = False
        self._flush_queue()

    def take_held(self, limit: int) -> list[bytes]:
        """Remove and return up to ``limit`` of the records the topic itself holds (memory
        first, then its backend), oldest first."""
        out = self._queue.take(limit) if limit > 0 else []
        self._mem_index.popped(len(out))
        if self.backend is not None:
            while len(out) < limit:
                have = len(out)
                self._next_backend_records("TOPIC", limit - have, out)
                if len(out) == have:
                    break
            if self._hooks is not None:
                self._hooks.backend_read(self.backend)
        return out

    def empty(self) -> None:
        """Drop the messages the topic itself holds (channels keep theirs), as nsqd."""
        self._deferred_held.clear()
        self._drop_queued(self.name, None)

    def drain_for_exit(self) -> list[tuple[bytes, int]]:
        """Clean exit: held records go to the backend; held deferred messages are returned as
        (record, delay ms) for the caller to keep. The topic stops."""
        self.exiting = True
        held = list(self._queue)
        self._mem_clear()
        if self.backend is not None and held:
            self.backend.put_many(held)
        deferred = self._deferred_held
        self._deferred_held = []
        return deferred

    def close(self) -> None:
        """Delete: every channel is closed and dropped, with the topic's files."""
        self.exiting = True
        chans = list(self.channels.values())
        self.channels.clear()
        for ch in chans:
            ch.close()
            if self._on_channels_changed is not None:
                self._on_channels_changed(self, ch.name, False)
        self._mem_clear()
        self._deferred_held.clear()
        if self.backend is not None:
            self.backend.delete()
            if self._hooks is not None:
                self._hooks.deferred_dropped(self.name, None)
