"""A follower's side of a leader's appends, whatever carried them: one topic's part
(``/replica/append``'s query and body, entries.py) into that topic's replica log, answered with
the HTTP status and JSON object ``/replica/append`` gives; several parts (``/replica/append-many``
or one frame of the replication stream, stream_server.py) all at once, answered in order.

Strategy: the rules live in replica_log.ReplicaLog; this module only reads the query, maps the
append's errors to their answers (400 INVALID_TOPIC / BAD_BODY, 409 E_STALE_EPOCH / E_GAP <last>,
500 E_APPEND_FAILED) and hands the body to the log as it came (ReplicaLog.append_framed), so the
HTTP routes (http_routes.py) and the stream (stream_server.py) answer the same thing for the same
part. Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, TypeAlias

from .. import wire
from .entries import Gap, Part, StaleEpoch, name_text, parse_name

if TYPE_CHECKING:
    from .node import Replication

log = logging.getLogger("nsqpy")

#: A part's answer: the HTTP status /replica/append would give and its JSON object.
PartAnswer: TypeAlias = tuple[int, dict[str, Any]]


async def append_part(repl: Replication, q: dict[str, str], body: bytes) -> PartAnswer:
    """One topic's append (query ``q``: topic, epoch, first, prev, reset): (200, {"next",
    "last"[, "dirty"]}) or (status, {"message"})."""
    name = q.get("topic", "")
    if not wire.is_valid_name(name):
        return 400, {"message": "INVALID_TOPIC"}
    try:
        epoch = int(q.get("epoch", ""))
        int(q.get("first", ""))
        prev, reset = q.get("prev"), q.get("reset") == "1"
        if prev is not None and prev not in ("?", "-"):
            parse_name(prev)
    except ValueError:
        return 400, {"message": "BAD_BODY"}
    if epoch < 0:
        return 400, {"message": "BAD_BODY"}
    rlog = repl.replica_log(name)
    try:
        # the body goes into the replica log as it came (ReplicaLog.append_framed)
        return 200, await rlog.request(epoch, body, prev, reset)
    except ValueError:
        return 400, {"message": "BAD_BODY"}
    except StaleEpoch:
        return 409, {"message": "E_STALE_EPOCH"}
    except Gap as g:
        return 409, {"message": f"E_GAP {name_text(g.last)}"}
    except OSError as e:
        log.error("replica log %s: %s", name, e)
        return 500, {"message": "E_APPEND_FAILED"}


async def append_parts(repl: Replication, parts: list[Part]) -> list[PartAnswer]:
    """Every part at once (one topic each: entries.take_parts); their answers in order."""
    if len(parts) == 1:
        return [await append_part(repl, parts[0][0], parts[0][1])]
    return list(await asyncio.gather(*(append_part(repl, q, body) for q, body in parts)))
