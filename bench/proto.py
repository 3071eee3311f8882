"""The client side of the TCP V2 protocol, as lean as the benchmark needs it.

Strategy: every connection is an nsqpy.testing.wire_client.WireClient (blocking socket, TCP_NODELAY,
one receive buffer); commands are pre-encoded once with nsqpy.wire's encoders; the hot loops
walk the frames in place with wire.iter_frames and take IDs at message.py's offsets, never one
object per frame. A connection says hello as NSQ's bench tools do (magic, then IDENTIFY with
client_id, hostname and user_agent only, so the server keeps its default output buffering)."""

from __future__ import annotations

import struct

from nsqpy import message, wire
from nsqpy.testing.wire_client import NOP as NOP
from nsqpy.testing.wire_client import WireClient
from nsqpy.testing.wire_client import WireError as ProtocolError

__all__ = ["NOP", "ProtocolError", "WireClient"]

LEN = struct.Struct(">i")
STAMP = struct.Struct(">q")

FRAME_RESPONSE = wire.FRAME_TYPE_RESPONSE
FRAME_ERROR = wire.FRAME_TYPE_ERROR
FRAME_MESSAGE = wire.FRAME_TYPE_MESSAGE

#: Offsets inside a message frame's data (a record: message.py's layout), counted from the
#: data_start that wire.iter_frames yields.
MSG_ID_START = message.ID_START
MSG_ID_END = message.ID_END
MSG_BODY_START = message.BODY_START

OK_FRAME = wire.encode_response(wire.OK)
HEARTBEAT = wire.HEARTBEAT

#: Receive buffer of a consuming connection (grown when one frame does not fit).
BUF_SIZE = 1 << 20


def connect(
    addr: tuple[str, int], role: str, timeout: float = 10, **identify: object
) -> WireClient:
    """Open a V2 connection and IDENTIFY (the reply is read; it must be OK or JSON)."""
    client = WireClient.connect(addr, timeout=timeout, buffer_size=BUF_SIZE)
    fields: dict[str, object] = {
        "client_id": role,
        "hostname": role,
        "user_agent": f"nsqpy-bench/{role}",
        **identify,
    }
    try:
        client.identify(fields)
    except BaseException:
        client.close()
        raise
    return client


def subscribe(client: WireClient, topic: str, channel: str) -> None:
    client.sub(topic, channel)


def rdy(count: int) -> bytes:
    return wire.encode_command(b"RDY", str(count).encode())


def mpub_frame(topic: str, size: int, count: int) -> bytes:
    """An MPUB of ``count`` bodies of ``size`` bytes, encoded once and sent many times."""
    return wire.encode_mpub(topic.encode(), [b"x" * size] * count)


def fin_lines(ids: list) -> bytes:  # type: ignore[type-arg]
    """``FIN <id>\\n`` for every ID (bytes-like), as one buffer for one send."""
    return b"FIN " + b"\nFIN ".join(ids) + b"\n"


def fin_received(client: WireClient) -> list[tuple[int, int]]:
    """Take every whole frame a consumer's ``client`` has buffered and FIN its messages.

    A heartbeat is answered with NOP, another response is passed over, an error frame raises
    ProtocolError. The messages' IDs (at message.py's offsets) go out as one buffer of
    ``FIN <id>\\n`` lines, one send per call, as bench_reader's buffered writer sends them.
    Returns each message's ``(data_start, data_end)`` in ``client.buf``, in the order received:
    valid until the next ``client.fill()``."""
    buf = client.buf
    spans = []
    end = client.pos
    for ftype, start, end in client.frames():
        if ftype == FRAME_MESSAGE:
            spans.append((start, end))
        elif ftype == FRAME_RESPONSE:
            if buf[start:end] == HEARTBEAT:
                client.send(NOP)
        else:
            raise ProtocolError(f"error frame: {bytes(buf[start:end])!r}")
    client.pos = end
    if spans:
        client.send(fin_lines([buf[s + MSG_ID_START : s + MSG_ID_END] for s, _ in spans]))
    return spans
