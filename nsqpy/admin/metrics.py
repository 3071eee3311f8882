"""GET /metrics on nsqpy-admin (nsqadmin has no such endpoint; this goes beyond it).

Strategy: nsqpy-admin is a client of the cluster, so what an operator wants to see is how its
upstream requests fare: every request internal/clusterinfo's HTTPClient makes to an nsqlookupd or an
nsqd (its reads, its actions, the history sampler's rounds) is timed and, when it fails, counted, by
the kind of daemon asked. The numbers are plain (internal/reqmetrics.py); prometheus_client is
imported on the first scrape only. The kind of an address is "nsqlookupd" when it is one of
--lookupd-http-address, else "nsqd" (the nsqds come from lookupd answers or --nsqd-http-address).

Families (label ``kind``: nsqlookupd or nsqd):

- ``nsqadmin_upstream_request_duration_seconds{kind}``: a histogram of upstream requests,
  answered or failed (a 403 retried at https counts once, with both tries' time)
- ``nsqadmin_upstream_requests_total{kind, result}``: the same requests, ``result`` "ok" or
  "error"
- ``nsqadmin_upstream_errors_total{kind}``: failed requests (refused, timed out, not 200)
- ``process_*``: prometheus_client's process collector
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..internal.reqmetrics import Counts, Timings, render

__all__ = ["LOOKUPD", "NSQD", "UpstreamMetrics"]

LOOKUPD = "nsqlookupd"
NSQD = "nsqd"


class UpstreamMetrics:
    """Upstream request times and outcomes by kind; ``lookupd`` holds the nsqlookupd HTTP
    addresses ("host:port") that tell the kinds apart."""

    __slots__ = ("errors", "lookupd", "results", "timings")

    def __init__(self, lookupd: list[str] | None = None) -> None:
        self.lookupd = set(lookupd or ())
        self.timings = Timings()
        self.results = Counts()
        self.errors = Counts()

    def kind(self, url: str) -> str:
        """ "nsqlookupd" or "nsqd" for a request URL."""
        try:
            netloc = urlsplit(url).netloc
        except ValueError:
            return NSQD
        return LOOKUPD if netloc in self.lookupd else NSQD

    def observe(self, url: str, seconds: float, ok: bool) -> None:
        kind = self.kind(url)
        self.timings.observe((kind,), seconds)
        self.results.inc((kind, "ok" if ok else "error"))
        if not ok:
            self.errors.inc((kind,))

    def scrape(self) -> bytes:
        """The text exposition of the families (see the module docstring)."""
        return render(
            [
                self.timings.family(
                    "nsqadmin_upstream_request_duration_seconds",
                    "Requests to nsqlookupd and nsqd, answered or failed",
                    ["kind"],
                ),
                self.results.family(
                    "nsqadmin_upstream_requests",
                    "Requests to nsqlookupd and nsqd by result",
                    ["kind", "result"],
                ),
                self.errors.family(
                    "nsqadmin_upstream_errors",
                    "Failed requests to nsqlookupd and nsqd (refused, timed out, not 200)",
                    ["kind"],
                ),
            ]
        )
