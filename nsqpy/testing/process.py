"""NSQ daemons as child processes, for test suites and benchmarks.

Strategy: one launcher for every NSQ daemon, nsqpy's or Go's (any command line that logs
"TCP: listening on H:P" / "HTTP: listening on H:P" as NSQ's daemons do: nsqd, nsqlookupd, and
nsqadmin, which logs only the HTTP line). The daemon listens on loopback with ports picked by
the OS (port 0); the real ports are read from those log lines on stderr (parse_listening, the
one parser of them in this repository), which a thread keeps draining so the daemon never
blocks on a full pipe. On Linux the child gets PR_SET_PDEATHSIG, so a test run that dies (even
by SIGKILL) takes its daemons with it: no process is left behind. Every wait is bounded."""

from __future__ import annotations

import ctypes
import http.client
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
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..internal.netaddr import join_host_port, split_host_port

_LISTEN_RE = re.compile(r'\b(TCP|HTTPS|HTTP): listening on ([^\s"]+)')
_PR_SET_PDEATHSIG = 1


class Listening(NamedTuple):
    """One "KIND: listening on ADDRESS" log line: ``kind`` is "TCP", "HTTP" or "HTTPS";
    ``address`` as logged (``host:port``, ``[v6]:port`` or a unix socket path)."""

    kind: str
    address: str

    @property
    def port(self) -> int:
        """The port of a ``host:port`` address; 0 for a unix socket path."""
        try:
            return split_host_port(self.address)[1]
        except ValueError:  # a unix socket path
            return 0


def parse_listening(line: str) -> Listening | None:
    """The listener a daemon's log line announces, or None when it announces none.

    nsqd, nsqlookupd and nsqadmin (Go's and nsqpy's) log ``TCP: listening on ADDR``,
    ``HTTP: listening on ADDR``, ``HTTPS: listening on ADDR`` once each listener is bound
    (Go: nsqd/nsqd.go, nsqlookupd/nsqlookupd.go, nsqadmin/nsqadmin.go; nsqpy: server.py,
    lookupd/server.py, admin/server.py); nsqpy's JSON lines (--log-format=json) carry the same
    text in their "msg", the address ending at its closing quote."""
    m = _LISTEN_RE.search(line)
    return Listening(m.group(1), m.group(2)) if m else None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class DaemonProcess:
    """A running NSQ daemon: ``argv`` is started and its listening ports read from stderr.

    ``tcp_port``, ``http_port`` (and ``https_port`` when it logs one), ``host`` (what its
    addresses are reached at), ``addresses`` (kind -> address as logged, unix socket paths
    included), ``lines`` (stderr so far; ``ready_at`` is how many there were when the last
    listener needed was logged). ``listens`` names the listeners to wait for (default: the
    class's, "TCP" and "HTTP"). Raises RuntimeError when the process does not log them all
    within ``start_timeout`` seconds (its log is in the message).

    ``http_timeout`` (s) is the default bound of one ``http()`` request; ``str_body_type`` the
    Content-Type a str body is sent with (None: none is added); ``child_env`` variables are
    added to the child's environment (``env``, default this process's).
    """

    name = "daemon"
    listens: tuple[str, ...] = ("TCP", "HTTP")
    http_timeout: float = 10
    str_body_type: str | None = None
    child_env: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        argv: Sequence[str],
        *,
        host: str = "127.0.0.1",
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 15.0,
        wait_ping: bool = False,
        max_lines: int = 100_000,
        listens: Sequence[str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.host = host
        if listens is not None:
            self.listens = tuple(listens)
        self.lines: list[str] = []
        self.addresses: dict[str, str] = {}
        self.ready_at = 0
        self.tcp_port = 0
        self.http_port = 0
        self.https_port = 0
        self._max_lines = max_lines
        self._ready = threading.Event()
        # a daemon that dies of a signal (SIGSEGV, SIGABRT) writes its Python stacks to its
        # log first (faulthandler), so the test that sees the exit status shows where
        env = {
            **(os.environ if env is None else env),
            "PYTHONFAULTHANDLER": "1",
            **dict(self.child_env),
        }
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            cwd=cwd,
            env=env,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout) or not self._listening():
            self.kill()
            raise RuntimeError(
                f"{self.name} did not start ({shlex.join(self.argv)}):\n"
                + "\n".join(self.lines[-40:])
            )
        if wait_ping:
            self.wait_ping()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if len(self.lines) < self._max_lines:
                self.lines.append(line.rstrip("\n"))
            lst = parse_listening(line) if "listening on" in line else None
            if lst is None:
                continue
            self.addresses[lst.kind] = lst.address
            setattr(self, f"{lst.kind.lower()}_port", lst.port)
            if not self._ready.is_set() and self._listening():
                self.ready_at = len(self.lines)
                self._ready.set()
        self._ready.set()

    def _listening(self) -> bool:
        return all(k in self.addresses for k in self.listens)

    # ------------------------------------------------------------ addresses

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.host, self.tcp_port)

    @property
    def http_address(self) -> str:
        return join_host_port(self.host, self.http_port)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    # ------------------------------------------------------------ lifecycle

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM and wait; returns the exit code. Raises AssertionError (after a SIGKILL) if
        it does not exit within ``timeout`` seconds."""
        if not terminate(self.proc, timeout):
            self._reader.join(5)
            raise AssertionError(f"{self.name} did not exit on SIGTERM")
        self._reader.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self._reader.join(5)

    # ------------------------------------------------------------ HTTP

    @property
    def url(self) -> str:
        """``http://host:http_port``."""
        return f"http://{self.http_address}"

    def http(
        self,
        method: str,
        path: str,
        body: bytes | str | dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers) of one request to the HTTP port, waiting at most ``timeout``
        s (default: the class's ``http_timeout``); redirects not followed. A dict body is sent
        as JSON (Content-Type application/json unless given), a str UTF-8 encoded (with the
        class's ``str_body_type`` as Content-Type unless given), bytes as they are."""
        hdrs = dict(headers or {})
        data: bytes | None
        if isinstance(body, dict):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            data = body.encode()
            if self.str_body_type is not None:
                hdrs.setdefault("Content-Type", self.str_body_type)
        else:
            data = body
        if timeout is None:
            timeout = self.http_timeout
        conn = http.client.HTTPConnection(self.host, self.http_port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            r = conn.getresponse()
            return r.status, r.read(), dict(r.getheaders())
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        """GET ``path`` and decode its JSON; AssertionError unless 200."""
        code, body, _ = self.http("GET", path)
        assert code == 200, (path, code, body)
        return json.loads(body)

    def post(self, path: str, body: bytes = b"", **params: str) -> bytes:
        """POST ``path?params`` (values URL-encoded); AssertionError unless 200."""
        q = f"?{urllib.parse.urlencode(params)}" if params else ""
        code, out, _ = self.http("POST", path + q, body)
        assert code == 200, (path, params, code, out)
        return out

    def wait_ping(self, timeout: float = 10) -> None:
        """Wait until GET /ping answers 200 (RuntimeError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.http("GET", "/ping", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline or not self.alive():
                raise RuntimeError(f"{self.name} did not answer /ping:\n{self.log_text()[-3000:]}")
            time.sleep(0.02)


class _NsqDaemon(DaemonProcess):
    """One of NSQ's daemons, started as they take their addresses: ``cmd`` (default: this
    Python's ``-m`` of the class's ``module``, nsqpy's own daemon), then
    ``--<kind>-address=host:0`` for each listener of the class's ``listens``, then ``args``
    (extra flags; later flags win over these)."""

    module = "nsqpy"

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        cmd: str | Sequence[str] | None = None,
        host: str = "127.0.0.1",
        **kw: Any,
    ) -> None:
        listen = [f"--{kind.lower()}-address={host}:0" for kind in type(self).listens]
        super().__init__([*_command(cmd, self.module), *listen, *args], host=host, **kw)


class Nsqd(_NsqDaemon):
    """An nsqd (nsqpy-d unless ``cmd`` names another, e.g. a Go nsqd binary) on ``host`` with
    ephemeral ports and ``data_path`` (a fresh temporary directory when None, removed by
    stop()/kill()). ``args`` are extra flags; later flags win over the defaults given here."""

    name = "nsqd"

    def __init__(
        self,
        args: Sequence[str] = (),
        data_path: str | Path | None = None,
        *,
        cmd: str | Sequence[str] | None = None,
        host: str = "127.0.0.1",
        https: bool = True,
        **kw: Any,
    ) -> None:
        self._tmp = None
        if data_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="nsqpy-nsqd-")
            data_path = self._tmp.name
        self.data_path = Path(data_path)
        https_listen = [f"--https-address={host}:0"] if https else []
        super().__init__(
            [*https_listen, f"--data-path={data_path}", *args], cmd=cmd, host=host, **kw
        )

    def stop(self, timeout: float = 10) -> int:
        try:
            return super().stop(timeout)
        finally:
            self._cleanup()

    def kill(self) -> None:
        super().kill()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._tmp is not None and self.proc.poll() is not None:
            self._tmp.cleanup()
            self._tmp = None

    # ------------------------------------------------------------ helpers

    def pub(self, topic: str, body: bytes) -> None:
        """Publish one message over HTTP /pub."""
        self.post("/pub", body, topic=topic)

    def mpub(self, topic: str, bodies: Sequence[bytes]) -> None:
        """Publish messages over HTTP /mpub?binary=true."""
        payload = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
        self.post("/mpub", len(bodies).to_bytes(4, "big") + payload, topic=topic, binary="true")

    def stats(self, **params: str) -> dict[str, Any]:
        """/stats?format=json (with ``params`` such as topic=, channel=)."""
        q = urllib.parse.urlencode({"format": "json", **params})
        data = self.get_json(f"/stats?{q}")
        if isinstance(data, dict) and "data" in data and "topics" not in data:
            data = data["data"]  # pre-1.0 nsqd envelope
        return data

    def depth(self, topic: str, channel: str | None = None) -> int:
        """The topic's depth, or the channel's (0 when absent)."""
        for t in self.stats(topic=topic).get("topics") or []:
            if t.get("topic_name") != topic:
                continue
            if channel is None:
                return int(t.get("depth") or 0)
            for c in t.get("channels") or []:
                if c.get("channel_name") == channel:
                    return int(c.get("depth") or 0)
        return 0

    def wait_depth(
        self, topic: str, n: int, channel: str | None = None, timeout: float = 10
    ) -> None:
        """Wait until depth(topic, channel) == n (AssertionError after ``timeout`` s)."""
        wait_for(lambda: self.depth(topic, channel) == n, timeout, what=f"depth {n}")


class Nsqlookupd(_NsqDaemon):
    """An nsqlookupd (nsqpy-lookupd unless ``cmd`` names another) on ``host`` with ephemeral
    ports; ``args`` are extra flags."""

    name = "nsqlookupd"
    module = "nsqpy.lookupd"

    def producers(self, topic: str) -> list[dict[str, Any]]:
        """/lookup?topic= producers ([] when the topic is unknown)."""
        code, body, _ = self.http("GET", f"/lookup?{urllib.parse.urlencode({'topic': topic})}")
        if code != 200:
            return []
        return json.loads(body).get("producers") or []


class NsqAdmin(_NsqDaemon):
    """An nsqadmin (nsqpy-admin unless ``cmd`` names another, e.g. Go's nsqadmin) on ``host``
    with an ephemeral HTTP port (it has no TCP listener); ``args`` are extra flags (the
    lookupd or nsqd addresses it watches). The child is unbuffered (PYTHONUNBUFFERED=1 added
    to ``env``, default this process's environment). ``http()`` waits up to 20 s by default,
    and sends a str body as a form (application/x-www-form-urlencoded), as nsqadmin's pages
    post."""

    name = "nsqadmin"
    module = "nsqpy.admin"
    listens = ("HTTP",)
    http_timeout = 20
    str_body_type = "application/x-www-form-urlencoded"
    child_env = (("PYTHONUNBUFFERED", "1"),)

    @property
    def port(self) -> int:
        return self.http_port

    def get(self, path: str, **kw: Any) -> Any:
        """GET ``path`` and decode its JSON; AssertionError unless 200."""
        code, body, _ = self.http("GET", path, **kw)
        assert code == 200, (path, code, body)
        return json.loads(body)

    def log(self, last: int = 60) -> str:
        """The last ``last`` lines of its stderr."""
        return "\n".join(self.lines[-last:])


def terminate(proc: subprocess.Popen[Any], timeout: float = 10) -> bool:
    """SIGTERM ``proc`` and wait up to ``timeout`` s; SIGKILL if it has not exited. True when it
    exited on SIGTERM (or had already exited)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            return False
    return True


def _command(cmd: str | Sequence[str] | None, module: str) -> list[str]:
    if cmd is None:
        return [sys.executable, "-m", module]
    if isinstance(cmd, str):
        return shlex.split(cmd)
    return list(cmd)


def wait_for(
    pred: Any, timeout: float = 10, interval: float = 0.02, what: str = "condition"
) -> Any:
    """Poll ``pred()`` until truthy (returns its value); AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
