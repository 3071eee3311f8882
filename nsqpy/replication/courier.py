"""A leader's appends to one follower, whatever the topic: every topic's link (leader_stream.py)
hands its append to the follower's :class:`Courier`, and one frame carries what every topic
has pending for that follower.

Strategy: appends go on the replication stream (entries.py, "Transport"; :class:`_Stream`: one
TCP connection to the follower's TCP port, frames written one after another, answers matched
in order). An append submitted while the stream is idle (nothing queued, nothing unanswered)
goes out at once in a frame of its own: nothing waits for a batch. While frames are out, the
parts of every topic queue and the courier's task sends them together in the next frame
(entries.take_parts, at most MAX_REQUEST_BYTES), up to MAX_IN_FLIGHT frames unanswered. So the
frame rate to a follower follows its round trip, not the number of replicated topics. An
answer gives each part its own status and JSON answer, as if it had been sent alone; a frame
that fails (the stream refused, closed, or no answer within the courier's timeout) fails each
of its parts as (-1, {"message": ...}), which every link retries as its own failed request
(link.apply_answer).

The leader sends nothing on a new stream before the follower answered the magic with its
own, so a node without the stream, which answers E_BAD_PROTOCOL and closes, has read all it
was sent and its answer is not lost to a reset. Such a node gets HTTP requests from then on,
one at a time: one part as ``/replica/append``, several as ``/replica/append-many``, and one
request per part from a node that answers 404 to that. They go over one keep-alive HTTP/1.1
connection per follower, written and read here (:class:`_Connection`: a request line, Host
and Content-Length, the body; an answer with a Content-Length). Design notes:
docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, TypeAlias, cast
from urllib.parse import urlencode

from .entries import STREAM_MAGIC, FrameReader, Part, encode_frame, encode_parts, take_parts

log = logging.getLogger("nsqpy.replication")

#: A link's answer: the HTTP status (-1: the request failed) and the JSON object.
Answer: TypeAlias = tuple[int, dict[str, Any]]
#: Frames sent on a stream and not answered yet, at most (the next waits for an answer).
MAX_IN_FLIGHT = 8
#: Bytes waiting in a stream's socket buffer past which sending waits for them to drain.
STREAM_WRITE_HIGH = 1 << 20
#: The largest answer frame read (one JSON answer per part).
STREAM_ANSWER_LIMIT = 16 << 20


class Courier:
    """Requests to follower ``node_id``: :meth:`append` queues one topic's part and returns
    its answer. ``address_of(node_id)``: its HTTP "host:port" ("" when unknown);
    ``timeout``: seconds per request. ``requests`` and ``parts`` count what was sent (parts /
    requests is the batching across topics)."""

    def __init__(
        self,
        node_id: str,
        address_of: Callable[[str], str],
        timeout: float,
        stream_address_of: Callable[[str], str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.address_of = address_of
        self.stream_address_of = stream_address_of
        #: False once the follower refused the stream's magic (a node without it): HTTP.
        self.streams = stream_address_of is not None
        self._stream: _Stream | None = None
        self._conn: _Connection | None = None
        self.timeout = timeout
        self.queue: deque[tuple[Part, asyncio.Future[Answer]]] = deque()
        self.many = True  # False once the follower answered 404 to /replica/append-many
        self.requests = 0
        self.parts = 0
        self._wake = asyncio.Event()
        self._on_answer: dict[asyncio.Future[Answer], Callable[[], None]] = {}
        self._sending = False  # the task is sending a frame (opening the stream, draining)
        self._task: asyncio.Task[None] | None = None

    async def append(self, params: dict[str, str], body: bytes) -> Answer:
        """One topic's ``/replica/append`` (its query and body), sent with whatever other
        topics have queued: (HTTP status, JSON answer), (-1, {"message": ...}) on failure."""
        return await self.submit(params, body)

    def submit(
        self, params: dict[str, str], body: bytes, on_answer: Callable[[], None] | None = None
    ) -> asyncio.Future[Answer]:
        """:meth:`append` without waiting: queued now, in order; the future of its answer.
        When nothing is queued or unanswered and the stream is open, the part goes out at
        once in a frame of its own (no wait for a batch when idle: parts are batched only
        while a frame is out). ``on_answer()`` is called as soon as the answer is set (the
        future's own callbacks wait for the loop's next pass)."""
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        if on_answer is not None:
            self._on_answer[fut] = on_answer
        stream = self._stream
        if (
            stream is not None
            and not self.queue
            and not self._sending
            and not stream.in_flight
            and stream.ready()
            and self.streams
            and self.stream_address_of is not None
            and stream.address == self.stream_address_of(self.node_id)
        ):
            self.requests += 1
            self.parts += 1
            part = (params, body)
            stream.write([(part, fut)], encode_frame(encode_parts([part])))
            return fut
        self.queue.append(((params, body), fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replicate-to-{self.node_id}"
            )
        else:
            self._wake.set()
        return fut

    def close(self) -> None:
        """Stop the task and close the connection; every queued part is answered as failed."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._stream is not None:
            self._stream.fail("closed")
            self._stream = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        while self.queue:
            _, fut = self.queue.popleft()
            self._answer(fut, (-1, {"message": "closed"}))

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            stream = self._stream_now()
            if stream is not None and len(stream.in_flight) >= MAX_IN_FLIGHT:
                await self._wake.wait()  # an answer frees a place
                continue
            batch = [item for item in take_parts(self.queue) if not item[1].done()]
            if batch:
                try:
                    if stream is not None:
                        await self._send_stream(stream, batch)
                    else:
                        await self._send(batch)
                except Exception as exc:  # noqa: BLE001 - never leave a link waiting
                    log.exception("replication: request to node %s", self.node_id)
                    for _, fut in batch:
                        self._answer(fut, (-1, {"message": repr(exc)}))
                continue
            if not self.queue:
                await self._wake.wait()

    def _answer(self, fut: asyncio.Future[Answer], answer: Answer) -> None:
        if not fut.done():
            fut.set_result(answer)
        on_answer = self._on_answer.pop(fut, None)
        if on_answer is not None:
            on_answer()

    def _stream_now(self) -> _Stream | None:
        """The stream to send on (made when there is none, or it died, or the follower's
        address changed); None: this follower takes HTTP requests."""
        if not self.streams or self.stream_address_of is None:
            return None
        address = self.stream_address_of(self.node_id)
        if not address:
            return None
        stream = self._stream
        if stream is not None and (stream.dead or stream.address != address):
            stream.fail("replaced")
            stream = None
        if stream is None:
            stream = self._stream = _Stream(self, address)
        return stream

    async def _send_stream(
        self, stream: _Stream, batch: list[tuple[Part, asyncio.Future[Answer]]]
    ) -> None:
        """One frame with every part of ``batch`` on the stream; the answers come through
        :meth:`answer_batch` when its answer frame is read."""
        self.requests += 1
        self.parts += len(batch)
        self._sending = True  # submit sends nothing meanwhile: frames keep their order
        try:
            await stream.send(batch, encode_frame(encode_parts([part for part, _ in batch])))
        except ConnectionError as exc:  # not opened (down, restarting): each part retried
            failed: Answer = (-1, {"message": str(exc)})
            for _, fut in batch:
                self._answer(fut, failed)
        finally:
            self._sending = False

    def answer_batch(
        self, batch: list[tuple[Part, asyncio.Future[Answer]]], status: int, answer: dict[str, Any]
    ) -> None:
        """Give each part of ``batch`` its answer from ``/replica/append-many``'s answer (or
        a stream frame's, the same object): each as ``/replica/append`` would have answered
        it; every part as a failed request when the whole failed."""
        answers = answer.get("answers") if status == 200 else None
        if not isinstance(answers, list) or len(answers) != len(batch):
            # the request as a whole failed: each part as a failed request (retried)
            why = f"append-many answered {status}: {answer.get('message', '')}"
            failed: Answer = (-1, {"message": why})
            for _, fut in batch:
                self._answer(fut, failed)
            return
        for (_, fut), one in zip(batch, answers, strict=True):
            try:
                code, obj = one
                self._answer(fut, (int(code), obj if isinstance(obj, dict) else {}))
            except (TypeError, ValueError):
                self._answer(fut, (-1, {"message": f"bad part answer {one!r:.64}"}))

    async def _send(self, batch: list[tuple[Part, asyncio.Future[Answer]]]) -> None:
        self.requests += 1
        self.parts += len(batch)
        if len(batch) == 1 or not self.many:
            for part, fut in batch:
                self._answer(fut, await self._post("/replica/append", part[0], part[1]))
            return
        status, answer = await self._post(
            "/replica/append-many", {}, encode_parts([part for part, _ in batch])
        )
        if status == 404:
            self.many = False  # a node without it: one request per part from now on
            log.info("replication: node %s takes one topic per request", self.node_id)
            for part, fut in batch:
                self._answer(fut, await self._post("/replica/append", part[0], part[1]))
            return
        self.answer_batch(batch, status, answer)

    async def _post(self, path: str, params: dict[str, str], body: bytes) -> Answer:
        """POST ``path`` to the follower: (HTTP status, JSON answer), or (-1, {"message": the
        failure}) when the request failed (no address, refused, timed out, no JSON)."""
        address = self.address_of(self.node_id)
        conn = self._conn
        try:
            if not address:
                raise OSError(f"no address for node {self.node_id}")
            if conn is not None and (conn.address != address or conn.broken()):
                conn.close()
                conn = None
            reused = conn is not None
            if conn is None:
                conn = self._conn = _Connection(address)
            target = f"{path}?{urlencode(params)}" if params else path
            try:
                status, text = await asyncio.wait_for(conn.exchange(target, body), self.timeout)
            except (ConnectionError, asyncio.IncompleteReadError):
                if not reused or conn.got_head:
                    raise
                # a kept-alive connection the follower closed while idle: once more on a new
                # one (an append sent twice is harmless: its names are skipped, or it gaps)
                conn.close()
                conn = self._conn = _Connection(address)
                status, text = await asyncio.wait_for(conn.exchange(target, body), self.timeout)
            answer = json.loads(text) if text else {}
            if not isinstance(answer, dict):
                raise ValueError(f"not a JSON object: {text[:64]!r}")
            return status, answer
        except asyncio.CancelledError:
            self._drop(conn)
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: retried, then lagging
            self._drop(conn)
            return -1, {"message": repr(exc)}

    def _drop(self, conn: _Connection | None) -> None:
        if conn is not None:
            conn.close()
            if self._conn is conn:
                self._conn = None


class _Stream(asyncio.Protocol):
    """The replication stream to one follower (its TCP port, entries.STREAM_MAGIC): frames
    written one after another without waiting (at most MAX_IN_FLIGHT unanswered), answers
    taken in order as they are read and matched to the oldest unanswered frame. Any failure
    (refused, closed, an answer that does not parse, an answer later than the courier's
    timeout) fails every unanswered frame's parts (-1) and kills the stream; the next frame
    opens a new one. A follower that answers the magic with E_BAD_PROTOCOL (a node without
    the stream) turns the courier to HTTP for good."""

    def __init__(self, courier: Courier, address: str) -> None:
        self.courier = courier
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(STREAM_ANSWER_LIMIT)
        #: Frames not answered yet, oldest first: their parts and when they were sent.
        self.in_flight: deque[tuple[list[tuple[Part, asyncio.Future[Answer]]], float]] = deque()
        self._watch: asyncio.TimerHandle | None = None  # the oldest frame's answer deadline
        self.dead = False
        #: The follower answered the magic with its own (StreamServer): frames may go.
        self.greeted = False
        self._head = b""
        self._greeting: asyncio.Future[None] | None = None
        self.paused = False
        self._drained: asyncio.Future[None] | None = None

    def ready(self) -> bool:
        """Open, alive and not held back by a full socket buffer: a frame goes out at once."""
        return self.transport is not None and self.greeted and not self.dead and not self.paused

    def write(self, batch: list[tuple[Part, asyncio.Future[Answer]]], frame: bytes) -> None:
        """Send ``frame`` (carrying ``batch``) now; the stream must be open."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.in_flight.append((batch, now))
        if self._watch is None:
            self._watch = loop.call_at(now + self.courier.timeout, self._check)
        self.transport.write(frame)

    async def send(self, batch: list[tuple[Part, asyncio.Future[Answer]]], frame: bytes) -> None:
        """Open the stream when it is not, send ``frame``, then wait while the socket buffer
        is full. ConnectionError when it cannot be opened or died."""
        if self.transport is None and not self.dead:
            await self._open()
        if self.dead or self.transport is None:
            raise ConnectionError("replication stream closed")
        self.write(batch, frame)
        if self.paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    async def _open(self) -> None:
        host, _, port = self.address.rpartition(":")
        loop = asyncio.get_running_loop()
        self._greeting = loop.create_future()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self, host.strip("[]"), int(port)),
                self.courier.timeout,
            )
            # nothing is sent before the follower answered the magic with its own: a node
            # without the stream answers E_BAD_PROTOCOL and closes, having read all we sent
            await asyncio.wait_for(asyncio.shield(self._greeting), self.courier.timeout)
        except (OSError, ValueError, TimeoutError) as exc:
            self.fail(repr(exc))
            raise ConnectionError(f"replication stream to {self.address}: {exc!r}") from None
        if self.dead:
            raise ConnectionError(f"replication stream to {self.address} closed")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.dead:  # failed (closed) while opening
            self.transport.close()
            return
        self.transport.write(STREAM_MAGIC)

    def data_received(self, data: bytes) -> None:
        courier = self.courier
        if not self.greeted:
            self._head += data
            if len(self._head) < len(STREAM_MAGIC) and STREAM_MAGIC.startswith(self._head):
                return
            if not self._head.startswith(STREAM_MAGIC):
                # an nsqd without the stream: E_BAD_PROTOCOL (a V2 error frame), then close
                courier.streams = False
                log.info("replication: node %s takes HTTP requests", courier.node_id)
                self.fail("the follower has no replication stream")
                return
            self.greeted = True
            data, self._head = self._head[len(STREAM_MAGIC) :], b""
            if self._greeting is not None and not self._greeting.done():
                self._greeting.set_result(None)
        try:
            frames = self.reader.feed(data)
            for payload in frames:
                if not self.in_flight:
                    raise ValueError("an answer with no frame unanswered")
                answer = json.loads(payload)
                if not isinstance(answer, dict):
                    raise ValueError(f"not a JSON object: {payload[:64]!r}")
                batch, _ = self.in_flight.popleft()
                courier.answer_batch(batch, 200 if "answers" in answer else 400, answer)
        except ValueError as exc:
            self.fail(str(exc))
            return
        if frames:
            courier._wake.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.fail(f"closed ({exc!r})" if exc is not None else "closed")

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake_drained()

    def _wake_drained(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _check(self) -> None:
        """The oldest unanswered frame's deadline: fail the stream when it passed, else
        watch the next one (one timer per stream, not one per frame)."""
        self._watch = None
        if not self.in_flight or self.dead:
            return
        loop = asyncio.get_running_loop()
        due = self.in_flight[0][1] + self.courier.timeout
        if loop.time() >= due:
            self.fail("no answer in time")
        else:
            self._watch = loop.call_at(due, self._check)

    def fail(self, why: str) -> None:
        """Kill the stream: every unanswered frame's parts answered (-1, why)."""
        self.dead = True
        if self.transport is not None:
            transport, self.transport = self.transport, None
            transport.abort()
        self._wake_drained()
        if self._greeting is not None and not self._greeting.done():
            self._greeting.set_result(None)
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        failed: Answer = (-1, {"message": f"replication stream: {why}"})
        while self.in_flight:
            batch, _ = self.in_flight.popleft()
            for _, fut in batch:
                self.courier._answer(fut, failed)
        self.courier._wake.set()


class _Connection:
    """One keep-alive HTTP/1.1 connection to ``address`` ("host:port"), one exchange at a
    time; anything unexpected raises (the caller closes it)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.got_head = False  # the current exchange has read the answer's head

    def broken(self) -> bool:
        return self.reader is not None and self.reader.at_eof()

    async def exchange(self, target: str, body: bytes) -> tuple[int, bytes]:
        """Send ``POST target`` with ``body``; (status, answer body). OSError, ValueError,
        asyncio.IncompleteReadError."""
        self.got_head = False
        if self.writer is None:
            host, _, port = self.address.rpartition(":")
            self.reader, self.writer = await asyncio.open_connection(host.strip("[]"), int(port))
        reader, writer = self.reader, self.writer
        assert reader is not None
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {self.address}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("ascii")
        writer.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            writer.write(body)
        await writer.drain()
        lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        self.got_head = True
        version, _, rest = lines[0].partition(b" ")
        if not version.startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP answer: {lines[0][:64]!r}")
        status = int(rest[:3])
        length = -1
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
            elif name == b"transfer-encoding":
                raise ValueError("chunked answers are not expected")
        if length < 0:
            raise ValueError("answer without Content-Length")
        text = await reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, text

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
