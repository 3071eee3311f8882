"""memory: resident memory per queued message. A topic with one channel and no consumer; the
daemon's VmRSS (/proc/PID/status) is read once the topic, the channel and the publishing
connections exist, then --count messages of --size bytes are published (MPUB, as `writer`),
the run waits until /stats shows them all queued for the channel, lets the daemon settle, and
reads VmRSS again: (after - before) / count. The daemon must keep them in memory
(--mem-queue-size at least --count; this suite starts its own daemon with --mem-queue-size
2000000); a non-zero backend_depth in /stats means some went to disk and the figure is void."""

from __future__ import annotations

import sys
import time
from typing import Any

from . import harness
from .target import Target, proc_status_kib
from .writer import WriterConfig, run_writer


def run_memory(
    target: Target,
    topic: str = "mem_bench",
    channel: str = "ch",
    count: int = 1_000_000,
    size: int = 200,
    timeout: float = 120,
    settle: float = 2.0,
    progress: bool = True,
    cleanup: bool = False,
) -> dict[str, Any]:
    pid = target.pid
    if pid is None:
        raise harness.BenchError("memory: cannot find the daemon's process id (give --nsqd-pid)")
    target.create_channel(topic, channel)
    target.empty_channel(topic, channel)
    queued0, _ = target.queued(topic, channel)
    time.sleep(settle)
    rss0 = proc_status_kib(pid, "VmRSS")
    wcfg = WriterConfig(
        topic=topic,
        size=size,
        concurrency=2,
        runfor=timeout,
        count=count,
        progress=progress,
        name="memory-fill",
    )
    fill = run_writer(target, wcfg)
    if fill["count"] != count:
        raise harness.BenchError(f"memory: published {fill['count']} of {count} in {timeout}s")
    deadline = time.monotonic() + 60
    while True:
        queued, backend = target.queued(topic, channel)
        if queued - queued0 >= count:
            break
        if time.monotonic() > deadline:
            raise harness.BenchError(f"memory: only {queued - queued0} of {count} queued")
        time.sleep(0.2)
    time.sleep(settle)
    rss1 = proc_status_kib(pid, "VmRSS")
    hwm = proc_status_kib(pid, "VmHWM")
    queued, backend = target.queued(topic, channel)
    if cleanup:
        target.delete_topic(topic)
    if target.daemon is None:
        print(
            "bench: memory measured on a daemon this run did not start: memory it freed before "
            "may be reused, so the figure can be too low (use a fresh daemon)",
            file=sys.stderr,
        )
    per_msg = (rss1 - rss0) * 1024 / count
    return {
        "mode": "memory",
        "workload": f"{count:,} x {size} B queued, 1 channel, no consumer",
        "count": count,
        "queued": queued - queued0,
        "backend_depth": backend,
        "rss_before_kib": rss0,
        "rss_after_kib": rss1,
        "hwm_kib": hwm,
        "bytes_per_msg": per_msg,
        "fill_msgs_per_s": fill["msgs_per_s"],
        "valid": backend == 0,
    }
