"""When a follower's replica log (replication/replica_log.py) answers and what its ``.last``
file says: with --replica-sync=write an append is answered once written, the fsync follows in
the background (one fsync covering every append made while the one before ran) and only then
does ``.last`` name the entries; with --replica-sync=fsync the append is answered after it.
A log reopened after appends whose fsync never named them (the process killed) ends with
the newest entry its files hold, not with the older name of ``.last``. The fsync is held on a
gate (a threading.Event) so that every step is observed in order."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.diskqueue import FramedDiskQueue
from nsqpy.replication import replica_log
from nsqpy.replication.entries import ENTRY, RECORD_HEADER
from nsqpy.replication.replica_log import ReplicaLog


def _entry(epoch: int, seq: int) -> bytes:
    return ENTRY.pack(epoch, seq, 0) + bytes(RECORD_HEADER) + b"e%d-%d" % (epoch, seq)


def _log(path: Path, fsync_first: bool) -> ReplicaLog:
    hs = ENTRY.size + RECORD_HEADER
    # meta syncs rare: between them an fsync is of the data file alone (_fsync_close)
    dq = FramedDiskQueue("t#replica", str(path), 1 << 20, hs, 1 << 16, 100_000, 3_600_000)
    return ReplicaLog(
        "t", dq, str(path / "t#replica.last"), lambda: False, lambda e: True, fsync_first
    )


def _last_file(path: Path) -> str:
    """The name ``.last`` holds (its first field; the second is where that entry ends)."""
    return (path / "t#replica.last").read_text().split()[0]


class Gate:
    """Stands in for replica_log._fsync_close: each call counts, waits for ``open`` (bounded,
    so a broken test fails instead of hanging), then fsyncs and closes as the real one."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.calls = 0
        self.entered = threading.Event()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        try:
            assert self.open.wait(30), "gate never opened"
            os.fsync(fd)
        finally:
            os.close(fd)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    monkeypatch.setattr(replica_log, "_fsync_close", g)
    yield g
    g.open.set()


@pytest.mark.asyncio
async def test_write_mode_answers_before_the_fsync_and_names_only_fsynced(
    tmp_path: Path, gate: Gate
) -> None:
    rlog = _log(tmp_path, fsync_first=False)
    gate.open.set()
    await rlog.append(1, 0, [_entry(1, 0)])  # the first sync is a full one (a new file)
    await rlog.wait_synced()
    assert rlog.synced == (1, 0) and _last_file(tmp_path) == "1:0"
    gate.open.clear()
    gate.calls = 0

    # answered while its fsync is held: in the log, readable, not yet named by .last
    assert await rlog.append(1, 1, [_entry(1, 1), _entry(1, 2)]) == 3
    assert rlog.last == (1, 2) and rlog.synced == (1, 0)
    assert await _entered(gate)
    assert _last_file(tmp_path) == "1:0"
    # more appends while that fsync runs: answered at once, covered by one fsync after it
    await rlog.append(1, 3, [_entry(1, 3)])
    await rlog.append(1, 4, [_entry(1, 4)])
    assert rlog.last == (1, 4) and gate.calls == 1
    gate.open.set()
    await rlog.wait_synced()
    assert gate.calls == 2
    assert rlog.synced == (1, 4) and _last_file(tmp_path) == "1:4"
    assert [r[RECORD_HEADER:] for _, r in rlog.drain()] == [b"e1-%d" % i for i in range(5)]
    rlog.close()


@pytest.mark.asyncio
async def test_write_mode_reset_during_an_fsync_names_nothing_old(
    tmp_path: Path, gate: Gate
) -> None:
    rlog = _log(tmp_path, fsync_first=False)
    gate.open.set()
    await rlog.append(1, 0, [_entry(1, 0)])
    await rlog.wait_synced()
    gate.open.clear()
    await rlog.append(1, 1, [_entry(1, 1)])
    assert await _entered(gate)
    # a new leader resets the log while the fsync of (1, 1) is held
    await rlog.append(2, 0, [_entry(2, 0)], "-", reset=True)
    assert rlog.last == (2, 0) and rlog.synced is None and _last_file(tmp_path) == "-"
    gate.open.set()
    await rlog.wait_synced()
    # the held fsync ended after the reset: it names nothing; the next one names (2, 0)
    assert rlog.synced == (2, 0) and _last_file(tmp_path) == "2:0"
    rlog.close()


@pytest.mark.asyncio
async def test_fsync_mode_answers_after_the_fsync(tmp_path: Path, gate: Gate) -> None:
    rlog = _log(tmp_path, fsync_first=True)
    gate.open.set()
    await rlog.append(1, 0, [_entry(1, 0)])
    assert rlog.synced == (1, 0) and _last_file(tmp_path) == "1:0"
    await rlog.append(1, 1, [_entry(1, 1)])  # the data-only fsync, on the gate
    assert gate.calls == 1
    assert rlog.synced == rlog.last == (1, 1) and _last_file(tmp_path) == "1:1"
    await rlog.wait_synced()  # nothing in the background
    rlog.close()


@pytest.mark.asyncio
async def test_reopened_log_ends_with_what_its_files_hold(tmp_path: Path, gate: Gate) -> None:
    rlog = _log(tmp_path, fsync_first=False)
    gate.open.set()
    await rlog.append(1, 0, [_entry(1, 0)])
    await rlog.wait_synced()
    gate.open.clear()
    await rlog.append(1, 1, [_entry(1, 1), _entry(1, 2)])
    await rlog.append(1, 3, [_entry(1, 3)])
    assert await _entered(gate)
    rlog.close()  # the held fsync never names them
    gate.open.set()
    assert _last_file(tmp_path) == "1:0"
    again = _log(tmp_path, fsync_first=False)
    assert again.last == again.synced == (1, 3)
    assert await again.append(1, 4, [_entry(1, 3), _entry(1, 4)], "1:3") == 5  # (1, 3) skipped
    again.close()
    # an older ``.last`` (a name alone, as before positions were kept): the files say where
    # the log ends
    (tmp_path / "t#replica.last").write_text("1:2")
    third = _log(tmp_path, fsync_first=False)
    assert third.last == (1, 4)
    assert [r[RECORD_HEADER:] for _, r in third.drain()] == [b"e1-%d" % i for i in range(5)]
    third.close()


async def _entered(gate: Gate) -> bool:
    """Wait (off the loop) until the background fsync reached the gate."""
    return await asyncio.get_running_loop().run_in_executor(None, gate.entered.wait, 30)
