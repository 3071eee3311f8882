"""The admin's own history of depth and message rates, drawn as small inline SVG charts.

Strategy: pure and clock-injected. A sampler (server.py) records each topic's and channel's
cluster-wide depth and message_count every --sample-interval; each series is a bounded ring
buffer (collections.deque with maxlen = window / interval), so memory stays fixed whatever
runs for how long. A series not sampled for a whole window (its topic or channel is gone)
is dropped. Rates are differences of message_count between samples per second (a counter
that goes back, as after a node restart or an empty, counts from zero). The charts are SVG
polylines rendered here to markup strings; templates embed them as is."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from html import escape

Key = tuple[str, ...]  #: ("topic", T) or ("channel", T, C) or ("total",)


class History:
    """Ring buffers of (unix seconds, depth, message_count) per key.

    ``interval`` and ``window`` are seconds; each series keeps at most window/interval + 1
    samples.
    """

    def __init__(self, interval: float, window: float) -> None:
        self.interval = interval
        self.window = window
        self.maxlen = max(2, int(window / interval) + 1)
        self.series: dict[Key, deque[tuple[float, int, int]]] = {}

    def record(self, now: float, samples: dict[Key, tuple[int, int]]) -> None:
        """Append ``(depth, message_count)`` per key at time ``now``; forget keys whose newest
        sample is older than the window."""
        for key, (depth, count) in samples.items():
            ring = self.series.get(key)
            if ring is None:
                ring = self.series[key] = deque(maxlen=self.maxlen)
            ring.append((now, depth, count))
        stale = [k for k, ring in self.series.items() if now - ring[-1][0] > self.window]
        for k in stale:
            del self.series[k]

    def depths(self, key: Key) -> list[tuple[float, float]]:
        """(time, depth) points of ``key`` (oldest first; [] when unknown)."""
        return [(t, float(d)) for t, d, _ in self.series.get(key, ())]

    def rates(self, key: Key) -> list[tuple[float, float]]:
        """(time, messages per second) between consecutive samples of ``key``."""
        ring = list(self.series.get(key, ()))
        out = []
        for (t0, _, c0), (t1, _, c1) in zip(ring, ring[1:]):
            dt = t1 - t0
            if dt <= 0:
                continue
            delta = c1 - c0 if c1 >= c0 else c1
            out.append((t1, delta / dt))
        return out

    def last_rate(self, key: Key) -> float | None:
        """The newest rate of ``key`` (messages per second), None before two samples."""
        r = self.rates(key)
        return r[-1][1] if r else None


def sparkline(
    points: Sequence[tuple[float, float]],
    label: str,
    width: int = 180,
    height: int = 36,
    window: float = 3600.0,
    now: float | None = None,
) -> str:
    """An inline SVG chart of ``points`` (time, value), oldest first: the time axis runs from
    the oldest point (or ``now`` - ``window`` when the series is older) to ``now`` (default:
    the newest point), the value axis from 0 to the largest value, which is printed in the
    corner. The title gives the label, the newest and the largest value; ``data-samples`` the
    number of points. An empty series draws an empty frame."""
    aria = escape(label, quote=True)
    head = (
        f'<svg class="spark" role="img" aria-label="{aria}" data-samples="{len(points)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg">'
    )
    frame = f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" class="frame"/>'
    if not points:
        return f"{head}<title>{aria}: no samples yet</title>{frame}</svg>"
    end = points[-1][0] if now is None else now
    start = max(end - window, points[0][0])
    span = (end - start) or 1.0
    top = max(v for _, v in points)
    scale = top or 1.0
    pad = 2
    coords = []
    for t, v in points:
        x = pad + (width - 2 * pad) * min(1.0, max(0.0, (t - start) / span))
        y = height - pad - (height - 2 * pad) * (v / scale)
        coords.append((x, y))
    if len(coords) == 1:
        coords.insert(0, (pad, coords[0][1]))
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    base = height - pad
    area = f"{coords[0][0]:.1f},{base} {line} {coords[-1][0]:.1f},{base}"
    newest = points[-1][1]
    return (
        f"{head}<title>{aria}: now {_num(newest)}, max {_num(top)}</title>{frame}"
        f'<polygon points="{area}" class="area"/>'
        f'<polyline points="{line}" class="line"/>'
        f'<text x="{width - 4}" y="11" text-anchor="end" class="max">{_num(top)}</text></svg>'
    )


def _num(v: float) -> str:
    return f"{v:.0f}" if v == int(v) else f"{v:.2f}"
