"""What the consuming and publishing tools share: go-nsq's Config from ``--consumer-opt`` /
``--producer-opt``, consumers connected as the Go tools connect them, and the signals.

Strategy: every use of nsqpy.client by the tools goes through here, so the tools read as their
Go originals (make a config, make a consumer per topic, add a handler, connect, wait for a
signal, stop). The user agent is ``<tool>/<nsq version> nsqpy/<version>``, the shape of Go's
``<tool>/<version> go-nsq/<version>``. Signals: SIGINT and SIGTERM end a tool (``stop``),
SIGHUP is reported to nsq_to_file (``hup``)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .. import __version__
from .flags import NSQ_TOOLS_VERSION, fail, log, split_opt


def user_agent(program: str) -> str:
    return f"{program}/{NSQ_TOOLS_VERSION} nsqpy/{__version__}"


def make_config(
    program: str,
    opts: Sequence[str],
    max_in_flight: int | None = None,
    flag: str = "consumer-opt",
    strict: bool = True,
) -> Any:
    """An nsqpy.client Config with each ``name,value`` of ``opts`` set as go-nsq's ConfigFlag
    sets it. A bad option is a flag error (exit 2), as Go's flag package makes it; with
    ``strict`` False it is logged and skipped (nsq_to_file sets its options after parsing and
    ignores their errors)."""
    from ..client import Config

    cfg = Config()
    for opt in opts:
        name, value = split_opt(opt)
        try:
            cfg.set(name, value)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            text = f'invalid value "{opt}" for flag -{flag}: {e}'
            if strict:
                sys.stderr.write(text + "\n")
                sys.exit(2)
            log(f"{text} (ignored, as Go's {program} ignores it)")
    cfg.user_agent = user_agent(program)
    if max_in_flight is not None:
        cfg.max_in_flight = max_in_flight
    return cfg


async def start_consumer(
    topic: str,
    channel: str,
    cfg: Any,
    handler: Callable[[Any], Awaitable[None]],
    concurrency: int,
    nsqds: Sequence[str],
    lookupds: Sequence[str],
) -> Any:
    """An nsqpy.client Consumer of ``topic``/``channel`` with ``handler`` run ``concurrency``
    at a time, connected to the nsqds or the lookupds given (fatal when that fails)."""
    from ..client import Consumer

    try:
        consumer = Consumer(topic, channel, cfg)
    except ValueError as e:
        fail(str(e))
    consumer.add_handler(handler, concurrency=concurrency)
    try:
        if nsqds:
            await consumer.connect_to_nsqds(list(nsqds))
        if lookupds:
            await consumer.connect_to_lookupds(list(lookupds))
    except (OSError, ValueError) as e:
        fail(str(e))
    return consumer


class Signals:
    """SIGINT/SIGTERM set ``stop``; SIGHUP calls ``on_hup`` when given (else stops too)."""

    def __init__(self, on_hup: Callable[[], None] | None = None) -> None:
        self.stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        if on_hup is not None:
            loop.add_signal_handler(signal.SIGHUP, on_hup)

    async def wait(self, *others: asyncio.Event) -> None:
        """Until a stop signal, or until any of ``others`` is set."""
        waits = [asyncio.ensure_future(e.wait()) for e in (self.stop, *others)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


async def stop_all(consumers: Sequence[Any]) -> None:
    """Stop every consumer and wait until each has stopped."""
    await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)


def run_main(coro: Awaitable[None]) -> None:
    """Run a tool's main coroutine on uvloop when available; Ctrl-C ends it quietly."""
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    try:
        runner(coro)
    except KeyboardInterrupt:
        pass
