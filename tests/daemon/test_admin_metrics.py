"""GET /metrics on nsqpy-admin: its upstream requests to nsqlookupd and nsqd, timed and
counted by kind, with a lookupd address that refuses connections for the errors. Real
processes (tests/support/admin_cluster.py's cluster); the scrape goes to ``promtool check metrics``
where it is installed.
"""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.admin_cluster import Admin, Cluster, cluster_fixture, pub_both  # noqa: F401 (the fixture)

from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(60)


def scrape_text(a: Admin) -> str:
    code, body, headers = a.http("GET", "/metrics")
    assert code == 200, body
    ctype = {k.lower(): v for k, v in headers.items()}["content-type"]
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    return body.decode()


def scrape(a: Admin) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(scrape_text(a)):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_admin_upstream_metrics(cluster: Cluster) -> None:
    pub_both(cluster, "am", 2, 1)
    dead = f"127.0.0.1:{_closed_port()}"
    a = Admin(
        [
            f"--lookupd-http-address={cluster.lookupd.http_address}",
            f"--lookupd-http-address={dead}",
            "--sample-interval=60s",
        ]
    )
    try:
        assert a.http("GET", "/api/topics/am")[0] == 200  # lookupds, then both nsqds' /stats

        def counted() -> dict | None:
            m = scrape(a)
            n = m.get("nsqadmin_upstream_requests_total", {})
            ok = n.get((("kind", "nsqd"), ("result", "ok")), 0)
            return m if ok >= 2 else None

        m = wait_for(counted, timeout=20, what="upstream requests counted")
        req = m["nsqadmin_upstream_requests_total"]
        assert req[(("kind", "nsqlookupd"), ("result", "ok"))] >= 1
        assert req[(("kind", "nsqlookupd"), ("result", "error"))] >= 1
        assert m["nsqadmin_upstream_errors_total"][(("kind", "nsqlookupd"),)] >= 1
        assert (("kind", "nsqd"),) not in m.get("nsqadmin_upstream_errors_total", {})
        dur = m["nsqadmin_upstream_request_duration_seconds_count"]
        for kind in ("nsqd", "nsqlookupd"):
            total = sum(v for k, v in req.items() if dict(k)["kind"] == kind)
            assert dur[(("kind", kind),)] == total
            inf = m["nsqadmin_upstream_request_duration_seconds_bucket"][
                (("kind", kind), ("le", "+Inf"))
            ]
            assert inf == total
        assert m["process_resident_memory_bytes"][()] > 0
        text = scrape_text(a)
    finally:
        assert a.stop() == 0, a.log()
    if shutil.which("promtool"):
        r = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert r.returncode == 0, r.stdout + r.stderr
