"""One message in flight or deferred.

Strategy: a queued message is not an object at all but its record, one immutable ``bytes`` in
nsqd's message layout (wire.encode_message: 8-byte timestamp, 2-byte attempts, 16-byte ID,
body), the same bytes a diskqueue stores. A topic hands the same record to every channel (no
copy), a spill writes it as is, and CPython's garbage collector never walks it. A Message
object (``__slots__``, small) exists only while a message is in flight or deferred, where the
channel needs its timeout and owner."""

from __future__ import annotations

import struct
from typing import Any

# The record layout (nsqd's message encoding, also a diskqueue record and a message frame's
# body; nsq.io TCP protocol spec, "Data Format"):
#
#   [0:8]    timestamp  int64 big-endian, publish time in Unix nanoseconds
#   [8:10]   attempts   uint16 big-endian, deliveries so far
#   [10:26]  id         16 ASCII hex bytes
#   [26:]    body
HEADER_LENGTH = 26
_TS_ATTEMPTS = struct.Struct(">qH")


def encode_record(timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A record from its parts (``msg_id`` must be 16 bytes)."""
    return b"".join((_TS_ATTEMPTS.pack(timestamp_ns, attempts), msg_id, body))


def fresh_header(timestamp_ns: int) -> bytes:
    """The 10-byte timestamp+attempts header of a new message (attempts 0): a record is this,
    the ID and the body joined."""
    return _TS_ATTEMPTS.pack(timestamp_ns, 0)


def with_attempts(record: bytes, attempts: int) -> bytes:
    """The record with its attempt count replaced."""
    return b"".join((_TS_ATTEMPTS.pack(record_header(record)[0], attempts), record[10:]))


def record_id(record: bytes) -> bytes:
    """The 16-byte hex ID of a record."""
    return record[10:26]


def record_body(record: bytes) -> bytes:
    return record[26:]


def record_header(record: bytes) -> tuple[int, int]:
    """(timestamp ns, attempts) of a record."""
    ts, attempts = _TS_ATTEMPTS.unpack_from(record, 0)
    return ts, attempts


class Message:
    """A message taken out of a queue: ``record`` (nsqd layout), ``id`` (16 hex bytes),
    ``timestamp`` (publish time, Unix ns), ``attempts`` (deliveries so far).

    Channel bookkeeping: ``client`` (the consumer holding it in flight, or None), ``pri`` (due
    time of its in-flight timeout or deferral, monotonic ns), ``delivery_ts`` (monotonic ns of
    the last delivery, bounds TOUCH by --max-msg-timeout) and ``pq_entry`` (its live entry in a
    pqueue.TimeoutQueue).
    """

    __slots__ = (
        "attempts",
        "client",
        "delivery_ts",
        "id",
        "pq_entry",
        "pri",
        "record",
        "timestamp",
    )

    def __init__(self, record: bytes) -> None:
        ts, attempts = _TS_ATTEMPTS.unpack_from(record, 0)
        self.record = record
        self.id = record[10:26]
        self.timestamp: int = ts
        self.attempts: int = attempts
        self.client: Any = None
        self.pri = 0
        self.delivery_ts = 0
        self.pq_entry: Any = None

    @property
    def body(self) -> bytes:
        return self.record[26:]

    def to_record(self) -> bytes:
        """The record with the current attempt count (what goes back to a queue or disk)."""
        return b"".join(
            (_TS_ATTEMPTS.pack(self.timestamp, self.attempts), memoryview(self.record)[10:])
        )

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, attempts={self.attempts}, {len(self.record) - 26} bytes)"
