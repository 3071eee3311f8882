"""Shared fixtures: the real nsqpy-d process on loopback, raw-socket and HTTP helpers.

Every daemon here is a separate `python -m nsqpy` process listening on 127.0.0.1 with ports
picked by the OS (port 0; the real ports are read from its "TCP: listening on" and
"HTTP: listening on" log lines, as with nsqd) and a temporary --data-path.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis_budget import scale_examples

from nsqpy import wire
from nsqpy.message import decode_record
from nsqpy.testing import Nsqd, Nsqlookupd
from nsqpy.testing import wait_for as wait_for  # re-exported for the test modules
from nsqpy.testing.wire_client import WireClient

ROOT = Path(__file__).resolve().parent.parent
#: Where the daemons under test run (`python -m nsqpy` imports the nsqpy found there first): the
#: checkout, unless NSQPY_TEST_DAEMON_CWD names another tree (tests/e2e/test_mypyc_build.py
#: points it at the compiled copy, so that the daemons run the compiled modules too).
DAEMON_CWD = Path(os.environ.get("NSQPY_TEST_DAEMON_CWD") or ROOT)


class Daemon(Nsqd):
    """A running nsqpy-d process (nsqpy.testing.Nsqd, run from the repository root):
    ``Daemon(extra_flags, data_path)``."""

    def __init__(self, args: list[str], data_path: Path) -> None:
        self.args = args
        super().__init__(args, data_path, cwd=DAEMON_CWD)

    def raw(self, **kw: float) -> RawClient:
        return RawClient(self.tcp_port, **kw)


class RawClient(WireClient):
    """A blocking TCP V2 client for exact-byte tests (nsqpy.testing.wire_client.WireClient on
    127.0.0.1:``port``; every read has a timeout; heartbeats come out as frames, unanswered)."""

    def __init__(self, port: int, timeout: float = 5, magic: bytes = wire.MAGIC_V2) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        super().__init__(sock, timeout=timeout, answer_heartbeats=False)
        if magic:
            self.send(magic)

    def cmd(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.command(name, *params, body=body)

    def read_non_heartbeat(self, timeout: float | None = None) -> tuple[int, bytes]:
        while True:
            f = self.read_frame(timeout)
            if f != (wire.FRAME_TYPE_RESPONSE, wire.HEARTBEAT):
                return f

    def expect_response(self, data: bytes = b"OK") -> None:
        assert self.read_non_heartbeat() == (wire.FRAME_TYPE_RESPONSE, data)

    def read_message(self, timeout: float | None = None) -> tuple[int, int, bytes, bytes]:
        ftype, data = self.read_non_heartbeat(timeout)
        assert ftype == wire.FRAME_TYPE_MESSAGE, (ftype, data)
        return decode_record(data)

    def identify(self, **fields: object) -> bytes:  # type: ignore[override]
        self.cmd(b"IDENTIFY", body=json.dumps(fields).encode())
        ftype, data = self.read_non_heartbeat()
        assert ftype == wire.FRAME_TYPE_RESPONSE, data
        return data

    def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.cmd(b"SUB", topic.encode(), channel.encode())
        self.expect_response()
        if rdy is not None:
            self.rdy(rdy)

    def pub(self, topic: str, body: bytes) -> None:
        self.cmd(b"PUB", topic.encode(), body=body)
        self.expect_response()

    def closed_by_server(self, timeout: float = 5) -> bool:
        """True when the server closes the connection within ``timeout`` s (frames are
        skipped)."""
        try:
            while True:
                self.read_frame(timeout)
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        except OSError:
            return True


def pack_len(n: int) -> bytes:
    return struct.pack(">i", n)


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


os.environ.setdefault("PYTHONUNBUFFERED", "1")


# ---------------------------------------------------------------------------- nsqpy-lookupd


class Lookupd(Nsqlookupd):
    """A running nsqpy-lookupd process (nsqpy.testing.Nsqlookupd) on loopback."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        super().__init__(args, cwd=DAEMON_CWD)


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
