"""nsqpy.diskqueue_codec (the per-record loops of go-diskqueue's framing) against a plain model:
[int32 big-endian size][bytes] per record, the file and buffer bounds, marks and positions."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.diskqueue_codec import cut_records, pack_records, record_starts


def framed(records: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(r)) + r for r in records)


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=29),
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=1, max_value=400),
    st.integers(min_value=1, max_value=400),
    st.sets(st.integers(min_value=0, max_value=29)),
)
def test_pack_records_matches_the_model(datas, start, wp, max_bytes, buf_limit, marks) -> None:
    start = min(start, len(datas) - 1)
    marks_l = sorted(marks)
    mark_at = next((k for k, m in enumerate(marks_l) if m >= start), len(marks_l))
    buf = bytearray(b"pre")
    positions: list[tuple[int, int]] = []
    end, wp_after, mark_after = pack_records(
        buf, datas, start, wp, max_bytes, buf_limit, marks_l, mark_at, positions, 7
    )
    # the model: the first record always, later ones while they fit the file and the buffer
    want_end, pos, size = start, wp, 3
    want_positions = []
    while want_end < len(datas):
        n = len(datas[want_end])
        if want_end > start and (pos + 4 + n > max_bytes or size >= buf_limit):
            break
        if want_end in marks:
            want_positions.append((7, pos))
        pos += 4 + n
        size += 4 + n
        want_end += 1
    assert end == want_end > start
    assert wp_after == pos
    assert bytes(buf) == b"pre" + framed(datas[start:end])
    assert positions == want_positions
    assert mark_after == next((k for k, m in enumerate(marks_l) if m >= end), len(marks_l))


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.lists(st.binary(min_size=0, max_size=40), min_size=0, max_size=30),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=0, max_value=5),
)
def test_record_starts_and_cut_records_match_the_model(records, lo, hi, limit, cut) -> None:
    data = framed(records)
    data = data[: len(data) - cut] if cut else data  # maybe a record the chunk lacks the end of
    starts = [7]  # what the caller already holds counts toward the limit
    i = record_starts(data, 0, lo, hi, limit, starts)
    want, want_pos, at = [], [], 0
    for r in records:
        if len(want) + 1 >= limit or at + 4 + len(r) > len(data) or not lo <= len(r) <= hi:
            break
        want.append(r)
        want_pos.append(1000 + at)
        at += 4 + len(r)
    assert i == at
    assert len(starts) == len(want) + 1
    out: list[bytes] = [b"first"]
    positions: list[int] = []
    if want:
        cut_records(data, [*starts[1:], i], out, positions, 1000)
    assert out == [b"first", *want]
    assert positions == want_pos
