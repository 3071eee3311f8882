"""A real single-member etcd (Debian's etcd-server 3.4, installed by .ci/install-etcd) for the
replication tests: a child process on loopback, a temporary data dir, the peer port picked by
the OS (port 0) and the client port a free one found by binding port 0 first: etcd 3.4's JSON
gateway dials the client listener by its configured address, so that one cannot be port 0 (a
start that loses the port to another process is retried with a new one).

It runs with a 10 ms heartbeat and a 100 ms election timeout, which lowers etcd's minimum lease
TTL (1.5 election timeouts) to its floor of 1 s, so lease expiry tests take about a second. The
child dies with the test process (PR_SET_PDEATHSIG); every wait is bounded.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

_PR_SET_PDEATHSIG = 1


def etcd_binary() -> str | None:
    """The etcd binary on PATH (or Debian's /usr/bin/etcd), None when absent."""
    found = shutil.which("etcd")
    if found:
        return found
    return "/usr/bin/etcd" if Path("/usr/bin/etcd").is_file() else None


#: Skips a test (or a module, in its pytestmark) where etcd is not installed, saying how to
#: get it.
needs_etcd = pytest.mark.skipif(
    etcd_binary() is None,
    reason="etcd is not installed: .ci/install-etcd installs Debian's etcd-server",
)


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class EtcdServer:
    """``EtcdServer(data_dir)`` starts it and returns once it serves clients (RuntimeError with
    its last log lines when it cannot); ``endpoint`` is "HOST:PORT" (``host`` 127.0.0.1 unless
    given: tests/support/netlab.py's gateway address serves its network hosts); ``stop()``."""

    def __init__(
        self,
        data_dir: Path,
        binary: str | None = None,
        start_timeout: float = 20.0,
        host: str = "127.0.0.1",
    ):
        exe = binary or etcd_binary()
        if exe is None:
            raise FileNotFoundError("etcd is not installed (.ci/install-etcd installs it)")
        for attempt in range(5):
            port = _free_port(host)
            self.log: list[str] = []
            self._ready = threading.Event()
            self.endpoint = f"{host}:{port}"
            self.proc = subprocess.Popen(
                [
                    exe,
                    "--name=test",
                    f"--data-dir={data_dir / f'etcd{attempt}'}",
                    f"--listen-client-urls=http://{self.endpoint}",
                    f"--advertise-client-urls=http://{self.endpoint}",
                    "--listen-peer-urls=http://127.0.0.1:0",
                    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                    "--initial-cluster=test=http://127.0.0.1:2380",
                    "--heartbeat-interval=10",
                    "--election-timeout=100",
                    "--logger=zap",
                    "--log-outputs=stderr",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            threading.Thread(target=self._drain, daemon=True).start()
            self._ready.wait(start_timeout)
            if self.proc.poll() is None and self._ready.is_set():
                return
            self.stop()
            if not any("address already in use" in line for line in self.log):
                break
        raise RuntimeError("etcd did not start:\n" + "\n".join(self.log[-20:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if "serving client traffic" in line:
                self._ready.set()
        self._ready.set()  # exited: let the waiter see it

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module", name="etcd")
def etcd_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """``etcd``: one etcd per test module (import etcd_fixture into the module that uses it)."""
    server = EtcdServer(Path(tmp_path_factory.mktemp("etcd")))
    try:
        yield server
    finally:
        server.stop()
