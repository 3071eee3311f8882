"""A follower's end of the replication stream: a leader's connection to this node's TCP port
that opened with entries.STREAM_MAGIC (handed over by the V2 connection:
ProtocolV2.attach_protocol), carrying append frames one after another.

Strategy: each frame from the leader (``[u32 size][parts]``, the parts laid out as
``/replica/append-many``'s body: entries.encode_parts) is taken as that request would be
(appends.append_parts: every part into its topic's replica log, its answer what
``/replica/append`` gives), and answered with one frame holding the same JSON object as
``/replica/append-many``'s answer (``{"answers": [[status, answer], ...]}``; ``{"message":
"BAD_BODY"}`` for a frame whose parts do not parse). The leader may send the next frames before
the answers came (pipelining); they are taken and answered strictly in order, one at a time,
so an answer always covers its frame and every frame before it. Reading pauses while
MAX_QUEUED frames wait. A frame announced larger than the limit (the largest append request
plus the parts' overhead) closes the connection. Design notes: docs/architecture-replication.md
and docs/replication.md ("The stream")."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from .appends import PartAnswer, append_parts, append_parts_now
from .entries import MAX_REQUEST_BYTES, STREAM_MAGIC, FrameReader, decode_parts, encode_frame

if TYPE_CHECKING:
    from .node import Replication

log = logging.getLogger("nsqpy.replication")

#: Frames read ahead of the one being taken; reading pauses beyond.
MAX_QUEUED = 16
_BAD_BODY = encode_frame(b'{"message":"BAD_BODY"}')


class StreamServer(asyncio.Protocol):
    """One leader's stream connection (module docstring); ``repl`` is this node's
    replication, ``limit`` the largest frame taken, in bytes."""

    def __init__(self, repl: Replication, limit: int) -> None:
        self.repl = repl
        self.reader = FrameReader(limit)
        self.frames: deque[bytes] = deque()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.paused = False
        self.peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.transport.write(STREAM_MAGIC)  # the leader sends nothing before it
        log.info("replication stream from %s", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.frames.clear()
        if self.task is not None:
            self.task.cancel()
            self.task = None
        log.info("replication stream from %s closed", self.peer)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.feed(data)
        except ValueError as e:
            log.error("replication stream from %s: %s", self.peer, e)
            if self.transport is not None:
                self.transport.close()
            return
        if not frames:
            return
        if self.task is None and not self.frames:
            # nothing waits before them: taken here, at once, while no part has to wait
            # (appends.append_parts_now); the rest (and what follows) in order by the task
            out: list[bytes] = []
            for payload in frames:
                answer = self._take_now(payload)
                if answer is None:
                    break
                out.append(answer)
            if out and self.transport is not None:
                self.transport.write(b"".join(out))
            frames = frames[len(out) :]
            if not frames:
                return
        self.frames.extend(frames)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        if len(self.frames) >= MAX_QUEUED and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _take_now(self, payload: bytes) -> bytes | None:
        """The answer frame of ``payload`` taken at once, or None (nothing done) when one of
        its parts has to wait."""
        try:
            parts = decode_parts(payload)
        except (ValueError, UnicodeDecodeError):
            return _BAD_BODY
        answers = append_parts_now(self.repl, parts)
        return None if answers is None else _encode(answers)

    async def _run(self) -> None:
        frames = self.frames
        try:
            while frames:
                payload = frames.popleft()
                if self.paused and len(frames) < MAX_QUEUED // 2 and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                try:
                    parts = decode_parts(payload)
                except (ValueError, UnicodeDecodeError):
                    answer = _BAD_BODY
                else:
                    answer = _encode(await append_parts(self.repl, parts))
                if self.transport is None:
                    return
                self.transport.write(answer)
        finally:
            self.task = None


def _encode(answers: list[PartAnswer]) -> bytes:
    """The answer frame of a frame's parts."""
    obj = {"answers": [[status, answer] for status, answer in answers]}
    return encode_frame(json.dumps(obj, separators=(",", ":")).encode())


def stream_factory(repl: Replication) -> Callable[[], StreamServer]:
    """What ProtocolV2.attach_protocol takes for entries.STREAM_MAGIC: a StreamServer per
    connection, taking frames up to the largest append request (MAX_REQUEST_BYTES plus one
    --max-msg-size entry and the parts' overhead)."""
    limit = MAX_REQUEST_BYTES + repl.opts.max_msg_size + 1024
    return lambda: StreamServer(repl, limit)
