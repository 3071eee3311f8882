"""nsqpy-admin's view of a replicated topic (the replicas, the ISR,
the leader and the lag): three nsqpy-d nodes joined through a real etcd
(tests/support/etcd_server.py) and one nsqpy-lookupd, nsqpy-admin over the lookupd as its own
process.

- /api/topics/:topic keeps the leader's ``replication`` object on its node row, as the node's
  /stats gives it, and the topic page has a Replication table with the role, the replicas, the
  leader, the in-sync replicas, the epoch and the lag;
- a follower killed -9 leaves the ISR, and the page says so ("2 of 3");
- an R=1 topic's row has no ``replication`` key and its page no Replication table (as
  nsqadmin's).
"""

from __future__ import annotations

import json
import re

import pytest
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
    repl_stats,
)

from nsqpy.testing import NsqAdmin, Nsqlookupd, wait_for

pytestmark = [
    needs_etcd,
    pytest.mark.timeout(120),
]


def _page(admin: NsqAdmin, path: str) -> str:
    code, body, _ = admin.http("GET", path)
    assert code == 200, (path, code, body[:300])
    return body.decode()


def test_admin_shows_leader_isr_epoch_and_lag(cluster: Nodes) -> None:
    lookupd = Nsqlookupd()
    admin = None
    try:
        la = f"--lookupd-tcp-address={lookupd.tcp_address}"
        nodes = [cluster.start(i, la) for i in (61, 62, 63)]
        create(nodes[0], "ledger", 3, nodes)
        leader = cluster.leader("ledger")
        leader.mpub("ledger", [b"a", b"b", b"c"])
        leader.pub("plain", b"x")  # an R=1 topic beside it
        wait_for(lambda: lookupd.producers("ledger"), 10, what="the leader registered")
        wait_for(lambda: lookupd.producers("plain"), 10, what="the R=1 topic registered")
        admin = NsqAdmin([f"--lookupd-http-address={lookupd.http_address}"])

        got = admin.get("/api/topics/ledger")
        (row,) = got["nodes"]
        assert row["node"] == leader.http_address
        own = repl_stats(leader, "ledger")
        assert own is not None
        r = row["replication"]
        assert r["role"] == "leader" and r["leader"] == own["leader"]
        assert sorted(r["isr"]) == ["61", "62", "63"] and r["replicas"] == 3
        assert r["epoch"] == own["epoch"]

        page = _page(admin, "/topics/ledger")
        table = page[page.index('id="replication"') :]
        table = table[: table.index("</table>")]
        assert '<td class="role">leader</td>' in table
        assert f'<td class="leader">node {own["leader"]}</td>' in table
        isr_cell = table[table.index('class="isr"') :].split("</td>")[0]
        assert sorted(re.findall(r"node (\d+)", isr_cell)) == ["61", "62", "63"]
        assert re.search(rf'class="n epoch">\s*{own["epoch"]}<', table)
        assert 'class="n lag"' in table and "of 3" not in table

        # a follower lost: the ISR shrinks, the page shows it
        victim = next(n for n in nodes if n is not leader)
        victim_id = cluster.node_id(victim)
        victim.kill()
        leader.mpub("ledger", [b"d"])
        wait_for(
            lambda: victim_id not in (repl_stats(leader, "ledger") or {}).get("isr", [victim_id]),
            20,
            what="the killed follower out of the isr",
        )
        page = _page(admin, "/topics/ledger")
        assert "2 of 3" in page
        followers = page[page.index('class="followers"') :].split("</td>")[0]
        assert f"node {victim_id}: " in followers and "catching up" in followers
        assert f"node {victim_id}" not in page[page.index('class="isr"') :].split("</td>")[0]

        plain = admin.get("/api/topics/plain")
        assert all("replication" not in n for n in plain["nodes"])
        assert 'id="replication"' not in _page(admin, "/topics/plain")
    finally:
        if admin is not None:
            assert admin.stop() == 0
        lookupd.stop()


def test_admin_changes_replicas_and_reassigns(cluster: Nodes) -> None:
    """The topic page's placement forms (Change R, Reassign: each with a confirmation in the
    browser) and POST /api/topics/:topic {"action": "replicas"|"reassign"} go through a node's
    /topic/replicas and /topic/reassign; the Replication table then shows the new placement."""
    lookupd = Nsqlookupd()
    admin = None
    try:
        la = f"--lookupd-tcp-address={lookupd.tcp_address}"
        nodes = [cluster.start(i, la) for i in (71, 72, 73)]
        nodes[0].post("/topic/create", topic="moved", replicas="2")
        leader = cluster.leader("moved")
        leader.mpub("moved", [b"a", b"b"])
        wait_for(lambda: lookupd.producers("moved"), 10, what="the leader registered")
        admin = NsqAdmin([f"--lookupd-http-address={lookupd.http_address}"])

        page = _page(admin, "/topics/moved")
        forms = page[page.index('id="placement-actions"') :].split("</div>")[0]
        assert 'name="action" value="replicas"' in forms and 'name="replicas"' in forms
        assert 'name="action" value="reassign"' in forms and "data-confirm=" in forms

        # the JSON API: R 2 -> 3
        code, body, _ = admin.http(
            "POST", "/api/topics/moved", {"action": "replicas", "replicas": "3"}
        )
        assert code == 200, body
        rec = json.loads(body)["topic"]
        assert rec["replicas"] == 3 and sorted(rec["placement"]) == ["71", "72", "73"]
        wait_for(
            lambda: len((repl_stats(leader, "moved") or {}).get("isr", [])) == 3,
            30,
            what="R=3 in sync",
        )
        # the page's form: reassign onto two nodes, the leader kept
        own = repl_stats(leader, "moved")
        assert own is not None
        keep = [own["leader"], next(n for n in own["placement"] if n != own["leader"])]
        code, body, headers = admin.http(
            "POST",
            "/topics/moved",
            "action=reassign&nodes=" + ",".join(keep),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert code == 303, body
        assert "placed+on" in headers["Location"] or "placed%20on" in headers["Location"]
        wait_for(
            lambda: (
                sorted((repl_stats(leader, "moved") or {}).get("placement", [])) == sorted(keep)
            ),
            30,
            what="the new placement",
        )
        table = _page(admin, "/topics/moved")
        cell = table[table.index('class="placement"') :].split("</td>")[0]
        assert sorted(re.findall(r"node (\d+)", cell)) == sorted(keep)

        # refused: a bad R, an unknown node, a node list with a hole
        for form in (
            {"action": "replicas", "replicas": "0"},
            {"action": "reassign", "nodes": "71,,72"},
        ):
            code, body, _ = admin.http("POST", "/api/topics/moved", form)
            assert code == 400, (form, body)
        code, body, _ = admin.http(
            "POST", "/api/topics/moved", {"action": "reassign", "nodes": "71,99"}
        )
        assert code == 502 and b"INVALID_NODES" in body, body
    finally:
        if admin is not None:
            assert admin.stop() == 0
        lookupd.stop()
