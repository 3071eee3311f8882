"""Unit and property tests for nsqpy.wire (the sans-IO NSQ TCP V2 protocol)."""

from __future__ import annotations

import json
import random
import string
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy import wire
from nsqpy.wire import (
    MAX_LINE_LENGTH,
    ClientError,
    CommandParser,
    FatalClientError,
    FrameReader,
)

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MAX_MSG = 64
MAX_BODY = 256


def pack_len(n: int) -> bytes:
    return struct.pack(">i", n)


def drain(p: CommandParser) -> list:
    out = []
    while (c := p.next_command()) is not None:
        out.append(c)
    return out


def raises_fatal(
    p: CommandParser, code: str, desc: str | None = None, prefix: str | None = None
) -> FatalClientError:
    with pytest.raises(FatalClientError) as ei:
        p.next_command()
    err = ei.value
    assert err.code == code
    if desc is not None:
        assert err.desc == desc
    if prefix is not None:
        assert err.desc.startswith(prefix), err.desc
    assert err.fatal is True
    assert err.text == f"{err.code} {err.desc}".encode()
    return err


# --------------------------------------------------------------------------------------------
# Error types


def test_client_error_attributes() -> None:
    e = ClientError("E_INVALID", "invalid command FOO")
    assert e.code == "E_INVALID"
    assert e.desc == "invalid command FOO"
    assert e.text == b"E_INVALID invalid command FOO"
    assert e.fatal is False
    f = FatalClientError("E_BAD_BODY", "x y")
    assert isinstance(f, ClientError)
    assert f.fatal is True
    assert f.text == b"E_BAD_BODY x y"
    assert str(f) == "E_BAD_BODY x y"


# --------------------------------------------------------------------------------------------
# Names and numbers


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "a#ephemeral",
        "abc.DEF_ghi-012",
        "x" * 64,
        "x" * 54 + "#ephemeral",  # 64 in total with the suffix
        "...",
        "-",
        b"topic",
        b"ch#ephemeral",
    ],
)
def test_valid_names(name: str | bytes) -> None:
    assert wire.is_valid_name(name) is True


@pytest.mark.parametrize(
    "name",
    [
        "",
        b"",
        "#ephemeral",
        "a b",
        "x" * 65,
        "x" * 55 + "#ephemeral",  # 65 with the suffix
        "a\n",
        "a\r",
        "\na",
        "a#",
        "a#ephemeral#ephemeral",
        "a#Ephemeral",
        "a#ephemeralx",
        "a/b",
        "a:b",
        "é",
        b"\xff",
        "a\x00",
    ],
)
def test_invalid_names(name: str | bytes) -> None:
    assert wire.is_valid_name(name) is False


NAME_CHARS = string.ascii_letters + string.digits + "._-"


@SETTINGS
@given(st.text(alphabet=NAME_CHARS, min_size=1, max_size=80), st.booleans(), st.booleans())
def test_is_valid_name_property(base: str, ephemeral: bool, as_bytes: bool) -> None:
    name = base + ("#ephemeral" if ephemeral else "")
    arg = name.encode() if as_bytes else name
    assert wire.is_valid_name(arg) is (len(name) <= 64)


@SETTINGS
@given(st.text(min_size=1, max_size=70))
def test_is_valid_name_rejects_foreign_chars(name: str) -> None:
    allowed = set(NAME_CHARS)
    core = name.removesuffix("#ephemeral")
    expected = 1 <= len(name) <= 64 and len(core) >= 1 and set(core) <= allowed
    assert wire.is_valid_name(name) is expected


def test_byte_to_base10() -> None:
    assert wire.byte_to_base10(b"") == 0
    assert wire.byte_to_base10(b"0") == 0
    assert wire.byte_to_base10(b"123") == 123
    assert wire.byte_to_base10(b"007") == 7


@pytest.mark.parametrize(
    "bad", [b"-1", b"1a", b" 1", b"1 ", b"+1", b"0x1", b"1.5", b"\xd9\xa3", b"\n"]
)
def test_byte_to_base10_rejects(bad: bytes) -> None:
    with pytest.raises(ValueError):
        wire.byte_to_base10(bad)


@SETTINGS
@given(st.integers(min_value=0, max_value=10**30))
def test_byte_to_base10_roundtrip(n: int) -> None:
    # nsqd's uint64 arithmetic wraps
    assert wire.byte_to_base10(str(n).encode()) == n % 2**64


# --------------------------------------------------------------------------------------------
# Encoders and FrameReader


def test_encode_response_exact() -> None:
    assert wire.encode_response(b"OK") == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert wire.encode_response(b"") == b"\x00\x00\x00\x04\x00\x00\x00\x00"
    hb = wire.encode_response(wire.HEARTBEAT)
    assert hb == struct.pack(">ii", 4 + 11, 0) + b"_heartbeat_"


def test_encode_error_exact() -> None:
    frame = wire.encode_error(FatalClientError("E_INVALID", "x"))
    data = b"E_INVALID x"
    assert frame == struct.pack(">ii", 4 + len(data), 1) + data
    assert FrameReader().feed(frame) == [(wire.FRAME_TYPE_ERROR, data)]


def test_encode_frame_exact() -> None:
    assert wire.encode_frame(2, b"abc") == b"\x00\x00\x00\x07\x00\x00\x00\x02abc"


def test_append_message_frame_layout() -> None:
    out = bytearray(b"prefix")
    msg_id = b"0123456789abcdef"
    ts = 1_700_000_000_123_456_789
    wire.append_message_frame(out, ts, 3, msg_id, b"hello")
    assert out[:6] == b"prefix"
    frame = bytes(out[6:])
    size, ftype = struct.unpack(">ii", frame[:8])
    assert size == 4 + 26 + 5
    assert len(frame) == 4 + size
    assert ftype == 2
    assert struct.unpack(">q", frame[8:16])[0] == ts
    assert struct.unpack(">H", frame[16:18])[0] == 3
    assert frame[18:34] == msg_id
    assert frame[34:] == b"hello"
    # and the frame's data is exactly encode_message's output
    assert frame[8:] == wire.encode_message(ts, 3, msg_id, b"hello")


def test_append_message_frame_appends_several() -> None:
    out = bytearray()
    wire.append_message_frame(out, 1, 1, b"a" * 16, b"x")
    wire.append_message_frame(out, 2, 2, b"b" * 16, b"yy")
    frames = FrameReader().feed(bytes(out))
    assert [f[0] for f in frames] == [2, 2]
    assert wire.decode_message(frames[0][1]) == (1, 1, b"a" * 16, b"x")
    assert wire.decode_message(frames[1][1]) == (2, 2, b"b" * 16, b"yy")


msg_ids = st.binary(min_size=8, max_size=8).map(lambda b: b.hex().encode())


@SETTINGS
@given(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=0, max_value=65535),
    msg_ids,
    st.binary(max_size=200),
)
def test_encode_decode_message_roundtrip(
    ts: int, attempts: int, msg_id: bytes, body: bytes
) -> None:
    data = wire.encode_message(ts, attempts, msg_id, body)
    assert len(data) == 26 + len(body)
    assert wire.decode_message(data) == (ts, attempts, msg_id, body)
    # also from a bytearray / through a message frame
    out = bytearray()
    wire.append_message_frame(out, ts, attempts, msg_id, body)
    ((ftype, fdata),) = FrameReader().feed(bytes(out))
    assert ftype == wire.FRAME_TYPE_MESSAGE
    assert wire.decode_message(bytearray(fdata)) == (ts, attempts, msg_id, body)


@pytest.mark.parametrize("n", [0, 1, 25])
def test_decode_message_too_short(n: int) -> None:
    with pytest.raises(ValueError):
        wire.decode_message(b"\x00" * n)


def test_decode_message_header_only() -> None:
    assert wire.decode_message(b"\x00" * 8 + b"\x00\x01" + b"f" * 16) == (0, 1, b"f" * 16, b"")


def split_points(data: st.DataObject, n: int, one_byte: bool = False) -> list[int]:
    if n <= 1:
        return []
    if one_byte:
        return list(range(1, n))
    return sorted(
        data.draw(st.sets(st.integers(min_value=1, max_value=n - 1), max_size=min(n - 1, 40)))
    )


def chunk(blob: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *points, len(blob)]
    return [blob[a:b] for a, b in zip(bounds, bounds[1:])]


@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=2), st.binary(max_size=100)), max_size=20
    ),
    st.booleans(),
    st.data(),
)
def test_frame_reader_chunking(
    frames: list[tuple[int, bytes]], one_byte: bool, data: st.DataObject
) -> None:
    # one_byte: every byte its own chunk; otherwise up to 40 random cuts
    blob = b"".join(wire.encode_frame(t, d) for t, d in frames)
    reader = FrameReader()
    got: list[tuple[int, bytes]] = []
    for part in chunk(blob, split_points(data, len(blob), one_byte)):
        got.extend(reader.feed(part))
    assert got == frames
    assert reader.feed(b"") == []


def test_frame_reader_partial_header_and_body() -> None:
    r = FrameReader()
    frame = wire.encode_response(b"OK")
    assert r.feed(frame[:3]) == []
    assert r.feed(frame[3:8]) == []
    assert r.feed(frame[8:9]) == []
    assert r.feed(frame[9:] + frame) == [(0, b"OK"), (0, b"OK")]


# --------------------------------------------------------------------------------------------
# encode_command / encode_mpub


def test_encode_command_exact() -> None:
    assert wire.encode_command(b"NOP") == b"NOP\n"
    assert wire.encode_command(b"SUB", b"t", b"c") == b"SUB t c\n"
    assert wire.encode_command(b"PUB", b"t", body=b"hi") == b"PUB t\n\x00\x00\x00\x02hi"


def test_encode_mpub_exact() -> None:
    assert wire.encode_mpub(b"t", [b"a", b"bc"]) == (
        b"MPUB t\n" + pack_len(4 + 5 + 6) + pack_len(2) + pack_len(1) + b"a" + pack_len(2) + b"bc"
    )


# --------------------------------------------------------------------------------------------
# CommandParser: valid input


def test_parse_simple_commands() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"NOP\nRDY 10\r\nSUB topic ch\nFIN 0123456789abcdef\n")
    assert drain(p) == [
        (b"NOP", [b"NOP"], None),
        (b"RDY", [b"RDY", b"10"], None),
        (b"SUB", [b"SUB", b"topic", b"ch"], None),
        (b"FIN", [b"FIN", b"0123456789abcdef"], None),
    ]
    assert p.buffered() == 0


def test_parse_needs_more_bytes() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    assert p.next_command() is None
    p.feed(b"NO")
    assert p.next_command() is None
    p.feed(b"P")
    assert p.next_command() is None
    p.feed(b"\n")
    assert p.next_command() == (b"NOP", [b"NOP"], None)
    assert p.next_command() is None


def test_params_split_on_single_spaces() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"SUB  t c \n\n")
    assert drain(p) == [
        (b"SUB", [b"SUB", b"", b"t", b"c", b""], None),
        (b"", [b""], None),
    ]


def test_only_trailing_cr_is_stripped() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"RDY 1\r\r\nA\rB\n")
    assert drain(p) == [
        (b"RDY", [b"RDY", b"1\r"], None),
        (b"A\rB", [b"A\rB"], None),
    ]


def test_parse_pub_body() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_command(b"PUB", b"t", body=b"hello\nworld"))
    assert p.next_command() == (b"PUB", [b"PUB", b"t"], b"hello\nworld")
    assert p.next_command() is None
    assert p.buffered() == 0


def test_parse_pub_body_in_pieces() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"PUB t\n")
    assert p.next_command() is None
    p.feed(b"\x00\x00")
    assert p.next_command() is None
    p.feed(b"\x00\x03ab")
    assert p.next_command() is None
    p.compact()
    p.feed(b"cNOP\n")
    assert drain(p) == [(b"PUB", [b"PUB", b"t"], b"abc"), (b"NOP", [b"NOP"], None)]


def test_parse_pub_body_of_exactly_max_msg_size() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_command(b"PUB", b"t", body=b"z" * MAX_MSG))
    assert p.next_command() == (b"PUB", [b"PUB", b"t"], b"z" * MAX_MSG)


def test_parse_dpub_identify_auth() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    ident = json.dumps({"client_id": "x", "heartbeat_interval": 1000}).encode()
    p.feed(wire.encode_command(b"DPUB", b"t", b"1500", body=b"later"))
    p.feed(wire.encode_command(b"IDENTIFY", body=ident))
    p.feed(wire.encode_command(b"AUTH", body=b"secret"))
    assert drain(p) == [
        (b"DPUB", [b"DPUB", b"t", b"1500"], b"later"),
        (b"IDENTIFY", [b"IDENTIFY"], ident),
        (b"AUTH", [b"AUTH"], b"secret"),
    ]


def test_parse_mpub() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_mpub(b"t", [b"a", b"bb", b"c" * MAX_MSG]))
    assert p.next_command() == (b"MPUB", [b"MPUB", b"t"], [b"a", b"bb", b"c" * MAX_MSG])
    assert p.buffered() == 0


def test_parse_mpub_max_count() -> None:
    count = (MAX_BODY - 4) // 5  # 50 one-byte messages: 4 + 50 * 5 = 254 <= 256
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_mpub(b"t", [b"x"] * count))
    assert p.next_command() == (b"MPUB", [b"MPUB", b"t"], [b"x"] * count)


def test_body_with_command_like_bytes_is_not_parsed() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_command(b"PUB", b"t", body=b"NOP\nNOP\n") + b"NOP\n")
    assert drain(p) == [(b"PUB", [b"PUB", b"t"], b"NOP\nNOP\n"), (b"NOP", [b"NOP"], None)]


def test_compact_drops_consumed_bytes() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"NOP\nNOP\nNO")
    assert len(drain(p)) == 2
    assert p.buffered() == 2
    p.compact()
    assert p.buffered() == 2
    assert len(p._buf) == 2  # the consumed 8 bytes are gone
    p.compact()  # idempotent
    p.feed(b"P\n")
    assert drain(p) == [(b"NOP", [b"NOP"], None)]
    p.compact()
    assert p.buffered() == 0 and len(p._buf) == 0


# --------------------------------------------------------------------------------------------
# CommandParser: precheck


def test_precheck_called_once_line_complete_before_length() -> None:
    calls: list[tuple[bytes, list[bytes]]] = []
    p = CommandParser(MAX_MSG, MAX_BODY, precheck=lambda n, ps: calls.append((n, list(ps))))
    p.feed(b"NOP\nPUB t\n")
    assert p.next_command() == (b"NOP", [b"NOP"], None)
    assert calls == []  # not called for bodiless commands
    assert p.next_command() is None  # line complete, size not there yet
    assert calls == [(b"PUB", [b"PUB", b"t"])]
    p.feed(pack_len(2) + b"hi")
    assert p.next_command() == (b"PUB", [b"PUB", b"t"], b"hi")
    assert len(calls) == 1  # not called again for the same command
    p.feed(wire.encode_mpub(b"u", [b"x"]) + wire.encode_command(b"IDENTIFY", body=b"{}"))
    drain(p)
    assert calls[1:] == [(b"MPUB", [b"MPUB", b"u"]), (b"IDENTIFY", [b"IDENTIFY"])]


def test_precheck_exception_propagates_before_size_check() -> None:
    class Refused(Exception):
        pass

    def precheck(name: bytes, params: list[bytes]) -> None:
        if params[1:] != [b"ok"]:
            raise Refused(name)

    p = CommandParser(MAX_MSG, MAX_BODY, precheck=precheck)
    p.feed(b"PUB ok\n" + pack_len(1) + b"x")
    assert p.next_command() == (b"PUB", [b"PUB", b"ok"], b"x")
    # an oversize length follows, but precheck runs first and its error wins
    p.feed(b"PUB bad!\n" + pack_len(10**6))
    with pytest.raises(Refused):
        p.next_command()


def test_precheck_client_error_propagates() -> None:
    def precheck(name: bytes, params: list[bytes]) -> None:
        raise ClientError("E_INVALID", "cannot PUB in current state")

    p = CommandParser(MAX_MSG, MAX_BODY, precheck=precheck)
    p.feed(b"PUB t\n")
    with pytest.raises(ClientError) as ei:
        p.next_command()
    assert ei.value.text == b"E_INVALID cannot PUB in current state"


# --------------------------------------------------------------------------------------------
# CommandParser: size errors (checked before the body arrives)


@pytest.mark.parametrize("cmd,line", [(b"PUB", b"PUB t\n"), (b"DPUB", b"DPUB t 10\n")])
@pytest.mark.parametrize("n", [0, -1, -(2**31)])
def test_pub_invalid_size(cmd: bytes, line: bytes, n: int) -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(line + pack_len(n))
    raises_fatal(p, "E_BAD_MESSAGE", f"{cmd.decode()} invalid message body size {n}")


@pytest.mark.parametrize("cmd,line", [(b"PUB", b"PUB t\n"), (b"DPUB", b"DPUB t 10\n")])
@pytest.mark.parametrize("n", [MAX_MSG + 1, 2**31 - 1])
def test_pub_too_big_before_body(cmd: bytes, line: bytes, n: int) -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(line + pack_len(n))  # no body bytes at all
    raises_fatal(p, "E_BAD_MESSAGE", f"{cmd.decode()} message too big {n} > {MAX_MSG}")


@pytest.mark.parametrize("n", [0, -5])
def test_mpub_invalid_body_size(n: int) -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"MPUB t\n" + pack_len(n))
    raises_fatal(p, "E_BAD_BODY", f"MPUB invalid body size {n}")


def test_mpub_body_too_big_before_body() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"MPUB t\n" + pack_len(MAX_BODY + 1))
    raises_fatal(p, "E_BAD_BODY", f"MPUB body too big {MAX_BODY + 1} > {MAX_BODY}")


def test_mpub_body_may_exceed_max_msg_size() -> None:
    bodies = [b"a" * MAX_MSG] * 3  # 4 + 3 * 68 = 208 > MAX_MSG, <= MAX_BODY
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_mpub(b"t", bodies))
    assert p.next_command() == (b"MPUB", [b"MPUB", b"t"], bodies)


@pytest.mark.parametrize("cmd", ["IDENTIFY", "AUTH"])
def test_identify_auth_sizes(cmd: str) -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(cmd.encode() + b"\n" + pack_len(MAX_BODY + 1))
    raises_fatal(p, "E_BAD_BODY", f"{cmd} body too big {MAX_BODY + 1} > {MAX_BODY}")
    for n in (0, -1):
        p = CommandParser(MAX_MSG, MAX_BODY)
        p.feed(cmd.encode() + b"\n" + pack_len(n))
        raises_fatal(p, "E_BAD_BODY", f"{cmd} invalid body size {n}")
    # IDENTIFY/AUTH are limited by max_body_size, not max_msg_size
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(wire.encode_command(cmd.encode(), body=b"y" * MAX_BODY))
    assert p.next_command() == (cmd.encode(), [cmd.encode()], b"y" * MAX_BODY)


def test_waiting_for_body_is_bounded() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"IDENTIFY\n" + pack_len(MAX_BODY) + b"\x00" * (MAX_BODY - 1))
    assert p.next_command() is None
    p.compact()
    assert p.buffered() == MAX_BODY - 1


def test_mpub_body_checked_as_it_arrives() -> None:
    """nsqd reads an MPUB's count, then each message's size, checking each before it reads
    on: a bad one is refused with the first bytes of the body, not once all of it is in."""
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"MPUB t\n" + pack_len(MAX_BODY) + b"\x00" * 3)
    assert p.next_command() is None
    p.feed(b"\x00")
    raises_fatal(p, "E_BAD_BODY", "MPUB invalid message count 0")
    p = CommandParser(MAX_MSG, MAX_BODY)
    body = pack_len(3) + pack_len(2) + b"ab" + pack_len(MAX_MSG + 1)
    p.feed(b"MPUB t\n" + pack_len(MAX_BODY) + body[:9])
    assert p.next_command() is None
    for b in body[9:]:  # byte by byte
        p.feed(bytes([b]))
        if p.buffered() < len(body):
            assert p.next_command() is None
    raises_fatal(p, "E_BAD_MESSAGE", f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}")
    p = CommandParser(MAX_MSG, MAX_BODY)
    good = pack_len(2) + pack_len(2) + b"ab" + pack_len(1) + b"c"
    for b in b"MPUB t\n" + pack_len(len(good)) + good:
        assert p.next_command() is None
        p.feed(bytes([b]))
    assert p.next_command() == (b"MPUB", [b"MPUB", b"t"], [b"ab", b"c"])


# --------------------------------------------------------------------------------------------
# CommandParser: MPUB body errors


def mpub_raw(body: bytes) -> bytes:
    return b"MPUB t\n" + pack_len(len(body)) + body


@pytest.mark.parametrize("count", [0, -1, (MAX_BODY - 4) // 5 + 1, 2**31 - 1])
def test_mpub_invalid_count(count: int) -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(mpub_raw(pack_len(count) + pack_len(1) + b"x"))
    raises_fatal(p, "E_BAD_BODY", f"MPUB invalid message count {count}")


@pytest.mark.parametrize("size", [0, -3])
def test_mpub_invalid_message_size(size: int) -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    body = pack_len(2) + pack_len(1) + b"x" + pack_len(size) + b"yyyy"
    p.feed(mpub_raw(body))
    raises_fatal(p, "E_BAD_MESSAGE", f"MPUB invalid message(1) body size {size}")


def test_mpub_message_too_big() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    body = pack_len(1) + pack_len(MAX_MSG + 1) + b"m" * (MAX_MSG + 1)
    p.feed(mpub_raw(body))
    raises_fatal(p, "E_BAD_MESSAGE", f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}")


def test_mpub_count_more_than_body_holds() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(mpub_raw(pack_len(3) + pack_len(1) + b"a" + pack_len(1) + b"b"))
    raises_fatal(p, "E_BAD_MESSAGE", "MPUB failed to read message(2) body size")


def test_mpub_partial_message_size() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(mpub_raw(pack_len(1) + b"\x00\x00"))
    raises_fatal(p, "E_BAD_MESSAGE", "MPUB failed to read message(0) body size")


def test_mpub_short_message_body() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(mpub_raw(pack_len(1) + pack_len(10) + b"abc"))
    raises_fatal(p, "E_BAD_MESSAGE", "MPUB failed to read message body")


def test_mpub_leftover_bytes() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(mpub_raw(pack_len(1) + pack_len(1) + b"a" + b"extra"))
    raises_fatal(p, "E_BAD_BODY", prefix="MPUB body size")


def test_mpub_body_too_short_for_count() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(mpub_raw(b"\x00\x01"))
    raises_fatal(p, "E_BAD_BODY", "MPUB failed to read message count")


# --------------------------------------------------------------------------------------------
# CommandParser: long lines


def test_line_longer_than_max_without_newline() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"A" * MAX_LINE_LENGTH)
    assert p.next_command() is None
    p.feed(b"A")
    raises_fatal(p, "E_INVALID")


def test_junk_without_newline_never_buffers_much() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    with pytest.raises(FatalClientError) as ei:
        for _ in range(100):
            p.feed(b"B" * 1000)
            assert p.next_command() is None
            assert p.buffered() <= MAX_LINE_LENGTH
    assert ei.value.code == "E_INVALID"
    assert p.buffered() <= MAX_LINE_LENGTH + 1000


def test_long_line_after_consumed_commands_counts_only_unconsumed() -> None:
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(b"NOP\n" * 5000)  # 20000 bytes, all whole lines
    assert len(drain(p)) == 5000
    p.feed(b"C" * MAX_LINE_LENGTH)
    assert p.next_command() is None


# --------------------------------------------------------------------------------------------
# CommandParser: property tests

names = st.text(alphabet=NAME_CHARS, min_size=1, max_size=64).map(str.encode)
P_MAX_MSG = 128
P_MAX_BODY = 2048
msg_bodies = st.binary(min_size=1, max_size=P_MAX_MSG)


def _cmd(name: bytes, *params: bytes, body=None, raw: bytes | None = None):
    encoded = raw if raw is not None else wire.encode_command(name, *params, body=body)
    return encoded, (name, [name, *params], body)


json_values = st.one_of(st.integers(), st.text(max_size=20), st.booleans(), st.none())

commands = st.one_of(
    st.just(_cmd(b"NOP")),
    msg_ids.map(lambda i: _cmd(b"FIN", i)),
    st.integers(min_value=0, max_value=2500).map(lambda n: _cmd(b"RDY", str(n).encode())),
    st.tuples(names, msg_bodies).map(lambda t: _cmd(b"PUB", t[0], body=t[1])),
    st.tuples(names, st.lists(msg_bodies, min_size=1, max_size=12)).map(
        lambda t: _cmd(b"MPUB", t[0], body=t[1], raw=wire.encode_mpub(t[0], t[1]))
    ),
    st.tuples(names, st.integers(min_value=0, max_value=3_600_000), msg_bodies).map(
        lambda t: _cmd(b"DPUB", t[0], str(t[1]).encode(), body=t[2])
    ),
    st.dictionaries(st.text(max_size=10), json_values, max_size=5).map(
        lambda d: _cmd(b"IDENTIFY", body=json.dumps(d).encode())
    ),
)


def with_crlf(cmd_and_crlf):
    (encoded, expected), crlf = cmd_and_crlf
    if crlf:
        i = encoded.index(b"\n")  # the command line holds no other newline
        encoded = encoded[:i] + b"\r" + encoded[i:]
    return encoded, expected


def feed_and_drain(p: CommandParser, chunks: list[bytes], rng: random.Random) -> list:
    """Feed ``chunks`` one by one, draining after each; compact at random moments (between
    drains, and also between two next_command calls)."""
    got = []
    for part in chunks:
        p.feed(part)
        while True:
            if rng.random() < 0.3:
                p.compact()
            c = p.next_command()
            if c is None:
                break
            got.append(c)
        if rng.random() < 0.5:
            p.compact()
    return got


@SETTINGS
@given(
    st.lists(st.tuples(commands, st.booleans()).map(with_crlf), max_size=25),
    st.integers(min_value=0, max_value=2**32),
    st.data(),
)
def test_roundtrip_chunked(cmds, seed: int, data: st.DataObject) -> None:
    blob = b"".join(e for e, _ in cmds)
    p = CommandParser(P_MAX_MSG, P_MAX_BODY)
    got = feed_and_drain(p, chunk(blob, split_points(data, len(blob))), random.Random(seed))
    assert got == [x for _, x in cmds]
    assert p.buffered() == 0
    assert p.next_command() is None


@settings(SETTINGS, max_examples=60)
@given(
    st.lists(st.tuples(commands, st.booleans()).map(with_crlf), max_size=8),
    st.integers(min_value=0, max_value=2**32),
)
def test_roundtrip_one_byte_chunks(cmds, seed: int) -> None:
    blob = b"".join(e for e, _ in cmds)
    p = CommandParser(P_MAX_MSG, P_MAX_BODY)
    got = feed_and_drain(p, [blob[i : i + 1] for i in range(len(blob))], random.Random(seed))
    assert got == [x for _, x in cmds]
    assert p.buffered() == 0


@SETTINGS
@given(st.lists(st.tuples(commands, st.booleans()).map(with_crlf), min_size=1, max_size=10))
def test_roundtrip_one_feed(cmds) -> None:
    p = CommandParser(P_MAX_MSG, P_MAX_BODY)
    p.feed(b"".join(e for e, _ in cmds))
    assert drain(p) == [x for _, x in cmds]


garbage_fragments = st.one_of(
    st.binary(max_size=24),
    st.sampled_from(
        [
            b"PUB t\n",
            b"DPUB t 5\n",
            b"MPUB t\n",
            b"IDENTIFY\n",
            b"AUTH\n",
            b"NOP\n",
            b"RDY 1\n",
            b"FIN ",
            b"\n",
            b"\r\n",
            b"\r",
            b" ",
            b"PUB",
            b"MPUB",
            b"Q" * (MAX_LINE_LENGTH // 2),
            b"Q" * (MAX_LINE_LENGTH - 3),
        ]
    ),
    st.integers(min_value=-2, max_value=MAX_BODY + 2).map(pack_len),
    st.integers(min_value=-(2**31), max_value=2**31 - 1).map(pack_len),
)


@SETTINGS
@given(st.lists(garbage_fragments, max_size=40), st.data())
def test_garbage_never_crashes_or_overbuffers(frags: list[bytes], data: st.DataObject) -> None:
    blob = b"".join(frags)
    p = CommandParser(MAX_MSG, MAX_BODY)
    limit = MAX_BODY + MAX_LINE_LENGTH + 8
    try:
        for part in chunk(blob, split_points(data, len(blob))):
            p.feed(part)
            while (c := p.next_command()) is not None:
                name, params, body = c
                assert isinstance(name, bytes) and b"\n" not in name
                assert params[0] == name
                if name == b"MPUB":
                    assert isinstance(body, list) and body
                    assert all(0 < len(b) <= MAX_MSG for b in body)
                elif name in (b"PUB", b"DPUB"):
                    assert isinstance(body, bytes) and 0 < len(body) <= MAX_MSG
                elif name in (b"IDENTIFY", b"AUTH"):
                    assert isinstance(body, bytes) and 0 < len(body) <= MAX_BODY
                else:
                    assert body is None
            if data.draw(st.booleans(), label="compact"):
                p.compact()
            # waiting for a line, a size or a body: bounded by the limits
            assert p.buffered() <= max(MAX_LINE_LENGTH, MAX_BODY)
            assert p.buffered() <= limit
    except ClientError as e:
        assert isinstance(e, FatalClientError)
        assert e.code.startswith("E_")
        assert e.text == f"{e.code} {e.desc}".encode()


# --------------------------------------------------------------------------------------------
# 64-bit wrap as nsqd's ByteToBase10/int64/Duration; the error nsqd answers when
# the stream ends inside a command (CommandParser.eof_error)


@pytest.mark.parametrize(
    ("digits", "value"),
    [
        (b"18446744073709551615", 2**64 - 1),
        (b"18446744073709551616", 0),
        (b"99999999999999999999", 7766279631452241919),
        (b"0" * 40 + b"7", 7),
        (b"9" * 5000, 2**64 - 1),  # 10**5000 - 1 mod 2**64, past Python's int() digit limit
    ],
)
def test_byte_to_base10_wraps_like_uint64(digits: bytes, value: int) -> None:
    assert wire.byte_to_base10(digits) == value


def test_go_int64_and_ms_duration() -> None:
    assert wire.go_int64(2**63 - 1) == 2**63 - 1
    assert wire.go_int64(2**63) == -(2**63)
    assert wire.go_int64(2**64 - 1) == -1
    assert wire.go_ms_duration_ns(5) == 5_000_000
    assert wire.go_ms_duration_ns(2**64 - 1) == -1_000_000
    # a huge count can wrap back into range, as in Go
    assert wire.go_ms_duration_ns(9223372036855) == wire.go_int64(9223372036855 * 10**6)


def eof_error_after(data: bytes) -> FatalClientError | None:
    """The error answered when the stream ends after ``data``: at the EOF, or before it when
    the part received is refused already (an MPUB's count or sizes, checked as they arrive)."""
    p = CommandParser(MAX_MSG, MAX_BODY)
    p.feed(data)
    try:
        drain(p)
    except FatalClientError as e:
        return e
    return p.eof_error()


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"", None),
        (b"NOP\n", None),
        (b"PUB t", None),  # inside a command line: nsqd closes silently
        (b"PUB t\n" + pack_len(1) + b"a", None),
        (b"PUB t\n", b"E_BAD_MESSAGE PUB failed to read message body size"),
        (b"PUB t\n\x00\x00\x00", b"E_BAD_MESSAGE PUB failed to read message body size"),
        (b"PUB t\n" + pack_len(3) + b"ab", b"E_BAD_MESSAGE PUB failed to read message body"),
        (b"DPUB t 1\n", b"E_BAD_MESSAGE DPUB failed to read message body size"),
        (b"DPUB t 1\n" + pack_len(3), b"E_BAD_MESSAGE DPUB failed to read message body"),
        (b"IDENTIFY\n\x00", b"E_BAD_BODY IDENTIFY failed to read body size"),
        (b"IDENTIFY\n" + pack_len(9) + b"{", b"E_BAD_BODY IDENTIFY failed to read body"),
        (b"AUTH\n", b"E_BAD_BODY AUTH failed to read body size"),
        (b"AUTH\n" + pack_len(9), b"E_BAD_BODY AUTH failed to read body"),
        (b"MPUB t\n\x00", b"E_BAD_BODY MPUB failed to read body size"),
        (b"MPUB t\n" + pack_len(20), b"E_BAD_BODY MPUB failed to read message count"),
        (
            b"MPUB t\n" + pack_len(20) + pack_len(0),
            b"E_BAD_BODY MPUB invalid message count 0",
        ),
        (
            b"MPUB t\n" + pack_len(20) + pack_len(2) + pack_len(1) + b"a\x00",
            b"E_BAD_MESSAGE MPUB failed to read message(1) body size",
        ),
        (
            b"MPUB t\n" + pack_len(20) + pack_len(2) + pack_len(-1),
            b"E_BAD_MESSAGE MPUB invalid message(0) body size -1",
        ),
        (
            b"MPUB t\n" + pack_len(20) + pack_len(1) + pack_len(99),
            b"E_BAD_MESSAGE MPUB message too big 99 > 64",
        ),
        (
            b"MPUB t\n" + pack_len(20) + pack_len(1) + pack_len(5) + b"ab",
            b"E_BAD_MESSAGE MPUB failed to read message body",
        ),
        (
            b"MPUB t\n" + pack_len(20) + pack_len(1) + pack_len(1) + b"a",
            b"E_BAD_BODY MPUB body size 20 does not match its 1 messages (11 bytes left over)",
        ),
    ],
)
def test_eof_error(data: bytes, text: bytes | None) -> None:
    err = eof_error_after(data)
    if text is None:
        assert err is None
    else:
        assert err is not None and err.fatal and err.text == text


@SETTINGS
@given(st.binary(min_size=1, max_size=40), st.integers(min_value=1, max_value=60))
def test_eof_error_never_on_whole_commands(body: bytes, cut: int) -> None:
    """A stream cut anywhere inside a PUB's size or body names that read; cut at its end, no
    error."""
    whole = b"PUB t\n" + pack_len(len(body)) + body
    cut = min(cut, len(whole))
    err = eof_error_after(whole[:cut])
    if cut < 6:
        assert err is None
    elif cut < 10:
        assert err is not None and err.desc == "PUB failed to read message body size"
    elif cut < len(whole):
        assert err is not None and err.desc == "PUB failed to read message body"
    else:
        assert err is None


def test_take_fins_consumes_whole_fin_lines_only() -> None:
    p = wire.CommandParser(1024, 4096)
    ids = [b"%016x" % i for i in range(5)]
    p.feed(b"".join(b"FIN " + i + b"\n" for i in ids) + b"RDY 5\nFIN " + ids[0][:7])
    assert p.take_fins(3) == ids[:3]  # at most the limit
    assert p.take_fins(100) == ids[3:]
    assert p.take_fins(100) == []  # RDY is next: left to next_command
    assert p.next_command() == (b"RDY", [b"RDY", b"5"], None)
    assert p.take_fins(100) == []  # a partial FIN line waits
    p.feed(ids[0][7:] + b"\r\nFIN " + ids[1] + b"\n")
    assert p.take_fins(100) == []  # "\r\n": the general parser's business
    assert p.next_command() == (b"FIN", [b"FIN", ids[0]], None)
    assert p.take_fins(100) == [ids[1]]
    assert p.next_command() is None


@given(st.lists(st.integers(0, 2**63 - 1), max_size=40), st.integers(1, 50))
def test_take_fins_then_next_command_sees_the_same_ids(values, split) -> None:
    data = b"".join(b"FIN %016x\n" % v for v in values)
    p = wire.CommandParser(1024, 4096)
    got: list[bytes] = []
    for k in range(0, len(data), split):
        p.feed(data[k : k + split])
        while True:
            fins = p.take_fins(7)
            if fins:
                got += fins
                continue
            cmd = p.next_command()
            if cmd is None:
                break
            got.append(cmd[1][1])
    assert got == [b"%016x" % v for v in values]


_fin_stream_line = st.one_of(
    st.binary(min_size=16, max_size=16).map(lambda i: b"FIN " + i + b"\n"),  # "\n" inside too
    st.binary(min_size=16, max_size=16)
    .filter(lambda i: b"\n" not in i)
    .map(lambda i: b"FIN " + i + b"\n"),
    st.sampled_from([b"RDY 5\n", b"NOP\n", b"FIN abc\n", b"FIN  0123456789abcde\n", b"FIM "]),
    st.just(b"FIN 0123456789abcde\r\n"),  # a FIN line's length, a "\r" before its newline
)


@given(st.lists(_fin_stream_line, max_size=60), st.integers(1, 300), st.integers(1, 200))
def test_take_fins_runs_parse_as_next_command_does(lines, split, limit) -> None:
    """Whatever the stream holds, taking FIN runs first yields the commands that next_command
    alone yields, in order (a FIN run is checked at once, so a bad line anywhere in it must
    send the run down the line-by-line path)."""
    data = b"".join(lines)

    def parse(fast: bool) -> list[object]:
        p = wire.CommandParser(1024, 4096)
        out: list[object] = []
        for k in range(0, len(data), split):
            p.feed(data[k : k + split])
            while True:
                if fast:
                    fins = p.take_fins(limit)
                    if fins:
                        assert len(fins) <= limit
                        out += [(b"FIN", [b"FIN", i]) for i in fins]
                        continue
                try:
                    cmd = p.next_command()
                except wire.ClientError as e:
                    out.append(("error", str(e)))
                    return out
                if cmd is None:
                    break
                out.append((cmd[0], cmd[1]))
        return out

    assert parse(True) == parse(False)


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 65535),
    st.integers(0, 65535),
    st.binary(min_size=16, max_size=16),
    st.binary(max_size=300),
)
def test_record_frame_is_the_message_frame(ts, stored, attempts, msg_id, body) -> None:
    """A stored record framed with a new attempt count is byte for byte the message frame."""
    from nsqpy.message import encode_record

    out = bytearray(b"before")
    wire.append_record_frame(out, encode_record(ts, stored, msg_id, body), attempts)
    want = bytearray(b"before")
    wire.append_message_frame(want, ts, attempts, msg_id, body)
    assert out == want
    # several at once (what a dispatch pass writes): the same frames, in order
    from nsqpy.message import Message

    msgs = [Message(encode_record(ts, stored, msg_id, body * k)) for k in range(3)]
    for m in msgs:
        m.attempts = attempts
    out = bytearray(b"before")
    wire.append_record_frames(out, msgs)
    want = bytearray(b"before")
    for k in range(3):
        wire.append_message_frame(want, ts, attempts, msg_id, body * k)
    assert out == want


def test_record_frames_of_equal_and_changing_sizes() -> None:
    """append_record_frames reuses a frame header while record sizes repeat: runs of equal
    sizes broken by other sizes, and each message's own attempts, give the frames one by one."""
    from nsqpy.message import Message, encode_record

    bodies = [b"a", b"b", b"cc", b"d", b"", b"ee", b"ff", b"g"]
    msgs = []
    for i, body in enumerate(bodies):
        m = Message(encode_record(1000 + i, 7, b"%016d" % i, body))
        m.attempts = (i * 4099) % 65536
        msgs.append(m)
    out = bytearray()
    wire.append_record_frames(out, msgs)
    want = bytearray()
    for i, (m, body) in enumerate(zip(msgs, bodies)):
        wire.append_message_frame(want, 1000 + i, m.attempts, b"%016d" % i, body)
    assert out == want


def test_message_reads_its_record() -> None:
    """A Message gives the record's attempts and timestamp (uint16 and int64, big-endian)."""
    from nsqpy.message import Message, encode_record

    m = Message(encode_record(2**63 - 1, 0xABCD, b"0123456789abcdef", b"body"))
    assert (m.attempts, m.timestamp, m.id, m.body) == (
        0xABCD,
        2**63 - 1,
        b"0123456789abcdef",
        b"body",
    )
    m.attempts += 1
    assert Message(m.to_record()).attempts == 0xABCE


def test_long_mpub_taken_in_steps() -> None:
    """A whole MPUB body of many messages is split MPUB_SCAN_STEP messages per call
    (more_work says to call again), valid or not, with the same result and errors."""
    n = max(wire.MPUB_SCAN_STEP * 2 + 5, 6000)
    body = pack_len(n) + (pack_len(10) + b"x" * 10) * n  # over MPUB_SPLIT_AT_ONCE
    p = CommandParser(1 << 20, 1 << 22)
    p.feed(b"MPUB t\n" + pack_len(len(body)) + body)
    calls = 0
    while (cmd := p.next_command()) is None:
        assert p.more_work
        calls += 1
    assert calls == -(-n // wire.MPUB_SCAN_STEP) - 1 and not p.more_work
    assert cmd == (b"MPUB", [b"MPUB", b"t"], [b"x" * 10] * n)
    lying = pack_len(n + 1) + (pack_len(10) + b"x" * 10) * n
    p = CommandParser(1 << 20, 1 << 22)
    p.feed(b"MPUB t\n" + pack_len(len(lying)) + lying)
    with pytest.raises(FatalClientError) as ei:
        while p.next_command() is None:
            assert p.more_work
    assert ei.value.desc == f"MPUB failed to read message({n}) body size"


# --------------------------------------------------------------------------------------------
# One owner per layout: message.py's record offsets, wire.iter_frames


def test_record_offsets_name_the_layout() -> None:
    from nsqpy import message

    rec = message.encode_record(7, 3, b"0123456789abcdef", b"body")
    assert rec[message.ID_SLICE] == rec[message.ID_START : message.ID_END] == b"0123456789abcdef"
    assert rec[message.BODY_SLICE] == rec[message.BODY_START :] == b"body"
    assert message.HEADER_LENGTH == wire.MSG_HEADER_LENGTH == 26
    assert message.ID_LENGTH == wire.MSG_ID_LENGTH == 16
    assert struct.unpack_from(">H", rec, message.ATTEMPTS_START)[0] == 3
    assert struct.unpack_from(">q", rec, message.TIMESTAMP_START)[0] == 7
    # wire's record codec is message.py's, not a copy
    assert wire.encode_message is message.encode_record
    assert wire.decode_message is message.decode_record


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.binary(max_size=40)), max_size=8))
def test_iter_frames_walks_whole_frames_and_leaves_the_tail(frames: list) -> None:
    data = b"".join(wire.encode_frame(t, d) for t, d in frames)
    prefix = b"junk"
    buf = bytearray(prefix + data)
    for cut in range(len(data) + 1):
        got = list(wire.iter_frames(buf, len(prefix), len(prefix) + cut))
        whole = [(t, bytes(buf[s:e])) for t, s, e in got]
        assert whole == frames[: len(whole)]
        consumed = got[-1][2] if got else len(prefix)
        # what is left is less than the next frame: a partial tail
        if len(whole) < len(frames):
            nxt = len(wire.encode_frame(*frames[len(whole)]))
            assert len(prefix) + cut - consumed < nxt
        else:
            assert consumed == len(prefix) + cut


def test_iter_frames_message_offsets() -> None:
    from nsqpy import message

    out = bytearray()
    wire.append_message_frame(out, 5, 2, b"f" * 16, b"xyz")
    ((ftype, start, end),) = list(wire.iter_frames(out))
    assert ftype == wire.FRAME_TYPE_MESSAGE
    assert out[start + message.ID_START : start + message.ID_END] == b"f" * 16
    assert out[start + message.BODY_START : end] == b"xyz"


@pytest.mark.parametrize("size", [-5, 0, 3])
def test_iter_frames_refuses_a_size_below_4(size: int) -> None:
    with pytest.raises(ValueError):
        list(wire.iter_frames(struct.pack(">ii", size, 0) + b"rest"))
