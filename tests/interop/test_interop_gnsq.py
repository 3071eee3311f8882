"""Interop: the real, unmodified gnsq 1.0.2 client (gevent) against the real nsqpy-d process.

* The round trip runs tests/clients/gnsq_roundtrip.py as a subprocess (gnsq wants gevent's
  monkey patching, which must not leak into the pytest process): PUB + MPUB + DPUB through a
  gnsq Producer, two gnsq Consumers on each of two channels, then /stats must agree.
* The requeue / touch / timeout tests drive gnsq in-process. gnsq talks through gevent's own
  sockets (gnsq.stream uses ``gevent.socket``), so it works without monkey patching; the only
  rule is that waiting has to happen on gevent primitives (``gevent.sleep``, ``Event.wait``) so
  the consumer's greenlets get to run — never ``time.sleep`` while a gnsq client is live.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import gevent
import gevent.event
import gnsq
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "clients" / "gnsq_roundtrip.py"


def _stats_topic(nsqd, topic: str) -> dict | None:
    for t in nsqd.stats(topic=topic)["topics"]:
        if t["topic_name"] == topic:
            return t
    return None


def _channels(topic_stats: dict) -> dict[str, dict]:
    return {c["channel_name"]: c for c in topic_stats["channels"]}


def _gpoll(pred, timeout: float, what: str):
    """Like nsqpy.testing.wait_for, but sleeps with gevent so live gnsq greenlets keep running."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        gevent.sleep(0.05)


def _create(nsqd, topic: str, channel: str) -> None:
    # As with nsqd, /channel/create needs an existing topic (404 TOPIC_NOT_FOUND otherwise).
    code, body, _ = nsqd.http("POST", f"/topic/create?topic={topic}")
    assert code == 200, body
    code, body, _ = nsqd.http("POST", f"/channel/create?topic={topic}&channel={channel}")
    assert code == 200, body


def _publish_one(nsqd, topic: str, body: bytes) -> None:
    producer = gnsq.Producer([nsqd.tcp_address])
    producer.start()
    try:
        result = producer.publish(topic, body, timeout=5, raise_error=False)
        assert result.get(timeout=5) == b"OK"
    finally:
        producer.close()
        producer.join(timeout=5)


def _channel_settled(nsqd, topic: str, channel: str, **expect: int):
    """The channel's stats once every field in ``expect`` has its value (else falsy)."""
    t = _stats_topic(nsqd, topic)
    if t is None:
        return None
    c = _channels(t).get(channel)
    if c is None:
        return None
    if all(c[k] == v for k, v in expect.items()):
        return c
    return None


# --------------------------------------------------------------------------- round trip


@pytest.mark.timeout(60)
def test_gnsq_roundtrip_pub_mpub_dpub_two_channels(nsqd) -> None:
    count = 3000
    topic = "gnsq_roundtrip"
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--tcp",
            nsqd.tcp_address,
            "--http",
            nsqd.http_address,
            "--topic",
            topic,
            "--channels",
            "ch1,ch2",
            "--readers",
            "2",
            "--count",
            str(count),
            "--batch",
            "100",
            "--dpub",
            "5",
            "--defer-ms",
            "200",
            "--max-in-flight",
            "200",
            "--timeout",
            "25",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
    )
    elapsed = time.monotonic() - t0
    diag = (
        f"rc={proc.returncode} after {elapsed:.1f}s\nstdout:\n{proc.stdout}\n"
        f"stderr:\n{proc.stderr[-3000:]}\ndaemon log:\n{nsqd.log_text()[-4000:]}"
    )
    assert proc.stdout.strip(), diag
    report = json.loads(proc.stdout)
    assert report["ok"] is True, diag
    assert proc.returncode == 0, diag
    assert report["published_acked"] == count, diag
    # The mix really was exercised: single PUBs, MPUB batches and DPUBs all got OK.
    assert report["pub_commands"] > 0, diag
    assert report["mpub_commands"] > 0, diag
    assert report["dpub_commands"] == 5, diag
    assert report["bad_ids"] == [], diag
    assert report["errors"] == [], diag
    assert report["redelivered"] == 0, diag
    for ch in ("ch1", "ch2"):
        r = report["channels"][ch]
        assert r == {
            "received": count,
            "distinct": count,
            "missing": 0,
            "duplicates": 0,
            "unexpected": 0,
        }, diag
    # Both consumers of each channel got a share (the channel load-balances between them).
    for name in ("ch1/0", "ch1/1", "ch2/0", "ch2/1"):
        assert report["per_reader"].get(name, 0) > 0, diag

    # /stats agrees once the last FINs have been processed.
    def settled():
        t = _stats_topic(nsqd, topic)
        if t is None or t["message_count"] != count or t["depth"] != 0:
            return None
        chans = _channels(t)
        if set(chans) != {"ch1", "ch2"}:
            return None
        for c in chans.values():
            if (c["message_count"], c["depth"], c["in_flight_count"], c["deferred_count"]) != (
                count,
                0,
                0,
                0,
            ):
                return None
        return t

    try:
        t = _gpoll(settled, 5, "stats to settle")
    except AssertionError:
        raise AssertionError(
            f"stats never settled: {json.dumps(_stats_topic(nsqd, topic), indent=1)}\n{diag}"
        ) from None
    for c in t["channels"]:
        assert c["requeue_count"] == 0, c
        assert c["timeout_count"] == 0, c
    assert nsqd.alive()


# --------------------------------------------------------------------------- REQ / TOUCH


class _Recorder:
    """Collects (attempts, id, body, monotonic time) of every delivery."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[int, bytes, bytes, float]] = []
        self.errors: list[str] = []
        self.done = gevent.event.Event()

    def record(self, message) -> None:
        self.deliveries.append(
            (message.attempts, bytes(message.id), bytes(message.body), time.monotonic())
        )

    def attach(self, consumer: gnsq.Consumer) -> None:
        consumer.on_error.connect(
            lambda sender, error: self.errors.append(f"error: {error!r}"), weak=False
        )
        consumer.on_exception.connect(
            lambda sender, message, error: self.errors.append(f"exception: {error!r}"), weak=False
        )


def _consumer(nsqd, topic: str, channel: str, handler) -> gnsq.Consumer:
    return gnsq.Consumer(
        topic,
        channel,
        [nsqd.tcp_address],
        message_handler=handler,
        max_in_flight=1,
        # Keep the Consumer's own backoff out of the picture.
        max_backoff_duration=0,
    )


@pytest.mark.timeout(30)
def test_gnsq_requeue_with_delay_redelivers_with_attempts_2(nsqd) -> None:
    topic, channel = "gnsq_req", "c"
    delay_ms = 500
    rec = _Recorder()

    def handler(consumer, message) -> None:
        rec.record(message)
        if message.attempts == 1:
            message.requeue(delay_ms, backoff=False)  # REQ <id> 500
        else:
            message.finish()  # FIN <id>
            rec.done.set()

    _create(nsqd, topic, channel)
    consumer = _consumer(nsqd, topic, channel, handler)
    rec.attach(consumer)
    consumer.start(block=False)
    try:
        _publish_one(nsqd, topic, b"requeue-me")
        assert rec.done.wait(timeout=10), (rec.deliveries, rec.errors, nsqd.log_text()[-3000:])
        # No third delivery shows up after the FIN.
        gevent.sleep(0.3)
        c = _gpoll(
            lambda: _channel_settled(
                nsqd,
                topic,
                channel,
                message_count=1,
                depth=0,
                in_flight_count=0,
                deferred_count=0,
                requeue_count=1,
            ),
            5,
            "channel stats after REQ + FIN",
        )
    finally:
        consumer.close()
        consumer.join(timeout=5)

    assert rec.errors == [], rec.errors
    assert [d[0] for d in rec.deliveries] == [1, 2], rec.deliveries
    (_, id1, body1, t1), (_, id2, body2, t2) = rec.deliveries
    assert id1 == id2 and len(id1) == 16, rec.deliveries
    assert body1 == body2 == b"requeue-me"
    # REQ with a 500 ms timeout defers the message; it must not come back early.
    assert t2 - t1 >= delay_ms / 1000 - 0.05, t2 - t1
    assert c["timeout_count"] == 0, c


@pytest.mark.timeout(30)
def test_gnsq_unfinished_message_times_out_and_returns_with_attempts_2(daemon_factory) -> None:
    nsqd = daemon_factory("--msg-timeout=1s")
    topic, channel = "gnsq_timeout", "c"
    rec = _Recorder()

    def handler(consumer, message) -> None:
        rec.record(message)
        if message.attempts == 1:
            message.enable_async()  # the Consumer must not FIN it; we never answer
        else:
            rec.done.set()  # returning finishes it (FIN)

    _create(nsqd, topic, channel)
    consumer = _consumer(nsqd, topic, channel, handler)
    rec.attach(consumer)
    consumer.start(block=False)
    try:
        _publish_one(nsqd, topic, b"forget-me")
        assert rec.done.wait(timeout=10), (rec.deliveries, rec.errors, nsqd.log_text()[-3000:])
        c = _gpoll(
            lambda: _channel_settled(
                nsqd,
                topic,
                channel,
                message_count=1,
                depth=0,
                in_flight_count=0,
                deferred_count=0,
                timeout_count=1,
            ),
            5,
            "channel stats after timeout + FIN",
        )
    finally:
        consumer.close()
        consumer.join(timeout=5)

    assert rec.errors == [], rec.errors
    assert [d[0] for d in rec.deliveries] == [1, 2], rec.deliveries
    (_, id1, _, t1), (_, id2, body2, t2) = rec.deliveries
    assert id1 == id2 and body2 == b"forget-me"
    # Redelivered by the msg-timeout (1 s; the queue scanner may add up to ~100 ms+).
    assert 0.9 <= t2 - t1 <= 5, t2 - t1
    assert c["requeue_count"] == 0, c


@pytest.mark.timeout(30)
def test_gnsq_touch_keeps_message_in_flight_past_msg_timeout(daemon_factory) -> None:
    nsqd = daemon_factory("--msg-timeout=1s")
    topic, channel = "gnsq_touch", "c"
    rec = _Recorder()
    hold = 2.5  # seconds the message is held, well past the 1 s msg-timeout
    touches = []

    def work(message) -> None:
        end = time.monotonic() + hold
        while time.monotonic() < end:
            gevent.sleep(0.3)
            message.touch()  # TOUCH <id>
            touches.append(time.monotonic())
        message.finish()
        rec.done.set()

    def handler(consumer, message) -> None:
        rec.record(message)
        if message.attempts == 1:
            message.enable_async()
            gevent.spawn(work, message)
        else:
            message.finish()  # a redelivery: the TOUCHes did not work

    _create(nsqd, topic, channel)
    consumer = _consumer(nsqd, topic, channel, handler)
    rec.attach(consumer)
    consumer.start(block=False)
    try:
        _publish_one(nsqd, topic, b"touch-me")
        assert rec.done.wait(timeout=10), (rec.deliveries, rec.errors, nsqd.log_text()[-3000:])
        # Give a (wrong) timeout redelivery the chance to show up.
        gevent.sleep(0.5)
        c = _gpoll(
            lambda: _channel_settled(
                nsqd, topic, channel, message_count=1, depth=0, in_flight_count=0, deferred_count=0
            ),
            5,
            "channel stats after TOUCHes + FIN",
        )
    finally:
        consumer.close()
        consumer.join(timeout=5)

    assert rec.errors == [], rec.errors
    assert len(touches) >= 7, touches
    assert [d[0] for d in rec.deliveries] == [1], rec.deliveries
    assert c["timeout_count"] == 0, c
    assert c["requeue_count"] == 0, c
