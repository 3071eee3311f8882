"""The example config files, loaded by the running daemons: nsqpy's own (contrib/) and Go
NSQ 1.3.0's unchanged (tests/data/go-contrib/). Each daemon starts with ``--config FILE`` and
its listen addresses on the command line (port 0: a flag wins over the file) and answers
/ping. Go's nsqd file's values take effect; Go's nsqadmin file names both lookupd and nsqd
addresses, which nsqadmin itself refuses: nsqpy-admin refuses it with nsqadmin's words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import gobin
from support.daemons import DAEMON_CWD, ROOT

from nsqpy.testing import NsqAdmin, Nsqd, Nsqlookupd

pytestmark = pytest.mark.timeout(90)

CONTRIB = ROOT / "contrib"
GO_CONTRIB = ROOT / "tests" / "data" / "go-contrib"
BOTH_ADDRESSES = "use --nsqd-http-address or --lookupd-http-address not both"


def _ping(d: Nsqd | Nsqlookupd | NsqAdmin) -> None:
    code, body, _ = d.http("GET", "/ping")
    assert (code, body) == (200, b"OK"), d.log_text()[-2000:]


def _stop(d: Nsqd | Nsqlookupd | NsqAdmin) -> None:
    rc = d.stop()
    assert rc == 0, d.log_text()[-2000:]


def test_nsqpy_d_example_loads(tmp_path: Path) -> None:
    d = Nsqd([f"--config={CONTRIB / 'nsqpy-d.cfg.example'}"], tmp_path, cwd=DAEMON_CWD)
    try:
        _ping(d)
        assert d.get_json("/config/mem_queue_size") == 10000
    finally:
        _stop(d)


def test_nsqpy_lookupd_example_loads() -> None:
    lk = Nsqlookupd([f"--config={CONTRIB / 'nsqpy-lookupd.cfg.example'}"], cwd=DAEMON_CWD)
    try:
        _ping(lk)
    finally:
        _stop(lk)


def test_nsqpy_admin_example_loads() -> None:
    a = NsqAdmin([f"--config={CONTRIB / 'nsqpy-admin.cfg.example'}"], cwd=DAEMON_CWD)
    try:
        _ping(a)
        assert a.get("/config/nsqlookupd_http_addresses") == ["127.0.0.1:4161"]
    finally:
        _stop(a)


def test_go_nsqd_example_loads_unchanged(tmp_path: Path) -> None:
    d = Nsqd([f"--config={GO_CONTRIB / 'nsqd.cfg.example'}"], tmp_path, cwd=DAEMON_CWD)
    try:
        _ping(d)
        # values the file sets that differ from nsqd's defaults
        assert d.get_json("/config/max_msg_size") == 1024768
        assert d.get_json("/config/max_body_size") == 5123840
        assert d.get_json("/config/max_output_buffer_timeout") == 1_000_000_000
        assert d.get_json("/config/e2e_processing_latency_percentiles") == [1, 0.99, 0.95]
        assert d.get_json("/config/nsqlookupd_tcp_addresses") == ["127.0.0.1:4160"]
        assert d.get_json("/config/tls_required") == 0
    finally:
        _stop(d)


def test_go_nsqlookupd_example_loads_unchanged() -> None:
    lk = Nsqlookupd([f"--config={GO_CONTRIB / 'nsqlookupd.cfg.example'}"], cwd=DAEMON_CWD)
    try:
        _ping(lk)
    finally:
        _stop(lk)


def _fatal_line(argv: list[str]) -> tuple[int, str]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=DAEMON_CWD)
    fatal = [ln for ln in r.stderr.splitlines() if "FATAL: " in ln]
    return r.returncode, fatal[-1].split("FATAL: ", 1)[1] if fatal else r.stderr


def test_go_nsqadmin_example_is_refused_as_nsqadmin_refuses_it() -> None:
    cfg = f"--config={GO_CONTRIB / 'nsqadmin.cfg.example'}"
    rc, fatal = _fatal_line(
        [sys.executable, "-m", "nsqpy.admin", cfg, "--http-address=127.0.0.1:0"]
    )
    assert (rc, fatal) == (1, f"failed to instantiate nsqadmin - {BOTH_ADDRESSES}")
    go, _ = gobin.find("nsqadmin")
    if go is not None:  # the Go original, when installed, says the same
        assert _fatal_line([go, cfg, "--http-address=127.0.0.1:0"]) == (rc, fatal)
