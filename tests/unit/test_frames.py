"""nsqpy.client.frames' two walks (bytewise, the compiled one; struct, the uncompiled one) against
nsqpy.wire.iter_frames (the frame splitter they replace in the client): the same frames from the
same bytes, cut anywhere, and their stops (a non-message frame, a message over the size limit, a
bad size field)."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from nsqpy import wire
from nsqpy.client.frames import NO_FRAME, scan_frames_bytewise, scan_frames_struct
from nsqpy.message import BODY_START


def _frame(ftype: int, data: bytes) -> bytes:
    return struct.pack(">ii", len(data) + 4, ftype) + data


def _stream(rng: random.Random, n: int) -> bytes:
    out = []
    for i in range(n):
        kind = rng.choice((2, 2, 2, 2, 0, 1))
        if kind == 2:
            body = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 40)))
            data = struct.pack(">qH", i, 1) + b"%016d" % i + body
        else:
            data = b"_heartbeat_" if kind == 0 else b"E_FIN_FAILED x"
        out.append(_frame(kind, data))
    return b"".join(out)


SCANS = pytest.mark.parametrize("scan", [scan_frames_bytewise, scan_frames_struct])


def _scan_all(scan: Any, buf: bytes, max_body: int = 0) -> tuple[int, list[tuple[int, int, int]]]:
    """Every frame scan_frames gives, in order, as iter_frames gives them."""
    frames: list[tuple[int, int, int]] = []
    pos = 0
    while True:
        starts: list[int] = []
        ends: list[int] = []
        pos, ftype, start, end = scan(buf, pos, max_body, starts, ends)
        frames += [(wire.FRAME_TYPE_MESSAGE, s, e) for s, e in zip(starts, ends, strict=True)]
        if ftype == NO_FRAME:
            return pos, frames
        frames.append((ftype, start, end))


@SCANS
def test_scan_frames_gives_iter_frames_frames_at_every_cut(scan: Any) -> None:
    rng = random.Random(20)
    data = _stream(rng, 60)
    for cut in range(len(data) + 1):
        buf = data[:cut]
        want = list(wire.iter_frames(buf))
        pos, got = _scan_all(scan, buf)
        assert got == want, cut
        assert pos == (want[-1][2] if want else 0)


@SCANS
def test_scan_frames_stops_at_oversized_message_and_bad_size(scan: Any) -> None:
    small = _frame(2, struct.pack(">qH", 1, 1) + b"a" * 16 + b"x" * 10)
    big = _frame(2, struct.pack(">qH", 2, 1) + b"b" * 16 + b"y" * 11)
    buf = small + big + small
    starts: list[int] = []
    ends: list[int] = []
    pos, ftype, start, end = scan(buf, 0, 10, starts, ends)
    assert (starts, ends) == ([8], [len(small)])
    assert ftype == wire.FRAME_TYPE_MESSAGE and end - start == BODY_START + 11
    assert pos == len(small) + len(big)
    assert scan(buf, 0, 11, [], [])[1] == NO_FRAME
    for size in (3, -1, -(1 << 31)):
        bad = small + struct.pack(">ii", size, 2) + b"z" * 8
        starts = []
        with pytest.raises(ValueError, match="bad frame size"):
            scan(bad, 0, 0, starts, [])
        assert starts == [8]
