"""The pure plans of a placement change (replication/placement.py): the union placement, the
leadership transfer, the final placement, and the nodes R changes pick or drop."""

from __future__ import annotations

import pytest

from nsqpy.replication.coordinator import Member
from nsqpy.replication.placement import (
    NotInSync,
    PlacementError,
    check_new_nodes,
    final_record,
    grown,
    parse_nodes,
    shrunk,
    transfer_record,
    union_record,
)
from nsqpy.replication.records import NodeInfo, NotEnoughNodes, TopicRecord


def rec(placement: tuple[str, ...], isr: tuple[str, ...], leader: str = "a") -> TopicRecord:
    return TopicRecord("t", len(placement), placement, leader, 7, isr, 3)


def live(*ids: str) -> dict[str, Member]:
    return {n: Member(NodeInfo(n), 100 + i) for i, n in enumerate(ids)}


def test_node_lists_parse_in_order_and_bad_ones_are_refused() -> None:
    assert parse_nodes("3, 1,2") == ("3", "1", "2")
    for bad in ("", "1,,2", "1,1", "a/b", "1 2"):
        with pytest.raises(PlacementError) as e:
            parse_nodes(bad)
        assert e.value.code == "INVALID_NODES"


def test_the_union_appends_the_new_nodes_and_keeps_isr_leader_epoch() -> None:
    r = rec(("a", "b", "c"), ("a", "b", "c"))
    u = union_record(r, ("b", "d", "a"))
    assert u.placement == ("a", "b", "c", "d") and u.replicas == 4
    assert (u.isr, u.leader, u.epoch) == (r.isr, r.leader, r.epoch)
    assert union_record(r, ("a", "b")) is r


def test_new_nodes_must_be_live_but_old_dead_ones_may_stay() -> None:
    r = rec(("a", "b", "c"), ("a", "b"))
    check_new_nodes(r, ("a", "c", "d"), live("a", "b", "d"))  # c is dead but placed already
    with pytest.raises(PlacementError):
        check_new_nodes(r, ("a", "b", "e"), live("a", "b", "c"))


def test_a_leaving_leader_hands_over_to_an_in_sync_member_that_stays() -> None:
    r = rec(("a", "b", "c", "d"), ("a", "b", "c", "d"))
    t = transfer_record(r, ("c", "d", "b"), live("a", "b", "c", "d"))
    assert t.leader == "b" and t.epoch == 4 and t.leader_lease == 101
    assert "a" not in t.isr and t.isr[0] == "b"
    assert transfer_record(r, ("a", "d"), live("a")) is r  # the leader stays: no change
    with pytest.raises(NotInSync):  # the only staying member is not in sync
        transfer_record(rec(("a", "b", "d"), ("a", "b")), ("d",), live("a", "b", "d"))


def test_the_final_placement_keeps_the_isr_within_it_leader_first() -> None:
    r = rec(("a", "b", "c", "d"), ("b", "a", "d"), leader="b")
    f = final_record(r, ("d", "b", "c"))
    assert f.placement == ("d", "b", "c") and f.replicas == 3
    assert f.isr == ("b", "d") and f.leader == "b" and f.epoch == r.epoch
    with pytest.raises(NotInSync):
        final_record(r, ("a", "c"))


def test_raising_r_picks_the_least_loaded_other_live_nodes() -> None:
    r = rec(("a", "b"), ("a", "b"))
    assert grown(r, 3, live("a", "b", "c", "d"), {"c": 5, "d": 0}) == ("a", "b", "d")
    with pytest.raises(NotEnoughNodes):
        grown(r, 4, live("a", "b", "c"), {})


def test_lowering_r_drops_out_of_isr_followers_first_never_the_leader() -> None:
    r = rec(("a", "b", "c", "d"), ("c", "a", "d"), leader="c")
    assert shrunk(r, 3) == ("a", "c", "d")  # b is out of the ISR
    assert shrunk(r, 2) == ("a", "c")  # then the last in placement order
    assert shrunk(r, 1) == ("c",)
