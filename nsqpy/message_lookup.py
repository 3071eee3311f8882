# GET /message?id=: where one message is now, on this nsqd (beyond nsqd; issue 12).
#
# Strategy: the HTTP route hands the query here; this module decodes the ID and asks each
# topic and channel (spill.SpillQueue.locate) in bounded time. Contract:
# /work/notes/message_lookup_spec.md until the README's "beyond nsqd" section has it.
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .httpd import NsqHTTPError

if TYPE_CHECKING:
    from .nsqd import NSQD


def answer(nsqd: NSQD, query: dict[str, str]) -> dict[str, Any]:
    """The JSON answer of ``GET /message`` for ``query`` (decoded query parameters).

    Raises httpd.NsqHTTPError (400 MISSING_ARG_ID, 400 INVALID_ID, 404 TOPIC_NOT_FOUND).
    """
    if not query.get("id"):
        raise NsqHTTPError(400, "MISSING_ARG_ID")
    raise NsqHTTPError(501, "NOT_IMPLEMENTED")
