"""Lint and types as part of the suite: ruff (lint and format) on nsqpy/ and tests/, mypy on
nsqpy/, with the versions the `test` extra installs, and a docstring opening every module of
nsqpy/, bench/, spark_jobs/, docker/*.py and tests/ (ast, no import). So the one documented test
command is the whole check, and CI installs once."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.daemons import ROOT


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


#: Where every module must open with a docstring (its strategy; help(), IDEs and Sphinx read it).
DOCSTRING_TREES = ("nsqpy", "bench", "spark_jobs", "tests")


def _python_files() -> list[Path]:
    files = [p for tree in DOCSTRING_TREES for p in (ROOT / tree).rglob("*.py")]
    files += (ROOT / "docker").glob("*.py")
    return sorted(p for p in files if not any(part.startswith(".") for part in p.parts))


def test_every_module_has_a_docstring() -> None:
    files = _python_files()
    assert len(files) > 100, len(files)  # the walk found the trees
    missing = [
        str(p.relative_to(ROOT))
        for p in files
        if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"), str(p)))
    ]
    assert not missing, "modules without a docstring:\n" + "\n".join(missing)


def test_test_file_names_are_unique_across_folders() -> None:
    """tests/ is not a package (pytest's rootdir imports): two test files of one name in two
    folders stop the whole suite's collection ("import file mismatch")."""
    seen: dict[str, list[str]] = {}
    for p in (ROOT / "tests").rglob("*.py"):
        seen.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    dupes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not dupes, dupes
