"""End-to-end processing latency: publish timestamp to FIN, as percentiles over a sliding window.

Strategy: what nsqd's internal/quantile does, cheaper on the FIN path. nsqd keeps two quantile
streams per channel and, every half of --e2e-processing-latency-window-time, resets the older
one and makes it current, so a query sees between half a window and a whole one. We keep two
bounded sample buffers the same way: a FIN appends one integer (O(1)); past ``capacity``
samples in a half window it mostly only counts, and reservoir sampling replaces a random slot
now and then so the buffer stays a uniform sample. Percentiles are computed only when /stats,
statsd or /metrics asks (sort, nearest rank). Counts are exact; percentile values are exact up
to ``capacity`` FINs per half window and a uniform-sample estimate beyond it (nsqd's perks
stream is an estimate too). Beside the window, two running totals since the recorder was made
(FINs and their summed latency) give /metrics a Prometheus Summary's _count and _sum.
A channel without configured percentiles has no recorder at all (Channel.e2e is None)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

#: Samples kept per half window (per channel): 8192 ints, about 300 KiB at most per channel.
DEFAULT_CAPACITY = 8192


def go_float(v: float) -> float | int:
    """A float as Go's encoding/json writes it: integral values without a trailing ".0"."""
    if v == v and not math.isinf(v) and float(v).is_integer() and abs(v) < 1e21:
        return int(v)
    return v


class E2ELatency:
    """One channel's FIN latencies (ns) over the last window."""

    __slots__ = (
        "_buf",
        "_clock_ns",
        "_deadline_ns",
        "_n",
        "_old_buf",
        "_old_n",
        "_next",
        "_rand",
        "_w",
        "capacity",
        "half_window_ns",
        "last_move_ns",
        "percentiles",
        "total_count",
        "total_ns",
    )

    def __init__(
        self,
        window_ms: int,
        percentiles: list[float],
        capacity: int = DEFAULT_CAPACITY,
        clock_ns: Callable[[], int] = time.time_ns,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.percentiles = list(percentiles)
        self.half_window_ns = max(1, window_ms * 1_000_000 // 2)
        self.capacity = capacity
        self._clock_ns = clock_ns
        self._rand = rand
        # the current half window (samples, FIN count) and the previous one
        self._buf: list[int] = []
        self._n = 0
        self._old_buf: list[int] = []
        self._old_n = 0
        self._w = 1.0
        self._next = 0  # FIN number (1-based) of the next reservoir replacement
        self.last_move_ns = clock_ns()
        #: FINs and their summed latency (ns) since the recorder was made (never reset)
        self.total_count = 0
        self.total_ns = 0
        self._deadline_ns = self.last_move_ns + self.half_window_ns

    def _move(self, now: int) -> None:
        """Advance the window to ``now`` (nsqd's moveWindow, repeated while stale)."""
        half = self.half_window_ns
        steps = (now - self.last_move_ns - 1) // half  # moves until now <= last_move + half
        if steps >= 2:
            self._old_buf, self._old_n = [], 0
        else:
            self._old_buf, self._old_n = self._buf, self._n
        self._buf, self._n = [], 0
        self._w, self._next = 1.0, 0
        self.last_move_ns += steps * half
        self._deadline_ns = self.last_move_ns + half

    def insert(self, timestamp_ns: int) -> None:
        """A message published at ``timestamp_ns`` (Unix ns) was just finished."""
        now = self._clock_ns()
        if now > self._deadline_ns:
            self._move(now)
        latency = now - timestamp_ns
        self.total_count += 1
        self.total_ns += latency
        n = self._n = self._n + 1
        if n <= self.capacity:
            self._buf.append(latency)
            if n == self.capacity:
                self._w = self._shrink(1.0)
                self._next = n + self._skip() + 1
        elif n == self._next:  # the buffer is full: most FINs only count
            self._buf[int(self._rand() * self.capacity)] = latency
            self._w = self._shrink(self._w)
            self._next = n + self._skip() + 1

    # Reservoir sampling with Li's algorithm L: the buffer stays a uniform sample of the half
    # window's FINs while only about capacity * ln(n / capacity) of n FINs touch it.

    def _shrink(self, w: float) -> float:
        return w * math.exp(math.log(self._rand() or 1e-300) / self.capacity)

    def _skip(self) -> int:
        w = self._w
        if not 0.0 < w < 1.0:
            return 0
        return math.floor(math.log(self._rand() or 1e-300) / math.log1p(-w))

    def snapshot(self) -> tuple[int, list[int]]:
        """(count, samples) of the current window, after moving it to now."""
        now = self._clock_ns()
        if now > self._deadline_ns:
            self._move(now)
        return self._n + self._old_n, self._buf + self._old_buf

    def result(self) -> dict[str, Any]:
        return aggregate([self], self.percentiles)


def _query(ordered: list[int], q: float) -> int:
    if not ordered:
        return 0
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def aggregate(streams: Iterable[E2ELatency | None], percentiles: list[float]) -> dict[str, Any]:
    """nsqd's quantile.Result for the merged ``streams`` (a topic merges its channels):
    ``{"count": N, "percentiles": [{"quantile": q, "value": ns}, ...]}``, or
    ``{"count": 0, "percentiles": None}`` when there is no stream (nsqd's nil Quantile)."""
    count = 0
    samples: list[int] = []
    found = False
    for s in streams:
        if s is None:
            continue
        found = True
        n, xs = s.snapshot()
        count += n
        samples += xs
    if not found:
        return {"count": 0, "percentiles": None}
    samples.sort()
    return {
        "count": count,
        "percentiles": [
            {"quantile": go_float(q), "value": _query(samples, q)} for q in percentiles
        ],
    }


def nanoseconds_to_human(v: float) -> str:
    """nsqd's stringy.NanoSecondToHuman: 1.5ms, 20.0us, 3.2s, 800.0ns."""
    if v > 1_000_000_000:
        v, suffix = v / 1_000_000_000, "s"
    elif v > 1_000_000:
        v, suffix = v / 1_000_000, "ms"
    elif v > 1000:
        v, suffix = v / 1000, "us"
    else:
        suffix = "ns"
    return f"{v:0.1f}{suffix}"


def result_text(result: dict[str, Any]) -> str:
    """A Result as nsqd's /stats text prints it (its String method)."""
    return ", ".join(nanoseconds_to_human(p["value"]) for p in result["percentiles"] or [])
