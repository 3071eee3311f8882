"""internal/sdnotify.py's rules without a daemon (the socket name, the watchdog's
environment, a datagram per state, a supervisor gone) and internal/lg.py's two line formats
for one record: lg's text line unchanged with the fields ignored, the JSON line with them."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.daemons import ROOT

from nsqpy.internal import lg
from nsqpy.internal.sdnotify import Notifier, socket_address, watchdog_period


def test_socket_address_abstract_and_path() -> None:
    assert socket_address("@sd/notify") == b"\0sd/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


@pytest.mark.parametrize(
    ("env", "period"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "3000000"}, 3.0),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "x"}, None),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "42"}, 0.5),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "43"}, None),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "x"}, None),
    ],
)
def test_watchdog_period(env: dict[str, str], period: float | None) -> None:
    assert watchdog_period(env, 42) == period


def test_without_notify_socket_nothing_is_sent() -> None:
    n = Notifier({"WATCHDOG_USEC": "1000000"})
    assert not n.enabled and n.watchdog_s is None
    assert n.ready("x") is False and n.stopping() is False


def test_one_datagram_per_state_to_a_path_socket() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # short: a socket path has 108 bytes
        path = str(Path(d) / "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(30)
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        try:
            assert n.enabled and n.watchdog_s == 2.0
            assert n.ready("TCP 127.0.0.1:1\nHTTP 127.0.0.1:2")
            assert sock.recv(4096) == b"READY=1\nSTATUS=TCP 127.0.0.1:1 HTTP 127.0.0.1:2"
            assert n.stopping()
            assert sock.recv(4096) == b"STOPPING=1\nSTATUS=stopping"
            sock.close()
            os.unlink(path)
            assert n.status("gone") is False  # the supervisor went away: dropped, no error
        finally:
            n.close()
            sock.close()


def _record(fields: dict[str, object] | None = None) -> logging.LogRecord:
    rec = logging.LogRecord(
        "nsqpy", logging.INFO, __file__, 1, "TCP: listening on %s", ("127.0.0.1:4150",), None
    )
    if fields is not None:
        for k, v in lg.fields(**fields).items():
            setattr(rec, k, v)
    rec.created = 1_790_000_000.125  # exact in binary
    return rec


def test_text_line_ignores_fields() -> None:
    plain = lg.NsqLogFormatter("[nsqd] ").format(_record())
    with_fields = lg.NsqLogFormatter("[nsqd] ").format(_record({"address": "127.0.0.1:4150"}))
    assert plain == with_fields
    assert re.fullmatch(
        r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.125000 INFO: "
        r"TCP: listening on 127\.0\.0\.1:4150",
        plain,
    )


def test_json_line() -> None:
    rec = _record({"listener": "TCP", "address": "127.0.0.1:4150", "msg": "clash"})
    line = lg.JsonLogFormatter("nsqlookupd").format(rec)
    obj = json.loads(line)
    stamp = datetime.fromtimestamp(1_790_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert obj == {
        "level": "info",
        "time": f"{stamp}.125Z",
        "daemon": "nsqlookupd",
        "msg": "TCP: listening on 127.0.0.1:4150",
        "listener": "TCP",
        "address": "127.0.0.1:4150",
        "field_msg": "clash",
    }
    assert list(obj)[:4] == ["level", "time", "daemon", "msg"] and "\n" not in line


def test_json_line_of_an_exception_and_levels() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord(
            "nsqpy", logging.CRITICAL, __file__, 1, "failed", (), __import__("sys").exc_info()
        )
    obj = json.loads(lg.JsonLogFormatter("nsqd").format(rec))
    assert obj["level"] == "fatal" and "RuntimeError: boom" in obj["exception"]
    with pytest.raises(ValueError, match="--log-format"):
        lg.setup_logging("[nsqd] ", "info", "nsqpy.test-unused", log_format="xml")


def test_json_takes_in_the_libraries_warnings() -> None:
    """With JSON lines, asyncio's and aiohttp's own warnings come as JSON too (a process of its
    own: setup_logging changes the root logger)."""
    import subprocess
    import sys

    code = (
        "import logging; from nsqpy.internal.lg import setup_logging; "
        "setup_logging('[nsqd] ', 'info', log_format='json', daemon='nsqd'); "
        "logging.getLogger('asyncio').warning('w %d', 1); "
        "logging.getLogger('asyncio').info('not shown'); "
        "logging.getLogger('nsqpy').info('i')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    assert [(o["level"], o["msg"]) for o in lines] == [("warning", "w 1"), ("info", "i")]
