"""Dead letters (beyond nsqd): messages delivered too many times move to a topic of their own.

Strategy: a channel with max attempts N (--max-attempts, or its own value set through
/channel/create and kept in nsqd.dat) hands every message whose delivery would be attempt N+1
to DeadLetters, which puts it, as it is, into the topic ``<topic>.<channel><suffix>``
(--dead-letter-suffix), created on first use like any topic. /channel/replay_dead_letters moves
them back, attempts reset to 0. A channel whose dead-letter topic name would be invalid (too
long, or the channel is ephemeral) keeps no dead letters, with a warning. NSQD owns one
DeadLetters; the channel calls it back through Channel.set_dead_letter."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from . import wire
from .message import with_attempts
from .topic import TopicError

if TYPE_CHECKING:
    from .channel import Channel
    from .options import Options
    from .topic import Topic


class DeadLetterHost(Protocol):
    """What DeadLetters needs of its NSQD (nsqd.py): the options, the topics, and the call
    that hands every backend's buffered writes to the OS."""

    opts: Options
    topics: dict[str, Topic]

    def get_topic(self, name: str) -> Topic: ...

    def get_existing_topic(self, name: str) -> Topic: ...

    def flush_backends(self) -> None: ...


log = logging.getLogger("nsqpy")


class DeadLetters:
    """The dead-letter policy of one NSQD: ``max_attempts`` holds the channels' own values,
    ``(topic, channel) -> n`` (0: off for that channel), persisted in nsqd.dat."""

    def __init__(self, nsqd: DeadLetterHost, metadata_changed: Callable[[], None]) -> None:
        self.nsqd = nsqd
        #: Called when a channel's own max attempts change (nsqd.dat keeps them).
        self._metadata_changed = metadata_changed
        self.max_attempts: dict[tuple[str, str], int] = {}

    def topic_name(self, topic: str, channel: str) -> str:
        """``<topic>.<channel><--dead-letter-suffix>``."""
        return f"{topic}.{channel}{self.nsqd.opts.dead_letter_suffix}"

    def set_channel_max_attempts(self, topic: str, channel: str, n: int) -> None:
        """A channel's own max attempts (0: off for it, whatever --max-attempts says).

        Raises ValueError when the dead-letter topic's name would not be a valid topic name
        (too long, or an ephemeral channel)."""
        if n and not wire.is_valid_name(self.topic_name(topic, channel)):
            raise ValueError(f"invalid dead-letter topic {self.topic_name(topic, channel)}")
        self.max_attempts[(topic, channel)] = n
        t = self.nsqd.topics.get(topic)
        ch = t.channels.get(channel) if t is not None else None
        if ch is not None:
            self.apply(ch)
        self._metadata_changed()

    def apply(self, ch: Channel) -> None:
        """Give ``ch`` its max attempts and the callback that takes its dead letters."""
        n = self.max_attempts.get((ch.topic_name, ch.name), self.nsqd.opts.max_attempts)
        if n and (ch.ephemeral or not wire.is_valid_name(self.topic_name(ch.topic_name, ch.name))):
            log.warning(
                "CHANNEL(%s:%s): no dead letters: %s is not a valid topic name",
                ch.topic_name,
                ch.name,
                self.topic_name(ch.topic_name, ch.name),
            )
            n = 0
        ch.set_dead_letter(n, self._move if n else None)

    def replay(self, topic: str, channel: str, limit: int) -> int:
        """Move up to ``limit`` dead letters of ``topic``/``channel`` (those its dead-letter
        topic still holds itself, oldest first) back into the channel, attempts reset to 0.
        Returns how many; raises TopicError when the topic or channel does not exist, OSError
        when a backend write fails."""
        nsqd = self.nsqd
        ch = nsqd.get_existing_topic(topic).get_existing_channel(channel)
        dead = nsqd.topics.get(self.topic_name(topic, channel))
        if dead is None:
            return 0
        records = dead.take_held(limit)
        if records:
            ch.put_many([with_attempts(r, 0) for r in records])
            nsqd.flush_backends()
            log.info("CHANNEL(%s:%s): %d dead letters replayed", topic, channel, len(records))
        return len(records)

    def _move(self, ch: Channel, records: list[bytes]) -> bool:
        """The channel's callback: put ``records`` into its dead-letter topic. False (logged)
        when that fails; the channel then keeps them."""
        name = self.topic_name(ch.topic_name, ch.name)
        try:
            self.nsqd.get_topic(name).put_many(records, in_order=False)
        except (OSError, TopicError) as e:
            log.error(
                "CHANNEL(%s): failed to move %d messages to %s - %s", ch.name, len(records), name, e
            )
            return False
        log.info("CHANNEL(%s:%s): %d messages to %s", ch.topic_name, ch.name, len(records), name)
        return True
