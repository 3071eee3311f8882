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


#: An append's query as read: topic, epoch, prev, reset.
_Query: TypeAlias = tuple[str, int, "str | None", bool]


def _read(q: dict[str, str]) -> _Query | PartAnswer:
    """The append's query, or the answer refusing it."""
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
    return name, epoch, prev, reset


def _failed(name: str, exc: Exception) -> PartAnswer:
    """The answer of an append that raised ``exc`` (re-raised when it is no append error)."""
    if isinstance(exc, ValueError):
        return 400, {"message": "BAD_BODY"}
    if isinstance(exc, StaleEpoch):
        return 409, {"message": "E_STALE_EPOCH"}
    if isinstance(exc, Gap):
        return 409, {"message": f"E_GAP {name_text(exc.last)}"}
    if isinstance(exc, OSError):
        log.error("replica log %s: %s", name, exc)
        return 500, {"message": "E_APPEND_FAILED"}
    raise exc


async def append_part(repl: Replication, q: dict[str, str], body: bytes) -> PartAnswer:
    """One topic's append (query ``q``: topic, epoch, first, prev, reset): (200, {"next",
    "last"[, "dirty"]}) or (status, {"message"})."""
    got = _read(q)
    if len(got) == 2:
        return got
    name, epoch, prev, reset = got
    rlog = repl.replica_log(name)
    try:
        # the body goes into the replica log as it came (ReplicaLog.append_framed)
        return 200, await rlog.request(epoch, body, prev, reset)
    except (ValueError, StaleEpoch, Gap, OSError) as e:
        return _failed(name, e)


async def append_parts(repl: Replication, parts: list[Part]) -> list[PartAnswer]:
    """Every part at once (one topic each: entries.take_parts); their answers in order."""
    if len(parts) == 1:
        return [await append_part(repl, parts[0][0], parts[0][1])]
    return list(await asyncio.gather(*(append_part(repl, q, body) for q, body in parts)))


def append_parts_now(repl: Replication, parts: list[Part]) -> list[PartAnswer] | None:
    """:func:`append_parts` without waiting, when no part has to (each topic's log is
    ReplicaLog.ready_now: no append in progress, answered once written); None, with nothing
    done, otherwise."""
    reads = [_read(q) for q, _ in parts]
    for got in reads:
        if len(got) == 4 and not repl.replica_log(got[0]).ready_now():
            return None
    answers: list[PartAnswer] = []
    for got, (_, body) in zip(reads, parts, strict=True):
        if len(got) == 2:
            answers.append(got)
            continue
        name, epoch, prev, reset = got
        try:
            answers.append((200, repl.replica_log(name).request_now(epoch, body, prev, reset)))
        except (ValueError, StaleEpoch, Gap, OSError) as e:
            answers.append(_failed(name, e))
    return answers
