# The nsqd under test: a daemon this suite starts, or one already running.
#
# Strategy: start the daemon as tests/conftest.py does (its own process, loopback, port 0, a
# temporary --data-path; the real ports are read from the "TCP: listening on" and
# "HTTP: listening on" lines on stderr, which a thread keeps draining so the daemon never blocks
# on a full pipe), stop it with SIGTERM. A running daemon is only addressed (host:port pairs);
# its process id, needed to read its resident memory, is given or found through the listening
# socket's inode in /proc. HTTP calls use urllib with a timeout; every wait is bounded.
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

_LISTEN_RE = re.compile(r"(TCP|HTTP): listening on (\S+):(\d+)")


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class Target:
    """Where the benchmark sends its traffic: TCP and HTTP addresses, and maybe a process."""

    def __init__(self, tcp: tuple[str, int], http: tuple[str, int], pid: int | None) -> None:
        self.tcp = tcp
        self.http = http
        self._pid = pid
        self.daemon: Daemon | None = None

    @classmethod
    def running(cls, tcp: str, http: str, pid: int | None = None) -> Target:
        return cls(parse_addr(tcp), parse_addr(http), pid)

    @property
    def tcp_address(self) -> str:
        return f"{self.tcp[0]}:{self.tcp[1]}"

    @property
    def http_address(self) -> str:
        return f"{self.http[0]}:{self.http[1]}"

    @property
    def pid(self) -> int | None:
        if self._pid is None:
            self._pid = pid_listening_on(self.tcp[1])
        return self._pid

    # ------------------------------------------------------------ HTTP

    def http_call(
        self, method: str, path: str, body: bytes | None = None, timeout: float = 30
    ) -> tuple[int, bytes]:
        url = f"http://{self.http_address}{path}"
        req = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, **params: str) -> tuple[int, bytes]:
        return self.http_call("POST", f"{path}?{urllib.parse.urlencode(params)}", b"")

    def create_channel(self, topic: str, channel: str) -> None:
        code, body = self.post("/topic/create", topic=topic)
        if code != 200:
            raise RuntimeError(f"/topic/create {topic}: {code} {body!r}")
        code, body = self.post("/channel/create", topic=topic, channel=channel)
        if code != 200:
            raise RuntimeError(f"/channel/create {topic}/{channel}: {code} {body!r}")

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` if it exists (404 is fine)."""
        self.post("/topic/delete", topic=topic)

    def empty_channel(self, topic: str, channel: str) -> None:
        """Empty ``topic/channel`` if it exists (404 is fine)."""
        self.post("/channel/empty", topic=topic, channel=channel)

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        """The /stats entry of ``topic`` (nsqd's JSON, with or without a "data" wrapper)."""
        q = urllib.parse.urlencode({"format": "json", "topic": topic})
        code, body = self.http_call("GET", f"/stats?{q}")
        if code != 200:
            raise RuntimeError(f"/stats: {code} {body!r}")
        data = json.loads(body)
        if isinstance(data, dict) and "data" in data and "topics" not in data:
            data = data["data"]
        for t in data.get("topics") or []:
            if t.get("topic_name") == topic:
                return t
        return None

    def queued(self, topic: str, channel: str) -> tuple[int, int]:
        """``(messages waiting for channel, of them on disk)``: the topic's own depth (messages
        not yet copied to any channel) plus the channel's depth and in-flight count."""
        t = self.topic_stats(topic)
        if t is None:
            return 0, 0
        depth = int(t.get("depth") or 0)
        backend = int(t.get("backend_depth") or 0)
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                depth += int(c.get("depth") or 0) + int(c.get("in_flight_count") or 0)
                depth += int(c.get("deferred_count") or 0)
                backend += int(c.get("backend_depth") or 0)
        return depth, backend


class Daemon:
    """An nsqd process started by the benchmark (nsqpy-d unless ``cmd`` says otherwise)."""

    def __init__(self, extra_args: list[str], cmd: str | None = None) -> None:
        # The data dir is also the working directory, so that nothing in the current directory
        # shadows the package the command names (e.g. ``env PYTHONPATH=DIR python -m nsqpy``).
        self._tmp = tempfile.TemporaryDirectory(prefix="nsqpy-bench-")
        base = shlex.split(cmd) if cmd else [sys.executable, "-m", "nsqpy"]
        self.argv = [
            *base,
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={self._tmp.name}",
            *extra_args,
        ]
        self.lines: list[str] = []
        self.tcp_port = 0
        self.http_port = 0
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self._tmp.name,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if not self._ready.wait(20) or not (self.tcp_port and self.http_port):
            self.kill()
            raise RuntimeError(
                f"{' '.join(self.argv)} did not start:\n" + "\n".join(self.lines[-30:])
            )
        self._wait_ping()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if len(self.lines) < 10_000:
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

    def _wait_ping(self) -> None:
        deadline = time.monotonic() + 10
        url = f"http://127.0.0.1:{self.http_port}/ping"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("daemon did not answer /ping")
            time.sleep(0.05)

    def target(self) -> Target:
        t = Target(("127.0.0.1", self.tcp_port), ("127.0.0.1", self.http_port), self.proc.pid)
        t.daemon = self
        return t

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._tmp.cleanup()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, wait; SIGKILL if it does not exit in ``timeout`` s. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(
                    f"bench: daemon did not exit {timeout:.0f}s after SIGTERM, killing it",
                    file=sys.stderr,
                )
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        self._tmp.cleanup()
        return self.proc.returncode


# ---------------------------------------------------------------- /proc


def pid_listening_on(port: int) -> int | None:
    """The process holding the TCP socket listening on ``port`` (this host), or None."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == "0A":  # LISTEN
                        if int(parts[1].rsplit(":", 1)[1], 16) == port:
                            inodes.add(parts[9])
        except OSError:
            continue
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in wanted:
                    return int(entry)
            except OSError:
                continue
    return None


def proc_status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/PID/status (VmRSS, VmHWM, ...), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
