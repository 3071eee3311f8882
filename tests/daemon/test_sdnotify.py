"""The supervisor's notifications (internal/sdnotify.py) from the real daemons: each of
nsqpy-d, nsqpy-lookupd and nsqpy-admin, started with ``$NOTIFY_SOCKET`` naming a datagram
socket this test binds, sends READY=1 (with a STATUS= naming its listeners) only once its
listeners accept, WATCHDOG=1 over and over when ``$WATCHDOG_USEC`` asks for it (and never
when it does not), and STOPPING=1 on SIGTERM before it exits 0.

No timing is raced: the daemon writes its "listening on" lines to stderr before it sends
READY=1, so when READY=1 has arrived they are already in the pipe, and a read that does not
wait finds them; and the listeners answer a connection made after READY=1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemons import DAEMON_CWD

from nsqpy.testing import parse_listening

pytestmark = pytest.mark.timeout(120)

#: daemon -> (module, extra flags, its listeners)
DAEMONS = {
    "nsqpy-d": (
        "nsqpy",
        ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
        {"TCP", "HTTP"},
    ),
    "nsqpy-lookupd": (
        "nsqpy.lookupd",
        ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
        {"TCP", "HTTP"},
    ),
    "nsqpy-admin": (
        "nsqpy.admin",
        ["--http-address=127.0.0.1:0", "--lookupd-http-address=127.0.0.1:1"],
        {"HTTP"},
    ),
}
WAIT_S = 60  # the longest wait for any one datagram: generous, never part of a result


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket and its $NOTIFY_SOCKET name (abstract: "@...")."""
    name = f"@nsqpy-test-{os.getpid()}-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name[1:])
    sock.settimeout(WAIT_S)
    yield sock, name
    sock.close()


class Started:
    """One daemon process with $NOTIFY_SOCKET set and stderr in a pipe nobody else reads."""

    def __init__(self, program: str, name: str, tmp_path: Path, **env: str) -> None:
        module, flags, self.listeners = DAEMONS[program]
        if program == "nsqpy-d":
            flags = [*flags, f"--data-path={tmp_path}"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *flags],
            cwd=DAEMON_CWD,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "NOTIFY_SOCKET": name, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stderr is not None
        self._fd = self.proc.stderr.fileno()
        os.set_blocking(self._fd, False)
        self.stderr = b""
        self.signalled = False

    def terminate(self) -> None:
        """SIGTERM, once (a second one may reach it after its loop has closed)."""
        if not self.signalled:
            self.signalled = True
            self.proc.send_signal(signal.SIGTERM)

    def stderr_so_far(self) -> str:
        """What the daemon has written to stderr up to now, read without waiting."""
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.stderr += chunk
        return self.stderr.decode(errors="replace")

    def finish(self) -> int:
        """SIGTERM unless sent already; the exit status."""
        if self.proc.poll() is None:
            self.terminate()
        try:
            return self.proc.wait(WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            self.stderr_so_far()


def _until(sock: socket.socket, key: str, seen: list[dict[str, str]]) -> dict[str, str]:
    """Receive datagrams (each appended to ``seen`` as a dict of its lines) until one carries
    ``key``; that one."""
    while True:
        data = sock.recv(4096)
        fields = dict(line.split("=", 1) for line in data.decode().splitlines())
        seen.append(fields)
        if key in fields:
            return fields


def _listening(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        lst = parse_listening(line)
        if lst is not None:
            found[lst.kind] = lst.address
    return found


def _connect(address: str) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S):
        pass


@pytest.mark.parametrize("program", sorted(DAEMONS))
def test_ready_after_the_listeners_accept_and_stopping_on_sigterm(
    program: str, notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    sock, name = notify_socket
    d = Started(program, name, tmp_path)
    seen: list[dict[str, str]] = []
    try:
        ready = _until(sock, "READY", seen)
        assert ready["READY"] == "1"
        # written before READY=1 was sent, so in the pipe already: no wait needed
        logged = _listening(d.stderr_so_far())
        assert set(logged) == d.listeners, d.stderr
        for kind, address in logged.items():
            _connect(address)  # accepting now
            assert f"{kind} {address}" in ready["STATUS"]
        d.terminate()
        stopping = _until(sock, "STOPPING", seen)
        assert stopping["STOPPING"] == "1"
    finally:
        rc = d.finish()
    assert rc == 0, d.stderr.decode(errors="replace")[-2000:]
    # without $WATCHDOG_USEC: READY, then STOPPING, and nothing else
    assert [sorted(f) for f in seen] == [["READY", "STATUS"], ["STATUS", "STOPPING"]]


@pytest.mark.parametrize("program", sorted(DAEMONS))
def test_watchdog_pings_while_it_serves(
    program: str, notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    sock, name = notify_socket
    d = Started(program, name, tmp_path, WATCHDOG_USEC="1000000")  # a ping every 0.5 s
    seen: list[dict[str, str]] = []
    try:
        _until(sock, "READY", seen)
        after_ready = len(seen)
        for _ in range(3):
            assert _until(sock, "WATCHDOG", seen)["WATCHDOG"] == "1"
        assert len(seen) - after_ready == 3  # nothing but pings while it serves
    finally:
        rc = d.finish()
    assert rc == 0, d.stderr.decode(errors="replace")[-2000:]


def test_no_watchdog_for_another_process(
    notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    """$WATCHDOG_PID naming another process: that process is the one watched, not this."""
    sock, name = notify_socket
    d = Started("nsqpy-lookupd", name, tmp_path, WATCHDOG_USEC="1000", WATCHDOG_PID="1")
    seen: list[dict[str, str]] = []
    try:
        _until(sock, "READY", seen)
        d.terminate()
        _until(sock, "STOPPING", seen)
    finally:
        rc = d.finish()
    assert rc == 0
    assert not any("WATCHDOG" in f for f in seen)
