"""nsq_to_file's writer: one topic's output file, its name, rotation, gzip and the move from
the work dir to the output dir, as NSQ's apps/nsq_to_file/file_logger.go (v1.3.0) does.

Strategy: a plain synchronous object with no network and an injectable clock, so it is tested
on its own (tests/unit/test_tools_file_logger.py); nsq_to_file.py's router drives it from the
consumer. File names come from ``--filename-format`` with <TOPIC>, <HOST>, <PID> replaced once
(``compute_filename_format``) and <DATETIME> at each open; <REV> becomes ``-000000``,
``-000001``... when a file of that name exists (gzip, rotation or a work dir need it, else it
is dropped). Files are written with unbuffered os.write, as Go's os.File is. With --gzip every
sync closes the gzip member and starts a new one (concatenated members, each with Go's header:
no name, mtime 0, OS 255), so a file's intact members say what was acknowledged. Sizes for
--rotate-size count the bytes given to the writer (uncompressed), plus the file's size at open,
as Go counts them. Finished files move from the work dir with link+unlink (never overwriting:
a taken name gets the next revision)."""

from __future__ import annotations

import os
import posixpath
import socket
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from .flags import app_log
from .strftime import strftime

_GZIP_OS_UNKNOWN = 255


@dataclass
class FileOptions:
    """nsq_to_file's output flags (options.go names); durations in seconds, 0 = off."""

    output_dir: str = "/tmp"
    work_dir: str = ""
    datetime_format: str = "%Y-%m-%d_%H"
    filename_format: str = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    host_identifier: str = ""
    gzip: bool = False
    gzip_level: int = 6
    skip_empty_files: bool = False
    rotate_size: int = 0
    rotate_interval: float = 0.0
    channel: str = "nsq_to_file"

    def __post_init__(self) -> None:
        if not self.work_dir:
            self.work_dir = self.output_dir


def compute_filename_format(opts: FileOptions, topic: str, hostname: str, pid: int) -> str:
    """The file name template of ``topic`` with everything but <DATETIME> (and <REV>, when
    kept) replaced. Raises ValueError (Go's text) when gzip, rotation or a work dir is on and
    the format has no <REV>."""
    short = hostname.split(".")[0]
    identifier = short
    if opts.host_identifier:
        identifier = opts.host_identifier.replace("<SHORT_HOST>", short)
        identifier = identifier.replace("<HOSTNAME>", hostname)
    cff = opts.filename_format
    if (
        opts.gzip
        or opts.rotate_size > 0
        or opts.rotate_interval > 0
        or (opts.work_dir != opts.output_dir)
    ):
        if "<REV>" not in cff:
            raise ValueError(
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
            )
    else:
        cff = cff.replace("<REV>", "")
    cff = cff.replace("<TOPIC>", topic).replace("<HOST>", identifier).replace("<PID>", str(pid))
    if opts.gzip and not cff.endswith(".gz"):
        cff += ".gz"
    return cff


def _go_path_join(*parts: str) -> str:
    """Go's path.Join / filepath.Join: the non-empty parts joined by "/" and cleaned."""
    joined = "/".join(p for p in parts if p)
    return posixpath.normpath(joined) if joined else ""


def _mkdir_for(path: str) -> None:
    d = posixpath.dirname(path)
    if d:
        os.makedirs(d, mode=0o770, exist_ok=True)


def _exclusive_rename(src: str, dst: str) -> None:
    os.link(src, dst)
    os.remove(src)


class GzipMembers:
    """A gzip writer on a file descriptor whose ``close`` ends the member (Go's gzip.Writer:
    header written at the first write or at close, so an empty member is still a member)."""

    __slots__ = ("_fd", "_level", "_comp", "_crc", "_size", "_started")

    def __init__(self, fd: int, level: int) -> None:
        self._fd, self._level = fd, level
        self._comp = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._crc, self._size, self._started = 0, 0, False

    def _header(self) -> None:
        xfl = 2 if self._level == 9 else 4 if self._level == 1 else 0
        os.write(self._fd, b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes((xfl, _GZIP_OS_UNKNOWN)))
        self._started = True

    def write(self, data: bytes) -> int:
        if not self._started:
            self._header()
        out = self._comp.compress(data)
        if out:
            os.write(self._fd, out)
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        return len(data)

    def close(self) -> None:
        if not self._started:
            self._header()
        tail = self._comp.flush(zlib.Z_FINISH)
        os.write(self._fd, tail + struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


class FileLogger:
    """One topic's output file (file_logger.go's FileLogger without the consumer).

    ``clock`` gives Unix seconds (time.time); ``hostname``/``pid`` default to this process's.
    Raises ValueError from ``compute_filename_format``; OSErrors of the file system propagate
    (Go exits 1 on each).
    """

    def __init__(
        self,
        opts: FileOptions,
        topic: str,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        pid: int | None = None,
    ) -> None:
        self.opts, self.topic, self.clock = opts, topic, clock
        self.filename_format = compute_filename_format(
            opts,
            topic,
            hostname if hostname is not None else socket.gethostname(),
            pid if pid is not None else os.getpid(),
        )
        self.fd: int | None = None
        self.path = ""  # the open file's path (in the work dir)
        self.gz: GzipMembers | None = None
        self.filename = ""  # the name template last opened (<REV> still in it)
        self.open_time = 0.0
        self.filesize = 0
        self.rev = 0
        self._name_sec = -1
        self._name = ""

    def _logf(self, text: str, level: int = 2) -> None:
        app_log(level, f"[{self.topic}/{self.opts.channel}] {text}")

    def current_filename(self) -> str:
        """The file name template for now (<DATETIME> replaced); formatted once per second
        (the finest unit a --datetime-format can show), since every message asks."""
        sec = int(self.clock())
        if sec != self._name_sec:
            self._name_sec = sec
            self._name = self.filename_format.replace(
                "<DATETIME>", strftime(self.opts.datetime_format, sec)
            )
        return self._name

    def needs_rotation(self) -> bool:
        """True when no file is open, the name changed with the time, the file is older than
        --rotate-interval or bigger than --rotate-size (file_logger.go needsRotation)."""
        if self.fd is None:
            return True
        name = self.current_filename()
        if name != self.filename:
            self._logf(f"new filename {name}, rotating...")
            return True
        if self.opts.rotate_interval > 0:
            age = self.clock() - self.open_time
            if age > self.opts.rotate_interval:
                self._logf(f"{age:.3f}s since last open, rotating...")
                return True
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            self._logf(
                f"{self.path} currently {self.filesize} bytes (> {self.opts.rotate_size}), "
                "rotating..."
            )
            return True
        return False

    def _output_path(self, work_path: str) -> str:
        rest = (
            work_path[len(self.opts.work_dir) :]
            if work_path.startswith(self.opts.work_dir)
            else work_path
        )
        return _go_path_join(self.opts.output_dir, rest)

    def update_file(self) -> None:
        """Close the open file and open the next one (a new name resets the revision, the same
        name takes the next), skipping names taken in the output dir or the work dir."""
        self.close()
        name = self.current_filename()
        if name != self.filename:
            self.rev = 0
        else:
            self.rev += 1
        self.filename = name
        self.open_time = self.clock()
        full = _go_path_join(self.opts.work_dir, name)
        _mkdir_for(full)
        o = self.opts
        while True:
            path = full.replace("<REV>", f"-{self.rev:06d}")
            if o.work_dir != o.output_dir:
                out_path = self._output_path(path)
                _mkdir_for(out_path)
                if os.path.lexists(out_path):
                    self._logf(f"output file already exists: {out_path}", 3)
                    self.rev += 1
                    continue
            flags = os.O_WRONLY | os.O_CREAT
            flags |= os.O_EXCL if (o.gzip or o.rotate_interval > 0) else os.O_APPEND
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                self._logf(f"working file already exists: {path}", 3)
                self.rev += 1
                continue
            self._logf(f"opening {path}")
            self.fd, self.path = fd, path
            self.filesize = os.fstat(fd).st_size
            if o.rotate_size > 0 and self.filesize > o.rotate_size:
                self._logf(
                    f"{path} currently {self.filesize} bytes (> {o.rotate_size}), rotating..."
                )
                os.close(fd)  # Go leaves it open; nothing more is written to it either way
                self.fd = None
                self.rev += 1
                continue
            break
        self.gz = GzipMembers(self.fd, o.gzip_level) if o.gzip else None

    def write(self, data: bytes) -> None:
        """Write ``data`` to the open file (through gzip when on); counts toward the size."""
        assert self.fd is not None
        if self.gz is not None:
            self.gz.write(data)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        self.filesize += len(data)

    def sync(self) -> None:
        """fsync the file; with gzip, end the member first and start a new one."""
        assert self.fd is not None
        if self.gz is not None:
            self.gz.close()
            os.fsync(self.fd)
            self.gz = GzipMembers(self.fd, self.opts.gzip_level)
        else:
            os.fsync(self.fd)

    def close(self) -> None:
        """End gzip, fsync, close, and move the file to the output dir when a work dir is used
        (the next free revision when its name is taken there). Nothing when no file is open."""
        if self.fd is None:
            return
        if self.gz is not None:
            self.gz.close()
            self.gz = None
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        o = self.opts
        if o.work_dir != o.output_dir:
            src = self.path
            dst = self._output_path(src)
            self._logf(f"moving finished file {src} to {dst}")
            try:
                _exclusive_rename(src, dst)
                return
            except FileExistsError:
                pass
            template = _go_path_join(posixpath.dirname(dst), posixpath.basename(self.filename))
            i = self.rev + 1
            while True:
                self._logf(f"destination file already exists: {dst}", 3)
                dst = template.replace("<REV>", f"-{i:06d}")
                try:
                    _exclusive_rename(src, dst)
                except FileExistsError:
                    i += 1
                    continue
                self._logf(f"renamed finished file {src} to {dst} to avoid overwrite")
                break
