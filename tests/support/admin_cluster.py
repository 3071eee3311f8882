"""The nsqpy-admin test cluster, shared by tests/daemon/test_admin_api.py and
tests/e2e/test_admin_browser.py: one nsqpy-lookupd and two nsqpy-d on 127.0.0.1 (ephemeral
ports, node ids 101 and 102, broadcasting 127.0.0.1) as a module-scoped ``cluster`` fixture,
nsqpy-admin over it (``admin``, ``admin_over``), and helpers that publish, consume and make dead
letters on it. Every wait polls a condition with a bound."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from nsqpy.testing import NsqAdmin, Nsqd, Nsqlookupd, wait_for
from support.raw_client import RawClient

# nsqpy-admin as its own process (nsqpy.testing's launcher; ``cmd=`` runs Go's nsqadmin instead)
Admin = NsqAdmin


class Cluster:
    """nsqpy-lookupd + two nsqpy-d registered with it (broadcasting 127.0.0.1, node ids 101
    and 102)."""

    def __init__(self) -> None:
        self.lookupd = Nsqlookupd([])
        flags = [
            f"--lookupd-tcp-address={self.lookupd.tcp_address}",
            "--broadcast-address=127.0.0.1",
        ]
        # distinct node ids: nsqpy-lookupd routes GET /message?id= by the ID's node id
        self.nodes = [Nsqd([*flags, f"--node-id={i}"], https=False) for i in (101, 102)]

    def stop(self) -> None:
        for n in self.nodes:
            if n.alive():
                os.kill(n.pid, signal.SIGCONT)
            n.stop()
        self.lookupd.stop()

    def node(self, addr: str) -> Nsqd:
        return next(n for n in self.nodes if n.http_address == addr)

    def wait_registered(self, topic: str, n: int = 2) -> None:
        wait_for(lambda: len(self.lookupd.producers(topic)) == n, 10, what=f"{topic} on {n} nodes")

    def topic_stats(self, node: Nsqd, topic: str) -> dict[str, Any] | None:
        for t in node.stats(topic=topic).get("topics") or []:
            if t["topic_name"] == topic:
                return t
        return None

    def channel_stats(self, node: Nsqd, topic: str, channel: str) -> dict[str, Any] | None:
        t = self.topic_stats(node, topic)
        for c in (t or {}).get("channels") or []:
            if c["channel_name"] == channel:
                return c
        return None


def message_page(admin: Admin, query: str, timeout: float = 60) -> str:
    """nsqpy-admin's /message?<query> page once it names the producer (a row ``dd.producer``).
    The admin under test gives its upstream requests 1 s, and nsqpy-lookupd's first GET
    /message pays for importing its HTTP client and asking the node: on a loaded machine that
    first lookup can take longer, the page then says so, and the next one is fast. Asked again
    until the producer shows; AssertionError with the last page after ``timeout`` s."""
    last = [""]

    def found() -> bool:
        code, body, _ = admin.http("GET", f"/message?{query}")
        last[0] = body.decode()
        return code == 200 and '<dd class="producer">' in last[0]

    try:
        wait_for(found, timeout, 0.5, what="the message page naming its producer")
    except AssertionError as e:
        raise AssertionError(f"{e}; the last page:\n{last[0]}") from None
    return last[0]


def consume(node: Nsqd, topic: str, channel: str, n: int, requeue: int = 0) -> RawClient:
    """Subscribe on ``node`` with a user agent, take ``n`` messages, FIN all but ``requeue``
    of them (those are REQ'd); the connection stays open (the caller closes it)."""
    c = RawClient(node.tcp_port)
    c.identify(user_agent="admin-test/1.0", client_id="tester", hostname="tester-host")
    c.sub(topic, channel, rdy=n)
    ids = [c.read_message(10)[2] for _ in range(n)]
    c.cmd(b"RDY", b"0")  # before any FIN: nothing more is sent, nothing stays in flight
    for i, msg_id in enumerate(ids):
        c.cmd(b"REQ" if i < requeue else b"FIN", msg_id, *([b"0"] if i < requeue else []))
    return c


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


def admin_over(cluster: Cluster, request_timeout: str) -> Iterator[Admin]:
    """An nsqpy-admin over the cluster's lookupd, sampling and refreshing every second; stopped
    (and must exit 0) at the end."""
    a = Admin(
        [
            f"--lookupd-http-address={cluster.lookupd.http_address}",
            f"--http-client-request-timeout={request_timeout}",
            "--sample-interval=1s",
            "--refresh-interval=1s",
        ]
    )
    yield a
    assert a.stop() == 0, a.log()


@pytest.fixture(scope="module", name="admin")
def admin_fixture(cluster: Cluster) -> Iterator[Admin]:
    yield from admin_over(cluster, "1s")


def pub_both(cluster: Cluster, topic: str, n1: int, n2: int) -> None:
    a, b = cluster.nodes
    a.mpub(topic, [b"a%d" % i for i in range(n1)])
    b.mpub(topic, [b"b%d" % i for i in range(n2)])
    cluster.wait_registered(topic)


# ---------------------------------------------------------------------------- CLI


def dead_letter(cluster: Cluster, node: Nsqd, topic: str, channel: str, n: int) -> None:
    """Make ``n`` dead letters of ``topic``/``channel`` on nsqpy-d ``node``: the channel with
    max_attempts=1, ``n`` messages delivered once and REQ'd (each then moves to the
    dead-letter topic)."""
    node.post("/topic/create", topic=topic)
    node.post("/channel/create", topic=topic, channel=channel, max_attempts="1")
    node.mpub(topic, [b"dl-%d" % i for i in range(n)])
    c = RawClient(node.tcp_port)
    try:
        c.sub(topic, channel, rdy=n)
        ids = [c.read_message(10)[2] for _ in range(n)]
        c.cmd(b"RDY", b"0")
        for msg_id in ids:
            c.cmd(b"REQ", msg_id, b"0")

        def counted() -> bool:
            stats = cluster.channel_stats(node, topic, channel) or {}
            return stats.get("dead_letter_count") == n

        wait_for(counted, 10, what=f"{n} dead letters")
    finally:
        c.close()
