"""The replicated topics' HTTP routes on nsqd's API: installed by server.py with
--etcd-endpoints only (http_api.RouteHook), never imported otherwise.

Strategy: glue, as http_api.py. :func:`install_routes` replaces /pub, /mpub, /topic/create
and /topic/delete with handlers that take a replicated topic (one with a record, or one a first
publish makes: Replication.wants_record) through node.Replication and hand every other request
to nsqd's own handler (http_api.HTTPAPI) unchanged (a replicated publish not acknowledged
is 503 ``PUB_FAILED <why>``, the reason as local.refusal words it); and adds nsqpy's
replica routes:

- ``POST /replica/append?topic=&epoch=&first=[&prev=E:S|-|?][&reset=1]``: a leader's entries
  (entries.py), answered ``{"next": N, "last": "E:S"}`` once written (replica_log.py); 400
  INVALID_TOPIC / BAD_BODY, 409 E_STALE_EPOCH / E_GAP <last>, 500 E_APPEND_FAILED;
- ``POST /replica/append-many``: several topics' appends in one request (entries.py's
  parts, courier.py), each taken as ``/replica/append`` takes it, all at once; answered 200
  ``{"answers": [[status, answer], ...]}`` (one per part, in order, each what
  ``/replica/append`` would have answered), 400 BAD_BODY when the parts do not parse;
- ``POST /replica/progress?topic=&epoch=``: a leader's channel progress (progress.py),
  answered ``{"rounds": N}`` once in the side file; 400 BAD_BODY, 409 E_STALE_EPOCH, 500
  E_PROGRESS_FAILED;
- ``POST /replica/round?topic=``: the leader sends one progress round now (asked before
  leadership moves off it in a placement change), answered ``{"rounds": N}``; 409
  E_NOT_LEADER.

And the placement changes (placement.py), accepted on any node, each answered once done with
the topic's record ``{"topic","replicas","placement","leader","isr","epoch"}`` (``/node/replace``:
``{"topics": [record, ...]}``), each waiting at most ``timeout_ms`` (default 60000) for new
nodes to join the ISR:

- ``POST /topic/replicas?topic=&replicas=N``: R raised (new nodes chosen as at creation) or
  lowered (followers dropped, never the leader);
- ``POST /topic/reassign?topic=&nodes=a,b,c``: the topic placed on those node ids;
- ``POST /node/replace?old=x&new=y``: node y in node x's place in every topic placed on x.

Errors: 400 MISSING_ARG_TOPIC / INVALID_TOPIC / INVALID_REPLICAS / MISSING_ARG_NODES /
INVALID_NODES / INVALID_TIMEOUT, 404 TOPIC_NOT_FOUND (no record), 409 PLACEMENT_CONFLICT (other
writers kept winning), 503 NOT_ENOUGH_NODES, 503 NOT_IN_SYNC (new nodes not in the ISR in time:
the union placement stays; asking again continues), 503 REPLICATION_FAILED (etcd without
quorum or unreachable).

Handlers that wait (for the in-sync replicas, for etcd, for an fsync) return a coroutine; the
HTTP server answers it later without holding anything else up. Design notes:
docs/architecture-replication.md."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from .. import wire
from ..http_api import HTTPAPI
from ..internal.http.request import Request
from ..internal.http.router import Router
from ..internal.http.v1 import NsqHTTPError, api
from ..topic import TopicError
from . import local
from .appends import append_part, append_parts
from .coordinator import Contended, TopicMissing, TopicState
from .entries import MAX_REQUEST_BYTES, StaleEpoch, decode_parts
from .node import Replication
from .placement import NotInSync, PlacementChanges, PlacementError, parse_nodes
from .records import NotEnoughNodes, ReplicationError, TopicRecord
from .role import LEADER

#: Default wait for new nodes to join the ISR in a placement change, milliseconds.
PLACEMENT_TIMEOUT_MS = 60_000

log = logging.getLogger("nsqpy")

T = TypeVar("T")


def install_routes(router: Router, h: HTTPAPI, repl: Replication) -> None:
    """Put the replicated topics' routes into nsqd's ``router`` (see the module docstring);
    ``h`` is nsqd's API, whose handlers take every request that is not replication's."""
    routes = ReplicaRoutes(h, repl)
    opts = repl.opts

    def msg_size() -> int:
        return opts.max_msg_size

    def body_size() -> int:
        return opts.max_body_size

    def append_size() -> int:
        return MAX_REQUEST_BYTES + opts.max_msg_size + 1024

    # every route here is a POST answered as nsqd's JSON API (v1.api); some read a body
    for path, handler, limit in (
        ("/pub", routes.pub, msg_size),
        ("/mpub", routes.mpub, body_size),
        ("/topic/create", routes.topic_create, None),
        ("/topic/delete", routes.topic_delete, None),
        ("/replica/append", routes.replica_append, append_size),
        ("/replica/append-many", routes.replica_append_many, append_size),
        ("/replica/progress", routes.replica_progress, append_size),
        ("/replica/round", routes.replica_round, None),
        ("/topic/replicas", routes.topic_replicas, None),
        ("/topic/reassign", routes.topic_reassign, None),
        ("/node/replace", routes.node_replace, None),
    ):
        router.post(path, api(handler), limit)


class ReplicaRoutes:
    """The handlers (module docstring); ``h``: nsqd's own, ``repl``: this node's replication."""

    def __init__(self, h: HTTPAPI, repl: Replication) -> None:
        self.h = h
        self.repl = repl

    def _replicated_topic(self, name: str) -> bool:
        repl = self.repl
        return name in repl.topics or (wire.is_valid_name(name) and repl.wants_record(name))

    def pub(self, request: Request) -> Any:
        """/pub: a topic with a record (or to get one) goes through Replication.publish_http
        (node.py), any other through nsqd's handler unchanged."""
        h = self.h
        q = h.query(request)
        name = q.get("topic", "")
        if not self._replicated_topic(name):
            return h.pub(request)
        body = h.body_within(request, self.repl.opts.max_msg_size, "MSG_TOO_BIG")
        if not body:
            raise NsqHTTPError(400, "MSG_EMPTY")
        return self._publish(name, [body], h.defer_ms(q), "PUB_FAILED")

    def mpub(self, request: Request) -> Any:
        h = self.h
        q = h.query(request)
        name = q.get("topic", "")
        if not self._replicated_topic(name):
            return h.mpub(request)
        limit = self.repl.opts.max_body_size
        if request.content_length is not None and request.content_length > limit:
            raise NsqHTTPError(413, "BODY_TOO_BIG")
        return self._publish(name, h.mpub_bodies(q, request), 0, "MPUB_FAILED")

    async def _publish(self, name: str, bodies: list[bytes], delay: int, failed: str) -> Any:
        try:
            ok = await self.repl.publish_http(name, bodies, delay)
        except TopicError:
            raise NsqHTTPError(503, "EXITING") from None
        except (ReplicationError, TimeoutError, OSError) as e:
            log.error("replicated publish to %s failed: %s", name, e)
            raise NsqHTTPError(503, failed) from None
        if not ok:
            repl = self.repl
            why = local.refusal(
                repl.session, repl.coordinator, repl.topics.get(name), name, repl.opts.min_isr
            )
            raise NsqHTTPError(503, f"{failed} {why}")
        return "OK"

    def _replica_query(self, request: Request) -> tuple[dict[str, str], str, int]:
        """The query, topic and epoch of a /replica/* request: 400 INVALID_TOPIC for a bad
        topic name, 400 BAD_BODY for an epoch that is not an integer."""
        q = self.h.query(request)
        name = q.get("topic", "")
        if not wire.is_valid_name(name):
            raise NsqHTTPError(400, "INVALID_TOPIC")
        try:
            return q, name, int(q.get("epoch", ""))
        except ValueError:
            raise NsqHTTPError(400, "BAD_BODY") from None

    def replica_append(self, request: Request) -> Any:
        """POST /replica/append (module docstring; appends.append_part)."""
        q, _, _ = self._replica_query(request)

        async def append() -> Any:
            status, answer = await append_part(self.repl, q, request.body)
            if status != 200:
                raise NsqHTTPError(status, str(answer["message"]))
            return answer

        return append()

    def replica_append_many(self, request: Request) -> Any:
        """POST /replica/append-many (module docstring): each part as /replica/append would
        take it, the topics' appends at once; ``{"answers": [[status, answer], ...]}``."""
        try:
            parts = decode_parts(request.body)
        except (ValueError, UnicodeDecodeError):
            raise NsqHTTPError(400, "BAD_BODY") from None

        async def append_all() -> Any:
            answers = await append_parts(self.repl, parts)
            return {"answers": [[status, answer] for status, answer in answers]}

        return append_all()

    def replica_progress(self, request: Request) -> Any:
        """POST /replica/progress (module docstring)."""
        _, name, epoch = self._replica_query(request)
        body = request.body

        async def keep() -> Any:
            try:
                rounds = await self.repl.progress_received(name, epoch, body)
            except ValueError:
                raise NsqHTTPError(400, "BAD_BODY") from None
            except StaleEpoch:
                raise NsqHTTPError(409, "E_STALE_EPOCH") from None
            except OSError as e:
                log.error("progress of %s: %s", name, e)
                raise NsqHTTPError(500, "E_PROGRESS_FAILED") from None
            return {"rounds": rounds}

        return keep()

    def replica_round(self, request: Request) -> Any:
        """POST /replica/round (module docstring)."""
        name = self.h.query(request).get("topic", "")
        if not wire.is_valid_name(name):
            raise NsqHTTPError(400, "INVALID_TOPIC")

        async def run() -> Any:
            try:
                rounds = await self._leader_round(name)
            except TimeoutError:
                raise NsqHTTPError(503, "E_PROGRESS_FAILED") from None
            if rounds is None:
                raise NsqHTTPError(409, "E_NOT_LEADER")
            return {"rounds": rounds}

        return run()

    def topic_create(self, request: Request) -> Any:
        """/topic/create?topic=T&replicas=R: R > 1 makes T replicated (503 REPLICATION_FAILED
        when etcd refuses); R = 1 is a plain topic, kept R=1 on this node; without
        ``replicas``, nsqd's handler."""
        h = self.h
        q = h.query(request)
        if "replicas" not in q:
            return h.topic_create(request)
        replicas = h.replicas_arg(q)
        repl = self.repl
        if replicas == 1:
            if q.get("topic") not in repl.topics:
                repl.local_only.add(q.get("topic", ""))
            _, topic = h.topic_from_query(request)
            return h.once_started(topic, lambda: None)
        if "topic" not in q:
            raise NsqHTTPError(400, "MISSING_ARG_TOPIC")
        name = q["topic"]
        if not wire.is_valid_name(name) or name.endswith("#ephemeral"):
            raise NsqHTTPError(400, "INVALID_TOPIC")

        async def create() -> Any:
            try:
                await repl.ensure(name, replicas)
            except (ReplicationError, TimeoutError, OSError) as e:
                log.error("replicated topic %s: %s", name, e)
                raise NsqHTTPError(503, f"REPLICATION_FAILED {e}") from None
            return None

        return create()

    def topic_delete(self, request: Request) -> Any:
        """POST /topic/delete?topic=: a replicated topic goes on every node: its record is
        deleted from etcd (503 REPLICATION_FAILED when etcd cannot be reached) and each node
        drops its copy and replica log; any other topic through nsqd's handler."""
        q = self.h.query(request)
        name = q.get("topic")
        if name is None or name not in self.repl.topics:
            return self.h.topic_delete(request)
        return self._delete(name)

    async def _delete(self, name: str) -> None:
        try:
            await self.repl.delete_topic(name)
        except (ReplicationError, OSError) as e:
            raise NsqHTTPError(503, f"REPLICATION_FAILED {e}") from None

    # ------------------------------------------------------------ placement changes

    def _changes(self, q: dict[str, str]) -> tuple[PlacementChanges, float]:
        """The changer of this node's cluster and the request's wait in seconds: 400
        INVALID_TIMEOUT for a ``timeout_ms`` that is not a positive integer, 503
        REPLICATION_FAILED before this node joined etcd."""
        try:
            ms = int(q.get("timeout_ms", PLACEMENT_TIMEOUT_MS))
        except ValueError:
            raise NsqHTTPError(400, "INVALID_TIMEOUT") from None
        if ms <= 0:
            raise NsqHTTPError(400, "INVALID_TIMEOUT")
        c = self.repl.coordinator
        if c is None:
            raise NsqHTTPError(503, "REPLICATION_FAILED not joined")
        return PlacementChanges(c, self._handover_round), ms / 1000.0

    async def _handover_round(self, rec: TopicRecord) -> None:
        """Before leadership moves off ``rec.leader``: that leader sends one progress round
        (here, or through its POST /replica/round); a failure is logged (the next leader
        then has the older rounds only: more redelivered)."""
        repl = self.repl
        try:
            if rec.leader != repl.node_id:
                await repl.rounds.ask_leader(rec.leader, rec.topic)
            elif await self._leader_round(rec.topic) is None:
                raise OSError("not leading here")
        except (OSError, TimeoutError) as exc:
            log.warning("topic %s: progress before the handover: %s", rec.topic, exc)

    async def _leader_round(self, topic: str) -> int | None:
        """One progress round of ``topic`` now; the rounds sent so far, None when this node
        does not lead it. TimeoutError."""
        tr = self.repl.topics.get(topic)
        if tr is None or tr.role != LEADER:
            return None
        await asyncio.wait_for(self.repl.rounds.round(tr), self.repl.timeout * 2)
        return tr.progress_sent

    def _topic_arg(self, q: dict[str, str]) -> str:
        if "topic" not in q:
            raise NsqHTTPError(400, "MISSING_ARG_TOPIC")
        name = q["topic"]
        if not wire.is_valid_name(name):
            raise NsqHTTPError(400, "INVALID_TOPIC")
        return name

    def topic_replicas(self, request: Request) -> Any:
        """POST /topic/replicas?topic=&replicas=N (module docstring)."""
        q = self.h.query(request)
        name = self._topic_arg(q)
        if "replicas" not in q:
            raise NsqHTTPError(400, "INVALID_REPLICAS")
        replicas = self.h.replicas_arg(q)
        changes, timeout = self._changes(q)
        return _placement_answer(changes.set_replicas(name, replicas, timeout))

    def topic_reassign(self, request: Request) -> Any:
        """POST /topic/reassign?topic=&nodes=a,b,c (module docstring)."""
        q = self.h.query(request)
        name = self._topic_arg(q)
        if "nodes" not in q:
            raise NsqHTTPError(400, "MISSING_ARG_NODES")
        try:
            nodes = parse_nodes(q["nodes"])
        except PlacementError as e:
            raise NsqHTTPError(400, e.code) from None
        changes, timeout = self._changes(q)
        return _placement_answer(changes.reassign(name, nodes, timeout))

    def node_replace(self, request: Request) -> Any:
        """POST /node/replace?old=x&new=y (module docstring)."""
        q = self.h.query(request)
        try:
            old, new = parse_nodes(q.get("old", "")), parse_nodes(q.get("new", ""))
        except PlacementError as e:
            raise NsqHTTPError(400, e.code) from None
        if len(old) != 1 or len(new) != 1:
            raise NsqHTTPError(400, "INVALID_NODES")
        changes, timeout = self._changes(q)

        async def replace() -> Any:
            states = await _placement_errors(changes.replace_node(old[0], new[0], timeout))
            return {"topics": [record_answer(st) for st in states]}

        return replace()


def record_answer(state: TopicState) -> dict[str, Any]:
    """A topic record as a placement change answers it."""
    rec = state.record
    return {
        "topic": rec.topic,
        "replicas": rec.replicas,
        "placement": list(rec.placement),
        "leader": rec.leader,
        "isr": list(rec.isr),
        "epoch": rec.epoch,
    }


async def _placement_answer(change: Awaitable[TopicState]) -> dict[str, Any]:
    return record_answer(await _placement_errors(change))


async def _placement_errors(change: Awaitable[T]) -> T:
    """``change``'s result, its errors as the module docstring answers them."""
    try:
        return await change
    except PlacementError as e:
        raise NsqHTTPError(400, e.code) from None
    except TopicMissing:
        raise NsqHTTPError(404, "TOPIC_NOT_FOUND") from None
    except Contended:
        raise NsqHTTPError(409, "PLACEMENT_CONFLICT") from None
    except NotEnoughNodes:
        raise NsqHTTPError(503, "NOT_ENOUGH_NODES") from None
    except NotInSync as e:
        log.warning("placement change: %s", e)
        raise NsqHTTPError(503, "NOT_IN_SYNC") from None
    except (ReplicationError, TimeoutError, OSError) as e:
        log.error("placement change: %s", e)
        raise NsqHTTPError(503, "REPLICATION_FAILED") from None
