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


#: Tests that must not run beside each other under pytest-xdist, by group (one worker runs a
#: group's tests one after another): every SparkSession is a JVM using both cores, and Spark
#: gives a Python worker a fixed 10 s to connect back to it, which two JVMs at once on two
#: cores can miss; the fault and rejoin tests run three nodes, etcd and network hosts each.
SERIAL_GROUPS = {
    "spark": ("test_spark.py", "test_spark_secure.py", "test_spark_spool.py", "test_cluster.py"),
    "replication_faults": ("test_replication_faults.py", "test_replication_rejoin.py"),
}


_GROUP_OF = {name: group for group, names in SERIAL_GROUPS.items() for name in names}


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each test of a SERIAL_GROUPS module gets its xdist_group mark as it is collected
    (pytest-xdist reads the marks in its own collection hook)."""
    group = _GROUP_OF.get(Path(str(item.path)).name)
    if group is not None and item.get_closest_marker("xdist_group") is None:
        item.add_marker(pytest.mark.xdist_group(group))


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
