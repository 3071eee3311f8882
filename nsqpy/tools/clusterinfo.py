"""What NSQ's tools ask nsqlookupd and nsqd over HTTP: topic producers, topics, channel stats.

Strategy: the queries of NSQ's internal/clusterinfo/data.go that the tools use, on one aiohttp
session with Go's two timeouts (connect, whole request). Each query asks every address at
once, as Go does with one goroutine per address; it fails only when every address failed
(``ClusterError`` naming them all) and otherwise returns what answered along with the errors
(``partial``), as Go returns its ErrList next to the data. Requests carry NSQ's V1 ``Accept``
header, so nsqd and nsqlookupd answer without the ``data`` envelope (http_api.GETV1)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

import aiohttp

from ..internal.netaddr import join_host_port, split_host_port

ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}


class ClusterError(Exception):
    """Every address failed; the text is Go's (``failed to query any nsqd: ...``)."""


@dataclass
class Producer:
    """An nsqd that has a topic: its HTTP address (``host:port``) and hostname."""

    broadcast_address: str
    http_port: int
    hostname: str
    tcp_port: int = 0

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)


#: The counters of a channel that nsq_stat prints (clusterinfo.ChannelStats), summed per node.
CHANNEL_COUNTERS = (
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)


@dataclass
class ChannelStats:
    """One channel's counters summed over the nodes that have it (ChannelStats.Add); memory
    depth is depth minus backend depth, as clusterinfo computes it."""

    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHANNEL_COUNTERS, 0))
    paused: bool = False

    def add(self, node: dict[str, Any]) -> None:
        for key in CHANNEL_COUNTERS:
            if key == "memory_depth":
                continue
            self.counters[key] += int(node.get(key) or 0)
        self.counters["memory_depth"] += int(node.get("depth") or 0) - int(
            node.get("backend_depth") or 0
        )
        self.paused = self.paused or bool(node.get("paused"))


class ClusterInfo:
    """HTTP queries against lookupds and nsqds; ``connect_timeout`` and ``request_timeout`` in
    seconds (Go's http-client-connect-timeout, http-client-request-timeout). Use as an async
    context manager (it owns an aiohttp session)."""

    def __init__(self, connect_timeout: float = 2.0, request_timeout: float = 5.0) -> None:
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ClusterInfo:
        self._session = aiohttp.ClientSession(timeout=self._timeout, headers=ACCEPT_V1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def get_v1(self, endpoint: str) -> Any:
        """GET ``endpoint`` and decode its JSON; non-200 raises with Go's text
        (``got response 404 Not Found "..."``)."""
        assert self._session is not None, "use ClusterInfo as an async context manager"
        async with self._session.get(endpoint) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"got response {resp.status} {resp.reason} {body!r}")
            return json.loads(body)

    async def _each(self, endpoints: list[str]) -> tuple[list[Any], list[str]]:
        results = await asyncio.gather(*(self.get_v1(e) for e in endpoints), return_exceptions=True)
        ok = [r for r in results if not isinstance(r, BaseException)]
        errs = [f"{e}: {r}" for e, r in zip(endpoints, results) if isinstance(r, BaseException)]
        return ok, errs

    async def lookupd_topic_producers(
        self, topic: str, lookupds: list[str]
    ) -> tuple[list[Producer], list[str]]:
        """The nsqds lookupds list for ``topic`` (deduplicated by HTTP address) and the errors
        of the lookupds that failed. Raises ClusterError when all failed."""
        ok, errs = await self._each(
            [f"http://{a}/lookup?topic={quote_plus(topic)}" for a in lookupds]
        )
        if len(errs) == len(lookupds):
            raise ClusterError(f"failed to query any nsqlookupd: {'; '.join(errs)}")
        producers: list[Producer] = []
        seen: set[str] = set()
        for resp in ok:
            for p in resp.get("producers") or []:
                prod = Producer(
                    p.get("broadcast_address", ""),
                    int(p.get("http_port") or 0),
                    p.get("hostname", ""),
                    int(p.get("tcp_port") or 0),
                )
                if prod.http_address not in seen:
                    seen.add(prod.http_address)
                    producers.append(prod)
        return producers, errs

    async def nsqd_topic_producers(
        self, topic: str, nsqds: list[str]
    ) -> tuple[list[Producer], list[str]]:
        """The nsqds among ``nsqds`` (HTTP addresses) that have ``topic`` (asked with /stats,
        then /info for the broadcast address), and the errors. Raises ClusterError when all
        failed."""

        async def one(addr: str) -> Producer | None:
            stats = await self.get_v1(
                f"http://{addr}/stats?format=json&topic={quote_plus(topic)}&include_clients=false"
            )
            if not any(t.get("topic_name") == topic for t in stats.get("topics") or []):
                return None
            info = await self.get_v1(f"http://{addr}/info")
            host, port = split_host_port(addr)
            bcast = info.get("broadcast_address") or host
            http_port = int(info.get("http_port") or 0) if info.get("broadcast_address") else port
            return Producer(bcast, http_port, info.get("hostname") or host, info.get("tcp_port", 0))

        results = await asyncio.gather(*(one(a) for a in nsqds), return_exceptions=True)
        errs = [f"{a}: {r}" for a, r in zip(nsqds, results) if isinstance(r, BaseException)]
        if len(errs) == len(nsqds):
            raise ClusterError(f"failed to query any nsqd: {'; '.join(errs)}")
        return [r for r in results if isinstance(r, Producer)], errs

    async def nsqd_channel_stats(
        self, producers: list[Producer], topic: str, channel: str
    ) -> tuple[dict[str, ChannelStats], list[str]]:
        """{channel name: its stats summed over ``producers``} for ``topic`` (GetNSQDStats with a
        topic and channel selected, clients left out), and the errors. Raises ClusterError when
        every producer failed, and so when there is none, as Go does."""
        endpoints = [
            f"http://{p.http_address}/stats?format=json&topic={quote_plus(topic)}"
            f"&channel={quote_plus(channel)}&include_clients=false"
            for p in producers
        ]
        ok, errs = await self._each(endpoints)
        if len(errs) == len(producers):
            raise ClusterError(f"failed to query any nsqd: {'; '.join(errs)}")
        out: dict[str, ChannelStats] = {}
        for resp in ok:
            for t in resp.get("topics") or []:
                if t.get("topic_name") != topic:
                    continue
                for c in t.get("channels") or []:
                    out.setdefault(c.get("channel_name", ""), ChannelStats()).add(c)
        return out, errs

    async def lookupd_topics(self, lookupds: list[str]) -> tuple[list[str], list[str]]:
        """Every topic the lookupds know, sorted and unique, and the errors (GetLookupdTopics).
        Raises ClusterError when all failed."""
        ok, errs = await self._each([f"http://{a}/topics" for a in lookupds])
        if len(errs) == len(lookupds):
            raise ClusterError(f"failed to query any nsqlookupd: {'; '.join(errs)}")
        topics = {t for resp in ok for t in resp.get("topics") or []}
        return sorted(topics), errs
