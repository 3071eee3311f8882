"""A small asyncio client for etcd v3 over its JSON gateway (``POST /v3/...``), with aiohttp.

Why this and not a client library: aiohttp is already one of nsqpy's dependencies, and etcd 3.4
serves every v3 RPC the coordination layer needs as JSON on its client port (kv/range, kv/put,
kv/deleterange, kv/txn, lease/grant, lease/keepalive, lease/revoke, watch): no gRPC stack, no
generated stubs, nothing that needs a compiler, and native asyncio. aetcd 1.0.0 (asyncio over
gRPC) would add grpcio and protobuf for the same calls; etcd3gw 2.7.0 speaks the same gateway
but synchronously (requests), which would need a thread per call on nsqpy-d's event loop.

What the gateway's JSON looks like (etcd 3.4, proto3 JSON): keys and values are base64; int64s
are decimal strings; fields at their default are left out (a failed txn has no "succeeded", an
empty range no "kvs", an expired lease's keepalive no "TTL"). Streaming RPCs (watch,
keepalive) answer newline-separated JSON objects, each ``{"result": ...}`` or ``{"error": ...}``.

Endpoints are tried in order, starting with the one that answered last; a connection error
(refused, reset), a timeout or a 5xx moves to the next one, and when none answers
:class:`EtcdUnavailable` is raised. An endpoint that failed, or whose call was cancelled
while waiting on it (a caller's own deadline, as the lease keepalive has), is not tried first
by the next call: with an etcd cluster, one member down or hung costs a call at most one
attempt's timeout, whatever the call (kv, txn, lease grant, keepalive, revoke, watch). A watch
whose stream breaks (its member died) reopens on the next endpoint from the next unseen
revision; opening one is bounded by the timeout too (a member that accepts the connection but
never answers is skipped). A member that is alive but cut from its cluster's quorum answers
unary calls with a 5xx after its own request timeout (about 6 s for etcd 3.4's defaults),
which also moves on. A 4xx or a gateway ``{"error"}`` body is an
:class:`EtcdError` (the request was understood and refused: retrying elsewhere won't help).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from .records import ReplicationError, b64, prefix_end, unb64


class EtcdError(ReplicationError):
    """etcd refused a request (4xx, or an error object in the body): ``code`` is etcd's gRPC
    status code when it gave one (e.g. 5 NOT_FOUND for an unknown lease), else -1."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered (connection refused, timeout, 5xx on every endpoint)."""


class WatchCompacted(EtcdError):
    """The watch's start revision was compacted away: resync with a fresh range read.
    ``compact_revision`` is the oldest revision still kept."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"watch start revision compacted (oldest kept {compact_revision})")
        self.compact_revision = compact_revision


@dataclass(frozen=True, slots=True)
class KV:
    """One key as etcd returns it: revisions are etcd's store revisions (int), ``lease`` is the
    lease id it is attached to (0 for none)."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KV:
        return cls(
            key=unb64(obj.get("key")),
            value=unb64(obj.get("value")),
            create_revision=int(obj.get("create_revision", 0)),
            mod_revision=int(obj.get("mod_revision", 0)),
            version=int(obj.get("version", 0)),
            lease=int(obj.get("lease", 0)),
        )


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change seen by a watch: ``kv.value`` is b"" for a delete; ``revision`` is
    kv.mod_revision."""

    deleted: bool
    kv: KV

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


@dataclass(frozen=True, slots=True)
class TxnResult:
    """A transaction's outcome: which branch ran, the store revision after it, and each op's
    response object as the gateway gave it (``{"response_range": {...}}`` and so on)."""

    succeeded: bool
    revision: int
    responses: list[dict[str, Any]]

    def range_kvs(self, index: int) -> list[KV]:
        """The kvs of the ``index``-th response when it is a range (empty when none)."""
        rr = self.responses[index].get("response_range", {})
        return [KV.from_json(kv) for kv in rr.get("kvs", [])]


def _url(endpoint: str) -> str:
    return endpoint if "://" in endpoint else f"http://{endpoint}"


class EtcdClient:
    """``EtcdClient(["127.0.0.1:2379", ...], timeout=5.0)``: the v3 calls the replication layer
    needs. ``timeout`` (seconds) bounds every unary call; watches have no total timeout. Use as an
    async context manager or call :meth:`close`.
    """

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self.endpoints = [_url(e) for e in endpoints]
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._preferred = 0

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _order(self) -> list[int]:
        n = len(self.endpoints)
        return [(self._preferred + i) % n for i in range(n)]

    def _failed(self, i: int) -> None:
        """Endpoint ``i`` failed (or a caller gave up waiting on it): the next call starts
        with the one after it."""
        if self._preferred == i:
            self._preferred = (i + 1) % len(self.endpoints)

    async def call(
        self, path: str, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` and return the decoded JSON (streaming RPCs: their
        first object's "result"). ``timeout`` (seconds, default the client's) bounds each
        endpoint's attempt. Raises EtcdError / EtcdUnavailable as the module says."""
        last: Exception | None = None
        tmo = aiohttp.ClientTimeout(total=self.timeout if timeout is None else timeout)
        for i in self._order():
            try:
                async with self._http().post(
                    f"{self.endpoints[i]}/v3/{path}", json=body, timeout=tmo
                ) as resp:
                    raw = await resp.read()
                    if resp.status >= 500:
                        last = EtcdUnavailable(f"{self.endpoints[i]}: HTTP {resp.status}")
                        self._failed(i)
                        continue
                    self._preferred = i
                    return _decode(raw, resp.status)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                last = exc
                self._failed(i)
            except asyncio.CancelledError:
                self._failed(i)
                raise
        raise EtcdUnavailable(f"no etcd endpoint answered /v3/{path}: {last!r}")

    # --- kv ---

    async def get(self, key: bytes) -> KV | None:
        out = await self.call("kv/range", {"key": b64(key)})
        kvs = out.get("kvs", [])
        return KV.from_json(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: bytes) -> tuple[list[KV], int]:
        """Every key under ``prefix`` (key order) and the store revision they were read at."""
        out = await self.call(
            "kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}
        )
        return [KV.from_json(kv) for kv in out.get("kvs", [])], _revision(out)

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Write ``key``; returns the new store revision."""
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return _revision(await self.call("kv/put", body))

    async def delete(self, key: bytes) -> int:
        """Delete ``key``; returns how many keys went (0 or 1)."""
        return int((await self.call("kv/deleterange", {"key": b64(key)})).get("deleted", 0))

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> TxnResult:
        """One etcd transaction (records.cmp_* / records.op_* build the parts)."""
        out = await self.call(
            "kv/txn", {"compare": compare, "success": success, "failure": failure or []}
        )
        return TxnResult(
            bool(out.get("succeeded", False)), _revision(out), out.get("responses", [])
        )

    # --- leases ---

    async def lease_grant(self, ttl: int) -> tuple[int, int]:
        """A new lease of ``ttl`` seconds: returns (lease id, granted TTL in seconds; etcd may
        raise a TTL below its minimum)."""
        out = await self.call("lease/grant", {"TTL": str(ttl)})
        if out.get("error"):
            raise EtcdError(f"lease grant refused: {out['error']}")
        return int(out["ID"]), int(out.get("TTL", ttl))

    async def lease_keepalive(self, lease: int, timeout: float | None = None) -> int:
        """Renew ``lease`` once; returns the TTL (seconds) it now has, 0 when it has expired or
        was revoked (then it can never be renewed again). ``timeout``: seconds per endpoint
        attempt (:meth:`call`)."""
        out = await self.call("lease/keepalive", {"ID": str(lease)}, timeout)
        return int(out.get("TTL", 0))

    async def lease_revoke(self, lease: int) -> None:
        """Revoke ``lease`` (its keys go at once); an unknown lease is not an error."""
        try:
            await self.call("lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if exc.code != 5 and "not found" not in str(exc):
                raise

    # --- watch ---

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Every change under ``prefix`` from ``start_revision`` on, in revision order, until the
        caller stops iterating. The stream is reopened from the next unseen revision when the
        connection drops (no gap, no repeat); WatchCompacted when that revision is gone;
        EtcdUnavailable when no endpoint answers."""
        next_rev = start_revision
        req = {"create_request": {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}}
        tmo = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout)
        while True:
            opened = False
            for i in self._order():
                req["create_request"]["start_revision"] = str(next_rev)
                try:
                    # the answer's headers within the timeout: etcd answers a watch at once
                    # (its "created" message), a member that never does is skipped
                    resp = await asyncio.wait_for(
                        self._http().post(f"{self.endpoints[i]}/v3/watch", json=req, timeout=tmo),
                        self.timeout,
                    )
                except (TimeoutError, aiohttp.ClientError, OSError):
                    self._failed(i)
                    continue
                try:
                    if resp.status >= 400:
                        self._failed(i)
                        continue
                    opened = True
                    self._preferred = i
                    async for ev in _watch_events(resp):
                        next_rev = ev.revision + 1
                        yield ev
                except (TimeoutError, aiohttp.ClientError, OSError):
                    self._failed(i)  # the stream broke (its member died): the next one
                    continue
                finally:
                    resp.close()
                break
            if not opened:
                raise EtcdUnavailable("no etcd endpoint accepted the watch")


async def _watch_events(resp: aiohttp.ClientResponse) -> AsyncIterator[WatchEvent]:
    """The events of one watch stream: newline-separated JSON objects, split here rather than
    with readline (whose line limit a response carrying many events can pass)."""
    buf = bytearray()
    async for chunk in resp.content.iter_any():
        buf += chunk
        while (nl := buf.find(b"\n")) >= 0:
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            if line.strip():
                for ev in _watch_message(json.loads(line)):
                    yield ev


def _watch_message(obj: dict[str, Any]) -> list[WatchEvent]:
    if "error" in obj:
        err = obj["error"]
        raise EtcdError(f"watch: {err.get('message', err)}", int(err.get("grpc_code") or -1))
    res = obj.get("result", {})
    if res.get("canceled"):
        if int(res.get("compact_revision", 0)):
            raise WatchCompacted(int(res["compact_revision"]))
        raise EtcdError(f"watch canceled: {res.get('cancel_reason', '')}")
    return [
        WatchEvent(ev.get("type") == "DELETE", KV.from_json(ev.get("kv", {})))
        for ev in res.get("events", [])
    ]


def _revision(out: dict[str, Any]) -> int:
    return int(out.get("header", {}).get("revision", 0))


def _decode(raw: bytes, status: int) -> dict[str, Any]:
    try:
        obj = json.loads(raw.splitlines()[0] if raw else b"{}")
    except (ValueError, IndexError) as exc:
        raise EtcdError(f"etcd answered HTTP {status} with non-JSON: {raw[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise EtcdError(f"etcd answered HTTP {status} with a JSON {type(obj).__name__}")
    if "result" in obj and isinstance(obj["result"], dict):
        obj = obj["result"]
    if "error" in obj and isinstance(obj["error"], dict):
        err = obj["error"]
        raise EtcdError(
            str(err.get("message", err)), int(err.get("grpc_code") or err.get("code") or -1)
        )
    if status >= 400:
        raise EtcdError(
            f"HTTP {status}: {obj.get('message', obj.get('error', obj))}",
            int(obj.get("code", -1)),
        )
    return obj
