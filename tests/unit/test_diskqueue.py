"""nsqpy.diskqueue: go-diskqueue's file format, roll rule, corruption handling and crash windows.

Files are built and parsed here by hand with struct, independently of the module, so that
"nsqpy reads what go wrote and go reads what nsqpy wrote" is checked byte for byte.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import struct
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.diskqueue import READ_CHUNK, DiskQueue, DiskQueueClosed

NAME = "test_dq"


def make(
    path: Path | str,
    max_bytes: int = 1 << 20,
    min_size: int = 0,
    max_size: int = 1 << 10,
    sync_every: int = 2500,
    sync_timeout_ms: int = 2000,
    name: str = NAME,
    clock: Callable[[], float] | None = None,
) -> DiskQueue:
    if clock is None:
        return DiskQueue(
            name, str(path), max_bytes, min_size, max_size, sync_every, sync_timeout_ms
        )
    return DiskQueue(
        name, str(path), max_bytes, min_size, max_size, sync_every, sync_timeout_ms, clock=clock
    )


def drain(dq: DiskQueue, limit: int | None = None) -> list[bytes]:
    out = []
    while limit is None or len(out) < limit:
        rec = dq.peek()
        if rec is None:
            break
        out.append(rec)
        dq.advance()
    return out


def data_path(d: Path | str, num: int, name: str = NAME) -> Path:
    return Path(d) / f"{name}.diskqueue.{num:06d}.dat"


def meta_path(d: Path | str, name: str = NAME) -> Path:
    return Path(d) / f"{name}.diskqueue.meta.dat"


def data_files(d: Path | str, name: str = NAME) -> dict[int, Path]:
    pat = re.compile(re.escape(name) + r"\.diskqueue\.(\d{6})\.dat")
    return {int(m.group(1)): Path(d) / f for f in os.listdir(d) if (m := pat.fullmatch(f))}


def bad_files(d: Path | str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.endswith(".bad"))


def parse_records(raw: bytes) -> list[bytes]:
    """An independent reader of one data file: [int32 BE size][bytes]*, nothing left over."""
    out = []
    pos = 0
    while pos < len(raw):
        assert pos + 4 <= len(raw), "truncated size field"
        (n,) = struct.unpack_from(">i", raw, pos)
        assert n >= 0 and pos + 4 + n <= len(raw), "truncated record"
        out.append(raw[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


def encode_records(recs: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(r)) + r for r in recs)


def read_meta(d: Path | str) -> tuple[int, int, int, int, int]:
    """go-diskqueue's Fscanf("%d\\n%d,%d\\n%d,%d\\n"), strictly."""
    text = meta_path(d).read_bytes()
    m = re.fullmatch(rb"(-?\d+)\n(\d+),(\d+)\n(\d+),(\d+)\n", text)
    assert m, text
    a, b, c, e, f = (int(g) for g in m.groups())
    return a, b, c, e, f


def write_meta(d: Path | str, depth: int, rn: int, rp: int, wn: int, wp: int) -> None:
    meta_path(d).write_bytes(b"%d\n%d,%d\n%d,%d\n" % (depth, rn, rp, wn, wp))


def rec(i: int, size: int = 20) -> bytes:
    head = b"%08d:" % i
    return (head + b"x" * size)[: max(size, len(head))]


# ------------------------------------------------------------------------------------------
# Round trips and go's roll rule


def test_round_trip_across_rollovers_and_reopen(tmp_path: Path) -> None:
    records = [rec(i, 5 + i % 37) for i in range(600)]
    dq = make(tmp_path, max_bytes=120)
    for r in records:
        dq.put(r)
    assert dq.depth == 600
    assert dq.write_file_num > 20
    got = drain(dq, 250)
    assert got == records[:250]
    assert dq.depth == 350
    dq.close()
    names = set(os.listdir(tmp_path))
    for n in data_files(tmp_path):
        assert f"{NAME}.diskqueue.{n:06d}.dat" in names
    # the files the reader has left behind are gone once a meta naming a later file is durable
    assert min(data_files(tmp_path)) == read_meta(tmp_path)[1]

    dq = make(tmp_path, max_bytes=120)
    assert dq.depth == 350
    got = drain(dq)
    assert got == records[250:]
    assert dq.depth == 0
    assert dq.peek() is None
    dq.close()
    assert bad_files(tmp_path) == []
    depth, rn, rp, wn, wp = read_meta(tmp_path)
    assert (depth, rn, rp) == (0, wn, wp)


def test_go_roll_rule_rolls_before_the_crossing_write(tmp_path: Path) -> None:
    # go-diskqueue TestDiskQueueRoll: 10-byte records, maxBytesPerFile = 10 records exactly.
    msg = bytes(range(1, 10)) + b"\x00"
    dq = make(tmp_path, max_bytes=10 * 14, min_size=10)
    for i in range(11):
        dq.put(msg)
        assert dq.depth == i + 1
    assert dq.write_file_num == 1
    assert dq.write_pos == 14
    dq.flush()
    assert data_path(tmp_path, 0).stat().st_size == 140  # full, not beyond
    assert data_path(tmp_path, 1).stat().st_size == 14
    assert drain(dq) == [msg] * 11
    dq.close()


def test_roll_rule_byte_exact(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes=100, max_size=500)
    sizes = [30, 30, 30, 0, 96, 97, 200, 1, 1]
    recs = [bytes([i]) * s for i, s in enumerate(sizes)]
    for r in recs:
        dq.put(r)
    dq.close()
    files = data_files(tmp_path)
    layout = [parse_records(files[n].read_bytes()) for n in sorted(files)]
    # 34+34 = 68; +34 > 100 -> roll | 34+4 = 38; +100 > 100 -> roll | 100 (exactly the max);
    # 101 in an empty file (bigger than the max: alone) | 204 alone | 5+5
    assert layout == [recs[0:2], recs[2:4], [recs[4]], [recs[5]], [recs[6]], recs[7:9]]
    assert sorted(files) == list(range(6))


def test_files_parse_with_an_independent_reader(tmp_path: Path) -> None:
    import random

    rnd = random.Random(7)
    max_bytes = 300
    recs = [rnd.randbytes(rnd.randrange(0, 90)) for _ in range(400)]
    dq = make(tmp_path, max_bytes=max_bytes, max_size=100)
    dq.put_many(recs[:200])
    for r in recs[200:]:
        dq.put(r)
    consumed = drain(dq, 17)
    assert consumed == recs[:17]
    dq.close()

    files = data_files(tmp_path)
    nums = sorted(files)
    assert nums == list(range(nums[0], nums[-1] + 1))  # contiguous numbers
    parsed = [parse_records(files[n].read_bytes()) for n in nums]
    depth, rn, rp, wn, wp = read_meta(tmp_path)
    assert meta_path(tmp_path).read_bytes() == f"{depth}\n{rn},{rp}\n{wn},{wp}\n".encode()
    assert (depth, rn, wn) == (383, nums[0], nums[-1])
    assert wp == files[wn].stat().st_size
    # the read position is 17 records in, counted from the start of the read file
    flat = [r for recs_ in parsed for r in recs_]
    assert flat == recs[len(recs) - len(flat) :]
    first_in_read_file = len(recs) - len(flat)
    assert rp == sum(4 + len(r) for r in recs[first_in_read_file:17])
    for a, b in zip(nums, nums[1:]):
        size = files[a].stat().st_size
        assert size <= max_bytes or len(parsed[a - nums[0]]) == 1
        # the file was rolled because the next record would not have fit
        assert size + 4 + len(parsed[b - nums[0]][0]) > max_bytes


def test_reads_hand_built_go_files(tmp_path: Path) -> None:
    a, b, c, d, e = (bytes([65 + i]) * (10 + i) for i in range(5))
    f3 = encode_records([a, b])
    f4 = encode_records([c, d, e])
    data_path(tmp_path, 3).write_bytes(f3)
    data_path(tmp_path, 4).write_bytes(f4)
    # a consumed already: read position just after it; 4 records left
    write_meta(tmp_path, 4, 3, 4 + len(a), 4, len(f4))
    dq = make(tmp_path, max_bytes=64)
    assert dq.depth == 4
    assert (dq.read_file_num, dq.read_pos, dq.write_file_num, dq.write_pos) == (
        3,
        14,
        4,
        len(f4),
    )
    assert dq.peek() == b
    assert dq.peek() == b
    dq.advance()
    assert dq.depth == 3
    assert drain(dq) == [c, d, e]
    assert dq.depth == 0
    # appending continues go's file 4 at writePos, byte for byte
    dq.put(b"hello")
    dq.close()
    assert data_path(tmp_path, 4).read_bytes() == f4 + b"\x00\x00\x00\x05hello"
    assert read_meta(tmp_path) == (1, 4, len(f4), 4, len(f4) + 9)
    assert not data_path(tmp_path, 3).exists()
    assert bad_files(tmp_path) == []


def test_go_meta_at_end_of_finished_file_is_not_corruption(tmp_path: Path) -> None:
    # go leaves readPos == file size when its reader caught up before the writer rolled; its
    # own next read then fails with EOF (go-diskqueue#42). We just move on.
    f0 = encode_records([b"x" * 12])
    f1 = encode_records([b"y" * 12])
    data_path(tmp_path, 0).write_bytes(f0)
    data_path(tmp_path, 1).write_bytes(f1)
    write_meta(tmp_path, 1, 0, len(f0), 1, len(f1))
    dq = make(tmp_path)
    assert drain(dq) == [b"y" * 12]
    assert dq.depth == 0
    dq.close()
    assert bad_files(tmp_path) == []


def test_reader_caught_up_when_writer_rolls_makes_no_bad_files(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes=3 * 14, min_size=10)
    for i in range(40):
        dq.put(b"%010d" % i)
        assert dq.peek() == b"%010d" % i
        dq.advance()
        assert dq.depth == 0
    dq.close()
    assert bad_files(tmp_path) == []
    assert len(data_files(tmp_path)) == 1


def test_resize_max_bytes_between_runs(tmp_path: Path) -> None:
    # go-diskqueue TestDiskQueueResize
    msg = bytearray(range(10))
    dq = make(tmp_path, max_bytes=8 * 14, min_size=10)
    for i in range(9):
        msg[0] = i
        dq.put(bytes(msg))
    assert (dq.write_file_num, dq.write_pos, dq.depth) == (1, 14, 9)
    dq.close()
    dq = make(tmp_path, max_bytes=10 * 14, min_size=10)
    for i in range(10):
        msg[0] = 20 + i
        dq.put(bytes(msg))
    assert (dq.write_file_num, dq.write_pos, dq.depth) == (2, 14, 19)
    got = drain(dq)
    assert [g[0] for g in got] == list(range(9)) + list(range(20, 30))
    assert dq.depth == 0
    dq.close()
    assert bad_files(tmp_path) == []


def test_large_records_bigger_than_a_read_chunk(tmp_path: Path) -> None:
    big = [bytes([i]) * (150_000 + i) for i in range(5)]
    dq = make(tmp_path, max_bytes=400_000, max_size=1 << 20)
    for r in big:
        dq.put(r)
        dq.put(b"small")
    got = drain(dq)
    assert got == [x for r in big for x in (r, b"small")]
    dq.close()


# ------------------------------------------------------------------------------------------
# API details


def test_peek_advance_and_size_checks(tmp_path: Path) -> None:
    dq = make(tmp_path, min_size=2, max_size=8)
    assert dq.peek() is None
    with pytest.raises(RuntimeError):
        dq.advance()
    with pytest.raises(ValueError):
        dq.put(b"a")
    with pytest.raises(ValueError):
        dq.put(b"a" * 9)
    with pytest.raises(ValueError):
        dq.put_many([b"ok", b"a" * 9])
    assert dq.depth == 0  # put_many checks every size before adding any
    dq.put_many([b"ab", b"cd"])
    first = dq.peek()
    assert first == b"ab" and dq.peek() is first
    assert dq.depth == 2  # peeked, not consumed
    dq.advance()
    assert dq.depth == 1
    with pytest.raises(RuntimeError):
        dq.advance()
    dq.close()
    dq.close()  # idempotent
    with pytest.raises(DiskQueueClosed):
        dq.put(b"ab")
    with pytest.raises(DiskQueueClosed):
        dq.peek()
    dq = make(tmp_path, min_size=2, max_size=8)
    assert dq.depth == 1
    assert drain(dq) == [b"cd"]
    dq.close()


def test_peeked_record_is_not_consumed_by_close(tmp_path: Path) -> None:
    dq = make(tmp_path)
    dq.put_many([b"one", b"two"])
    assert dq.peek() == b"one"
    dq.close()
    dq = make(tmp_path)
    assert drain(dq) == [b"one", b"two"]
    dq.close()


def test_needs_sync_counts_and_timeout() -> None:
    now = [100.0]
    with tempfile.TemporaryDirectory() as d:
        dq = make(d, max_bytes=40, sync_every=3, sync_timeout_ms=2000, clock=lambda: now[0])
        assert not dq.needs_sync()
        dq.put(b"a")
        dq.put(b"b")
        assert not dq.needs_sync()
        dq.put(b"c")
        assert dq.needs_sync()  # sync_every puts
        dq.sync()
        assert not dq.needs_sync()
        now[0] += 5
        assert not dq.needs_sync()  # nothing happened since: no sync on the timer
        dq.put(b"d")
        assert not dq.needs_sync()
        now[0] += 1.999
        assert not dq.needs_sync()
        now[0] += 0.001
        assert dq.needs_sync()  # timeout with a pending put
        dq.sync()
        assert drain(dq, 2) == [b"a", b"b"]
        assert not dq.needs_sync()
        assert drain(dq, 1) == [b"c"]
        assert dq.needs_sync()  # consuming counts too, as in go
        dq.sync()
        for i in range(12):  # 5-byte records, 40-byte files: the writer rolls (syncs itself)
            dq.put(b"%d" % i)
        dq.sync()
        assert not dq.needs_sync()
        drain(dq, 4)  # the reader leaves file 0: a sync is due at once
        assert dq.needs_sync()
        dq.close()


def test_flush_makes_data_visible_without_sync(tmp_path: Path) -> None:
    dq = make(tmp_path)
    dq.put(b"abc")
    assert not data_path(tmp_path, 0).exists() or data_path(tmp_path, 0).stat().st_size == 0
    dq.flush()
    assert data_path(tmp_path, 0).read_bytes() == b"\x00\x00\x00\x03abc"
    assert not meta_path(tmp_path).exists()
    dq.sync()
    assert read_meta(tmp_path) == (1, 0, 0, 0, 7)
    dq.close()


def test_file_modes_match_go(tmp_path: Path) -> None:
    dq = make(tmp_path)
    dq.put(b"abc")
    dq.close()
    assert data_path(tmp_path, 0).stat().st_mode & 0o777 == 0o600
    assert meta_path(tmp_path).stat().st_mode & 0o777 == 0o600


def test_write_errors_raise_and_lose_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dq = make(tmp_path, max_bytes=30)
    dq.put(b"a" * 10)
    real_pwrite = os.pwrite
    calls = {"n": 0}

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:  # a short write first, then the disk is full
            return real_pwrite(fd, bytes(data[:3]), offset)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    with pytest.raises(OSError):
        dq.flush()
    dq.put(b"b" * 10)  # fits in file 0: buffered, no I/O
    with pytest.raises(OSError):
        dq.put(b"c" * 10)  # needs a roll, which must flush first: refused, not added
    assert dq.depth == 2
    with pytest.raises(OSError):
        dq.peek()  # the reader needs the buffered bytes on disk
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    dq.put(b"c" * 10)  # rolls: file 0 is finished, whole, with the short write completed
    assert parse_records(data_path(tmp_path, 0).read_bytes()) == [b"a" * 10, b"b" * 10]
    assert drain(dq) == [b"a" * 10, b"b" * 10, b"c" * 10]
    dq.close()


def test_failed_sync_job_writes_no_meta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dq = make(tmp_path)
    dq.put(b"abc")
    dq.sync()
    dq.put(b"def")
    job = dq.prepare_sync()
    assert not dq.needs_sync()

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        job()
    monkeypatch.undo()
    assert read_meta(tmp_path) == (1, 0, 0, 0, 7)  # still the last good one
    assert dq.needs_sync()  # try again soon
    dq.close()
    assert read_meta(tmp_path) == (2, 0, 0, 0, 14)


# ------------------------------------------------------------------------------------------
# Corruption


def build_three_files(d: Path, per_file: int = 3, size: int = 20) -> list[list[bytes]]:
    """Files 0, 1, 2 with ``per_file`` records each; file 2 is the write file."""
    recs = [[rec(10 * f + i, size) for i in range(per_file)] for f in range(3)]
    dq = make(d, max_bytes=per_file * (4 + size), min_size=1, max_size=100)
    for group in recs:
        dq.put_many(group)
    dq.close()
    assert sorted(data_files(d)) == [0, 1, 2]
    return recs


def test_every_truncation_of_a_middle_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL)  # hundreds of expected error lines
    template = tmp_path / "template"
    template.mkdir()
    recs = build_three_files(template)
    size = data_path(template, 1).stat().st_size
    boundaries = {0, 24, 48}
    for cut in range(size):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(template, d)
        os.truncate(data_path(d, 1), cut)
        dq = make(d, max_bytes=72, min_size=1, max_size=100)
        assert dq.depth == 9
        got = drain(dq)
        whole = cut // 24
        assert got == recs[0] + recs[1][:whole] + recs[2], cut
        assert dq.depth == 0, cut  # reset by the tail check
        assert bad_files(d) == ([] if cut in boundaries else [data_path(d, 1).name + ".bad"])
        dq.put(b"after")  # the queue goes on
        assert drain(dq) == [b"after"]
        dq.close()
        assert read_meta(d)[0] == 0


@pytest.mark.parametrize("bad_size", [0, 101, -1, 0x7FFFFFFF, -0x80000000])
def test_bad_record_size_in_a_middle_file(tmp_path: Path, bad_size: int) -> None:
    recs = build_three_files(tmp_path)
    p = data_path(tmp_path, 1)
    raw = bytearray(p.read_bytes())
    struct.pack_into(">i", raw, 24, bad_size)  # the second record's size field
    p.write_bytes(raw)
    dq = make(tmp_path, max_bytes=72, min_size=1, max_size=100)
    got = drain(dq)
    assert got == recs[0] + recs[1][:1] + recs[2]
    assert dq.depth == 0
    assert bad_files(tmp_path) == [p.name + ".bad"]
    assert not p.exists()
    dq.close()


def test_missing_middle_file_is_skipped(tmp_path: Path) -> None:
    recs = build_three_files(tmp_path)
    data_path(tmp_path, 1).unlink()
    dq = make(tmp_path, max_bytes=72, min_size=1, max_size=100)
    assert drain(dq) == recs[0] + recs[2]
    assert dq.depth == 0
    dq.close()


def test_corrupt_write_file_moves_the_writer_on(tmp_path: Path) -> None:
    good = encode_records([b"g" * 8])
    data_path(tmp_path, 5).write_bytes(good + struct.pack(">i", 3) + b"abc")
    write_meta(tmp_path, 2, 5, 0, 5, len(good) + 7)  # a record of 3 < min_size 4
    dq = make(tmp_path, min_size=4)
    assert dq.peek() == b"g" * 8
    dq.advance()
    assert dq.depth == 1
    assert dq.peek() is None  # the bad record: the write file is set aside
    assert dq.depth == 0
    assert (dq.read_file_num, dq.write_file_num) == (6, 6)
    assert bad_files(tmp_path) == [data_path(tmp_path, 5).name + ".bad"]
    dq.put(b"next")
    assert drain(dq) == [b"next"]
    dq.close()
    assert read_meta(tmp_path) == (0, 6, 8, 6, 8)


def test_go_corruption_scenario(tmp_path: Path) -> None:
    # After go-diskqueue TestDiskQueueCorruption: 124-byte records, 8 per 1000-byte file.
    msg = bytearray(120)
    msg[0], msg[62], msg[119] = 91, 4, 211
    m = bytes(msg)
    dq = make(tmp_path, max_bytes=1000, min_size=10, sync_every=5)
    for _ in range(25):
        dq.put(m)
    assert dq.depth == 25
    os.truncate(data_path(tmp_path, 1), 400)  # 3 whole records, then a torn one
    for _ in range(19):  # 8 + 3 + 8; 1 left in the 4th file
        assert dq.peek() == m
        dq.advance()
    assert dq.depth == 6  # the 5 lost records are still counted ...
    assert drain(dq) == [m]
    assert dq.depth == 0  # ... until the tail
    # corrupt the current write file (made visible by flush)
    dq.put(m)
    dq.put(m)
    dq.flush()
    os.truncate(data_path(tmp_path, 3), 200)
    assert dq.peek() is None
    assert dq.depth == 0
    dq.put(m)
    assert drain(dq) == [m]
    dq.close()
    assert bad_files(tmp_path) == [
        data_path(tmp_path, 1).name + ".bad",
        data_path(tmp_path, 3).name + ".bad",
    ]


def test_meta_read_position_past_write_position(tmp_path: Path) -> None:
    data_path(tmp_path, 2).write_bytes(encode_records([b"abc"]))
    write_meta(tmp_path, 1, 2, 50, 2, 7)
    dq = make(tmp_path)
    assert dq.depth == 0
    assert dq.peek() is None
    assert (dq.read_file_num, dq.write_file_num) == (3, 3)
    dq.put(b"x")
    assert drain(dq) == [b"x"]
    dq.close()


def test_unparsable_meta_is_an_empty_queue(tmp_path: Path) -> None:
    meta_path(tmp_path).write_bytes(b"garbage\n")
    dq = make(tmp_path)
    assert dq.depth == 0 and dq.peek() is None
    dq.put(b"x")
    dq.close()
    assert read_meta(tmp_path) == (1, 0, 0, 0, 5)


# ------------------------------------------------------------------------------------------
# Metadata crash windows
#
# What DiskQueue guarantees after a crash: it reopens at the last meta file that was renamed
# into place. Records consumed after it are delivered again (at-least-once); records written
# after it that reached the data files are kept and counted into depth; a record torn by the
# crash at the end of a file is dropped (the file is renamed .bad); nothing before it is lost.


def crash_copy(src: Path, dst: Path, meta: bytes | None) -> None:
    """The disk as a crash would leave it: the data files as they are now, the given meta."""
    dst.mkdir()
    for f in os.listdir(src):
        if ".diskqueue." in f and not f.endswith(".meta.dat"):
            shutil.copy(src / f, dst / f)
    if meta is not None:
        meta_path(dst).write_bytes(meta)


def test_leftover_tmp_meta_file_is_ignored(tmp_path: Path) -> None:
    dq = make(tmp_path)
    dq.put_many([b"a", b"b"])
    dq.close()
    tmp = Path(str(meta_path(tmp_path)) + ".5577006791947779410.tmp")
    tmp.write_bytes(b"0\n9,9\n9,9\n")  # a newer meta that never got renamed into place
    dq = make(tmp_path)
    assert dq.depth == 2
    assert drain(dq) == [b"a", b"b"]
    dq.close()
    assert tmp.exists()  # left alone, like go
    dq = make(tmp_path)
    dq.delete()
    assert os.listdir(tmp_path) == []


def test_meta_behind_data_in_the_write_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    recs = [rec(i) for i in range(20)]
    dq = make(src)
    dq.put_many(recs[:10])
    assert drain(dq, 3) == recs[:3]
    dq.sync()  # durable: depth 7, read position after 3 records
    meta = meta_path(src).read_bytes()
    assert drain(dq, 4) == recs[3:7]  # consumed, but no meta says so
    dq.put_many(recs[10:])
    dq.flush()  # in the OS: survives a process crash
    crash_copy(src, tmp_path / "crash", meta)
    dq.close()

    dq = make(tmp_path / "crash")
    assert dq.depth == 17  # 7 from the meta + 10 found after its writePos
    assert drain(dq) == recs[3:]  # 3..6 delivered again
    assert dq.depth == 0
    dq.put(b"z")
    dq.close()
    assert bad_files(tmp_path / "crash") == []
    dq = make(tmp_path / "crash")
    assert drain(dq) == [b"z"]
    dq.close()


def test_meta_behind_data_across_rolls(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    recs = [rec(i) for i in range(50)]
    dq = make(src, max_bytes=100)
    dq.put_many(recs[:2])
    dq.sync()
    meta = meta_path(src).read_bytes()
    dq.put_many(recs[2:])  # rolls many times (and writes newer metas, which we drop)
    dq.flush()
    crash_copy(src, tmp_path / "crash", meta)
    dq.close()
    dq = make(tmp_path / "crash", max_bytes=100)
    assert dq.depth == 50
    assert drain(dq) == recs
    assert dq.depth == 0
    dq.close()
    assert bad_files(tmp_path / "crash") == []


def test_torn_record_after_write_pos(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = tmp_path / "src"
    src.mkdir()
    dq = make(src)
    dq.put_many([b"a" * 10, b"b" * 10])
    dq.sync()
    meta = meta_path(src).read_bytes()
    dq.put_many([b"c" * 10, b"d" * 10])
    dq.flush()
    crash_copy(src, tmp_path / "crash", meta)
    dq.close()
    p = data_path(tmp_path / "crash", 0)
    os.truncate(p, p.stat().st_size - 3)  # the last record was torn by the crash
    with caplog.at_level(logging.ERROR, logger="nsqpy.diskqueue"):
        dq = make(tmp_path / "crash")
        assert dq.depth == 3
        assert drain(dq) == [b"a" * 10, b"b" * 10, b"c" * 10]
    assert dq.depth == 0
    assert any("reading at" in r.getMessage() for r in caplog.records)
    assert bad_files(tmp_path / "crash") == [p.name + ".bad"]
    dq.close()


def test_crash_before_the_first_meta_write(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    dq = make(src)
    dq.put_many([b"a", b"b", b"c"])
    dq.flush()
    crash_copy(src, tmp_path / "crash", None)
    dq.close()
    dq = make(tmp_path / "crash")
    assert dq.depth == 3
    assert drain(dq) == [b"a", b"b", b"c"]
    dq.put(b"d")
    dq.close()
    dq = make(tmp_path / "crash")
    assert drain(dq) == [b"d"]
    dq.close()


def test_meta_never_goes_backwards(tmp_path: Path) -> None:
    dq = make(tmp_path)
    dq.put(b"a")
    old_job = dq.prepare_sync()
    dq.put(b"b")
    dq.sync()
    old_job()  # late: must not replace the newer meta
    assert read_meta(tmp_path) == (2, 0, 0, 0, 10)
    late = dq.prepare_sync()
    dq.close()
    late()
    assert read_meta(tmp_path) == (2, 0, 0, 0, 10)


# ------------------------------------------------------------------------------------------
# empty() and delete()


def test_empty_removes_data_files(tmp_path: Path) -> None:
    dq = make(tmp_path, max_bytes=50)
    for i in range(30):
        dq.put(rec(i, 10))
    drain(dq, 4)
    before = dq.write_file_num
    dq.empty()
    assert dq.depth == 0
    assert dq.peek() is None
    assert data_files(tmp_path) == {}
    assert read_meta(tmp_path) == (0, before + 1, 0, before + 1, 0)
    dq.put(b"again")
    dq.close()
    dq = make(tmp_path, max_bytes=50)
    assert drain(dq) == [b"again"]
    dq.close()


def test_delete_removes_all_files(tmp_path: Path) -> None:
    other = make(tmp_path, name="other")
    other.put(b"keep")
    other.close()
    dq = make(tmp_path, max_bytes=50)
    for i in range(30):
        dq.put(rec(i, 10))
    drain(dq, 7)
    dq.sync()
    dq.delete()
    left = sorted(os.listdir(tmp_path))
    assert left == ["other.diskqueue.000000.dat", "other.diskqueue.meta.dat"]
    with pytest.raises(DiskQueueClosed):
        dq.put(b"x")


# ------------------------------------------------------------------------------------------
# Sync jobs in another thread


def test_sync_jobs_in_a_thread_while_putting_and_rolling(tmp_path: Path) -> None:
    jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
    errors: list[BaseException] = []

    def worker() -> None:
        while (job := jobs.get()) is not None:
            try:
                job()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    recs = [rec(i, 10 + i % 50) for i in range(6000)]
    dq = make(tmp_path, max_bytes=2000, sync_every=40, sync_timeout_ms=1)
    consumed = []
    try:
        for i, r in enumerate(recs):
            dq.put(r)
            if i % 3 == 0:
                got = dq.peek()
                assert got is not None
                consumed.append(got)
                dq.advance()
            if dq.needs_sync():
                jobs.put(dq.prepare_sync())
    finally:
        jobs.put(None)
        t.join()
    assert errors == []
    assert consumed == recs[: len(consumed)]
    assert dq.depth == len(recs) - len(consumed)
    dq.close()
    dq = make(tmp_path, max_bytes=2000)
    assert dq.depth == len(recs) - len(consumed)
    assert drain(dq) == recs[len(consumed) :]
    dq.close()
    assert bad_files(tmp_path) == []


# ------------------------------------------------------------------------------------------
# Property tests

_record = st.binary(min_size=0, max_size=40)
_op = st.one_of(
    st.tuples(st.just("put"), _record),
    st.tuples(st.just("put_many"), st.lists(_record, max_size=6)),
    st.tuples(st.just("peek"), st.none()),
    st.tuples(st.just("advance"), st.none()),
    st.tuples(st.just("get"), st.integers(1, 8)),
    st.tuples(st.just("read_many"), st.integers(1, 8)),
    st.tuples(st.just("read_framed"), st.integers(1, 8)),
    st.tuples(st.just("flush"), st.none()),
    st.tuples(st.just("sync"), st.none()),
    st.tuples(st.just("job"), st.none()),
    st.tuples(st.just("reopen"), st.none()),
    st.tuples(st.just("empty"), st.none()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(max_bytes=st.integers(1, 150), ops=st.lists(_op, max_size=60))
def test_property_against_a_deque(max_bytes: int, ops: list[tuple[str, object]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        dq = make(d, max_bytes=max_bytes, max_size=40, sync_every=7)
        model: deque[bytes] = deque()
        peeked = False
        pending: list[Callable[[], None]] = []
        for op, arg in ops:
            if op == "put":
                assert isinstance(arg, bytes)
                dq.put(arg)
                model.append(arg)
            elif op == "put_many":
                assert isinstance(arg, list)
                dq.put_many(arg)
                model.extend(arg)
            elif op == "peek":
                got = dq.peek()
                assert got == (model[0] if model else None)
                peeked = got is not None
            elif op == "advance":
                if peeked:
                    dq.advance()
                    model.popleft()
                    peeked = False
                else:
                    with pytest.raises(RuntimeError):
                        dq.advance()
            elif op == "get":
                assert isinstance(arg, int)
                expect = [model.popleft() for _ in range(min(arg, len(model)))]
                assert drain(dq, arg) == expect
                peeked = False
            elif op == "read_many":
                assert isinstance(arg, int)
                before = (dq.read_file_num, dq.read_pos)
                positions: list[int] = []
                file_num, got = dq.read_many(arg, positions)
                assert 0 < len(got) <= arg if model else got == []
                assert got == [model.popleft() for _ in range(len(got))]
                assert len(positions) == len(got)
                if got:
                    # one file; each record's size field starts where the previous one ended
                    if file_num == before[0]:
                        assert positions[0] == before[1]
                    assert all(
                        b == a + 4 + len(r) for a, b, r in zip(positions, positions[1:], got)
                    )
                    raw = data_path(d, file_num).read_bytes()
                    stop = positions[-1] + 4 + len(got[-1])
                    assert parse_records(raw[positions[0] : stop]) == got
                peeked = False
            elif op == "read_framed":
                assert isinstance(arg, int)
                _, _, chunk, offs = dq.read_framed(arg)
                got = [chunk[a + 4 : b] for a, b in zip(offs, offs[1:])]
                assert 0 < len(got) <= arg if model else offs == []
                assert got == [model.popleft() for _ in range(len(got))]
                assert all(
                    int.from_bytes(chunk[a : a + 4], "big") == b - a - 4
                    for a, b in zip(offs, offs[1:])
                )
                peeked = False
            elif op == "flush":
                dq.flush()
            elif op == "sync":
                dq.sync()
            elif op == "job":
                pending.append(dq.prepare_sync())
                if len(pending) > 1:  # run them late and out of order
                    pending.pop(0)()
            elif op == "reopen":
                dq.close()
                dq = make(d, max_bytes=max_bytes, max_size=40, sync_every=7)
                peeked = False
            elif op == "empty":
                dq.empty()
                model.clear()
                peeked = False
            assert dq.depth == len(model)
        for job in pending:
            job()
        assert drain(dq) == list(model)
        assert dq.depth == 0
        dq.close()
        assert bad_files(d) == []
        depth, rn, rp, wn, wp = read_meta(d)
        assert depth == 0 and (rn, rp) == (wn, wp)


_crash_op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 30)),
    st.tuples(st.just("get"), st.integers(1, 6)),
    st.tuples(st.just("sync"), st.none()),
    st.tuples(st.just("flush"), st.none()),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(max_bytes=st.integers(1, 120), ops=st.lists(_crash_op, max_size=40))
def test_property_crash_is_at_least_once(max_bytes: int, ops: list[tuple[str, object]]) -> None:
    """A process crash at any point: reopening delivers a suffix of everything ever put that
    starts at or before the first unconsumed record, and depth says how long it is."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "src"
        src.mkdir()
        dq = make(src, max_bytes=max_bytes, max_size=40)
        everything: list[bytes] = []
        consumed = 0
        synced_consumed = 0
        for op, arg in ops:
            if op == "put":
                assert isinstance(arg, int)
                r = (b"%d|" % len(everything)).ljust(arg, b".")
                dq.put(r)
                everything.append(r)
            elif op == "get":
                assert isinstance(arg, int)
                consumed += len(drain(dq, arg))
            elif op == "sync":
                dq.sync()
                synced_consumed = consumed
            else:
                dq.flush()
        dq.flush()
        meta = meta_path(src).read_bytes() if meta_path(src).exists() else None
        crash_copy(src, Path(d) / "crash", meta)
        dq.close()

        dq = make(Path(d) / "crash", max_bytes=max_bytes, max_size=40)
        depth = dq.depth
        got = drain(dq)
        k = len(everything) - len(got)
        assert 0 <= k <= consumed
        assert k >= synced_consumed  # nothing consumed before a sync comes back
        assert got == everything[k:]
        assert depth == len(got)
        assert dq.depth == 0
        dq.close()
        assert bad_files(Path(d) / "crash") == []


def test_close_writes_the_meta_when_a_sync_job_is_still_pending(tmp_path: Path) -> None:
    """close() may skip its sync only when the last snapshot is on disk: here a job taken
    before close() runs after it (and then may not write the meta), so close() must."""
    dq = make(tmp_path)
    dq.put(b"a")
    dq.put(b"b")
    dq.sync()  # the meta on disk: depth 2
    assert dq.peek() == b"a"
    dq.advance()
    job = dq.prepare_sync()  # snapshot: depth 1, read past "a"
    dq.close()
    job()  # late: must not be the only writer of that state
    assert read_meta(tmp_path)[0] == 1
    dq = make(tmp_path)
    assert drain(dq) == [b"b"]
    dq.close()


def test_read_framed_gives_a_record_bigger_than_a_chunk_framed_by_itself(tmp_path: Path) -> None:
    big = bytes(range(256)) * (READ_CHUNK // 256 + 3)
    dq = make(tmp_path, max_size=2 * READ_CHUNK)
    dq.put_many([b"a", big, b"bc", b"d"])
    dq.flush()
    _, _, chunk, offs = dq.read_framed(8)
    assert [chunk[a + 4 : b] for a, b in zip(offs, offs[1:])] == [b"a"]
    _, _, chunk, offs = dq.read_framed(8)
    assert offs == [0, 4 + len(big)] and chunk == len(big).to_bytes(4, "big") + big
    _, _, chunk, offs = dq.read_framed(8)
    assert [chunk[a + 4 : b] for a, b in zip(offs, offs[1:])] == [b"bc", b"d"]
    assert dq.read_framed(8)[2:] == (b"", []) and dq.depth == 0
