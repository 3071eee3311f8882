"""INFO lines at registration rate: nsqlookupd logs one line per registration a peer makes or
leaves (a 200-node cluster registering is 300,000 of them), so each must cost little.

Strategy: ``InfoLines(logger)(message)`` logs ``message`` at INFO as ``logger.info(message)``
would, minus logging's per-record bookkeeping: a template record is made once through the
logger (its makeRecord, so a record factory applies), and each line is a copy of the template's
attributes with its own message and time, handed to Logger.handle. Filters, handlers and
formatters see an ordinary LogRecord (no args: the caller formats the message, so it is never
%-formatted again). The thread and process fields are the template's: call it from one thread
(the event loop's). About half the cost of logger.info(fmt, *args) per line; the rest is the
handler's (nsqpy.internal.lg)."""

from __future__ import annotations

import logging
import time
from typing import Any

_new_record = logging.LogRecord.__new__


class InfoLines:
    """Log preformatted INFO lines to ``logger`` (see the module docstring)."""

    __slots__ = ("logger", "_template")

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._template: dict[str, Any] | None = None

    def enabled(self) -> bool:
        """Whether INFO lines are logged at all (callers can skip formatting them)."""
        return self.logger.isEnabledFor(logging.INFO)

    def __call__(self, message: str) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        template = self._template
        if template is None:
            record = logger.makeRecord(logger.name, logging.INFO, "(unknown file)", 0, "", (), None)
            template = self._template = dict(record.__dict__)
        record = _new_record(logging.LogRecord)
        attrs = record.__dict__
        attrs.update(template)
        attrs["msg"] = message
        now = time.time()
        attrs["created"] = now
        attrs["msecs"] = int((now - int(now)) * 1000) + 0.0
        attrs["relativeCreated"] = template["relativeCreated"] + (now - template["created"]) * 1000
        logger.handle(record)
