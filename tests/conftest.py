"""Shared fixtures: the real nsqpy-d process on loopback, raw-socket and HTTP helpers.

Every daemon here is a separate `python -m nsqpy` process listening on 127.0.0.1 with ports
picked by the OS (port 0; the real ports are read from its "TCP: listening on" and
"HTTP: listening on" log lines, as with nsqd) and a temporary --data-path.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy import wire

ROOT = Path(__file__).resolve().parent.parent
_LISTEN_RE = re.compile(r"(TCP|HTTP): listening on (\S+):(\d+)")


class Daemon:
    """A running nsqpy-d process."""

    def __init__(self, args: list[str], data_path: Path) -> None:
        self.args = args
        self.data_path = data_path
        self.lines: list[str] = []
        self.tcp_port = 0
        self.http_port = 0
        self._ready = threading.Event()
        cmd = [
            sys.executable,
            "-m",
            "nsqpy",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--https-address=127.0.0.1:0",
            f"--data-path={data_path}",
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        if not self._ready.wait(15):
            self.proc.kill()
            raise RuntimeError("nsqpy-d did not start:\n" + "\n".join(self.lines))
        if not (self.tcp_port and self.http_port):
            raise RuntimeError("nsqpy-d did not listen:\n" + "\n".join(self.lines))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError("nsqpy-d did not exit on SIGTERM") from None
        self._reader.join(5)
        return self.proc.returncode

    # ------------------------------------------------------------ HTTP

    def http(
        self, method: str, path: str, body: bytes | None = None, timeout: float = 10
    ) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(f"http://{self.http_address}{path}", data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def stats(self, **params: str) -> dict:
        q = urllib.parse.urlencode({"format": "json", **params})
        code, body, _ = self.http("GET", f"/stats?{q}")
        assert code == 200, body
        return json.loads(body)

    def raw(self, **kw: float) -> RawClient:
        return RawClient(self.tcp_port, **kw)


class RawClient:
    """A blocking TCP V2 client for exact-byte tests (every read has a timeout)."""

    def __init__(self, port: int, timeout: float = 5, magic: bytes = wire.MAGIC_V2) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.reader = wire.FrameReader()
        self.pending: list[tuple[int, bytes]] = []
        if magic:
            self.sock.sendall(magic)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def cmd(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.send(wire.encode_command(name, *params, body=body))

    def read_frame(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame; raises socket.timeout, or ConnectionError on EOF."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.sock.gettimeout())
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by server")
            self.pending.extend(self.reader.feed(data))
        return self.pending.pop(0)

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
        return wire.decode_message(data)

    def identify(self, **fields: object) -> bytes:
        self.cmd(b"IDENTIFY", body=json.dumps(fields).encode())
        ftype, data = self.read_non_heartbeat()
        assert ftype == wire.FRAME_TYPE_RESPONSE, data
        return data

    def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.cmd(b"SUB", topic.encode(), channel.encode())
        self.expect_response()
        if rdy is not None:
            self.cmd(b"RDY", str(rdy).encode())

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

    def close(self) -> None:
        self.sock.close()


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


def wait_for(pred, timeout: float = 10, interval: float = 0.05, what: str = "condition"):
    """Poll ``pred`` until truthy (returns its value) or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


os.environ.setdefault("PYTHONUNBUFFERED", "1")


# ---------------------------------------------------------------------------- nsqpy-lookupd


class Lookupd:
    """A running nsqpy-lookupd process (``python -m nsqpy.lookupd``) on loopback, ports picked by
    the OS and read from its "TCP: listening on" / "HTTP: listening on" log lines."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.lines: list[str] = []
        self.tcp_port = 0
        self.http_port = 0
        self._ready = threading.Event()
        cmd = [
            sys.executable,
            "-m",
            "nsqpy.lookupd",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        if not self._ready.wait(15):
            self.proc.kill()
            raise RuntimeError("nsqpy-lookupd did not start:\n" + "\n".join(self.lines))
        if not (self.tcp_port and self.http_port):
            self.proc.kill()
            raise RuntimeError("nsqpy-lookupd did not listen:\n" + "\n".join(self.lines))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
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
        """SIGTERM, wait; returns the exit code (AssertionError if it does not exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError("nsqpy-lookupd did not exit on SIGTERM") from None
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
