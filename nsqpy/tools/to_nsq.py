"""`nsqpy to_nsq`: publish stdin, split at a delimiter byte, to a topic on every nsqd given, as
NSQ's apps/to_nsq/to_nsq.go (v1.3.0) does.

Strategy: stdin is read in 64 KiB blocks on a thread (it may be a pipe, a file or a terminal)
and cut at ``--delimiter``; each non-empty piece, delimiter removed, is published (PUB) to every
``--nsqd-tcp-address`` in turn, each publish awaited, so the order is stdin's. ``--rate N``
throttles to N messages a second with Go's bucket: one message of credit at the start, one
more every 1/N s, at most N saved up. At the end of input, a last piece without a delimiter is
published whole (Go drops its last byte: docs/compatibility.md). A failed publish is
fatal (exit 1)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence

from . import flags
from .flags import INT, LIST, STR, Flag, fail, log, parse
from .runtime import Signals, make_config, run_main

FLAGS = (
    Flag("topic", STR, "", "NSQ topic to publish to"),
    Flag("delimiter", STR, "\n", "character to split input from stdin"),
    Flag("nsqd-tcp-address", LIST, (), "destination nsqd TCP address (repeatable)"),
    flags.PRODUCER_OPT,
    Flag("rate", INT, 0, "Throttle messages to n/second. 0 to disable"),
)

BLOCK = 65536


async def pieces(fd: int, delim: bytes) -> AsyncIterator[bytes]:
    """The pieces of ``fd``'s data between ``delim`` bytes (without them), empty ones left
    out; the last, unterminated piece included."""
    loop = asyncio.get_running_loop()
    buf = b""
    while True:
        block = await loop.run_in_executor(None, os.read, fd, BLOCK)
        if not block:
            break
        buf += block
        parts = buf.split(delim)
        buf = parts.pop()
        for p in parts:
            if p:
                yield p
    if buf:
        yield buf


class Throttle:
    """Go to_nsq's bucket: ``rate`` messages a second (0: no limit)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.interval = 1.0 / rate if rate >= 1 else 0.0
        self.balance = 1.0
        self.last = time.monotonic()

    async def take(self) -> None:
        if self.rate < 1:
            return
        now = time.monotonic()
        self.balance = min(float(self.rate), self.balance + (now - self.last) / self.interval)
        self.last = now
        if self.balance < 1:
            await asyncio.sleep((1 - self.balance) * self.interval)
            now = time.monotonic()
            self.balance += (now - self.last) / self.interval
            self.last = now
        self.balance -= 1


async def publish_stdin(opts: dict, delim: bytes) -> None:
    from ..client import Producer

    cfg = make_config("to_nsq", opts["producer_opt"], flag="producer-opt")
    producers = []
    for addr in opts["nsqd_tcp_address"]:
        try:
            producers.append(Producer(addr, cfg))
        except ValueError as e:
            fail(f"failed to create nsq.Producer - {e}")
    signals = Signals()
    throttle = Throttle(opts["rate"])
    if opts["rate"] >= 1:
        log(f"Throttling messages rate to max:{opts['rate']}/second")
    topic = opts["topic"]

    async def pump() -> None:
        async for body in pieces(sys.stdin.fileno(), delim):
            await throttle.take()
            for p in producers:
                try:
                    await p.publish(topic, body)
                except Exception as e:  # noqa: BLE001 - Go: log.Fatal(err)
                    fail(str(e))

    task = asyncio.ensure_future(pump())
    stopper = asyncio.ensure_future(signals.stop.wait())
    await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if not task.done():
        task.cancel()
    elif task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    for p in producers:
        await p.stop()


def run(argv: Sequence[str]) -> None:
    """to_nsq's command line (``argv`` in Go flag syntax); exits as Go's tool does."""
    opts = parse("to_nsq", FLAGS, argv)
    if opts is None:
        return
    if not opts["topic"]:
        fail("--topic required")
    delim = opts["delimiter"].encode("utf-8", "surrogateescape")
    if len(delim) != 1:
        fail("--delimiter must be a single byte")
    if not opts["nsqd_tcp_address"]:
        fail("--nsqd-tcp-address required")
    run_main(publish_stdin(opts, delim))
