"""The client side of the TCP V2 protocol, as lean as the benchmark needs it.

Strategy: blocking sockets (TCP_NODELAY), commands pre-encoded once with nsqpy.wire's encoders,
frames parsed in place with one precompiled struct over a bytearray, never one object per frame
on the hot paths. A connection says hello as NSQ's bench tools do (magic, then IDENTIFY with
client_id, hostname and user_agent only, so the server keeps its default output buffering)."""

from __future__ import annotations

import json
import socket
import struct

from nsqpy import wire

FRAME_HEADER = struct.Struct(">ii")  # size (frame type + data), frame type
LEN = struct.Struct(">i")
STAMP = struct.Struct(">q")

FRAME_RESPONSE = wire.FRAME_TYPE_RESPONSE
FRAME_ERROR = wire.FRAME_TYPE_ERROR
FRAME_MESSAGE = wire.FRAME_TYPE_MESSAGE

#: Offsets inside a message frame, counted from the frame's first byte: 4-byte size, 4-byte
#: type, 8-byte timestamp, 2-byte attempts, 16-byte ID, body.
MSG_ID_START = 18
MSG_ID_END = 34
MSG_BODY_START = 34

OK_FRAME = wire.encode_response(wire.OK)
HEARTBEAT = wire.HEARTBEAT
NOP = b"NOP\n"


class ProtocolError(Exception):
    """The server answered with an error frame, or closed the connection, or sent garbage."""


def connect(
    addr: tuple[str, int], role: str, timeout: float = 10, **identify: object
) -> socket.socket:
    """Open a V2 connection and IDENTIFY (the reply is read; it must be OK or JSON)."""
    sock = socket.create_connection(addr, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fields: dict[str, object] = {
        "client_id": role,
        "hostname": role,
        "user_agent": f"nsqpy-bench/{role}",
        **identify,
    }
    sock.sendall(wire.MAGIC_V2 + wire.encode_command(b"IDENTIFY", body=json.dumps(fields).encode()))
    ftype, data = read_frame(sock)
    if ftype != FRAME_RESPONSE:
        raise ProtocolError(f"IDENTIFY: {data!r}")
    return sock


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One whole frame, answering heartbeats with NOP on the way (slow path: setup only)."""
    while True:
        head = recv_exactly(sock, 8)
        size, ftype = FRAME_HEADER.unpack(head)
        data = recv_exactly(sock, size - 4)
        if ftype == FRAME_RESPONSE and data == HEARTBEAT:
            sock.sendall(NOP)
            continue
        return ftype, data


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ProtocolError("connection closed by server")
        buf += chunk
    return bytes(buf)


def subscribe(sock: socket.socket, topic: str, channel: str) -> None:
    sock.sendall(wire.encode_command(b"SUB", topic.encode(), channel.encode()))
    ftype, data = read_frame(sock)
    if (ftype, data) != (FRAME_RESPONSE, wire.OK):
        raise ProtocolError(f"SUB {topic} {channel}: {data!r}")


def rdy(count: int) -> bytes:
    return wire.encode_command(b"RDY", str(count).encode())


def mpub_frame(topic: str, size: int, count: int) -> bytes:
    """An MPUB of ``count`` bodies of ``size`` bytes, encoded once and sent many times."""
    return wire.encode_mpub(topic.encode(), [b"x" * size] * count)


def fin_lines(ids: list) -> bytes:  # type: ignore[type-arg]
    """``FIN <id>\\n`` for every ID (bytes-like), as one buffer for one send."""
    return b"FIN " + b"\nFIN ".join(ids) + b"\n"
