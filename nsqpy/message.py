"""The message record's layout (its one owner), and one message in flight or deferred.

Strategy: a queued message is not an object at all but its record, one immutable ``bytes`` in
nsqd's message layout (encode_record: 8-byte timestamp, 2-byte attempts, 16-byte ID, body), the
same bytes a diskqueue stores and a message frame carries (wire.py frames it). A topic hands
the same record to every channel (no copy), a spill writes it as is, and CPython's garbage
collector never walks it. A Message object (``__slots__``, small) exists only while a message
is in flight or deferred, where the channel needs its timeout and owner."""

from __future__ import annotations

import struct
from typing import Any, Final

# The record layout (nsqd's message encoding, also a diskqueue record and a message frame's
# body; nsq.io TCP protocol spec, "Data Format"):
#
#   [0:8]    timestamp  int64 big-endian, publish time in Unix nanoseconds
#   [8:10]   attempts   uint16 big-endian, deliveries so far
#   [10:26]  id         16 ASCII hex bytes
#   [26:]    body
#
# Every other module names these offsets instead of writing the numbers.
TIMESTAMP_START: Final = 0
ATTEMPTS_START: Final = 8
ID_START: Final = 10
ID_END: Final = 26
ID_LENGTH: Final = ID_END - ID_START
#: ``record[ID_SLICE]`` is the ID (also a C-level ``operator.itemgetter(ID_SLICE)``). The
#: modules mypyc compiles write ``record[ID_START:ID_END]`` instead: compiled code indexes bytes
#: with integers only, and it folds these Final bounds into constants.
ID_SLICE = slice(ID_START, ID_END)
#: 8-byte timestamp + 2-byte attempts + 16-byte ID: nsqd's minValidMsgLength; the body starts
#: here.
HEADER_LENGTH: Final = ID_END
BODY_START: Final = HEADER_LENGTH
#: ``record[BODY_START:]`` is the body. (A prebuilt slice costs one global lookup where
#: ``record[a:b]`` with named bounds costs two and a slice object.)
BODY_SLICE = slice(BODY_START, None)
_TS_ATTEMPTS = struct.Struct(">qH")


def encode_record(timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A record from its parts (``msg_id`` must be 16 bytes): nsqd's Message.WriteTo, the
    bytes a diskqueue stores and a message frame carries."""
    return b"".join((_TS_ATTEMPTS.pack(timestamp_ns, attempts), msg_id, body))


def decode_record(data: bytes | bytearray | memoryview) -> tuple[int, int, bytes, bytes]:
    """Inverse of :func:`encode_record`: ``(timestamp_ns, attempts, id, body)`` (nsqd's
    decodeMessage).

    Raises ValueError when ``data`` is shorter than the 26-byte header.
    """
    if len(data) < HEADER_LENGTH:
        raise ValueError(f"invalid message buffer size ({len(data)})")
    ts, attempts = _TS_ATTEMPTS.unpack_from(data, 0)
    return ts, attempts, bytes(data[ID_START:ID_END]), bytes(data[BODY_START:])


def fresh_header(timestamp_ns: int) -> bytes:
    """The 10-byte timestamp+attempts header of a new message (attempts 0): a record is this,
    the ID and the body joined."""
    return _TS_ATTEMPTS.pack(timestamp_ns, 0)


def with_attempts(record: bytes, attempts: int) -> bytes:
    """The record with its attempt count replaced."""
    return b"".join((_TS_ATTEMPTS.pack(record_header(record)[0], attempts), record[ID_START:]))


def record_id(record: bytes) -> bytes:
    """The 16-byte hex ID of a record."""
    return record[ID_START:ID_END]


def record_body(record: bytes) -> bytes:
    """The body of a record (after the 26-byte header)."""
    return record[BODY_START:]


def record_header(record: bytes) -> tuple[int, int]:
    """(timestamp ns, attempts) of a record."""
    ts, attempts = _TS_ATTEMPTS.unpack_from(record, 0)
    return ts, attempts


class Message:
    """A message taken out of a queue: ``record`` (nsqd layout), ``id`` (16 hex bytes),
    ``timestamp`` (publish time, Unix ns, read from the record when asked), ``attempts``
    (deliveries so far).

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
    )

    def __init__(self, record: bytes) -> None:
        # Two byte reads instead of a struct unpack: one message is made per delivery, and the
        # timestamp is read only by FIN's latency statistics and requeues (the property below).
        self.record = record
        self.id = record[ID_START:ID_END]
        self.attempts: int = (record[ATTEMPTS_START] << 8) | record[ATTEMPTS_START + 1]
        self.client: Any = None
        self.pri = 0
        self.delivery_ts = 0
        self.pq_entry: Any = None

    @property
    def timestamp(self) -> int:
        ts: int = _TS_ATTEMPTS.unpack_from(self.record, 0)[0]
        return ts

    @property
    def body(self) -> bytes:
        return self.record[BODY_START:]

    def to_record(self) -> bytes:
        """The record with the current attempt count (what goes back to a queue or disk)."""
        return b"".join(
            (_TS_ATTEMPTS.pack(self.timestamp, self.attempts), memoryview(self.record)[ID_START:])
        )

    def __repr__(self) -> str:
        size = len(self.record) - BODY_START
        return f"Message(id={self.id!r}, attempts={self.attempts}, {size} bytes)"
