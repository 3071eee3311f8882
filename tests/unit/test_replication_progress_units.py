"""nsqpy.replication.progress and the leader stream's high watermark, in process: a channel's
progress snapshot (held IDs, floors past the bound, unknown with a disk backlog), the round's
msgpack encoding, the follower's merge and side file, the filter at promotion, and
LeaderStream handing committed records over in seq order (a split MPUB, DPUBs, refused ones
dropped)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nsqpy.channel import Channel
from nsqpy.message import Message, encode_record
from nsqpy.replication import progress
from nsqpy.replication.leader_stream import LeaderStream
from nsqpy.replication.link import Link
from nsqpy.topic import Topic

NODE = 7


def guid(n: int, node: int = NODE) -> int:
    return (1 << 40) + (n << 22) + (node << 12)


def rec(n: int, node: int = NODE) -> bytes:
    return encode_record(1_700_000_000_000_000_000, 0, b"%016x" % guid(n, node), b"b%d" % n)


class Reader:
    """A consumer with room for ``rdy`` messages; keeps what it was sent."""

    def __init__(self, rdy: int) -> None:
        self.client_id = 1
        self.in_ready = False
        self.msg_timeout_ms = 60_000
        self.sample_rate = 0
        self.rdy = rdy
        self.sent: list[Message] = []

    def ready_room(self) -> int:
        return self.rdy - len(self.sent)

    def send_messages(self, msgs: list[Message]) -> None:
        self.sent += msgs

    def timed_out_message(self) -> None: ...

    def emptied(self) -> None: ...

    def close(self) -> None: ...


def _topic() -> Topic:
    return Topic("t", lambda topic, name: Channel(topic.name, name))


def test_progress_snapshot_says_which_ids_each_channel_finished() -> None:
    t = _topic()
    a = t.get_channel("a")
    t.get_channel("b")
    t.put_many([rec(i) for i in range(10)])
    reader = Reader(10)
    a.add_client(reader)
    a.notify_ready(reader)
    for m in reader.sent[:6]:  # a finishes 0..5; 6..9 stay in flight
        a.finish(reader, m.id)
    high = {NODE: guid(9)}
    chans = progress.snapshot(t, high)
    assert chans is not None and set(chans) == {"a", "b"}
    epoch, got = progress.decode_round(progress.encode_round(3, high, chans))
    assert epoch == 3
    pa, pb = got["a"], got["b"]
    assert pa is not None and pb is not None
    assert [pa.finished(guid(i)) for i in range(10)] == [True] * 6 + [False] * 4
    assert not any(pb.finished(guid(i)) for i in range(10))
    # published after the round, or minted by a node the round does not know: not finished
    assert not pa.finished(guid(10)) and not pa.finished(guid(0, node=8))
    assert pa.floor == {NODE: guid(6)} and pb.floor == {NODE: guid(0)}


def test_progress_past_the_bound_sends_floors_and_no_round_while_the_topic_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "MAX_LIVE", 3)
    t = _topic()
    assert progress.snapshot(t, {NODE: 1}) is None  # no channel: the topic holds everything
    a = t.get_channel("a")
    t.put_many([rec(i) for i in range(2, 8)])
    chans = progress.snapshot(t, {NODE: guid(7)})
    assert chans is not None and chans["a"] is not None and chans["a"]["live"] is None
    _, got = progress.decode_round(progress.encode_round(1, {NODE: guid(7)}, chans))
    pa = got["a"]
    assert pa is not None
    assert pa.finished(guid(1)) and not pa.finished(guid(2)) and not pa.finished(guid(5))
    t.pause()
    t.put_many([rec(9)])
    assert progress.snapshot(t, {NODE: guid(9)}) is None
    assert a.held_ids(5) is None  # more than the limit


def test_progress_channel_with_unread_disk_backlog_is_unknown(tmp_path: Path) -> None:
    from nsqpy.diskqueue import DiskQueue

    dq = DiskQueue("t:a", str(tmp_path), 1 << 20, 26, 1 << 16, 1, 1000)
    t = Topic("t", lambda topic, name: Channel(topic.name, name, mem_queue_size=2, backend=dq))
    t.get_channel("a")
    t.put_many([rec(i) for i in range(5)])
    chans = progress.snapshot(t, {NODE: guid(4)})
    assert chans == {"a": None}
    dq.close()


def test_progress_decode_refuses_what_is_not_a_round() -> None:
    for body in (b"", b"\xc1", progress.encode_round(1, {}, {})[:-1]):
        with pytest.raises(ValueError):
            progress.decode_round(body)
    import msgpack

    with pytest.raises(ValueError):
        progress.decode_round(msgpack.packb({"v": 2, "epoch": 1, "high": {}, "channels": {}}))
    with pytest.raises(ValueError):
        progress.decode_round(
            msgpack.packb({"v": 1, "epoch": 1, "high": {}, "channels": {"a": {"live": b"x"}}})
        )


@pytest.mark.asyncio
async def test_progress_store_merges_keeps_older_entry_for_unknown_and_survives_restart(
    tmp_path: Path,
) -> None:
    store = progress.ProgressStore(str(tmp_path))
    cp = progress.ChannelProgress({NODE: guid(5)}, {}, b"")
    body = progress.encode_round(2, {NODE: guid(5)}, {"a": cp.to_obj(), "b": None})
    assert await store.receive("t", 2, body, 2) == 1
    # the next round: "a" unknown now (a disk backlog): its older entry is kept
    body2 = progress.encode_round(2, {NODE: guid(9)}, {"a": None, "b": cp.to_obj()})
    assert await store.receive("t", 2, body2, 1) == 2
    from nsqpy.replication.entries import StaleEpoch

    with pytest.raises(StaleEpoch):
        await store.receive("t", 1, body2, 2)
    with pytest.raises(StaleEpoch):
        await store.receive("t", 3, body2, -1)  # this node leads the topic
    again = progress.ProgressStore(str(tmp_path)).load("t")
    assert again is not None and set(again) == {"a", "b"}
    ra, rb = again["a"], again["b"]
    assert ra is not None and rb is not None
    assert ra.high == {NODE: guid(5)} and ra.finished(guid(5)) and not ra.finished(guid(6))
    assert rb.high == {NODE: guid(9)}
    store.forget("t")
    assert progress.ProgressStore(str(tmp_path)).load("t") is None
    assert not list(tmp_path.iterdir())


def test_promotion_puts_each_entry_into_the_channels_that_did_not_finish_it() -> None:
    finished_a = progress.ChannelProgress({NODE: guid(3)}, {}, b"")  # a finished 0..3
    record = {"a": finished_a, "b": None}  # b: unknown (everything again, counted)
    t = _topic()
    other = t.get_channel("local")  # not named: everything, uncounted
    plan = progress.Promotion(t, record)
    assert set(t.channels) == {"a", "b", "local"}
    plan.put([(0, rec(i)) for i in range(5)] + [(5000, rec(5))])
    a, b = t.channels["a"], t.channels["b"]
    assert a.depth == 1 and len(a.deferred) == 1  # 4 queued, 5 deferred
    assert b.depth == 5 and len(b.deferred) == 1
    assert other.depth == 5
    assert plan.redelivered == 2 + 6
    assert plan.high == {NODE: guid(5)}
    assert t.message_count == 6
    # no record: into the topic as for R=1 (held: no channel)
    t2 = _topic()
    p2 = progress.Promotion(t2, None)
    p2.put([(0, rec(1))])
    assert t2.depth == 1 and p2.redelivered == 0


@pytest.mark.asyncio
async def test_leader_stream_hands_committed_records_over_in_seq_order() -> None:
    got: list[tuple[list[bytes], list[tuple[bytes, int]]]] = []
    allowed = [True]

    def on_commit(plain: list[bytes], deferred: list[tuple[bytes, int]]) -> bool:
        got.append((plain, deferred))
        return True

    s = LeaderStream(
        "t", 1, None, lambda n: "", lambda: allowed[0], lambda n: None, 1.0, None, on_commit
    )
    link = s.links["f"] = Link("f", 0)  # a follower, driven by hand
    end = s.append([rec(0), rec(1), rec(2)])
    s.append([rec(3)], delay_ms=100)
    waiter = s.commit_waiter(end)
    s._advance()
    assert got == [] and not waiter.done()
    link.acked = 2  # an MPUB split across two append requests: its first two records
    s._advance()
    assert got == [([rec(0), rec(1)], [])] and not waiter.done()
    link.acked = 4
    s._advance()
    assert got[1] == ([rec(2)], [(rec(3), 100)])
    assert waiter.done() and waiter.result() is True
    # committed while acknowledging is not allowed: refused, and never handed over
    allowed[0] = False
    w2 = s.commit_waiter(s.append([rec(4)]))
    link.acked = 5
    s._advance()
    assert len(got) == 2 and w2.result() is False and s.dropped == 1
    # uncommitted when the stream closes: dropped
    s.append([rec(5), rec(6)])
    s.close()
    assert s.dropped == 3 and len(got) == 2
    await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_leader_stream_commits_at_once_when_only_catching_up_links_are_left() -> None:
    got: list[list[bytes]] = []

    def on_commit(plain: list[bytes], deferred: list[tuple[bytes, int]]) -> bool:
        got.append(plain)
        return True

    s = LeaderStream("t", 1, None, lambda n: "", lambda: True, lambda n: None, 1.0, None, on_commit)
    link = s.links["f"] = Link("f", 0)
    link.in_isr = False  # out of the ISR, catching up: not waited for
    w = s.commit_waiter(s.append([rec(0)]))
    assert got == [[rec(0)]] and w.result() is True
    assert s.entries  # kept for the catching-up follower
    s.close()


def test_progress_store_sweep_removes_only_leftover_temp_files(tmp_path: Path) -> None:
    """A crash in the middle of a side-file write leaves its temp file; the next start sweeps
    such files (both temp-name styles) and nothing else of the data path."""
    keep = [
        "t#replica.progress",
        "t#replica.log",
        "t.diskqueue.meta.dat",
        "t.diskqueue.meta.dat.123.tmp",  # another file's temp: not the progress store's
        "t#replica.progress.tmp",
        "nsqd.dat",
    ]
    leftovers = ["t#replica.progress.4611686018427387904.tmp", "u#replica.progress.tmp3"]
    for name in keep + leftovers:
        (tmp_path / name).write_bytes(b"x")
    store = progress.ProgressStore(str(tmp_path))
    assert sorted(store.sweep()) == sorted(leftovers)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
    assert store.sweep() == []


def test_progress_round_before_the_first_message_names_the_channels() -> None:
    t = _topic()
    t.get_channel("a")
    t.get_channel("b")
    chans = progress.snapshot(t, {})  # channels made, nothing put yet
    assert chans is not None and set(chans) == {"a", "b"}
    _, got = progress.decode_round(progress.encode_round(1, {}, chans))
    for name in ("a", "b"):
        entry = got[name]
        assert entry is not None and not entry.finished(guid(0)) and not entry.finished(guid(9))
