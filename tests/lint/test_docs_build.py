"""The documentation site builds: ``mkdocs build --strict`` over mkdocs.yml and docs/ (broken
links, pages missing from the nav and mkdocstrings errors fail it). Skipped, saying why, where
mkdocs and its plugins (the ``docs`` extra) are not installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from support.daemons import ROOT


@pytest.mark.timeout(600)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    missing = [
        m
        for m in ("mkdocs", "material", "mkdocstrings_handlers.python")
        if importlib.util.find_spec(m.split(".")[0]) is None
    ]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (pip install -e '.[docs]')")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "reference" / "client" / "index.html").is_file()
