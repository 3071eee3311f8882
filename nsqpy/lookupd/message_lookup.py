# GET /message?id= on nsqpy-lookupd: ask the node whose node id the message ID carries (issue 12).
#
# Strategy: the ID's 10-bit node id names one registered nsqpy-d (they send "node_id" in their
# IDENTIFY); that node's own /message answers. Contract: /work/notes/message_lookup_spec.md.
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..httpd import NsqHTTPError

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd


async def answer(lookupd: NSQLookupd, query: dict[str, str]) -> dict[str, Any]:
    """The JSON answer of nsqpy-lookupd's ``GET /message`` for ``query``.

    Raises httpd.NsqHTTPError (400 MISSING_ARG_ID/INVALID_ID, 404 NODE_NOT_FOUND,
    409 CONFLICTING_NODE_ID, 502 NODE_UNREACHABLE).
    """
    if not query.get("id"):
        raise NsqHTTPError(400, "MISSING_ARG_ID")
    raise NsqHTTPError(501, "NOT_IMPLEMENTED")
