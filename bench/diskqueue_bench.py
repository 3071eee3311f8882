"""python -m bench.diskqueue_bench [--count-200 N] [--count-4k N] [--max-seconds S] [--dir D]

Strategy: the diskqueue alone, no sockets. For 200-byte and 4 KiB records: put N records
(stopping early at --max-seconds), then read them all back with peek/advance (same bound),
syncing whenever needs_sync() says so, as the event loop will. Sync modes: nsqd's defaults
(sync_every=2500, sync timeout 2 s), sync_every=1 in the calling thread, and sync_every=1 with
the sync job in a worker thread (at most one job in flight: the loop carries on meanwhile and
starts the next job when the previous one is done). Each phase ends with a sync, counted in
its time. Files go to a temporary directory (under --dir if given) that is removed at the end."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from nsqpy.diskqueue import DiskQueue
from nsqpy.message import HEADER_LENGTH

MAX_BYTES_PER_FILE = 100 * 1024 * 1024  # nsqd's --max-bytes-per-file default
MIN_MSG_SIZE = HEADER_LENGTH  # nsqd: message ID + timestamp + attempts
MAX_MSG_SIZE = 1024 * 1024 + HEADER_LENGTH  # nsqd: --max-msg-size default + header


@dataclass
class Mode:
    label: str
    sync_every: int
    sync_timeout_ms: int
    threaded: bool


MODES = (
    Mode("sync_every=2500, 2s", 2500, 2000, False),
    Mode("sync_every=1", 1, 2000, False),
    Mode("sync_every=1, sync in a worker thread", 1, 2000, True),
)


@dataclass
class Result:
    size: int
    mode: str
    written: int
    write_s: float
    read: int
    read_s: float


class Syncer:
    """Runs sync jobs the way the event loop integration does."""

    def __init__(self, dq: DiskQueue, threaded: bool) -> None:
        self.dq = dq
        self.pool = ThreadPoolExecutor(1) if threaded else None
        self.inflight: Future[None] | None = None

    def maybe(self) -> None:
        dq = self.dq
        if not dq.needs_sync():
            return
        if self.pool is None:
            dq.sync()
            return
        f = self.inflight
        if f is not None:
            if not f.done():
                return
            f.result()
        self.inflight = self.pool.submit(dq.prepare_sync())

    def finish(self) -> None:
        if self.inflight is not None:
            self.inflight.result()
            self.inflight = None
        self.dq.sync()

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def run(size: int, count: int, mode: Mode, max_seconds: float, parent: str | None) -> Result:
    d = tempfile.mkdtemp(prefix="nsqpy-dq-bench-", dir=parent)
    try:
        dq = DiskQueue(
            "bench",
            d,
            MAX_BYTES_PER_FILE,
            MIN_MSG_SIZE,
            MAX_MSG_SIZE,
            mode.sync_every,
            mode.sync_timeout_ms,
        )
        syncer = Syncer(dq, mode.threaded)
        payload = os.urandom(size)
        put = dq.put
        maybe = syncer.maybe
        check_every = 63 if mode.sync_every < 100 else 1023

        t0 = time.perf_counter()
        deadline = t0 + max_seconds
        written = 0
        for i in range(count):
            put(payload)
            maybe()
            if not i & check_every and time.perf_counter() > deadline:
                written = i + 1
                break
        else:
            written = count
        syncer.finish()
        write_s = time.perf_counter() - t0

        peek = dq.peek
        advance = dq.advance
        t0 = time.perf_counter()
        deadline = t0 + max_seconds
        read = 0
        while True:
            rec = peek()
            if rec is None:
                break
            advance()
            maybe()
            read += 1
            if not read & check_every and time.perf_counter() > deadline:
                break
        syncer.finish()
        read_s = time.perf_counter() - t0
        if read == written and dq.depth != 0:
            raise AssertionError(f"depth {dq.depth} after reading everything")
        syncer.shutdown()
        dq.close()
        return Result(size, mode.label, written, write_s, read, read_s)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def table(results: list[Result]) -> str:
    head = (
        "| record | sync | msgs | write msgs/s | write MB/s | read msgs | read msgs/s "
        "| read MB/s |\n|---:|---|---:|---:|---:|---:|---:|---:|"
    )
    rows = [head]
    for r in results:
        wmb = r.written * r.size / r.write_s / 1e6
        rmb = r.read * r.size / r.read_s / 1e6
        rows.append(
            f"| {r.size} B | {r.mode} | {r.written:,} | {r.written / r.write_s:,.0f} "
            f"| {wmb:,.1f} | {r.read:,} | {r.read / r.read_s:,.0f} | {rmb:,.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="nsqpy diskqueue throughput")
    ap.add_argument("--count-200", type=int, default=2_000_000, help="200-byte records per run")
    ap.add_argument("--count-4k", type=int, default=250_000, help="4 KiB records per run")
    ap.add_argument(
        "--max-seconds", type=float, default=5.0, help="bound on each write and read phase"
    )
    ap.add_argument("--dir", default=None, help="parent of the temporary data directory")
    args = ap.parse_args(argv)
    results = []
    for size, count in ((200, args.count_200), (4096, args.count_4k)):
        for mode in MODES:
            r = run(size, count, mode, args.max_seconds, args.dir)
            print(
                f"{size} B, {mode.label}: wrote {r.written:,} in {r.write_s:.2f}s, "
                f"read {r.read:,} in {r.read_s:.2f}s",
                file=sys.stderr,
            )
            results.append(r)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
