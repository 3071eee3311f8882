"""TCP V2 protocol against the real nsqpy-d process, with raw sockets and exact bytes.

Expected bytes and texts are nsqd 1.3's (nsqd/protocol_v2.go, the TCP protocol spec). These
tests check the wiring (sockets, the connection's timer, the daemon's loops); the time-based
rules (heartbeats and the read deadline, msg_timeout, REQ and DPUB delays, TOUCH) are tested
with an injected clock in tests/unit/test_protocol_v2.py, without waiting.
"""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest
from support.raw_client import RawClient, pack_len

from nsqpy import wire
from nsqpy.testing import wait_for

OK_FRAME = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


def consumer(nsqd, topic: str, channel: str, rdy: int = 10, **identify) -> RawClient:
    c = nsqd.raw()
    if identify:
        c.identify(**identify)
    c.sub(topic, channel, rdy=rdy)
    return c


def no_message_within(c: RawClient, seconds: float) -> bool:
    """True when no message frame arrives within ``seconds`` (heartbeats are fine)."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        try:
            ftype, data = c.read_frame(left)
        except TimeoutError:
            return True
        if ftype == wire.FRAME_TYPE_MESSAGE:
            return False


def test_pub_response_exact_bytes(nsqd):
    c = nsqd.raw()
    c.send(wire.encode_command(b"PUB", b"t", body=b"hello"))
    data = c.sock.recv(64)
    assert data == OK_FRAME


def test_publish_consume_and_message_frame(nsqd):
    p = nsqd.raw()
    before = time.time_ns()
    p.pub("t", b"hello world")
    c = consumer(nsqd, "t", "ch", rdy=1)
    # Read the raw frame bytes to check the layout byte for byte.
    ftype, data = c.read_non_heartbeat()
    assert ftype == wire.FRAME_TYPE_MESSAGE
    ts, attempts, mid, body = wire.decode_message(data)
    assert len(data) == 26 + len(b"hello world")
    assert body == b"hello world"
    assert attempts == 1
    assert before - 5_000_000_000 < ts <= time.time_ns()
    assert len(mid) == 16 and all(ch in b"0123456789abcdef" for ch in mid)
    c.cmd(b"FIN", mid)
    c.cmd(b"NOP")
    assert no_message_within(c, 0.3)
    st = nsqd.stats(topic="t")
    ch = st["topics"][0]["channels"][0]
    assert ch["in_flight_count"] == 0 and ch["depth"] == 0 and ch["message_count"] == 1


def test_identify_feature_negotiation_reply(nsqd):
    c = nsqd.raw()
    c.cmd(
        b"IDENTIFY",
        body=json.dumps(
            {
                "client_id": "c1",
                "hostname": "h1",
                "feature_negotiation": True,
                "heartbeat_interval": 5000,
                "output_buffer_size": 8192,
                "output_buffer_timeout": 100,
                "msg_timeout": 30000,
                "sample_rate": 0,
                "user_agent": "raw/1.0",
                # no --tls-cert: tls_v1 is answered false; snappy and deflate (tested in
                # test_compression.py) left off so that this reply is the whole exchange
                "tls_v1": True,
                "snappy": False,
                "deflate": False,
                "deflate_level": 3,
                "unknown_key": [1, 2],
            }
        ).encode(),
    )
    ftype, data = c.read_non_heartbeat()
    assert ftype == wire.FRAME_TYPE_RESPONSE
    assert data == (
        b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,'
        b'"msg_timeout":30000,"tls_v1":false,"deflate":false,"deflate_level":6,'
        b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
        b'"output_buffer_size":8192,"output_buffer_timeout":100}'
    )
    # Without feature_negotiation the answer is a plain OK.
    c2 = nsqd.raw()
    assert c2.identify(client_id="x") == b"OK"


def test_fan_out_to_two_channels(nsqd):
    a = consumer(nsqd, "fan", "a")
    b = consumer(nsqd, "fan", "b")
    p = nsqd.raw()
    for i in range(5):
        p.pub("fan", b"m%d" % i)
    got_a = [a.read_message()[3] for _ in range(5)]
    got_b = [b.read_message()[3] for _ in range(5)]
    assert got_a == got_b == [b"m%d" % i for i in range(5)]


def test_topic_without_channel_keeps_messages_for_first(nsqd):
    p = nsqd.raw()
    for i in range(3):
        p.pub("held", b"h%d" % i)
    assert nsqd.stats(topic="held")["topics"][0]["depth"] == 3
    c = consumer(nsqd, "held", "first")
    assert [c.read_message()[3] for _ in range(3)] == [b"h0", b"h1", b"h2"]


def test_two_consumers_share_a_channel(nsqd):
    c1 = consumer(nsqd, "share", "ch", rdy=100)
    c2 = consumer(nsqd, "share", "ch", rdy=100)
    p = nsqd.raw()
    n = 200
    p.send(wire.encode_mpub(b"share", [b"s%d" % i for i in range(n)]))
    p.expect_response()
    seen: list[bytes] = []
    counts = []
    for c in (c1, c2):
        k = 0
        while True:
            try:
                _, _, mid, body = c.read_message(timeout=1.0)
            except TimeoutError:
                break
            seen.append(body)
            c.cmd(b"FIN", mid)
            k += 1
        counts.append(k)
    assert sorted(seen) == sorted(b"s%d" % i for i in range(n))
    assert all(k > 0 for k in counts), counts


def test_req_zero_redelivers_at_once(nsqd):
    c = consumer(nsqd, "req0", "ch", rdy=1)
    nsqd.raw().pub("req0", b"x")
    mid = c.read_message()[2]
    c.cmd(b"REQ", mid, b"0")
    _, attempts, mid2, _ = c.read_message(timeout=1)
    assert (mid2, attempts) == (mid, 2)


def test_rdy_zero_stops_delivery(nsqd):
    c = consumer(nsqd, "rdy", "ch", rdy=1)
    p = nsqd.raw()
    p.pub("rdy", b"1")
    mid = c.read_message()[2]
    c.cmd(b"RDY", b"0")
    c.cmd(b"FIN", mid)
    p.pub("rdy", b"2")
    assert no_message_within(c, 0.5)
    c.cmd(b"RDY", b"1")
    assert c.read_message()[3] == b"2"


def test_rdy_bounds_in_flight(nsqd):
    c = consumer(nsqd, "window", "ch", rdy=3)
    p = nsqd.raw()
    p.send(wire.encode_mpub(b"window", [b"w%d" % i for i in range(10)]))
    p.expect_response()
    first = [c.read_message() for _ in range(3)]
    assert no_message_within(c, 0.4)
    c.cmd(b"FIN", first[0][2])
    assert c.read_message()[3] == b"w3"


def test_cls_answers_close_wait(nsqd):
    c = consumer(nsqd, "cls", "ch", rdy=5)
    c.cmd(b"CLS")
    c.expect_response(b"CLOSE_WAIT")
    nsqd.raw().pub("cls", b"late")
    assert no_message_within(c, 0.4)


def test_dpub_timeout_out_of_range(daemon_factory):
    d = daemon_factory("--max-req-timeout=10s")
    p = d.raw()
    p.cmd(b"DPUB", b"t", b"10001", body=b"x")
    assert p.read_non_heartbeat() == (
        wire.FRAME_TYPE_ERROR,
        b"E_INVALID DPUB timeout 10001 out of range 0-10000",
    )
    assert p.closed_by_server()


def test_heartbeat_timer_is_wired(nsqd):
    # one heartbeat at IDENTIFY's shortest interval (1 s): the connection's timer runs the
    # protocol's tick and flushes it; its timing is tested in tests/unit/test_protocol_v2.py
    c = nsqd.raw()
    c.identify(heartbeat_interval=1000)
    assert c.read_frame(timeout=3) == (wire.FRAME_TYPE_RESPONSE, b"_heartbeat_")
    c.cmd(b"NOP")
    c.cmd(b"PUB", b"hb", body=b"x")
    c.expect_response()


def test_disconnect_requeues_in_flight_at_once(nsqd):
    a = consumer(nsqd, "drop", "ch", rdy=5)
    nsqd.raw().pub("drop", b"d")
    mid = a.read_message()[2]
    a.close()
    b = consumer(nsqd, "drop", "ch", rdy=5)
    _, attempts, mid2, _ = b.read_message(timeout=2)
    assert (mid2, attempts) == (mid, 2)


def test_ephemeral_channel_goes_with_last_client(nsqd):
    c = consumer(nsqd, "eph", "tmp#ephemeral")
    st = nsqd.stats(topic="eph")["topics"][0]
    assert [ch["channel_name"] for ch in st["channels"]] == ["tmp#ephemeral"]
    c.close()
    wait_for(
        lambda: nsqd.stats(topic="eph")["topics"][0]["channels"] == [],
        what="ephemeral channel deleted",
    )


def test_ephemeral_topic_goes_with_last_channel(nsqd):
    c = consumer(nsqd, "tmp#ephemeral", "c#ephemeral")
    assert nsqd.stats(topic="tmp#ephemeral")["topics"] is not None
    c.close()
    wait_for(
        lambda: nsqd.stats(topic="tmp#ephemeral")["topics"] is None, what="ephemeral topic deleted"
    )


# ----------------------------------------------------------------------------- bad input


def expect_fatal(c: RawClient, text: bytes) -> None:
    assert c.read_non_heartbeat() == (wire.FRAME_TYPE_ERROR, text)
    assert c.closed_by_server()


def test_bad_magic(nsqd):
    c = nsqd.raw(magic=b"  V1")
    assert c.sock.recv(64) == b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"
    assert c.closed_by_server()
    assert_serving(nsqd)


@pytest.mark.parametrize(
    "cmd,text",
    [
        (
            wire.encode_command(b"PUB", b"bad!topic", body=b"x"),
            b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid',
        ),
        (
            wire.encode_command(b"PUB", b"a" * 65, body=b"x"),
            b'E_BAD_TOPIC PUB topic name "' + b"a" * 65 + b'" is not valid',
        ),
        (
            wire.encode_mpub(b"bad!topic", [b"x"]),
            b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!topic" is not valid',
        ),
        (b"SUB t bad:chan\n", b'E_BAD_CHANNEL SUB channel name "bad:chan" is not valid'),
        (b"SUB t\n", b"E_INVALID SUB insufficient number of parameters"),
        (b"PUB\n", b"E_INVALID PUB insufficient number of parameters"),
        (b"BOGUS x\n", b"E_INVALID invalid command BOGUS"),
        (b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
        (b"FIN 0123456789abcdef\n", b"E_INVALID cannot FIN in current state"),
        (b"CLS\n", b"E_INVALID cannot CLS in current state"),
        (
            wire.encode_command(b"IDENTIFY", body=b"{bad}"),
            b"E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            wire.encode_command(b"IDENTIFY", body=b'{"heartbeat_interval":"1s"}'),
            b"E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            wire.encode_command(b"IDENTIFY", body=b'{"heartbeat_interval":500}'),
            b"E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid",
        ),
        (
            wire.encode_command(b"IDENTIFY", body=b'{"msg_timeout":999}'),
            b"E_BAD_BODY IDENTIFY msg timeout (999) is invalid",
        ),
        (
            wire.encode_command(b"IDENTIFY", body=b'{"sample_rate":100}'),
            b"E_BAD_BODY IDENTIFY sample rate (100) is invalid",
        ),
        (b"IDENTIFY\n" + pack_len(0), b"E_BAD_BODY IDENTIFY invalid body size 0"),
        (b"PUB t\n" + pack_len(0), b"E_BAD_MESSAGE PUB invalid message body size 0"),
        (
            b"PUB t\n" + pack_len(1024 * 1024 + 1),
            b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
        ),
        (
            b"MPUB t\n" + pack_len(5 * 1024 * 1024 + 1),
            b"E_BAD_BODY MPUB body too big 5242881 > 5242880",
        ),
        (
            b"MPUB t\n" + pack_len(9) + pack_len(2) + pack_len(1) + b"a",
            b"E_BAD_MESSAGE MPUB failed to read message(1) body size",
        ),
        (
            b"MPUB t\n" + pack_len(9) + pack_len(0) + pack_len(1) + b"a",
            b"E_BAD_BODY MPUB invalid message count 0",
        ),
        (b"AUTH\n" + pack_len(3) + b"abc", b"E_AUTH_DISABLED AUTH disabled"),
        (b"DPUB t x\n", b"E_INVALID DPUB could not parse timeout x"),
    ],
)
def test_bad_input_gets_nsqd_error_and_close(nsqd, cmd, text):
    c = nsqd.raw()
    c.send(cmd)
    expect_fatal(c, text)
    assert_serving(nsqd)


def test_oversize_body_refused_before_it_is_sent(nsqd):
    # Only the size is sent: the error must come without the daemon waiting for 2 MiB.
    c = nsqd.raw()
    c.send(b"PUB t\n" + pack_len(2 * 1024 * 1024))
    expect_fatal(c, b"E_BAD_MESSAGE PUB message too big 2097152 > 1048576")


def test_mpub_with_count_smaller_than_body(nsqd):
    c = nsqd.raw()
    body = pack_len(1) + pack_len(1) + b"a" + pack_len(1) + b"b"
    c.send(b"MPUB t\n" + pack_len(len(body)) + body)
    ftype, data = c.read_non_heartbeat()
    assert ftype == wire.FRAME_TYPE_ERROR and data.startswith(b"E_BAD_BODY MPUB body size 14")
    assert c.closed_by_server()
    # nothing was published (nsqd has made the topic before it reads an MPUB body)
    assert [t["message_count"] for t in nsqd.stats(topic="t")["topics"]] == [0]
    assert_serving(nsqd)


def test_fin_unknown_id_is_not_fatal(nsqd):
    c = consumer(nsqd, "fin", "ch", rdy=1)
    c.cmd(b"FIN", b"0123456789abcdef")
    assert c.read_non_heartbeat() == (
        wire.FRAME_TYPE_ERROR,
        b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight",
    )
    # Still connected and consuming.
    nsqd.raw().pub("fin", b"ok")
    assert c.read_message()[3] == b"ok"


def test_fin_of_another_clients_message(nsqd):
    a = consumer(nsqd, "own", "ch", rdy=1)
    b = consumer(nsqd, "own", "ch", rdy=1)
    nsqd.raw().pub("own", b"x")
    got = None
    for c, other in ((a, b), (b, a)):
        try:
            got = (c.read_message(timeout=0.5)[2], other)
            break
        except TimeoutError:
            continue
    assert got is not None
    mid, other = got
    other.cmd(b"FIN", mid)
    assert other.read_non_heartbeat() == (
        wire.FRAME_TYPE_ERROR,
        b"E_FIN_FAILED FIN " + mid + b" failed client does not own message",
    )


def test_fin_bad_id_length_is_fatal(nsqd):
    c = consumer(nsqd, "finid", "ch", rdy=1)
    c.cmd(b"FIN", b"abc")
    expect_fatal(c, b"E_INVALID invalid message ID")


def test_rdy_above_max_is_fatal(nsqd):
    c = consumer(nsqd, "rdymax", "ch")
    c.cmd(b"RDY", b"2501")
    expect_fatal(c, b"E_INVALID RDY count 2501 out of range 0-2500")
    assert_serving(nsqd)


def test_rdy_unparsable_is_fatal(nsqd):
    c = consumer(nsqd, "rdybad", "ch")
    c.cmd(b"RDY", b"-1")
    expect_fatal(c, b"E_INVALID RDY could not parse count -1")


def test_sub_twice_is_fatal(nsqd):
    c = consumer(nsqd, "twice", "ch")
    c.cmd(b"SUB", b"twice", b"ch")
    expect_fatal(c, b"E_INVALID cannot SUB in current state")


def test_identify_after_sub_is_fatal(nsqd):
    c = consumer(nsqd, "idsub", "ch")
    c.cmd(b"IDENTIFY", body=b"{}")
    expect_fatal(c, b"E_INVALID cannot IDENTIFY in current state")


def test_sub_with_heartbeats_disabled_is_fatal(nsqd):
    c = nsqd.raw()
    c.identify(heartbeat_interval=-1)
    c.cmd(b"SUB", b"t", b"c")
    expect_fatal(c, b"E_INVALID cannot SUB with heartbeats disabled")


def test_commands_split_across_packets_and_crlf(nsqd):
    c = nsqd.raw()
    data = b"PUB split\r\n" + pack_len(5) + b"hello" + b"NOP\n"
    for i in range(len(data)):
        c.send(data[i : i + 1])
        time.sleep(0.001)
    c.expect_response()
    d = consumer(nsqd, "split", "ch")
    assert d.read_message()[3] == b"hello"


def test_pipelined_commands_in_one_packet(nsqd):
    c = nsqd.raw()
    c.send(b"".join(wire.encode_command(b"PUB", b"pipe", body=b"p%d" % i) for i in range(50)))
    for _ in range(50):
        c.expect_response()
    assert nsqd.stats(topic="pipe")["topics"][0]["message_count"] == 50


def assert_serving(nsqd) -> None:
    """After someone's bad input, another client still publishes and consumes."""
    p = nsqd.raw()
    body = b"alive-%d" % time.monotonic_ns()
    p.pub("alive", body)
    c = consumer(nsqd, "alive", f"c{time.monotonic_ns()}", rdy=100)
    bodies = []
    while body not in bodies:
        bodies.append(c.read_message(timeout=3)[3])
    c.close()
    p.close()
    assert nsqd.alive()


def test_many_bad_clients_do_not_disturb_a_good_one(nsqd):
    good = consumer(nsqd, "steady", "ch", rdy=100)
    p = nsqd.raw()
    for i in range(20):
        bad = nsqd.raw()
        bad.send(struct.pack(">i", -5) + b"\xff\x00garbage\n")
        bad.closed_by_server(timeout=2)
        p.pub("steady", b"s%d" % i)
    got = [good.read_message()[3] for _ in range(20)]
    assert got == [b"s%d" % i for i in range(20)]


# ------------------------------------------------------------------------------------------
# byte-level differences found against nsqd 1.3 (EOF inside a command, IDENTIFY's JSON, topic
# creation by MPUB, 64-bit wrap of RDY/DPUB/REQ numbers). Checked against the Go binary.


@pytest.fixture(scope="module")
def shared_nsqd(tmp_path_factory):
    """One daemon for the many one-connection error cases (each uses its own topic)."""
    from support.daemons import Daemon

    d = Daemon([], tmp_path_factory.mktemp("shared"))
    yield d
    assert d.stop() == 0, d.log_text()[-3000:]


def half_close(d, data: bytes) -> list[tuple[int, bytes]]:
    """Send ``data`` after the magic, shut our write side, return every frame until the
    daemon closes (it must close within the timeout)."""
    c = d.raw()
    try:
        c.send(data)
        c.sock.shutdown(socket.SHUT_WR)
        frames = []
        while True:
            try:
                frames.append(c.read_frame(timeout=5))
            except ConnectionError:
                return frames
    finally:
        c.close()


def topic_names(d) -> list[str]:
    return sorted(t["topic_name"] for t in d.stats()["topics"] or [])


L = pack_len
ERR = wire.FRAME_TYPE_ERROR


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"PUB e1\n", b"E_BAD_MESSAGE PUB failed to read message body size"),
        (b"PUB e1\n\x00\x00", b"E_BAD_MESSAGE PUB failed to read message body size"),
        (b"PUB e1\n" + L(10) + b"abc", b"E_BAD_MESSAGE PUB failed to read message body"),
        (b"DPUB e1 10\n\x00", b"E_BAD_MESSAGE DPUB failed to read message body size"),
        (b"DPUB e1 10\n" + L(4) + b"x", b"E_BAD_MESSAGE DPUB failed to read message body"),
        (b"IDENTIFY\n\x00", b"E_BAD_BODY IDENTIFY failed to read body size"),
        (b"IDENTIFY\n" + L(10) + b"{}", b"E_BAD_BODY IDENTIFY failed to read body"),
        (b"AUTH\n", b"E_BAD_BODY AUTH failed to read body size"),
        (b"AUTH\n" + L(5) + b"x", b"E_BAD_BODY AUTH failed to read body"),
        (b"NOP\nPUB e1\n" + L(2) + b"a", b"E_BAD_MESSAGE PUB failed to read message body"),
    ],
)
def test_eof_inside_body_command_answers_nsqds_error(shared_nsqd, data, text):
    """nsqd reads a body command's size and body from the socket: an EOF there fails the read
    and is answered with the command's error frame, then the connection closes."""
    assert half_close(shared_nsqd, data) == [(ERR, text)]
    assert "e1" not in topic_names(shared_nsqd)  # PUB and DPUB make the topic after the body


@pytest.mark.parametrize(
    ("topic", "body", "text"),
    [
        ("m1", b"", b"E_BAD_BODY MPUB failed to read body size"),
        ("m2", L(20)[:3], b"E_BAD_BODY MPUB failed to read body size"),
        ("m3", L(20) + b"\x00\x00", b"E_BAD_BODY MPUB failed to read message count"),
        ("m4", L(20) + L(2) + b"\x00", b"E_BAD_MESSAGE MPUB failed to read message(0) body size"),
        ("m5", L(20) + L(2) + L(3) + b"ab", b"E_BAD_MESSAGE MPUB failed to read message body"),
        (
            "m6",
            L(30) + L(2) + L(1) + b"a" + L(5),
            b"E_BAD_MESSAGE MPUB failed to read message body",
        ),
        ("m7", L(20) + L(0), b"E_BAD_BODY MPUB invalid message count 0"),
        ("m8", L(20) + L(1) + L(0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
        ("m9", L(20) + L(1) + L(1), b"E_BAD_MESSAGE MPUB failed to read message body"),
    ],
)
def test_eof_inside_mpub_answers_the_read_that_failed(shared_nsqd, topic, body, text):
    """nsqd reads MPUB's count, then each size and message, from the socket: the first read
    cut short by the EOF names the error. It made the topic before reading the body."""
    assert half_close(shared_nsqd, b"MPUB " + topic.encode() + b"\n" + body) == [(ERR, text)]
    assert topic in topic_names(shared_nsqd)


def test_eof_between_commands_or_in_a_line_is_silent(shared_nsqd):
    assert half_close(shared_nsqd, b"") == []
    assert half_close(shared_nsqd, b"PUB e2") == []
    assert half_close(shared_nsqd, b"NOP\nNO") == []
    assert half_close(shared_nsqd, b"PUB e2\n" + L(1) + b"a") == [(0, b"OK")]
    assert half_close(shared_nsqd, b"PUB e2\n" + L(1) + b"aPUB e2\n" + L(2) + b"b") == [
        (0, b"OK"),
        (ERR, b"E_BAD_MESSAGE PUB failed to read message body"),
    ]


def test_eof_inside_magic_is_silent(shared_nsqd):
    s = socket.create_connection(("127.0.0.1", shared_nsqd.tcp_port), timeout=5)
    try:
        s.sendall(b"  V")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(64) == b""
    finally:
        s.close()


@pytest.mark.parametrize(
    "body",
    [
        b"\xef\xbb\xbf{}",  # UTF-8 BOM
        "{}".encode("utf-16-le"),
        "{}".encode("utf-16"),
        "{}".encode("utf-32"),
        b'{"x": NaN}',
        b'{"x": -Infinity}',
        b"{}\xff",
    ],
)
def test_identify_json_is_utf8_go_json_only(shared_nsqd, body):
    """Go's json.Unmarshal takes neither a BOM, UTF-16/32 text nor NaN/Infinity (Python's
    json.loads(bytes) takes all of them)."""
    c = shared_nsqd.raw()
    c.cmd(b"IDENTIFY", body=body)
    expect_fatal(c, b"E_BAD_BODY IDENTIFY failed to decode JSON body")


def test_identify_invalid_utf8_inside_a_string_is_replaced(shared_nsqd):
    c = shared_nsqd.raw()
    try:
        c.cmd(b"IDENTIFY", body=b'{"client_id":"a\xffb","hostname":"h\xc3"}')
        c.expect_response()
        c.sub("idu", "ch")

        def client():
            t = shared_nsqd.stats(topic="idu")["topics"]
            return t and t[0]["channels"][0]["clients"]

        [cl] = wait_for(client, timeout=5, what="client in stats")
        assert (cl["client_id"], cl["hostname"]) == ("a\ufffdb", "h\ufffd")
    finally:
        c.close()


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (L(0), b"E_BAD_BODY MPUB invalid body size 0"),
        (L(999_999_999), b"E_BAD_BODY MPUB body too big 999999999 > 5242880"),
        (L(8) + L(0) + L(0), b"E_BAD_BODY MPUB invalid message count 0"),
        (L(8) + L(1) + L(0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    ],
)
def test_mpub_errors_after_the_topic_is_made(nsqd, body, text):
    """nsqd's MPUB gets (creates) the topic right after the name and auth checks, before it
    reads the body: a refused MPUB leaves the topic, empty."""
    c = nsqd.raw()
    c.send(b"MPUB mt\n" + body)
    expect_fatal(c, text)
    [t] = nsqd.stats()["topics"]
    assert (t["topic_name"], t["message_count"]) == ("mt", 0)


@pytest.mark.parametrize(
    ("cmd", "text"),
    [
        (b"PUB pt\n" + L(0), b"E_BAD_MESSAGE PUB invalid message body size 0"),
        (b"PUB pt\n" + L(2_000_000), b"E_BAD_MESSAGE PUB message too big 2000000 > 1048576"),
        (b"DPUB pt 10\n" + L(0), b"E_BAD_MESSAGE DPUB invalid message body size 0"),
        (b"DPUB pt x\n" + L(1) + b"a", b"E_INVALID DPUB could not parse timeout x"),
        (
            b"DPUB pt 3600001\n" + L(1) + b"a",
            b"E_INVALID DPUB timeout 3600001 out of range 0-3600000",
        ),
        (b"MPUB bad!\n" + L(0), b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!" is not valid'),
    ],
)
def test_pub_dpub_errors_make_no_topic(shared_nsqd, cmd, text):
    """PUB and DPUB get the topic only once the body is read and checked (nsqd 1.3)."""
    c = shared_nsqd.raw()
    c.send(cmd)
    expect_fatal(c, text)
    assert not {"pt", "bad!"} & set(topic_names(shared_nsqd))


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (b"99999999999999999999", b"7766279631452241919"),
        (b"18446744073709551615", b"-1"),
        (b"9223372036854775808", b"-9223372036854775808"),
        (b"18446744073709551616", None),  # wraps to 0: a valid RDY 0
        (b"9" * 5000, b"-1"),
    ],
)
def test_rdy_count_wraps_as_nsqds_uint64(shared_nsqd, count, shown):
    """nsqd parses RDY's count into a uint64 that wraps, then prints it as int64."""
    c = shared_nsqd.raw()
    try:
        c.sub("rdywrap", "ch")
        c.cmd(b"RDY", count)
        if shown is None:
            c.cmd(b"NOP")
            c.pub("rdywrap", b"x")  # still connected; RDY 0 sends nothing
            assert no_message_within(c, 0.3)
        else:
            expect_fatal(c, b"E_INVALID RDY count " + shown + b" out of range 0-2500")
    finally:
        c.close()


def test_dpub_timeout_wraps_as_nsqds_duration(shared_nsqd):
    c = shared_nsqd.raw()
    c.send(b"DPUB dw 99999999999999999999\n" + L(1) + b"a")
    expect_fatal(c, b"E_INVALID DPUB timeout 7766279631452241919 out of range 0-3600000")
    c = shared_nsqd.raw()
    c.send(b"DPUB dw 18446744073709551615\n" + L(1) + b"a")  # -1 ms
    expect_fatal(c, b"E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000")


def test_req_timeout_wrapping_negative_is_clamped_to_zero(shared_nsqd):
    p = shared_nsqd.raw()
    c = shared_nsqd.raw()
    try:
        c.sub("reqwrap", "ch", rdy=1)
        p.pub("reqwrap", b"x")
        _, attempts, mid, _ = c.read_message()
        assert attempts == 1
        c.cmd(b"REQ", mid, b"18446744073709551615")  # int64 -1 ms: nsqd requeues at once
        _, attempts, mid2, body = c.read_message(timeout=3)
        assert (mid2, attempts, body) == (mid, 2, b"x")
    finally:
        c.close()
        p.close()
