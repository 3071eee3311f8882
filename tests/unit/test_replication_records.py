"""The pure parts of nsqpy.replication: key layout, record encoding, placement and leader choice,
election results, the etcd compare/op JSON, and the lease-deadline arithmetic (injected clock)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from nsqpy.replication.records import (
    Keys,
    NodeInfo,
    NotEnoughNodes,
    RecordError,
    TopicRecord,
    choose_leader,
    choose_placement,
    cmp_lease,
    default_root,
    elected,
    op_put,
    placement_load,
    prefix_end,
    unb64,
)
from nsqpy.replication.session import LeaseClock


def _rec(**kw: object) -> TopicRecord:
    base: dict[str, object] = {
        "topic": "t",
        "replicas": 3,
        "placement": ("a", "b", "c"),
        "leader": "a",
        "leader_lease": 7,
        "isr": ("a", "b", "c"),
        "epoch": 1,
    }
    base.update(kw)
    return TopicRecord(**base)  # type: ignore[arg-type]


def test_repl_keys_layout_under_root() -> None:
    keys = Keys(default_root("prod"))
    assert keys.node("n1") == b"/nsqpy/prod/nodes/n1"
    assert keys.topic("orders") == b"/nsqpy/prod/topics/orders"
    assert keys.topic_of(b"/nsqpy/prod/topics/orders") == "orders"
    assert keys.node_id_of(keys.node("n1")) == "n1"
    with pytest.raises(ValueError):
        keys.topic_of(b"/nsqpy/prod/nodes/n1")
    with pytest.raises(ValueError):
        Keys(b"/nsqpy/prod")
    with pytest.raises(ValueError):
        default_root("a/b")


def test_repl_prefix_end() -> None:
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\0"


def test_repl_topic_record_roundtrip_and_layout() -> None:
    rec = _rec(leader_lease=7587869384473829120)
    raw = rec.encode()
    assert TopicRecord.decode(raw) == rec
    obj = json.loads(raw)
    assert obj == {
        "v": 1,
        "topic": "t",
        "replicas": 3,
        "placement": ["a", "b", "c"],
        "leader": "a",
        "leader_lease": "7587869384473829120",
        "isr": ["a", "b", "c"],
        "epoch": 1,
    }
    # compact, sorted keys: the same record always has the same bytes
    assert raw == json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def test_repl_node_info_roundtrip() -> None:
    info = NodeInfo("n1", tcp="127.0.0.1:4150", http="127.0.0.1:4151", tags={"rack": "r1"})
    assert NodeInfo.decode(info.encode()) == info
    with pytest.raises(RecordError):
        NodeInfo.decode(b'{"v":1,"node_id":"n1","tcp":"","http":"","tags":{"a":1}}')


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1]",
        b'{"v":2,"topic":"t"}',
        (
            b'{"v":1,"topic":"t","replicas":"3","placement":[],"leader":"","leader_lease":"0",'
            b'"isr":[],"epoch":1}'
        ),
        (
            b'{"v":1,"topic":"t","replicas":1,"placement":["a"],"leader":"a","leader_lease":"x",'
            b'"isr":["a"],"epoch":1}'
        ),
        (
            b'{"v":1,"topic":"t","replicas":1,"placement":["a"],"leader":"a","leader_lease":"1",'
            b'"isr":["a"],"epoch":true}'
        ),
    ],
)
def test_repl_topic_record_refuses_bad_values(raw: bytes) -> None:
    with pytest.raises(RecordError):
        TopicRecord.decode(raw)


def test_repl_topic_record_invariants() -> None:
    with pytest.raises(RecordError):
        _rec(placement=("a", "b"))  # R=3 needs 3
    with pytest.raises(RecordError):
        _rec(placement=("a", "a", "b"))
    with pytest.raises(RecordError):
        _rec(isr=("a", "d"))
    with pytest.raises(RecordError):
        _rec(isr=("b", "a"))  # leader first
    with pytest.raises(RecordError):
        _rec().with_isr(["b", "c"])  # the leader cannot leave


def test_repl_with_isr_keeps_placement_order_and_epoch() -> None:
    rec = _rec(isr=("a",))
    grown = rec.with_isr(["c", "a", "b"])
    assert grown.isr == ("a", "b", "c") and grown.epoch == rec.epoch


def test_repl_placement_needs_enough_live_nodes() -> None:
    with pytest.raises(NotEnoughNodes) as info:
        choose_placement("t", 3, ["a", "b"])
    assert (info.value.needed, info.value.live) == (3, 2)
    with pytest.raises(ValueError):
        choose_placement("t", 0, ["a"])


def test_repl_placement_deterministic_and_distinct() -> None:
    nodes = [f"n{i}" for i in range(5)]
    p = choose_placement("orders", 3, nodes)
    assert len(set(p)) == 3 and set(p) <= set(nodes)
    assert choose_placement("orders", 3, list(reversed(nodes))) == p  # input order is irrelevant


def test_repl_placement_prefers_least_loaded() -> None:
    load = {"a": 4, "b": 0, "c": 1, "d": 0}
    p = choose_placement("x", 3, ["a", "b", "c", "d"], load)
    assert set(p) == {"b", "c", "d"} and p[2] == "c"


def test_repl_placement_spreads_topics_and_leaders() -> None:
    nodes = ["a", "b", "c"]
    records: list[TopicRecord] = []
    for i in range(30):
        p = choose_placement(f"t{i}", 1, nodes, placement_load(records))
        records.append(TopicRecord(f"t{i}", 1, p, p[0], 1, p, 1))
    assert placement_load(records) == {"a": 10, "b": 10, "c": 10}
    # with equal load, rendezvous hashing spreads the leaders of R=3 topics too
    leaders = Counter(choose_placement(f"t{i}", 3, nodes)[0] for i in range(300))
    assert set(leaders) == set(nodes) and min(leaders.values()) > 60


def test_repl_choose_leader_from_live_isr() -> None:
    rec = _rec(isr=("a", "c"))
    assert choose_leader(rec, ["b", "c"]) == "c"  # b is live but not in sync
    assert choose_leader(rec, ["b"]) is None  # no unclean election
    assert choose_leader(_rec(isr=("a",)), ["a", "b"]) == "a"  # lone ISR leader back, new lease


def test_repl_elected_bumps_epoch_and_cuts_isr() -> None:
    rec = _rec(epoch=4)
    new = elected(rec, "b", 99, ["b", "c"])
    assert (new.leader, new.leader_lease, new.epoch, new.isr) == ("b", 99, 5, ("b", "c"))
    assert new.placement == rec.placement
    again = elected(_rec(isr=("a",)), "a", 100, ["a"])
    assert (again.leader, again.leader_lease, again.epoch, again.isr) == ("a", 100, 2, ("a",))


def test_repl_gateway_json_parts() -> None:
    c = cmp_lease(b"k", 5, equal=False)
    assert c == {"key": "aw==", "target": "LEASE", "result": "NOT_EQUAL", "lease": "5"}
    put = op_put(b"k", b"v", 9)["request_put"]
    assert (unb64(put["key"]), unb64(put["value"]), put["lease"]) == (b"k", b"v", "9")
    assert "lease" not in op_put(b"k", b"v")["request_put"]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repl_lease_clock_deadline_from_send_time() -> None:
    clk = _Clock()
    lc = LeaseClock(margin=0.2, clock=clk)
    assert not lc.may_acknowledge()  # never renewed
    lc.renewed(sent_at=100.0, ttl=5)  # the answer may come later; the send time counts
    clk.now = 103.9
    assert lc.may_acknowledge()
    clk.now = 104.0  # 100 + 5 * 0.8: a full second before the server could expire it
    assert not lc.may_acknowledge()
    assert lc.remaining() == pytest.approx(0.0)


def test_repl_lease_clock_never_moves_back_and_expires() -> None:
    clk = _Clock()
    lc = LeaseClock(margin=0.0, clock=clk)
    lc.renewed(110.0, 5)
    lc.renewed(101.0, 5)  # an older keepalive's late answer
    assert lc.deadline == 115.0
    lc.expire()
    assert not lc.may_acknowledge()
    with pytest.raises(ValueError):
        lc.renewed(120.0, 0)
    with pytest.raises(ValueError):
        LeaseClock(margin=1.0)
