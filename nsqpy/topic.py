# A topic: the stream producers publish to.
#
# Strategy: a put is a synchronous call chain. With at least one channel and not paused, each
# message is copied to every channel at once (one Message per channel, sharing the body); with
# no channel, or while paused, messages wait in the topic's own queue and flow to the channels
# as soon as there is one (or on unpause), as nsqd's topic messagePump does. DPUB messages carry
# ``deferred_ms`` and enter each channel's deferred queue.
#
# Behaviour follows nsqd/topic.go. The in-memory queue is not bounded yet (the diskqueue spill
# of --mem-queue-size is tracked separately).
from __future__ import annotations

from collections import deque
from collections.abc import Callable

from .channel import Channel
from .message import Message


class TopicError(Exception):
    """Topic operation refused (text as nsqd: "exiting", "channel does not exist")."""


class Topic:
    """One topic: ``channels`` by name, counters ``message_count`` and ``message_bytes``."""

    __slots__ = (
        "_new_channel",
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

    @property
    def depth(self) -> int:
        """Messages held by the topic itself (no channel yet, or paused)."""
        return len(self._queue)

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
            self._queue.append(msg)

    def put_many(self, msgs: list[Message]) -> None:
        """Publish a batch (MPUB): all or nothing."""
        if self.exiting:
            raise TopicError("exiting")
        self.message_count += len(msgs)
        self.message_bytes += sum(len(m.body) for m in msgs)
        if self.channels and not self.paused:
            self._fan_out(msgs)
        else:
            self._queue.extend(msgs)

    def _fan_out(self, msgs: tuple[Message, ...] | list[Message]) -> None:
        chans = list(self.channels.values())
        # Make every channel's copy before any channel can deliver (and so change) a message.
        batches = [msgs] + [[m.copy() for m in msgs] for _ in range(len(chans) - 1)]
        for ch, batch in zip(chans, batches):
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

    def _flush_queue(self) -> None:
        if self._queue and self.channels and not self.paused:
            held = list(self._queue)
            self._queue.clear()
            self._fan_out(held)

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

    def close(self) -> None:
        """Delete: every channel is closed and dropped."""
        self.exiting = True
        chans = list(self.channels.values())
        self.channels.clear()
        for ch in chans:
            ch.close()
        self._queue.clear()
        if self._on_channels_changed is not None:
            self._on_channels_changed()
