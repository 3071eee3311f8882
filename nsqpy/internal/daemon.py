"""What every nsqpy daemon process shares (nsqpy-d, nsqpy-lookupd, nsqpy-admin): run on uvloop,
serve until SIGTERM or SIGINT, stop cleanly, and exit as NSQ's Go daemons do.

Strategy: a daemon is something with ``async start()`` and ``async stop()`` (its server.py);
this module owns the process around it: the descriptor limit raised to the hard limit (as the Go
runtime does), signal handlers on the loop, exit status 0 after a clean stop and 1 when start()
fails ("failed to instantiate <name> - <error>", as the Go daemons log it), the supervisor's
notifications (internal/sdnotify.py: READY=1 once start() has bound the listeners and their
log lines are written, WATCHDOG=1 from the loop, STOPPING=1 on a signal), and the collector
tuned once the long-lived start-up objects exist, and glibc's malloc told to give big buffers
back to the OS (bound_malloc_retention). After a clean stop the process leaves as a Go program
does: exit handlers run and standard streams are flushed, then the interpreter's teardown of
every module and object (most of a stop's time otherwise) is skipped (exit_after_stop).
Start-up time matters (a test suite may start a daemon per test): the daemons import this
module first when they start, so the cyclic collector is off from here until the daemon
listens (start-up creates no garbage worth collecting, and the import of the daemon's modules
would otherwise trigger a dozen collections), and the one full collection that
freeze_startup_objects makes runs SETTLE_S after start, not between exec and the first answer."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from .lg import fields

gc.disable()  # until serve() has started the daemon (see the module comment)

SETTLE_S = 0.5  # after start: freeze_startup_objects (or whatever after_start does) runs then


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def status(self) -> str:
        """One line naming what the started daemon listens on (the supervisor's STATUS=)."""
        ...


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
    so a full collection never walks them again (it cost 20-30 ms per pass), collect young
    objects less often (queued messages are bytes, which the collector does not track), and from
    then on keep the collector's pauses short: internal.gcpacer. Turns the collector on; runs on
    the event loop."""
    from .gcpacer import GcPacer

    GcPacer(asyncio.get_running_loop()).start()


#: glibc's M_MMAP_THRESHOLD option number, and the size fixed for it (bytes).
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1024 * 1024


def bound_malloc_retention() -> None:
    """Give big buffers back to the OS when they are freed (glibc only; elsewhere nothing).

    glibc serves an allocation of 128 KiB or more from its own mapping, returned at free, but
    raises that threshold to the size of each such block freed (up to 32 MiB): after one
    client's 5 MiB body has come and gone, the next ones come from the heap and stay in the
    process once freed (hundreds of MB held after hostile clients left). Fixing the threshold
    at MMAP_THRESHOLD keeps that from happening; socket reads (at most 256 KiB) stay below it.
    Runs after start-up (importing ctypes costs milliseconds)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        return
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass


def serve(
    name: str,
    make: Callable[[], Startable],
    *,
    on_signal: str | None = None,
    after_start: Callable[[], None] | None = None,
) -> None:
    """Build the daemon with ``make()`` on a uvloop event loop (asyncio's own loop where
    uvloop is not installed: Windows, PyPy; logged), start it, serve until SIGTERM or SIGINT
    (logging ``on_signal`` if given), stop it, and exit the process: 0 after a clean stop, 1
    when start() raised OSError or ValueError (logged as FATAL). ``after_start`` (if given) and
    bound_malloc_retention run SETTLE_S seconds after start; the collector is on from then."""
    from .sdnotify import Notifier

    log = logging.getLogger("nsqpy")
    run = event_loop_runner(log)

    async def main() -> int:
        daemon = make()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        notifier = Notifier()
        notifier.start_watchdog(loop)
        try:
            await daemon.start()
        except (OSError, ValueError) as e:
            log.critical("failed to instantiate %s - %s", name, e, extra=fields(error=str(e)))
            notifier.status(f"failed to instantiate {name} - {e}")
            notifier.close()
            gc.enable()
            await daemon.stop()
            return 1
        if notifier.enabled:
            for handler in log.handlers:
                handler.flush()  # the "listening on" lines are out before READY=1 is
            notifier.ready(daemon.status())

        def settle() -> None:
            try:
                bound_malloc_retention()
                if after_start is not None:
                    after_start()
            finally:
                gc.enable()

        loop.call_later(SETTLE_S, settle)  # not between the listeners and a first answer
        await stop.wait()
        notifier.stopping()
        if on_signal:
            log.info("%s", on_signal)
        await daemon.stop()
        notifier.close()
        return 0

    exit_after_stop(run(main()))


def exit_after_stop(code: int) -> None:
    """End the process with ``code`` once the daemon has stopped: atexit's handlers (logging's
    flush and close among them) and the standard streams' flush first, then os._exit, which
    skips the interpreter's teardown of every module and object: about 18 ms of a 20 ms stop,
    where Go's nsqd takes 2-3 ms from SIGTERM to exit. Everything the daemon owns (data
    files, sockets, diskqueue threads) is closed by its stop(). While another non-daemon
    thread still runs, the ordinary exit waits for it (sys.exit)."""
    import atexit
    import os
    import threading

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if run_exitfuncs is None or others:
        sys.exit(code)
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def event_loop_runner(log: logging.Logger) -> Callable[[Coroutine[Any, Any, int]], int]:
    """``uvloop.run`` when uvloop is installed (a dependency where it builds: CPython off
    Windows), else ``asyncio.run`` on asyncio's own loop, saying so in ``log``."""
    try:
        import uvloop
    except ImportError:
        log.info("uvloop is not installed: running on asyncio's own event loop")
        return asyncio.run
    return uvloop.run
