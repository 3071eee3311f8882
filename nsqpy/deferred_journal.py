"""The deferred-message journal: DPUB messages survive restarts and crashes with their due time.

nsqd keeps deferred messages in memory only: a restart delivers them at once (clean exit) or
loses them (crash). nsqpy-d appends every DPUB'd message to one journal per data directory
before the DPUB is acknowledged, and a "done" mark once the message is due and back in its
channel's queue; at start the journal is replayed (adds minus done marks) and rewritten
compacted. This is our own side file, not an nsqd format, so it is msgpack:

  file: nsqpy.deferred.dat, a stream of msgpack arrays, one per record
    ["A", topic, channel | nil, id (16 bytes), body, timestamp (Unix ns), attempts,
     due (Unix ms)]                                   a deferred message
    ["D", topic, channel | nil, id]                   that message is no longer deferred

channel nil means the topic itself holds the message (it had no channel yet). A record cut
short by a crash ends the replay (later bytes cannot be trusted); everything before it counts.
Writes are buffered and handed to the OS by flush() (before the DPUB's OK, after the backends'
flush); fsync runs with the backends' sync. The journal is compacted when done marks outnumber
live entries. msgpack is imported by the first record read or written, not at start-up."""

from __future__ import annotations

import logging
import os
from typing import Any

from .internal.fileutil import write_all, write_sync_file

log = logging.getLogger("nsqpy")

Key = tuple[str, "str | None", bytes]


class DeferredJournal:
    """The journal at ``path``; ``live`` maps (topic, channel, id) to its "A" record."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.live: dict[Key, list[Any]] = {}
        self._buf = bytearray()
        self._fd: int | None = None
        self._dead = 0
        self._dirty = False

    def load(self) -> list[list[Any]]:
        """Replay the journal; returns the live "A" records (in journal order), then rewrites
        it compacted and opens it for appending. OSError if it cannot be rewritten."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        if not raw:  # nothing deferred: msgpack is imported by the first DPUB, not at start-up
            self.live = {}
            self._rewrite()
            return []
        import msgpack

        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(raw)
        live: dict[Key, list[Any]] = {}
        try:
            for rec in unpacker:
                if not isinstance(rec, list) or not rec:
                    raise ValueError(f"unexpected record {rec!r}")
                key = (rec[1], rec[2], rec[3])
                if rec[0] == "A" and len(rec) == 8:
                    live[key] = rec
                elif rec[0] == "D":
                    live.pop(key, None)
                else:
                    raise ValueError(f"unexpected record {rec[:2]!r}")
        except (ValueError, msgpack.UnpackException) as e:
            log.error("deferred journal %s: stopped at a bad record - %s", self.path, e)
        self.live = live
        self._rewrite()
        return list(live.values())

    def add(
        self,
        topic: str,
        channel: str | None,
        msg_id: bytes,
        body: bytes,
        ts: int,
        attempts: int,
        due_ms: int,
    ) -> None:
        import msgpack

        rec = ["A", topic, channel, msg_id, body, ts, attempts, due_ms]
        self.live[(topic, channel, msg_id)] = rec
        self._buf += msgpack.packb(rec)
        self._dirty = True

    def done(self, topic: str, channel: str | None, msg_id: bytes) -> None:
        if self.live.pop((topic, channel, msg_id), None) is None:
            return
        import msgpack

        self._buf += msgpack.packb(["D", topic, channel, msg_id])
        self._dead += 1
        self._dirty = True

    def drop(self, topic: str, channel: str | None = None) -> None:
        """Forget every entry of a deleted or emptied topic (channel None: all its channels
        and the topic's own) or channel."""
        for key in [k for k in self.live if k[0] == topic and (channel is None or k[1] == channel)]:
            self.done(*key)

    def flush(self) -> None:
        """Hand buffered records to the OS; compact when done marks dominate."""
        if self._buf:
            if self._fd is None:
                self._open()
            assert self._fd is not None
            write_all(self._fd, self._buf)
            self._buf.clear()
        if self._dead > 1024 and self._dead > len(self.live):
            self._rewrite()

    def fsync(self) -> None:
        if self._fd is not None and self._dirty:
            self._dirty = False
            os.fsync(self._fd)

    def close(self, extra: list[list[Any]] | None = None) -> None:
        """Write the live entries (plus ``extra`` "A" records, e.g. requeued messages with a
        delay at a clean exit) compacted, and close."""
        for rec in extra or []:
            self.live[(rec[1], rec[2], rec[3])] = rec
        self._buf.clear()
        self._rewrite()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _rewrite(self) -> None:
        """Replace the file with the live entries only (temp file, fsync, rename)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self.live:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self._dead = 0
            return
        import msgpack

        write_sync_file(self.path, b"".join(msgpack.packb(rec) for rec in self.live.values()))
        self._dead = 0
        self._open()
