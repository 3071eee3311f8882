"""Results: the row a load mode returns, one-line summaries in bench_writer/bench_reader's
shape, medians over repeated runs, and the Markdown table."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .harness import RunResult

_NUMERIC_KEYS = (
    "msgs_per_s",
    "mb_per_s",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "bytes_per_msg",
    "daemon_cpu",
    "client_cpu",
    "duration_s",
    "count",
    "polite_max_ms",
    "polite_p99_ms",
)


def rate_row(
    mode: str,
    workload: str,
    res: RunResult,
    count: int,
    end_ns: int,
    body_bytes: int,
    **extra: Any,
) -> dict[str, Any]:
    """A load mode's result: ``count`` messages carrying ``body_bytes`` of bodies from the run's
    start to ``end_ns`` (time.monotonic_ns; the duration is at least 1 ns) as ``msgs_per_s``
    and ``mb_per_s`` (MiB/s, as bench_writer prints mb/s), the mode's ``extra`` fields after
    the count, and the daemon's and the clients' CPU shares of one core."""
    duration = max((end_ns - res.start_ns) / 1e9, 1e-9)
    return {
        "mode": mode,
        "workload": workload,
        "count": count,
        **extra,
        "duration_s": duration,
        "msgs_per_s": count / duration,
        "mb_per_s": body_bytes / duration / 1024 / 1024,
        "daemon_cpu": res.daemon_cpu_share,
        "client_cpu": res.client_cpu_share,
    }


def summary_line(r: dict[str, Any]) -> str:
    """bench_writer's closing line: duration, MB/s, ops/s, us/op; plus latency or memory."""
    mode = r["mode"]
    if mode == "memory":
        return (
            f"[memory] {r['count']:,} msgs queued: VmRSS {r['rss_before_kib']:,} -> "
            f"{r['rss_after_kib']:,} KiB = {r['bytes_per_msg']:.0f} bytes/msg"
            f" (backend_depth {r['backend_depth']})"
        )
    line = (
        f"[{mode}] duration: {r['duration_s']:.3f}s - {r['mb_per_s']:.3f}mb/s - "
        f"{r['msgs_per_s']:.3f}ops/s - {1e6 / r['msgs_per_s'] if r['msgs_per_s'] else 0:.3f}us/op"
    )
    if "queued" in r:
        line += f" - {r['count']:,} of {r['queued']:,} queued"
    if "p99_ms" in r:
        line += (
            f" - latency p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} p99.9 {r['p999_ms']:.3f}"
            f" max {r['max_ms']:.3f} ms ({r['measured']:,} measured, {r['lost']} lost)"
        )
    if mode != "e2e" and r.get("max_ms") is not None:
        line += f" - longest MPUB round trip {r['max_ms']:.1f} ms"
    if r.get("polite_max_ms") is not None:
        line += f" - polite client's slowest OK {r['polite_max_ms']:.1f} ms"
    if r.get("daemon_cpu") is not None:
        line += f" - daemon CPU {r['daemon_cpu'] * 100:.0f}%"
    if r.get("client_cpu") is not None:
        line += f", clients {r['client_cpu'] * 100:.0f}%"
    return line


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's descriptive fields with the median of every numeric field."""
    row = dict(runs[0])
    for k in _NUMERIC_KEYS:
        vals = [r[k] for r in runs if r.get(k) is not None]
        if vals:
            row[k] = statistics.median(vals)
    row["runs"] = len(runs)
    if "valid" in row:
        row["valid"] = all(r.get("valid", True) for r in runs)
    return row


def _fmt(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def table(rows: list[dict[str, Any]]) -> str:
    polite = any(r.get("polite_max_ms") is not None for r in rows)
    head = (
        "| mode | workload | msgs/s | MB/s | latency p50 / p99 / p99.9 (ms) | bytes/msg "
        "| daemon CPU |"
        + (" polite client's slowest OK (ms) |" if polite else "")
        + "\n|---|---|---:|---:|---:|---:|---:|"
        + ("---:|" if polite else "")
    )
    lines = [head]
    for r in rows:
        if r["mode"] == "memory":
            rate, mb = None, None
        else:
            rate, mb = r.get("msgs_per_s"), r.get("mb_per_s")
        lat = (
            f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f} / {r['p999_ms']:.2f}" if "p99_ms" in r else "–"
        )
        bpm = _fmt(r.get("bytes_per_msg"), ",.0f")
        if r["mode"] == "memory" and not r.get("valid", True):
            bpm += " (spilled to disk)"
        cpu = r.get("daemon_cpu")
        line = (
            f"| {r['mode']} | {r['workload']} | {_fmt(rate, ',.0f')} | {_fmt(mb, '.1f')} "
            f"| {lat} | {bpm} | {'–' if cpu is None else f'{cpu * 100:.0f}%'} |"
        )
        if polite:
            line += f" {_fmt(r.get('polite_max_ms'), '.1f')} |"
        lines.append(line)
    return "\n".join(lines)


def runs_detail(runs: list[dict[str, Any]]) -> str:
    """Every run's headline figure, mode by mode (what the medians were taken of)."""
    lines = []
    modes: list[str] = []
    for r in runs:
        if r["mode"] not in modes:
            modes.append(r["mode"])
    for m in modes:
        of_mode = [r for r in runs if r["mode"] == m]
        if m == "memory":
            vals = [f"{r['bytes_per_msg']:.0f} B/msg" for r in of_mode]
        elif m == "e2e":
            vals = [
                f"p50 {r['p50_ms']:.2f} / p99 {r['p99_ms']:.2f} / p99.9 {r['p999_ms']:.2f} ms"
                for r in of_mode
            ]
        else:
            vals = [f"{r['msgs_per_s']:,.0f} msgs/s" for r in of_mode]
        lines.append(f"- {m}: " + "; ".join(vals))
    return "\n".join(lines)
