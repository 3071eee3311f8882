"""A large MPUB is put in slices, one per loop pass, and other clients are served in between.

An MPUB of a million one-byte messages (nsqd's --max-body-size allows it) is put
protocol_v2.MPUB_SLICE messages at a time. Shown by the order of events, not by timing: /stats
sees the topic part way through the batch, a PUB from another client sent after that is
answered before the MPUB's OK, and in the end every message is in; messages published across
the slices reach a consumer in their order.
"""

from __future__ import annotations

import struct
import threading

import pytest

from nsqpy import wire
from nsqpy.protocol_v2 import MPUB_SLICE

pytestmark = pytest.mark.timeout(180)

SIZE = struct.Struct(">I")


def _mpub(topic: bytes, bodies: list[bytes]) -> bytes:
    body = SIZE.pack(len(bodies)) + b"".join(SIZE.pack(len(b)) + b for b in bodies)
    return b"MPUB " + topic + b"\n" + SIZE.pack(len(body)) + body


def _message_count(nsqd, topic: str) -> int:
    for t in nsqd.stats(topic=topic)["topics"] or []:
        if t["topic_name"] == topic:
            return int(t["message_count"])
    return 0


def test_other_clients_answered_while_a_large_mpub_is_put(nsqd) -> None:
    n = 1_000_000
    big = nsqd.raw(timeout=120)
    polite = nsqd.raw(timeout=60)
    answered: list[str] = []
    big_done = threading.Event()

    def publish_big() -> None:
        big.send(_mpub(b"sliced", [b"x"] * n))
        assert big.read_non_heartbeat() == (wire.FRAME_TYPE_RESPONSE, b"OK")
        answered.append("MPUB")
        big_done.set()

    t = threading.Thread(target=publish_big, daemon=True)
    t.start()
    seen_part = None
    while not big_done.is_set():
        count = _message_count(nsqd, "sliced")
        if 0 < count < n:
            seen_part = count
            break
    assert seen_part is not None, "the MPUB was never seen part way through"
    polite.pub("other", b"hello")
    answered.append("PUB")
    t.join(120)
    assert answered == ["PUB", "MPUB"]
    assert _message_count(nsqd, "sliced") == n
    big.close()
    polite.close()


def test_a_sliced_mpub_keeps_its_order(nsqd) -> None:
    n = 2 * MPUB_SLICE + 7
    consumer = nsqd.raw(timeout=30)
    consumer.sub("ordered", "ch", rdy=2500)
    pub = nsqd.raw(timeout=30)
    pub.send(_mpub(b"ordered", [b"%d" % i for i in range(n)]))
    pub.expect_response()
    got = []
    while len(got) < n:
        _, _, msg_id, body = consumer.read_message()
        got.append(int(body))
        consumer.cmd(b"FIN", msg_id)
    assert got == list(range(n))
    pub.close()
    consumer.close()
