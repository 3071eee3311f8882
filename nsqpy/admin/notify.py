"""nsqadmin's audit events (nsqadmin/notify.go): each admin action POSTed as JSON to
--notification-http-endpoint.

Strategy: the request handler only builds the event and puts it on a bounded queue (it never
waits on the endpoint, as nsqadmin hands it to a goroutine); one task POSTs the queue in order
with the admin's HTTP client deadlines, logging failures. A full queue (the endpoint is down
for long) drops the newest event with an error line instead of growing without bound."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import socket
import time
from typing import Any

import aiohttp
from aiohttp import web

from ..internal.aiotasks import cancel_and_wait
from ..internal.gojson import encode
from ..internal.netaddr import join_host_port

log = logging.getLogger("nsqpy")

QUEUE_SIZE = 1000


def basic_auth_user(request: web.Request) -> str:
    """The user name of an "Authorization: Basic ..." header ("" when absent or bad)."""
    kind, _, value = request.headers.get("Authorization", "").partition(" ")
    if kind != "Basic" or not value:
        return ""
    try:
        pair = base64.b64decode(value, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""
    user, sep, _ = pair.partition(":")
    return user if sep else ""


def admin_action(
    request: web.Request, action: str, topic: str, channel: str, node: str, now: float
) -> dict[str, Any]:
    """AdminAction's JSON: action, topic, channel and node (omitted when empty), timestamp
    (Unix seconds), user (Basic auth; omitted when empty), remote_ip ("ip:port"), user_agent,
    url (the request's, https when TLS or X-Scheme says so), via (this host's name)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    remote = join_host_port(peer[0], peer[1]) if peer else ""
    scheme = "https" if request.secure or request.headers.get("X-Scheme") == "https" else "http"
    d: dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        d["channel"] = channel
    if node:
        d["node"] = node
    d["timestamp"] = int(now)
    user = basic_auth_user(request)
    if user:
        d["user"] = user
    d["remote_ip"] = remote
    d["user_agent"] = request.headers.get("User-Agent", "")
    d["url"] = f"{scheme}://{request.host}{request.rel_url}"
    d["via"] = socket.gethostname()
    return d


class Notifier:
    """Queue and POST admin actions to ``endpoint`` ("" disables it)."""

    def __init__(self, endpoint: str, timeout: aiohttp.ClientTimeout) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None

    def admin_action(
        self, request: web.Request, action: str, topic: str, channel: str = "", node: str = ""
    ) -> None:
        """notifyAdminAction: queue the event (never blocks)."""
        if not self.endpoint:
            return
        event = admin_action(request, action, topic, channel, node, time.time())
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            log.error("notification queue full, dropping %s", action)

    def start(self) -> None:
        if self.endpoint and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None

    async def _run(self) -> None:
        async with aiohttp.ClientSession(timeout=self.timeout) as session:
            while True:
                event = await self.queue.get()
                log.info("POSTing notification to %s", self.endpoint)
                try:
                    async with session.post(
                        self.endpoint,
                        data=encode(event),
                        headers={"Content-Type": "application/json"},
                    ) as resp:
                        await resp.read()
                except (aiohttp.ClientError, TimeoutError) as e:
                    log.error("failed to POST notification - %s", e)
