"""nsqpy-admin: nsqadmin's JSON API and pages against a real cluster: one nsqpy-lookupd and two
nsqpy-d on 127.0.0.1 (ephemeral ports), the admin as its own process (``python -m nsqpy.admin``,
nsqpy.testing's NsqAdmin), checked against the daemons' own /stats. Clusterinfo's aggregation,
the history and the options are checked in process in tests/unit/test_admin_units.py.

The cluster is module-scoped (starting processes is the slow part on a 2-core machine); every
test that changes the cluster uses its own topic. Every wait polls a condition with a bound.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from support.admin_cluster import (  # noqa: F401 (cluster_fixture, admin_fixture: the fixtures)
    Admin,
    Cluster,
    admin_fixture,
    admin_over,
    cluster_fixture,
    consume,
    dead_letter,
    message_page,
    pub_both,
)
from support.daemons import DAEMON_CWD
from support.raw_client import RawClient

from nsqpy import guid
from nsqpy.internal.clusterinfo import types as ci
from nsqpy.testing import Nsqd, wait_for

# the cluster, the admin and their helpers: tests/support/admin_cluster.py (shared with the
# browser tests)


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nsqpy.admin", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=DAEMON_CWD,
    )


def test_cli_version_and_refusals() -> None:
    r = _run_cli("-version")
    assert r.returncode == 0 and r.stdout.startswith("nsqadmin v1.3.0 (built w/nsqpy-")
    r = _run_cli("--http-address=127.0.0.1:0")
    assert (
        r.returncode == 1 and "--nsqd-http-address or --lookupd-http-address required" in r.stderr
    )
    assert "[nsqadmin] " in r.stderr
    r = _run_cli("--graphite-url=http://g")
    assert r.returncode == 2 and "does not implement" in r.stderr


def test_config_file_and_go_flags(tmp_path: Path, cluster: Cluster) -> None:
    cfg = tmp_path / "admin.toml"
    cfg.write_text(
        f'nsqd_http_addresses = ["{cluster.nodes[0].http_address}"]\n'
        'admin_users = ["carol"]\nacl_http_header = "X-User"\n'
    )
    a = Admin(["-config", str(cfg), "-log-level", "info"])
    try:
        assert a.get("/config/admin_users") == ["carol"]
        assert a.get("/config/nsqd_http_addresses") == [cluster.nodes[0].http_address]
        assert a.get("/config/http_client_request_timeout") == 5_000_000_000
        assert a.get("/config/log_level") == 2
        code, body, _ = a.http("PUT", "/config/log_level", "warn")
        assert code == 200 and json.loads(body) == 3
        code, body, _ = a.http("POST", "/api/topics/x", {"action": "pause"}, {"X-User": "dave"})
        assert code == 403 and json.loads(body) == {"message": "FORBIDDEN"}
        assert a.http("GET", "/ping")[1] == b"OK"
    finally:
        assert a.stop() == 0


# ---------------------------------------------------------------------------- API vs /stats


def test_api_topic_and_channel_match_daemon_stats(cluster: Cluster, admin: Admin) -> None:
    topic = "api_shapes"
    pub_both(cluster, topic, 30, 20)
    n1, n2 = cluster.nodes
    n1.post("/channel/create", topic=topic, channel="idle")
    n2.post("/channel/create", topic=topic, channel="idle")
    for n in cluster.nodes:
        n.post("/channel/create", topic=topic, channel="work")
    n1.mpub(topic, [b"x"] * 10)
    n2.mpub(topic, [b"y"] * 6)
    client = consume(n1, topic, "work", 5, requeue=2)
    try:
        wait_for(lambda: cluster.channel_stats(n1, topic, "work")["requeue_count"] == 2, 10)
        assert topic in admin.get("/api/topics")["topics"]

        got = admin.get(f"/api/topics/{topic}")
        assert got["message"] == "" and got["node"] == "*" and got["topic_name"] == topic
        stats = [cluster.topic_stats(n, topic) for n in cluster.nodes]
        assert got["depth"] == sum(s["depth"] for s in stats)
        assert got["message_count"] == sum(s["message_count"] for s in stats) == 66
        assert {r["node"] for r in got["nodes"]} == {n1.http_address, n2.http_address}
        for row in got["nodes"]:
            own = cluster.topic_stats(cluster.node(row["node"]), topic)
            assert row["depth"] == own["depth"] and row["message_count"] == own["message_count"]
            assert row["memory_depth"] == own["depth"] - own["backend_depth"]
        assert sorted(c["channel_name"] for c in got["channels"]) == ["idle", "work"]

        ch = admin.get(f"/api/topics/{topic}/work")
        assert list(ch)[:17] == [
            "node", "hostname", "topic_name", "channel_name", "depth", "memory_depth",
            "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
            "timeout_count", "message_count", "client_count", "nodes", "clients", "paused",
            "e2e_processing_latency",
        ]  # fmt: skip
        assert list(ch)[-1] == "message"
        own = [cluster.channel_stats(n, topic, "work") for n in cluster.nodes]
        for key in ("depth", "in_flight_count", "requeue_count", "message_count", "client_count"):
            assert ch[key] == sum(o[key] for o in own), key
        assert ch["requeue_count"] == 2 and ch["client_count"] == 1
        (cl,) = ch["clients"]
        assert cl["node"] == n1.http_address
        assert cl["user_agent"] == "admin-test/1.0" and cl["hostname"] == "tester-host"
        assert cl["finish_count"] == 3 and cl["requeue_count"] == 2 and cl["ready_count"] == 0
        assert cl["tls"] is False and cl["connected"] >= 0
        assert list(cl)[:8] == [
            "node", "remote_address", "version", "client_id", "hostname", "user_agent",
            "connect_ts", "connected",
        ]  # fmt: skip
    finally:
        client.close()


def test_api_nodes_node_and_counter(cluster: Cluster, admin: Admin) -> None:
    topic = "api_nodes"
    pub_both(cluster, topic, 3, 4)
    for n in cluster.nodes:
        n.post("/channel/create", topic=topic, channel="c")
    n1 = cluster.nodes[0]
    nodes = admin.get("/api/nodes")
    assert nodes["message"] == ""
    addrs = {ci.http_address(p): p for p in nodes["nodes"]}
    assert set(addrs) >= {n.http_address for n in cluster.nodes}
    p1 = addrs[n1.http_address]
    assert p1["version"] == "1.3.0" and p1["tcp_port"] == n1.tcp_port
    assert p1["remote_addresses"][0].startswith(cluster.lookupd.http_address + "/")
    assert {"topic": topic, "tombstoned": False} in p1["topics"]

    node = admin.get(f"/api/nodes/{n1.http_address}")
    own = n1.stats()
    assert node["node"] == n1.http_address
    assert node["total_messages"] == sum(t["message_count"] for t in own["topics"])
    assert sorted(t["topic_name"] for t in node["topics"]) == sorted(
        t["topic_name"] for t in own["topics"]
    )
    code, body, _ = admin.http("GET", "/api/nodes/127.0.0.1:1")
    assert code == 404 and json.loads(body) == {"message": "NODE_NOT_FOUND"}
    # the node page shows nsqpy-d's Prometheus node-wide samples
    code, page, _ = admin.http("GET", f"/nodes/{n1.http_address}")
    m = re.search(rb'<dd data-metric="nsq_topics">([\d.]+)</dd>', page)
    assert code == 200 and m and int(float(m.group(1))) == len(own["topics"])

    counter = admin.get("/api/counter")
    for n in cluster.nodes:
        for t in n.stats()["topics"]:
            for c in t["channels"]:
                key = f"{t['topic_name']}:{c['channel_name']}:{n.http_address}"
                assert counter["stats"][key]["message_count"] == c["message_count"], key


def test_api_unknown_topic_is_upstream_error_like_nsqadmin(admin: Admin) -> None:
    code, body, headers = admin.http("GET", "/api/topics/never_seen")
    assert code == 502 and json.loads(body)["message"].startswith("UPSTREAM_ERROR: ")
    assert headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    code, body, _ = admin.http("POST", "/api/topics/x", {"action": "explode"})
    assert code == 400 and json.loads(body) == {"message": "INVALID_ACTION"}
    code, body, _ = admin.http("POST", "/api/topics", {"topic": "bad topic!"})
    assert code == 400 and json.loads(body) == {"message": "INVALID_TOPIC"}
    code, _, headers = admin.http("PUT", "/api/counter")
    assert code == 405 and "GET" in headers["Allow"]


# ---------------------------------------------------------------------------- actions


def test_api_pause_empty_delete_reach_every_producer(cluster: Cluster, admin: Admin) -> None:
    topic = "api_actions"
    pub_both(cluster, topic, 5, 5)
    for n in cluster.nodes:
        n.post("/channel/create", topic=topic, channel="c")
        n.post("/channel/create", topic=topic, channel="gone")
    cluster.nodes[0].mpub(topic, [b"m"] * 4)

    def post(path: str, body: dict[str, Any]) -> None:
        code, out, _ = admin.http("POST", path, body)
        assert code == 200 and json.loads(out) == {"message": ""}, out

    post(f"/api/topics/{topic}", {"action": "pause"})
    assert all(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
    post(f"/api/topics/{topic}", {"action": "unpause"})
    assert not any(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
    post(f"/api/topics/{topic}/c", {"action": "pause"})
    assert all(cluster.channel_stats(n, topic, "c")["paused"] for n in cluster.nodes)
    assert admin.get(f"/api/topics/{topic}/c")["paused"] is True
    assert cluster.channel_stats(cluster.nodes[0], topic, "c")["depth"] >= 4
    post(f"/api/topics/{topic}/c", {"action": "empty"})
    assert all(cluster.channel_stats(n, topic, "c")["depth"] == 0 for n in cluster.nodes)
    post(f"/api/topics/{topic}", {"action": "empty"})
    assert all(cluster.topic_stats(n, topic)["depth"] == 0 for n in cluster.nodes)

    code, out, _ = admin.http("DELETE", f"/api/topics/{topic}/gone")
    assert code == 200, out
    assert all(cluster.channel_stats(n, topic, "gone") is None for n in cluster.nodes)
    assert cluster.channel_stats(cluster.nodes[1], topic, "c") is not None
    code, out, _ = admin.http("DELETE", f"/api/topics/{topic}")
    assert code == 200, out
    assert all(cluster.topic_stats(n, topic) is None for n in cluster.nodes)
    wait_for(lambda: topic not in admin.get("/api/topics")["topics"], 10, what="topic gone")


def test_api_create_topic_and_channel_through_lookupd(cluster: Cluster, admin: Admin) -> None:
    code, out, _ = admin.http("POST", "/api/topics", {"topic": "api_created", "channel": "ch"})
    assert code == 200 and json.loads(out) == {"message": ""}
    assert "api_created" in admin.get("/api/topics")["topics"]
    lk = cluster.lookupd.get_json("/channels?topic=api_created")
    assert lk["channels"] == ["ch"]
    inactive = admin.get("/api/topics?inactive=true")["topics"]
    assert inactive["api_created"] == ["ch"]


class _Sink(http.server.BaseHTTPRequestHandler):
    events: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        self.events.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a: Any) -> None:
        pass


def test_acl_refuses_non_admin_and_notifies_admin_actions(cluster: Cluster) -> None:
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    a = Admin(
        [
            f"--lookupd-http-address={cluster.lookupd.http_address}",
            "--admin-user=alice",
            "--admin-user=bob",
            f"--notification-http-endpoint=http://127.0.0.1:{sink.server_port}/audit",
        ]
    )
    topic = "api_acl"
    try:
        pub_both(cluster, topic, 2, 2)
        for n in cluster.nodes:
            n.post("/channel/create", topic=topic, channel="c")
        # the topics copy what they hold into the new channel: wait for that before the picture
        wait_for(
            lambda: all(cluster.topic_stats(n, topic)["depth"] == 0 for n in cluster.nodes),
            what="the topics' messages in their channel",
        )
        before = [cluster.topic_stats(n, topic) for n in cluster.nodes]
        for method, path, body in (
            ("POST", f"/api/topics/{topic}", {"action": "pause"}),
            ("POST", f"/api/topics/{topic}", {"action": "empty"}),
            ("POST", f"/api/topics/{topic}/c", {"action": "pause"}),
            ("DELETE", f"/api/topics/{topic}/c", None),
            ("DELETE", f"/api/topics/{topic}", None),
            ("POST", "/api/topics", {"topic": "acl_new"}),
            ("DELETE", f"/api/nodes/{cluster.nodes[0].http_address}", {"topic": topic}),
        ):
            for hdrs in ({}, {"X-Forwarded-User": "mallory"}):
                code, out, _ = a.http(method, path, body, hdrs)
                assert code == 403 and json.loads(out) == {"message": "FORBIDDEN"}, (path, out)
        # the HTML forms go through the same check
        code, out, _ = a.http("POST", f"/topics/{topic}", "action=delete")
        assert code == 403 and b"FORBIDDEN" in out
        after = [cluster.topic_stats(n, topic) for n in cluster.nodes]
        assert [(t["depth"], t["paused"], len(t["channels"])) for t in after] == [
            (t["depth"], t["paused"], len(t["channels"])) for t in before
        ]
        assert "acl_new" not in a.get("/api/topics")["topics"]
        assert _Sink.events == []

        code, out, _ = a.http(
            "POST",
            f"/api/topics/{topic}/c",
            {"action": "pause"},
            {"X-Forwarded-User": "bob", "Authorization": "Basic Ym9iOnNlY3JldA=="},
        )
        assert code == 200, out
        assert all(cluster.channel_stats(n, topic, "c")["paused"] for n in cluster.nodes)
        wait_for(lambda: _Sink.events, 10, what="audit event")
        ev = _Sink.events[0]
        assert list(ev) == [
            "action", "topic", "channel", "timestamp", "user", "remote_ip", "user_agent", "url",
            "via",
        ]  # fmt: skip
        assert (ev["action"], ev["topic"], ev["channel"], ev["user"]) == (
            "pause_channel", topic, "c", "bob",
        )  # fmt: skip
        assert ev["url"] == f"http://127.0.0.1:{a.port}/api/topics/{topic}/c"
        assert abs(ev["timestamp"] - time.time()) < 60
    finally:
        sink.shutdown()
        assert a.stop() == 0, a.log()


# ---------------------------------------------------------------------------- a node stops


def test_stopped_node_is_an_error_on_its_row(cluster: Cluster, admin: Admin) -> None:
    topic = "api_sigstop"
    pub_both(cluster, topic, 6, 9)
    for n in cluster.nodes:
        n.post("/channel/create", topic=topic, channel="c")
    n1, n2 = cluster.nodes
    # the topics hand their messages to the new channel first: depths stay put from here on
    for n in cluster.nodes:
        wait_for(lambda n=n: (cluster.topic_stats(n, topic) or {}).get("depth") == 0, 10)
    os.kill(n1.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        got = admin.get(f"/api/topics/{topic}")
        elapsed = time.monotonic() - started
        assert elapsed < 8, elapsed  # the 1 s request timeout, not a hang
        assert got["message"].startswith("WARNING: ") and n1.http_address in got["message"]
        assert [r["node"] for r in got["nodes"]] == [n2.http_address]
        own = cluster.topic_stats(n2, topic)
        assert got["depth"] == own["depth"] and got["message_count"] == 9

        code, page, _ = admin.http("GET", f"/topics/{urllib.parse.quote(topic)}")
        assert code == 200
        text = page.decode()
        row = re.search(r'<tr class="node-error">(.*?)</tr>', text, re.S)
        assert row and n1.http_address in row.group(1) and "deadline" in row.group(1)
        assert f'data-node="{n2.http_address}"' in text

        counter = admin.get("/api/counter")
        assert n1.http_address in counter["message"]
        assert f"{topic}:c:{n2.http_address}" in counter["stats"]
        code, page, _ = admin.http("GET", "/nodes")
        assert code == 200 and b'class="node-error"' in page
    finally:
        os.kill(n1.pid, signal.SIGCONT)
    wait_for(lambda: admin.get(f"/api/topics/{topic}")["message"] == "", 15, what="node back")


def test_pages_render_without_javascript(cluster: Cluster, admin: Admin) -> None:
    topic = "api_pages"
    pub_both(cluster, topic, 1, 1)
    n1 = cluster.nodes[0]
    for path in (
        "/",
        "/topics",
        f"/topics/{topic}",
        f"/topics/{topic}/nochannel",
        "/nodes",
        f"/nodes/{n1.http_address}",
        "/lookup",
        "/counter",
        "/static/admin.css",
        "/static/admin.js",
    ):
        code, body, _ = admin.http("GET", path)
        assert code == 200, (path, body[:300])
    code, body, _ = admin.http("GET", "/nodes/127.0.0.1:1")
    assert code == 404 and b"NODE_NOT_FOUND" in body
    # a form from another site is refused; the admin's own form works and redirects back
    code, _, _ = admin.http(
        "POST", f"/topics/{topic}", "action=pause", {"Origin": "http://evil.example"}
    )
    assert code == 403
    assert not cluster.topic_stats(n1, topic)["paused"]
    code, _, headers = admin.http("POST", f"/topics/{topic}", "action=pause", {"Origin": admin.url})
    assert code == 303 and headers["Location"].startswith(f"/topics/{topic}?notice=")
    assert all(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
    code, _, headers = admin.http("POST", "/lookup", "topic=page_made&channel=pc")
    assert code == 303
    assert cluster.lookupd.get_json("/channels?topic=page_made")["channels"] == ["pc"]


def test_tombstone_node_for_topic(cluster: Cluster, admin: Admin) -> None:
    topic = "api_tombstone"
    pub_both(cluster, topic, 1, 1)
    n1, n2 = cluster.nodes
    code, out, _ = admin.http("DELETE", f"/api/nodes/{n1.http_address}", {"topic": topic})
    assert code == 200 and json.loads(out) == {"message": ""}, out
    assert cluster.topic_stats(n1, topic) is None  # deleted on the node itself
    assert cluster.topic_stats(n2, topic) is not None
    wait_for(
        lambda: [p["http_port"] for p in cluster.lookupd.producers(topic)] == [n2.http_port],
        10,
        what="only n2 produces the topic",
    )
    code, out, _ = admin.http("DELETE", f"/api/nodes/{n1.http_address}", "not json")
    assert code == 400 and json.loads(out) == {"message": "INVALID_BODY"}
    code, out, _ = admin.http("DELETE", f"/api/nodes/{n1.http_address}", {"topic": "a b"})
    assert code == 400 and json.loads(out) == {"message": "INVALID_TOPIC"}


def test_nsqd_addresses_without_lookupd_and_base_path(cluster: Cluster) -> None:
    """--nsqd-http-address (twice) instead of lookupd, under --base-path=/admin."""
    topic = "api_direct"
    pub_both(cluster, topic, 3, 5)
    n1, n2 = cluster.nodes
    a = Admin(
        [
            f"--nsqd-http-address={n1.http_address}",
            f"-nsqd-http-address={n2.http_address}",
            "--base-path=admin",
        ]
    )
    try:
        assert topic in a.get("/admin/api/topics")["topics"]
        got = a.get(f"/admin/api/topics/{topic}")
        assert got["message_count"] == 8 and len(got["nodes"]) == 2
        nodes = a.get("/admin/api/nodes")["nodes"]
        assert {ci.http_address(p) for p in nodes} == {n1.http_address, n2.http_address}
        assert all(p["remote_addresses"] is None for p in nodes)
        code, out, _ = a.http("POST", f"/admin/api/topics/{topic}", {"action": "pause"})
        assert code == 200, out
        assert all(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
        code, page, _ = a.http("GET", f"/admin/topics/{topic}")
        assert code == 200 and b'href="/admin/static/admin.css"' in page
        assert f'href="/admin/nodes/{n1.http_address.replace(":", "%3A")}"'.encode() in page
        assert a.http("GET", "/admin/static/admin.js")[0] == 200
        assert a.http("GET", "/api/topics")[0] == 404
        code, _, headers = a.http("GET", "/admin/topics/")
        assert code == 301 and headers["Location"] == "/admin/topics"
        code, _, headers = a.http("POST", f"/admin/topics/{topic}", "action=unpause")
        assert code == 303 and headers["Location"].startswith(f"/admin/topics/{topic}?")
        assert not any(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
    finally:
        assert a.stop() == 0, a.log()


def test_dead_letters_counts_replay_acl_and_audit(cluster: Cluster) -> None:
    """nsqpy-d's dead letters: the counts in the API and on the pages, the replay action
    (POST /api/topics/:topic/:channel {"action": "replay"}) behind the ACL, with its audit
    event."""
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    _Sink.events = []
    a = Admin(
        [
            f"--lookupd-http-address={cluster.lookupd.http_address}",
            "--admin-user=alice",
            f"--notification-http-endpoint=http://127.0.0.1:{sink.server_port}/audit",
        ]
    )
    topic, dead = "api_dlq", "api_dlq.work.dead"
    n1, n2 = cluster.nodes
    try:
        dead_letter(cluster, n1, topic, "work", 3)
        dead_letter(cluster, n2, topic, "work", 2)
        cluster.wait_registered(dead)
        ch = a.get(f"/api/topics/{topic}/work")
        assert (ch["max_attempts"], ch["dead_letter_count"], ch["depth"]) == (1, 5, 0)
        assert sorted(r["dead_letter_count"] for r in ch["nodes"]) == [2, 3]
        assert list(ch)[-3:] == ["max_attempts", "dead_letter_count", "message"]

        code, page, _ = a.http("GET", f"/topics/{topic}")
        row = re.search(rb'<tr data-channel="work">(.*?)</tr>', page, re.S)
        assert row, page
        assert re.search(rb'class="dead-count"[^>]*>5<', row.group(1))
        assert re.search(
            rb'class="dead-waiting" href="/topics/api_dlq.work.dead"[^>]*>5 to', row.group(1)
        )
        code, page, _ = a.http("GET", f"/topics/{topic}/work")
        assert code == 200 and b'<dd class="dead-count">5</dd>' in page
        assert re.search(
            rb'<dd class="dead-waiting"><a href="/topics/api_dlq.work.dead">5</a>', page
        )

        for hdrs in ({}, {"X-Forwarded-User": "mallory"}):
            code, out, _ = a.http("POST", f"/api/topics/{topic}/work", {"action": "replay"}, hdrs)
            assert code == 403 and json.loads(out) == {"message": "FORBIDDEN"}
        assert [cluster.topic_stats(n, dead)["depth"] for n in (n1, n2)] == [3, 2]
        assert _Sink.events == []

        alice = {"X-Forwarded-User": "alice"}
        code, out, _ = a.http("POST", f"/api/topics/{topic}", {"action": "replay"}, alice)
        assert code == 400 and json.loads(out) == {"message": "INVALID_ACTION"}
        code, out, _ = a.http("POST", f"/api/topics/{topic}/work", {"action": "replay"}, alice)
        assert code == 200 and json.loads(out) == {"message": "", "replayed": 5}, out
        assert [cluster.topic_stats(n, dead)["depth"] for n in (n1, n2)] == [0, 0]
        assert [cluster.channel_stats(n, topic, "work")["depth"] for n in (n1, n2)] == [3, 2]
        wait_for(lambda: _Sink.events, 10, what="audit event")
        ev = _Sink.events[0]
        assert (ev["action"], ev["topic"], ev["channel"]) == ("replay_channel", topic, "work")
        # the form: nothing left to replay, the button is disabled; a replay answers 0
        code, page, _ = a.http("GET", f"/topics/{topic}/work", headers=alice)
        assert re.search(rb'<form method="post" class="replay"[^>]*>.*?<button disabled>', page)
        code, _, headers = a.http("POST", f"/topics/{topic}/work", "action=replay", alice)
        assert code == 303 and "0+replayed" in headers["Location"], headers
    finally:
        sink.shutdown()
        assert a.stop() == 0, a.log()


def test_no_lookupd_answers_is_a_page_with_the_error_not_a_blank_one() -> None:
    a = Admin(["--lookupd-http-address=127.0.0.1:1", "--http-client-connect-timeout=1s"])
    try:
        code, body, _ = a.http("GET", "/api/topics")
        message = json.loads(body)["message"]
        assert code == 502 and message.startswith("UPSTREAM_ERROR: failed to query any nsqlookupd")
        assert "127.0.0.1:1" in message and "connection refused" in message
        for path in ("/topics", "/nodes", "/lookup", "/counter"):
            code, page, _ = a.http("GET", path)
            assert code in (200, 502) and b'class="warning"' in page, path
            assert b"connection refused" in page, path
    finally:
        assert a.stop() == 0, a.log()


# ---------------------------------------------------------------------------- HTTPS retry


def test_https_retry_for_a_tls_required_nsqd(tmp_path: Path) -> None:
    """Go's http_api.Client: nsqd with --tls-required answers its plain HTTP listener 403
    {"message": "TLS_REQUIRED", "https_port": N}; the admin asks again at https://host:N,
    for reads (GETV1) and actions (POSTV1)."""
    import ssl

    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    ca_file, cert, key = (str(tmp_path / n) for n in ("ca.pem", "server.pem", "server.key"))
    ca.cert_pem.write_to_path(ca_file)
    server.cert_chain_pems[0].write_to_path(cert)
    server.private_key_pem.write_to_path(key)
    tls = [f"--tls-cert={cert}", f"--tls-key={key}", "--tls-required=true"]
    node = Nsqd([*tls, "--broadcast-address=127.0.0.1"])
    try:
        code, body, _ = node.http("GET", "/stats?format=json")
        assert code == 403 and json.loads(body) == {
            "message": "TLS_REQUIRED",
            "https_port": node.https_port,
        }
        ctx = ssl.create_default_context(cafile=ca_file)

        def https(method: str, path: str) -> Any:
            req = urllib.request.Request(
                f"https://127.0.0.1:{node.https_port}{path}", method=method
            )
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return json.loads(r.read() or b"null")

        https("POST", "/topic/create?topic=secure")
        https("POST", "/channel/create?topic=secure&channel=c")
        a = Admin(
            [
                f"--nsqd-http-address={node.http_address}",
                f"--http-client-tls-root-ca-file={ca_file}",
            ]
        )
        try:
            got = a.get("/api/topics")
            assert got == {"topics": ["secure"], "message": ""}
            (p,) = a.get("/api/nodes")["nodes"]
            assert ci.http_address(p) == node.http_address  # the plain address, as in Go
            code, out, _ = a.http("POST", "/api/topics/secure/c", {"action": "pause"})
            assert code == 200 and json.loads(out) == {"message": ""}, out
            (t,) = https("GET", "/stats?format=json&topic=secure")["topics"]
            assert t["channels"][0]["paused"] is True
            assert a.get("/api/topics/secure/c")["paused"] is True
        finally:
            assert a.stop() == 0, a.log()
        # without the CA the https retry fails, and the error says where it went
        a = Admin([f"--nsqd-http-address={node.http_address}"])
        try:
            code, out, _ = a.http("GET", "/api/topics")
            message = json.loads(out)["message"]
            assert code == 502 and f"https://127.0.0.1:{node.https_port}/stats" in message
        finally:
            assert a.stop() == 0, a.log()
    finally:
        node.stop()


# ---------------------------------------------------------------------------- where is message X?


def _message_page(a: Admin, query: str) -> tuple[int, str]:
    code, body, _ = a.http("GET", f"/message?{query}")
    return code, body.decode()


def _locations(page: str) -> dict[str, str]:
    """channel ("" for the topic) -> state, from the locations table."""
    rows = re.findall(r'<tr data-state="(\w+)" data-channel="([^"]*)">', page)
    return {channel: state for state, channel in rows}


def test_message_search_through_lookupd_and_nsqds(cluster: Cluster, admin: Admin) -> None:
    """The header's search box: GET /message?id= asks nsqpy-lookupd (which routes by the ID's
    node id) or, with only --nsqd-http-address, every nsqd; the page shows the ID decoded, the
    node that made it and where the message is (in flight to a consumer, queued in memory)."""
    topic = "api_find"
    n1, n2 = cluster.nodes
    for n in cluster.nodes:
        n.post("/topic/create", topic=topic)
        for ch in ("work", "audit"):
            n.post("/channel/create", topic=topic, channel=ch)
    n2.pub(topic, b"decoy")
    n1.pub(topic, "find me \u2603".encode())
    c = RawClient(n1.tcp_port)
    c.identify(user_agent="finder/1.0", client_id="finder", hostname="finder-host")
    c.sub(topic, "work", rdy=1)
    _, attempts, msg_id, body = c.read_message(10)
    mid = msg_id.decode()
    try:
        assert body == "find me \u2603".encode() and attempts == 1
        page = message_page(admin, f"id={mid}&body=1")
        assert '<dd class="node-id">101</dd>' in page
        producer = re.search(r'<dd class="producer">(.*?)</dd>', page)
        assert producer is not None and n1.http_address in producer.group(1), page
        assert f"via lookupd {cluster.lookupd.http_address}" in page
        locs = _locations(page)
        assert locs == {"work": "in_flight", "audit": "memory"}, locs
        row = re.search(r'<tr data-state="in_flight".*?</tr>', page, re.S).group(0)
        assert "finder/1.0" in row and "127.0.0.1:" in row
        assert '<pre class="body" id="message-body">find me \u2603</pre>' in page
        # the search box is on every page, the ID kept in it on the result page
        code, topics_page = _message_page(admin, "")
        assert code == 200 and 'name="id"' in topics_page
        assert f'name="id" value="{mid}"' in page

        # with only --nsqd-http-address: every nsqd asked at once
        a = Admin(
            [f"--nsqd-http-address={n1.http_address}", f"--nsqd-http-address={n2.http_address}"]
        )
        try:
            code, page = _message_page(a, f"id={mid}")
            assert code == 200 and _locations(page) == {"work": "in_flight", "audit": "memory"}
            assert "via lookupd" not in page and n1.http_address in page
            c.cmd(b"FIN", msg_id)
            wait_for(
                lambda: _locations(_message_page(a, f"id={mid}")[1]) == {"audit": "memory"},
                10,
                what="FIN seen",
            )
        finally:
            assert a.stop() == 0, a.log()
    finally:
        c.close()
    # an ID no node made (node id 7) and one that is not an ID
    keep = ~((1 << guid.TIMESTAMP_SHIFT) - 1)
    other = f"{(int(mid, 16) & keep) | (7 << guid.NODE_ID_SHIFT):016x}"
    code, page = _message_page(admin, f"id={other}")
    assert code == 200 and 'id="not-found"' in page and "NODE_NOT_FOUND" in page
    code, page = _message_page(admin, "id=xyz")
    assert code == 400 and "INVALID_ID" in page and "16 hex digits" in page
