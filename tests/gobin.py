"""The Go originals (nsqd, nsqlookupd, nsq_tail v1.3.x) for side-by-side interop tests.

Where the binaries come from, first match wins:
  1. $NSQ_GO_BIN, a directory holding nsqd, nsqlookupd, nsq_tail;
  2. /opt/nsq-go/bin;
  3. the PATH.
A binary counts only when its ``--version`` says v1.3.x. When one is missing, ``require`` skips
the test and says why and how to provide it (CI has no Go: the Go interop tests skip there).

Go processes run on 127.0.0.1 with ports picked by the OS (``--tcp-address=127.0.0.1:0
--http-address=127.0.0.1:0``); the real ports come from their "TCP: listening on" and
"HTTP: listening on" log lines on stderr, as for nsqpy's own daemons.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

DEFAULT_DIR = "/opt/nsq-go/bin"
NAMES = ("nsqd", "nsqlookupd", "nsq_tail")
_VERSION_RE = re.compile(r"\bv1\.3\.\d+\b")
_LISTEN_RE = re.compile(r"(TCP|HTTP): listening on (\S+):(\d+)")

HOW_TO = (
    "build NSQ v1.3.x's apps/nsqd, apps/nsqlookupd and apps/nsq_tail with Go "
    "(go build -o /opt/nsq-go/bin/ ./apps/nsqd ./apps/nsqlookupd ./apps/nsq_tail in a v1.3.0 "
    "checkout) and put them in /opt/nsq-go/bin, or in a directory named by $NSQ_GO_BIN, or on "
    "the PATH"
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


class GoProcess:
    """A running Go nsqd or nsqlookupd on loopback (ports read from its log lines)."""

    def __init__(self, name: str, args: list[str], cwd: Path | None = None) -> None:
        self.name = name
        self.path = require(name)
        self.args = args
        self.lines: list[str] = []
        self.tcp_port = 0
        self.http_port = 0
        self._ready = threading.Event()
        cmd = [
            self.path,
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd
        )
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        if not self._ready.wait(15) or not (self.tcp_port and self.http_port):
            self.kill()
            raise RuntimeError(f"Go {name} did not listen:\n" + self.log_text())

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            m = _LISTEN_RE.search(line)
            if m:
                if m.group(1) == "TCP":
                    self.tcp_port = int(m.group(3))
                else:
                    self.http_port = int(m.group(3))
                if self.tcp_port and self.http_port:
                    self._ready.set()
        self._ready.set()

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def log_text(self) -> str:
        return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM and wait; returns the exit code (kills and fails if it does not exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"Go {self.name} did not exit on SIGTERM") from None
        self._reader.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self._reader.join(5)

    def http(
        self, method: str, path: str, body: bytes | None = None, timeout: float = 10
    ) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers) of one request; redirects are not followed."""
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        try:
            conn.request(method, path, body=body)
            r = conn.getresponse()
            return r.status, r.read(), dict(r.getheaders())
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        code, body, _ = self.http("GET", path)
        assert code == 200, (path, code, body)
        return json.loads(body)


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
        for data, replies in steps + [
            (b"", 1) if any(d == SHUT_WR for d, _ in steps) else (b"PING\n", 1)
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
