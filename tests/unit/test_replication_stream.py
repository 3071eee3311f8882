"""The replication stream in process (entries.py, replica_log.py, leader_stream.py): the append
request's entry framing, a follower's ReplicaLog (skips what it has, refuses gaps and older
epochs, fenced by a newer record, drained in order at promotion, durable across a reopen) and a
LeaderStream's commit bookkeeping with no follower links (everything commits at once; waiters
answered by ``allowed()``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nsqpy.diskqueue import FramedDiskQueue
from nsqpy.replication.entries import (
    ENTRY,
    RECORD_HEADER,
    Gap,
    StaleEpoch,
    decode_entries,
    encode_entries,
    entry_ends,
    framed_name,
)
from nsqpy.replication.leader_stream import LeaderStream
from nsqpy.replication.replica_log import ReplicaLog


def _record(i: int) -> bytes:
    return bytes(RECORD_HEADER - 2) + i.to_bytes(2, "big") + b"body%d" % i


def _entry(epoch: int, seq: int, delay: int = 0) -> bytes:
    return ENTRY.pack(epoch, seq, delay) + _record(seq)


def _log(path: Path) -> ReplicaLog:
    hs = ENTRY.size + RECORD_HEADER
    return ReplicaLog("t", FramedDiskQueue("t#replica", str(path), 1 << 20, hs, 1 << 16, 1, 1000))


def test_replication_entries_roundtrip_and_refuse_bad_framing() -> None:
    entries = [_entry(1, i) for i in range(3)]
    assert decode_entries(encode_entries(entries)) == entries
    assert decode_entries(b"") == []
    with pytest.raises(ValueError):
        decode_entries(encode_entries(entries)[:-1])
    with pytest.raises(ValueError):
        decode_entries(b"\0\0\0\x01x")  # shorter than an entry header


@pytest.mark.asyncio
async def test_replica_log_skips_duplicates_refuses_gaps_and_old_epochs(tmp_path: Path) -> None:
    rlog = _log(tmp_path)
    assert await rlog.append(1, 0, [_entry(1, 0), _entry(1, 1)]) == 2
    # a resend overlapping what it has: only the new tail is appended
    assert await rlog.append(1, 1, [_entry(1, 1), _entry(1, 2)]) == 3
    with pytest.raises(Gap) as gap:
        await rlog.append(1, 5, [_entry(1, 5)])
    assert gap.value.expected == 3
    # a new epoch starts its own sequence; the old one is refused from then on
    assert await rlog.append(2, 0, [_entry(2, 0, delay=250)]) == 1
    with pytest.raises(StaleEpoch):
        await rlog.append(1, 3, [_entry(1, 3)])
    rlog.fence(3)  # this node learned of epoch 3: epoch 2's leader is deposed
    with pytest.raises(StaleEpoch):
        await rlog.append(2, 1, [_entry(2, 1)])
    assert rlog.appended == 4
    drained = rlog.drain()
    assert [d for d, _ in drained] == [0, 0, 0, 250]
    assert [r for _, r in drained] == [_record(0), _record(1), _record(2), _record(0)]
    assert rlog.drain() == []
    rlog.close()


def test_entry_ends_walks_the_body_and_refuses_bad_framing() -> None:
    entries = [_entry(1, i) for i in range(3)]
    body = encode_entries(entries)
    ends = entry_ends(body, 1 << 16)
    assert ends == [sum(4 + len(e) for e in entries[: k + 1]) for k in range(3)]
    assert [framed_name(body, s) for s in (0, *ends[:-1])] == [(1, 0), (1, 1), (1, 2)]
    assert entry_ends(b"", 1 << 16) == []
    for bad in (body[:-1], body + b"\0\0", b"\0\0\0\x01x"):
        with pytest.raises(ValueError):
            entry_ends(bad, 1 << 16)
    with pytest.raises(ValueError):  # an entry larger than the log takes
        entry_ends(body, len(entries[0]) - 1)


@pytest.mark.asyncio
async def test_framed_append_writes_the_same_log_as_entry_by_entry(tmp_path: Path) -> None:
    """append_framed (the body as it came) keeps the append's rules and leaves the same bytes
    in the data files as append (a list of entries), file rolls included."""
    hs = ENTRY.size + RECORD_HEADER

    def small(sub: str) -> ReplicaLog:
        (tmp_path / sub).mkdir()
        return ReplicaLog(
            "t", FramedDiskQueue("t#replica", str(tmp_path / sub), 300, hs, 1 << 16, 1, 1000)
        )

    a, b = small("a"), small("b")
    batches = [[_entry(1, i) for i in range(k, k + 4)] for k in range(0, 40, 3)]  # overlaps
    for batch in batches:
        assert await a.append(1, 0, batch) == await b.append_framed(1, encode_entries(batch))
    with pytest.raises(Gap):
        await b.append_framed(1, encode_entries([_entry(1, 50)]))
    with pytest.raises(Gap):
        await b.append_framed(1, encode_entries([_entry(1, 44)]), prev="1:7")
    with pytest.raises(StaleEpoch):
        await b.append_framed(0, encode_entries([_entry(0, 0)]))
    with pytest.raises(ValueError):
        await b.append_framed(1, encode_entries([_entry(1, 43)])[:-1])
    assert b.last == a.last == (1, 42)
    assert a.appended == b.appended == 43
    for rlog in (a, b):
        rlog.dq.flush()
    for f in sorted((tmp_path / "a").glob("*.dat")):
        if "meta" not in f.name:
            assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()
    assert len(list((tmp_path / "a").glob("t#replica.diskqueue.0*.dat"))) > 3
    drained: list[bytes] = []
    while more := b.drain(100):
        drained += [r for _, r in more]
    assert drained == [_record(i) for i in range(43)]
    a.close()
    b.close()


@pytest.mark.asyncio
async def test_replica_log_appends_survive_reopen(tmp_path: Path) -> None:
    rlog = _log(tmp_path)
    await rlog.append(1, 0, [_entry(1, i) for i in range(5)])
    assert len(rlog.drain(2)) == 2  # promoted once: two put into the topic
    job = rlog.sync_job()
    await asyncio.get_running_loop().run_in_executor(None, job)
    rlog.close()
    again = _log(tmp_path)
    assert [r for _, r in again.drain()] == [_record(i) for i in range(2, 5)]
    again.close()


@pytest.mark.asyncio
async def test_leader_stream_without_followers_commits_at_once() -> None:
    allowed = [True]
    lagging: list[str] = []
    s = LeaderStream("t", 1, None, lambda n: "", lambda: allowed[0], lagging.append, 1.0)
    end = s.append([_record(0), _record(1)])
    assert end == 2 and s.committed == 2 and s.entries == []
    assert await s.commit_waiter(end) is True
    allowed[0] = False  # lease not certainly alive, or ISR under --min-isr
    assert await s.commit_waiter(s.append([_record(2)])) is False
    s.close()
    assert lagging == []


@pytest.mark.asyncio
async def test_a_node_placed_during_the_epoch_starts_from_what_the_leader_keeps() -> None:
    s = LeaderStream("t", 1, None, lambda n: "", lambda: True, lambda n: None, 1.0, lambda n: None)
    s.set_links([], ["b"])  # the epoch's placement: b is linked from seq 0, no floor
    s.append([_record(0), _record(1)])
    assert s.links["b"].floor is None
    s.set_links([], ["b", "c"])  # c placed on the topic now (placement.py's union)
    assert s.links["c"].floor == s.base
    s.set_links([], ["c"])  # b placed off the topic...
    assert "b" not in s.links
    s.set_links([], ["b", "c"])  # ...and on it again: joining again
    assert s.links["b"].floor == s.base
    s.close()


@pytest.mark.asyncio
async def test_an_append_is_taken_at_once_when_nothing_has_to_wait(tmp_path: Path) -> None:
    """request_now (the stream's path when no append is in progress and the answer waits for
    no fsync) keeps the rules of request and gives the same answers."""
    hs = ENTRY.size + RECORD_HEADER
    rlog = ReplicaLog(
        "t",
        FramedDiskQueue("t#replica", str(tmp_path), 1 << 20, hs, 1 << 16, 1, 1000),
        fsync_first=False,
    )
    assert rlog.ready_now()
    body = encode_entries([_entry(1, i) for i in range(3)])
    assert rlog.request_now(1, body, "-") == {"next": 3, "last": "1:2"}
    assert rlog.request_now(1, body, "1:2") == {"next": 3, "last": "1:2"}  # sent twice: skipped
    with pytest.raises(Gap):
        rlog.request_now(1, encode_entries([_entry(1, 9)]), "1:8")
    with pytest.raises(StaleEpoch):
        rlog.request_now(0, body, "-")
    assert rlog.appended == 3
    async with rlog.lock:  # an append in progress: the stream waits its turn
        assert not rlog.ready_now()
    await rlog.wait_synced()
    assert rlog.synced == (1, 2)
    rlog.close()
    (tmp_path / "f").mkdir()
    fsynced = _log(tmp_path / "f")  # --replica-sync=fsync: answered after the fsync
    assert not fsynced.ready_now()
    fsynced.close()
