"""`nsqpy id <ID>`: decode a message ID made by nsqpy-d (or any nsqd), refuse what is not one."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nsqpy.tools", *args], capture_output=True, text=True, timeout=30
    )


def test_cli_prints_node_time_and_sequence(nsqd) -> None:
    c = nsqd.raw()
    c.sub("t", "c", rdy=1)
    nsqd.raw().pub("t", b"x")
    ts, _, msg_id, _ = c.read_message()
    r = run("id", msg_id.decode())
    assert r.returncode == 0, r.stderr
    node = int(nsqd.get_json("/config/id"))
    assert f"node id:   {node}\n" in r.stdout
    stamp = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(ts / 1e9))
    assert f"time:      {stamp}" in r.stdout
    c.close()


@pytest.mark.parametrize(
    "bad,why",
    [
        ("zz", "16 hex digits"),
        ("0123456789abcdef0", "16 hex digits"),
        ("ffffffffffffffff", "top bit"),
        ("7fffffffffffffff", "future"),
    ],
)
def test_cli_refuses_what_is_not_an_id(bad: str, why: str) -> None:
    r = run("id", bad)
    assert r.returncode == 1 and why in r.stderr and "not an nsqd message ID" in r.stderr
