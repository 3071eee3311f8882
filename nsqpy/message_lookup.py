"""GET /message?id=: where one message is now, on this nsqd (beyond nsqd).

Strategy: the HTTP route hands the decoded query here; this module decodes the ID (guid.py)
and asks each topic and channel where they hold it (Topic.locate, Channel.locate: in-flight
and deferred tables by ID, memory and disk through msg_index), so an answer costs a few
dictionary lookups and bisections per channel, plus at most one disk block read per channel
whose backend holds records. No queue is scanned. Shapes: docs/operations/index.md."""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

from .client_stats import Client
from .guid import DecodedID, decode_id
from .internal.http.v1 import NsqHTTPError
from .message import Message, record_body, record_header
from .wire import is_valid_name

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

FINISHED_OR_UNKNOWN = "finished_or_unknown"


def answer(nsqd: NSQD, query: dict[str, str]) -> dict[str, Any]:
    """The JSON answer of ``GET /message?id=<16 hex>[&topic=<name>][&body=1]``.

    Answer: {"id", "node_id", "timestamp" (Unix ms the ID was made), "sequence", "this_node",
    "found", "locations": [{"topic", "channel" (None: held by the topic itself), "state"
    ("memory" | "disk" | "in_flight" | "deferred" | "finished_or_unknown"), "attempts",
    "body_size", "published_at" (Unix ms), plus per state: in_flight "client", "delivered_at",
    "timeout_at"; deferred "deferred_until"; disk "file", "offset" (all times Unix ms)}], and
    "body" (base64) with body=1 when found}. Without ``topic`` only the places holding the
    message are listed; with it, every channel of that topic.

    Raises httpd.NsqHTTPError: 400 MISSING_ARG_ID, 400 INVALID_ID (not an nsqd ID),
    400 INVALID_TOPIC, 404 TOPIC_NOT_FOUND.
    """
    decoded, msg_id = id_from_query(query)
    topic_name = query.get("topic")
    if topic_name is not None:
        if not is_valid_name(topic_name):
            raise NsqHTTPError(400, "INVALID_TOPIC")
        topic = nsqd.topics.get(topic_name)
        if topic is None:
            raise NsqHTTPError(404, "TOPIC_NOT_FOUND")
        topics = [topic]
    else:
        topics = list(nsqd.topics.values())
    wall_ns = time.time_ns()
    locations: list[dict[str, Any]] = []
    body: bytes | None = None
    for topic in topics:
        found = _in_topic(topic, msg_id)
        if found is not None:
            locations.append(found[0])
            body = found[1]
        for ch in list(topic.channels.values()):
            hit = _in_channel(ch, msg_id, wall_ns)
            if hit is not None:
                locations.append(hit[0])
                body = hit[1]
            elif topic_name is not None:
                locations.append(
                    {"topic": topic.name, "channel": ch.name, "state": FINISHED_OR_UNKNOWN}
                )
    out: dict[str, Any] = {
        "id": msg_id.decode(),
        "node_id": decoded.node_id,
        "timestamp": decoded.time_ns // 1_000_000,
        "sequence": decoded.sequence,
        "this_node": decoded.node_id == nsqd.opts.node_id,
        "found": body is not None,
        "locations": locations,
    }
    if body is not None and query.get("body") in ("1", "true"):
        out["body"] = base64.b64encode(body).decode()
    return out


def id_from_query(query: dict[str, str]) -> tuple[DecodedID, bytes]:
    """The ``id`` parameter of a GET /message: (decoded, its 16 lower-case hex bytes).
    Raises httpd.NsqHTTPError 400 MISSING_ARG_ID or 400 INVALID_ID (not an nsqd ID)."""
    raw = query.get("id", "")
    if not raw:
        raise NsqHTTPError(400, "MISSING_ARG_ID")
    try:
        decoded = decode_id(raw)
    except ValueError:
        raise NsqHTTPError(400, "INVALID_ID") from None
    return decoded, raw.strip().lower().encode()


def _record_fields(record: bytes) -> dict[str, Any]:
    ts, attempts = record_header(record)
    return {
        "attempts": attempts,
        "body_size": len(record) - 26,
        "published_at": ts // 1_000_000,
    }


def _in_topic(topic: Topic, msg_id: bytes) -> tuple[dict[str, Any], bytes] | None:
    hit = topic.locate(msg_id)
    if hit is None:
        return None
    state, record, pos = hit
    loc: dict[str, Any] = {"topic": topic.name, "channel": None, "state": state}
    loc.update(_record_fields(record))
    if pos is not None and topic.backend is not None:
        loc["file"] = topic.backend.file_name(pos[0])
        loc["offset"] = pos[1]
    return loc, record_body(record)


def _in_channel(ch: Channel, msg_id: bytes, wall_ns: int) -> tuple[dict[str, Any], bytes] | None:
    hit = ch.locate(msg_id)
    if hit is None:
        return None
    state, held, pos = hit
    loc: dict[str, Any] = {"topic": ch.topic_name, "channel": ch.name, "state": state}
    if isinstance(held, Message):
        record = held.to_record()
        loc.update(_record_fields(record))
        # The channel's times are on its monotonic clock: shift them to wall-clock ms.
        shift = wall_ns - ch._clock_ns()
        if state == "in_flight":
            c: Client | None = held.client
            if c is not None:
                cs = c.stats()
                loc["client"] = {
                    "client_id": cs.client_name,
                    "hostname": cs.hostname,
                    "remote_address": cs.remote_address,
                    "user_agent": cs.user_agent,
                }
            loc["delivered_at"] = (held.delivery_ts + shift) // 1_000_000
            loc["timeout_at"] = (held.pri + shift) // 1_000_000
        else:
            loc["deferred_until"] = (held.pri + shift) // 1_000_000
    else:
        record = held
        loc.update(_record_fields(record))
        if pos is not None and ch.backend is not None:
            loc["file"] = ch.backend.file_name(pos[0])
            loc["offset"] = pos[1]
    return loc, record_body(record)
