"""Publish and consume through an nsqd with the real pynsq client (tornado), unchanged.

Creates the topic and its channels over HTTP, publishes COUNT messages with one pynsq Writer
(about a tenth by PUB, the rest by MPUB batches), consumes them with READERS pynsq Readers per
channel, and prints a JSON report: per channel how many were received, how many distinct, which
were missing or duplicated, whether every message ID is 16 lowercase hex characters. Exits 0 only
when every channel got every message exactly once.

    python tests/clients/pynsq_roundtrip.py --tcp 127.0.0.1:4150 --http 127.0.0.1:4151 \\
        --count 50000

It works the same against Go nsqd; bounded by --timeout seconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import re
import sys
import time
import urllib.request

import nsq
import tornado.ioloop

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
    ap.add_argument("--readers", type=int, default=2, help="readers per channel")
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--batch", type=int, default=100, help="bodies per MPUB")
    ap.add_argument("--pub-every", type=int, default=10, help="one PUB per this many batches")
    ap.add_argument("--max-in-flight", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    channels = args.channels.split(",")
    http_post(args.http, f"/topic/create?topic={args.topic}")
    for ch in channels:
        http_post(args.http, f"/channel/create?topic={args.topic}&channel={ch}")

    loop = tornado.ioloop.IOLoop.current()
    received: dict[str, collections.Counter] = {ch: collections.Counter() for ch in channels}
    per_reader: dict[str, int] = collections.Counter()
    bad_ids: list[str] = []
    errors: list[str] = []
    state = {"next": 0, "acked": 0, "pubs": 0, "mpubs": 0, "ops": 0}
    started = time.monotonic()

    def done() -> bool:
        return all(len(c) >= args.count for c in received.values())

    def handler_for(ch: str, name: str):
        def handle(message) -> bool:
            mid = message.id.decode() if isinstance(message.id, bytes) else message.id
            if not ID_RE.match(mid):
                bad_ids.append(mid)
            received[ch][bytes(message.body)] += 1
            per_reader[name] += 1
            if done():
                loop.add_callback(finish)
            return True

        return handle

    readers = []
    for ch in channels:
        for i in range(args.readers):
            name = f"{ch}/{i}"
            readers.append(
                nsq.Reader(
                    topic=args.topic,
                    channel=ch,
                    message_handler=handler_for(ch, name),
                    nsqd_tcp_addresses=[args.tcp],
                    max_in_flight=args.max_in_flight,
                )
            )

    writer = nsq.Writer([args.tcp])

    def publish_next(conn=None, data=None) -> None:
        if isinstance(data, nsq.Error):
            errors.append(f"publish error: {data}")
            loop.call_later(0.05, publish_next)  # retry the same batch
            return
        if data is not None:
            state["acked"] = state["next"]
        start = state["acked"]
        if start >= args.count:
            return
        if not writer.conns:
            loop.call_later(0.05, publish_next)
            return
        state["ops"] += 1
        if state["ops"] % args.pub_every == 0:
            state["next"] = start + 1
            state["pubs"] += 1
            writer.pub(args.topic, b"msg-%d" % start, callback=publish_next)
        else:
            end = min(args.count, start + args.batch)
            state["next"] = end
            state["mpubs"] += 1
            writer.mpub(
                args.topic, [b"msg-%d" % i for i in range(start, end)], callback=publish_next
            )

    def finish() -> None:
        # Let the last FINs reach the daemon before the loop stops.
        loop.call_later(0.5, loop.stop)

    def give_up() -> None:
        errors.append(f"timed out after {args.timeout}s")
        loop.stop()

    loop.call_later(0.2, publish_next)
    deadline = loop.call_later(args.timeout, give_up)
    loop.start()
    loop.remove_timeout(deadline)
    elapsed = time.monotonic() - started
    for r in readers:
        r.close()
    writer.conns.clear()

    expected = {b"msg-%d" % i for i in range(args.count)}
    report = {
        "count": args.count,
        "published_acked": state["acked"],
        "pub_commands": state["pubs"],
        "mpub_commands": state["mpubs"],
        "elapsed_s": round(elapsed, 3),
        "bad_ids": bad_ids[:10],
        "errors": errors[:10],
        "per_reader": dict(per_reader),
        "channels": {},
    }
    ok = not bad_ids and not [e for e in errors if "timed out" in e]
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
