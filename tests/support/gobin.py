"""The Go originals (nsqd, nsqlookupd, nsq_tail v1.3.x) for side-by-side interop tests.

Where the binaries come from, first match wins:
  1. $NSQ_GO_BIN, a directory holding nsqd, nsqlookupd, nsq_tail;
  2. /opt/nsq-go/bin;
  3. the PATH.
A binary counts only when its ``--version`` says v1.3.x. When one is missing, ``require`` skips
the test and says why and how to provide it. CI installs them first (``.ci/install-go-nsq``, from
the Go module proxy), so there none of these tests skips.

Go processes run on 127.0.0.1 with ports picked by the OS (``--tcp-address=127.0.0.1:0
--http-address=127.0.0.1:0``); the real ports come from their "TCP: listening on" and
"HTTP: listening on" log lines on stderr, as for nsqpy's own daemons.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from nsqpy.testing import DaemonProcess

DEFAULT_DIR = "/opt/nsq-go/bin"
NAMES = ("nsqd", "nsqlookupd", "nsq_tail")
_VERSION_RE = re.compile(r"\bv1\.3\.\d+\b")

HOW_TO = (
    "run .ci/install-go-nsq (it builds NSQ v1.3.0's apps with Go from the Go module proxy into "
    "/opt/nsq-go/bin, or into $NSQ_GO_BIN when set), or put v1.3.x binaries on the PATH"
)


def _version(path: str) -> str:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"<{e}>"
    return (out.stdout + out.stderr).strip()


@functools.cache
def find(name: str) -> tuple[str | None, str]:
    """(path of a v1.3.x ``name`` or None, why not / where it was found)."""
    tried: list[str] = []
    candidates: list[str] = []
    env = os.environ.get("NSQ_GO_BIN")
    if env:
        candidates.append(str(Path(env) / name))
    candidates.append(str(Path(DEFAULT_DIR) / name))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    for path in candidates:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            tried.append(f"{path}: not there")
            continue
        version = _version(path)
        if _VERSION_RE.search(version):
            return path, f"{path}: {version}"
        tried.append(f"{path}: --version says {version!r}, not v1.3.x")
    if not on_path:
        tried.append(f"{name}: not on the PATH")
    return None, "; ".join(tried)


def require(name: str) -> str:
    """The path of Go's ``name`` v1.3.x, or skip the test saying why and how to provide it."""
    path, why = find(name)
    if path is None:
        env = os.environ.get("NSQ_GO_BIN")
        pytest.skip(
            f"Go {name} v1.3.x not found (NSQ_GO_BIN={env!r}; {why}); to run the Go interop "
            f"tests, {HOW_TO}"
        )
    return path


_SIGUSR1_BIT = 1 << (10 - 1)  # /proc's SigBlk: bit n-1 for signal n
_SIGTERM_BIT = 1 << (15 - 1)


def wait_signal_handlers(pid: int, timeout: float = 10) -> bool:
    """Wait until the Go program ``pid`` has called signal.Notify; True once seen, False when
    ``timeout`` s pass or /proc cannot tell (the caller goes on either way).

    Go's nsqd, nsqlookupd and nsqadmin call signal.Notify (go-svc's Run) only after their
    Start has returned, and their listeners already serve by then: a SIGTERM sent in between
    kills the process by the signal's default action (exit -15, sockets and files left, no
    "closing" lines). Notify's first call starts the runtime's signal-mask thread
    (runtime.ensureSigM), which blocks every blockable signal (SIGUSR1 among them) but not
    SIGTERM; Go blocks SIGTERM too in the short full masks it sets while making a thread, so
    "some thread blocks SIGUSR1 and not SIGTERM" is that thread. Notify enables SIGINT, then
    SIGTERM, microseconds after the thread appears; a 50 ms pause covers that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return False
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    mask = next((int(ln.split()[1], 16) for ln in f if ln.startswith("SigBlk")), 0)
            except (OSError, ValueError):
                continue
            if mask & _SIGUSR1_BIT and not mask & _SIGTERM_BIT:
                time.sleep(0.05)
                return True
        time.sleep(0.005)
    return False


class GoProcess(DaemonProcess):
    """A running Go nsqd or nsqlookupd on loopback (nsqpy.testing's launcher: ports read from
    its log lines, stopped with SIGTERM, dies with the test process). Returns once the
    program handles SIGTERM (``wait_signal_handlers``), so a stop is always a clean one."""

    def __init__(self, name: str, args: list[str], cwd: Path | None = None) -> None:
        self.name = f"Go {name}"
        self.path = require(name)
        self.args = args
        cmd = [self.path, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *args]
        super().__init__(cmd, cwd=cwd)
        wait_signal_handlers(self.proc.pid)


def start_go_nsqd(data_path: Path, *args: str) -> GoProcess:
    """Go nsqd on loopback with its own --data-path (HTTPS is bound only with a TLS cert,
    which is never given here; --https-address points at loopback all the same)."""
    data_path.mkdir(parents=True, exist_ok=True)
    return GoProcess(
        "nsqd",
        [f"--data-path={data_path}", "--https-address=127.0.0.1:0", *args],
        cwd=data_path,
    )


def start_go_lookupd(*args: str) -> GoProcess:
    return GoProcess("nsqlookupd", list(args))


# ---------------------------------------------------------------------------- lookupd V1 raw

CLOSED = "<closed>"


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def read_v1_reply(sock: socket.socket) -> bytes | str:
    """One nsqlookupd reply (4-byte big-endian size, data): the data, or CLOSED on EOF.
    A socket timeout propagates."""
    head = _recv_exact(sock, 4)
    if head is None:
        return CLOSED
    (size,) = struct.unpack(">i", head)
    data = _recv_exact(sock, size)
    return CLOSED if data is None else data


SHUT_WR = b"<shutdown write side>"
TIMEOUT = "<no reply>"


def v1_exchange(port: int, steps: list[tuple[bytes, int]], timeout: float = 3) -> list[bytes | str]:
    """Send each step's bytes to a lookupd on 127.0.0.1:port and read that step's expected
    number of replies (a step of SHUT_WR half-closes the connection instead of sending). A
    closed connection reads as CLOSED and ends the exchange, a missing reply as TIMEOUT. When
    the connection is still open at the end, a final "PING" probe proves it (its "OK" is the
    last item; after a half-close the last item must be CLOSED instead). Every read is bounded
    by ``timeout``."""
    out: list[bytes | str] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        for data, replies in [
            *steps,
            (b"", 1) if any(d == SHUT_WR for d, _ in steps) else (b"PING\n", 1),
        ]:
            try:
                if data == SHUT_WR:
                    sock.shutdown(socket.SHUT_WR)
                elif data:
                    sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                out.append(CLOSED)
                return out
            for _ in range(replies):
                try:
                    r = read_v1_reply(sock)
                except TimeoutError:
                    out.append(TIMEOUT)
                    return out
                out.append(r)
                if r == CLOSED:
                    return out
        return out
