"""The parts a DiskQueue owns, through their own interfaces: MetaFile (snapshot order, retired
files), plan_open (looks, never touches) with carry_out (does the file work), DataFiles.

The DiskQueue's behaviour over them is tested in test_diskqueue.py; here each part's contract
is checked alone, on files built by hand.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

from nsqpy.diskqueue_files import DataFiles
from nsqpy.diskqueue_meta import MetaFile, format_meta
from nsqpy.diskqueue_recovery import carry_out, plan_open

NAME = "parts"
LOG = logging.getLogger("nsqpy.diskqueue")


def records(*datas: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(d)) + d for d in datas)


def files_in(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_format_meta_is_go_diskqueues_layout() -> None:
    assert format_meta(3, 1, 20, 2, 0) == b"3\n1,20\n2,0\n"


def test_meta_older_snapshot_never_overwrites_newer(tmp_path: Path) -> None:
    files = DataFiles(str(tmp_path), NAME, LOG)
    meta = MetaFile(str(tmp_path / f"{NAME}.diskqueue.meta.dat"), files)
    first, second = meta.next_seq(), meta.next_seq()
    assert not meta.up_to_date()
    meta.commit(second, format_meta(1, 0, 0, 0, 5), 0)
    meta.commit(first, format_meta(2, 0, 0, 0, 10), 0)  # a slow job, late
    assert meta.read() == (1, 0, 0, 0, 5)
    assert meta.up_to_date()


def test_meta_removes_retired_files_once_a_later_read_file_is_durable(tmp_path: Path) -> None:
    files = DataFiles(str(tmp_path), NAME, LOG)
    for n in range(3):
        Path(files.path(n)).write_bytes(records(b"x"))
    meta = MetaFile(str(tmp_path / f"{NAME}.diskqueue.meta.dat"), files)
    meta.retire([0, 1])
    meta.commit(meta.next_seq(), format_meta(2, 1, 0, 2, 5), 1)  # reader at file 1
    assert not Path(files.path(0)).exists()
    assert Path(files.path(1)).exists()
    meta.commit(meta.next_seq(), format_meta(1, 2, 0, 2, 5), 2)
    assert not Path(files.path(1)).exists()
    assert Path(files.path(2)).exists()
    assert meta.take_obsolete() == []


def test_meta_closed_writes_nothing(tmp_path: Path) -> None:
    files = DataFiles(str(tmp_path), NAME, LOG)
    meta = MetaFile(str(tmp_path / f"{NAME}.diskqueue.meta.dat"), files)
    seq = meta.next_seq()
    meta.close()
    meta.commit(seq, format_meta(0, 0, 0, 0, 0), 0)
    assert not meta.exists()


def test_plan_open_only_looks_and_carry_out_does_the_work(tmp_path: Path) -> None:
    files = DataFiles(str(tmp_path), NAME, LOG)
    Path(files.path(0)).write_bytes(records(b"old"))  # consumed, left by a crash
    Path(files.path(1)).write_bytes(records(b"a", b"b", b"c"))  # meta says 1 record
    meta_path = tmp_path / f"{NAME}.diskqueue.meta.dat"
    meta_path.write_bytes(format_meta(1, 1, 0, 1, 5))
    before = files_in(tmp_path)

    plan = plan_open(MetaFile(str(meta_path), files).read(), files, 0, 100)
    assert files_in(tmp_path) == before
    assert (plan.depth, plan.read_num, plan.read_pos) == (3, 1, 0)
    assert (plan.write_num, plan.write_pos) == (2, 0)
    assert plan.need_sync and plan.salvaged == [1] and plan.clear_below
    assert list(plan.stale) == []

    carry_out(plan, files)
    assert not Path(files.path(0)).exists()
    assert Path(files.path(1)).read_bytes() == records(b"a", b"b", b"c")


def test_plan_open_read_past_write_restarts_on_a_fresh_file(tmp_path: Path) -> None:
    files = DataFiles(str(tmp_path), NAME, LOG)
    for n in range(4):
        Path(files.path(n)).write_bytes(records(b"r"))
    plan = plan_open((7, 2, 9, 3, 0), files, 0, 100)  # read 2,9 is before write 3,0: fine
    assert plan.read_num == 2 and not plan.stale
    plan = plan_open((7, 3, 9, 3, 5), files, 0, 100)  # read 3,9 past write 3,5
    assert list(plan.stale) == [3]
    assert plan[:5] == (0, 4, 0, 4, 0)
    assert plan.need_sync and not plan.clear_below
    carry_out(plan, files)
    assert not Path(files.path(3)).exists()
    assert all(Path(files.path(n)).exists() for n in range(3))


def test_data_files_scan_stops_at_a_bad_size(tmp_path: Path) -> None:
    files = DataFiles(str(tmp_path), NAME, LOG)
    Path(files.path(0)).write_bytes(records(b"ab", b"cde") + struct.pack(">i", 1000) + b"zz")
    scan = files.scan(0, 0, -1, 0, 100)
    got = []
    try:
        while True:
            got.append(next(scan))
    except StopIteration as stop:
        whole = stop.value
    assert got == [((0, 0), b"ab"), ((0, 6), b"cde")]
    assert whole is False
