# One message as a channel holds it.
#
# Strategy: keep the per-message object small (``__slots__``, no dict) and never copy the body: a
# topic hands each channel its own Message (own attempts, own timeout) sharing the same ``body``
# bytes. Layout on the wire and on disk lives in wire.py.
from __future__ import annotations

from typing import Any


class Message:
    """A message: 16-byte hex ``id``, ``body`` bytes, ``timestamp`` (publish time, Unix ns),
    ``attempts`` (delivery count so far).

    Channel bookkeeping: ``client`` (the consumer holding it in flight, or None), ``pri`` (due
    time of its in-flight timeout or deferral, monotonic ns), ``delivery_ts`` (monotonic ns of the
    last delivery, bounds TOUCH by --max-msg-timeout), ``deferred_ms`` (DPUB delay, ms, until the
    topic hands it to a channel) and ``pq_entry`` (its live entry in a pqueue.TimeoutQueue).
    """

    __slots__ = (
        "attempts",
        "body",
        "client",
        "deferred_ms",
        "delivery_ts",
        "id",
        "pq_entry",
        "pri",
        "timestamp",
    )

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, attempts: int = 0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.client: Any = None
        self.pri = 0
        self.delivery_ts = 0
        self.deferred_ms = 0
        self.pq_entry: Any = None

    def copy(self) -> Message:
        """A new Message with the same id, body (shared), timestamp and deferral."""
        m = Message(self.id, self.body, self.timestamp, self.attempts)
        m.deferred_ms = self.deferred_ms
        return m

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, attempts={self.attempts}, {len(self.body)} bytes)"
