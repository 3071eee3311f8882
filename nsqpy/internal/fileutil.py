"""Small file helpers shared by the storage modules (diskqueue meta files, nsqd.dat, the deferred
journal).

Rule kept: a file replaced with write_sync_file is either the old one or the whole new one,
never a mix: the bytes go to "<path>.<random 63-bit int>.tmp" (go-diskqueue's and nsqd's temp
name), are fsynced, then renamed over the path; a failure removes the temp file."""

from __future__ import annotations

import os
import random


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until every byte is written (a write may be partial). Raises OSError."""
    with memoryview(data) as view:
        while view:
            view = view[os.write(fd, view) :]


def write_sync_file(path: str, data: bytes, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync unless told not to, rename).

    Raises OSError; the temp file is removed on failure.
    """
    tmp = f"{path}.{random.getrandbits(63)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
