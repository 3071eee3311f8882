"""Trimming a follower's replica log (replication/local.py trim_log, replica_log.ReplicaLog.trim) in
process, on a real DiskQueue in a temp dir: entries at the front that every channel of the
progress record finished go, the first one a channel still holds (or one published after the
round) stops it, nothing goes without a record or with a channel of unknown progress, and what
is left is what a promotion drains."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqpy import guid
from nsqpy.diskqueue import FramedDiskQueue
from nsqpy.replication import local
from nsqpy.replication.entries import ENTRY, RECORD_HEADER
from nsqpy.replication.progress import ChannelProgress, guid_of, node_of
from nsqpy.replication.replica_log import ReplicaLog

NODE = 7


def _ids(n: int) -> list[int]:
    f = guid.GUIDFactory(NODE)
    return [int(f.new_id(), 16) for _ in range(n)]


def _record(g: int) -> bytes:
    # nsqd's record: 8 timestamp, 2 attempts, 16 hex ID, body
    return bytes(10) + b"%016x" % g + b"body"


async def _log(path: Path, ids: list[int]) -> ReplicaLog:
    hs = ENTRY.size + RECORD_HEADER
    dq = FramedDiskQueue("t#replica", str(path), 1 << 20, hs, 1 << 16, 1, 1000)
    rlog = ReplicaLog("t", dq, str(path / "t#replica.last"), lambda: False, lambda e: True)
    entries = [ENTRY.pack(1, s, 0) + _record(g) for s, g in enumerate(ids)]
    await rlog.request(1, entries, "-")
    return rlog


def _progress(high: int, held: list[int]) -> ChannelProgress:
    live = b"".join(g.to_bytes(8, "big") for g in sorted(held))
    return ChannelProgress({NODE: high}, {}, live)


@pytest.mark.asyncio
async def test_replication_trim_drops_the_finished_front(tmp_path: Path) -> None:
    ids = _ids(10)
    assert {node_of(g) for g in ids} == {NODE} and guid_of(_record(ids[3])) == ids[3]
    rlog = await _log(tmp_path, ids)
    # a: everything up to ids[7] finished but ids[5]; b: all up to ids[7] finished
    record: dict[str, ChannelProgress | None] = {
        "a": _progress(ids[7], [ids[5]]),
        "b": _progress(ids[7], []),
    }
    assert local.trim_log(rlog, record) == 5  # ids[0..4]; ids[5] is still held by a
    assert rlog.dq.depth == 5
    record["a"] = _progress(ids[7], [])
    assert local.trim_log(rlog, record, limit=1) == 1  # bounded
    assert local.trim_log(rlog, record) == 2  # ids[6], ids[7]; ids[8] is past the round
    left = rlog.drain()
    assert [guid_of(r) for _, r in left] == ids[8:]


@pytest.mark.asyncio
async def test_replication_trim_needs_a_known_record(tmp_path: Path) -> None:
    ids = _ids(4)
    rlog = await _log(tmp_path, ids)
    assert local.trim_log(rlog, None) == 0
    assert local.trim_log(rlog, {}) == 0
    unknown: dict[str, ChannelProgress | None] = {"a": _progress(ids[-1], []), "b": None}
    assert local.trim_log(rlog, unknown) == 0
    assert rlog.dq.depth == 4
