"""Dead letters (beyond nsqd): --max-attempts and the <topic>.<channel>.dead topic.

A consumer that REQs every message it gets: with --max-attempts=5 each message is delivered
exactly 5 times, then moves (same ID, timestamp and attempts) to ``orders.billing.dead``;
nothing is lost, and the counts show in /stats.
"""

from __future__ import annotations

import collections
import json

from nsqpy import wire
from nsqpy.testing import wait_for


def test_always_req_consumer_dead_letters_after_exactly_max_attempts(daemon_factory) -> None:
    d = daemon_factory("--max-attempts=5")
    count = 50
    c = d.raw()
    c.sub("orders", "billing", rdy=20)
    pub = d.raw()
    for i in range(count):
        pub.pub("orders", b"order %d" % i)
    deliveries: collections.Counter[bytes] = collections.Counter()
    bodies = {}
    while sum(deliveries.values()) < count * 5:
        ts, attempts, msg_id, body = c.read_message(timeout=10)
        deliveries[msg_id] += 1
        assert attempts == deliveries[msg_id]  # attempts counts the deliveries
        bodies[msg_id] = (ts, body)
        c.cmd(b"REQ", msg_id, b"0")
    published = {body for _, body in bodies.values()}
    assert published == {b"order %d" % i for i in range(count)}
    assert set(deliveries.values()) == {5}

    dead = "orders.billing.dead"
    wait_for(lambda: _topic(d, dead) is not None and _topic(d, dead)["depth"] == count)
    ch = _channel(d, "orders", "billing")
    assert (ch["depth"], ch["in_flight_count"], ch["deferred_count"]) == (0, 0, 0)
    # the dead letters keep ID, timestamp, attempts and body
    r = d.raw()
    r.sub(dead, "inspect", rdy=count)
    seen = {}
    for _ in range(count):
        ts, attempts, msg_id, body = r.read_message(timeout=10)
        seen[msg_id] = (ts, attempts, body)
    assert seen == {i: (ts, 6, body) for i, (ts, body) in bodies.items()}
    for c_ in (c, pub, r):
        c_.close()


def _topic(d, name: str) -> dict | None:
    for t in d.stats(topic=name)["topics"] or []:
        if t["topic_name"] == name:
            return t
    return None


def _channel(d, topic: str, channel: str) -> dict:
    t = _topic(d, topic)
    assert t is not None
    for c in t["channels"]:
        if c["channel_name"] == channel:
            return c
    raise AssertionError(f"no channel {channel}")


def test_ephemeral_channels_never_dead_letter(daemon_factory) -> None:
    d = daemon_factory("--max-attempts=1")
    c = d.raw()
    c.sub("t", "tmp#ephemeral", rdy=1)
    d.raw().pub("t", b"x")
    _, attempts, msg_id, _ = c.read_message()
    c.cmd(b"REQ", msg_id, b"0")
    _, attempts2, msg_id2, _ = c.read_message()
    assert (msg_id2, attempts2) == (msg_id, 2)
    wait_for(lambda: "no dead letters" in d.log_text(), what="the warning")  # stderr is async
    c.close()


def test_no_flag_no_change(nsqd) -> None:
    c = nsqd.raw()
    c.sub("t", "c", rdy=1)
    nsqd.raw().pub("t", b"x")
    for n in range(1, 8):
        _, attempts, msg_id, _ = c.read_message()
        assert attempts == n
        c.cmd(b"REQ", msg_id, b"0")
    assert wire.is_valid_name("t.c.dead") and _topic(nsqd, "t.c.dead") is None
    c.close()


def test_per_channel_max_attempts_stats_metrics_and_replay(nsqd) -> None:
    """/channel/create?max_attempts=N (kept in nsqd.dat), the counts in /stats and /metrics, and
    POST /message/replay bringing the dead letters back with a fresh attempt budget."""
    d = nsqd
    d.post("/topic/create", topic="jobs")
    d.post("/channel/create", topic="jobs", channel="work", max_attempts="2")
    d.post("/channel/create", topic="jobs", channel="other")  # no dead letters there
    code, body, _ = d.http("POST", "/channel/create?topic=jobs&channel=x&max_attempts=-1")
    assert (code, body) == (400, b'{"message":"INVALID_MAX_ATTEMPTS"}')
    ephemeral = "/channel/create?topic=jobs&channel=e%23ephemeral&max_attempts=1"
    code, body, _ = d.http("POST", ephemeral)
    assert (code, body) == (400, b'{"message":"INVALID_DEAD_LETTER_TOPIC"}')
    c = d.raw()
    c.sub("jobs", "work", rdy=10)
    d.raw().pub("jobs", b"job-1")
    d.raw().pub("jobs", b"job-2")
    for _ in range(4):  # two deliveries each, every one REQ'd
        _, attempts, msg_id, _ = c.read_message()
        c.cmd(b"REQ", msg_id, b"0")
    wait_for(lambda: _channel(d, "jobs", "work").get("dead_letter_count") == 2)
    work = _channel(d, "jobs", "work")
    assert (work["max_attempts"], work["depth"], work["in_flight_count"]) == (2, 0, 0)
    assert "dead_letter_count" not in _channel(d, "jobs", "other")  # nsqd's shape where off
    metrics = d.http("GET", "/metrics")[1].decode()
    assert 'nsq_channel_dead_lettered_total{channel="work",topic="jobs"} 2.0' in metrics
    dat = d.data_path / "nsqd.dat"
    wait_for(lambda: dat.exists() and '"max_attempts":2' in dat.read_text(), what="nsqd.dat")

    out = json.loads(d.post("/message/replay", topic="jobs", channel="work", count="1"))
    assert out == {"replayed": 1}
    _, attempts, _, body = c.read_message()
    assert attempts == 1 and body in (b"job-1", b"job-2")  # a fresh budget
    out = json.loads(d.post("/message/replay", topic="jobs", channel="work"))
    assert out == {"replayed": 1}
    _, attempts2, _, body2 = c.read_message()
    assert attempts2 == 1 and {body, body2} == {b"job-1", b"job-2"}
    assert _topic(d, "jobs.work.dead")["depth"] == 0
    c.close()
