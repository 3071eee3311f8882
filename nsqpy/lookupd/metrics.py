"""GET /metrics on nsqpy-lookupd (nsqlookupd has no such endpoint; this goes beyond it).

Strategy: the registration DB's sizes are read when a scrape arrives; the TCP commands, the
/lookup answers and the HTTP requests are counted as they are served, in plain numbers
(internal/reqmetrics.py), and prometheus_client is imported on the first scrape only.

Families:

- ``nsqlookupd_producers``: identified nsqd connections (the DB's "client" registrations)
- ``nsqlookupd_topics``, ``nsqlookupd_channels``: topic and channel registrations
- ``nsqlookupd_tombstones``: topic producers tombstoned now (within --tombstone-lifetime)
- ``nsqlookupd_clients``: open TCP connections (identified or not)
- ``nsqlookupd_commands_total{command}``: TCP commands served: IDENTIFY, REGISTER,
  UNREGISTER, PING
- ``nsqlookupd_lookups_total{result}``: GET /lookup answers, ``found`` (200) or
  ``not_found`` (404 TOPIC_NOT_FOUND)
- ``nsqlookupd_http_request_duration_seconds{handler}``: a histogram of routed HTTP requests
  by route path (``/lookup``, ``/nodes``, ...), from dispatch to the answer
- ``nsqlookupd_http_requests_total{handler, code}``: the same requests by status code
- ``process_*``: prometheus_client's process collector
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..internal.reqmetrics import Counts, Timings, render

__all__ = ["LookupdMetrics", "scrape"]


class LookupdMetrics:
    """What nsqpy-lookupd counts as it serves: ``commands`` (by TCP command name),
    ``lookups`` (by result), ``http`` (durations by route) and ``codes`` (by route and
    status)."""

    __slots__ = ("codes", "commands", "http", "lookups")

    def __init__(self) -> None:
        self.commands = Counts()
        self.lookups = Counts()
        self.http = Timings()
        self.codes = Counts()

    def timed(self, path: str, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handler`` (a router handler: Response, or an awaitable of one) with its time and
        status counted under ``path``."""

        def run(request: Any) -> Any:
            t0 = time.perf_counter()
            answer = handler(request)
            if isinstance(answer, Awaitable):
                return self._later(path, t0, answer)
            self._done(path, t0, answer)
            return answer

        return run

    async def _later(self, path: str, t0: float, pending: Awaitable[Any]) -> Any:
        answer = await pending
        self._done(path, t0, answer)
        return answer

    def _done(self, path: str, t0: float, answer: Any) -> None:
        self.http.observe((path,), time.perf_counter() - t0)
        self.codes.inc((path, str(getattr(answer, "status", 200))))


def scrape(lookupd: Any) -> bytes:
    """The text exposition of nsqpy-lookupd's families (see the module docstring) for
    ``lookupd``, an nsqlookupd.NSQLookupd (not imported: it imports this module)."""
    from prometheus_client.core import GaugeMetricFamily

    db = lookupd.db
    m = lookupd.metrics
    now = db.now()
    lifetime = lookupd.tombstone_lifetime_ns
    topics = channels = tombstones = 0
    for reg, producers in db.registrations():
        if reg.category == "topic":
            topics += 1
            tombstones += sum(1 for p in producers if p.is_tombstoned(lifetime, now))
        elif reg.category == "channel":
            channels += 1
    g = GaugeMetricFamily
    families = [
        g(
            "nsqlookupd_producers",
            "Identified nsqd connections",
            value=len(db.find_producers("client", "", "")),
        ),
        g("nsqlookupd_topics", "Topic registrations", value=topics),
        g("nsqlookupd_channels", "Channel registrations", value=channels),
        g("nsqlookupd_tombstones", "Topic producers tombstoned now", value=tombstones),
        g("nsqlookupd_clients", "Open TCP connections", value=len(lookupd.clients)),
        m.commands.family("nsqlookupd_commands", "TCP commands served", ["command"]),
        m.lookups.family("nsqlookupd_lookups", "GET /lookup answers", ["result"]),
        m.http.family(
            "nsqlookupd_http_request_duration_seconds",
            "Routed HTTP requests, dispatch to answer",
            ["handler"],
        ),
        m.codes.family("nsqlookupd_http_requests", "Routed HTTP requests", ["handler", "code"]),
    ]
    return render(families)
