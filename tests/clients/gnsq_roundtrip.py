"""Publish and consume through an nsqd with the real gnsq client (gevent), unchanged.

Creates the topic and its channels over HTTP, publishes COUNT messages with one gnsq Producer
(about a tenth of the operations are single PUBs via ``publish``, the rest MPUB batches via
``multipublish``; the last --dpub messages are published with ``publish(..., defer=ms)``, i.e.
DPUB), consumes them with READERS gnsq Consumers per channel, finishes every message, and prints
a JSON report: per channel how many were received, how many distinct, which were missing or
duplicated, whether every message ID is 16 lowercase hex characters. Exits 0 only when every
channel got every message exactly once.

    python tests/clients/gnsq_roundtrip.py --tcp 127.0.0.1:4150 --http 127.0.0.1:4151 \\
        --count 50000

The report has the same shape as tests/clients/pynsq_roundtrip.py's (plus "dpub_commands" and
"redelivered"). It works the same against Go nsqd; bounded by --timeout seconds.
"""

from __future__ import annotations

# gnsq is a gevent library: patch the standard library before anything else imports it.
from gevent import monkey

monkey.patch_all()

import argparse
import collections
import json
import logging
import re
import signal
import sys
import time
import urllib.request

import gevent
import gevent.event
import gnsq

ID_RE = re.compile(r"^[0-9a-f]{16}$")


def http_post(http: str, path: str) -> None:
    req = urllib.request.Request(f"http://{http}{path}", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcp", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--topic", default="roundtrip")
    ap.add_argument("--channels", default="ch1,ch2")
    ap.add_argument("--readers", type=int, default=2, help="consumers per channel")
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--batch", type=int, default=100, help="bodies per MPUB")
    ap.add_argument("--pub-every", type=int, default=10, help="one PUB per this many batches")
    ap.add_argument(
        "--dpub",
        type=int,
        default=5,
        help="publish the last N messages with DPUB (publish(..., defer=ms))",
    )
    ap.add_argument("--defer-ms", type=int, default=200, help="DPUB defer in milliseconds")
    ap.add_argument("--max-in-flight", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Hard stop: whatever blocks (a connect, an IDENTIFY with no answer), the default SIGALRM
    # action ends the process a little after --timeout.
    signal.alarm(int(args.timeout) + 30)

    channels = args.channels.split(",")
    http_post(args.http, f"/topic/create?topic={args.topic}")
    for ch in channels:
        http_post(args.http, f"/channel/create?topic={args.topic}&channel={ch}")

    received: dict[str, collections.Counter] = {ch: collections.Counter() for ch in channels}
    per_reader: dict[str, int] = collections.Counter()
    bad_ids: list[str] = []
    errors: list[str] = []
    redelivered = 0
    state = {"acked": 0, "pubs": 0, "mpubs": 0, "dpubs": 0}
    all_received = gevent.event.Event()
    started = time.monotonic()

    def done() -> bool:
        return all(len(c) >= args.count for c in received.values())

    def handler_for(ch: str, name: str):
        def handle(consumer, message) -> None:
            nonlocal redelivered
            raw = message.id
            mid = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
            if not ID_RE.match(mid):
                bad_ids.append(repr(raw))
            if message.attempts != 1:
                redelivered += 1
            received[ch][bytes(message.body)] += 1
            per_reader[name] += 1
            if done():
                all_received.set()
            # Returning normally makes the Consumer send FIN for the message.

        return handle

    def on_error_for(what: str):
        def on_error(sender, error) -> None:
            errors.append(f"{what} error: {error!r}")

        return on_error

    def on_exception(sender, message, error) -> None:
        errors.append(f"handler exception: {error!r}")

    consumers = []
    for ch in channels:
        for i in range(args.readers):
            name = f"{ch}/{i}"
            c = gnsq.Consumer(
                args.topic,
                ch,
                [args.tcp],
                name=f"gnsq_roundtrip.{name}",
                message_handler=handler_for(ch, name),
                max_in_flight=args.max_in_flight,
            )
            c.on_error.connect(on_error_for(f"consumer {name}"), weak=False)
            c.on_exception.connect(on_exception, weak=False)
            consumers.append(c)

    producer = gnsq.Producer([args.tcp])
    producer.on_error.connect(on_error_for("producer"), weak=False)

    def publish_all() -> None:
        plain = max(0, args.count - max(0, args.dpub))
        ops = 0
        while state["acked"] < plain:
            start = state["acked"]
            ops += 1
            try:
                if ops % args.pub_every == 0:
                    producer.publish(args.topic, b"msg-%d" % start, timeout=10)
                    state["pubs"] += 1
                    state["acked"] = start + 1
                else:
                    end = min(plain, start + args.batch)
                    producer.multipublish(
                        args.topic, [b"msg-%d" % i for i in range(start, end)], timeout=10
                    )
                    state["mpubs"] += 1
                    state["acked"] = end
            except Exception as e:  # noqa: BLE001 - report and retry the same batch
                errors.append(f"publish error: {e!r}")
                gevent.sleep(0.05)
        while state["acked"] < args.count:
            start = state["acked"]
            try:
                producer.publish(args.topic, b"msg-%d" % start, defer=args.defer_ms, timeout=10)
                state["dpubs"] += 1
                state["acked"] = start + 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"dpub error: {e!r}")
                gevent.sleep(0.05)

    timed_out = False
    publisher = None
    try:
        for c in consumers:
            c.start(block=False)
        producer.start()
        publisher = gevent.spawn(publish_all)
        if not all_received.wait(timeout=max(0.0, args.timeout - (time.monotonic() - started))):
            timed_out = True
            errors.append(f"timed out after {args.timeout}s")
        elapsed = time.monotonic() - started
        # Let the last FINs reach the daemon (they are written by the handler's greenlet; give
        # the sockets a moment) and surface any late duplicate before closing.
        gevent.sleep(0.5)
    finally:
        if publisher is not None:
            publisher.kill(block=True, timeout=5)
        for c in consumers:
            c.close()
        producer.close()
        for c in consumers:
            c.join(timeout=5)
        producer.join(timeout=5)

    expected = {b"msg-%d" % i for i in range(args.count)}
    report = {
        "count": args.count,
        "published_acked": state["acked"],
        "pub_commands": state["pubs"],
        "mpub_commands": state["mpubs"],
        "dpub_commands": state["dpubs"],
        "elapsed_s": round(elapsed, 3),
        "redelivered": redelivered,
        "bad_ids": bad_ids[:10],
        "errors": errors[:10],
        "per_reader": dict(per_reader),
        "channels": {},
    }
    ok = not bad_ids and not timed_out and state["acked"] == args.count
    for ch, counter in received.items():
        got = set(counter)
        dups = sum(n - 1 for n in counter.values() if n > 1)
        missing = len(expected - got)
        extra = len(got - expected)
        report["channels"][ch] = {
            "received": sum(counter.values()),
            "distinct": len(got),
            "missing": missing,
            "duplicates": dups,
            "unexpected": extra,
        }
        ok = ok and missing == 0 and dups == 0 and extra == 0
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
