"""A backlog of several thousand messages in a channel's memory, larger than
record_queue.PACK: packed into shared buffers when the channel is the topic's only one, kept as
shared objects with two channels. Every message comes out once, in order, with its body and
attempt count, and GET /message?id= finds packed messages in memory."""

from __future__ import annotations

import json
import urllib.parse

from nsqpy.record_queue import PACK

N = 5000
assert N > 2 * PACK  # at least one tail is sealed (packed) before the last records come


def _bodies(tag: bytes, start: int, n: int) -> list[bytes]:
    return [b"%s %06d " % (tag, i) + b"x" * 180 for i in range(start, start + n)]


def _publish(d, topic: str, bodies: list[bytes]) -> None:
    for i in range(0, len(bodies), 500):
        d.mpub(topic, bodies[i : i + 500])


def _drain(c, n: int, fin: bool = True) -> list[tuple[int, bytes, bytes]]:
    """(attempts, id, body) of the next ``n`` messages (FIN'd as they come with ``fin``)."""
    out = []
    while len(out) < n:
        _, attempts, msg_id, body = c.read_message(timeout=10)
        if fin:
            c.cmd(b"FIN", msg_id)
        out.append((attempts, msg_id, body))
    return out


def _state(d, msg_id: bytes) -> tuple[str, int]:
    q = urllib.parse.urlencode({"id": msg_id.decode()})
    code, body, _ = d.http("GET", f"/message?{q}")
    assert code == 200, body
    (loc,) = json.loads(body)["locations"]
    return loc["state"], loc["attempts"]


def test_a_packed_backlog_comes_out_whole_and_in_order(daemon_factory) -> None:
    d = daemon_factory("--mem-queue-size=100000")
    d.post("/topic/create", topic="backlog")
    d.post("/channel/create", topic="backlog", channel="one")
    bodies = _bodies(b"m", 0, N)
    _publish(d, "backlog", bodies)
    d.wait_depth("backlog", N, "one")

    c = d.raw()
    c.sub("backlog", "one", rdy=2500)
    first = _drain(c, 2500, fin=False)
    assert [(a, b) for a, _, b in first] == [(1, b) for b in bodies[:2500]]
    c.rdy(0)
    for _, msg_id, _ in first:  # back to the tail, in this order (fresh records: packed)
        c.cmd(b"REQ", msg_id, b"0")
    d.wait_depth("backlog", N, "one")
    for k in (0, 1, 1000, 2047, 2048, 2049, 2499):
        assert _state(d, first[k][1]) == ("memory", 1)

    c.rdy(2500)
    rest = _drain(c, N)
    assert [(a, b) for a, _, b in rest] == [(1, b) for b in bodies[2500:]] + [
        (2, b) for b in bodies[:2500]
    ]
    assert [m for _, m, _ in rest[2500:]] == [m for _, m, _ in first]
    assert len({m for _, m, _ in rest}) == N
    d.wait_depth("backlog", 0, "one")
    c.close()


def test_two_channels_share_a_backlog_then_one_keeps_it(daemon_factory) -> None:
    d = daemon_factory("--mem-queue-size=100000")
    d.post("/topic/create", topic="shared")
    d.post("/channel/create", topic="shared", channel="one")
    d.post("/channel/create", topic="shared", channel="two")
    bodies = _bodies(b"s", 0, N)
    _publish(d, "shared", bodies)
    d.wait_depth("shared", N, "one")
    d.wait_depth("shared", N, "two")

    two = d.raw()
    two.sub("shared", "two", rdy=2500)
    got_two = _drain(two, N)
    # channel "one" alone holds these now: once sealed, they can be packed
    more = _bodies(b"s", N, N)
    _publish(d, "shared", more)
    got_two += _drain(two, N)
    d.wait_depth("shared", 2 * N, "one")

    one = d.raw()
    one.sub("shared", "one", rdy=2500)
    got_one = _drain(one, 2 * N)
    assert [(a, b) for a, _, b in got_one] == [(1, b) for b in bodies + more]
    assert got_one == got_two  # the same messages (IDs), in the same order
    one.close()
    two.close()
