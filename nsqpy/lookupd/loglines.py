"""INFO lines at registration rate: nsqlookupd logs one line per registration a peer makes or
leaves (a 200-node cluster registering is 300,000 of them), so each must cost little.

Strategy: ``InfoLines(logger)(message)`` logs ``message`` at INFO as ``logger.info(message)``
would, minus logging's per-record bookkeeping: a template record is made once through the
logger (its makeRecord, so a record factory applies), and each line is a copy of the template's
attributes with its own message and time, handed to Logger.handle. Filters, handlers and
formatters see an ordinary LogRecord (no args: the caller formats the message, so it is never
%-formatted again). The thread and process fields are the template's: call it from one thread
(the event loop's). About half the cost of logger.info(fmt, *args) per line; the rest is the
handler's (nsqpy.internal.lg).

A burst goes through ``many(messages)``: when the logger's one handler is the daemons' own
(lg.PassBufferedHandler with lg's text line, no filter anywhere, nothing propagated), the
lines are formatted straight into that handler's buffer with one time stamp for the burst, no
record at all (about a tenth of the cost); any other set-up (a test's capture, JSON lines, an
extra handler) gets one record per message, as above."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ..internal.lg import PassBufferedHandler

_new_record = logging.LogRecord.__new__
_LogRecord = logging.LogRecord
_time = time.time


class InfoLines:
    """Log preformatted INFO lines to ``logger`` (see the module docstring)."""

    __slots__ = ("logger", "_template", "_start_ms")

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._template: dict[str, Any] | None = None
        self._start_ms = 0.0

    def enabled(self) -> bool:
        """Whether INFO lines are logged at all (callers can skip formatting them)."""
        return self.logger.isEnabledFor(logging.INFO)

    def _make_template(self) -> dict[str, Any]:
        logger = self.logger
        record = logger.makeRecord(logger.name, logging.INFO, "(unknown file)", 0, "", (), None)
        template = self._template = dict(record.__dict__)
        # logging's start time, which relativeCreated counts from, in ms
        self._start_ms = record.created * 1000.0 - record.relativeCreated
        return template

    def __call__(self, message: str) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        template = self._template
        if template is None:
            template = self._make_template()
        attrs = template.copy()
        now = _time()
        ms = now * 1000.0
        attrs["msg"] = message
        attrs["created"] = now
        attrs["msecs"] = ms % 1000.0 // 1.0
        attrs["relativeCreated"] = ms - self._start_ms
        record = _new_record(_LogRecord)
        record.__dict__ = attrs
        logger.handle(record)

    def many(self, messages: Sequence[str]) -> None:
        """Log each of ``messages`` at INFO, in order (see the module docstring)."""
        logger = self.logger
        if not messages or not logger.isEnabledFor(logging.INFO):
            return
        handlers = logger.handlers
        if (
            len(handlers) == 1
            and not logger.propagate
            and not logger.filters
            and not logger.disabled
            and type(handlers[0]) is PassBufferedHandler
            and handlers[0].emit_messages(logging.INFO, messages)
        ):
            return
        for message in messages:
            self(message)
