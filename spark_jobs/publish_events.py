#!/usr/bin/env python3
"""Publish a sample stream of JSON events to an NSQ topic, for spark_jobs/event_counts.py.

Each event is one message: {"event_id", "ts" (ISO-8601 UTC, ms), "user", "kind", "value"}.
Events are sent with MPUB in batches at --rate events/s until --count are published or
--max-seconds have passed; the event time is the send time minus up to --max-lateness seconds
(out-of-order events, as real producers send them). --flush publishes, at the end, one
"_flush" event dated --flush-ahead seconds after the last one: it moves the pipeline's
watermark past the last window so that window is written out (the job ignores its kind).
--retry-seconds N keeps going through an nsqd restart: a lost connection is dialled again for up
to N seconds and the batch that was not answered OK is sent again (an MPUB nsqd stored before it
died without answering is then stored twice, with two message IDs).

    python spark_jobs/publish_events.py --nsqd-tcp-address 127.0.0.1:4150 --topic events \\
        --count 20000 --rate 2000 --flush
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nsqpy.spark.client import BatchPublisher, NSQError  # noqa: E402

KINDS = ("view", "click", "cart", "buy")


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")


def make_event(i: int, t: float, rng: random.Random, users: int, lateness: float) -> dict:
    kind = rng.choices(KINDS, weights=(60, 25, 10, 5))[0]
    return {
        "event_id": i,
        "ts": iso(t - rng.random() * lateness),
        "user": f"u{rng.randrange(users):05d}",
        "kind": kind,
        "value": round(rng.random() * 100, 2) if kind == "buy" else 0.0,
    }


class _Publisher:
    """A BatchPublisher that dials again when its connection drops (``retry_seconds`` > 0)."""

    def __init__(self, address: str, topic: str, batch: int, retry_seconds: float) -> None:
        self.address, self.topic, self.batch = address, topic, batch
        self.retry_seconds = retry_seconds
        self.reconnects = 0
        self.p = self._dial()

    def _dial(self) -> BatchPublisher:
        give_up = time.monotonic() + self.retry_seconds
        delay = 0.1
        while True:
            try:
                return BatchPublisher(self.address, self.topic, batch_size=self.batch, timeout=10)
            except OSError:
                if time.monotonic() + delay > give_up:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def send(self, bodies: list[bytes]) -> None:
        """All of ``bodies`` answered OK (sent again on a new connection after a drop)."""
        while True:
            try:
                for b in bodies:
                    self.p.put(b)
                self.p.flush()
                return
            except (OSError, NSQError):
                if self.retry_seconds <= 0:
                    raise
                self.p.close()
                self.reconnects += 1
                self.p = self._dial()

    def close(self) -> None:
        self.p.close()


def publish(
    address: str,
    topic: str,
    count: int,
    rate: float,
    max_seconds: float = 600,
    users: int = 1000,
    lateness: float = 2.0,
    seed: int = 1,
    start_time: float | None = None,
    event_spacing: float | None = None,
    flush: bool = False,
    flush_ahead: float = 3600,
    retry_seconds: float = 0,
    stats: dict | None = None,
) -> tuple[int, list[dict]]:
    """Publish ``count`` events; returns (published, events), both counting what nsqd answered
    OK. ``start_time`` fixes the event time of the first event instead of the clock; later ones
    follow ``event_spacing`` s apart (default 1/rate). ``retry_seconds``: see the module doc;
    ``stats`` gets ``reconnects``."""
    rng = random.Random(seed)
    events: list[dict] = []
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    batch = max(1, min(500, int(rate / 20) or 1))
    pub = _Publisher(address, topic, batch, retry_seconds)
    try:
        i = 0
        while i < count and time.monotonic() < deadline:
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.5))
                continue
            n = min(batch, count - i)
            round_events = []
            for k in range(n):
                if start_time is not None:
                    t = start_time + (i + k) * (event_spacing or 1 / rate)
                else:
                    t = time.time()
                round_events.append(make_event(i + k, t, rng, users, lateness))
            pub.send([json.dumps(ev, separators=(",", ":")).encode() for ev in round_events])
            events.extend(round_events)
            i += n
        if flush and events:
            last = max(dt.datetime.fromisoformat(e["ts"]).timestamp() for e in events)
            flush_event = {
                "event_id": -1,
                "ts": iso(last + flush_ahead),
                "user": "",
                "kind": "_flush",
                "value": 0.0,
            }
            pub.send([json.dumps(flush_event).encode()])
    finally:
        pub.close()
    if stats is not None:
        stats["reconnects"] = pub.reconnects
    return len(events), events


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    ap.add_argument("--topic", default="events")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=1000, help="events per second")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--max-lateness", type=float, default=2.0, help="seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flush", action="store_true", help="end with a watermark-moving event")
    ap.add_argument("--flush-ahead", type=float, default=3600, help="seconds")
    ap.add_argument(
        "--retry-seconds", type=float, default=0, help="dial a lost nsqd again (0: fail)"
    )
    args = ap.parse_args()
    if args.count <= 0 or args.rate <= 0:
        ap.error("--count and --rate must be positive")
    t = time.monotonic()
    stats: dict = {}
    n, _ = publish(
        args.nsqd_tcp_address,
        args.topic,
        args.count,
        args.rate,
        args.max_seconds,
        args.users,
        args.max_lateness,
        args.seed,
        flush=args.flush,
        flush_ahead=args.flush_ahead,
        retry_seconds=args.retry_seconds,
        stats=stats,
    )
    print(
        f"published {n} events to {args.topic} in {time.monotonic() - t:.1f}s"
        f" ({stats['reconnects']} reconnects)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
