"""`nsqpy nsq_tail`: print the messages of one or more topics on stdout, one per line, as NSQ's
apps/nsq_tail/nsq_tail.go (v1.3.0) does.

Strategy: one nsqpy.client Consumer per ``--topic`` on one channel (default: an ephemeral
``tail<6 digits>#ephemeral``), each with a handler that writes the body and a newline
(``<topic> | `` first with ``--print-topic``), flushed once per event-loop pass. With ``-n N``
the tool ends once one topic's handler has printed N messages (Go counts per topic too;
max-in-flight is lowered to N) and prints nothing after that (what arrives later goes back at
once, as Go's exit leaves it to nsqd); SIGINT/SIGTERM end it otherwise."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Sequence
from typing import Any

from . import flags
from .flags import (
    BOOL,
    INT,
    LIST,
    STR,
    VERSION,
    Flag,
    check_one_source,
    fail,
    log,
    parse_tool_flags,
)
from .runtime import Signals, make_config, run_main, start_consumer, stop_all

FLAGS = (
    VERSION,
    Flag("channel", STR, "", "NSQ channel"),
    flags.MAX_IN_FLIGHT,
    Flag("n", INT, 0, "total messages to show (will wait if starved)"),
    Flag("print-topic", BOOL, False, "print topic name where message was received"),
    flags.NSQD_TCP_ADDRESS,
    flags.LOOKUPD_HTTP_ADDRESS,
    Flag("topic", LIST, (), "NSQ topic (may be given multiple times)"),
    flags.CONSUMER_OPT,
)


class TailHandler:
    """Prints one topic's messages; sets ``done`` when it has printed ``total`` (0: never)."""

    __slots__ = ("prefix", "total", "shown", "done", "out", "flush_due")

    def __init__(self, topic: str, print_topic: bool, total: int, done: asyncio.Event) -> None:
        self.prefix = f"{topic} | ".encode() if print_topic else b""
        self.total, self.shown, self.done = total, 0, done
        self.out = sys.stdout.buffer
        self.flush_due = False

    def flush(self) -> None:
        self.flush_due = False
        try:
            self.out.flush()
        except OSError as e:  # Go: log.Fatalf on a failed write to stdout
            fail(f"ERROR: failed to write to os.Stdout - {e}")

    async def __call__(self, msg: Any) -> None:
        if self.done.is_set():  # Go has exited by now: the message goes back, unprinted
            msg.disable_auto_response()
            msg.requeue(0, backoff=False)
            return
        self.shown += 1
        try:
            self.out.write(self.prefix + msg.body + b"\n")
        except OSError as e:
            fail(f"ERROR: failed to write to os.Stdout - {e}")
        if not self.flush_due:  # one flush per event-loop pass, after the lines it printed
            self.flush_due = True
            asyncio.get_running_loop().call_soon(self.flush)
        if self.total > 0 and self.shown >= self.total:
            self.done.set()


async def tail(opts: dict) -> None:
    mif = opts["max_in_flight"]
    if 0 < opts["n"] < mif:
        mif = opts["n"]  # don't ask for more messages than wanted
    cfg = make_config("nsq_tail", opts["consumer_opt"], mif)
    signals = Signals()
    done = asyncio.Event()
    consumers = []
    for topic in opts["topic"]:
        log(f"Adding consumer for topic: {topic}")
        handler = TailHandler(topic, opts["print_topic"], opts["n"], done)
        consumers.append(
            await start_consumer(
                topic,
                opts["channel"],
                cfg,
                handler,
                1,
                opts["nsqd_tcp_address"],
                opts["lookupd_http_address"],
            )
        )
    await signals.wait(done)
    sys.stdout.flush()
    await stop_all(consumers)


def run(argv: Sequence[str]) -> None:
    """nsq_tail's command line (``argv`` in Go flag syntax); exits as Go's tool does."""
    opts = parse_tool_flags("nsq_tail", FLAGS, argv)
    if opts is None:
        return
    if not opts["channel"]:
        opts["channel"] = f"tail{random.randrange(999999):06d}#ephemeral"
    check_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"], "nsqd-tcp-address")
    if not opts["topic"]:
        fail("--topic required")
    run_main(tail(opts))
