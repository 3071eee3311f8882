"""The pytest plugin: real NSQ daemons as fixtures.

Strategy: every fixture starts nsqpy's own daemons (``python -m nsqpy``, ``python -m
nsqpy.lookupd`` with the interpreter running the tests) on 127.0.0.1, ports picked by the OS,
a temporary data directory each, and stops them after the test (or the session) with SIGTERM,
SIGKILL if that fails, whatever the test's outcome; the children also die with the test
process (process.py). ``NSQPY_NSQD_CMD`` / ``NSQPY_NSQLOOKUPD_CMD`` point the fixtures at
other binaries (Go's nsqd and nsqlookupd take the same flags).

    def test_roundtrip(nsqd):
        nsqd.pub("events", b"hello")
        nsqd.wait_depth("events", 1)

    def test_discovery(nsq_cluster):
        cluster = nsq_cluster(2)          # one nsqlookupd, two nsqd registered with it"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from .process import DaemonProcess, Nsqd, Nsqlookupd, wait_for

_D = TypeVar("_D", bound=DaemonProcess)


class Cluster:
    """An nsqlookupd and ``nodes`` (nsqds registered with it, broadcasting 127.0.0.1)."""

    def __init__(self, lookupd: Nsqlookupd, nodes: list[Nsqd]) -> None:
        self.lookupd = lookupd
        self.nodes = nodes

    @property
    def lookupd_http_address(self) -> str:
        return self.lookupd.http_address

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        return [n.tcp_address for n in self.nodes]

    def wait_registered(self, topic: str, timeout: float = 10) -> None:
        """Wait until every node is a producer of ``topic`` in the lookupd."""
        wait_for(
            lambda: len(self.lookupd.producers(topic)) >= len(self.nodes),
            timeout,
            what=f"{len(self.nodes)} producers of {topic}",
        )


def _cmd(var: str) -> str | None:
    return os.environ.get(var) or None


def _stop_all(procs: list[DaemonProcess]) -> None:
    for p in reversed(procs):
        try:
            p.stop()
        except AssertionError:
            p.kill()


def _factory(cls: Callable[..., _D], env: str) -> Iterator[Callable[..., _D]]:
    """A daemon factory fixture's body: yields ``start(*flags, **kw)``, which starts a ``cls``
    (the command in the environment variable ``env`` when it is set), then stops all started."""
    started: list[DaemonProcess] = []

    def start(*args: str, **kw: Any) -> _D:
        d = cls(args, cmd=_cmd(env), **kw)
        started.append(d)
        return d

    yield start
    _stop_all(started)


@pytest.fixture
def nsqd_factory() -> Iterator[Callable[..., Nsqd]]:
    """Start nsqds with extra flags: ``nsqd_factory("--mem-queue-size=0")``; all are stopped
    at the end of the test."""
    yield from _factory(Nsqd, "NSQPY_NSQD_CMD")


@pytest.fixture
def nsqlookupd_factory() -> Iterator[Callable[..., Nsqlookupd]]:
    """Start nsqlookupds with extra flags; all are stopped at the end of the test."""
    yield from _factory(Nsqlookupd, "NSQPY_NSQLOOKUPD_CMD")


@pytest.fixture
def nsqd(nsqd_factory: Callable[..., Nsqd]) -> Nsqd:
    """A fresh nsqd for one test (``.tcp_address``, ``.http_address``, ``.pub()``,
    ``.stats()``, ``.wait_depth()``)."""
    return nsqd_factory()


@pytest.fixture(scope="session")
def nsqd_session() -> Iterator[Nsqd]:
    """One nsqd shared by the whole session (tests should use their own topic names)."""
    d = Nsqd(cmd=_cmd("NSQPY_NSQD_CMD"))
    yield d
    _stop_all([d])


@pytest.fixture
def nsqlookupd(nsqlookupd_factory: Callable[..., Nsqlookupd]) -> Nsqlookupd:
    """A fresh nsqlookupd for one test."""
    return nsqlookupd_factory()


@pytest.fixture
def nsq_cluster(
    nsqd_factory: Callable[..., Nsqd], nsqlookupd_factory: Callable[..., Nsqlookupd]
) -> Callable[..., Cluster]:
    """``nsq_cluster(n, *nsqd_args)``: an nsqlookupd and ``n`` nsqds registered with it."""

    def make(n: int = 2, *nsqd_args: str) -> Cluster:
        lk = nsqlookupd_factory()
        nodes = [
            nsqd_factory(
                f"--lookupd-tcp-address={lk.tcp_address}",
                "--broadcast-address=127.0.0.1",
                *nsqd_args,
            )
            for _ in range(n)
        ]
        return Cluster(lk, nodes)

    return make
