"""Logging as NSQ's Go daemons do it (NSQ's internal/lg): the level names, lg.LogLevel's
numbers, and the line ``<prefix>2006/01/02 15:04:05.000000 LEVEL: message`` on stderr.

Strategy: the daemons log through Python's logging under the "nsqpy" logger; this module
maps NSQ's level names onto logging's levels and formats each record as lg's line (local
time, microseconds), so nsqpy-d, nsqpy-lookupd and nsqpy-admin write what nsqd,
nsqlookupd and nsqadmin write. Source: nsq internal/lg/lg.go.

Cost: the daemons write a line per connection, topic, channel and registration, as Go's do, and
a burst of those (10,000 clients connecting, a cluster re-registering) must not hold the event
loop. So lines logged on the event loop are buffered and written with one write at the end of
the loop's pass (call_soon), in order; a line logged anywhere else (start-up, another thread)
first writes what is buffered, then itself. A crash loses at most the current pass's lines; a
normal exit flushes them (logging's shutdown). The time stamp's seconds part is formatted once
per second, and logging's caller, thread and process lookups are off (no format uses them)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import TextIO

#: The --log-level names (any case on the command line) and their logging levels; "warning"
#: is nsqpy's alias of "warn".
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}
#: lg.LogLevel's numbers, which GET /config/log_level answers (Go encodes the level as this
#: integer).
LOG_LEVEL_NUMBERS = {"debug": 1, "info": 2, "warn": 3, "warning": 3, "error": 4, "fatal": 5}

_LEVEL_NAMES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}


class NsqLogFormatter(logging.Formatter):
    """lg's line: ``<prefix>2006/01/02 15:04:05.000000 LEVEL: message`` (local time)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self._second = -1
        self._stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        second = int(created)
        if second != self._second:
            self._stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(second))
            self._second = second
        stamp = f"{self._stamp}.{int(created % 1 * 1e6):06d}"
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        return f"{self.prefix}{stamp} {level}: {record.getMessage()}"


class PassBufferedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler whose lines logged on a running event loop go out together at the end of
    the loop's pass (see the module docstring); elsewhere it writes at once, after what is
    buffered."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._lines.append(line)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write_out()
            return
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._end_of_pass)

    def _end_of_pass(self) -> None:
        self.acquire()
        try:
            self._scheduled = False
            self._write_out()
        finally:
            self.release()

    def _write_out(self) -> None:
        lines = self._lines
        if not lines:
            return
        self._lines = []
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # stderr gone (a closed pipe): nothing to tell

    def flush(self) -> None:
        self.acquire()
        try:
            self._write_out()
        finally:
            self.release()


def setup_logging(prefix: str, level: str, logger: str = "nsqpy") -> None:
    """Send ``logger``'s records to stderr in NSQ's format at ``level`` (debug, info, warn,
    error or fatal, any case; KeyError for anything else)."""
    handler = PassBufferedHandler(sys.stderr)
    handler.setFormatter(NsqLogFormatter(prefix))
    # lg's line uses none of these: skip looking them up for every record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # type: ignore[attr-defined]
    log = logging.getLogger(logger)
    log.handlers[:] = [handler]
    log.setLevel(LOG_LEVELS[level.lower()])
    log.propagate = False
