"""Lint and types as part of the suite: ruff (lint and format) on nsqpy/ and tests/, mypy on
nsqpy/, with the versions the `test` extra installs. So the README's one test command is the whole
check, and CI installs once."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check() -> None:
    r = _run("ruff", "check", "nsqpy", "tests", "bench", "spark_jobs")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_ruff_format() -> None:
    r = _run("ruff", "format", "--check", "nsqpy", "tests", "bench", "spark_jobs")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_mypy() -> None:
    r = _run("mypy", "nsqpy")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
