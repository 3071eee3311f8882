"""Unit tests of the V2 protocol's sans-IO core (nsqpy/protocol_v2.py) with an injected clock.

No sockets, no event loop and no sleeps: a real NSQD (its topics and channels, a temp data
dir) and a ClientState per client; commands go through wire.CommandParser as bytes, exactly
as client_v2.Connection feeds them (so the checks before a body run too), and the replies are
read back from the client's output buffer. Time is a number the test moves: the protocol's
clock (seconds) and, for topics made with ``clocked_topic``, their channels' clock (ns).
Expected bytes and texts are nsqd 1.3's (nsqd/protocol_v2.go, client_v2.go).
"""

from __future__ import annotations

import json
import re
import ssl
import struct

import pytest

from nsqpy import wire
from nsqpy.auth import Authorization, AuthState
from nsqpy.channel import Channel
from nsqpy.nsqd import NSQD
from nsqpy.options import Options
from nsqpy.protocol_v2 import (
    CLOSE,
    LARGE_IDENTIFY,
    STATE_CLOSING,
    STATE_SUBSCRIBED,
    SUSPEND,
    TIMERS,
    UPGRADE,
    WAIT_AUTH,
    WAIT_DECODE,
    ClientState,
    ProtocolV2,
    decode_identify_aside,
)
from nsqpy.topic import Topic

MS = 1_000_000  # ns
_FRAME = struct.Struct(">lL")


class Clock:
    """Monotonic time the test moves: ``s()`` seconds for the protocol, ``ns()`` for channels."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000 * MS

    def s(self) -> float:
        return self.now_ns / 1e9

    def ns(self) -> int:
        return self.now_ns

    def advance_ms(self, ms: int) -> None:
        self.now_ns += ms * MS


class Client:
    """One client driven in process: ``send`` feeds wire bytes, ``frames`` takes the replies."""

    def __init__(self, core: ProtocolV2) -> None:
        self.core = core
        self.state = ClientState(core)
        opts = core.opts
        self.parser = wire.CommandParser(opts.max_msg_size, opts.max_body_size, self.state.precheck)

    def send(self, data: bytes) -> int:
        """Run every whole command in ``data``; returns the action bits they gave (or-ed),
        stopping at the first CLOSE, UPGRADE or SUSPEND as the connection does. The client
        read something now (its read deadline moves)."""
        c = self.state
        c.last_read = self.core.clock()
        self.parser.feed(data)
        acts = 0
        while True:
            try:
                cmd = self.parser.next_command()
            except wire.ClientError as e:
                return acts | self.core.error(c, e)
            if cmd is None:
                break
            act = self.core.execute(c, cmd[0], cmd[1], cmd[2])
            acts |= act
            if act & (CLOSE | UPGRADE | SUSPEND):
                break
        self.notify()
        return acts

    def cmd(self, name: bytes, *params: bytes, body: bytes | None = None) -> int:
        return self.send(wire.encode_command(name, *params, body=body))

    def notify(self) -> None:
        """What the connection does after a pass: let the channel see FIN/REQ/RDY room."""
        c = self.state
        if c.room_changed and c.channel is not None:
            c.room_changed = False
            c.channel.notify_ready(c)

    def frames(self) -> list[tuple[int, bytes]]:
        """The frames written since the last call (type, data)."""
        out = bytes(self.state.out)
        self.state.out.clear()
        frames = []
        pos = 0
        while pos < len(out):
            size, ftype = _FRAME.unpack_from(out, pos)
            frames.append((ftype, out[pos + 8 : pos + 4 + size]))
            pos += 4 + size
        return frames

    def only(self) -> tuple[int, bytes]:
        [frame] = self.frames()
        return frame

    def messages(self) -> list[tuple[int, bytes, bytes]]:
        """The message frames written since the last call: (attempts, ID, body)."""
        got = []
        for ftype, data in self.frames():
            assert ftype == wire.FRAME_TYPE_MESSAGE, (ftype, data)
            got.append((struct.unpack_from(">H", data, 8)[0], data[10:26], data[26:]))
        return got


def ok() -> tuple[int, bytes]:
    return (wire.FRAME_TYPE_RESPONSE, b"OK")


def err(text: bytes) -> tuple[int, bytes]:
    return (wire.FRAME_TYPE_ERROR, text)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_core(tmp_path, clock):
    def make(**opts) -> ProtocolV2:
        nsqd = NSQD(Options(data_path=str(tmp_path), **opts))
        return ProtocolV2(nsqd, clock.s)

    return make


@pytest.fixture
def core(make_core) -> ProtocolV2:
    return make_core()


def clocked_topic(core: ProtocolV2, name: str, clock: Clock) -> Topic:
    """A memory-only topic in the daemon's registry whose channels run on ``clock``."""
    max_ms = core.opts.max_msg_timeout_ms

    def new_channel(t: Topic, ch: str) -> Channel:
        return Channel(t.name, ch, clock_ns=clock.ns, max_msg_timeout_ms=max_ms)

    t = Topic(name, new_channel)
    core.nsqd.topics[name] = t
    return t


def consumer(core: ProtocolV2, topic: str, channel: str, rdy: int = 1, **identify) -> Client:
    c = Client(core)
    if identify:
        assert c.cmd(b"IDENTIFY", body=json.dumps(identify).encode()) == TIMERS
        assert c.only() == ok()
    assert c.cmd(b"SUB", topic.encode(), channel.encode()) == 0
    assert c.only() == ok()
    assert c.cmd(b"RDY", b"%d" % rdy) == 0
    return c


def publish(core: ProtocolV2, topic: str, *bodies: bytes) -> None:
    p = Client(core)
    for body in bodies:
        assert p.cmd(b"PUB", topic.encode(), body=body) == 0
        assert p.only() == ok()


# ----------------------------------------------------------------------------- publishing


def test_pub_answers_ok_counts_and_queues(core) -> None:
    c = Client(core)
    assert c.cmd(b"PUB", b"t", body=b"hello") == 0
    assert bytes(c.state.out) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert core.nsqd.topics["t"].depth == 1
    assert c.state.pub_counts == {"t": 1}
    assert c.state.stats().pub_counts == {"t": 1}


@pytest.mark.parametrize(
    "data, text",
    [
        (b"PUB\n", b"E_INVALID PUB insufficient number of parameters"),
        (b"PUB bad!topic\n", b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
        (b"MPUB\n", b"E_INVALID MPUB insufficient number of parameters"),
        (b"MPUB b@d\n", b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "b@d" is not valid'),
        (b"DPUB t\n", b"E_INVALID DPUB insufficient number of parameters"),
        (b"DPUB t x\n", b"E_INVALID DPUB could not parse timeout x"),
        (b"DPUB t 3600001\n", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
        (b"FOO\n", b"E_INVALID invalid command FOO"),
    ],
)
def test_publish_checks_before_the_body_are_fatal(core, data, text) -> None:
    c = Client(core)
    assert c.send(data) == CLOSE
    assert c.only() == err(text)
    assert core.nsqd.topics == {}


def test_pub_body_over_max_msg_size_is_refused_before_it_is_read(make_core) -> None:
    c = Client(make_core(max_msg_size=10))
    assert c.send(b"PUB t\n" + struct.pack(">l", 11)) == CLOSE
    assert c.only() == err(b"E_BAD_MESSAGE PUB message too big 11 > 10")


def test_mpub_queues_all_and_counts_them(core) -> None:
    c = Client(core)
    assert c.send(wire.encode_mpub(b"m", [b"a", b"b", b"c"])) == 0
    assert c.only() == ok()
    assert core.nsqd.topics["m"].depth == 3
    assert c.state.pub_counts == {"m": 3}


def test_mpub_makes_the_topic_before_its_body_fails(core) -> None:
    c = Client(core)
    assert c.send(b"MPUB m2\n" + struct.pack(">ll", 8, 0)) == CLOSE
    assert c.only() == err(b"E_BAD_BODY MPUB invalid message count 0")
    assert "m2" in core.nsqd.topics


def test_dpub_is_deferred_for_its_delay(core, clock) -> None:
    t = clocked_topic(core, "d", clock)
    s = consumer(core, "d", "ch")
    p = Client(core)
    assert p.cmd(b"DPUB", b"d", b"1000", body=b"later") == 0
    assert p.only() == ok()
    ch = t.channels["ch"]
    assert len(ch.deferred) == 1 and s.frames() == []
    clock.advance_ms(999)
    assert not ch.process_deferred() and s.frames() == []
    clock.advance_ms(1)
    assert ch.process_deferred()
    [(attempts, _, body)] = s.messages()
    assert (attempts, body) == (1, b"later")


def test_dpub_zero_is_a_pub(core, clock) -> None:
    clocked_topic(core, "d0", clock)
    s = consumer(core, "d0", "ch")
    p = Client(core)
    assert p.cmd(b"DPUB", b"d0", b"0", body=b"now") == 0
    assert [m[2] for m in s.messages()] == [b"now"]


# ----------------------------------------------------------------------------- consuming


def test_sub_rdy_delivers_and_fin_frees_room(core, clock) -> None:
    clocked_topic(core, "s", clock)
    c = consumer(core, "s", "ch", rdy=1)
    assert c.state.state == STATE_SUBSCRIBED
    publish(core, "s", b"1", b"2")
    [(attempts, mid, body)] = c.messages()
    assert (attempts, body) == (1, b"1")
    assert c.state.in_flight_count == 1
    assert c.cmd(b"FIN", mid) == 0
    assert [m[2] for m in c.messages()] == [b"2"]
    assert (c.state.finish_count, c.state.message_count) == (1, 2)


def test_a_run_of_fins_goes_through_finish_ids(core, clock) -> None:
    clocked_topic(core, "f", clock)
    c = consumer(core, "f", "ch", rdy=3)
    publish(core, "f", b"a", b"b", b"c")
    ids = [m[1] for m in c.messages()]
    core.finish_ids(c.state, [*ids, b"0123456789abcdef"])
    assert c.only() == err(b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
    assert (c.state.finish_count, c.state.in_flight_count) == (3, 0)


def test_rdy_bounds_in_flight_and_zero_stops(core, clock) -> None:
    clocked_topic(core, "r", clock)
    c = consumer(core, "r", "ch", rdy=2)
    publish(core, "r", b"1", b"2", b"3")
    first = c.messages()
    assert [m[2] for m in first] == [b"1", b"2"]
    assert c.cmd(b"RDY", b"0") == 0
    assert c.cmd(b"FIN", first[0][1]) == 0
    assert c.frames() == []
    assert c.cmd(b"RDY", b"2") == 0
    assert [m[2] for m in c.messages()] == [b"3"]


@pytest.mark.parametrize(
    "data, text",
    [
        (b"RDY 2501\n", b"E_INVALID RDY count 2501 out of range 0-2500"),
        (b"RDY x\n", b"E_INVALID RDY could not parse count x"),
        (b"RDY 18446744073709551615\n", b"E_INVALID RDY count -1 out of range 0-2500"),
        (b"FIN 0123\n", b"E_INVALID invalid message ID"),
        (b"FIN\n", b"E_INVALID FIN insufficient number of params"),
        (b"REQ 0123456789abcdef\n", b"E_INVALID REQ insufficient number of params"),
        (b"REQ 0123456789abcdef x\n", b"E_INVALID REQ could not parse timeout x"),
        (b"TOUCH\n", b"E_INVALID TOUCH insufficient number of params"),
        (b"SUB s ch\n", b"E_INVALID cannot SUB in current state"),
        (
            b"IDENTIFY\n" + struct.pack(">l", 2) + b"{}",
            b"E_INVALID cannot IDENTIFY in current state",
        ),
        (b"AUTH\n" + struct.pack(">l", 1) + b"x", b"E_INVALID cannot AUTH in current state"),
    ],
)
def test_subscribed_client_errors_are_fatal(core, clock, data, text) -> None:
    clocked_topic(core, "s", clock)
    c = consumer(core, "s", "ch")
    assert c.send(data) == CLOSE
    assert c.only() == err(text)


@pytest.mark.parametrize(
    "cmd, params, text",
    [
        (b"RDY", (b"1",), b"E_INVALID cannot RDY in current state"),
        (b"FIN", (b"0123456789abcdef",), b"E_INVALID cannot FIN in current state"),
        (b"REQ", (b"0123456789abcdef", b"0"), b"E_INVALID cannot REQ in current state"),
        (b"TOUCH", (b"0123456789abcdef",), b"E_INVALID cannot TOUCH in current state"),
        (b"CLS", (), b"E_INVALID cannot CLS in current state"),
        (b"SUB", (b"t",), b"E_INVALID SUB insufficient number of parameters"),
        (b"SUB", (b"t!", b"c"), b'E_BAD_TOPIC SUB topic name "t!" is not valid'),
        (b"SUB", (b"t", b"c!"), b'E_BAD_CHANNEL SUB channel name "c!" is not valid'),
    ],
)
def test_commands_out_of_state_are_fatal(core, cmd, params, text) -> None:
    c = Client(core)
    assert c.cmd(cmd, *params) == CLOSE
    assert c.only() == err(text)


@pytest.mark.parametrize("cmd", [b"FIN", b"REQ", b"TOUCH"])
def test_unknown_id_is_not_fatal(core, clock, cmd) -> None:
    clocked_topic(core, "u", clock)
    c = consumer(core, "u", "ch")
    params = (b"0123456789abcdef", b"0") if cmd == b"REQ" else (b"0123456789abcdef",)
    assert c.cmd(cmd, *params) == 0
    assert c.only() == err(b"E_%s_FAILED %s 0123456789abcdef failed ID not in flight" % (cmd, cmd))


def test_fin_of_another_clients_message_fails(core, clock) -> None:
    clocked_topic(core, "o", clock)
    a = consumer(core, "o", "ch")
    b = consumer(core, "o", "ch")
    publish(core, "o", b"x")
    [(_, mid, _)] = a.messages() or b.messages()
    other = b if a.state.in_flight_count else a
    assert other.cmd(b"FIN", mid) == 0
    ftype, text = other.only()
    assert ftype == wire.FRAME_TYPE_ERROR and text.startswith(b"E_FIN_FAILED FIN " + mid)


def test_req_with_delay_comes_back_after_it(core, clock) -> None:
    t = clocked_topic(core, "q", clock)
    c = consumer(core, "q", "ch")
    publish(core, "q", b"again")
    [(_, mid, _)] = c.messages()
    assert c.cmd(b"REQ", mid, b"1000") == 0
    assert c.frames() == [] and c.state.requeue_count == 1
    ch = t.channels["ch"]
    clock.advance_ms(999)
    assert not ch.process_deferred()
    clock.advance_ms(1)
    assert ch.process_deferred()
    assert c.messages() == [(2, mid, b"again")]
    assert ch.requeue_count == 1


def test_req_zero_comes_back_at_once(core, clock) -> None:
    clocked_topic(core, "q0", clock)
    c = consumer(core, "q0", "ch")
    publish(core, "q0", b"x")
    [(_, mid, _)] = c.messages()
    assert c.cmd(b"REQ", mid, b"0") == 0
    assert c.messages() == [(2, mid, b"x")]


def test_req_timeout_is_clamped_to_max_req_timeout(make_core, clock) -> None:
    core = make_core(max_req_timeout_ms=2000)
    t = clocked_topic(core, "qc", clock)
    c = consumer(core, "qc", "ch")
    publish(core, "qc", b"x")
    [(_, mid, _)] = c.messages()
    assert c.cmd(b"REQ", mid, b"999999") == 0
    clock.advance_ms(1999)
    assert not t.channels["ch"].process_deferred()
    clock.advance_ms(1)
    assert t.channels["ch"].process_deferred()


def test_identify_msg_timeout_times_a_message_out(core, clock) -> None:
    t = clocked_topic(core, "to", clock)
    c = consumer(core, "to", "ch", msg_timeout=1000)
    publish(core, "to", b"slow")
    [(_, mid, _)] = c.messages()
    ch = t.channels["ch"]
    clock.advance_ms(999)
    assert not ch.process_in_flight()
    clock.advance_ms(1)
    assert ch.process_in_flight()
    assert c.messages() == [(2, mid, b"slow")]
    assert ch.timeout_count == 1


def test_touch_restarts_the_timeout(core, clock) -> None:
    t = clocked_topic(core, "touch", clock)
    c = consumer(core, "touch", "ch", msg_timeout=1000)
    publish(core, "touch", b"t")
    [(_, mid, _)] = c.messages()
    ch = t.channels["ch"]
    for _ in range(3):
        clock.advance_ms(600)
        assert not ch.process_in_flight()
        assert c.cmd(b"TOUCH", mid) == 0
        assert c.frames() == []
    clock.advance_ms(999)  # 2.8 s after delivery, without TOUCH it came back at 1 s
    assert not ch.process_in_flight()
    clock.advance_ms(1)
    assert ch.process_in_flight()
    assert c.messages() == [(2, mid, b"t")]


def test_cls_answers_close_wait_and_ignores_rdy_after(core, clock) -> None:
    clocked_topic(core, "cls", clock)
    c = consumer(core, "cls", "ch", rdy=5)
    assert c.cmd(b"CLS") == 0
    assert c.only() == (wire.FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")
    assert c.state.state == STATE_CLOSING and c.state.rdy == 0
    assert c.cmd(b"RDY", b"5") == 0
    publish(core, "cls", b"late")
    assert c.frames() == []


def test_nop_does_nothing(core) -> None:
    c = Client(core)
    assert c.cmd(b"NOP") == 0
    assert c.frames() == []


# ----------------------------------------------------------------------------- IDENTIFY


def identify(c: Client, **fields) -> int:
    return c.cmd(b"IDENTIFY", body=json.dumps(fields).encode())


def test_identify_without_negotiation_answers_ok(core) -> None:
    c = Client(core)
    assert identify(c, client_id="me", hostname="h", user_agent="ua/1") == TIMERS
    assert c.only() == ok()
    s = c.state.stats()
    assert (s.client_name, s.hostname, s.user_agent) == ("me", "h", "ua/1")


def test_identify_feature_negotiation_reply(core) -> None:
    c = Client(core)
    act = identify(
        c,
        feature_negotiation=True,
        heartbeat_interval=5000,
        output_buffer_size=16384,
        output_buffer_timeout=250,
        msg_timeout=30000,
        tls_v1=True,  # no TLS configured: answered false
        snappy=False,
    )
    assert act == TIMERS
    assert c.only() == (
        wire.FRAME_TYPE_RESPONSE,
        (
            b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,'
            b'"msg_timeout":30000,"tls_v1":false,"deflate":false,"deflate_level":6,'
            b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
            b'"output_buffer_size":16384,"output_buffer_timeout":250}'
        ),
    )
    assert c.state.heartbeat_interval_ms == 5000


@pytest.mark.parametrize(
    "fields, tls, codec",
    [
        ({"tls_v1": True}, True, ""),
        ({"snappy": True}, False, "snappy"),
        ({"deflate": True, "deflate_level": 3}, False, "deflate"),
        ({"tls_v1": True, "deflate": True}, True, "deflate"),
    ],
)
def test_identify_negotiates_upgrades(core, fields, tls, codec) -> None:
    core.nsqd.tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c = Client(core)
    assert identify(c, feature_negotiation=True, **fields) == TIMERS | UPGRADE
    reply = json.loads(c.only()[1])
    assert (reply["tls_v1"], reply["snappy"], reply["deflate"]) == (
        tls,
        codec == "snappy",
        codec == "deflate",
    )
    up = c.state.upgrade
    assert up is not None and up.tls == tls
    assert (up.codec.name if up.codec is not None else "") == codec
    if codec == "deflate":
        assert reply["deflate_level"] == fields.get("deflate_level", 6)


def test_identify_deflate_level_is_capped(make_core) -> None:
    c = Client(make_core(max_deflate_level=4))
    assert identify(c, feature_negotiation=True, deflate=True, deflate_level=9) & UPGRADE
    assert json.loads(c.only()[1])["deflate_level"] == 4


def test_identify_compression_off_in_the_daemon_is_answered_false(make_core) -> None:
    c = Client(make_core(snappy=False, deflate=False))
    assert identify(c, feature_negotiation=True, snappy=True) == TIMERS
    assert json.loads(c.only()[1])["snappy"] is False


def test_identify_both_codecs_is_refused(core) -> None:
    c = Client(core)
    assert identify(c, feature_negotiation=True, snappy=True, deflate=True) == CLOSE
    assert c.only() == err(b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression")


@pytest.mark.parametrize(
    "fields, text",
    [
        ({"heartbeat_interval": 500}, b"IDENTIFY heartbeat interval (500) is invalid"),
        ({"heartbeat_interval": 60001}, b"IDENTIFY heartbeat interval (60001) is invalid"),
        ({"msg_timeout": 999}, b"IDENTIFY msg timeout (999) is invalid"),
        ({"msg_timeout": 900001}, b"IDENTIFY msg timeout (900001) is invalid"),
        ({"msg_timeout": -1}, b"IDENTIFY msg timeout (-1) is invalid"),
        ({"output_buffer_size": 63}, b"IDENTIFY output buffer size (63) is invalid"),
        ({"output_buffer_timeout": 5}, b"IDENTIFY output buffer timeout (5) is invalid"),
        ({"sample_rate": 100}, b"IDENTIFY sample rate (100) is invalid"),
        ({"heartbeat_interval": "1s"}, b"IDENTIFY failed to decode JSON body"),
    ],
)
def test_identify_bounds(core, fields, text) -> None:
    c = Client(core)
    assert identify(c, **fields) == CLOSE
    assert c.only() == err(b"E_BAD_BODY " + text)


def test_identify_takes_values_in_bounds(core, clock) -> None:
    c = Client(core)
    assert identify(c, heartbeat_interval=60000, msg_timeout=1000, sample_rate=99) == TIMERS
    assert (c.state.heartbeat_interval_ms, c.state.msg_timeout_ms, c.state.sample_rate) == (
        60000,
        1000,
        99,
    )
    assert core.next_wakeup(c.state) == clock.s() + 60


def test_identify_output_buffer_off(core) -> None:
    c = Client(core)
    assert identify(c, output_buffer_size=-1) == TIMERS
    assert (c.state.output_buffer_size, c.state.output_buffer_timeout_ms) == (1, 0)


def test_identify_bad_json_is_fatal(core) -> None:
    c = Client(core)
    assert c.cmd(b"IDENTIFY", body=b"{nope") == CLOSE
    assert c.only() == err(b"E_BAD_BODY IDENTIFY failed to decode JSON body")


def test_large_identify_is_decoded_aside(core) -> None:
    c = Client(core)
    body = json.dumps({"client_id": "x" * LARGE_IDENTIFY, "feature_negotiation": True}).encode()
    assert c.cmd(b"IDENTIFY", body=body) == SUSPEND
    wait = c.state.wait
    assert wait is not None and wait.kind == WAIT_DECODE and wait.arg == body
    assert c.frames() == []
    assert core.resume(c.state, decode_identify_aside(wait.arg)) == TIMERS
    assert json.loads(c.only()[1])["max_rdy_count"] == 2500
    assert c.state.client_name == "x" * LARGE_IDENTIFY and c.state.wait is None


def test_large_identify_that_does_not_decode_is_fatal(core) -> None:
    c = Client(core)
    assert c.cmd(b"IDENTIFY", body=b"[" * (LARGE_IDENTIFY + 1)) == SUSPEND
    assert core.resume(c.state, decode_identify_aside(c.state.wait.arg)) == CLOSE
    assert c.only() == err(b"E_BAD_BODY IDENTIFY failed to decode JSON body")


def test_sub_with_heartbeats_disabled_is_fatal(core) -> None:
    c = Client(core)
    assert identify(c, heartbeat_interval=-1) == TIMERS
    c.frames()
    assert core.next_wakeup(c.state) == -1
    assert c.cmd(b"SUB", b"t", b"c") == CLOSE
    assert c.only() == err(b"E_INVALID cannot SUB with heartbeats disabled")


# ----------------------------------------------------------------------------- heartbeats


def test_heartbeats_are_sent_every_interval_and_a_silent_client_times_out(core, clock) -> None:
    c = Client(core)
    assert identify(c, heartbeat_interval=1000) == TIMERS
    c.frames()
    core.start_heartbeat(c.state)
    assert core.next_wakeup(c.state) == clock.s() + 1
    clock.advance_ms(999)
    assert core.tick(c.state) == 0 and c.frames() == []
    clock.advance_ms(1)
    assert core.tick(c.state) == 0
    assert c.only() == (wire.FRAME_TYPE_RESPONSE, b"_heartbeat_")
    assert c.cmd(b"NOP") == 0  # the client answers: its read deadline moves
    clock.advance_ms(1000)
    assert core.tick(c.state) == 0
    assert c.only() == (wire.FRAME_TYPE_RESPONSE, b"_heartbeat_")
    # silent since the NOP: closed two intervals after it, not before
    assert core.next_wakeup(c.state) == clock.s() + 1
    clock.advance_ms(999)
    assert core.tick(c.state) == 0
    clock.advance_ms(1)
    assert core.tick(c.state) == CLOSE


def test_default_heartbeat_is_half_the_client_timeout(make_core, clock) -> None:
    c = Client(make_core(client_timeout_ms=10_000))
    core = c.core
    core.start_heartbeat(c.state)
    assert core.next_wakeup(c.state) == clock.s() + 5
    clock.advance_ms(10_000)
    assert core.tick(c.state) == CLOSE


# ----------------------------------------------------------------------------- AUTH


def grant(topic: str = ".*", perms: tuple[str, ...] = ("publish", "subscribe"), ttl=60):
    rule = Authorization(re.compile(topic), [re.compile(".*")], list(perms))
    return AuthState(ttl, "me", "https://id/me", [rule], expires=1e18 if ttl else 0.0)


@pytest.fixture
def auth_core(core) -> ProtocolV2:
    core.nsqd.auth = object()  # auth servers configured: the connection would query them
    return core


def test_auth_disabled(core) -> None:
    c = Client(core)
    assert c.cmd(b"AUTH", body=b"secret") == CLOSE
    assert c.only() == err(b"E_AUTH_DISABLED AUTH disabled")


def test_auth_required_before_pub_and_sub(auth_core) -> None:
    c = Client(auth_core)
    assert c.cmd(b"PUB", b"t", body=b"x") == CLOSE
    assert c.only() == err(b"E_AUTH_FIRST AUTH required before PUB")
    c = Client(auth_core)
    assert c.cmd(b"SUB", b"t", b"c") == CLOSE
    assert c.only() == err(b"E_AUTH_FIRST AUTH required before SUB")
    c = Client(auth_core)
    assert c.send(wire.encode_mpub(b"t", [b"x"])) == CLOSE  # checked before the body
    assert c.only() == err(b"E_AUTH_FIRST AUTH required before MPUB")


def test_identify_says_auth_required(auth_core) -> None:
    c = Client(auth_core)
    identify(c, feature_negotiation=True)
    assert json.loads(c.only()[1])["auth_required"] is True


def test_auth_suspends_for_the_query_then_answers_the_identity(auth_core) -> None:
    c = Client(auth_core)
    assert c.cmd(b"AUTH", body=b"s3cret") == SUSPEND
    wait = c.state.wait
    assert wait is not None and (wait.kind, wait.arg) == (WAIT_AUTH, "s3cret")
    assert auth_core.resume(c.state, grant()) == 0
    assert c.only() == (
        wire.FRAME_TYPE_RESPONSE,
        b'{"identity":"me","identity_url":"https://id/me","permission_count":1}',
    )
    s = c.state.stats()
    assert (s.authed, s.auth_identity, s.auth_identity_url) == (True, "me", "https://id/me")
    assert c.cmd(b"PUB", b"t", body=b"x") == 0
    assert c.only() == ok()
    assert c.cmd(b"AUTH", body=b"again") == CLOSE
    assert c.only() == err(b"E_INVALID AUTH already set")


def test_auth_query_failure_is_auth_failed(auth_core) -> None:
    c = Client(auth_core)
    assert c.cmd(b"AUTH", body=b"s") == SUSPEND
    assert auth_core.resume(c.state, OSError("auth server down")) == CLOSE
    assert c.only() == err(b"E_AUTH_FAILED AUTH failed")


def test_auth_without_authorizations_is_unauthorized(auth_core) -> None:
    c = Client(auth_core)
    assert c.cmd(b"AUTH", body=b"s") == SUSPEND
    assert auth_core.resume(c.state, AuthState(60, "me", "", [])) == CLOSE
    assert c.only() == err(b"E_UNAUTHORIZED AUTH no authorizations found")


def test_auth_checks_topic_and_permission(auth_core) -> None:
    c = Client(auth_core)
    c.cmd(b"AUTH", body=b"s")
    auth_core.resume(c.state, grant("^mine$", ("subscribe",)))
    c.frames()
    assert c.cmd(b"PUB", b"mine", body=b"x") == CLOSE
    assert c.only() == err(b'E_UNAUTHORIZED AUTH failed for PUB on "mine" ""')
    c = Client(auth_core)
    c.cmd(b"AUTH", body=b"s")
    auth_core.resume(c.state, grant("^mine$", ("subscribe",)))
    c.frames()
    assert c.cmd(b"SUB", b"other", b"c") == CLOSE
    assert c.only() == err(b'E_UNAUTHORIZED AUTH failed for SUB on "other" "c"')


def test_expired_auth_is_asked_again_then_the_command_runs(auth_core) -> None:
    c = Client(auth_core)
    c.cmd(b"AUTH", body=b"s")
    auth_core.resume(c.state, grant(ttl=0))  # expired at once
    c.frames()
    assert c.cmd(b"PUB", b"t", body=b"x") == SUSPEND
    assert c.state.wait is not None and c.state.wait.arg == "s"
    assert "t" not in auth_core.nsqd.topics
    assert auth_core.resume(c.state, grant()) == 0
    assert c.only() == ok()
    assert auth_core.nsqd.topics["t"].depth == 1


# ----------------------------------------------------------------------------- TLS required


def test_tls_required_allows_only_identify_until_the_handshake(make_core, tmp_path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("unused: the core only reads the option")
    core = make_core(tls_required=1, tls_cert=str(cert), tls_key=str(cert))
    c = Client(core)
    assert c.cmd(b"PUB", b"t", body=b"x") == CLOSE
    assert c.only() == err(b"E_INVALID cannot PUB in current state (TLS required)")
    c = Client(core)
    assert c.cmd(b"NOP") == CLOSE
    assert c.only() == err(b"E_INVALID cannot NOP in current state (TLS required)")
    c = Client(core)
    assert identify(c) == TIMERS
    core.tls_established(c.state)
    c.frames()
    assert c.cmd(b"PUB", b"t", body=b"x") == 0
    assert c.only() == ok()


# ----------------------------------------------------------------------------- stats


def test_stats_record(core, clock) -> None:
    clocked_topic(core, "st", clock)
    c = consumer(core, "st", "ch", rdy=7, client_id="cid", hostname="host")
    c.state.remote_address = "127.0.0.1:5"
    publish(core, "st", b"a")
    c.messages()
    s = c.state.stats()
    assert (s.client_id, s.client_name, s.hostname, s.remote_address) == (
        c.state.client_id,
        "cid",
        "host",
        "127.0.0.1:5",
    )
    assert (s.state, s.ready_count, s.in_flight_count, s.message_count) == (3, 7, 1, 1)
    assert (s.tls, s.codec, s.authed, s.pub_counts) == (False, "", False, {})


# ------------------------------------------------------------ the replication seam


class FakeReplication:
    """protocol_v2.PublishReplication as a test double: topics starting with "r" are
    replicated; ``pending`` clients are held; publishes are recorded and answered at once
    (``answer`` True: OK through ProtocolV2.published; False: the command's fatal error)."""

    def __init__(self, core: ProtocolV2) -> None:
        self.core = core
        self.pending: set[ClientState] = set()
        self.published: list[tuple[str, str, list[bytes], int]] = []
        self.retries: list[object] = []
        self.answer = True

    def replicates(self, topic: str) -> bool:
        return topic.startswith("r")

    def hold(self, c: ClientState, retry) -> int:
        if c not in self.pending:
            return 0
        self.retries.append(retry)
        return SUSPEND

    def publish(self, c, pub, retry) -> int:
        cmd, topic, bodies, delay_ms = pub
        self.published.append((cmd.name, topic, bodies, delay_ms))
        if not self.answer:
            raise wire.FatalClientError(cmd.failed, f"{cmd.name} failed not acknowledged")
        return self.core.published(c, topic, len(bodies))


def test_replicated_topics_go_through_the_attached_replication(core) -> None:
    repl = FakeReplication(core)
    core.attach_replication(repl)
    p = Client(core)
    assert p.cmd(b"PUB", b"rt", body=b"a") == 0 and p.only() == ok()
    assert p.send(wire.encode_mpub(b"rt", [b"b", b"c"])) == 0
    assert p.only() == ok()
    assert p.cmd(b"DPUB", b"rt", b"1500", body=b"d") == 0 and p.only() == ok()
    assert repl.published == [
        ("PUB", "rt", [b"a"], 0),
        ("MPUB", "rt", [b"b", b"c"], 0),
        ("DPUB", "rt", [b"d"], 1500),
    ]
    assert p.state.pub_counts == {"rt": 4}
    # nothing put locally by the core (MPUB's precheck makes the topic, as nsqd does)
    assert core.nsqd.topics["rt"].depth == 0
    # a plain topic: nsqd's own path
    assert p.cmd(b"PUB", b"plain", body=b"e") == 0 and p.only() == ok()
    assert core.nsqd.topics["plain"].depth == 1 and len(repl.published) == 3
    # not acknowledged: the command's fatal error
    repl.answer = False
    assert p.cmd(b"DPUB", b"rt", b"0", body=b"f") == CLOSE
    assert p.only() == err(b"E_DPUB_FAILED DPUB failed not acknowledged")


def test_other_commands_wait_while_replication_holds_the_client(core) -> None:
    repl = FakeReplication(core)
    core.attach_replication(repl)
    p = Client(core)
    repl.pending.add(p.state)
    assert p.cmd(b"PUB", b"plain", body=b"a") == SUSPEND  # an R=1 publish waits its turn
    assert p.cmd(b"NOP") == SUSPEND
    assert p.frames() == [] and "plain" not in core.nsqd.topics
    assert p.cmd(b"PUB", b"rt", body=b"b") == 0  # a replicated one goes into the pipeline
    assert p.only() == ok()
    repl.pending.clear()
    assert [retry() for retry in repl.retries] == [0, 0]
    assert p.only() == ok() and core.nsqd.topics["plain"].depth == 1
