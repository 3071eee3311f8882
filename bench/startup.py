"""python -m bench startup: seconds from exec to the first 200 answer of GET /ping.

Strategy: what a client test suite pays per daemon it starts. Each run picks two free loopback
ports (bind to port 0, read the number, close), execs the daemon's installed console script
(nsqpy-d, nsqpy-lookupd; Go's nsqd/nsqlookupd when /opt/nsq-go/bin has them) with those ports
and, for nsqd, a fresh temporary --data-path, then polls: connect to the HTTP port every
millisecond until it accepts, send GET /ping, and stop the clock on a 200. The daemon is then
stopped with SIGTERM (bounded wait, SIGKILL after), and the time from the signal to the
process's exit is kept too: a suite pays it per daemon as well. Runs of the different daemons
(and of the --variant code trees, each a PYTHONPATH put in front of the installed nsqpy)
alternate, so a busy neighbour on the machine slows them all alike; the figure is the median of
--runs. Beside the wall time, the CPU time the daemon had used when /ping answered (utime+stime
from /proc/PID/stat, 10 ms ticks) says what start-up costs whatever the machine's load.
Each code tree's nsqpy is byte-compiled first (compileall; what `pip install` does), as an
environment with PYTHONDONTWRITEBYTECODE=1 would otherwise compile its sources at every exec."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsqpy.testing import terminate

GO_BIN = Path(os.environ.get("NSQ_GO_BIN", "/opt/nsq-go/bin"))
PY_DAEMONS = ("nsqpy-d", "nsqpy-lookupd")
GO_DAEMONS = {"go-nsqd": "nsqd", "go-nsqlookupd": "nsqlookupd"}


@dataclass
class StartupConfig:
    runs: int = 10
    daemons: tuple[str, ...] = PY_DAEMONS
    # (label, PYTHONPATH or "" for the installed package)
    variants: list[tuple[str, str]] = field(default_factory=lambda: [("installed", "")])
    timeout: float = 10.0  # per run: exec to /ping
    compile: bool = True  # byte-compile each variant's nsqpy first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script(name: str) -> str:
    """The console script ``name`` next to this interpreter (the venv's), else on PATH; a Go
    daemon ("go-nsqd") from $NSQ_GO_BIN or /opt/nsq-go/bin. Raises FileNotFoundError."""
    if name in GO_DAEMONS:
        path = GO_BIN / GO_DAEMONS[name]
        if path.exists():
            return str(path)
        raise FileNotFoundError(f"{path} not found")
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed")
    return found


def _ping_once(port: int, deadline: float) -> bool:
    """One GET /ping; True on a 200. False when the port does not accept yet."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=1)
    except OSError:
        return False
    with sock:
        sock.settimeout(max(0.01, deadline - time.perf_counter()))
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        try:
            while b"\r\n" not in data:
                more = sock.recv(4096)
                if not more:
                    break
                data += more
        except OSError:
            return False
        return data.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200"))


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` so far (Linux /proc; 0.0 where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # after "pid (comm)": state is field 3, utime 14 and stime 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compile_tree(pythonpath: str) -> None:
    """Byte-compile the nsqpy that ``pythonpath`` (or, when empty, the installation) holds."""
    if pythonpath:
        where = os.path.join(pythonpath, "nsqpy")
    else:
        spec = importlib.util.find_spec("nsqpy")
        if spec is None or not spec.submodule_search_locations:
            return
        where = next(iter(spec.submodule_search_locations))
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=False, timeout=300)


def one_run(daemon: str, pythonpath: str, timeout: float) -> tuple[float, float, float]:
    """(seconds from exec to the first 200 of GET /ping, CPU seconds the process had used
    then, seconds from SIGTERM to its exit) for one fresh ``daemon`` process. Raises
    RuntimeError when it exits early, does not answer within ``timeout`` seconds, or does
    not exit within 10 s of SIGTERM."""
    tcp, http = free_port(), free_port()
    argv = [
        script(daemon),
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
    ]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        if daemon in ("nsqpy-d", "go-nsqd"):
            argv.append(f"--data-path={tmp}")
        with open(Path(tmp) / "stderr.log", "wb") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
            )
            deadline = t0 + timeout
            try:
                while True:
                    if _ping_once(http, deadline):
                        elapsed = time.perf_counter() - t0
                        cpu = cpu_seconds(proc.pid)
                        break
                    if proc.poll() is not None:
                        log = (Path(tmp) / "stderr.log").read_text(errors="replace")
                        raise RuntimeError(f"{daemon} exited ({proc.returncode}): {log[-500:]}")
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"{daemon}: no /ping answer within {timeout}s")
                    time.sleep(0.001)
            except BaseException:
                terminate(proc, 10)
                raise
            t1 = time.perf_counter()
            if not terminate(proc, 10):  # SIGTERM, SIGKILL after 10 s
                raise RuntimeError(f"{daemon}: did not exit within 10 s of SIGTERM")
            stopped = time.perf_counter() - t1
    return elapsed, cpu, stopped


def available(daemons: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(daemons that can run, notes on the ones skipped)."""
    ok, skipped = [], []
    for d in daemons:
        try:
            script(d)
            ok.append(d)
        except FileNotFoundError as e:
            skipped.append(f"{d} skipped: {e}")
    return ok, skipped


def run_startup(cfg: StartupConfig, log: Any = None) -> list[dict[str, Any]]:
    """Alternating runs of every (variant, daemon); one row per pair with every time (s) and
    the median, min and max. Go daemons run once per round whatever the variants."""
    daemons, _ = available(cfg.daemons)
    pairs = [(label, pp, d) for label, pp in cfg.variants for d in daemons if d not in GO_DAEMONS]
    pairs += [("go", "", d) for d in daemons if d in GO_DAEMONS]
    if cfg.compile:
        for _, pp in cfg.variants:
            compile_tree(pp)
    times: dict[tuple[str, str], list[tuple[float, float, float]]] = {
        (label, d): [] for label, _, d in pairs
    }
    for rnd in range(cfg.runs):
        for label, pp, d in pairs:
            t, cpu, stop = one_run(d, pp, cfg.timeout)
            times[(label, d)].append((t, cpu, stop))
            if log is not None:
                log(
                    f"[startup] round {rnd + 1}/{cfg.runs} {d} ({label}): {t * 1000:.1f} ms, "
                    f"CPU {cpu * 1000:.0f} ms, stop {stop * 1000:.1f} ms"
                )
    rows = []
    for (label, d), runs in times.items():
        ts = [t for t, _, _ in runs]
        rows.append(
            {
                "mode": "startup",
                "daemon": d,
                "variant": label,
                "runs": len(ts),
                "median_s": statistics.median(ts),
                "min_s": min(ts),
                "max_s": max(ts),
                "cpu_median_s": statistics.median(c for _, c, _ in runs),
                "stop_median_s": statistics.median(s for _, _, s in runs),
                "times_s": ts,
                "cpu_s": [c for _, c, _ in runs],
                "stop_s": [s for _, _, s in runs],
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        (
            "| daemon | code | exec to /ping, median | min | max | CPU used by then, median "
            "| SIGTERM to exit, median | runs |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['daemon']} | {r['variant']} | {r['median_s'] * 1000:.0f} ms | "
            f"{r['min_s'] * 1000:.0f} ms | {r['max_s'] * 1000:.0f} ms | "
            f"{r['cpu_median_s'] * 1000:.0f} ms | {r['stop_median_s'] * 1000:.1f} ms | "
            f"{r['runs']} |"
        )
    return "\n".join(lines)
