"""The record framing of go-diskqueue data files, in the two loops that touch every record.

Strategy: a data file is records back to back, each ``[4-byte big-endian int32 size][size
bytes]`` (go-diskqueue writeOne/readOne). DiskQueue (diskqueue.py) stays a Python class;
these free functions hold its per-record loops of put_many and read_many so the default build
compiles them (build_info.COMPILED_MODULES). They only move bytes and positions: every decision
about rolling files, flushing, corruption and counting stays with the caller, which calls again
after acting."""

from __future__ import annotations

import struct
import types
from typing import Final

_unpack_len = struct.Struct(">i").unpack_from


def _probe() -> None:
    """Nothing: its type tells whether this module runs compiled (see NATIVE)."""


#: True when this module runs compiled (mypyc). A record's size is then read as four bytes,
#: native loads (about 30 ns a record against 260 through struct); interpreted, by struct's
#: unpack_from, which is then the faster (about 180 ns against 300). Measured on a chunk of
#: 226-byte records.
NATIVE: Final = not isinstance(_probe, types.FunctionType)


def pack_records(
    buf: bytearray,
    datas: list[bytes],
    i: int,
    write_pos: int,
    max_bytes: int,
    buf_limit: int,
    marks: list[int],
    mark_at: int,
    positions: list[tuple[int, int]],
    file_num: int,
) -> tuple[int, int, int]:
    """Append ``datas[i]`` and the records after it to ``buf``, each as [int32 BE size][bytes].

    ``datas[i]`` is appended unconditionally (the caller made room: rolled the file or flushed
    the buffer); each later record only while it fits the file (``write_pos + 4 + len <=
    max_bytes``, byte positions in data file ``file_num``) and ``len(buf) < buf_limit``.
    ``marks`` are ascending indexes into ``datas`` whose position is wanted, ``mark_at`` the
    first of them not yet reached: for each mark appended, (file_num, its write position) goes
    to ``positions``. Returns (index of the first record not appended, the write position after
    the last appended, the new mark_at)."""
    n_datas = len(datas)
    n_marks = len(marks)
    mark = marks[mark_at] if mark_at < n_marks else -1
    wp = write_pos
    first = True
    while i < n_datas:
        d = datas[i]
        n = len(d)
        if not first and (wp + 4 + n > max_bytes or len(buf) >= buf_limit):
            break
        first = False
        if i == mark:
            positions.append((file_num, wp))
            mark_at += 1
            mark = marks[mark_at] if mark_at < n_marks else -1
        buf += n.to_bytes(4, "big")  # compiled: no call through struct (65 ns against 98)
        buf += d
        wp += 4 + n
        i += 1
    return i, wp, mark_at


def record_starts(buf: bytes, i: int, lo: int, hi: int, limit: int, starts: list[int]) -> int:
    """Walk the whole records of ``buf`` (a chunk of a data file) from index ``i``, appending
    the index of each one's 4-byte size to ``starts`` until ``starts`` holds ``limit``. Stops
    before a record that the chunk does not hold whole or whose size is outside [lo, hi] (the
    caller's checked path reads it). Returns the index after the last record walked: record k
    is then ``buf[starts[k] + 4 : next start]``."""
    end = len(buf)
    while len(starts) < limit and i + 4 <= end:
        if NATIVE:
            n = (buf[i] << 24) | (buf[i + 1] << 16) | (buf[i + 2] << 8) | buf[i + 3]
            if n >= 0x80000000:
                n -= 0x100000000  # int32, as go-diskqueue reads it
        else:
            n = _unpack_len(buf, i)[0]
        j = i + 4 + n
        if j > end or n < lo or n > hi:
            break
        starts.append(i)
        i = j
    return i


def cut_records(
    buf: bytes, offs: list[int], out: list[bytes], positions: list[int] | None, base: int
) -> None:
    """Append to ``out`` each record of ``buf`` that :func:`record_starts` found (record k is
    ``buf[offs[k] + 4 : offs[k + 1]]``); with ``positions``, each one's file position too,
    ``base`` being the first one's."""
    a = offs[0]
    base -= a
    for k in range(1, len(offs)):
        b = offs[k]
        if positions is not None:
            positions.append(base + a)
        out.append(buf[a + 4 : b])
        a = b


def unframe(chunk: bytes | memoryview, ends: list[int]) -> list[bytes]:
    """The records of ``chunk`` ([int32 BE size][bytes]* back to back), ``ends[k]`` being
    where record k ends in it (DiskQueue.put_framed's chunk split for put_many)."""
    view = memoryview(chunk)
    out: list[bytes] = []
    start = 0
    for end in ends:
        out.append(bytes(view[start + 4 : end]))
        start = end
    return out
