"""Publishes made on a node that does not lead the topic, sent on to the leader.

One :class:`Forwarder` per replicated topic this node does not lead, made on the first such
publish. Producers' commands queue here (bodies, DPUB delay, a future); one task drains the
queue: every queued PUB and MPUB goes in one ``POST /mpub?binary=true`` to the leader's HTTP
address, each DPUB in its own ``POST /pub?defer=<ms>``, and every future of a request gets its
answer (True: the leader answered 200, which it does only once the publish is committed by its
own rules; False: anything else). So a follower answers its producer once the leader answered,
and no task is made per message. A request that fails to reach the leader (connection refused
or dropped: it may be failing over) is sent again, to whichever node leads by then, until
``timeout``; so a publish may reach the log twice (at-least-once). The leader is looked up at
each request (``leader_http()``: "" while the topic has no leader, then the request waits for
one, for ``timeout`` seconds at most, polling every ``POLL`` seconds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("nsqpy.replication")

_U32 = struct.Struct(">I")
#: Most message bodies per forwarded /mpub (the leader's --max-body-size also bounds it).
MAX_BATCH = 2000
POLL = 0.05


class Forwarder:
    """``Forwarder(topic, http, leader_http, timeout)``: ``submit(bodies, delay_ms)`` returns
    a future answered True once the leader acknowledged the publish, False when it refused or
    could not be reached within ``timeout`` seconds; ``refused`` holds the leader's message for
    the last publish it refused ("" after one it took)."""

    def __init__(
        self,
        topic: str,
        http: aiohttp.ClientSession | None,
        leader_http: Callable[[], str],
        timeout: float,
    ) -> None:
        self.topic = topic
        self.http = http
        self.leader_http = leader_http
        self.timeout = timeout
        self.queue: deque[tuple[list[bytes], int, asyncio.Future[bool]]] = deque()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.forwarded = 0
        self.refused = ""  # the leader's words for the last publish it refused

    def submit(self, bodies: list[bytes], delay_ms: int = 0) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.queue.append((bodies, delay_ms, fut))
        self.wake.set()
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"forward-{self.topic}"
            )
        return fut

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        while self.queue:
            fut = self.queue.popleft()[2]
            if not fut.done():
                fut.set_result(False)

    async def _run(self) -> None:
        queue = self.queue
        while True:
            if not queue:
                self.wake.clear()
                await self.wake.wait()
                continue
            bodies, delay, fut = queue.popleft()
            if delay:
                ok = await self._post("/pub", bodies[0], {"defer": str(delay)})
                fut.set_result(ok) if not fut.done() else None
                continue
            batch = [fut]
            msgs = list(bodies)
            while queue and not queue[0][1] and len(msgs) + len(queue[0][0]) <= MAX_BATCH:
                more, _, f = queue.popleft()
                msgs.extend(more)
                batch.append(f)
            payload = b"".join(b for m in msgs for b in (_U32.pack(len(m)), m))
            ok = await self._post("/mpub", _U32.pack(len(msgs)) + payload, {"binary": "true"})
            if ok:
                self.forwarded += len(msgs)
            for f in batch:
                if not f.done():
                    f.set_result(ok)

    async def _post(self, path: str, body: bytes, params: dict[str, str]) -> bool:
        deadline = time.monotonic() + self.timeout
        while True:
            leader = self.leader_http()
            if leader:
                try:
                    if self.http is None:
                        raise OSError("no HTTP client (replication not running)")
                    async with self.http.post(
                        f"http://{leader}{path}",
                        params={"topic": self.topic, **params},
                        data=body,
                        # seconds: aiohttp makes them a ClientTimeout(total=...)
                        timeout=max(deadline - time.monotonic(), 0.1),  # type: ignore[arg-type]
                    ) as resp:
                        raw = await resp.read()
                        if resp.status == 200:
                            self.refused = ""
                            return True
                        self.refused = _message(raw) or f"HTTP {resp.status}"
                        log.warning(
                            "topic %s: leader %s answered %d to a forwarded publish",
                            self.topic,
                            leader,
                            resp.status,
                        )
                        return False
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the leader may be moving: retry
                    log.warning("topic %s: forwarding to %s failed: %r", self.topic, leader, exc)
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL)


def _message(raw: bytes) -> str:
    """The text of an nsqd HTTP error answer (``{"message": ...}``, or the body as is)."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:200]
    return str(obj.get("message", obj)) if isinstance(obj, dict) else str(obj)
