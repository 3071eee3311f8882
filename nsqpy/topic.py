# A topic: the stream producers publish to.
#
# Strategy: a put is a synchronous call chain. With at least one channel and not paused, each
# message is copied to every channel at once (one Message per channel, sharing the body); with
# no channel, or while paused, messages wait in the topic's own queue and flow to the channels
# as soon as there is one (or on unpause), as nsqd's topic messagePump does. DPUB messages carry
# ``deferred_ms`` and enter each channel's deferred queue.
#
# Storage: at most ``mem_queue_size`` held messages stay in memory, the rest go to the topic's
# backend (a DiskQueue named after the topic); when channels appear the backend is drained into
# them a chunk per event-loop pass, so a large backlog never stalls other clients. DPUB messages
# held by the topic stay in memory so they keep their delay. Ephemeral topics have no backend.
#
# Behaviour follows nsqd/topic.go.
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from . import wire
from .channel import Channel, StorageHooks
from .message import Message

if TYPE_CHECKING:
    from .diskqueue import DiskQueue

log = logging.getLogger("nsqpy")

#: Backend records moved to the channels per event-loop pass while a topic drains its backlog.
DRAIN_CHUNK = 2000


class TopicError(Exception):
    """Topic operation refused (text as nsqd: "exiting", "channel does not exist")."""


class Topic:
    """One topic: ``channels`` by name, counters ``message_count`` and ``message_bytes``."""

    __slots__ = (
        "_drain_scheduled",
        "_new_channel",
        "_hooks",
        "_schedule",
        "backend",
        "mem_queue_size",
        "_on_channels_changed",
        "_on_last_channel_gone",
        "_queue",
        "channels",
        "ephemeral",
        "exiting",
        "message_bytes",
        "message_count",
        "name",
        "paused",
    )

    def __init__(
        self,
        name: str,
        new_channel: Callable[[Topic, str], Channel],
        on_channels_changed: Callable[[], None] | None = None,
        on_last_channel_gone: Callable[[Topic], None] | None = None,
        *,
        mem_queue_size: int = 10000,
        backend: DiskQueue | None = None,
        hooks: StorageHooks | None = None,
        schedule: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.paused = False
        self.exiting = False
        self.channels: dict[str, Channel] = {}
        self._queue: deque[Message] = deque()
        self.message_count = 0
        self.message_bytes = 0
        self._new_channel = new_channel
        self._on_channels_changed = on_channels_changed
        self._on_last_channel_gone = on_last_channel_gone
        self.mem_queue_size = mem_queue_size
        self.backend = backend
        self._hooks = hooks
        self._schedule = schedule
        self._drain_scheduled = False

    @property
    def depth(self) -> int:
        """Messages held by the topic itself (no channel yet, or paused): memory + backend."""
        backend = self.backend
        return len(self._queue) + (backend.depth if backend is not None else 0)

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def __repr__(self) -> str:
        return f"Topic({self.name})"

    # ---------------------------------------------------------------- publish

    def put(self, msg: Message) -> None:
        """Publish one message. Raises TopicError("exiting") once the topic is being deleted."""
        if self.exiting:
            raise TopicError("exiting")
        self.message_count += 1
        self.message_bytes += len(msg.body)
        if self.channels and not self.paused:
            self._fan_out((msg,))
        else:
            self._hold((msg,))

    def put_many(self, msgs: list[Message]) -> None:
        """Publish a batch (MPUB): all or nothing."""
        if self.exiting:
            raise TopicError("exiting")
        self.message_count += len(msgs)
        self.message_bytes += sum(len(m.body) for m in msgs)
        if self.channels and not self.paused:
            self._fan_out(msgs)
        else:
            self._hold(msgs)

    def _hold(self, msgs: Sequence[Message]) -> None:
        """Keep messages for later channels: memory first, then the backend (raises OSError
        when that write fails). Deferred messages stay in memory to keep their delay."""
        queue = self._queue
        if self._hooks is not None and self.backend is not None:
            for m in msgs:
                if m.deferred_ms:
                    self._hooks.deferred(self.name, None, m, m.deferred_ms)
        room = self.mem_queue_size - len(queue)
        if room >= len(msgs):
            queue.extend(msgs)
            return
        spill = []
        for m in msgs:
            if room > 0 or m.deferred_ms:
                queue.append(m)
                room -= 1
            else:
                spill.append(m)
        backend = self.backend
        if backend is None:
            return  # ephemeral: dropped past --mem-queue-size (as nsqd)
        enc = wire.encode_message
        backend.put_many([enc(m.timestamp, m.attempts, m.id, m.body) for m in spill])
        if self._hooks is not None:
            self._hooks.spilled(backend)

    def _fan_out(self, msgs: Sequence[Message]) -> None:
        """Give each channel its copy; a backend write failure on one channel does not stop the
        others, and is raised once all were tried."""
        chans = list(self.channels.values())
        error: OSError | None = None
        # Make every channel's copy before any channel can deliver (and so change) a message.
        batches = [msgs] + [[m.copy() for m in msgs] for _ in range(len(chans) - 1)]
        for ch, batch in zip(chans, batches):
            try:
                if len(batch) == 1:
                    m = batch[0]
                    if m.deferred_ms:
                        ch.put_deferred(m, m.deferred_ms)
                    else:
                        ch.put(m)
                    continue
                plain = [m for m in batch if not m.deferred_ms]
                if len(plain) != len(batch):
                    for m in batch:
                        if m.deferred_ms:
                            ch.put_deferred(m, m.deferred_ms)
                ch.put_many(plain)
            except OSError as e:
                log.error(
                    "TOPIC(%s) ERROR: failed to put msg to channel(%s) - %s", self.name, ch.name, e
                )
                error = error or e
        if error is not None:
            raise error

    def _flush_queue(self) -> None:
        if not self.channels or self.paused:
            return
        if self._queue:
            held = list(self._queue)
            self._queue.clear()
            try:
                self._fan_out(held)
            except OSError:
                pass  # logged per channel by _fan_out; nothing more to do off a publish
            if self._hooks is not None and self.backend is not None:
                moved = [m for m in held if m.deferred_ms]
                if moved:
                    self._hooks.deferred_done(self.name, None, moved)
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

    def _drain_step(self) -> bool:
        """Move up to DRAIN_CHUNK backend records to the channels; True if more remain."""
        backend = self.backend
        if backend is None or self.exiting or not self.channels or self.paused:
            return False
        msgs: list[Message] = []
        while len(msgs) < DRAIN_CHUNK:
            try:
                data = backend.peek()
            except OSError as e:
                log.error("TOPIC(%s): failed to read from backend - %s", self.name, e)
                break
            if data is None:
                break
            backend.advance()
            try:
                ts, attempts, msg_id, body = wire.decode_message(data)
            except ValueError as e:
                log.error("TOPIC(%s): failed to decode message - %s", self.name, e)
                continue
            msgs.append(Message(msg_id, body, ts, attempts))
        if msgs:
            if self._hooks is not None:
                self._hooks.backend_read(backend)
            try:
                self._fan_out(msgs)
            except OSError:
                pass  # logged per channel
        return backend.depth > 0

    # ---------------------------------------------------------------- channels

    def get_channel(self, name: str) -> Channel:
        """The channel ``name``, created if needed (held messages then flow to it)."""
        ch = self.channels.get(name)
        if ch is None:
            ch = self._new_channel(self, name)
            self.channels[name] = ch
            if self._on_channels_changed is not None:
                self._on_channels_changed()
            self._flush_queue()
        return ch

    def get_existing_channel(self, name: str) -> Channel:
        ch = self.channels.get(name)
        if ch is None:
            raise TopicError("channel does not exist")
        return ch

    def delete_existing_channel(self, name: str) -> None:
        """Delete a channel (its consumers are disconnected). Raises TopicError if absent."""
        ch = self.channels.pop(name, None)
        if ch is None:
            raise TopicError("channel does not exist")
        ch.close()
        if self._on_channels_changed is not None:
            self._on_channels_changed()
        if not self.channels and self.ephemeral and self._on_last_channel_gone is not None:
            self._on_last_channel_gone(self)

    # ---------------------------------------------------------------- admin

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._flush_queue()

    def empty(self) -> None:
        """Drop the messages the topic itself holds (channels keep theirs), as nsqd."""
        self._queue.clear()
        if self.backend is not None:
            self.backend.empty()
            if self._hooks is not None:
                self._hooks.deferred_dropped(self.name, None)

    def drain_for_exit(self) -> list[Message]:
        """Clean exit: held messages go to the backend; held deferred messages are returned
        (``deferred_ms`` = their delay) for the caller to keep. The topic stops."""
        self.exiting = True
        held = list(self._queue)
        self._queue.clear()
        deferred = [m for m in held if m.deferred_ms]
        plain = [m for m in held if not m.deferred_ms]
        if self.backend is not None and plain:
            enc = wire.encode_message
            self.backend.put_many([enc(m.timestamp, m.attempts, m.id, m.body) for m in plain])
        return deferred

    def close(self) -> None:
        """Delete: every channel is closed and dropped."""
        self.exiting = True
        chans = list(self.channels.values())
        self.channels.clear()
        for ch in chans:
            ch.close()
        self._queue.clear()
        if self.backend is not None:
            self.backend.delete()
            if self._hooks is not None:
                self._hooks.deferred_dropped(self.name, None)
        if self._on_channels_changed is not None:
            self._on_channels_changed()
