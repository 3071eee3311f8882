"""Run N client connections spread over P processes, start them together, stop them in time.

Strategy: each connection is a function ``conn_fn(ctx) -> dict`` run in a thread of a forked
worker process (one thread per connection; one process per connection whenever P == N, the
default up to the number of CPUs). A connection sets itself up (connect, IDENTIFY, SUB), says
it is ready, and waits for the one "go" event, so setup never counts. While running it writes
its progress to its own slot of a shared array (no locks: one writer per slot) and polls its
own stop flag; the coordinator polls the slots every 50 ms, prints a progress line every
second, and decides when to stop (a policy: time, count, or anything else). Every wait has a
bound: setup, the run (its policy plus a hard limit), the collection of results, the join."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .target import proc_cpu_seconds

_CTX = mp.get_context("fork")


class BenchError(RuntimeError):
    """A connection failed, or the run could not start or finish."""


@dataclass
class LoadConfig:
    """What every load mode (writer, reader, e2e) is given: the ``topic`` it loads with bodies
    of ``size`` bytes, for at most ``runfor`` seconds and ``count`` messages; ``progress``
    lines on stderr; ``name``, the mode its results and progress lines carry. Each mode's
    config adds its own fields and may change these defaults."""

    topic: str = "sub_bench"
    size: int = 200
    runfor: float = 10.0
    count: int = 10_000_000
    progress: bool = True
    name: str = "load"


@dataclass
class ConsumerConfig(LoadConfig):
    """A load mode that consumes (reader, e2e): it SUBs to ``channel`` and sends RDY ``rdy``."""

    channel: str = "ch"
    rdy: int = 2500


class ConnContext:
    """What one connection sees of the run."""

    __slots__ = ("_go", "_queue", "counts", "done", "index", "start_ns", "stop")

    def __init__(self, index: int, shared: _Shared) -> None:
        self.index = index
        self.counts = shared.counts
        self.stop = shared.stop
        self.done = shared.done
        self.start_ns = shared.start_ns
        self._go = shared.go
        self._queue = shared.queue

    def ready(self, timeout: float = 60) -> int:
        """Report set-up, wait for the start; returns the run's start (time.monotonic_ns)."""
        self._queue.put(("ready", self.index, None))
        if not self._go.wait(timeout):
            raise BenchError("no start signal")
        return self.start_ns.value

    def stopped(self) -> bool:
        return bool(self.stop[self.index])


@dataclass
class _Shared:
    n: int
    counts: Any = None
    stop: Any = None
    done: Any = None
    start_ns: Any = None
    go: Any = None
    queue: Any = None

    def __post_init__(self) -> None:
        self.counts = _CTX.RawArray("q", self.n)
        self.stop = _CTX.RawArray("b", self.n)
        self.done = _CTX.RawArray("b", self.n)
        self.start_ns = _CTX.RawValue("q", 0)
        self.go = _CTX.Event()
        self.queue = _CTX.Queue()


@dataclass
class RunResult:
    start_ns: int
    end_ns: int  # when the coordinator saw the last connection finish
    results: list[dict[str, Any]]
    daemon_cpu_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def client_cpu_share(self) -> float:
        """CPU used by all client connections (set-up included), as a fraction of one core."""
        wall = (self.end_ns - self.start_ns) / 1e9
        return sum(r.get("client_cpu_s", 0.0) for r in self.results) / wall if wall > 0 else 0.0

    @property
    def daemon_cpu_share(self) -> float | None:
        """The daemon's CPU use during the run, as a fraction of one core."""
        wall = (self.end_ns - self.start_ns) / 1e9
        if self.daemon_cpu_s is None or wall <= 0:
            return None
        return self.daemon_cpu_s / wall


#: A stop policy: called every tick with (elapsed seconds, counts, stop flags, done flags);
#: it sets stop flags; the run ends when every connection is done.
Policy = Callable[[float, Any, Any, Any], None]


def time_or_count_policy(runfor: float, count: int) -> Policy:
    """Stop every connection once ``runfor`` seconds have passed or ``count`` is reached."""

    def policy(elapsed: float, counts: Any, stop: Any, done: Any) -> None:
        if elapsed >= runfor or sum(counts) >= count:
            for i in range(len(stop)):
                stop[i] = 1

    return policy


def _worker(indices: list[int], conn_fn: Callable[[ConnContext], dict], shared: _Shared) -> None:
    def one(i: int) -> None:
        try:
            cpu0 = time.thread_time()
            res = conn_fn(ConnContext(i, shared))
            res["client_cpu_s"] = time.thread_time() - cpu0
            shared.queue.put(("result", i, res))
        except BaseException:  # reported to the coordinator, which fails the run
            shared.queue.put(("error", i, traceback.format_exc()))
        finally:
            shared.done[i] = 1

    if len(indices) == 1:
        one(indices[0])
    else:
        threads = [threading.Thread(target=one, args=(i,)) for i in indices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # Let the queue's feeder thread hand everything over before the process exits.
    shared.queue.close()
    shared.queue.join_thread()


def run(
    name: str,
    conn_fn: Callable[[ConnContext], dict],
    connections: int,
    processes: int,
    policy: Policy,
    hard_limit: float,
    progress: bool = True,
    daemon_pid: int | None = None,
    unit: str = "msgs",
    progress_index: list[int] | None = None,
) -> RunResult:
    """Run ``connections`` copies of ``conn_fn`` over ``processes`` processes.

    ``hard_limit`` (seconds after the start) stops every connection whatever the policy says;
    ten seconds later the processes are killed. ``progress_index`` picks the count slots the
    progress line sums (all by default).
    """
    processes = max(1, min(processes, connections))
    shared = _Shared(connections)
    groups = [list(range(connections))[p::processes] for p in range(processes)]
    procs = [
        _CTX.Process(target=_worker, args=(g, conn_fn, shared), daemon=True, name=f"{name}-{p}")
        for p, g in enumerate(groups)
    ]
    for p in procs:
        p.start()
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []

    def drain(block_s: float = 0.0) -> list[tuple]:
        got = []
        try:
            item = shared.queue.get(timeout=block_s) if block_s else shared.queue.get_nowait()
            got.append(item)
            while True:
                got.append(shared.queue.get_nowait())
        except queue.Empty:
            pass
        for kind, i, payload in got:
            if kind == "result":
                results[i] = payload
            elif kind == "error":
                errors.append(f"{name} connection {i}:\n{payload}")
        return got

    try:
        # ---- setup: every connection ready, or fail
        ready = 0
        deadline = time.monotonic() + 30
        while ready < connections:
            if errors:
                raise BenchError("\n".join(errors))
            if time.monotonic() > deadline:
                raise BenchError(f"{name}: only {ready}/{connections} connections set up in 30s")
            ready += sum(1 for kind, _, _ in drain(0.1) if kind == "ready")
        cpu0 = _cpu(daemon_pid)
        start_ns = time.monotonic_ns()
        shared.start_ns.value = start_ns
        shared.go.set()

        # ---- run
        slots = progress_index if progress_index is not None else list(range(connections))
        next_print = 1.0
        last_total, last_t = 0, 0.0
        killed = False
        while True:
            drain()
            if errors:
                for i in range(connections):
                    shared.stop[i] = 1
            elapsed = (time.monotonic_ns() - start_ns) / 1e9
            policy(elapsed, shared.counts, shared.stop, shared.done)
            if elapsed >= hard_limit:
                for i in range(connections):
                    shared.stop[i] = 1
            if all(shared.done):
                break
            if elapsed >= hard_limit + 10:
                killed = True
                break
            if progress and elapsed >= next_print:
                total = sum(shared.counts[i] for i in slots)
                rate = (total - last_total) / max(elapsed - last_t, 1e-9)
                print(
                    f"[{name}] {elapsed:6.1f}s {total:>12,} {unit} {rate:>12,.0f} {unit}/s",
                    file=sys.stderr,
                    flush=True,
                )
                last_total, last_t = total, elapsed
                next_print += 1.0
            time.sleep(0.05)
        end_ns = time.monotonic_ns()
        cpu1 = _cpu(daemon_pid)

        # ---- collect
        deadline = time.monotonic() + 15
        while len(results) + len(errors) < connections and time.monotonic() < deadline:
            drain(0.2)
        if errors:
            raise BenchError("\n".join(errors))
        if killed or len(results) < connections:
            raise BenchError(
                f"{name}: {connections - len(results)} connection(s) did not finish in time"
            )
        cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        return RunResult(start_ns, end_ns, [results[i] for i in range(connections)], cpu)
    finally:
        for i in range(connections):
            shared.stop[i] = 1
        shared.go.set()  # a connection still waiting for the start gives up at once
        for p in procs:
            p.join(5)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


def _cpu(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return proc_cpu_seconds(pid)
    except OSError:
        return None


def default_processes(connections: int) -> int:
    return max(1, min(connections, os.cpu_count() or 1))
