# What every nsqpy daemon process shares (nsqpy-d, nsqpy-lookupd, nsqpy-admin): run on uvloop,
# serve until SIGTERM or SIGINT, stop cleanly, and exit as NSQ's Go daemons do.
#
# Strategy: a daemon is something with ``async start()`` and ``async stop()`` (its server.py);
# this module owns the process around it: the descriptor limit raised to the hard limit (as the Go
# runtime does), signal handlers on the loop, exit status 0 after a clean stop and 1 when start()
# fails ("failed to instantiate <name> - <error>", as the Go daemons log it), and the collector
# tuned once the long-lived start-up objects exist.
# Start-up time matters (a test suite may start a daemon per test): the daemons import this
# module first when they start, so the cyclic collector is off from here until the daemon
# listens (start-up creates no garbage worth collecting, and the import of the daemon's modules
# would otherwise trigger a dozen collections), and the one full collection that
# freeze_startup_objects makes runs SETTLE_S after start, not between exec and the first answer.
from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable
from typing import Protocol

gc.disable()  # until serve() has started the daemon (see the module comment)

SETTLE_S = 0.5  # after start: freeze_startup_objects (or whatever after_start does) runs then


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def raise_nofile_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (many clients, many diskqueue files)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def freeze_startup_objects() -> None:
    """Move start-up objects (modules, the HTTP routes, ...) out of the cyclic collector's sight,
    so a full collection never walks them again (it cost 20-30 ms per pass), and collect young
    objects less often: queued messages are bytes, which the collector does not track. Turns
    the collector on."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
    gc.enable()


def serve(
    name: str,
    make: Callable[[], Startable],
    *,
    on_signal: str | None = None,
    after_start: Callable[[], None] | None = None,
) -> None:
    """Build the daemon with ``make()`` on a uvloop event loop, start it, serve until SIGTERM or
    SIGINT (logging ``on_signal`` if given), stop it, and exit the process: 0 after a clean
    stop, 1 when start() raised OSError or ValueError (logged as FATAL). ``after_start`` runs
    SETTLE_S seconds after start; the collector is on from then (at once without one)."""
    import uvloop

    log = logging.getLogger("nsqpy")

    async def main() -> int:
        daemon = make()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await daemon.start()
        except (OSError, ValueError) as e:
            log.critical("failed to instantiate %s - %s", name, e)
            gc.enable()
            await daemon.stop()
            return 1

        def settle() -> None:
            try:
                if after_start is not None:
                    after_start()
            finally:
                gc.enable()

        if after_start is None:
            gc.enable()
        else:
            loop.call_later(SETTLE_S, settle)
        await stop.wait()
        if on_signal:
            log.info("%s", on_signal)
        await daemon.stop()
        return 0

    sys.exit(uvloop.run(main()))
