"""GET /message?id= on nsqpy-lookupd: ask the node whose node id the message ID carries.

Strategy: an nsqd message ID holds its node's 10-bit node id (guid.py); nsqpy-d sends its
node id in its lookupd IDENTIFY (lookup_peer.py), so the registration DB knows which node
made an ID. That node's own GET /message answers (nsqpy/message_lookup.py); this module adds
which producer it was. A Go nsqd sends no node id and is never matched. The outgoing request
uses aiohttp's client, imported on the first lookup (it is slow to import and the daemon's
start should not pay for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..internal.http.v1 import NsqHTTPError
from ..internal.netaddr import dial_address
from ..message_lookup import id_from_query

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

#: How long the node may take to answer, seconds.
NODE_TIMEOUT_S = 5.0


async def answer(lookupd: NSQLookupd, query: dict[str, str]) -> dict[str, Any]:
    """The JSON answer of nsqpy-lookupd's ``GET /message?id=<ID>[&topic=][&body=1]``: the
    answer of the nsqpy-d whose node id is in the ID (see nsqpy.message_lookup.answer), plus
    "producer": that node as /lookup lists it, with its "node_id".

    Raises http.v1.NsqHTTPError: 400 MISSING_ARG_ID / INVALID_ID, 404 NODE_NOT_FOUND (no
    active node sent that node id), 409 CONFLICTING_NODE_ID (two nodes sent it: a configuration
    error), 502 NODE_UNREACHABLE (no answer within NODE_TIMEOUT_S), or the node's own error.
    """
    decoded = id_from_query(query)[0]
    peers = lookupd.db.peers_with_node_id(decoded.node_id, lookupd.inactive_producer_timeout_ns)
    nodes = {(p.broadcast_address, p.http_port): p for p in peers}
    if not nodes:
        raise NsqHTTPError(404, "NODE_NOT_FOUND")
    if len(nodes) > 1:
        raise NsqHTTPError(409, "CONFLICTING_NODE_ID")
    peer = next(iter(nodes.values()))
    params: dict[str, str] = {k: query[k] for k in ("id", "topic", "body") if k in query}
    import aiohttp  # first lookup only (see the module comment)

    url = f"http://{dial_address(peer.broadcast_address, peer.http_port)}/message"
    try:
        timeout = aiohttp.ClientTimeout(total=NODE_TIMEOUT_S)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, params=params) as resp,
        ):
            data = await resp.json(content_type=None)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, ValueError):
        raise NsqHTTPError(502, "NODE_UNREACHABLE") from None
    if status != 200:
        text = data.get("message") if isinstance(data, dict) else None
        raise NsqHTTPError(status, str(text or "NODE_ERROR"))
    if not isinstance(data, dict):
        raise NsqHTTPError(502, "NODE_UNREACHABLE")
    data["producer"] = {**peer.to_json(), "node_id": peer.node_id}
    return data
