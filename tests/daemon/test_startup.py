"""What nsqpy-d and nsqpy-lookupd import before they answer /ping.

Start-up time itself is measured by ``python -m bench startup``, never here; these tests keep
the heavy imports out of the path from exec to the first answer: the daemons run with
``-X importtime``, and every module imported by the time the "listening on" lines are logged
(start-up is over then) is checked against what only some flags, a first request of some kind,
or another daemon need.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from nsqpy.testing import DaemonProcess

pytestmark = pytest.mark.timeout(60)

# aiohttp is nsqpy-admin's, the auth client's and lookupd queries'; prometheus_client /metrics';
# click parses only help, --version, --config and errors; msgpack is the deferred journal's
# (first DPUB), cramjam snappy's (first IDENTIFY asking for it), multiprocessing the IDENTIFY
# helper's, ctypes the malloc tuning's (after start), shutil/lzma/bz2 the build checks', zlib
# deflate's (first IDENTIFY asking for it).
NOT_AT_START = (
    "aiohttp",
    "yarl",
    "multidict",
    "prometheus_client",
    "click_default_group",
    "click",
    "msgpack",
    "cramjam",
    "multiprocessing",
    "pickle",
    "ctypes",
    "shutil",
    "lzma",
    "bz2",
    "sysconfig",
    "zlib",
)
#: nsqpy's own modules that only some flags, another daemon or another use need: the AUTH
#: client (--auth-http-address), the diskqueue (the first topic or channel), Go's usage text
#: (--help).
NSQPY_NOT_AT_START = (
    "nsqpy.auth",
    "nsqpy.auth_session",
    "nsqpy.diskqueue",
    "nsqpy.diskqueue_codec",
    "nsqpy.diskqueue_files",
    "nsqpy.diskqueue_meta",
    "nsqpy.diskqueue_recovery",
    "nsqpy.internal.gousage",
    "nsqpy.client",
    "nsqpy.replication",
    "nsqpy.metrics",
    "nsqpy.metrics_compat",
    "nsqpy.admin",
    "nsqpy.tools",
    "nsqpy.spark",
    "nsqpy.internal.clusterinfo",
    "nsqpy.internal.http.aio",
)
_IMPORT_RE = re.compile(r"import time:.*\| +(\S+)$")


def _start_imports(module: str, args: list[str]) -> list[str]:
    """Run ``python -X importtime -m module args`` (nsqpy.testing's launcher) until it logs
    its listeners, answer a /ping, stop it; the modules it had imported by then."""
    d = DaemonProcess([sys.executable, "-X", "importtime", "-m", module, *args], start_timeout=30)
    try:
        with urllib.request.urlopen(f"{d.url}/ping", timeout=10) as r:
            assert r.read() == b"OK"
    finally:
        d.stop(15)
    return [m.group(1) for m in map(_IMPORT_RE.match, d.lines[: d.ready_at]) if m]


def _heavy(modules: list[str]) -> list[str]:
    return [
        m
        for m in modules
        if m.split(".")[0] in NOT_AT_START
        or any(m == n or m.startswith(n + ".") for n in NSQPY_NOT_AT_START)
    ]


def test_nsqd_imports_no_aiohttp_before_it_answers(tmp_path: Path) -> None:
    mods = _start_imports(
        "nsqpy",
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={tmp_path}",
        ],
    )
    # h11 frames request bodies: it loads at the first request with one, not for /ping
    assert "nsqpy.internal.http.server" in mods and "h11" not in mods
    assert _heavy(mods) == []


def test_lookupd_imports_no_aiohttp_before_it_answers() -> None:
    mods = _start_imports(
        "nsqpy.lookupd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
    )
    assert "nsqpy.lookupd.http_api" in mods
    assert _heavy(mods) == []
    nsqd_only = ("nsqpy.cli", "nsqpy.options", "nsqpy.nsqd", "nsqpy.server", "nsqpy.topic")
    nsqd_only += ("nsqpy.channel", "nsqpy.protocol_v2", "nsqpy.client_v2", "nsqpy.http_api")
    assert [m for m in mods if m in nsqd_only] == []


@pytest.mark.parametrize(
    ("module", "go_name"), [("nsqpy", "nsqd"), ("nsqpy.lookupd", "nsqlookupd")]
)
def test_a_lone_version_flag_loads_no_option_table(module: str, go_name: str) -> None:
    """``--version`` and ``-version`` (what test harnesses run before each daemon they start)
    print the line the full parse prints (``--version=true`` takes that path) without the
    option table, asyncio or typing."""
    full = subprocess.run(
        [sys.executable, "-m", module, "--version=true"], capture_output=True, check=True
    )
    assert full.stdout.startswith(f"{go_name} v".encode())
    for flag in ("--version", "-version"):
        r = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", module, flag],
            capture_output=True,
            check=True,
        )
        assert r.stdout == full.stdout
        mods = [m.group(1) for m in map(_IMPORT_RE.match, r.stderr.decode().splitlines()) if m]
        assert "nsqpy.build_info" in mods
        heavy = ("asyncio", "typing", "logging", "nsqpy.internal.optiontable")
        assert [m for m in mods if m in heavy] == []
