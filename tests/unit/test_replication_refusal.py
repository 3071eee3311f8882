"""The words of a refused replicated publish about this node's etcd lease
(session.NodeSession.refusal), on an injected clock: none while the lease is certain, the
lost quorum named once its deadline passed, the expiry once the server said so."""

from __future__ import annotations

import asyncio

from nsqpy.replication import EtcdClient, Keys, NodeInfo, NodeSession, default_root


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_repl_refusal_names_the_lease() -> None:
    clk = _Clock()
    client = EtcdClient(["127.0.0.1:1"])  # never called: refusal reads the session only
    s = NodeSession(client, Keys(default_root("u")), NodeInfo("n7"), ttl=5, clock=clk)
    assert "holds no etcd lease" in s.refusal()
    s.lease_id = 0x1F
    s.lease_clock.renewed(sent_at=100.0, ttl=5)
    clk.now = 103.0
    assert s.refusal() == "" and s.may_acknowledge()
    clk.now = 104.5  # 0.5 s past 100 + 5 * 0.8, 4.5 s since the renewal was sent
    why = s.refusal()
    assert "etcd lease of node n7 not renewed for 4.5s" in why
    assert "quorum lost" in why and "no acknowledgement without a lease" in why
    s.lost = asyncio.Event()
    s.lost.set()
    assert "expired on the server" in s.refusal()
