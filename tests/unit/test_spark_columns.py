"""The nsq source's columns (nsqpy.spark.fetch._record_batch) against a model that decodes each
message frame on its own: chunks as nsqpy.client.Conn hands them over (a read's bytes, each
message record's start and end), with bodies of any length (short ones are stored inside an
Arrow view, so they take the other path), other frames between the messages, and groups of
chunks from several nsqd. The FIN lines each chunk keeps are checked too."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from nsqpy.spark.fetch import _Chunk, _record_batch  # noqa: E402
from nsqpy.spark.spool import SCHEMA  # noqa: E402

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Conn:
    """What a chunk reads of its connection: the nsqd address."""

    def __init__(self, addr: str) -> None:
        self.addr = addr


_message = st.tuples(
    st.integers(0, (1 << 62) - 1),  # publish time, ns
    st.integers(1, 65535),  # attempts
    st.binary(min_size=16, max_size=16).map(lambda b: b.hex()[:16].encode()),  # ID
    st.binary(max_size=300),  # body
)
# a read: its messages, each with whether a non-message frame comes before it
_read = st.lists(st.tuples(_message, st.booleans()), min_size=1, max_size=40)


def _frame(ftype: int, data: bytes) -> bytes:
    return struct.pack(">ii", len(data) + 4, ftype) + data


def _chunk(conn: _Conn, read: list) -> tuple[_Chunk, list]:
    data = bytearray()
    starts, ends, rows = [], [], []
    for (ts, attempts, mid, body), frame_before in read:
        if frame_before:
            data += _frame(0, b"_heartbeat_")
        record = struct.pack(">qH", ts, attempts) + mid + body
        data += _frame(2, record)
        starts.append(len(data) - len(record))
        ends.append(len(data))
        rows.append((mid.decode(), body, ts, attempts, conn.addr))
    return _Chunk(conn, bytes(data), starts, ends), rows  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(reads=st.lists(st.tuples(st.sampled_from(["a:4150", "b:4150"]), _read), min_size=1,
                      max_size=4))  # fmt: skip
def test_columns_match_the_frames_decoded_one_by_one(reads: list) -> None:
    conns = {a: _Conn(a) for a in ("a:4150", "b:4150")}
    chunks, want = [], []
    for addr, read in reads:
        c, rows = _chunk(conns[addr], read)
        chunks.append(c)
        want.append(rows)
    batch = _record_batch(chunks, "topic", "channel")
    assert batch.schema == SCHEMA
    got = batch.to_pylist()
    flat = [r for rows in want for r in rows]
    assert len(got) == len(flat)
    for g, (mid, body, ts, attempts, addr) in zip(got, flat, strict=True):
        assert g["id"] == mid
        assert g["body"] == body
        assert g["timestamp"] == _EPOCH + timedelta(microseconds=ts // 1000)
        assert g["attempts"] == attempts
        assert (g["topic"], g["channel"], g["nsqd_address"]) == ("topic", "channel", addr)
    for c, rows in zip(chunks, want, strict=True):
        assert c.fin == b"".join(b"FIN " + mid.encode() + b"\n" for mid, *_ in rows)
        assert c.ids is not None and [i.decode() for i in c.ids.tolist()] == [r[0] for r in rows]
        assert c.data == b""
