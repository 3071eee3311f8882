"""Changing a replicated topic's placement under load (replication/placement.py, the
``/topic/replicas``, ``/topic/reassign`` and ``/node/replace`` routes).

Real processes: nsqpy-d nodes on loopback with their own data dirs, a real etcd
(tests/support/etcd_server.py), an nsqlookupd, producers that wait for their acknowledgements (MPUBs
of 20 to any live node, retried on another after an error) and two channels read through the lookupd
(tests/support/replication_cluster.py). Each change is asked of a node while they run; then every
acknowledged message must be delivered on both channels (0 lost), duplicates are printed and
bounded, and the time from the request to the new placement's full ISR is printed (its bound is
wide: the machine is shared).

- R raised from 2 to 3 (the third node chosen as creation chooses), then lowered back to 2
  (a follower dropped, the leader kept);
- a fourth node brought in by a reassignment that also takes the topic off its leader: the
  new node is in the ISR before the leader hands over and leaves;
- a follower killed -9 and replaced on every topic placed on it by ``/node/replace``;
- the same three changes through the ``nsqpy`` tools (topic-replicas, topic-reassign,
  node-replace), and their refusals (exit status 1, the node's error on stderr);
- etcd not answering (SIGSTOP): a change is 503 REPLICATION_FAILED, and taken once it is back.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    History,
    Nodes,
    Producers,
    Readers,
    cluster_fixture,  # noqa: F401 (the fixture)
    repl_stats,
)

from nsqpy.testing.process import Nsqd, Nsqlookupd, wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(240),
]

TOPIC = "placed"
CHANNELS = ["billing", "audit"]
#: A generous bound on the time from a change's request to its full ISR, seconds.
ISR_BOUND = 60.0


@pytest.fixture(name="lookupd")
def lookupd_fixture() -> Iterator[Nsqlookupd]:
    lk = Nsqlookupd()
    try:
        yield lk
    finally:
        lk.stop()


async def post(n: Nsqd, path: str, **params: str) -> tuple[int, Any]:
    """POST ``path?params`` to ``n`` off the event loop (it may wait for the ISR): (status,
    JSON answer or the error text)."""
    q = urllib.parse.urlencode(params)
    code, body, _ = await asyncio.to_thread(n.http, "POST", f"{path}?{q}", b"", None, 120)
    try:
        return code, json.loads(body)
    except ValueError:
        return code, body.decode()


async def until(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``cond`` (run in a thread: it may do HTTP) every 0.1 s until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(_safe, cond)
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _safe(cond: Callable[[], Any]) -> Any:
    try:
        return cond()
    except OSError:
        return None


def stats_of(cluster: Nodes) -> dict[str, dict[str, Any]]:
    """Node id -> its replication stats of TOPIC, for the live nodes that have the record."""
    out = {}
    for i, n in cluster.nodes.items():
        if n.alive():
            r = repl_stats(n, TOPIC)
            if r is not None:
                out[i] = r
    return out


def settled(cluster: Nodes, placement: set[str]) -> bool:
    """Every live node shows ``placement``, and its leader has all of it in the ISR."""
    st = stats_of(cluster)
    leaders = [r for r in st.values() if r["role"] == "leader"]
    return (
        bool(st)
        and all(set(r["placement"]) == placement for r in st.values())
        and len(leaders) == 1
        and set(leaders[0]["isr"]) == placement
    )


class Load:
    """The readers (two channels through the lookupd, created before any publish) and the
    producers (4, MPUBs of 20, paced 10 ms) of one test."""

    def __init__(self, cluster: Nodes, lookupd: Nsqlookupd) -> None:
        self.cluster = cluster
        self.history = History()
        self.readers = Readers(self.history, TOPIC, CHANNELS, [lookupd.http_address], 1)
        self.producers = Producers(
            self.history,
            TOPIC,
            lambda: [n.tcp_address for n in cluster.live()],
            10**7,
            4,
            20,
            200,
            0.01,
        )

    async def start(self, leader: Nsqd) -> None:
        await self.readers.start()

        def channels() -> bool:
            for t in leader.stats(topic=TOPIC).get("topics") or []:
                return set(CHANNELS) <= {c["channel_name"] for c in t.get("channels") or []}
            return False

        await until(channels, 30, "the channels on the leader")
        self.producers.start()
        await self.producers.until(500, 60)

    async def more(self, n: int = 500) -> None:
        await self.producers.until(len(self.history.acked) + n, 60)

    async def finish(self, what: str) -> None:
        """Stop publishing, wait for every acknowledged message on both channels; assert 0
        lost, print the counts, bound the duplicates."""
        try:
            await self.producers.stop(60)
            all_in = await self.readers.wait_all(90)
        finally:
            await self.readers.stop()
        v = self.history.verdict()
        redelivered = sum(r["redelivered"] for r in stats_of(self.cluster).values())
        print(
            f"\n{what}: {v.line()}; producer retries {self.producers.failures}, "
            f"redelivered by promotions {redelivered}"
        )
        if not (all_in and v.ok):
            for i, n in self.cluster.nodes.items():
                tail = [x for x in n.lines if "REPLICATION" in x or "topic" in x][-40:]
                print(f"--- node {i}:\n" + "\n".join(tail))
            for i, r in stats_of(self.cluster).items():
                print(f"stats {i}: {r}")
        assert all_in and v.ok, v.line()
        assert not any(v.lost.values())
        # at-least-once: duplicates come from promotions and resent batches; bounded widely
        assert sum(v.duplicates.values()) <= v.acknowledged, v.line()


def make(cluster: Nodes, n: Nsqd, topic: str, replicas: int) -> None:
    """/topic/create?replicas= on ``n``; then its placement nodes know their roles (the
    others have no copy, so no stats of it)."""
    n.post("/topic/create", topic=topic, replicas=str(replicas))

    def placed() -> bool:
        return sum(repl_stats(m, topic) is not None for m in cluster.live()) >= replicas

    wait_for(placed, 10, what="the record on the placement nodes")


def start_nodes(cluster: Nodes, lookupd: Nsqlookupd, ids: tuple[int, ...]) -> list[Nsqd]:
    return [cluster.start(i, f"--lookupd-tcp-address={lookupd.tcp_address}") for i in ids]


@pytest.mark.asyncio
async def test_replicas_raised_then_lowered_under_load(cluster: Nodes, lookupd: Nsqlookupd) -> None:
    nodes = start_nodes(cluster, lookupd, (11, 12, 13))
    make(cluster, nodes[0], TOPIC, 2)
    leader = cluster.leader(TOPIC)
    first = repl_stats(leader, TOPIC)
    assert first is not None and len(first["placement"]) == 2
    outside = next(n for n in cluster.nodes if n not in first["placement"])
    load = Load(cluster, lookupd)
    await load.start(leader)

    t0 = time.monotonic()
    code, ans = await post(cluster.nodes[outside], "/topic/replicas", topic=TOPIC, replicas="3")
    assert code == 200, ans
    assert ans["replicas"] == 3 and set(ans["placement"]) == set(cluster.nodes)
    assert ans["placement"][:2] == first["placement"] and ans["leader"] == first["leader"]
    await until(lambda: settled(cluster, set(cluster.nodes)), ISR_BOUND, "R=3 on every node")
    raised = time.monotonic() - t0
    await load.more()

    t0 = time.monotonic()
    code, ans = await post(leader, "/topic/replicas", topic=TOPIC, replicas="2")
    assert code == 200, ans
    assert ans["replicas"] == 2 and ans["leader"] == first["leader"]
    assert ans["leader"] in ans["placement"]
    await until(lambda: settled(cluster, set(ans["placement"])), ISR_BOUND, "R=2 again")
    lowered = time.monotonic() - t0
    await load.more()
    await load.finish("R 2 -> 3 -> 2")
    print(f"R raised: full ISR {raised:.2f}s after the request; lowered in {lowered:.2f}s")
    assert raised < ISR_BOUND

    # errors, NSQ-style
    assert (await post(leader, "/topic/replicas", topic=TOPIC, replicas="0"))[0] == 400
    code, ans = await post(leader, "/topic/replicas", topic="nope", replicas="2")
    assert code == 404 and "TOPIC_NOT_FOUND" in str(ans), (code, ans)
    assert (await post(leader, "/topic/replicas", topic=TOPIC, replicas="9"))[0] == 503


@pytest.mark.asyncio
async def test_reassign_to_a_fourth_node_and_off_the_leader(
    cluster: Nodes, lookupd: Nsqlookupd
) -> None:
    nodes = start_nodes(cluster, lookupd, (21, 22, 23, 24))
    make(cluster, nodes[0], TOPIC, 3)
    leader = cluster.leader(TOPIC)
    before = repl_stats(leader, TOPIC)
    assert before is not None
    old_leader = before["leader"]
    fourth = next(n for n in cluster.nodes if n not in before["placement"])
    final = [n for n in before["placement"] if n != old_leader] + [fourth]
    load = Load(cluster, lookupd)
    await load.start(leader)

    t0 = time.monotonic()
    code, ans = await post(
        cluster.nodes[fourth], "/topic/reassign", topic=TOPIC, nodes=",".join(final)
    )
    assert code == 200, ans
    took = time.monotonic() - t0
    assert ans["placement"] == final and ans["replicas"] == 3
    assert ans["leader"] in final and ans["leader"] != fourth  # a staying member took over
    assert ans["epoch"] == before["epoch"] + 1
    await until(lambda: settled(cluster, set(final)), ISR_BOUND, "the new placement in sync")
    full = time.monotonic() - t0
    gone = repl_stats(cluster.nodes[old_leader], TOPIC)
    assert gone is not None and gone["role"] == "none"
    await load.more()
    await load.finish("reassign onto a 4th node, off the leader")
    print(f"reassign: answered {took:.2f}s, full ISR {full:.2f}s after the request")
    assert full < ISR_BOUND

    # errors, NSQ-style
    leader = cluster.leader(TOPIC)
    assert (await post(leader, "/topic/reassign", topic=TOPIC))[0] == 400
    assert (await post(leader, "/topic/reassign", topic=TOPIC, nodes="21,21"))[0] == 400
    assert (await post(leader, "/topic/reassign", topic=TOPIC, nodes="21,99"))[0] == 400
    assert (await post(leader, "/topic/reassign", topic="nope", nodes="21"))[0] == 404


@pytest.mark.asyncio
async def test_dead_node_replaced_on_every_topic(cluster: Nodes, lookupd: Nsqlookupd) -> None:
    nodes = start_nodes(cluster, lookupd, (31, 32, 33, 34))
    make(cluster, nodes[0], TOPIC, 3)
    make(cluster, nodes[0], "other", 2)
    leader = cluster.leader(TOPIC)
    before = repl_stats(leader, TOPIC)
    assert before is not None
    spare = next(n for n in cluster.nodes if n not in before["placement"])
    victim = next(n for n in before["placement"] if n != before["leader"])
    other = repl_stats(leader, "other") or repl_stats(cluster.nodes[spare], "other")
    assert other is not None
    load = Load(cluster, lookupd)
    await load.start(leader)

    cluster.nodes[victim].kill()  # SIGKILL
    await load.more()
    t0 = time.monotonic()
    code, ans = await post(leader, "/node/replace", old=victim, new=spare)
    assert code == 200, ans
    by_topic = {r["topic"]: r for r in ans["topics"]}
    want = [spare if n == victim else n for n in before["placement"]]
    assert by_topic[TOPIC]["placement"] == want
    assert (victim in other["placement"]) == ("other" in by_topic)
    for r in by_topic.values():
        assert victim not in r["placement"]
    await until(lambda: settled(cluster, set(want)), ISR_BOUND, "the replacement in sync")
    full = time.monotonic() - t0
    await load.more()
    await load.finish(f"dead node {victim} replaced by {spare}")
    print(f"node replace: full ISR {full:.2f}s after the request")
    assert full < ISR_BOUND
    assert (await post(leader, "/node/replace", old=victim, new="99"))[0] == 400


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    """``nsqpy <args>`` (python -m nsqpy.tools) as a process; its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "nsqpy.tools", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tools_change_replicas_reassign_and_replace(cluster: Nodes, lookupd: Nsqlookupd) -> None:
    """`nsqpy topic-replicas`, `topic-reassign`, `node-replace` against a node of the cluster:
    one line per topic changed, exit 0; the node's refusal on stderr, exit 1."""
    nodes = start_nodes(cluster, lookupd, (41, 42, 43))
    make(cluster, nodes[0], TOPIC, 2)
    addr = f"--nsqd-http-address={nodes[0].http_address}"

    r = tool("topic-replicas", addr, f"--topic={TOPIC}", "--replicas=3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"topic {TOPIC}: placement ") and "(R=3)" in r.stdout
    wait_for(lambda: settled(cluster, {"41", "42", "43"}), ISR_BOUND, what="R=3 in sync")

    leader = cluster.leader(TOPIC)
    lead = cluster.node_id(leader)
    other = next(i for i in ("41", "42", "43") if i != lead)
    r = tool("topic-reassign", addr, f"--topic={TOPIC}", f"--nodes={lead},{other}")
    assert r.returncode == 0, r.stderr
    assert f"placement {lead},{other} (R=2), leader {lead}" in r.stdout
    wait_for(lambda: settled(cluster, {lead, other}), ISR_BOUND, what="the reassignment")

    spare = next(i for i in ("41", "42", "43") if i not in (lead, other))
    r = tool("node-replace", addr, f"--old={other}", f"--new={spare}")
    assert r.returncode == 0, r.stderr
    assert f"placement {lead},{spare} (R=2)" in r.stdout
    wait_for(lambda: settled(cluster, {lead, spare}), ISR_BOUND, what="the replacement")

    r = tool("topic-reassign", addr, f"--topic={TOPIC}", "--nodes=41,99")
    assert r.returncode == 1 and "400 INVALID_NODES" in r.stderr, (r.stdout, r.stderr)
    r = tool("topic-replicas", addr, "--topic=nope", "--replicas=2")
    assert r.returncode == 1 and "404 TOPIC_NOT_FOUND" in r.stderr, (r.stdout, r.stderr)


def test_no_etcd_quorum_is_503(cluster: Nodes, lookupd: Nsqlookupd, etcd: EtcdServer) -> None:
    """etcd not answering (its process stopped, as a cluster without quorum does not answer):
    a placement change is 503 REPLICATION_FAILED; once etcd is back, it is taken."""
    nodes = start_nodes(cluster, lookupd, (46, 47))
    make(cluster, nodes[0], TOPIC, 2)
    etcd.proc.send_signal(signal.SIGSTOP)
    try:
        path = f"/topic/replicas?topic={TOPIC}&replicas=1"
        code, body, _ = nodes[0].http("POST", path, b"", None, 60)
    finally:
        etcd.proc.send_signal(signal.SIGCONT)
    assert code == 503 and b"REPLICATION_FAILED" in body, (code, body)

    def lowered() -> bool:
        code, body, _ = nodes[0].http("POST", f"/topic/replicas?topic={TOPIC}&replicas=1", b"")
        return code == 200 and json.loads(body)["replicas"] == 1

    wait_for(lowered, 60, interval=1.0, what="the change taken once etcd answers")
