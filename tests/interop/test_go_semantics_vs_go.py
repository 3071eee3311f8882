"""Go's semantics in nsqpy-d, side by side with Go nsqd 1.3 in one run (nsqpy.internal's
gostrconv, gojson and lg as the daemon uses them).

One Go nsqd and one nsqpy-d (module scope) get the same requests; their answers must be equal:

  * POST /pub?defer=V: strconv.ParseInt's syntax (no spaces, no "_", no non-ASCII digits), the
    range check, and time.Duration(V) * time.Millisecond's int64 overflow;
  * PUT /config/log_level: lg.ParseLogLevel's names (any case; no "warning");
  * IDENTIFY with a lone surrogate escape in client_id: Go decodes it as U+FFFD, and /stats
    shows the client (nsqpy-d answered 500 there before its decoder became gojson.GoStruct).

Needs the Go binaries (tests/support/gobin.py); skips without them.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import gobin
from support.daemons import Daemon
from support.raw_client import RawClient

FLAGS = ("--max-req-timeout=1h",)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """(Go nsqd, nsqpy-d), both with FLAGS."""
    gobin.require("nsqd")
    base: Path = tmp_path_factory.mktemp("gosem")
    go = gobin.start_go_nsqd(base / "go", *FLAGS)
    try:
        py = Daemon(list(FLAGS), base / "py")
    except BaseException:
        go.stop()
        raise
    yield go, py
    assert (go.stop(), py.stop()) == (0, 0), (go.log_text()[-2000:], py.log_text()[-2000:])


def _http(daemon: Any, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", daemon.http_port, timeout=10)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


# defer values as they appear in the query string (already %-encoded where needed)
DEFERS = [
    "5",
    "+5",  # "+" is a space in a query: " 5"
    "%2B5",  # "+5": ParseInt takes a sign
    "-0",
    "005",
    "%205",  # " 5": Python's int() takes it, ParseInt does not
    "5%20",
    "1_0",  # Python's int() takes it
    "%EF%BC%95",  # a fullwidth 5: Python's int() takes it
    "",
    "x",
    "-1",
    "3600000",  # --max-req-timeout=1h exactly
    "3600001",
    "9223372036854775808",  # beyond int64: ParseInt's range error
    "9223372036855",  # * 1e6 wraps to a negative Duration
    "18446744073710",  # * 1e6 wraps to +448384ns: Go accepts it
]


@pytest.mark.parametrize("value", DEFERS)
def test_pub_defer_is_parsed_as_go_nsqd_parses_it(pair: tuple[Any, Any], value: str) -> None:
    topic = f"gosem.defer.{os.getpid()}.{DEFERS.index(value)}"
    path = f"/pub?topic={topic}&defer={value}"
    go, py = (_http(d, "POST", path, b"m") for d in pair)
    assert py == go, (value, go, py)


@pytest.mark.parametrize("level", ["warning", "WARN", "Debug", "verbose", " info", "info"])
def test_put_log_level_takes_gos_names(pair: tuple[Any, Any], level: str) -> None:
    go, py = (_http(d, "PUT", "/config/log_level", level.encode()) for d in pair)
    assert py == go, (level, go, py)
    for d in pair:  # back to the default, so the logs stay as they were
        assert _http(d, "PUT", "/config/log_level", b"info")[0] == 200


def _channel_clients(daemon: Any, topic: str) -> tuple[int, list[dict[str, Any]]]:
    q = urllib.parse.urlencode({"format": "json", "topic": topic})
    status, body = _http(daemon, "GET", f"/stats?{q}")
    if status != 200:
        return status, []
    stats = json.loads(body)
    return status, [c for t in stats["topics"] for ch in t["channels"] for c in ch["clients"]]


def test_lone_surrogate_in_identify_is_u_fffd(pair: tuple[Any, Any]) -> None:
    """IDENTIFY {"client_id": "\\ud800x"}: both daemons take it (OK), and /stats shows the
    client with client_id "\\ufffdx" (nsqpy-d used to keep the surrogate and answer 500)."""
    topic = f"gosem.surrogate.{os.getpid()}"
    seen = []
    for d in pair:
        c = RawClient(d.tcp_port)
        try:
            assert c.identify(client_id="\ud800x", hostname="h") == b"OK"
            c.sub(topic, "c")
            status, clients = _channel_clients(d, topic)
            seen.append((status, [(x["client_id"], x["hostname"]) for x in clients]))
        finally:
            c.close()
    assert seen[0] == seen[1] == (200, [("\ufffdx", "h")]), seen
