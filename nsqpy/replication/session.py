"""This node's membership: one etcd lease, the node key under it, the keepalive loop, and the
lease deadline that fences a leader (nodes join with leases).

The deadline rule. etcd expires a lease TTL seconds after the keepalive it last *processed*.
That moment is after the moment this node *sent* the keepalive, so ``sent + TTL`` (on this node's
monotonic clock) is never later than the server's expiry, whatever the network delay. The node
keeps ``deadline = sent + TTL * (1 - margin)`` from its last successful keepalive, ``margin``
(0.2 by default) covering clock rate drift and the time between :meth:`may_acknowledge` saying
True and the acknowledgement leaving; ``may_acknowledge()`` is ``now < deadline``. A leader cut off
from etcd therefore stops acknowledging before any other node can be elected in its place,
because an election needs the old lease gone from the server first (coordinator.py).

Keepalives go every TTL/4 seconds (and again at once after a failed one, bounded by a short
backoff), each etcd endpoint given at most max(TTL/4, min(1 s, TTL/2)) before the next one is
tried, so that one etcd member down or hung leaves time to renew through another; a keepalive
answered with TTL 0 means the server expired the lease: the session is then
*lost* for good (``lost`` is set, ``may_acknowledge()`` stays False); :meth:`rejoin` grants a new
lease and writes the node key again, after which the node is a new member (any leadership it had
is gone: its records still name the old lease).

The clock is injected (``clock``, seconds, monotonic) so the deadline arithmetic is unit-tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from ..internal.aiotasks import cancel_and_wait
from .etcd_gateway import EtcdClient, EtcdError
from .records import Keys, NodeInfo, ReplicationError, cmp_absent, op_get, op_put

log = logging.getLogger("nsqpy.replication")


class LeaseClock:
    """The fencing arithmetic alone: ``LeaseClock(ttl, margin, clock)``; :meth:`renewed` with
    the monotonic time the successful keepalive was *sent* and the TTL it granted; ``deadline``
    and :meth:`may_acknowledge` follow. Times are seconds on ``clock``."""

    __slots__ = ("margin", "clock", "deadline", "ttl")

    def __init__(self, margin: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [0, 1): {margin}")
        self.margin = margin
        self.clock = clock
        self.deadline = float("-inf")
        self.ttl = 0

    def renewed(self, sent_at: float, ttl: int) -> None:
        """A keepalive sent at ``sent_at`` came back with ``ttl`` seconds (> 0). The deadline
        only moves forward (an old answer arriving late cannot pull it back, nor push it past
        what a newer one allows, since ``sent_at`` is when that keepalive left)."""
        if ttl <= 0:
            raise ValueError("a lapsed lease is not a renewal")
        self.ttl = ttl
        self.deadline = max(self.deadline, sent_at + ttl * (1.0 - self.margin))

    def expire(self) -> None:
        """The lease is gone: no acknowledgement from now on."""
        self.deadline = float("-inf")

    def remaining(self) -> float:
        """Seconds left before may_acknowledge turns False (negative once past)."""
        return self.deadline - self.clock()

    def may_acknowledge(self) -> bool:
        return self.clock() < self.deadline


class NodeSession:
    """``NodeSession(client, keys, info, ttl=5)``: this node as a member of the cluster.

    :meth:`join` grants the lease (``ttl`` seconds; etcd may raise it to its minimum), writes
    ``keys.node(info.node_id)`` = ``info.encode()`` under it, and starts the keepalive task.
    Raises NodeIdTaken (node id held by a live member under another lease) or EtcdError /
    EtcdUnavailable. :meth:`leave` revokes the lease (the node key goes at once). Properties:
    ``lease_id`` (int, 0 before join), ``lost`` (asyncio.Event set when the server expired the
    lease), ``may_acknowledge()``.
    """

    def __init__(
        self,
        client: EtcdClient,
        keys: Keys,
        info: NodeInfo,
        *,
        ttl: int = 5,
        margin: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.keys = keys
        self.info = info
        self.requested_ttl = ttl
        self.lease_clock = LeaseClock(margin, clock)
        self.lease_id = 0
        self.lost = asyncio.Event()
        self._keepalive: asyncio.Task[None] | None = None

    @property
    def node_id(self) -> str:
        return self.info.node_id

    def may_acknowledge(self) -> bool:
        """True while this node's lease is certainly alive on the server (see the module)."""
        return self.lease_id != 0 and not self.lost.is_set() and self.lease_clock.may_acknowledge()

    def refusal(self) -> str:
        """Why this node cannot vouch for its etcd lease now, in words for a refused publish's
        error ("" when it can): expired on the server, never granted, or not renewed in time
        (etcd's quorum lost, or no member reachable)."""
        if self.lost.is_set():
            return f"etcd lease of node {self.node_id} expired on the server (joining again)"
        if self.lease_id == 0:
            return f"node {self.node_id} holds no etcd lease (etcd unreachable)"
        clk = self.lease_clock
        if not clk.may_acknowledge():
            since = clk.ttl * (1.0 - clk.margin) - clk.remaining()  # since the last renewal
            return (
                f"etcd lease of node {self.node_id} not renewed for {since:.1f}s (etcd quorum "
                "lost or no member reachable): no acknowledgement without a lease"
            )
        return ""

    async def join(self) -> int:
        """Grant a lease, write the node key under it if absent, start keepalives; returns the
        lease id. NodeIdTaken when the key exists (the lease just granted is then revoked)."""
        sent = self.lease_clock.clock()
        lease, ttl = await self.client.lease_grant(self.requested_ttl)
        key = self.keys.node(self.node_id)
        res = await self.client.txn(
            [cmp_absent(key)], [op_put(key, self.info.encode(), lease)], [op_get(key)]
        )
        if not res.succeeded:
            await self.client.lease_revoke(lease)
            held = res.range_kvs(0)
            raise NodeIdTaken(self.node_id, held[0].lease if held else 0)
        self.lease_id = lease
        self.lost = asyncio.Event()
        self.lease_clock.renewed(sent, ttl)
        self._keepalive = asyncio.create_task(self._keepalive_loop(), name=f"lease-{lease}")
        return lease

    async def rejoin(self) -> int:
        """Join again with a new lease (after ``lost``, or to give up a lease this node can no
        longer vouch for): the old lease is revoked first when etcd still has it, so its node
        key does not block the new one."""
        await self.leave()
        return await self.join()

    async def stop_keepalive(self) -> None:
        """Stop renewing the lease without revoking it: the lease then lapses on the server
        after its TTL, exactly as when this node is cut off from etcd or dies."""
        task, self._keepalive = self._keepalive, None
        await cancel_and_wait([task])  # not a bare cancel: wait_for can swallow one (3.11)

    async def leave(self) -> None:
        """A clean exit: stop keepalives and revoke the lease (the node key goes at once)."""
        await self.stop_keepalive()
        lease, self.lease_id = self.lease_id, 0
        self.lease_clock.expire()
        if lease:
            with contextlib.suppress(EtcdError):
                await self.client.lease_revoke(lease)

    async def _keepalive_loop(self) -> None:
        lease = self.lease_id
        clk = self.lease_clock
        backoff = 0.05
        while True:
            interval = max(clk.ttl / 4.0, 0.05)
            attempt = max(interval, min(1.0, clk.ttl / 2.0))  # per endpoint: then the next
            sent = clk.clock()
            try:
                ttl = await asyncio.wait_for(
                    self.client.lease_keepalive(lease, attempt),
                    timeout=max(clk.remaining(), interval),
                )
            except (TimeoutError, EtcdError) as exc:
                log.warning("lease %x keepalive failed: %s", lease, exc)
                await asyncio.sleep(min(backoff, interval))
                backoff = min(backoff * 2, interval)
                continue
            if ttl <= 0:
                log.error("lease %x expired on the server: node %s left", lease, self.node_id)
                clk.expire()
                self.lost.set()
                return
            backoff = 0.05
            clk.renewed(sent, ttl)
            await asyncio.sleep(interval)


class NodeIdTaken(ReplicationError):
    """Another live member holds this node id (its key exists under ``lease``)."""

    def __init__(self, node_id: str, lease: int) -> None:
        super().__init__(f"node id {node_id!r} is held by a live member (lease {lease:x})")
        self.node_id = node_id
        self.lease = lease
