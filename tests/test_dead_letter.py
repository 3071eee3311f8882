"""Dead letters (beyond nsqd): --max-attempts and the <topic>.<channel>.dead topic.

A consumer that REQs every message it gets: with --max-attempts=5 each message is delivered
exactly 5 times, then moves (same ID, timestamp and attempts) to ``orders.billing.dead``;
nothing is lost, and the counts show in /stats.
"""

from __future__ import annotations

import collections

from conftest import wait_for

from nsqpy import wire


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
    assert "no dead letters" in d.log_text()
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
