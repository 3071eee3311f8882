"""A client library's own test suite run against nsqpy-d/nsqpy-lookupd and against Go's daemons:
the suite's wall time with each, medians of --runs, alternating.

Strategy: gnsq's tests (github.com/wtolson/gnsq, tests/) start a real nsqd or nsqlookupd per
test, found as ``nsqd``/``nsqlookupd`` on PATH (each is asked ``--version`` first, then started
with ports 0 and read for its "listening on" lines, then stopped with SIGTERM), so what such a
suite costs is mostly start-up, --version and shutdown. The test files are not part of this
repository: at run time they are copied into a temporary directory from a checkout or git
directory of gnsq (--source; ``git archive`` of a git directory's HEAD), and the gnsq package
under test is the one installed beside the Python that runs pytest (--python; it needs gnsq,
gevent and python-snappy). Two directories of symlinks put the daemons first on PATH: Go's
(/opt/nsq-go/bin, ``$NSQ_GO_BIN``) and nsqpy's console scripts (--nsqpy-bin, by default the
scripts next to this interpreter; a compiled build's venv/bin for the compiled figures). Each
run is one ``pytest -q`` of the whole suite, the nsqpy plugin and the cache off; the passed and
failed counts are kept beside the time, and so is the CPU time the run used (pytest and every
daemon it started and waited for: getrusage's children), which a busy machine inflates far less
than the wall time. --variant LABEL=PYTHONPATH adds a set of nsqpy's daemons run with that code
tree in front (another build of the package), as in ``python -m bench startup``. The load
average is printed before and after.

    python -m bench.client_suites --source /path/to/gnsq/.git
    python -m bench.client_suites --source ... --nsqpy-bin .venv-mypyc/bin --runs 3
    python -m bench.client_suites --source ... --variant before=/tmp/old-tree
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .flags import variants

GO_BIN = Path(os.environ.get("NSQ_GO_BIN", "/opt/nsq-go/bin"))
#: the daemon names the suite runs -> nsqpy's console script for each
SCRIPTS = {"nsqd": "nsqpy-d", "nsqlookupd": "nsqpy-lookupd"}
_COUNTS = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")


def copy_tests(source: Path, into: Path) -> Path:
    """gnsq's tests/ from ``source`` (a git directory: its HEAD; else a checkout holding
    tests/) copied under ``into``; the copy's path. FileNotFoundError when there is none."""
    if (source / "HEAD").is_file() and (source / "objects").is_dir():
        archive = subprocess.run(
            ["git", "--git-dir", str(source), "archive", "HEAD", "tests"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    else:
        if not (source / "tests").is_dir():
            raise FileNotFoundError(f"{source} has no tests/")
        subprocess.run(["cp", "-a", str(source / "tests"), str(into)], check=True)
    return into / "tests"


def link_dir(where: Path, targets: dict[str, Path]) -> Path:
    """A directory ``where`` of symlinks name -> target (created)."""
    where.mkdir()
    for name, target in targets.items():
        if not target.exists():
            raise FileNotFoundError(f"{target} not found")
        (where / name).symlink_to(target)
    return where


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_suite(
    python: str, tests: Path, bin_dir: Path, timeout: float, pythonpath: str = ""
) -> dict[str, float]:
    """One ``pytest -q`` of ``tests`` with ``bin_dir`` first on PATH (and ``pythonpath``, if
    any, in front of the daemons' imports): wall seconds, CPU seconds of the run and its
    daemons ("cpu"), and the summary's counts (passed, failed, ...)."""
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    argv = [python, "-m", "pytest", "-q", "-p", "no:nsqpy", "-p", "no:cacheprovider", "tests"]
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    r = subprocess.run(
        argv, cwd=tests.parent, env=env, capture_output=True, text=True, timeout=timeout
    )
    out: dict[str, float] = {
        "seconds": time.perf_counter() - t0,
        "cpu": _children_cpu() - cpu0,
    }
    tail = r.stdout.strip().splitlines()[-1:] or [""]
    for n, what in _COUNTS.findall(tail[0]):
        out[what.rstrip("s") if what.startswith("error") else what] = int(n)
    if r.returncode not in (0, 1):  # 1: some tests failed (counted); else pytest itself broke
        raise RuntimeError(f"pytest exited {r.returncode}: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.client_suites", description=__doc__)
    p.add_argument("--source", required=True, type=Path, help="gnsq's git directory or checkout")
    p.add_argument("--runs", type=int, default=3, help="runs per daemon set (default 3)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs pytest")
    p.add_argument(
        "--nsqpy-bin",
        type=Path,
        default=Path(sys.executable).parent,
        help="directory of nsqpy-d and nsqpy-lookupd (default: next to this Python)",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=PYTHONPATH",
        help="also nsqpy's daemons with this code tree in front (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=600, help="bound on one suite run (s)")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-client-suites-") as tmp:
        root = Path(tmp)
        tests = copy_tests(args.source.resolve(), root)
        go_bin = link_dir(root / "go-bin", {n: GO_BIN / n for n in SCRIPTS})
        py_bin = link_dir(
            root / "nsqpy-bin", {n: args.nsqpy_bin.resolve() / s for n, s in SCRIPTS.items()}
        )
        sets = {"go": (go_bin, ""), "nsqpy": (py_bin, "")}
        for label, pythonpath in variants(args.variant, "bench.client_suites"):
            sets[label] = (py_bin, pythonpath)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in sets}
        for rnd in range(args.runs):
            for label, (bin_dir, pythonpath) in sets.items():
                r = run_suite(args.python, tests, bin_dir, args.timeout, pythonpath)
                runs[label].append(r)
                counts = ", ".join(
                    f"{int(v)} {k}" for k, v in r.items() if k not in ("seconds", "cpu")
                )
                print(
                    f"[gnsq] round {rnd + 1}/{args.runs} {label}: {r['seconds']:.2f} s, "
                    f"CPU {r['cpu']:.2f} s ({counts})",
                    file=sys.stderr,
                )
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    go = statistics.median(r["seconds"] for r in runs["go"])
    go_cpu = statistics.median(r["cpu"] for r in runs["go"])
    print("| suite | daemons | wall time, median | CPU time, median | runs | passed | failed |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, rs in runs.items():
        med = statistics.median(r["seconds"] for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        passed = min(int(r.get("passed", 0)) for r in rs)
        failed = max(int(r.get("failed", 0) + r.get("error", 0)) for r in rs)
        ratio = f" ({med / go:.2f}x Go)" if label != "go" else ""
        cpu_ratio = f" ({cpu / go_cpu:.2f}x Go)" if label != "go" else ""
        print(
            f"| gnsq | {label} | {med:.2f} s{ratio} | {cpu:.2f} s{cpu_ratio} | {len(rs)} "
            f"| {passed} | {failed} |"
        )


if __name__ == "__main__":
    main()
