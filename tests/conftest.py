"""The suite's fixtures and collection hooks, and nothing else: nsqpy-d and nsqpy-lookupd
started per test (the processes are support.daemons'), and each test marked with its folder's
kind. Helpers live in tests/support/ (``from support.<module> import ...``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemons import Daemon, Lookupd
from support.hypothesis_budget import scale_examples

os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator:
    """Start nsqpy-d processes with extra flags; all are stopped (and must exit 0) at the end."""
    started: list[Daemon] = []

    def start(*args: str) -> Daemon:
        d = Daemon(list(args), tmp_path / f"data{len(started)}")
        started.append(d)
        return d

    yield start
    for d in started:
        rc = d.stop()
        assert rc == 0, f"nsqpy-d exited {rc}:\n{d.log_text()[-3000:]}"


@pytest.fixture
def nsqd(daemon_factory) -> Daemon:
    """One nsqpy-d with default flags (on loopback, ephemeral ports)."""
    return daemon_factory()


# ---------------------------------------------------------------------------- nsqpy-lookupd


@pytest.fixture
def lookupd_factory() -> Iterator:
    """Start nsqpy-lookupd processes with extra flags; all are stopped (and must exit 0)."""
    started: list[Lookupd] = []

    def start(*args: str) -> Lookupd:
        lk = Lookupd(list(args))
        started.append(lk)
        return lk

    yield start
    for lk in started:
        rc = lk.stop()
        assert rc in (0, -9), f"nsqpy-lookupd exited {rc}:\n{lk.log_text()[-3000:]}"


@pytest.fixture
def lookupd(lookupd_factory) -> Lookupd:
    """One nsqpy-lookupd with default flags (on loopback, ephemeral ports)."""
    return lookupd_factory()


#: tests/<kind>/ -> the marker every test in it carries (``pytest -m unit``, ``-m "not e2e"``).
KINDS = ("unit", "daemon", "interop", "e2e", "lint")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's kind, so a kind can be picked by marker as well as by
    path."""
    tests = Path(__file__).resolve().parent
    for item in items:
        try:
            kind = Path(str(item.path)).resolve().relative_to(tests).parts[0]
        except ValueError:
            continue
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))
    scale_examples(items)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): NSQPY_TEST_WORKERS if set, else two workers per core
    up to four. Most tests wait on daemons (processes of their own) far more than they compute,
    so a worker per core would leave the cores idle."""
    env = os.environ.get("NSQPY_TEST_WORKERS", "")
    if env.strip():
        return int(env)
    return min(4, 2 * (os.cpu_count() or 1))
