"""Reopening a DiskQueue after a crash: the meta file checked against the data files.

Strategy: :func:`plan_open` only looks (stat, read) and returns an :class:`OpenPlan`: the
positions and depth to start from and the files to remove or fsync; :func:`carry_out` does
that I/O; the queue then takes the plan's positions. The rules (go-diskqueue's and ours, listed
in diskqueue.py): a read position past the write position restarts on a fresh file; a write
file that does not end at writePos makes the writer move on and the reader take the old file
as finished (records past writePos are salvaged and counted); consumed files a crash left
behind are removed. Corruption met while reading (go's handleReadError, checkTailCorruption)
is the queue's own business, since it changes the live positions."""

from __future__ import annotations

import os
from typing import NamedTuple

from .diskqueue_files import DataFiles

__all__ = ["OpenPlan", "carry_out", "plan_open"]


class OpenPlan(NamedTuple):
    """Where a queue starts, and the file work before it may."""

    depth: int
    read_num: int
    read_pos: int
    write_num: int
    write_pos: int
    #: The positions differ from the meta file's: the next sync must write them.
    need_sync: bool
    #: Data files to remove: those a corrupt meta (read past write) named.
    stale: range
    #: Data files holding records past the meta's writePos, to fsync before they are read.
    salvaged: list[int]
    #: Remove the consumed files below read_num that a crash left (not after a corrupt meta:
    #: what lies below its numbers is unknown).
    clear_below: bool


def plan_open(
    meta: tuple[int, int, int, int, int], files: DataFiles, min_msg_size: int, max_msg_size: int
) -> OpenPlan:
    """The plan for a queue whose meta file read ``meta`` (depth, readFileNum, readPos,
    writeFileNum, writePos; all zeros when missing) and whose data files are ``files``; record
    sizes outside [min_msg_size, max_msg_size] end a salvage count. Logs what it finds. Raises
    OSError only if a file with records past writePos cannot be read."""
    log, name = files.log, files.name
    depth, rn, rp, wn, wp = meta
    need_sync = False
    stale = range(0)
    if rn > wn or (rn == wn and rp > wp):
        log.error(
            "DISKQUEUE(%s) metadata corruption: read position %d,%d past write position "
            "%d,%d, skipping to a new file and resetting 0...",
            name,
            rn,
            rp,
            wn,
            wp,
        )
        stale = range(rn, wn + 1)
        rn = wn = max(rn, wn) + 1
        rp = wp = depth = 0
        need_sync = True
        corrupt = True
    else:
        corrupt = False

    # The write file must end at writePos. If it does not, the meta is stale (a crash before
    # the meta caught up with the data) or the file is damaged: either way the writer starts
    # a new file and the reader takes the old one as finished.
    salvaged: list[int] = []
    while True:
        path = files.path(wn)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = -1
        if size == wp or (size < 0 and wp == 0):
            break
        if size > wp:
            extra = files.count_records(wn, wp, size, min_msg_size, max_msg_size)
            log.warning(
                "DISKQUEUE(%s) %s metadata writePos %d < file size of %d, skipping to new "
                "file (%d records after writePos)",
                name,
                path,
                wp,
                size,
                extra,
            )
            depth += extra
            salvaged.append(wn)
        elif size < 0:
            log.error(
                "DISKQUEUE(%s) %s metadata writePos %d but the file is missing, skipping "
                "to new file",
                name,
                path,
                wp,
            )
        else:
            log.error(
                "DISKQUEUE(%s) %s metadata writePos %d > file size of %d, data lost, "
                "skipping to new file",
                name,
                path,
                wp,
                size,
            )
        wn += 1
        wp = 0
        need_sync = True
    return OpenPlan(depth, rn, rp, wn, wp, need_sync, stale, salvaged, not corrupt)


def carry_out(plan: OpenPlan, files: DataFiles) -> None:
    """Do a plan's file work: remove its stale files, fsync its salvaged ones (a failure is
    logged: the records are read anyway), then remove the consumed files below its read file,
    walking down until one is not there."""
    for n in plan.stale:
        files.remove(n)
    for n in plan.salvaged:
        files.fsync(n)
    n = plan.read_num - 1 if plan.clear_below else -1
    while n >= 0:
        try:
            os.unlink(files.path(n))
        except OSError:
            break
        n -= 1
