"""Asking nsqlookupd which nsqd carry a topic (GET /lookup), for the consumer's discovery.

Strategy: one aiohttp GET per query with the V1 Accept header (so an old lookupd answers in the
1.x shape too), both answer shapes read (``{"producers": [...]}`` and the pre-1.0
``{"status_code": 200, "data": {...}}``), a 404 (TOPIC_NOT_FOUND) read as "none yet", and each
producer named ``broadcast_address:tcp_port`` as go-nsq's queryLookupd joins them.

Source: go-nsq consumer.go (queryLookupd, buildLookupAddr), api_request.go (v1.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:  # imported on first use: aiohttp takes ~0.3 s to import, and processes that
    import aiohttp  # only publish or consume by TCP (Spark's workers) never need it

_ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}


def lookup_url(addr: str, topic: str) -> str:
    """``addr`` ("host:port", or a URL with scheme and maybe a path) → its /lookup URL."""
    base = addr if "://" in addr else f"http://{addr}"
    scheme, _, rest = base.partition("://")
    if "/" not in rest:
        base = f"{scheme}://{rest}/lookup"
    return f"{base}?topic={quote(topic, safe='')}"


def join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: IPv6 literals get brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def lookup(
    session: aiohttp.ClientSession, addr: str, topic: str, timeout: float, auth: str = ""
) -> list[str]:
    """The TCP addresses ("host:port") of the nsqd producing ``topic`` per the lookupd at
    ``addr``; [] when the topic is unknown there. Raises aiohttp.ClientError, TimeoutError or
    ValueError (a malformed answer)."""
    import aiohttp

    headers = dict(_ACCEPT)
    if auth:
        headers["Authorization"] = f"Bearer {auth}"
    async with session.get(
        lookup_url(addr, topic),
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as resp:
        if resp.status == 404:
            return []
        if resp.status != 200:
            raise ValueError(f"lookupd {addr} answered {resp.status}")
        data: Any = await resp.json(content_type=None)
    if isinstance(data, dict) and "data" in data and "producers" not in data:
        data = data["data"] or {}
    producers = data.get("producers") or [] if isinstance(data, dict) else []
    return [join_host_port(p["broadcast_address"], int(p["tcp_port"])) for p in producers]
