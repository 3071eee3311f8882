"""GET /message?id= (beyond nsqd): a message looked up while held by its topic, queued in
memory and on disk, in flight, deferred, and finished, on nsqpy-d and through nsqpy-lookupd
across three nodes."""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse

from support.daemons import Daemon

from nsqpy.guid import decode_id
from nsqpy.testing import wait_for


def _find(d, msg_id: bytes | str, **params: str) -> tuple[int, dict]:
    q = urllib.parse.urlencode({"id": msg_id if isinstance(msg_id, str) else msg_id.decode()})
    if params:
        q += "&" + urllib.parse.urlencode(params)
    code, body, _ = d.http("GET", f"/message?{q}")
    return code, json.loads(body)


def _pub_id(d, topic: str, body: bytes) -> bytes:
    """Publish over TCP and learn the ID by consuming on a throw-away ephemeral channel."""
    c = d.raw()
    c.sub(topic, "peek#ephemeral", rdy=1)
    d.raw().pub(topic, body)
    _, _, msg_id, got = c.read_message(timeout=5)
    assert got == body
    c.close()
    return msg_id


def _only(answer: dict, channel: str | None) -> dict:
    locs = [loc for loc in answer["locations"] if loc["channel"] == channel]
    assert len(locs) == 1, answer
    return locs[0]


def test_a_message_through_every_state(daemon_factory) -> None:
    d = daemon_factory("--node-id=77", "--msg-timeout=60s")
    # queued in memory, then in flight, then deferred (REQ with a delay), then finished
    msg_id = _pub_id(d, "orders", b"order 1")
    wait_for(lambda: _find(d, msg_id)[1]["found"] is False, what="ephemeral channel gone")
    code, a = _find(d, msg_id)
    assert code == 200
    dec = decode_id(msg_id)
    assert (a["id"], a["node_id"], a["sequence"]) == (msg_id.decode(), 77, dec.sequence)
    assert a["this_node"] is True and a["timestamp"] == dec.time_ns // 1_000_000
    # the topic had only the ephemeral channel, now gone: the message is nowhere now
    assert a["locations"] == []

    c = d.raw()
    c.sub("orders", "billing", rdy=0)  # the channel exists, nobody ready
    _ids_channel(d, "orders")
    d.raw().pub("orders", b"order 2")
    wait_for(lambda: _channel_depth(d, "orders", "billing") == 1)
    # the ID of order 2: read it from a second channel that saw the same message
    msg_id = _id_via_channel(d, "orders", b"order 2")
    code, a = _find(d, msg_id)
    loc = _only(a, "billing")
    assert (loc["state"], loc["attempts"], loc["body_size"]) == ("memory", 0, 7)
    assert abs(loc["published_at"] - time.time() * 1000) < 60_000

    before = time.time() * 1000
    c.cmd(b"RDY", b"1")
    _, attempts, got_id, body = c.read_message(timeout=5)
    assert (got_id, body, attempts) == (msg_id, b"order 2", 1)
    loc = _only(_find(d, msg_id)[1], "billing")
    assert loc["state"] == "in_flight" and loc["attempts"] == 1
    assert loc["client"]["remote_address"].startswith("127.0.0.1:")
    assert before - 1000 <= loc["delivered_at"] <= time.time() * 1000 + 1000
    assert 59_000 <= loc["timeout_at"] - loc["delivered_at"] <= 60_000

    c.cmd(b"REQ", msg_id, b"600000")
    wait_for(lambda: _only(_find(d, msg_id)[1], "billing")["state"] == "deferred")
    loc = _only(_find(d, msg_id)[1], "billing")
    assert 590_000 <= loc["deferred_until"] - time.time() * 1000 <= 600_000

    # with topic= every channel of the topic is listed; body=1 returns the body
    code, a = _find(d, msg_id, topic="orders", body="1")
    assert {loc["channel"]: loc["state"] for loc in a["locations"]} == {
        "billing": "deferred",
        "ids": "finished_or_unknown",
    }
    assert base64.b64decode(a["body"]) == b"order 2"

    # empty the channel: the message is gone (finished or unknown)
    assert d.http("POST", "/channel/empty?topic=orders&channel=billing")[0] == 200
    a = _find(d, msg_id)[1]
    assert a["found"] is False and a["locations"] == []
    c.close()


def _channel_depth(d, topic: str, channel: str) -> int:
    for t in d.stats(topic=topic)["topics"] or []:
        for ch in t["channels"]:
            if ch["channel_name"] == channel:
                return ch["depth"]
    return -1


def _ids_channel(d, topic: str) -> None:
    """Make channel "ids" (before publishing: it must get its own copy)."""
    assert d.http("POST", f"/topic/create?topic={topic}")[0] == 200
    assert d.http("POST", f"/channel/create?topic={topic}&channel=ids")[0] == 200


def _id_via_channel(d, topic: str, body: bytes) -> bytes:
    """The ID of the queued message ``body``: consumed (and FIN'd) on channel "ids", which got
    its own copy when the message was published (see _ids_channel)."""
    r = d.raw()
    r.sub(topic, "ids", rdy=100)
    while True:
        _, _, msg_id, got = r.read_message(timeout=5)
        r.cmd(b"FIN", msg_id)
        if got == body:
            r.close()
            return msg_id


def test_held_by_the_topic_then_on_disk_then_after_a_restart(tmp_path) -> None:
    data = tmp_path / "data"
    d = Daemon(["--mem-queue-size=0", "--max-bytes-per-file=4096"], data)
    try:
        pub = d.raw()
        for i in range(300):  # many records across many small files
            pub.pub("logs", b"line %03d" % i)
        # no channel yet: the topic holds them, on disk (mem-queue-size=0)
        pub.pub("logs", b"the one")
        wait_for(lambda: d.stats(topic="logs")["topics"][0]["depth"] == 301)
        ids = _ids_from_disk(data, "logs")
        target = ids[b"the one"]
        a = _find(d, target)[1]
        loc = _only(a, None)
        assert loc["state"] == "disk" and loc["topic"] == "logs"
        assert os.path.basename(loc["file"]).startswith("logs.diskqueue.")
        with open(loc["file"], "rb") as f:
            f.seek(loc["offset"] + 4 + 10)
            assert f.read(16) == target
        some = ids[b"line 123"]
        assert _only(_find(d, some)[1], None)["state"] == "disk"
    finally:
        assert d.stop() == 0
    # after a restart the records on disk are found too (indexed once, at the first lookup)
    d = Daemon(["--mem-queue-size=0", "--max-bytes-per-file=4096"], data)
    try:
        for body, msg_id in ((b"the one", target), (b"line 123", some), (b"line 000", None)):
            msg_id = msg_id or ids[body]
            loc = _only(_find(d, msg_id)[1], None)
            assert loc["state"] == "disk", body
        code, a = _find(d, target, body="1")
        assert base64.b64decode(a["body"]) == b"the one"
    finally:
        assert d.stop() == 0


def _ids_from_disk(data, topic: str) -> dict[bytes, bytes]:
    """body -> ID of every record in the topic's diskqueue files (go-diskqueue layout)."""
    out = {}
    for name in sorted(os.listdir(data)):
        if name.startswith(f"{topic}.diskqueue.") and name.endswith(".dat") and "meta" not in name:
            raw = (data / name).read_bytes()
            i = 0
            while i + 4 <= len(raw):
                n = int.from_bytes(raw[i : i + 4], "big")
                rec = raw[i + 4 : i + 4 + n]
                out[rec[26:]] = rec[10:26]
                i += 4 + n
    return out


def test_bad_requests(nsqd) -> None:
    assert nsqd.http("GET", "/message")[0] == 400
    code, body, _ = nsqd.http("GET", "/message?id=xyz")
    assert (code, json.loads(body)) == (400, {"message": "INVALID_ID"})
    code, body, _ = nsqd.http("GET", "/message?id=0123456789abcdef&topic=nope")
    assert (code, json.loads(body)) == (404, {"message": "TOPIC_NOT_FOUND"})
    code, body, _ = nsqd.http("GET", "/message?id=0123456789abcdef")
    assert code == 200 and json.loads(body)["found"] is False


def test_lookupd_routes_by_node_id_across_three_nodes(daemon_factory, lookupd_factory) -> None:
    lk = lookupd_factory()
    nodes = [
        daemon_factory(
            f"--node-id={n}",
            f"--lookupd-tcp-address={lk.tcp_address}",
            "--broadcast-address=127.0.0.1",
        )
        for n in (101, 102, 103)
    ]
    for node in nodes:
        node.raw().sub("events", "audit", rdy=0)
        _ids_channel(node, "events")
    wait_for(lambda: len(lk.get_json("/nodes")["producers"]) == 3, what="three nodes")
    wanted = {}
    for i, node in enumerate(nodes):
        node.raw().pub("events", b"event on node %d" % i)
        wanted[i] = _id_via_channel(node, "events", b"event on node %d" % i)
    for i, node in enumerate(nodes):
        msg_id = wanted[i]
        code, body, _ = lk.http("GET", f"/message?id={msg_id.decode()}&body=1")
        assert code == 200, body
        a = json.loads(body)
        assert a["node_id"] == 101 + i
        assert a["producer"]["http_port"] == node.http_port
        assert a["producer"]["node_id"] == 101 + i
        assert _only(a, "audit")["state"] == "memory"
        assert base64.b64decode(a["body"]) == b"event on node %d" % i
    # one message through its states, seen through the lookupd: in flight, deferred, finished
    node, msg_id = nodes[1], wanted[1]

    def via_lookupd() -> dict:
        code, body, _ = lk.http("GET", f"/message?id={msg_id.decode()}")
        assert code == 200, body
        return json.loads(body)

    c = node.raw()
    c.sub("events", "audit", rdy=1)
    assert c.read_message(timeout=5)[2] == msg_id
    loc = _only(via_lookupd(), "audit")
    assert loc["state"] == "in_flight" and loc["client"]["remote_address"]
    c.cmd(b"REQ", msg_id, b"600000")
    wait_for(lambda: _only(via_lookupd(), "audit")["state"] == "deferred")
    c.close()
    # and another, FIN'd: found nowhere any more
    node, msg_id = nodes[2], wanted[2]
    c = node.raw()
    c.sub("events", "audit", rdy=1)
    assert c.read_message(timeout=5)[2] == msg_id
    c.cmd(b"FIN", msg_id)
    wait_for(lambda: via_lookupd()["found"] is False, what="FIN seen")
    assert via_lookupd()["producer"]["node_id"] == 103
    c.close()
    # an ID whose node id no node has: 404; a bad ID: 400
    stray = "%016x" % ((1 << 22) | (999 << 12))
    code, body, _ = lk.http("GET", f"/message?id={stray}")
    assert (code, json.loads(body)) == (404, {"message": "NODE_NOT_FOUND"})
    assert lk.http("GET", "/message?id=nothex")[0] == 400


def test_two_nodes_with_one_node_id_are_a_configuration_error(
    daemon_factory, lookupd_factory
) -> None:
    lk = lookupd_factory()
    a, b = (
        daemon_factory(
            "--node-id=5",
            f"--lookupd-tcp-address={lk.tcp_address}",
            "--broadcast-address=127.0.0.1",
        )
        for _ in range(2)
    )
    wait_for(lambda: len(lk.get_json("/nodes")["producers"]) == 2, what="two nodes")
    _ids_channel(a, "t")
    a.raw().pub("t", b"x")
    msg_id = _id_via_channel(a, "t", b"x")
    code, body, _ = lk.http("GET", f"/message?id={msg_id.decode()}")
    assert (code, json.loads(body)) == (409, {"message": "CONFLICTING_NODE_ID"})
    wait_for(lambda: "configuration error: node id 5" in lk.log_text(), what="the error logged")
