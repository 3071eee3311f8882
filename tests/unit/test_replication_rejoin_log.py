"""Rejoining in process (replication/leader_stream.py "Rejoining"): a follower's ReplicaLog
answers a probe with the name of its last entry (kept across a reopen in
``<topic>#replica.last``) and whether its topic is dirty, checks that a batch follows that
name, is reset (its topic first) only when its node agrees, and drains each name once, keeping
the drained entries as the new leader's history; a LeaderStream finds what a follower needs
after its last name."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqpy.diskqueue import FramedDiskQueue
from nsqpy.replication.entries import (
    ENTRY,
    RECORD_HEADER,
    Gap,
    NotFollowing,
    StaleEpoch,
    entry_name,
    name_text,
    parse_name,
)
from nsqpy.replication.leader_stream import LeaderStream
from nsqpy.replication.link import acked_of, batch_for
from nsqpy.replication.replica_log import ReplicaLog


def _entry(epoch: int, seq: int) -> bytes:
    return ENTRY.pack(epoch, seq, 0) + bytes(RECORD_HEADER) + b"e%d-%d" % (epoch, seq)


def _log(path: Path, dirty: bool = False, allow: bool = True) -> tuple[ReplicaLog, list[int]]:
    hs = ENTRY.size + RECORD_HEADER
    resets: list[int] = []

    def on_reset(epoch: int) -> bool:
        resets.append(epoch)
        return allow

    dq = FramedDiskQueue("t#replica", str(path), 1 << 20, hs, 1 << 16, 1, 1000)
    return ReplicaLog("t", dq, str(path / "t#replica.last"), lambda: dirty, on_reset), resets


def test_replication_entry_names_on_the_wire() -> None:
    assert name_text(None) == "-" and parse_name("-") is None
    assert parse_name(name_text((3, 17))) == (3, 17)
    assert entry_name(_entry(2, 9)) == (2, 9)
    with pytest.raises(ValueError):
        parse_name("3")


@pytest.mark.asyncio
async def test_replica_log_probe_chain_and_reset(tmp_path: Path) -> None:
    rlog, resets = _log(tmp_path, dirty=True)
    probe = await rlog.request(1, [], "?")
    assert probe == {"next": 0, "last": "-", "dirty": True}
    await rlog.request(1, [_entry(1, 0), _entry(1, 1)], "-")
    # a batch must follow the last name
    with pytest.raises(Gap) as gap:
        await rlog.request(1, [_entry(1, 3)], "1:2")
    assert gap.value.last == (1, 1)
    with pytest.raises(Gap):  # a stale view of the follower (an answer lost): told where it is
        await rlog.request(1, [_entry(1, 1), _entry(1, 2)], "1:0")
    ans = await rlog.request(1, [_entry(1, 1), _entry(1, 2)], "1:1")  # (1, 1) skipped
    assert ans == {"next": 3, "last": "1:2"}
    assert rlog.appended == 3
    # a newer leader's history after it: older epochs' names, then its own
    ans = await rlog.request(2, [_entry(1, 3), _entry(2, 0)], "1:2")
    assert ans == {"next": 1, "last": "2:0"}
    with pytest.raises(StaleEpoch):
        await rlog.request(1, [_entry(1, 4)], "2:0")
    # reset: the node empties its topic first (told the epoch), then the log starts over
    await rlog.request(3, [_entry(1, 0), _entry(3, 0)], "-", reset=True)
    assert resets == [3] and rlog.resets == 1 and rlog.last == (3, 0)
    assert [r[RECORD_HEADER:] for _, r in rlog.drain()] == [b"e1-0", b"e3-0"]
    rlog.close()
    again, _ = _log(tmp_path)
    assert again.last == (3, 0)  # the last name survives a restart
    again.close()


@pytest.mark.asyncio
async def test_replica_log_reset_refused_by_its_node(tmp_path: Path) -> None:
    rlog, resets = _log(tmp_path, allow=False)
    await rlog.request(1, [_entry(1, 0)], "-")
    with pytest.raises(NotFollowing):
        await rlog.request(2, [_entry(2, 0)], "-", reset=True)
    assert resets == [2] and rlog.last == (1, 0) and rlog.dq.depth == 1
    rlog.close()


@pytest.mark.asyncio
async def test_replica_log_drains_each_name_once_and_retains(tmp_path: Path) -> None:
    rlog, _ = _log(tmp_path)
    await rlog.request(1, [_entry(1, i) for i in range(3)], "-")
    rlog.last = (1, 0)  # as after a stale .last file: the leader sends (1, 1) on again
    await rlog.request(1, [_entry(1, 1), _entry(1, 2), _entry(1, 3)], "1:0")
    assert rlog.dq.depth == 6
    drained = [r[RECORD_HEADER:] for _, r in rlog.drain(2)] + [
        r[RECORD_HEADER:] for _, r in rlog.drain()
    ]
    assert drained == [b"e1-0", b"e1-1", b"e1-2", b"e1-3"]
    assert [entry_name(e) for e in rlog.take_retained()] == [(1, i) for i in range(4)]
    assert rlog.take_retained() == []
    rlog.close()


def test_leader_stream_sends_what_follows_the_followers_last_entry() -> None:
    s = LeaderStream("t", 5, None, lambda n: "", lambda: True, lambda n: None, 1.0)
    s.set_history([_entry(2, 7), _entry(2, 8), _entry(4, 0)])
    s.entries = [_entry(5, i) for i in range(3)]
    s.next_seq = 3

    def names(last: tuple[int, int] | None) -> list[tuple[int, int]] | None:
        batch = batch_for(last, s)
        return None if batch is None else [entry_name(e) for e in batch]

    assert names(None) == [(2, 7), (2, 8), (4, 0)]  # empty log: the whole history
    assert names((1, 50)) == [(2, 7), (2, 8), (4, 0)]  # older than the history
    assert names((2, 7)) == [(2, 8), (4, 0)]
    assert names((2, 99)) == [(4, 0)]  # an extra tail of epoch 2: kept, what follows sent
    assert names((4, 0)) == [(5, 0), (5, 1), (5, 2)]
    assert names((5, 1)) == [(5, 2)]
    assert names((5, 2)) == []  # caught up
    assert acked_of((5, 1), s) == 2 and acked_of((4, 0), s) == 0
    s.base = 1
    assert names((4, 0)) is None  # this epoch's first entries are gone: given up
    s.close()
