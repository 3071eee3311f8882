"""A real Prometheus server (Debian's ``prometheus`` 2.x binary) for the tests that check queries,
dashboards and alert rules against what nsqpy's daemons actually export.

:class:`PrometheusServer` writes a configuration (global ``scrape_interval`` and
``evaluation_interval``, static scrape jobs, rule files by absolute path) into a directory of
its own, starts the binary on 127.0.0.1 with a free port (found by binding port 0 first:
Prometheus logs the address it was given, not the one it got; a start that loses the port to
another process is retried on a new one), a temporary TSDB and the classic web UI, and returns
once ``/-/ready`` answers 200. Every wait is bounded and polls the HTTP API; the child dies
with the test process (PR_SET_PDEATHSIG).

The HTTP API (``/api/v1/...``) is read with urllib: :meth:`query` (an instant vector, or a
:class:`PromQLError` carrying Prometheus's error), :meth:`targets`, :meth:`rules`,
:meth:`alerts`, and
:meth:`wait_targets_up` / :meth:`wait_series`, which poll until a condition holds or a
deadline passes (AssertionError naming what was still missing).
"""

from __future__ import annotations

import ctypes
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

_PR_SET_PDEATHSIG = 1


def prometheus_binary() -> str | None:
    """The prometheus binary on PATH (Debian's package puts it in /usr/bin), None if absent."""
    found = shutil.which("prometheus")
    if found:
        return found
    return "/usr/bin/prometheus" if Path("/usr/bin/prometheus").is_file() else None


#: Skips a test (or a module, in its pytestmark) where Prometheus is not installed.
needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="prometheus is not installed (Debian package 'prometheus': apt-get install prometheus)",
)


class PromQLError(RuntimeError):
    """Prometheus answered a query with ``status: error`` (``errorType``, ``error``)."""


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def static_job(
    name: str, targets: Iterable[str], scrape_interval: str | None = None, **labels: str
) -> dict[str, Any]:
    """One ``scrape_configs`` entry: job ``name`` scraping ``targets`` ("host:port") at
    /metrics, with extra target ``labels``."""
    job: dict[str, Any] = {
        "job_name": name,
        "static_configs": [{"targets": list(targets), **({"labels": labels} if labels else {})}],
    }
    if scrape_interval:
        job["scrape_interval"] = scrape_interval
    return job


class PrometheusServer:
    """``PrometheusServer(workdir, scrape_configs, rule_files)`` starts Prometheus and returns
    once it is ready (RuntimeError with its last log lines when it is not within
    ``start_timeout`` s). ``url`` is its base URL, ``config_path`` the configuration written,
    ``log`` its stderr lines; ``stop()`` ends it (SIGTERM, then SIGKILL)."""

    def __init__(
        self,
        workdir: Path,
        scrape_configs: Sequence[dict[str, Any]],
        rule_files: Sequence[Path] = (),
        *,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        binary: str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        exe = binary or prometheus_binary()
        if exe is None:
            raise FileNotFoundError("prometheus is not installed (Debian package 'prometheus')")
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.config = {
            "global": {
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "evaluation_interval": evaluation_interval,
            },
            "rule_files": [str(Path(p).resolve()) for p in rule_files],
            "scrape_configs": list(scrape_configs),
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.log: list[str] = []
        for attempt in range(5):
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen(
                [
                    exe,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={workdir / f'data{attempt}'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1d",
                    "--log.level=info",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                cwd=workdir,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            threading.Thread(target=self._drain, daemon=True).start()
            if self._wait_ready(start_timeout):
                return
            self.stop()
            if not any("address already in use" in line for line in self.log):
                break
        raise RuntimeError("prometheus did not start:\n" + "\n".join(self.log[-30:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    # ------------------------------------------------------------------ HTTP API

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/``path`` and return its ``data``; PromQLError on ``status: error``."""
        q = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{q}" if q else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422 carry the error document
            doc = json.loads(e.read() or b"{}")
        if doc.get("status") != "success":
            raise PromQLError(f"{doc.get('errorType')}: {doc.get('error')} ({params})")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Evaluate ``expr`` now (/api/v1/query): the result's series, each
        ``{"metric": {labels}, "value": [ts, "v"]}`` (a scalar comes back as one series with
        no labels)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active targets (job, instance, health "up"/"down"/"unknown", lastError)."""
        return [
            {
                "job": t["labels"]["job"],
                "instance": t["labels"]["instance"],
                "health": t["health"],
                "lastError": t.get("lastError", ""),
            }
            for t in self.api("targets", state="active")["activeTargets"]
        ]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (alerting and recording) with its group name under ``group``."""
        return [
            {**rule, "group": g["name"]} for g in self.api("rules")["groups"] for rule in g["rules"]
        ]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts now pending or firing (/api/v1/alerts): labels (alertname among them),
        state "pending"/"firing", activeAt, value."""
        result: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return result

    def wait_targets_up(self, timeout: float = 60, jobs: Iterable[str] | None = None) -> None:
        """Wait until every active target (of ``jobs``, default all) is up; AssertionError
        naming the ones that are not (with their scrape errors) after ``timeout`` s."""
        wanted = set(jobs) if jobs is not None else None
        deadline = time.monotonic() + timeout
        while True:
            ts = [t for t in self.targets() if wanted is None or t["job"] in wanted]
            down = [t for t in ts if t["health"] != "up"]
            if ts and not down:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"targets not up after {timeout} s: {down or 'none found'}")
            time.sleep(0.5)

    def wait_series(self, exprs: Iterable[str], timeout: float = 90) -> dict[str, int]:
        """Poll until each of ``exprs`` returns at least one series; return the series count
        per expression. A PromQL error fails at once (it will not go away); after
        ``timeout`` s an AssertionError lists the expressions that still return nothing."""
        pending = list(dict.fromkeys(exprs))
        found: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        while True:
            still = []
            for expr in pending:
                n = len(self.query(expr))
                if n:
                    found[expr] = n
                else:
                    still.append(expr)
            pending = still
            if not pending:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(pending)} expressions returned no series after {timeout} s:\n"
                    + "\n".join(pending)
                )
            time.sleep(1)
