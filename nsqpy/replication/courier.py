"""A leader's requests to one follower, whatever the topic: every topic's link (leader_stream.py)
hands its ``/replica/append`` to the follower's :class:`Courier`, and one request carries what
every topic has pending for that follower.

Strategy: one task per follower node and one request in flight to it at a time. While it is
out, the links of other topics (each with at most one append of its own in flight) queue their
parts; the next request takes all of them (entries.take_parts, at most MAX_REQUEST_BYTES): one
part goes as ``/replica/append`` as before, several as ``/replica/append-many``
(entries.encode_parts), whose answer gives each part its own status and JSON answer, as if it
had been sent alone. So the request rate to a follower follows its round trip, not the number
of replicated topics. A follower that answers 404 to ``/replica/append-many`` (a node from
before it) gets one request per part from then on. A request that fails (refused, timed out,
not JSON) fails each of its parts as (-1, {"message": ...}), which every link retries as its
own failed request (link.apply_answer).

The requests go over one keep-alive HTTP/1.1 connection per follower, written and read here
(:class:`_Connection`: a request line, Host and Content-Length, the body; an answer with a
Content-Length): a general client costs several times the CPU of the request itself, and
with one request in flight to the node nothing more is needed. Any failure closes the
connection; the next request opens a new one. Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, TypeAlias
from urllib.parse import urlencode

from .entries import Part, encode_parts, take_parts

log = logging.getLogger("nsqpy.replication")

#: A link's answer: the HTTP status (-1: the request failed) and the JSON object.
Answer: TypeAlias = tuple[int, dict[str, Any]]


class Courier:
    """Requests to follower ``node_id``: :meth:`append` queues one topic's part and returns
    its answer. ``address_of(node_id)``: its HTTP "host:port" ("" when unknown);
    ``timeout``: seconds per request. ``requests`` and ``parts`` count what was sent (parts /
    requests is the batching across topics)."""

    def __init__(self, node_id: str, address_of: Callable[[str], str], timeout: float) -> None:
        self.node_id = node_id
        self.address_of = address_of
        self._conn: _Connection | None = None
        self.timeout = timeout
        self.queue: deque[tuple[Part, asyncio.Future[Answer]]] = deque()
        self.many = True  # False once the follower answered 404 to /replica/append-many
        self.requests = 0
        self.parts = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def append(self, params: dict[str, str], body: bytes) -> Answer:
        """One topic's ``/replica/append`` (its query and body), sent with whatever other
        topics have queued: (HTTP status, JSON answer), (-1, {"message": ...}) on failure."""
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.queue.append(((params, body), fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replicate-to-{self.node_id}"
            )
        else:
            self._wake.set()
        return await fut

    def close(self) -> None:
        """Stop the task and close the connection; every queued part is answered as failed."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        while self.queue:
            _, fut = self.queue.popleft()
            if not fut.done():
                fut.set_result((-1, {"message": "closed"}))

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            batch = [item for item in take_parts(self.queue) if not item[1].done()]
            if batch:
                try:
                    await self._send(batch)
                except Exception as exc:  # noqa: BLE001 - never leave a link waiting
                    log.exception("replication: request to node %s", self.node_id)
                    for _, fut in batch:
                        _answer(fut, (-1, {"message": repr(exc)}))
                continue
            if not self.queue:
                await self._wake.wait()

    async def _send(self, batch: list[tuple[Part, asyncio.Future[Answer]]]) -> None:
        self.requests += 1
        self.parts += len(batch)
        if len(batch) == 1 or not self.many:
            for part, fut in batch:
                _answer(fut, await self._post("/replica/append", part[0], part[1]))
            return
        status, answer = await self._post(
            "/replica/append-many", {}, encode_parts([part for part, _ in batch])
        )
        answers = answer.get("answers") if status == 200 else None
        if status == 404:
            self.many = False  # a node without it: one request per part from now on
            log.info("replication: node %s takes one topic per request", self.node_id)
        if not isinstance(answers, list) or len(answers) != len(batch):
            if status == 404:
                for part, fut in batch:
                    _answer(fut, await self._post("/replica/append", part[0], part[1]))
                return
            # the request as a whole failed: each part as a failed request (retried)
            why = f"append-many answered {status}: {answer.get('message', '')}"
            failed: Answer = (-1, {"message": why})
            for _, fut in batch:
                _answer(fut, failed)
            return
        for (_, fut), one in zip(batch, answers, strict=True):
            try:
                code, obj = one
                _answer(fut, (int(code), obj if isinstance(obj, dict) else {}))
            except (TypeError, ValueError):
                _answer(fut, (-1, {"message": f"bad part answer {one!r:.64}"}))

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


def _answer(fut: asyncio.Future[Answer], answer: Answer) -> None:
    if not fut.done():
        fut.set_result(answer)
