"""Logging as NSQ's Go daemons do it (NSQ's internal/lg): the level names, lg.LogLevel's
numbers, and the line ``<prefix>2006/01/02 15:04:05.000000 LEVEL: message`` on stderr.

Strategy: the daemons log through Python's logging under the "nsqpy" logger; this module
maps NSQ's level names onto logging's levels and formats each record as lg's line (local
time, microseconds), so nsqpy-d, nsqpy-lookupd and nsqpy-admin write what nsqd,
nsqlookupd and nsqadmin write. Source: nsq internal/lg/lg.go."""

from __future__ import annotations

import logging
import sys
import time

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

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", t) + f".{int(record.created % 1 * 1e6):06d}"
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        return f"{self.prefix}{stamp} {level}: {record.getMessage()}"


def setup_logging(prefix: str, level: str, logger: str = "nsqpy") -> None:
    """Send ``logger``'s records to stderr in NSQ's format at ``level`` (debug, info, warn,
    error or fatal, any case; KeyError for anything else)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqLogFormatter(prefix))
    log = logging.getLogger(logger)
    log.handlers[:] = [handler]
    log.setLevel(LOG_LEVELS[level.lower()])
    log.propagate = False
