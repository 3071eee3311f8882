"""A real single-member etcd (Debian's etcd-server 3.4, installed by .ci/install-etcd) for the
replication tests: a child process on loopback, a temporary data dir, the peer port picked by
the OS (port 0) and the client port a free one found by binding port 0 first: etcd 3.4's JSON
gateway dials the client listener by its configured address, so that one cannot be port 0 (a
start that loses the port to another process is retried with a new one).

It runs with a 10 ms heartbeat and a 100 ms election timeout, which lowers etcd's minimum lease
TTL (1.5 election timeouts) to its floor of 1 s, so lease expiry tests take about a second. The
child dies with the test process (PR_SET_PDEATHSIG); every wait is bounded.

:class:`EtcdCluster` runs three such members as one etcd cluster (``--initial-cluster``, every
port a free one found by binding port 0 first, since each member must know the others' peer
URLs before any starts), each member killable (SIGKILL) and restartable on its data dir, for
the tests that take members away under load.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
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


class EtcdMember:
    """One member of an :class:`EtcdCluster`: ``name``, ``endpoint`` (client "HOST:PORT"),
    ``peer_url``; :meth:`start` (again after :meth:`kill`, on the same data dir and ports),
    :meth:`kill` (SIGKILL), :meth:`alive`."""

    def __init__(self, name: str, exe: str, data_dir: Path, host: str) -> None:
        self.name = name
        self.exe = exe
        self.data_dir = data_dir
        self.endpoint = f"{host}:{_free_port(host)}"
        self.peer_url = f"http://{host}:{_free_port(host)}"
        self.log: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    def start(self, initial_cluster: str, token: str) -> None:
        """Start the process (it serves once the cluster has a quorum: :meth:`wait_ready`)."""
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [
                self.exe,
                f"--name={self.name}",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls=http://{self.endpoint}",
                f"--advertise-client-urls=http://{self.endpoint}",
                f"--listen-peer-urls={self.peer_url}",
                f"--initial-advertise-peer-urls={self.peer_url}",
                f"--initial-cluster={initial_cluster}",
                f"--initial-cluster-token={token}",
                "--initial-cluster-state=new",  # ignored on a restart: the data dir has it
                # a loaded machine must not make the members elect all the time
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--logger=zap",
                "--log-outputs=stderr",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log.append(line.rstrip())
            if "serving client traffic" in line or "ready to serve client" in line:
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float) -> bool:
        """True once it serves clients (False: it exited or ``timeout`` seconds passed)."""
        self._ready.wait(timeout)
        return self.alive() and self._ready.is_set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9, and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class EtcdCluster:
    """``EtcdCluster(data_dir, size=3)``: ``size`` etcd members on loopback forming one cluster,
    returned once every member serves clients (RuntimeError with the members' last log lines
    otherwise; a start that lost a port to another process is retried with new ports).
    ``members`` (:class:`EtcdMember`), ``endpoints`` (every client "HOST:PORT") and
    ``endpoint`` (them comma-separated, as ``--etcd-endpoints`` takes them, so a
    :class:`~replication_cluster.Nodes` takes an EtcdCluster where it takes an EtcdServer);
    :meth:`restart` a killed member; :meth:`stop` them all."""

    def __init__(
        self,
        data_dir: Path,
        size: int = 3,
        binary: str | None = None,
        start_timeout: float = 30.0,
        host: str = "127.0.0.1",
    ) -> None:
        exe = binary or etcd_binary()
        if exe is None:
            raise FileNotFoundError("etcd is not installed (.ci/install-etcd installs it)")
        for attempt in range(5):
            self.members = [
                EtcdMember(f"m{i}", exe, data_dir / f"try{attempt}" / f"m{i}", host)
                for i in range(size)
            ]
            self.initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
            self.token = f"nsqpy-test-{attempt}"
            for m in self.members:
                m.start(self.initial, self.token)
            end = time.monotonic() + start_timeout
            if all(m.wait_ready(max(end - time.monotonic(), 0.1)) for m in self.members):
                return
            self.stop()
            logs = [line for m in self.members for line in m.log]
            if not any("address already in use" in line for line in logs):
                break
        raise RuntimeError(
            "etcd cluster did not start:\n"
            + "\n".join(f"{m.name}: {line}" for m in self.members for line in m.log[-8:])
        )

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def endpoint(self) -> str:
        return ",".join(self.endpoints)

    def restart(self, member: EtcdMember, timeout: float = 30.0) -> None:
        """Start a killed member again on its data dir; returns once it serves clients (which
        needs a quorum with it)."""
        assert not member.alive(), f"{member.name} is running"
        member.start(self.initial, self.token)
        if not member.wait_ready(timeout):
            raise RuntimeError(f"{member.name} did not come back:\n" + "\n".join(member.log[-20:]))

    def stop(self) -> None:
        for m in self.members:
            m.stop()
