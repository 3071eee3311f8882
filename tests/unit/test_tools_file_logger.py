"""nsq_to_file's writer on its own (nsqpy/tools/file_logger.py), with an injected clock: file
names from --filename-format and --datetime-format, <REV> skipping taken names, rotation by
size, interval and the hour, gzip members per sync, the move out of --work-dir, and the
strftime-to-Go-layout formatting (expected values printed by Go 1.x's time.Format)."""

from __future__ import annotations

import gzip
import time
import zlib
from pathlib import Path

import pytest

from nsqpy.tools.file_logger import FileLogger, FileOptions, compute_filename_format
from nsqpy.tools.strftime import go_format, strftime, to_layout

# 2024-03-07 15:04:09 in a zone 3h30 west of UTC named XST (a Thursday, day 67)
XST = time.struct_time((2024, 3, 7, 15, 4, 9, 3, 67, 0, "XST", -12600))
UTC_XMAS = time.struct_time((2024, 12, 25, 0, 0, 0, 2, 360, 0, "UTC", 0))


@pytest.mark.parametrize(
    "layout,want",
    [
        ("2006-01-02_15", "2024-03-07_15"),
        ("20060102-15.v1", "20240307-15.v3"),  # a literal 1 is Go's month
        (
            "Jan January Mon Monday MST -0700 -07:00 Z07:00",
            "Mar March Thu Thursday XST -0330 -03:30 -03:30",
        ),
        ("03 3 PM pm 4 5 _2 __2 002 06 _2006", "03 3 PM pm 4 9  7  67 067 24 _2024"),
        ("v1.2.3 x15y", "v3.7.3 x15y"),
    ],
)
def test_tools_go_layout_matches_go_time_format(layout: str, want: str) -> None:
    assert go_format(layout, XST) == want


def test_tools_go_layout_utc_zone_tokens() -> None:
    assert go_format("Z07:00 Z0700 -0700 3PM 15 1/2", UTC_XMAS) == "Z Z +0000 12AM 00 12/25"


def test_tools_strftime_codes_become_go_tokens() -> None:
    assert to_layout("%Y-%m-%d_%H") == "2006-01-02_15"
    assert to_layout("%y%b%B%a%A%I%M%S%p%Z%z%%%q%") == "06JanJanuaryMonMonday030405PMMST-0700%%q%"
    when = time.mktime((2024, 3, 7, 15, 4, 9, 0, 0, -1))
    assert strftime("%Y-%m-%d_%H", when) == "2024-03-07_15"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _logger(tmp_path: Path, clock: Clock, **kw: object) -> FileLogger:
    opts = FileOptions(output_dir=str(tmp_path / "out"), **kw)  # type: ignore[arg-type]
    (tmp_path / "out").mkdir(exist_ok=True)
    return FileLogger(opts, "t", clock=clock, hostname="box.example.com", pid=42)


def _names(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def test_tools_filename_format_tokens_and_rev_rule() -> None:
    o = FileOptions(filename_format="<TOPIC>.<HOST><REV>.<PID>.<DATETIME>.log")
    assert compute_filename_format(o, "t", "box.example.com", 7) == "t.box.7.<DATETIME>.log"
    o = FileOptions(host_identifier="<SHORT_HOST>-<HOSTNAME>", gzip=True)
    got = compute_filename_format(o, "t", "box.example.com", 7)
    assert got == "t.box-box.example.com<REV>.<DATETIME>.log.gz"
    with pytest.raises(ValueError, match="missing <REV>"):
        compute_filename_format(
            FileOptions(filename_format="<TOPIC>.log", rotate_size=1), "t", "h", 1
        )


def test_tools_rotation_by_size_counts_revisions(tmp_path: Path) -> None:
    clock = Clock(time.mktime((2024, 3, 7, 15, 0, 0, 0, 0, -1)))
    f = _logger(tmp_path, clock, rotate_size=10)
    for i in range(5):
        if f.needs_rotation():
            f.update_file()
        f.write(f"line{i}\n".encode())  # 6 bytes
    f.close()
    names = _names(tmp_path / "out")
    assert names == [f"t.box-00000{r}.2024-03-07_15.log" for r in range(3)]
    assert [(tmp_path / "out" / n).read_bytes().count(b"\n") for n in names] == [2, 2, 1]


def test_tools_rotation_by_interval_and_by_the_hour(tmp_path: Path) -> None:
    clock = Clock(time.mktime((2024, 3, 7, 15, 59, 0, 0, 0, -1)))
    f = _logger(tmp_path, clock, rotate_interval=30.0)
    f.update_file()
    f.write(b"a\n")
    clock.t += 20
    assert not f.needs_rotation()
    clock.t += 11  # 31 s after opening
    assert f.needs_rotation()
    f.update_file()
    f.write(b"b\n")
    clock.t += 29  # 16:00:00: a new name, revision back to 0
    assert f.needs_rotation()
    f.update_file()
    f.write(b"c\n")
    f.close()
    assert _names(tmp_path / "out") == [
        "t.box-000000.2024-03-07_15.log",
        "t.box-000000.2024-03-07_16.log",
        "t.box-000001.2024-03-07_15.log",
    ]


def test_tools_existing_files_are_skipped_or_appended(tmp_path: Path) -> None:
    clock = Clock(time.mktime((2024, 3, 7, 15, 0, 0, 0, 0, -1)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "t.box.2024-03-07_15.log").write_bytes(b"old\n")
    f = _logger(tmp_path, clock)  # no rotation: no <REV>, O_APPEND onto the existing file
    f.update_file()
    f.write(b"new\n")
    f.close()
    assert (out / "t.box.2024-03-07_15.log").read_bytes() == b"old\nnew\n"
    (out / "t.box-000000.2024-03-07_15.log.gz").write_bytes(b"")
    g = _logger(tmp_path, clock, gzip=True)  # O_EXCL: the taken revision is skipped
    g.update_file()
    g.write(b"x\n")
    g.close()
    assert gzip.decompress((out / "t.box-000001.2024-03-07_15.log.gz").read_bytes()) == b"x\n"


def test_tools_gzip_member_per_sync_with_go_header(tmp_path: Path) -> None:
    clock = Clock(time.mktime((2024, 3, 7, 15, 0, 0, 0, 0, -1)))
    f = _logger(tmp_path, clock, gzip=True, gzip_level=9)
    f.update_file()
    f.write(b"one\n")
    f.sync()
    f.write(b"two\n")
    f.close()
    data = (tmp_path / "out" / "t.box-000000.2024-03-07_15.log.gz").read_bytes()
    assert data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # mtime 0, XFL 2, OS 255
    assert gzip.decompress(data) == b"one\ntwo\n"
    members = 0
    rest = data
    while rest:
        d = zlib.decompressobj(31)
        d.decompress(rest)
        rest = d.unused_data
        members += 1
    assert members == 2
    assert f.filesize == 8  # uncompressed bytes, as Go counts them


def test_tools_work_dir_moves_without_overwriting(tmp_path: Path) -> None:
    clock = Clock(time.mktime((2024, 3, 7, 15, 0, 0, 0, 0, -1)))
    work = tmp_path / "work"
    f = _logger(tmp_path, clock, work_dir=str(work))
    f.update_file()
    f.write(b"1\n")
    # the same name appears in the output dir meanwhile: the move takes the next revision
    (tmp_path / "out" / "t.box-000000.2024-03-07_15.log").write_bytes(b"other\n")
    f.close()
    assert _names(tmp_path / "out") == [
        "t.box-000000.2024-03-07_15.log",
        "t.box-000001.2024-03-07_15.log",
    ]
    assert (tmp_path / "out" / "t.box-000001.2024-03-07_15.log").read_bytes() == b"1\n"
    assert _names(work) == []
    # a new file skips revisions already taken in the output dir
    f.update_file()
    assert f.path.endswith("t.box-000002.2024-03-07_15.log")
    f.close()
