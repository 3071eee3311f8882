"""GET /metrics on nsqpy-lookupd: the registration DB's sizes, the TCP commands, /lookup
answers and HTTP request times, with a real nsqpy-d registering over TCP. The scrape is parsed
with prometheus_client's parser and handed to ``promtool check metrics`` where it is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(60)


def scrape_text(lk) -> str:
    code, body, headers = lk.http("GET", "/metrics")
    assert code == 200, body
    ctype = {k.lower(): v for k, v in headers.items()}["content-type"]
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    return body.decode()


def scrape(lk) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(scrape_text(lk)):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_lookupd_metrics(lookupd_factory, daemon_factory) -> None:
    lk = lookupd_factory()
    d = daemon_factory(f"--lookupd-tcp-address=127.0.0.1:{lk.tcp_port}")
    assert d.http("POST", "/topic/create?topic=lt")[0] == 200
    assert d.http("POST", "/channel/create?topic=lt&channel=lc")[0] == 200

    def registered() -> dict | None:
        m = scrape(lk)
        return m if m["nsqlookupd_channels"][()] == 1 else None

    m = wait_for(registered, timeout=10, what="topic and channel registered")
    assert m["nsqlookupd_producers"][()] == 1
    assert m["nsqlookupd_topics"][()] == 1
    assert m["nsqlookupd_tombstones"][()] == 0
    assert m["nsqlookupd_clients"][()] == 1
    # one IDENTIFY per connection nsqd made: more than one where a slow PING answer on a loaded
    # machine made nsqd reconnect (as Go's lookupPeer does)
    assert m["nsqlookupd_commands_total"][(("command", "IDENTIFY"),)] >= 1
    assert m["nsqlookupd_commands_total"][(("command", "REGISTER"),)] >= 1

    assert lk.http("GET", "/lookup?topic=lt")[0] == 200
    assert lk.http("GET", "/lookup?topic=nope")[0] == 404
    (peer,) = json.loads(lk.http("GET", "/nodes")[1])["producers"]
    node = f"{peer['broadcast_address']}:{peer['http_port']}"
    assert lk.http("POST", f"/topic/tombstone?topic=lt&node={node}")[0] == 200
    m = scrape(lk)
    assert m["nsqlookupd_tombstones"][()] == 1
    assert m["nsqlookupd_lookups_total"] == {
        (("result", "found"),): 1,
        (("result", "not_found"),): 1,
    }
    lookup = (("handler", "/lookup"),)
    assert m["nsqlookupd_http_request_duration_seconds_count"][lookup] == 2
    assert 0 < m["nsqlookupd_http_request_duration_seconds_sum"][lookup] < 10
    inf = (("handler", "/lookup"), ("le", "+Inf"))
    assert m["nsqlookupd_http_request_duration_seconds_bucket"][inf] == 2
    assert m["nsqlookupd_http_requests_total"][(("code", "404"), ("handler", "/lookup"))] == 1
    assert m["nsqlookupd_http_requests_total"][(("code", "200"), ("handler", "/lookup"))] == 1
    assert m["process_resident_memory_bytes"][()] > 0

    text = scrape_text(lk)
    if shutil.which("promtool"):
        r = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert r.returncode == 0, r.stdout + r.stderr


def test_lookupd_metrics_method_not_allowed(lookupd) -> None:
    assert lookupd.http("POST", "/metrics", b"")[0] == 405
