"""Logging as NSQ's Go daemons do it (NSQ's internal/lg): the level names, lg.LogLevel's
numbers, and the line ``<prefix>2006/01/02 15:04:05.000000 LEVEL: message`` on stderr; or,
with ``--log-format=json``, one JSON object per line for log collectors.

Strategy: the daemons log through Python's logging under the "nsqpy" logger; this module
maps NSQ's level names onto logging's levels and formats each record as lg's line (local
time, microseconds), so nsqpy-d, nsqpy-lookupd and nsqpy-admin write what nsqd,
nsqlookupd and nsqadmin write. Source: nsq internal/lg/lg.go.

JSON lines (nsqpy's own; the default stays lg's text): ``{"level": "info", "time":
"2006-01-02T15:04:05.000Z", "daemon": "nsqd", "msg": "TCP: listening on 127.0.0.1:4150",
...}`` with ``time`` in RFC 3339, UTC, milliseconds; ``level`` is lg's level name in lower
case; ``daemon`` the Go daemon's name (nsqd, nsqlookupd, nsqadmin); ``msg`` the text lg's
line would carry after "LEVEL: " (the --log-prefix is left out). A record logged with
``extra=fields(key=value, ...)`` adds those keys after ``msg`` (the listening lines carry
``listener`` and ``address``); a logged exception adds ``exception``, its traceback. In
JSON, the warnings of the libraries underneath (asyncio, aiohttp) come as JSON lines too.

Cost: the daemons write a line per connection, topic, channel and registration, as Go's do, and
a burst of those (10,000 clients connecting, a cluster re-registering) must not hold the event
loop. So lines logged on the event loop are buffered and written with one write at the end of
the loop's pass (call_soon), in order; a line logged anywhere else (start-up, another thread)
first writes what is buffered, then itself. A crash loses at most the current pass's lines; a
normal exit flushes them (logging's shutdown). The time stamp's seconds part is formatted once
per second, and logging's caller, thread and process lookups are off (no format uses them). A
burst of preformatted lines (nsqlookupd's line per registration) can skip the records:
``PassBufferedHandler.emit_messages`` puts them in the buffer under one time stamp."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TextIO

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

#: The --log-format names: lg's line, or one JSON object per line.
LOG_FORMATS = ("text", "json")

#: The LogRecord attribute that ``fields`` fills (logging's ``extra``).
_FIELDS = "nsq_fields"

_LEVEL_NAMES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}


class _SecondStamp:
    """``time.strftime(fmt, convert(second))`` for a whole second (``convert``: time.localtime
    or time.gmtime), kept until a record of another second asks."""

    __slots__ = ("_fmt", "_convert", "_second", "_stamp")

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self._fmt = fmt
        self._convert = convert
        self._second = -1
        self._stamp = ""

    def __call__(self, second: int) -> str:
        if second != self._second:
            self._stamp = time.strftime(self._fmt, self._convert(second))
            self._second = second
        return self._stamp


class NsqLogFormatter(logging.Formatter):
    """lg's line: ``<prefix>2006/01/02 15:04:05.000000 LEVEL: message`` (local time)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self._stamp = _SecondStamp("%Y/%m/%d %H:%M:%S", time.localtime)

    def format(self, record: logging.LogRecord) -> str:
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        return self.head(level, record.created) + record.getMessage()

    def head(self, level: str, created: float) -> str:
        """What comes before the message in a line of ``level`` (its name as lg writes it)
        logged at ``created`` (Unix seconds): ``<prefix>2006/01/02 15:04:05.000000 LEVEL: ``."""
        stamp = f"{self._stamp(int(created))}.{int(created % 1 * 1e6):06d}"
        return f"{self.prefix}{stamp} {level}: "


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a logging call: structured values that a JSON line carries as keys of
    its own (lg's text line shows only the message), e.g.
    ``log.info("TCP: listening on %s", a, extra=fields(listener="TCP", address=a))``."""
    return {_FIELDS: values}


def log_listening(logger: logging.Logger, kind: str, address: str) -> None:
    """Log a bound listener as NSQ's daemons do (nsqd, nsqlookupd and nsqadmin's tcp and http
    servers): ``<kind>: listening on <address>`` at info, ``kind`` "TCP", "HTTP" or "HTTPS",
    ``address`` as format_listen_addr gives it (or a unix socket's path); the JSON line
    carries both as fields. Scripts and nsqpy.testing.process read this line for the port."""
    logger.info("%s: listening on %s", kind, address, extra=fields(listener=kind, address=address))


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring): level, time, daemon, msg, then
    the record's fields and its exception, if any."""

    _RESERVED = frozenset(("level", "time", "daemon", "msg"))

    def __init__(self, daemon: str) -> None:
        import json  # only with --log-format=json

        super().__init__()
        self.daemon = daemon
        self._dumps = json.dumps
        self._stamp = _SecondStamp("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        level = _LEVEL_NAMES.get(record.levelno, record.levelname).lower()
        line: dict[str, Any] = {
            "level": level,
            "time": f"{self._stamp(int(created))}.{int(created % 1 * 1000):03d}Z",
            "daemon": self.daemon,
            "msg": record.getMessage(),
        }
        extra = getattr(record, _FIELDS, None)
        if extra:
            for key, value in extra.items():
                line[f"field_{key}" if key in self._RESERVED else key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self._dumps(line, ensure_ascii=False, default=str)


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

    def emit_messages(self, levelno: int, messages: Sequence[str]) -> bool:
        """Buffer one line per message of ``messages`` (preformatted, logged now at
        ``levelno``) as ``emit`` would for their records, sharing one time stamp: False,
        nothing done, unless this handler would take every such record unchanged (the
        level passes, no filter, the text formatter, a running event loop)."""
        formatter = self.formatter
        if type(formatter) is not NsqLogFormatter or self.filters or levelno < self.level:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        level = _LEVEL_NAMES.get(levelno) or logging.getLevelName(levelno)
        head = formatter.head(level, time.time())
        self.acquire()
        try:
            self._lines.extend([head + m for m in messages])
            if not self._scheduled:
                self._scheduled = True
                loop.call_soon(self._end_of_pass)
        finally:
            self.release()
        return True

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


def change_level(opts: Any, level: str, known: Collection[str]) -> bool:
    """A --log-level change at run time (PUT /config/log_level, nsqd's and nsqadmin's
    doConfig): ``level`` (lower case) among ``known`` goes to ``opts.log_level`` and to the
    "nsqpy" logger, True; False for any other, nothing changed."""
    if level not in known:
        return False
    opts.log_level = level
    logging.getLogger("nsqpy").setLevel(LOG_LEVELS[level])
    return True


def setup_logging(
    prefix: str,
    level: str,
    logger: str = "nsqpy",
    *,
    log_format: str = "text",
    daemon: str = "nsqd",
) -> None:
    """Send ``logger``'s records to stderr at ``level`` (debug, info, warn, error or fatal,
    any case; KeyError for anything else): as lg's lines with ``prefix`` when ``log_format``
    is "text", as JSON lines naming ``daemon`` when it is "json" (ValueError for anything
    else)."""
    formatter: logging.Formatter
    if log_format == "text":
        formatter = NsqLogFormatter(prefix)
    elif log_format == "json":
        formatter = JsonLogFormatter(daemon)
    else:
        raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
    handler = PassBufferedHandler(sys.stderr)
    handler.setFormatter(formatter)
    # lg's line uses none of these: skip looking them up for every record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    log = logging.getLogger(logger)
    log.handlers[:] = [handler]
    log.setLevel(LOG_LEVELS[level.lower()])
    log.propagate = False
    if log_format == "json" and logger == "nsqpy":
        # the libraries' warnings (asyncio's, aiohttp's) would otherwise reach stderr as bare
        # text through logging's last resort: in JSON too, so every line parses
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(logging.WARNING)
