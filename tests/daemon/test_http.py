"""The HTTP API of nsqpy-d against nsqd 1.3's behaviour (nsqd/http.go, internal/http_api).

Every test drives a real daemon process (the ``nsqd`` / ``daemon_factory`` fixtures) over
loopback HTTP, and, where delivery matters, a raw TCP V2 consumer. Every socket read has a
timeout and the module carries a pytest-timeout bound, so no test can hang.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import struct
import time

import pytest
from support.daemons import Daemon
from support.raw_client import RawClient

from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(60)

NSQ_CT = "nsq; version=1.0"
JSON_CT = "application/json; charset=utf-8"


# ----------------------------------------------------------------------------- helpers


def _lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def assert_ok(resp: tuple[int, bytes, dict[str, str]], body: bytes = b"OK") -> None:
    """A V1 200 answer with exactly ``body`` and the X-NSQ-Content-Type header."""
    code, data, headers = resp
    assert (code, data) == (200, body)
    assert _lower(headers).get("x-nsq-content-type") == NSQ_CT, headers


def assert_err(resp: tuple[int, bytes, dict[str, str]], code: int, text: str) -> None:
    """A V1 error: status ``code``, JSON body {"message": text}, JSON content type, NSQ header."""
    got_code, data, headers = resp
    try:
        payload = json.loads(data)
    except ValueError:
        payload = data
    assert (got_code, payload) == (code, {"message": text})
    h = _lower(headers)
    assert h.get("content-type") == JSON_CT, headers
    assert h.get("x-nsq-content-type") == NSQ_CT, headers


def topic_stats(d: Daemon, topic: str) -> dict | None:
    for t in d.stats(topic=topic)["topics"] or []:
        if t["topic_name"] == topic:
            return t
    return None


def channel_stats(d: Daemon, topic: str, channel: str) -> dict | None:
    t = topic_stats(d, topic)
    if t is None:
        return None
    for c in t["channels"]:
        if c["channel_name"] == channel:
            return c
    return None


def consumer(d: Daemon, topic: str, channel: str, rdy: int = 10, **identify: object) -> RawClient:
    """A raw V2 consumer: IDENTIFY, SUB, RDY; returns once nsqd reports its RDY count."""
    c = d.raw()
    c.identify(**identify)
    c.sub(topic, channel, rdy)

    def ready() -> bool:
        ch = channel_stats(d, topic, channel)
        return bool(ch and ch["clients"] and ch["clients"][0]["ready_count"] == rdy)

    wait_for(ready, timeout=5, what=f"RDY {rdy} on {topic}/{channel}")
    return c


def assert_no_message(c: RawClient, within: float) -> None:
    with pytest.raises(socket.timeout):
        c.read_message(timeout=within)


def binary_mpub(bodies: list[bytes], count: int | None = None) -> bytes:
    n = len(bodies) if count is None else count
    return struct.pack(">i", n) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def post_chunked(d: Daemon, path: str, chunks: list[bytes]) -> tuple[int, bytes, dict[str, str]]:
    """POST with Transfer-Encoding: chunked (no Content-Length)."""
    conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=10)
    try:
        conn.request("POST", path, body=iter(chunks), encode_chunked=True)
        r = conn.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        conn.close()


# ----------------------------------------------------------------------------- /ping, /info


def test_ping_is_plain_ok(nsqd):
    code, body, headers = nsqd.http("GET", "/ping")
    assert (code, body) == (200, b"OK")
    h = _lower(headers)
    # /ping uses nsqd's PlainText decorator, not V1: no X-NSQ-Content-Type, no JSON
    assert "x-nsq-content-type" not in h
    assert h.get("content-type", "").startswith("text/plain")


def test_info(nsqd):
    before = int(time.time())
    code, body, headers = nsqd.http("GET", "/info")
    assert code == 200
    h = _lower(headers)
    assert h.get("x-nsq-content-type") == NSQ_CT
    assert h.get("content-type") == JSON_CT
    info = json.loads(body)
    expected_keys = {
        "version",
        "broadcast_address",
        "hostname",
        "http_port",
        "tcp_port",
        "start_time",
        "max_heartbeat_interval",
        "max_output_buffer_size",
        "max_output_buffer_timeout",
        "max_deflate_level",
    }
    assert expected_keys <= set(info), sorted(expected_keys - set(info))
    assert info["version"] == "1.3.0"
    assert info["hostname"] == socket.gethostname()
    assert info["broadcast_address"] == socket.gethostname()  # nsqd's default
    assert info["http_port"] == nsqd.http_port
    assert info["tcp_port"] == nsqd.tcp_port
    assert isinstance(info["start_time"], int)
    assert before - 60 <= info["start_time"] <= before + 1
    # Go time.Duration encodes as integer nanoseconds
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert info["max_output_buffer_size"] == 65536
    assert info["max_output_buffer_timeout"] == 30_000_000_000
    assert info["max_deflate_level"] == 6


def test_info_start_time_matches_stats(nsqd):
    info = json.loads(nsqd.http("GET", "/info")[1])
    assert nsqd.stats()["start_time"] == info["start_time"]


# ----------------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/pub"),
        ("GET", "/mpub"),
        ("GET", "/topic/create"),
        ("GET", "/channel/pause"),
        ("POST", "/stats"),
        ("POST", "/info"),
        ("POST", "/ping"),
    ],
)
def test_wrong_method_is_405(nsqd, method, path):
    assert_err(
        nsqd.http(method, path, b"x" if method == "POST" else None), 405, "METHOD_NOT_ALLOWED"
    )


@pytest.mark.parametrize("path", ["/nonexistent", "/topic", "/topic/nope", "/pub/extra"])
def test_unknown_path_is_404(nsqd, path):
    assert_err(nsqd.http("GET", path), 404, "NOT_FOUND")


# ----------------------------------------------------------------------------- /pub


def test_pub_ok_counts_message(nsqd):
    assert_ok(nsqd.http("POST", "/pub?topic=pubt", b"hello"))
    assert_ok(nsqd.http("POST", "/pub?topic=pubt", b"world!"))
    t = topic_stats(nsqd, "pubt")
    assert t is not None
    assert t["message_count"] == 2
    assert t["message_bytes"] == len(b"hello") + len(b"world!")
    assert t["depth"] == 2  # no channel yet: messages wait in the topic


def test_pub_delivers_exact_body_to_consumer(nsqd):
    c = consumer(nsqd, "pubd", "ch", rdy=5)
    try:
        body = bytes(range(256)) + b"\n\x00tail"
        assert_ok(nsqd.http("POST", "/pub?topic=pubd", body))
        ts, attempts, msg_id, got = c.read_message(timeout=5)
        assert got == body
        assert attempts == 1
        assert len(msg_id) == 16
    finally:
        c.close()


@pytest.mark.parametrize(
    "query,body,code,text",
    [
        ("?topic=pe", b"", 400, "MSG_EMPTY"),
        ("", b"x", 400, "MISSING_ARG_TOPIC"),
        ("?channel=c", b"x", 400, "MISSING_ARG_TOPIC"),
        ("?topic=bad!name", b"x", 400, "INVALID_TOPIC"),
        ("?topic=" + "a" * 65, b"x", 400, "INVALID_TOPIC"),
        ("?topic=", b"x", 400, "INVALID_TOPIC"),
        ("?topic=pe&defer=abc", b"x", 400, "INVALID_DEFER"),
        ("?topic=pe&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("?topic=pe&defer=1.5", b"x", 400, "INVALID_DEFER"),
        ("?topic=pe&defer=3600001", b"x", 400, "INVALID_DEFER"),  # > --max-req-timeout (1h)
    ],
)
def test_pub_errors(nsqd, query, body, code, text):
    assert_err(nsqd.http("POST", "/pub" + query, body), code, text)
    t = topic_stats(nsqd, "pe")
    assert t is None or t["message_count"] == 0


def test_pub_defer_at_max_req_timeout_is_accepted(nsqd):
    assert_ok(nsqd.http("POST", "/pub?topic=pdmax&defer=3600000", b"x"))


def test_pub_too_big(daemon_factory):
    d = daemon_factory("--max-msg-size=100")
    assert_ok(d.http("POST", "/pub?topic=big", b"x" * 100))
    assert_err(d.http("POST", "/pub?topic=big", b"x" * 101), 413, "MSG_TOO_BIG")
    # too big is checked before the topic (nsqd reads the body first)
    assert_err(d.http("POST", "/pub?topic=bad!name", b"x" * 101), 413, "MSG_TOO_BIG")
    t = topic_stats(d, "big")
    assert t is not None and t["message_count"] == 1


def test_pub_too_big_chunked(daemon_factory):
    """No Content-Length: nsqd reads at most max-msg-size+1 bytes and refuses the rest."""
    d = daemon_factory("--max-msg-size=100")
    assert_ok(post_chunked(d, "/pub?topic=bigc", [b"x" * 60, b"y" * 40]))
    assert_err(post_chunked(d, "/pub?topic=bigc", [b"x" * 60, b"y" * 41]), 413, "MSG_TOO_BIG")
    t = topic_stats(d, "bigc")
    assert t is not None and t["message_count"] == 1


def test_pub_defer_delays_delivery(nsqd):
    c = consumer(nsqd, "deft", "ch", rdy=5)
    try:
        t0 = time.monotonic()
        assert_ok(nsqd.http("POST", "/pub?topic=deft&defer=500", b"later"))
        if time.monotonic() - t0 < 0.3:  # only meaningful while surely still deferred
            ch = channel_stats(nsqd, "deft", "ch")
            assert ch is not None
            assert (ch["deferred_count"], ch["in_flight_count"]) == (1, 0)
        # not delivered within the first 400 ms after the request was sent
        left = 0.4 - (time.monotonic() - t0)
        if left > 0:
            assert_no_message(c, left)
        _, attempts, _, body = c.read_message(timeout=5)
        elapsed = time.monotonic() - t0
        assert body == b"later"
        assert attempts == 1
        # the message was published after t0, so it cannot be due before t0 + 0.5 s
        assert elapsed >= 0.48, f"deferred message delivered after only {elapsed:.3f}s"
        assert elapsed < 5
    finally:
        c.close()


# ----------------------------------------------------------------------------- /mpub


def test_mpub_text(nsqd):
    c = consumer(nsqd, "mpt", "ch", rdy=10)
    try:
        body = b"one\ntwo\n\n\nthree\n"
        assert_ok(nsqd.http("POST", "/mpub?topic=mpt", body))
        got = [c.read_message(timeout=5)[3] for _ in range(3)]
        assert got == [b"one", b"two", b"three"]
        assert_no_message(c, 0.3)
        t = topic_stats(nsqd, "mpt")
        assert t is not None
        assert t["message_count"] == 3
        assert t["message_bytes"] == len(b"onetwothree")
    finally:
        c.close()


def test_mpub_text_without_trailing_newline(nsqd):
    assert_ok(nsqd.http("POST", "/mpub?topic=mpn", b"a\nbb\nccc"))
    t = topic_stats(nsqd, "mpn")
    assert t is not None
    assert (t["message_count"], t["message_bytes"], t["depth"]) == (3, 6, 3)


def test_mpub_binary(nsqd):
    c = consumer(nsqd, "mpb", "ch", rdy=10)
    try:
        bodies = [b"bin\none", b"\x00\x01\x02", b"x" * 1000]
        assert_ok(nsqd.http("POST", "/mpub?topic=mpb&binary=true", binary_mpub(bodies)))
        got = [c.read_message(timeout=5)[3] for _ in range(3)]
        assert got == bodies
        assert_no_message(c, 0.3)
        t = topic_stats(nsqd, "mpb")
        assert t is not None and t["message_count"] == 3
    finally:
        c.close()


@pytest.mark.parametrize(
    "body,text",
    [
        (binary_mpub([b"a"], count=0), "BAD_BODY"),
        (binary_mpub([b"a"], count=-1), "BAD_BODY"),
        (binary_mpub([b"a"], count=2**31 - 1), "BAD_BODY"),  # > (max-body-size - 4) / 5
        (b"", "BAD_BODY"),
        (b"\x00\x00", "BAD_BODY"),  # count cannot be read
        # count says 2 but only one message follows: nsqd fails reading message(1)'s size
        (binary_mpub([b"a"], count=2), "BAD_MESSAGE"),
    ],
    ids=["count0", "count-1", "count-huge", "empty", "short-count", "missing-message"],
)
def test_mpub_binary_bad(nsqd, body, text):
    assert_err(nsqd.http("POST", "/mpub?topic=mpbad&binary=true", body), 413, text)
    t = topic_stats(nsqd, "mpbad")
    assert t is None or t["message_count"] == 0


def test_mpub_binary_message_too_big(daemon_factory):
    d = daemon_factory("--max-msg-size=100")
    body = binary_mpub([b"ok", b"x" * 101])
    assert_err(d.http("POST", "/mpub?topic=mpbig&binary=true", body), 413, "BAD_MESSAGE")
    assert_ok(d.http("POST", "/mpub?topic=mpbig&binary=true", binary_mpub([b"x" * 100])))
    t = topic_stats(d, "mpbig")
    assert t is not None and t["message_count"] == 1


def test_mpub_text_line_too_big(daemon_factory):
    d = daemon_factory("--max-msg-size=100")
    body = b"short\n" + b"x" * 101 + b"\nafter\n"
    assert_err(d.http("POST", "/mpub?topic=mptb", body), 413, "MSG_TOO_BIG")
    t = topic_stats(d, "mptb")
    # all or nothing: the short line before the big one is not published either
    assert t is None or t["message_count"] == 0
    assert_ok(d.http("POST", "/mpub?topic=mptb", b"y" * 100 + b"\nz\n"))
    t = topic_stats(d, "mptb")
    assert t is not None and t["message_count"] == 2


@pytest.mark.parametrize(
    "query,text", [("", "MISSING_ARG_TOPIC"), ("?topic=no%20good", "INVALID_TOPIC")]
)
def test_mpub_topic_errors(nsqd, query, text):
    assert_err(nsqd.http("POST", "/mpub" + query, b"a\nb\n"), 400, text)


# ----------------------------------------------------------------------------- /topic/*


def test_topic_create(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=tc"), body=b"")
    t = topic_stats(nsqd, "tc")
    assert t is not None
    assert (t["channels"], t["depth"], t["message_count"], t["paused"]) == ([], 0, 0, False)
    # creating again is fine
    assert_ok(nsqd.http("POST", "/topic/create?topic=tc"), body=b"")
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == ["tc"]


def test_topic_create_ephemeral_name_is_valid(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=eph%23ephemeral"), body=b"")
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == ["eph#ephemeral"]


@pytest.mark.parametrize(
    "query,text",
    [
        ("", "MISSING_ARG_TOPIC"),
        ("?topic=bad!name", "INVALID_TOPIC"),
        ("?topic=" + "a" * 65, "INVALID_TOPIC"),
    ],
)
def test_topic_create_errors(nsqd, query, text):
    assert_err(nsqd.http("POST", "/topic/create" + query), 400, text)
    assert nsqd.stats()["topics"] == []


@pytest.mark.parametrize(
    "query,code,text",
    [
        ("?topic=tr&replicas=2", 400, "REPLICATION_DISABLED"),
        ("?topic=tr&replicas=0", 400, "INVALID_REPLICAS"),
        ("?topic=tr&replicas=x", 400, "INVALID_REPLICAS"),
    ],
)
def test_topic_create_replicas_without_replication(nsqd, query, code, text):
    """nsqpy's ``replicas`` on a daemon without --etcd-endpoints: above 1 is refused, 1 is a
    plain topic."""
    assert_err(nsqd.http("POST", "/topic/create" + query), code, text)
    assert nsqd.stats()["topics"] == []
    assert_ok(nsqd.http("POST", "/topic/create?topic=tr&replicas=1"), body=b"")
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == ["tr"]


def test_topic_delete(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=td"), body=b"")
    assert_ok(nsqd.http("POST", "/pub?topic=td", b"m"))
    assert_ok(nsqd.http("POST", "/topic/delete?topic=td"), body=b"")
    assert topic_stats(nsqd, "td") is None
    assert_err(nsqd.http("POST", "/topic/delete?topic=td"), 404, "TOPIC_NOT_FOUND")
    assert_err(nsqd.http("POST", "/topic/delete?topic=never"), 404, "TOPIC_NOT_FOUND")
    assert_err(nsqd.http("POST", "/topic/delete"), 400, "MISSING_ARG_TOPIC")


def test_topic_delete_disconnects_consumers(nsqd):
    c = consumer(nsqd, "tdc", "ch", rdy=1)
    try:
        assert_ok(nsqd.http("POST", "/topic/delete?topic=tdc"), body=b"")
        assert c.closed_by_server(timeout=5)
        assert topic_stats(nsqd, "tdc") is None
    finally:
        c.close()


def test_topic_empty(nsqd):
    for i in range(3):
        assert_ok(nsqd.http("POST", "/pub?topic=te", b"m%d" % i))
    t = topic_stats(nsqd, "te")
    assert t is not None and t["depth"] == 3
    assert_ok(nsqd.http("POST", "/topic/empty?topic=te"), body=b"")
    t = topic_stats(nsqd, "te")
    assert t is not None
    assert t["depth"] == 0
    assert t["message_count"] == 3  # counters are not reset
    assert_err(nsqd.http("POST", "/topic/empty?topic=nope"), 404, "TOPIC_NOT_FOUND")
    assert_err(nsqd.http("POST", "/topic/empty?topic=bad!name"), 400, "INVALID_TOPIC")
    assert_err(nsqd.http("POST", "/topic/empty"), 400, "MISSING_ARG_TOPIC")


def test_topic_pause_unpause_flags_and_errors(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=tp"), body=b"")
    assert_ok(nsqd.http("POST", "/topic/pause?topic=tp"), body=b"")
    assert topic_stats(nsqd, "tp")["paused"] is True
    assert_ok(nsqd.http("POST", "/topic/unpause?topic=tp"), body=b"")
    assert topic_stats(nsqd, "tp")["paused"] is False
    for path in ("/topic/pause", "/topic/unpause"):
        assert_err(nsqd.http("POST", f"{path}?topic=nope"), 404, "TOPIC_NOT_FOUND")
        assert_err(nsqd.http("POST", path), 400, "MISSING_ARG_TOPIC")


def test_topic_pause_holds_messages_in_topic(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=tph"), body=b"")
    assert_ok(nsqd.http("POST", "/channel/create?topic=tph&channel=ch"), body=b"")
    assert_ok(nsqd.http("POST", "/topic/pause?topic=tph"), body=b"")
    assert_ok(nsqd.http("POST", "/pub?topic=tph", b"a"))
    assert_ok(nsqd.http("POST", "/mpub?topic=tph", b"b\nc\n"))
    t = topic_stats(nsqd, "tph")  # a publish is held before it is answered: no wait needed
    assert t is not None
    assert (t["paused"], t["depth"], t["message_count"]) == (True, 3, 3)
    assert t["channels"][0]["depth"] == 0
    assert t["channels"][0]["message_count"] == 0
    assert_ok(nsqd.http("POST", "/topic/unpause?topic=tph"), body=b"")

    def flowed() -> bool:
        t = topic_stats(nsqd, "tph")
        return t["depth"] == 0 and t["channels"][0]["depth"] == 3

    wait_for(flowed, timeout=5, what="messages to flow to the channel after unpause")
    assert topic_stats(nsqd, "tph")["paused"] is False


def test_topic_pause_blocks_delivery_to_consumer(nsqd):
    c = consumer(nsqd, "tpc", "ch", rdy=5)
    try:
        assert_ok(nsqd.http("POST", "/topic/pause?topic=tpc"), body=b"")
        assert_ok(nsqd.http("POST", "/pub?topic=tpc", b"held"))
        assert_no_message(c, 0.5)
        t = topic_stats(nsqd, "tpc")
        assert (t["depth"], t["channels"][0]["depth"], t["channels"][0]["in_flight_count"]) == (
            1,
            0,
            0,
        )
        assert_ok(nsqd.http("POST", "/topic/unpause?topic=tpc"), body=b"")
        assert c.read_message(timeout=5)[3] == b"held"
        assert topic_stats(nsqd, "tpc")["depth"] == 0
    finally:
        c.close()


# ----------------------------------------------------------------------------- /channel/*


def test_channel_create(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=cc"), body=b"")
    assert_ok(nsqd.http("POST", "/channel/create?topic=cc&channel=c1"), body=b"")
    assert_ok(nsqd.http("POST", "/channel/create?topic=cc&channel=c0"), body=b"")
    t = topic_stats(nsqd, "cc")
    assert [c["channel_name"] for c in t["channels"]] == ["c0", "c1"]  # sorted by name
    ch = t["channels"][1]
    assert (ch["depth"], ch["client_count"], ch["clients"], ch["paused"]) == (0, 0, [], False)


def test_channel_create_takes_messages_held_by_topic(nsqd):
    assert_ok(nsqd.http("POST", "/mpub?topic=cch", b"1\n2\n"))
    assert topic_stats(nsqd, "cch")["depth"] == 2
    assert_ok(nsqd.http("POST", "/channel/create?topic=cch&channel=ch"), body=b"")

    def flowed() -> bool:
        t = topic_stats(nsqd, "cch")
        return t["depth"] == 0 and t["channels"][0]["depth"] == 2

    wait_for(flowed, timeout=5, what="held topic messages to reach the new channel")


@pytest.mark.parametrize(
    "query,code,text",
    [
        ("?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
        ("?topic=cce", 400, "MISSING_ARG_CHANNEL"),
        ("?channel=c", 400, "MISSING_ARG_TOPIC"),
        ("?topic=cce&channel=bad!chan", 400, "INVALID_ARG_CHANNEL"),
        ("?topic=cce&channel=" + "c" * 65, 400, "INVALID_ARG_CHANNEL"),
        ("?topic=bad!topic&channel=c", 400, "INVALID_ARG_TOPIC"),
    ],
)
def test_channel_create_errors(nsqd, query, code, text):
    assert_ok(nsqd.http("POST", "/topic/create?topic=cce"), body=b"")
    assert_err(nsqd.http("POST", "/channel/create" + query), code, text)
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == ["cce"]
    assert topic_stats(nsqd, "cce")["channels"] == []


def test_channel_delete(nsqd):
    c = consumer(nsqd, "cd", "ch", rdy=1)
    try:
        assert_ok(nsqd.http("POST", "/channel/create?topic=cd&channel=other"), body=b"")
        assert_ok(nsqd.http("POST", "/channel/delete?topic=cd&channel=ch"), body=b"")
        assert c.closed_by_server(timeout=5), "consumer of a deleted channel stays connected"
        t = topic_stats(nsqd, "cd")
        assert t is not None
        assert [ch["channel_name"] for ch in t["channels"]] == ["other"]
    finally:
        c.close()
    assert_err(nsqd.http("POST", "/channel/delete?topic=cd&channel=ch"), 404, "CHANNEL_NOT_FOUND")
    assert_err(nsqd.http("POST", "/channel/delete?topic=nope&channel=ch"), 404, "TOPIC_NOT_FOUND")
    assert_err(nsqd.http("POST", "/channel/delete?topic=cd"), 400, "MISSING_ARG_CHANNEL")


def test_channel_empty(nsqd):
    assert_ok(nsqd.http("POST", "/topic/create?topic=ce"), body=b"")
    assert_ok(nsqd.http("POST", "/channel/create?topic=ce&channel=ch"), body=b"")
    assert_ok(nsqd.http("POST", "/mpub?topic=ce", b"1\n2\n3\n"))
    assert_ok(nsqd.http("POST", "/pub?topic=ce&defer=60000", b"later"))
    wait_for(
        lambda: channel_stats(nsqd, "ce", "ch")["depth"] == 3, timeout=5, what="channel depth 3"
    )
    assert channel_stats(nsqd, "ce", "ch")["deferred_count"] == 1
    assert_ok(nsqd.http("POST", "/channel/empty?topic=ce&channel=ch"), body=b"")
    ch = channel_stats(nsqd, "ce", "ch")
    assert (ch["depth"], ch["deferred_count"], ch["in_flight_count"]) == (0, 0, 0)
    assert_err(nsqd.http("POST", "/channel/empty?topic=ce&channel=nope"), 404, "CHANNEL_NOT_FOUND")
    assert_err(nsqd.http("POST", "/channel/empty?topic=nope&channel=ch"), 404, "TOPIC_NOT_FOUND")


def test_channel_empty_drops_in_flight(nsqd):
    c = consumer(nsqd, "cei", "ch", rdy=1)
    try:
        assert_ok(nsqd.http("POST", "/mpub?topic=cei", b"1\n2\n"))
        assert c.read_message(timeout=5)[3] == b"1"
        ch = channel_stats(nsqd, "cei", "ch")
        assert (ch["in_flight_count"], ch["depth"]) == (1, 1)
        assert_ok(nsqd.http("POST", "/channel/empty?topic=cei&channel=ch"), body=b"")
        ch = channel_stats(nsqd, "cei", "ch")
        assert (ch["in_flight_count"], ch["depth"], ch["deferred_count"]) == (0, 0, 0)
        assert ch["clients"][0]["in_flight_count"] == 0
        # the consumer's RDY room is free again: a new message is delivered
        assert_ok(nsqd.http("POST", "/pub?topic=cei", b"3"))
        assert c.read_message(timeout=5)[3] == b"3"
    finally:
        c.close()


def test_channel_pause_unpause(nsqd):
    c = consumer(nsqd, "cp", "ch", rdy=5)
    try:
        assert_ok(nsqd.http("POST", "/channel/pause?topic=cp&channel=ch"), body=b"")
        assert channel_stats(nsqd, "cp", "ch")["paused"] is True
        assert_ok(nsqd.http("POST", "/pub?topic=cp", b"waiting"))
        assert_no_message(c, 0.5)
        ch = channel_stats(nsqd, "cp", "ch")
        assert (ch["depth"], ch["in_flight_count"]) == (1, 0)
        assert_ok(nsqd.http("POST", "/channel/unpause?topic=cp&channel=ch"), body=b"")
        assert c.read_message(timeout=5)[3] == b"waiting"
        ch = channel_stats(nsqd, "cp", "ch")
        assert (ch["paused"], ch["depth"], ch["in_flight_count"]) == (False, 0, 1)
    finally:
        c.close()


@pytest.mark.parametrize("path", ["/channel/pause", "/channel/unpause"])
def test_channel_pause_errors(nsqd, path):
    assert_ok(nsqd.http("POST", "/topic/create?topic=cpe"), body=b"")
    assert_err(nsqd.http("POST", f"{path}?topic=cpe&channel=nope"), 404, "CHANNEL_NOT_FOUND")
    assert_err(nsqd.http("POST", f"{path}?topic=nope&channel=ch"), 404, "TOPIC_NOT_FOUND")
    assert_err(nsqd.http("POST", f"{path}?topic=cpe"), 400, "MISSING_ARG_CHANNEL")


# ----------------------------------------------------------------------------- /stats


TOPIC_KEYS = {
    "topic_name",
    "channels",
    "depth",
    "backend_depth",
    "message_count",
    "message_bytes",
    "paused",
    "e2e_processing_latency",
}
CHANNEL_KEYS = {
    "channel_name",
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "client_count",
    "clients",
    "paused",
    "e2e_processing_latency",
}
CLIENT_KEYS = {
    "client_id",
    "hostname",
    "version",
    "remote_address",
    "state",
    "ready_count",
    "in_flight_count",
    "message_count",
    "finish_count",
    "requeue_count",
    "connect_ts",
    "sample_rate",
    "deflate",
    "snappy",
    "user_agent",
    "tls",
}
EMPTY_E2E = {"count": 0, "percentiles": None}


def test_stats_json_shape(nsqd):
    now = int(time.time())
    c = consumer(
        nsqd, "st", "ch", rdy=3, client_id="cid-1", hostname="host-1", user_agent="test-agent/1.0"
    )
    p = nsqd.raw()
    try:
        p.identify(client_id="prod", hostname="phost", user_agent="producer/2")
        p.pub("st", b"abc")
        p.pub("st", b"defg")
        _, _, msg_id, body = c.read_message(timeout=5)
        assert body == b"abc"
        c.cmd(b"FIN", msg_id)
        assert c.read_message(timeout=5)[3] == b"defg"

        def settled() -> dict | None:
            s = nsqd.stats()
            ch = s["topics"][0]["channels"][0]
            return s if ch["clients"][0]["finish_count"] == 1 else None

        s = wait_for(settled, timeout=5, what="FIN to be counted")
        code, raw_body, headers = nsqd.http("GET", "/stats?format=json")
        assert code == 200
        assert _lower(headers).get("x-nsq-content-type") == NSQ_CT
        assert _lower(headers).get("content-type") == JSON_CT
        json.loads(raw_body)

        assert {"version", "health", "start_time", "topics", "memory", "producers"} <= set(s)
        assert s["version"] == "1.3.0"
        assert s["health"] == "OK"
        assert now - 60 <= s["start_time"] <= now + 1
        assert isinstance(s["memory"], dict)
        for k in (
            "heap_objects",
            "heap_idle_bytes",
            "heap_in_use_bytes",
            "heap_released_bytes",
            "gc_pause_usec_100",
            "gc_pause_usec_99",
            "gc_pause_usec_95",
            "next_gc_bytes",
            "gc_total_runs",
        ):
            assert isinstance(s["memory"].get(k), int), k

        [t] = s["topics"]
        assert set(t) >= TOPIC_KEYS, sorted(TOPIC_KEYS - set(t))
        assert t["topic_name"] == "st"
        assert (t["depth"], t["backend_depth"], t["message_count"], t["message_bytes"]) == (
            0,
            0,
            2,
            7,
        )
        assert t["paused"] is False
        assert t["e2e_processing_latency"] == EMPTY_E2E

        [ch] = t["channels"]
        assert set(ch) >= CHANNEL_KEYS, sorted(CHANNEL_KEYS - set(ch))
        assert ch["channel_name"] == "ch"
        assert (
            ch["depth"],
            ch["backend_depth"],
            ch["in_flight_count"],
            ch["deferred_count"],
            ch["message_count"],
            ch["requeue_count"],
            ch["timeout_count"],
            ch["client_count"],
        ) == (0, 0, 1, 0, 2, 0, 0, 1)
        assert ch["paused"] is False
        assert ch["e2e_processing_latency"] == EMPTY_E2E

        [cl] = ch["clients"]
        assert set(cl) >= CLIENT_KEYS, sorted(CLIENT_KEYS - set(cl))
        local = c.sock.getsockname()
        assert cl["client_id"] == "cid-1"
        assert cl["hostname"] == "host-1"
        assert cl["user_agent"] == "test-agent/1.0"
        assert cl["version"] == "V2"
        assert cl["remote_address"] == f"{local[0]}:{local[1]}"
        assert cl["state"] == 3  # stateSubscribed
        assert (
            cl["ready_count"],
            cl["in_flight_count"],
            cl["message_count"],
            cl["finish_count"],
            cl["requeue_count"],
        ) == (3, 1, 2, 1, 0)
        assert now - 60 <= cl["connect_ts"] <= int(time.time()) + 1
        assert cl["sample_rate"] == 0
        assert (cl["deflate"], cl["snappy"], cl["tls"]) == (False, False, False)
        assert "pub_counts" not in cl  # omitempty: this client never published

        [prod] = s["producers"]
        plocal = p.sock.getsockname()
        assert prod["remote_address"] == f"{plocal[0]}:{plocal[1]}"
        assert (prod["client_id"], prod["hostname"], prod["user_agent"]) == (
            "prod",
            "phost",
            "producer/2",
        )
        assert prod["version"] == "V2"
        assert prod["pub_counts"] == [{"topic": "st", "count": 2}]
    finally:
        c.close()
        p.close()


def test_stats_producers_null_without_publishers(nsqd):
    assert_ok(nsqd.http("POST", "/pub?topic=np", b"x"))  # HTTP publishes are not producers
    s = nsqd.stats()
    assert s["producers"] is None
    assert [t["topic_name"] for t in s["topics"]] == ["np"]


def test_stats_topics_empty_list_when_no_topics(nsqd):
    s = nsqd.stats()
    assert s["topics"] == []
    assert s["health"] == "OK"


def test_stats_filters(nsqd):
    for t in ("fa", "fb"):
        assert_ok(nsqd.http("POST", f"/topic/create?topic={t}"), body=b"")
        assert_ok(nsqd.http("POST", f"/channel/create?topic={t}&channel=c2"), body=b"")
    assert_ok(nsqd.http("POST", "/channel/create?topic=fa&channel=c1"), body=b"")

    s = nsqd.stats()
    assert [t["topic_name"] for t in s["topics"]] == ["fa", "fb"]
    assert [c["channel_name"] for c in s["topics"][0]["channels"]] == ["c1", "c2"]

    s = nsqd.stats(topic="fb")
    assert [t["topic_name"] for t in s["topics"]] == ["fb"]

    s = nsqd.stats(topic="fa", channel="c1")
    assert [t["topic_name"] for t in s["topics"]] == ["fa"]
    assert [c["channel_name"] for c in s["topics"][0]["channels"]] == ["c1"]

    # channel filter alone: topics without that channel are left out
    s = nsqd.stats(channel="c1")
    assert [t["topic_name"] for t in s["topics"]] == ["fa"]
    s = nsqd.stats(channel="c2")
    assert [t["topic_name"] for t in s["topics"]] == ["fa", "fb"]
    assert all([c["channel_name"] for c in t["channels"]] == ["c2"] for t in s["topics"])

    s = nsqd.stats(topic="unknown")
    assert s["topics"] is None
    assert s["producers"] is None
    assert s["health"] == "OK"


def test_stats_include_clients_and_mem(nsqd):
    c = consumer(nsqd, "inc", "ch", rdy=1)
    p = nsqd.raw()
    try:
        p.pub("inc", b"x")
        s = nsqd.stats()
        assert len(s["topics"][0]["channels"][0]["clients"]) == 1
        assert s["producers"] is not None and len(s["producers"]) == 1

        s = nsqd.stats(include_clients="false")
        ch = s["topics"][0]["channels"][0]
        assert ch["clients"] is None
        assert ch["client_count"] == 1  # still counted
        assert s["producers"] is None
        assert "memory" in s

        s = nsqd.stats(include_mem="false")
        assert "memory" not in s
        assert len(s["topics"][0]["channels"][0]["clients"]) == 1

        s = nsqd.stats(include_clients="0", include_mem="0")
        assert "memory" not in s
        assert s["producers"] is None
    finally:
        c.close()
        p.close()


def test_stats_producer_pub_counts_filtered_by_topic(nsqd):
    p = nsqd.raw()
    try:
        p.pub("pa", b"1")
        p.pub("pa", b"2")
        p.pub("pa", b"3")
        p.pub("pb", b"4")
        [prod] = nsqd.stats(topic="pa")["producers"]
        assert prod["pub_counts"] == [{"topic": "pa", "count": 3}]
        [prod] = nsqd.stats(topic="pb")["producers"]
        assert prod["pub_counts"] == [{"topic": "pb", "count": 1}]
    finally:
        p.close()


def test_stats_text(nsqd):
    assert_ok(nsqd.http("POST", "/pub?topic=txtopic", b"x"))
    assert_ok(nsqd.http("POST", "/channel/create?topic=txtopic&channel=txchan"), body=b"")
    code, body, headers = nsqd.http("GET", "/stats")
    assert code == 200
    assert _lower(headers).get("x-nsq-content-type") == NSQ_CT
    text = body.decode()
    assert "Health: OK" in text
    assert "[txtopic" in text
    assert "[txchan" in text
    assert "Memory:" in text
    with pytest.raises(ValueError):
        json.loads(body)

    assert_ok(nsqd.http("POST", "/topic/pause?topic=txtopic"), body=b"")
    text = nsqd.http("GET", "/stats")[1].decode()
    assert "*P [txtopic" in text

    text = nsqd.http("GET", "/stats?include_mem=false")[1].decode()
    assert "Memory:" not in text
    assert "Health: OK" in text


# ------------------------------------------------------------------------------------------
# byte-level differences found against nsqd 1.3 (text /stats, router, query parsing)


def raw_http(
    d: Daemon, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """One request over http.client: the path goes out byte for byte, redirects not followed."""
    conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=10)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        return r.status, r.read(), _lower(dict(r.getheaders()))
    finally:
        conn.close()


def test_stats_text_header_and_layout(nsqd):
    """nsqd's printStats: text/plain (Go sniffs the body), version.String("nsqd") first, an RFC
    3339 start time, uptime as Go's Duration, one blank line between sections and topics."""
    from nsqpy.options import version_string

    assert_ok(nsqd.http("POST", "/topic/create?topic=lay_a"), body=b"")
    assert_ok(nsqd.http("POST", "/channel/create?topic=lay_a&channel=c1"), body=b"")
    assert_ok(nsqd.http("POST", "/topic/create?topic=lay_b"), body=b"")
    code, body, h = raw_http(nsqd, "GET", "/stats?include_mem=false")
    assert code == 200
    assert h.get("content-type") == "text/plain; charset=utf-8"
    assert h.get("x-nsq-content-type") == NSQ_CT
    text = body.decode()
    lines = text.split("\n")
    assert lines[0] == version_string()
    assert lines[0].startswith("nsqd v1.3.0 (built w/")
    assert re.fullmatch(r"start_time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", lines[1])
    assert re.fullmatch(r"uptime (\d+m)?\d+(\.\d{1,9})?s|uptime \d+(\.\d+)?(ms|µs)", lines[2])
    topic_a = r"   \[lay_a          \] depth: 0     be-depth: 0     msgs: 0        e2e%: \n"
    chan = (
        r"      \[c1                       \] depth: 0     be-depth: 0     inflt: 0    "
        r"def: 0    re-q: 0     timeout: 0     msgs: 0        e2e%: \n"
    )
    topic_b = r"   \[lay_b          \] depth: 0     be-depth: 0     msgs: 0        e2e%: \n"
    rest = "\n".join(lines[3:])
    pattern = (
        r"\nHealth: OK\n\nTopics:\n" + topic_a + chan + r"\n" + topic_b + r"\nProducers: None\n"
    )
    assert re.fullmatch(pattern, rest), rest

    code, body, _ = raw_http(nsqd, "GET", "/stats?include_mem=false&topic=none")
    assert body.decode().endswith("\nHealth: OK\n\nTopics: None\n\nProducers: None\n")


def test_stats_text_memory_section(nsqd):
    text = raw_http(nsqd, "GET", "/stats")[1].decode()
    mem = text.split("\nMemory:\n", 1)[1].split("\n\nTopics:", 1)[0].split("\n")
    keys = [
        "heap_objects",
        "heap_idle_bytes",
        "heap_in_use_bytes",
        "heap_released_bytes",
        "gc_pause_usec_100",
        "gc_pause_usec_99",
        "gc_pause_usec_95",
        "next_gc_bytes",
        "gc_total_runs",
    ]
    assert [line.split("\t")[0] for line in mem] == [f"   {k:<25}" for k in keys]
    assert all(line.split("\t")[1].isdigit() for line in mem)


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1_000, "1µs"),
        (1_500, "1.5µs"),
        (1_000_000, "1ms"),
        (2_345_678, "2.345678ms"),
        (1_000_000_000, "1s"),
        (27_358_330_278, "27.358330278s"),
        (61_000_000_000, "1m1s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_725_500_000_000, "1h2m5.5s"),
        (-1_500_000_000, "-1.5s"),
    ],
)
def test_go_duration_ns(ns, text):
    from nsqpy.stats import go_duration_ns

    assert go_duration_ns(ns) == text


def test_router_options_lists_allowed_methods(nsqd):
    code, body, h = raw_http(nsqd, "OPTIONS", "/ping")
    assert (code, body, h.get("allow")) == (200, b"", "GET, OPTIONS")
    code, body, h = raw_http(nsqd, "OPTIONS", "/pub")
    assert (code, body, h.get("allow")) == (200, b"", "OPTIONS, POST")
    code, body, h = raw_http(nsqd, "OPTIONS", "/config/log_level")
    assert (code, body, h.get("allow")) == (200, b"", "GET, OPTIONS, PUT")
    assert_err(raw_http(nsqd, "OPTIONS", "/nope"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/ping", "GET, OPTIONS"),
        ("DELETE", "/stats", "GET, OPTIONS"),
        ("GET", "/pub", "OPTIONS, POST"),
        ("PUT", "/topic/create", "OPTIONS, POST"),
        ("POST", "/config/log_level", "GET, OPTIONS, PUT"),
    ],
)
def test_router_wrong_method_405_with_allow(nsqd, method, path, allow):
    resp = raw_http(nsqd, method, path, b"x" if method in ("POST", "PUT") else None)
    assert_err(resp, 405, "METHOD_NOT_ALLOWED")
    assert resp[1] == b'{"message":"METHOD_NOT_ALLOWED"}'
    assert resp[2].get("allow") == allow


def test_router_head_is_405_without_body(nsqd):
    code, body, h = raw_http(nsqd, "HEAD", "/ping")
    assert (code, body, h.get("allow")) == (405, b"", "GET, OPTIONS")
    assert h.get("content-length") == "32"


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/PING", "/ping"),
        ("/ping/", "/ping"),
        ("/Stats/?format=json", "/stats?format=json"),
        ("/./ping", "/ping"),
    ],
)
def test_router_get_redirect_301(nsqd, path, location):
    code, body, h = raw_http(nsqd, "GET", path)
    assert (code, h.get("location")) == (301, location)
    assert h.get("content-type") == "text/html; charset=utf-8"
    assert body == f'<a href="{location}">Moved Permanently</a>.\n\n'.encode()


def test_router_other_methods_redirect_307(nsqd):
    code, body, h = raw_http(nsqd, "POST", "/Pub?topic=r307", b"x")
    assert (code, body, h.get("location")) == (307, b"", "/pub?topic=r307")
    code, body, h = raw_http(nsqd, "POST", "/topic/create/?topic=r307")
    assert (code, body, h.get("location")) == (307, b"", "/topic/create?topic=r307")
    # no route for POST matches /PING in any case: 404 (nsqd's router looks no further)
    assert_err(raw_http(nsqd, "POST", "/PING"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/topic/create?topic=%zz"),
        ("POST", "/topic/create?topic=ok&x=%"),
        ("POST", "/topic/create?topic=a;b"),
        ("POST", "/mpub?topic=%g1"),
        ("POST", "/topic/delete?topic=%zz"),
        ("POST", "/topic/empty?topic=%zz"),
        ("POST", "/topic/pause?topic=%zz"),
        ("POST", "/topic/unpause?topic=%zz"),
        ("POST", "/channel/create?topic=t&channel=%"),
        ("POST", "/channel/delete?topic=t&channel=%"),
        ("POST", "/channel/empty?topic=t&channel=%"),
        ("POST", "/channel/pause?topic=t&channel=%"),
        ("POST", "/channel/unpause?topic=t&channel=%"),
        ("GET", "/stats?topic=%zz"),
        ("GET", "/stats?format=json&x=%4"),
    ],
)
def test_bad_query_escape_is_invalid_request(nsqd, method, path):
    """nsqd parses every query with Go's url.ParseQuery and answers its error 400
    INVALID_REQUEST before looking at any argument."""
    assert_err(
        raw_http(nsqd, method, path, b"x" if method == "POST" else None), 400, "INVALID_REQUEST"
    )
    assert nsqd.stats()["topics"] == []


def test_pub_bad_query_escape_after_body_checks(nsqd):
    # /pub reads and checks the body first (MSG_EMPTY), then the query
    assert_err(raw_http(nsqd, "POST", "/pub?topic=%zz", b""), 400, "MSG_EMPTY")
    assert_err(raw_http(nsqd, "POST", "/pub?topic=%zz", b"x"), 400, "INVALID_REQUEST")


def test_query_escapes_decoded_as_go_does(nsqd):
    assert_ok(raw_http(nsqd, "POST", "/topic/create?topic=%61bc"), body=b"")
    assert_err(raw_http(nsqd, "POST", "/topic/create?topic=a%3bb"), 400, "INVALID_TOPIC")
    assert_err(raw_http(nsqd, "POST", "/topic/create?topic=a+b"), 400, "INVALID_TOPIC")
    assert [t["topic_name"] for t in nsqd.stats()["topics"]] == ["abc"]


@pytest.mark.parametrize(
    ("method", "path", "code", "location"),
    [
        ("GET", "//ping", 301, "/ping"),
        ("GET", "//PING/", 301, "/ping"),
        ("GET", "/ping//", 301, "/ping"),
        ("GET", "/CONFIG/Log_Level", 301, "/config/Log_Level"),  # parameter kept as sent
        ("GET", "/config/log_level/", 301, "/config/log_level"),
        ("GET", "/config//log_level", 301, "/config/log_level"),
        ("PUT", "/Config/log_level", 307, "/config/log_level"),
        ("POST", "//pub?topic=x", 307, "/pub?topic=x"),
        ("GET", "/PING?topic=a%20b+c", 301, "/ping?topic=a%20b+c"),  # the raw query
        ("GET", "/PING?a%zz", 301, "/ping?a%zz"),
        ("GET", "/PING?", 301, "/ping?"),
    ],
)
def test_router_redirect_targets_as_httprouter(nsqd, method, path, code, location):
    """httprouter cleans the path (CleanPath), matches fixed route parts ignoring case, keeps a
    parameter's value and the query exactly as sent (checked against nsqd 1.3)."""
    got, _, h = raw_http(nsqd, method, path)
    assert (got, h.get("location")) == (code, location)


def test_router_redirect_body_escapes_as_go(nsqd):
    code, body, h = raw_http(nsqd, "GET", '/PING?a=\'&b=<"x">')
    assert (code, h.get("location")) == (301, '/ping?a=\'&b=<"x">')
    assert body == b'<a href="/ping?a=&#39;&amp;b=&lt;&#34;x&#34;&gt;">Moved Permanently</a>.\n\n'


# ------------------------------------------------------------------------------------------
# the daemons' own HTTP/1.1 server (internal.http.server on h11): connections as net/http
# handles them


def _exchange(d, raw: bytes, answers: int, timeout: float = 10) -> tuple[list[bytes], bool]:
    """Send ``raw`` on one connection and read ``answers`` whole answers (Content-Length
    framed); (the answers, whether the server then closed the connection)."""
    sock = socket.create_connection(("127.0.0.1", d.http_port), timeout=timeout)
    try:
        sock.sendall(raw)
        buf = b""
        out: list[bytes] = []
        while len(out) < answers:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[:end].decode("latin-1")
                m = re.search(r"(?im)^content-length: *(\d+)", head)
                total = end + 4 + (int(m.group(1)) if m else 0)
                if len(buf) >= total:
                    out.append(buf[:total])
                    buf = buf[total:]
                    continue
            more = sock.recv(65536)
            assert more, f"closed after {len(out)} answers: {buf[:200]!r}"
            buf += more
        sock.settimeout(0.3)
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False
        return out, closed
    finally:
        sock.close()


def _head(answer: bytes) -> list[str]:
    return answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")


def test_answer_headers_as_go_net_http_writes_them(nsqd):
    (ok,), closed = _exchange(
        nsqd, b"POST /pub?topic=hdr HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx", 1
    )
    lines = _head(ok)
    assert lines[0] == "HTTP/1.1 200 OK"
    # handler headers sorted, then Date, Content-Length, the sniffed Content-Type
    assert [h.split(":")[0] for h in lines[1:]] == [
        "X-Nsq-Content-Type",
        "Date",
        "Content-Length",
        "Content-Type",
    ]
    assert re.fullmatch(r"Date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", lines[2])
    assert lines[3:] == ["Content-Length: 2", "Content-Type: text/plain; charset=utf-8"]
    assert not closed


def test_keep_alive_and_pipelined_answers_in_order(nsqd):
    reqs = b"".join(
        b"POST /pub?topic=pipe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b)
        for b in (b"a", b"bb", b"ccc")
    )
    reqs += b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    out, closed = _exchange(nsqd, reqs, 5)
    assert [_head(a)[0] for a in out] == ["HTTP/1.1 200 OK"] * 3 + [
        "HTTP/1.1 404 Not Found",
        "HTTP/1.1 200 OK",
    ]
    assert not closed
    t = topic_stats(nsqd, "pipe")
    assert t is not None and t["message_count"] == 3


def test_a_long_pipelined_burst_is_answered_across_loop_passes(nsqd):
    """More requests in one read than one loop pass handles: all answered, in order."""
    n = 400
    out, _ = _exchange(nsqd, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" * n, n, timeout=30)
    assert len(out) == n and all(a.endswith(b"\r\n\r\nOK") for a in out)


def test_too_big_content_length_refused_before_the_body_is_sent(daemon_factory):
    d = daemon_factory("--max-msg-size=100", "--max-body-size=300")
    # the 10 MB body never comes: the answer must not wait for it
    (a,), closed = _exchange(
        d, b"POST /pub?topic=tb HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", 1
    )
    assert _head(a)[0] == "HTTP/1.1 413 Request Entity Too Large"
    assert a.endswith(b'{"message":"MSG_TOO_BIG"}')
    assert "Connection: close" in _head(a) and closed  # net/http: too much left to discard
    (a,), _ = _exchange(
        d, b"POST /mpub?topic=tb HTTP/1.1\r\nHost: x\r\nContent-Length: 301\r\n\r\n", 1
    )
    assert a.endswith(b'{"message":"BODY_TOO_BIG"}')


def test_small_unread_rest_is_dropped_and_the_connection_kept(daemon_factory):
    """As net/http: a too-big chunked body (rest < 256 KiB) is read and dropped, and the next
    request on the connection is answered."""
    d = daemon_factory("--max-msg-size=100")
    chunked = b"65\r\n" + b"x" * 101 + b"\r\n0\r\n\r\n"
    raw = (
        b"POST /pub?topic=cr HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked
        + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    (big, ping), closed = _exchange(d, raw, 2)
    assert big.endswith(b'{"message":"MSG_TOO_BIG"}')
    assert ping.endswith(b"\r\n\r\nOK") and not closed


def test_expect_100_continue(nsqd):
    raw = (
        b"POST /pub?topic=cont HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Expect: 100-continue\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", nsqd.http_port), timeout=10)
    try:
        sock.sendall(raw)
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"hello")
        buf = b""
        while not buf.endswith(b"OK"):
            more = sock.recv(4096)
            assert more
            buf += more
        assert buf.startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        sock.close()


def test_http10_answered_as_http10_and_closed(nsqd):
    (a,), closed = _exchange(nsqd, b"GET /ping HTTP/1.0\r\n\r\n", 1)
    assert _head(a)[0] == "HTTP/1.0 200 OK" and "Connection: close" not in _head(a)
    assert closed


def test_bad_request_and_missing_host_as_net_http(nsqd):
    (a,), closed = _exchange(nsqd, b"GARBAGE\r\n\r\n", 1)
    assert a.startswith(b"HTTP/1.1 400 Bad Request\r\n") and closed
    (a,), closed = _exchange(nsqd, b"GET /ping HTTP/1.1\r\n\r\n", 1)
    assert _head(a)[0] == "HTTP/1.1 400 Bad Request: missing required Host header" and closed


def test_message_route(nsqd, lookupd):
    """GET /message is routed to message_lookup on both daemons (its answers are its own)."""
    for d in (nsqd, lookupd):
        assert_err(raw_http(d, "GET", "/message"), 400, "MISSING_ARG_ID")
        code, _, h = raw_http(d, "POST", "/message?id=1")
        assert code == 405 and h["allow"] == "GET, OPTIONS"


def test_config_addresses_decode_as_go_unmarshal(nsqd):
    """PUT /config/nsqlookupd_tcp_addresses reads its body as json.Unmarshal into []string:
    a null element is "" (Go nsqd 1.3 answers ["127.0.0.1:1",""] side by side), a number, a
    BOM or NaN is 400 INVALID_VALUE."""
    put = "/config/nsqlookupd_tcp_addresses"
    assert nsqd.http("PUT", put, b'["127.0.0.1:1", null]')[:2] == (200, b'["127.0.0.1:1",""]')
    for body in (b'["127.0.0.1:1", 1]', b"\xef\xbb\xbf[]", b"[NaN]", b"[] []"):
        assert nsqd.http("PUT", put, body)[:2] == (400, b'{"message":"INVALID_VALUE"}'), body
    assert nsqd.http("PUT", put, b" [] ")[:2] == (200, b"[]")
