"""The ``nsq_replication_*`` families of GET /metrics on a 3-node replicated topic: real
nsqpy-d nodes joined through a real etcd (tests/support/etcd_server.py,
tests/support/replication_cluster.py).

On the leader and on the followers the families show the record (replicas, ISR, epoch,
--min-isr) and each node's part; the leader alone has the per-follower lag. A follower stopped
(SIGSTOP) leaves the ISR and its lag in entries and in seconds grows, and a publish refused
for --min-isr is counted; the leader killed, the survivors count the failover and the new
leader's epoch is later. promtool accepts the scrape. Waits are bounded polls on the scrape.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
)

from nsqpy.client import Producer
from nsqpy.client.conn import NSQError
from nsqpy.replication.metrics import NAMES
from nsqpy.testing.process import Nsqd, wait_for

pytestmark = [needs_etcd, pytest.mark.timeout(120)]


def scrape_text(n: Nsqd) -> str:
    code, body, _ = n.http("GET", "/metrics")
    assert code == 200, body
    return body.decode()


def scrape(n: Nsqd) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of the nsq_replication_* samples."""
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(scrape_text(n)):
        for s in fam.samples:
            if s.name.startswith("nsq_replication_"):
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def topic_values(m: dict[str, dict[tuple, float]], topic: str) -> dict[str, float]:
    """{family without the prefix: value} of ``topic``'s per-topic samples."""
    key = (("topic", topic),)
    return {k[len("nsq_replication_") :]: v[key] for k, v in m.items() if key in v}


def follower_values(m: dict[str, dict[tuple, float]], topic: str, family: str) -> dict:
    return {
        dict(k)["follower"]: v
        for k, v in m.get(f"nsq_replication_follower_{family}", {}).items()
        if dict(k)["topic"] == topic
    }


@pytest.mark.asyncio
async def test_replication_metrics_on_leader_and_followers(cluster: Nodes) -> None:
    nodes = [cluster.start(i, "--min-isr=3") for i in (81, 82, 83)]
    create(nodes[0], "rm", 3, nodes)
    leader = cluster.leader("rm")
    followers = [n for n in nodes if n is not leader]
    fids = sorted(cluster.node_id(f) for f in followers)
    p = Producer(leader.tcp_address)
    await p.multi_publish("rm", [b"m%d" % i for i in range(10)])

    def caught_up() -> dict | None:
        m = scrape(leader)
        return m if set(follower_values(m, "rm", "lag_entries").values()) == {0} else None

    m = wait_for(caught_up, 15, what="followers caught up")
    assert set(m) == NAMES  # every family the alert rules may read, and no other
    t = topic_values(m, "rm")
    assert t["replicas"] == 3 and t["isr"] == 3 and t["min_isr"] == 3
    assert t["is_leader"] == 1 and t["in_isr"] == 1 and t["epoch"] == 1
    assert t["min_isr_refused_total"] == 0 and t["failovers_total"] == 0
    assert sorted(follower_values(m, "rm", "lag_entries")) == fids
    assert set(follower_values(m, "rm", "in_isr").values()) == {1}
    assert set(follower_values(m, "rm", "lag_seconds").values()) == {0}
    for f in followers:
        fm = scrape(f)
        ft = topic_values(fm, "rm")
        assert ft["is_leader"] == 0 and ft["in_isr"] == 1 and ft["isr"] == 3
        assert ft["replica_log_depth"] == 10 and ft["epoch"] == 1
        assert follower_values(fm, "rm", "lag_entries") == {}  # the leader's view only

    # a follower stopped: out of the ISR, behind in entries and in seconds; a publish is
    # refused for --min-isr and counted
    stopped = followers[0]
    sid = cluster.node_id(stopped)
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        with pytest.raises(NSQError):
            await asyncio.wait_for(p.publish("rm", b"refused"), 15)

        def dropped() -> dict | None:
            m = scrape(leader)
            return m if topic_values(m, "rm")["isr"] == 2 else None

        m = wait_for(dropped, 15, what="ISR without the stopped follower")
        t = topic_values(m, "rm")
        assert t["min_isr_refused_total"] >= 1 and t["isr"] < t["min_isr"]
        assert follower_values(m, "rm", "in_isr")[sid] == 0
        assert follower_values(m, "rm", "lag_entries")[sid] >= 1
        assert follower_values(m, "rm", "lag_seconds")[sid] > 0
        text = scrape_text(leader)
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    await p.stop()
    if shutil.which("promtool"):
        r = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: topic_values(scrape(leader), "rm")["isr"] == 3, 20, what="re-admission")

    # the leader killed: a survivor leads in a later epoch and both count the failover
    leader.kill()  # SIGKILL
    new = cluster.leader("rm", followers)
    m = scrape(new)
    t = topic_values(m, "rm")
    assert t["is_leader"] == 1 and t["epoch"] >= 2 and t["failovers_total"] >= 1
    for f in followers:
        wait_for(
            lambda f=f: topic_values(scrape(f), "rm")["failovers_total"] >= 1,
            15,
            what="failover counted",
        )


def test_no_replication_families_without_etcd(nsqd) -> None:
    assert nsqd.http("POST", "/pub?topic=plain", b"x")[0] == 200
    assert "nsq_replication_" not in scrape_text(nsqd)
