"""What nsqpy-d and nsqpy-lookupd import before they answer /ping (issue 12: start-up).

Start-up time itself is measured by ``python -m bench startup``, never here; these tests keep
the heavy imports out of the path from exec to the first answer: the daemons run with
``-X importtime``, and every module imported by the time the "HTTP: listening" line is logged
(start-up is over then) is checked against what only some flags, or nsqpy-admin, need.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

# aiohttp is nsqpy-admin's, the auth client's and lookupd queries'; prometheus_client /metrics'
NOT_AT_START = ("aiohttp", "yarl", "multidict", "prometheus_client", "click_default_group")


def _start_imports(module: str, args: list[str]) -> list[str]:
    """Run ``python -X importtime -m module args`` until it logs "HTTP: listening", answer a
    /ping, stop it; the modules it had imported by the listening line."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", module, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    listening = threading.Event()
    port: list[int] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if not listening.is_set():
                lines.append(line)
                m = re.search(r"HTTP: listening on [^ ]*:(\d+)", line)
                if m:
                    port.append(int(m.group(1)))
                    listening.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert listening.wait(30), "".join(lines[-20:])
        with urllib.request.urlopen(f"http://127.0.0.1:{port[0]}/ping", timeout=10) as r:
            assert r.read() == b"OK"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        reader.join(5)
    return [m.group(1) for m in map(re.compile(r"import time:.*\| +(\S+)$").match, lines) if m]


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in NOT_AT_START]


def test_nsqd_imports_no_aiohttp_before_it_answers(tmp_path: Path) -> None:
    mods = _start_imports(
        "nsqpy",
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={tmp_path}",
        ],
    )
    assert "nsqpy.internal.http.server" in mods and "h11" in mods
    assert _heavy(mods) == []


def test_lookupd_imports_no_aiohttp_before_it_answers() -> None:
    mods = _start_imports(
        "nsqpy.lookupd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
    )
    assert "nsqpy.lookupd.http_api" in mods
    assert _heavy(mods) == []
