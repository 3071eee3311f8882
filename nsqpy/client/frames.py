"""Splitting a client's read buffer into nsqd's V2 frames, many frames per call.

Strategy: a consumer's reads are mostly message frames back to back, so the client
(nsqpy.client.conn) asks once per read for all of them: :func:`scan_frames` walks the whole
frames from a position, appends each message frame's data range to two lists, and returns at
the first frame that is not a plain message (a response, an error, an unknown type, or a message
over the size limit), which the caller handles itself before scanning on, or at the partial
frame at the end of the buffer. No bytes are copied and nothing is allocated per frame but the
two list entries.

Two walks with one contract: compiled by mypyc, reading the frame header byte by byte from a
``bytes`` is C (about 60-90 ns a frame against 300-500 for the struct-based generator
nsqpy.wire.iter_frames); uncompiled, byte indexing is the slow way, and one
``struct.unpack_from`` per header is faster. ``scan_frames`` is the one for how this module
runs (``COMPILED``), chosen at import.

Frame layout (nsq.io TCP protocol spec, "Data Format"; nsqd protocol_v2.go Send): ``[size:
int32 BE][frame type: int32 BE][data: size - 4 bytes]``; frame types 0 response, 1 error,
2 message."""

from __future__ import annotations

import struct
from typing import Final

from ..message import BODY_START

#: nsqd's frame types (protocol_v2.go frameTypeResponse, frameTypeError, frameTypeMessage)
FRAME_TYPE_RESPONSE: Final = 0
FRAME_TYPE_ERROR: Final = 1
FRAME_TYPE_MESSAGE: Final = 2
#: returned as the frame type when the scan stopped at the end of the whole frames
NO_FRAME: Final = -1
#: whether this module runs compiled (mypyc): its file is then an extension, not the .py
COMPILED: Final = not __file__.endswith(".py")

_HEADER: Final = struct.Struct(">ii")  # size (frame type + data), frame type


def _int32(buf: bytes, pos: int) -> int:
    v = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]
    return v - (1 << 32) if v & 0x80000000 else v


def scan_frames_bytewise(
    buf: bytes, pos: int, max_body: int, starts: list[int], ends: list[int]
) -> tuple[int, int, int, int]:
    """Walk the whole frames of ``buf`` from ``pos``: for each message frame whose body is at
    most ``max_body`` bytes (0: no limit), append its data range to ``starts`` and ``ends`` (the
    data, a message record, is ``buf[start:end]``); stop after the first other frame.

    Returns ``(next_pos, frame_type, data_start, data_end)``: the frame the scan stopped at
    (consumed: ``next_pos`` is its end), or ``(end of the last whole frame, NO_FRAME, 0, 0)``
    when the buffer holds no further whole frame. A message frame over ``max_body`` is returned
    as the stopping frame with type FRAME_TYPE_MESSAGE; the caller decides what to do with it.
    Raises ValueError at a frame whose size field is below 4 (it cannot hold its type: the
    stream is not V2 frames), leaving the messages before it in the lists. ``buf`` is bytes
    (compiled, a bytearray is refused: take ``bytes(buffer)`` once per read)."""
    # Kept apart from its twin scan_frames_struct below: one header read per variant, each the
    # whole per-read loop (this one for the mypyc build), so no shared step costs a call.
    end = len(buf)
    limit = max_body + BODY_START if max_body > 0 else -1
    while end - pos >= 8:
        size = _int32(buf, pos)
        if size < 4:
            raise ValueError(f"bad frame size {size} at offset {pos}")
        data_end = pos + 4 + size
        if data_end > end:
            break
        ftype = _int32(buf, pos + 4)
        start = pos + 8
        if ftype != FRAME_TYPE_MESSAGE or (limit >= 0 and data_end - start > limit):
            return data_end, ftype, start, data_end
        starts.append(start)
        ends.append(data_end)
        pos = data_end
    return pos, NO_FRAME, 0, 0


def scan_frames_struct(
    buf: bytes, pos: int, max_body: int, starts: list[int], ends: list[int]
) -> tuple[int, int, int, int]:
    """:func:`scan_frames_bytewise`'s contract, reading each frame header with one
    ``struct.unpack_from`` (the faster way uncompiled)."""
    end = len(buf)
    limit = max_body + BODY_START if max_body > 0 else -1
    # Kept apart from its twin scan_frames_bytewise above (the header read is what differs);
    # nsqpy.wire.iter_frames walks frames the same way as a generator for other callers.
    unpack = _HEADER.unpack_from
    while end - pos >= 8:
        size, ftype = unpack(buf, pos)
        if size < 4:
            raise ValueError(f"bad frame size {size} at offset {pos}")
        data_end = pos + 4 + size
        if data_end > end:
            break
        start = pos + 8
        if ftype != FRAME_TYPE_MESSAGE or (limit >= 0 and data_end - start > limit):
            return data_end, ftype, start, data_end
        starts.append(start)
        ends.append(data_end)
        pos = data_end
    return pos, NO_FRAME, 0, 0


#: the walk for how this module runs
scan_frames: Final = scan_frames_bytewise if COMPILED else scan_frames_struct
