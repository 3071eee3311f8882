"""Unit tests for nsqpy.testing.wire_client.WireClient over a socketpair (the server side is this
test, writing frames by hand): frames, heartbeats, the buffer's growth, timeouts, EOF."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from nsqpy import message, wire
from nsqpy.testing.wire_client import ConnectionClosed, WireClient, WireError


@pytest.fixture
def pair() -> Iterator[tuple[WireClient, socket.socket]]:
    a, b = socket.socketpair()
    client = WireClient(a, timeout=2, buffer_size=64)
    b.settimeout(2)
    yield client, b
    client.close()
    b.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk
        out += chunk
    return out


def test_read_frame_answers_heartbeats(pair: tuple[WireClient, socket.socket]) -> None:
    client, server = pair
    server.sendall(wire.encode_response(wire.HEARTBEAT) + wire.encode_response(b"OK"))
    assert client.read_frame() == (wire.FRAME_TYPE_RESPONSE, b"OK")
    assert recv_exactly(server, 4) == b"NOP\n"


def test_heartbeats_come_out_when_not_answered(pair: tuple[WireClient, socket.socket]) -> None:
    client, server = pair
    client.answer_heartbeats = False
    server.sendall(wire.encode_response(wire.HEARTBEAT))
    assert client.read_frame() == (wire.FRAME_TYPE_RESPONSE, wire.HEARTBEAT)


def test_split_frames_and_a_frame_bigger_than_the_buffer(
    pair: tuple[WireClient, socket.socket],
) -> None:
    client, server = pair
    rec = message.encode_record(1, 2, b"a" * 16, b"z" * 500)  # the buffer starts at 64 bytes
    frame = bytearray()
    wire.append_record_frame(frame, rec, 2)
    data = bytes(frame) + wire.encode_response(b"OK")
    for i in range(0, len(data), 37):
        server.sendall(data[i : i + 37])
    assert client.read_message() == (1, 2, b"a" * 16, b"z" * 500)
    client.expect_ok()
    assert client.pos == client.have


def test_error_frame_timeout_and_eof(pair: tuple[WireClient, socket.socket]) -> None:
    client, server = pair
    server.sendall(wire.encode_error(wire.ClientError("E_BAD_TOPIC", "nope")))
    with pytest.raises(WireError) as e:
        client.expect_ok()
    assert e.value.code == "E_BAD_TOPIC"
    with pytest.raises(TimeoutError):
        client.read_frame(timeout=0.05)
    server.close()
    with pytest.raises(ConnectionClosed):
        client.read_frame()


def test_commands_are_wire_encoded(pair: tuple[WireClient, socket.socket]) -> None:
    client, server = pair
    client.command(b"PUB", b"t", body=b"hi")
    client.rdy(7)
    client.fin(b"b" * 16)
    want = wire.encode_command(b"PUB", b"t", body=b"hi") + b"RDY 7\n" + b"FIN " + b"b" * 16 + b"\n"
    assert recv_exactly(server, len(want)) == want
