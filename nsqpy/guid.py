"""Snowflake message IDs, as nsqd makes them (nsqd/guid.go).

Strategy: one 63-bit integer per ID, laid out (most significant first)

    [41 bits: pseudo-milliseconds since 2012-10-28 (twepoch 1288834974288)]
    [10 bits: node id][12 bits: sequence]

where a pseudo-millisecond is ``time_ns() >> 20`` (2**20 ns, about 1.05 ms). On the wire the
ID is the 16 lowercase hex digits of its 8 big-endian bytes. The rule kept: IDs from one
factory strictly increase. nsqd returns an error (and its caller sleeps and retries) when the
clock steps back or 4096 IDs were taken in one tick; blocking the event loop is not an option
here, so we keep the last tick instead of going back, and when a tick's 4096 sequence numbers
are used up we move on to the next tick early. IDs never repeat and never go back; the time
part may run ahead of the clock by the burst's length and catches up as soon as the clock does."""

from __future__ import annotations

import time
from collections.abc import Callable

NODE_ID_BITS = 10
SEQUENCE_BITS = 12
NODE_ID_SHIFT = SEQUENCE_BITS
TIMESTAMP_SHIFT = SEQUENCE_BITS + NODE_ID_BITS
SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
TWEPOCH = 1288834974288


class GUIDFactory:
    """Makes 16-byte hex message IDs for one node.

    ``node_id`` must be in [0, 1024) (ValueError otherwise). ``clock_ns`` returns wall-clock
    nanoseconds (default ``time.time_ns``); tests inject their own.
    """

    __slots__ = ("_clock_ns", "_last_ts", "_node_bits", "_sequence")

    def __init__(self, node_id: int, clock_ns: Callable[[], int] = time.time_ns) -> None:
        if not 0 <= node_id < 1024:
            raise ValueError("--node-id must be [0,1024)")
        self._node_bits = node_id << NODE_ID_SHIFT
        self._clock_ns = clock_ns
        self._last_ts = -1
        self._sequence = 0

    def new_guid(self) -> int:
        """The next ID as an integer (strictly greater than every earlier one)."""
        ts = self._clock_ns() >> 20
        last = self._last_ts
        if ts > last:
            self._last_ts = ts
            self._sequence = 0
        else:
            seq = (self._sequence + 1) & SEQUENCE_MASK
            if seq == 0:  # tick used up (or clock went back and this tick too): borrow the next
                last += 1
                self._last_ts = last
            self._sequence = seq
            ts = last
        return ((ts - TWEPOCH) << TIMESTAMP_SHIFT) | self._node_bits | self._sequence

    def new_id(self) -> bytes:
        """The next ID in wire form: 16 lowercase hex ASCII bytes."""
        return b"%016x" % self.new_guid()

    def new_records(self, header: bytes, bodies: list[bytes]) -> list[bytes]:
        """A message record per body (``header`` + the next ID in wire form + body; an MPUB's
        records share one 10-byte timestamp/attempts header, message.fresh_header).

        The IDs are what ``len(bodies)`` calls of new_id() at one instant would give: the
        clock is read once for the batch, so a batch that outlasts a tick keeps counting in
        its first tick (borrowing the next when 4096 are used, as new_guid does)."""
        ts = self._clock_ns() >> 20
        last = self._last_ts
        seq = self._sequence
        if ts > last:
            last = ts
            seq = -1
        node = self._node_bits
        seq_hex = _seq_hex()
        # An ID's last 3 hex digits are its 12-bit sequence; the 13 before them change only
        # with the tick, so they are formatted once per tick (with the header in front).
        prefix = _id_prefix(header, last, node)
        out: list[bytes] = []
        for body in bodies:
            seq += 1
            if seq > SEQUENCE_MASK:  # tick used up: borrow the next
                seq = 0
                last += 1
                prefix = _id_prefix(header, last, node)
            out.append(b"".join((prefix, seq_hex[seq], body)))
        if out:
            self._last_ts = last
            self._sequence = seq
        return out


def _id_prefix(header: bytes, tick: int, node_bits: int) -> bytes:
    """``header`` + the first 13 hex digits of every ID made in ``tick`` by this node."""
    return header + b"%013x" % (((tick - TWEPOCH) << NODE_ID_BITS) | (node_bits >> NODE_ID_SHIFT))


_SEQ_HEX: list[bytes] = []


def _seq_hex() -> list[bytes]:
    """The 4096 sequence numbers as 3 lowercase hex digits each (built at first use)."""
    if not _SEQ_HEX:
        _SEQ_HEX.extend(b"%03x" % i for i in range(SEQUENCE_MASK + 1))
    return _SEQ_HEX


def guid_timestamp_ms(guid: int) -> int:
    """The pseudo-millisecond tick (``time_ns >> 20``) an ID was made in."""
    return (guid >> TIMESTAMP_SHIFT) + TWEPOCH


def guid_node_id(guid: int) -> int:
    return (guid >> NODE_ID_SHIFT) & ((1 << NODE_ID_BITS) - 1)


def guid_sequence(guid: int) -> int:
    return guid & SEQUENCE_MASK


class DecodedID:
    """What an nsqd message ID says: ``node_id`` [0, 1024), ``tick`` (``time_ns >> 20`` when it
    was made), ``time_ns`` (the tick's start, Unix ns), ``sequence`` [0, 4096)."""

    __slots__ = ("guid", "node_id", "sequence", "tick")

    def __init__(self, guid: int) -> None:
        self.guid = guid
        self.tick = guid_timestamp_ms(guid)
        self.node_id = guid_node_id(guid)
        self.sequence = guid_sequence(guid)

    @property
    def time_ns(self) -> int:
        return self.tick << 20


def decode_id(text: str | bytes, now_ns: int | None = None) -> DecodedID:
    """Decode a message ID as nsqd writes it (16 hex digits).

    Raises ValueError saying why it is not an nsqd ID: not 16 hex digits, the top bit set (nsqd's
    IDs are 63-bit), or made more than a day after ``now_ns`` (default: now).
    """
    s = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    s = s.strip()
    if len(s) != 16 or any(c not in "0123456789abcdefABCDEF" for c in s):
        raise ValueError(f"{s!r} is not an nsqd message ID: it must be 16 hex digits")
    guid = int(s, 16)
    if guid >> 63:
        raise ValueError(f"{s!r} is not an nsqd message ID: its top bit is set")
    d = DecodedID(guid)
    now = time.time_ns() if now_ns is None else now_ns
    if d.time_ns > now + 86_400 * 10**9:
        raise ValueError(f"{s!r} is not an nsqd message ID: its time is in the future")
    return d
