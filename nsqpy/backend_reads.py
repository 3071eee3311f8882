"""A channel's reads from its backend that are not finished yet: the read ahead and the read
floor.

Strategy: a record read from a channel's diskqueue counts as consumed only once it is handed to a
consumer and FIN'd (DESIGN: "the read position and the next position are separate"). Records
are read in batches (the read ahead) and each gets an entry ``[file number, byte position,
done]``, appended in read order to ``acks``; a handed-out record's entry is also kept by message
ID in ``refs`` until the message is finished, dead-lettered, sampled out or written to the
backend again, when ``done`` is set. The diskqueue asks ``floor()`` before writing its meta file:
the oldest entry not done is where a restart must read from again, so after a crash every record
handed out and not finished is delivered again (at-least-once). Plain lists for entries keep
this cheap on the dispatch path (one small list per record read from disk, none for memory).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container

from .message import record_id


class BackendReads:
    """Records read from one channel's backend, from read ahead to finished.

    ``ahead``: records read and not yet handed out (they still count as the backend's: depth,
    locate, empty and a clean exit see them); ``ahead_refs`` their entries, in the same order;
    ``acks``: every entry not yet dropped, in read order; ``refs``: entries of handed-out
    records by message ID (16 hex bytes).
    """

    __slots__ = ("acks", "ahead", "ahead_refs", "refs")

    def __init__(self) -> None:
        self.ahead: deque[bytes] = deque()
        self.ahead_refs: deque[list[int]] = deque()
        self.acks: deque[list[int]] = deque()
        self.refs: dict[bytes, list[int]] = {}

    def fill(self, file_num: int, records: list[bytes], positions: list[int]) -> None:
        """Add one batch read from data file ``file_num`` (``positions``: each record's byte
        offset in it) to the read ahead."""
        acks = self.acks
        refs = self.ahead_refs
        for pos in positions:
            ref = [file_num, pos, 0]
            acks.append(ref)
            refs.append(ref)
        self.ahead.extend(records)

    def take(self, in_flight: Container[bytes]) -> bytes | None:
        """The next record of the read ahead to hand out, or None when the read ahead is empty.
        A second copy of a message still held (read again after a crash, or in flight) is
        skipped: the first copy stands for both."""
        ahead = self.ahead
        ahead_refs = self.ahead_refs
        refs = self.refs
        while ahead:
            rec = ahead.popleft()
            ref = ahead_refs.popleft()
            msg_id = record_id(rec)
            if msg_id in refs or msg_id in in_flight:
                ref[2] = 1
                continue
            refs[msg_id] = ref
            return rec
        return None

    def drop_ahead(self) -> list[bytes]:
        """Empty the read ahead; returns its records (their entries stay in ``acks``)."""
        records = list(self.ahead)
        self.ahead.clear()
        self.ahead_refs.clear()
        return records

    def floor(self) -> tuple[int, int, int] | None:
        """(file number, byte position, entries not yet done) of the oldest unfinished record,
        or None when every record read is done (DiskQueue.read_floor's contract)."""
        acks = self.acks
        while acks and acks[0][2]:
            acks.popleft()
        if not acks:
            return None
        first = acks[0]
        return first[0], first[1], len(acks)

    def release(self, msg_id: bytes) -> None:
        """The message no longer needs its backend record (FIN'd, or written again)."""
        ref = self.refs.pop(msg_id, None)
        if ref is not None:
            ref[2] = 1

    def forget(self) -> None:
        """Drop every entry (the backend was emptied, or everything was written again)."""
        self.acks.clear()
        self.refs.clear()

    def locate(self, msg_id: bytes) -> tuple[bytes, tuple[int, int]] | None:
        """The read-ahead record with ID ``msg_id`` and its (file number, byte position)."""
        for rec, ref in zip(self.ahead, self.ahead_refs):
            if record_id(rec) == msg_id:
                return rec, (ref[0], ref[1])
        return None
