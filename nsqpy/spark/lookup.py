"""nsqlookupd discovery: which nsqd hosts a topic, as NSQ consumers find out.

Strategy: GET http://<lookupd>/lookup?topic=<topic> on every lookupd given, with the Accept
header of NSQ clients (`application/vnd.nsq; version=1.0`), and take the union of the producers'
`broadcast_address:tcp_port`. Both answer shapes are read: nsqlookupd 1.x's bare
`{"channels": [...], "producers": [...]}` and the pre-1.0 `{"status_code": 200, "data": {...}}`.
A lookupd that does not know the topic (404) contributes nothing; one that cannot be reached is
skipped with its error recorded, so one dead lookupd never hides the others' answers."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from nsqpy.internal.netaddr import dial_address

ACCEPT = "application/vnd.nsq; version=1.0"


def _lookup_url(lookupd: str, topic: str) -> str:
    base = lookupd.strip()
    if "://" not in base:
        base = "http://" + base
    base = base.rstrip("/")
    if base.endswith("/lookup"):
        base = base[: -len("/lookup")]
    return f"{base}/lookup?{urllib.parse.urlencode({'topic': topic})}"


def producer_address(producer: dict[str, Any]) -> str:
    """``broadcast_address:tcp_port`` (IPv6 in brackets), as NSQ clients connect."""
    host = str(producer.get("broadcast_address") or producer.get("address") or "")
    return dial_address(host, int(producer["tcp_port"]))


def producer_http_address(producer: dict[str, Any]) -> str:
    """``broadcast_address:http_port``: where that nsqd answers /stats."""
    host = str(producer.get("broadcast_address") or producer.get("address") or "")
    return dial_address(host, int(producer["http_port"]))


#: TCP address -> HTTP address of every producer any lookup has seen (for /stats)
HTTP_ADDRESSES: dict[str, str] = {}


def parse_lookup(body: bytes) -> list[str]:
    """The producers' TCP addresses from one /lookup answer (either JSON shape); their HTTP
    addresses are remembered in HTTP_ADDRESSES."""
    doc = json.loads(body)
    if isinstance(doc, dict) and "producers" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]
    out: list[str] = []
    for p in doc.get("producers") or []:
        addr = producer_address(p)
        if "http_port" in p:
            HTTP_ADDRESSES[addr] = producer_http_address(p)
        if addr not in out:
            out.append(addr)
    return out


def channel_backlog(http_address: str, topic: str, channel: str, timeout: float = 5.0) -> int:
    """``depth + in_flight_count`` of ``topic/channel`` from nsqd's ``/stats`` (0 when the
    channel does not exist). Raises OSError/ValueError when nsqd cannot be asked."""
    base = http_address if "://" in http_address else "http://" + http_address
    q = urllib.parse.urlencode({"format": "json", "topic": topic, "channel": channel})
    with urllib.request.urlopen(f"{base.rstrip('/')}/stats?{q}", timeout=timeout) as r:
        doc = json.loads(r.read())
    if isinstance(doc, dict) and "topics" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]  # nsqd before 1.0
    total = 0
    for t in doc.get("topics") or []:
        if t.get("topic_name") != topic:
            continue
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                total += int(c.get("depth", 0)) + int(c.get("in_flight_count", 0))
    return total


def lookup_one(lookupd: str, topic: str, timeout: float = 5.0) -> list[str]:
    """Ask one lookupd; [] when it does not know the topic. Raises OSError/ValueError when it
    cannot be asked or answers nonsense."""
    req = urllib.request.Request(_lookup_url(lookupd, topic), headers={"Accept": ACCEPT})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return parse_lookup(r.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise


def lookup_producers(
    lookupds: list[str], topic: str, timeout: float = 5.0
) -> tuple[list[str], dict[str, str]]:
    """The union of every lookupd's producers for ``topic``, and the errors by lookupd."""
    found: list[str] = []
    errors: dict[str, str] = {}
    for lookupd in lookupds:
        try:
            addrs = lookup_one(lookupd, topic, timeout)
        except (OSError, ValueError, KeyError, TypeError) as e:
            errors[lookupd] = f"{type(e).__name__}: {e}"
            continue
        for a in addrs:
            if a not in found:
                found.append(a)
    return found, errors
