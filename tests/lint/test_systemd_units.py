"""contrib/systemd/*.service checked by systemd itself and against what they promise.

``systemd-analyze verify`` refuses a unit whose ExecStart binary does not exist, so each unit
is copied to a temporary directory with ExecStart's /usr/local/bin/<daemon> replaced by the
console script installed next to this Python (the venv's), then verified: it must pass with
nothing at all on stderr (an unknown or misspelt key is only a warning there).
``systemd-analyze security --offline=yes`` scores each unit's exposure (0 best, 10 worst).
Without systemd-analyze (a container without the systemd package) these are skipped: on
Debian, ``apt-get install -y systemd`` provides it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.daemons import ROOT

UNITS = ROOT / "contrib" / "systemd"
DAEMONS = ("nsqpy-d", "nsqpy-lookupd", "nsqpy-admin")
MAX_EXPOSURE = 2.0


def _analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze not found (on Debian: apt-get install -y systemd)")
    return path


def _settings(daemon: str) -> dict[str, list[str]]:
    """The unit's Key=value lines: key -> every value given, in order."""
    out: dict[str, list[str]] = {}
    for line in (UNITS / f"{daemon}.service").read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def _installed_copy(daemon: str, tmp_path: Path) -> Path:
    """The unit with ExecStart naming this venv's console script of ``daemon``."""
    script = Path(sys.executable).parent / daemon
    if not script.exists():
        pytest.skip(f"no {daemon} console script next to {sys.executable} (pip install -e .)")
    text = (UNITS / f"{daemon}.service").read_text()
    assert f"ExecStart=/usr/local/bin/{daemon} " in text
    unit = tmp_path / f"{daemon}.service"
    unit.write_text(text.replace(f"/usr/local/bin/{daemon} ", f"{script} "))
    return unit


@pytest.mark.parametrize("daemon", DAEMONS)
def test_systemd_analyze_verify(daemon: str, tmp_path: Path) -> None:
    analyze = _analyze()
    unit = _installed_copy(daemon, tmp_path)
    r = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (r.returncode, r.stderr, r.stdout) == (0, "", "")


@pytest.mark.parametrize("daemon", DAEMONS)
def test_security_exposure(daemon: str, tmp_path: Path) -> None:
    analyze = _analyze()
    unit = _installed_copy(daemon, tmp_path)
    r = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    if m is None and "--offline" in r.stderr:
        pytest.skip(f"this systemd-analyze has no offline security check: {r.stderr.strip()}")
    assert m is not None, r.stdout[-3000:] + r.stderr[-2000:]
    assert float(m.group(1)) <= MAX_EXPOSURE, r.stdout


@pytest.mark.parametrize("daemon", DAEMONS)
def test_what_the_units_promise(daemon: str) -> None:
    s = _settings(daemon)
    one = {k: v[-1] for k, v in s.items()}
    assert one["ExecStart"].split() == [
        f"/usr/local/bin/{daemon}",
        f"--config=/etc/nsqpy/{daemon}.cfg",
    ]
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["KillSignal"] == "SIGTERM" and one["Restart"] == "on-failure"
    assert one["WatchdogSec"].endswith("s")
    for key in (
        "DynamicUser",
        "NoNewPrivileges",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectControlGroups",
        "RestrictSUIDSGID",
    ):
        assert one[key] == "yes", key
    assert one["ProtectSystem"] == "strict"
    assert one["CapabilityBoundingSet"] == ""
    if daemon == "nsqpy-d":  # the one that keeps files: its state directory, and only it
        assert one["StateDirectory"] == "nsqpy-d"
        assert one["WorkingDirectory"] == one["ReadWritePaths"] == "%S/nsqpy-d"
    else:
        assert "StateDirectory" not in s and "ReadWritePaths" not in s
