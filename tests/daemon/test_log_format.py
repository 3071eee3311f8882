"""--log-format (config key log_format) on the running daemons: with "json" every line
nsqpy-d, nsqpy-lookupd and nsqpy-admin write from start to exit is one JSON object with
level, time (RFC 3339, UTC, milliseconds), daemon and msg, and the listening lines carry
their listener and address; without it, every line is lg's text line as before, prefix
first."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.daemons import DAEMON_CWD

from nsqpy.testing import DaemonProcess, NsqAdmin, Nsqd, Nsqlookupd

pytestmark = pytest.mark.timeout(90)

GO_NAMES = {"nsqpy-d": "nsqd", "nsqpy-lookupd": "nsqlookupd", "nsqpy-admin": "nsqadmin"}
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_TEXT = re.compile(
    r"\[(nsqd|nsqlookupd|nsqadmin)\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} [A-Z]+: .+"
)


def _start(program: str, tmp_path: Path, *args: str) -> DaemonProcess:
    if program == "nsqpy-d":
        return Nsqd(args, tmp_path, cwd=DAEMON_CWD, https=False)
    if program == "nsqpy-lookupd":
        return Nsqlookupd(args, cwd=DAEMON_CWD)
    return NsqAdmin(["--lookupd-http-address=127.0.0.1:1", *args], cwd=DAEMON_CWD)


def _run(program: str, tmp_path: Path, *args: str) -> list[str]:
    """The daemon's stderr lines from start to a clean exit."""
    d = _start(program, tmp_path, *args)
    try:
        code, body, _ = d.http("GET", "/ping")
        assert (code, body) == (200, b"OK")
    finally:
        assert d.stop() == 0, d.log_text()[-2000:]
    return d.lines


@pytest.mark.parametrize("program", sorted(GO_NAMES))
def test_json_lines(program: str, tmp_path: Path) -> None:
    started = datetime.now(UTC)
    lines = _run(program, tmp_path, "--log-format=json")
    objs = [json.loads(line) for line in lines]  # every line, start to exit
    assert len(objs) >= 2  # the version line and a listening line at least
    for obj in objs:
        assert list(obj)[:4] == ["level", "time", "daemon", "msg"], obj
        assert obj["daemon"] == GO_NAMES[program]
        assert obj["level"] in ("debug", "info", "warning", "error", "fatal")
        assert _TIME.fullmatch(obj["time"]), obj
        when = datetime.strptime(obj["time"], "%Y-%m-%dT%H:%M:%S.%f%z")
        assert started - timedelta(minutes=5) < when < datetime.now(UTC) + timedelta(minutes=5)
    assert objs[0]["msg"].startswith(f"{GO_NAMES[program]} v1.3.0 (built w/nsqpy-")
    listening = [o for o in objs if " listening on " in o["msg"]]
    kinds = {"HTTP"} if program == "nsqpy-admin" else {"TCP", "HTTP"}
    assert {o["listener"] for o in listening} == kinds
    for o in listening:
        assert o["msg"] == f"{o['listener']}: listening on {o['address']}"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", o["address"])


def test_json_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "nsqlookupd.cfg"
    cfg.write_text('log_format = "json"\nlog_level = "debug"\n')
    lines = _run("nsqpy-lookupd", tmp_path, f"--config={cfg}")
    assert all(json.loads(line)["daemon"] == "nsqlookupd" for line in lines)


@pytest.mark.parametrize("program", sorted(GO_NAMES))
def test_text_lines_by_default(program: str, tmp_path: Path) -> None:
    lines = _run(program, tmp_path)
    assert lines and all(_TEXT.fullmatch(line) for line in lines), lines
    assert all(line.startswith(f"[{GO_NAMES[program]}] ") for line in lines)
    assert any(re.search(r" INFO: HTTP: listening on 127\.0\.0\.1:\d+$", ln) for ln in lines)
