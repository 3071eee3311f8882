"""The nsqd under test: a daemon this suite starts, or one already running.

Strategy: start the daemon with nsqpy.testing's launcher, as the tests do (its own process,
loopback, port 0, a temporary --data-path; the real ports are read from its "listening on" lines
on stderr, which a thread keeps draining), stop it with SIGTERM. A running daemon is only
addressed (host:port pairs); its process id, needed to read its resident memory, is given or
found through the listening socket's inode in /proc. HTTP calls use urllib with a timeout; every
wait is bounded."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from nsqpy.testing import Nsqd


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


class Daemon(Nsqd):
    """An nsqd process started by the benchmark (nsqpy-d unless ``cmd`` says otherwise), through
    nsqpy.testing's launcher: loopback, port 0, a temporary --data-path that is also its working
    directory (so nothing in the current directory shadows the package the command names, e.g.
    ``env PYTHONPATH=DIR python -m nsqpy``), /ping answering before it is used."""

    def __init__(self, extra_args: list[str], cmd: str | None = None) -> None:
        self._bench_tmp = tempfile.TemporaryDirectory(prefix="nsqpy-bench-")
        super().__init__(
            extra_args,
            self._bench_tmp.name,
            cmd=cmd,
            https=False,
            cwd=self._bench_tmp.name,
            start_timeout=20,
            wait_ping=True,
            max_lines=10_000,
        )

    def target(self) -> Target:
        t = Target(("127.0.0.1", self.tcp_port), ("127.0.0.1", self.http_port), self.proc.pid)
        t.daemon = self
        return t

    def kill(self) -> None:
        super().kill()
        self._bench_tmp.cleanup()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, wait; SIGKILL if it does not exit in ``timeout`` s. Returns the exit code."""
        try:
            return super().stop(timeout)
        except AssertionError:
            print(
                f"bench: daemon did not exit {timeout:.0f}s after SIGTERM, killed it",
                file=sys.stderr,
            )
            return self.proc.returncode
        finally:
            self._bench_tmp.cleanup()


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


def proc_rss_mib(pid: int) -> float:
    """VmRSS of ``pid`` in MiB; 0.0 when /proc/PID/status has none (a zombie)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
