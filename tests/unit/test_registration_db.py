"""nsqpy.lookupd.registration_db: the pure registration DB, with an injected clock."""

from __future__ import annotations

from nsqpy.lookupd.registration_db import (
    CLIENT,
    ZERO_TIME_UNIX_NANO,
    PeerInfo,
    Registration,
    RegistrationDB,
    filter_by_active,
)

S = 1_000_000_000  # one second in ns


class Clock:
    def __init__(self, t: int = 1_700_000_000 * S) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += int(seconds * S)


def make(clock: Clock | None = None) -> tuple[RegistrationDB, Clock]:
    clock = clock or Clock()
    return RegistrationDB(now=clock), clock


def peer(n: int, db: RegistrationDB | None = None) -> PeerInfo:
    p = PeerInfo(
        id=f"127.0.0.1:{50000 + n}",
        remote_address=f"127.0.0.1:{50000 + n}",
        hostname=f"host{n}",
        broadcast_address=f"b{n}",
        tcp_port=4150 + 10 * n,
        http_port=4151 + 10 * n,
        version="1.3.0",
    )
    if db is not None:
        assert db.identify(p)
    return p


def test_add_and_remove_producer_keeps_registration() -> None:
    db, _ = make()
    p = peer(1, db)
    k = Registration("topic", "t", "")
    assert db.add_producer(k, p)
    assert not db.add_producer(k, p)  # already there
    assert db.find_producers("topic", "t", "")[0].peer_info is p
    assert db.remove_producer(k, p.id) == (True, 0)
    assert db.remove_producer(k, p.id) == (False, 0)
    assert k in db  # empty registrations stay, as in Go
    assert db.topics() == ["t"]
    assert db.remove_producer(Registration("topic", "nope", ""), p.id) == (False, 0)


def test_wildcard_finds_sorted_and_deduplicated() -> None:
    db, _ = make()
    p1, p2 = peer(1, db), peer(2, db)
    db.register(p1, "b", "c2")
    db.register(p1, "b", "c1")
    db.register(p2, "a", "c1")
    db.register(p2, "b")
    assert db.find_registrations("topic", "*", "") == [
        Registration("topic", "a", ""),
        Registration("topic", "b", ""),
    ]
    assert db.find_registrations("channel", "b", "*") == [
        Registration("channel", "b", "c1"),
        Registration("channel", "b", "c2"),
    ]
    assert db.find_registrations("channel", "*", "c1") == [
        Registration("channel", "a", "c1"),
        Registration("channel", "b", "c1"),
    ]
    assert db.find_registrations("channel", "*", "*") == [
        Registration("channel", "a", "c1"),
        Registration("channel", "b", "c1"),
        Registration("channel", "b", "c2"),
    ]
    assert db.find_registrations("channel", "b", "c3") == []
    assert db.find_registrations("nope", "*", "*") == []
    # every producer once, in registration order
    assert [p.peer_info for p in db.find_producers("topic", "*", "")] == [p2, p1]
    assert [p.peer_info for p in db.find_producers("topic", "b", "")] == [p1, p2]
    assert db.find_producers("topic", "zz", "") == []
    assert db.channels("b") == ["c1", "c2"]
    assert db.topics() == ["a", "b"]


def test_lookup_registrations_and_remove_peer() -> None:
    db, _ = make()
    p1, p2 = peer(1, db), peer(2, db)
    db.register(p1, "t", "c")
    db.register(p2, "t", "c")
    db.register(p1, "e#ephemeral", "x#ephemeral")
    assert db.lookup_registrations(p1.id) == sorted(
        [
            CLIENT,
            Registration("topic", "t", ""),
            Registration("channel", "t", "c"),
            Registration("topic", "e#ephemeral", ""),
            Registration("channel", "e#ephemeral", "x#ephemeral"),
        ]
    )
    removed = db.remove_peer(p1.id)
    assert len(removed) == 5
    assert db.lookup_registrations(p1.id) == []
    assert [p.peer_info for p in db.find_producers("topic", "t", "")] == [p2]
    # a disconnect leaves the registrations (even #ephemeral ones), as nsqlookupd 1.3 does
    assert db.topics() == ["e#ephemeral", "t"]
    assert db.channels("e#ephemeral") == ["x#ephemeral"]
    assert db.remove_peer(p1.id) == []


def test_unregister_channel_ephemeral_rule() -> None:
    db, _ = make()
    p1, p2 = peer(1, db), peer(2, db)
    db.register(p1, "t", "c#ephemeral")
    db.register(p2, "t", "c#ephemeral")
    db.register(p1, "t", "plain")
    assert db.unregister(p1.id, "t", "c#ephemeral") == (
        [Registration("channel", "t", "c#ephemeral")],
        [],
    )
    assert db.channels("t") == ["c#ephemeral", "plain"]  # p2 still has it
    db.unregister(p2.id, "t", "c#ephemeral")
    assert db.channels("t") == ["plain"]  # last producer gone: dropped
    db.unregister(p1.id, "t", "plain")
    assert db.channels("t") == ["plain"]  # not ephemeral: stays, empty
    # unregistering what was never registered is fine, and drops an empty ephemeral one
    db.add_registration(Registration("channel", "t", "z#ephemeral"))
    assert db.unregister(p1.id, "t", "z#ephemeral") == ([], [])
    assert db.channels("t") == ["plain"]


def test_unregister_topic_removes_channels_and_ephemeral_topic() -> None:
    db, _ = make()
    p1 = peer(1, db)
    db.register(p1, "t#ephemeral", "c1")
    db.register(p1, "t#ephemeral", "c2#ephemeral")
    removed, unexpected = db.unregister(p1.id, "t#ephemeral")
    assert removed == [Registration("topic", "t#ephemeral", "")]
    assert unexpected == [
        Registration("channel", "t#ephemeral", "c1"),
        Registration("channel", "t#ephemeral", "c2#ephemeral"),
    ]
    assert db.topics() == []  # ephemeral topic with no producer left: dropped
    # its channel registrations stay (with no producers), as in Go
    assert db.channels("t#ephemeral") == ["c1", "c2#ephemeral"]
    assert db.find_producers("channel", "t#ephemeral", "*") == []

    p2 = peer(2, db)
    db.register(p1, "keep")
    db.register(p2, "keep")
    db.unregister(p1.id, "keep")
    assert db.topics() == ["keep"]
    db.unregister(p2.id, "keep")
    assert db.topics() == ["keep"]  # not ephemeral: stays


def test_inactive_producers_expire_by_the_injected_clock() -> None:
    db, clock = make()
    p1, p2 = peer(1, db), peer(2, db)
    db.register(p1, "t")
    db.register(p2, "t")
    timeout = 10 * S
    assert db.active_producers("t", timeout, 0) == [p1, p2]
    clock.advance(6)
    assert db.ping(p2) == 6 * S
    clock.advance(4)  # p1 exactly at the timeout: still active (Go: > timeout drops)
    assert db.active_producers("t", timeout, 0) == [p1, p2]
    clock.advance(0.001)
    assert db.active_producers("t", timeout, 0) == [p2]
    assert [n[0] for n in db.nodes(timeout, 0)] == [p2]
    clock.advance(10)
    assert db.active_producers("t", timeout, 0) == []
    assert db.nodes(timeout, 0) == []
    assert db.topics() == ["t"]  # expiry hides, never removes


def test_tombstone_hides_for_its_lifetime() -> None:
    db, clock = make()
    p1, p2 = peer(1, db), peer(2, db)
    db.register(p1, "t")
    db.register(p1, "u")
    db.register(p2, "t")
    life = 45 * S
    inactive = 300 * S
    assert db.tombstone("t", "b1:4161") == 1  # broadcast_address:http_port
    assert db.tombstone("t", "b1:4150") == 0
    assert db.active_producers("t", inactive, life) == [p2]
    assert db.active_producers("u", inactive, life) == [p1]  # per topic
    # /nodes keeps tombstoned producers and flags them per topic
    nodes = {peer.id: (topics, tombs) for peer, topics, tombs in db.nodes(inactive, life)}
    assert nodes[p1.id] == (["t", "u"], [True, False])
    assert nodes[p2.id] == (["t"], [False])
    # re-registering during the lifetime keeps the tombstone
    db.register(p1, "t")
    clock.advance(44)
    db.ping(p1)
    assert db.active_producers("t", inactive, life) == [p2]
    clock.advance(1)
    assert db.active_producers("t", inactive, life) == [p1, p2]
    assert db.nodes(inactive, life)[0][2] == [False, False]
    prod = db.producer(Registration("topic", "t", ""), p1.id)
    assert prod is not None and prod.tombstoned and prod.tombstoned_at == clock.t - 45 * S
    # leaving and coming back clears the tombstone at once
    db.tombstone("t", "b1:4161")
    db.unregister(p1.id, "t")
    db.register(p1, "t")
    assert db.active_producers("t", inactive, life) == [p2, p1]


def test_filter_by_active_lifetime_zero_never_hides() -> None:
    db, clock = make()
    p1 = peer(1, db)
    db.register(p1, "t")
    db.tombstone("t", "b1:4161")
    prods = db.find_producers("topic", "t", "")
    assert filter_by_active(prods, 10 * S, 0, clock()) == prods
    assert filter_by_active(prods, 10 * S, 1, clock()) == []


def test_delete_topic_and_wildcard_delete() -> None:
    db, _ = make()
    p1 = peer(1, db)
    db.register(p1, "a", "c")
    db.register(p1, "b", "c")
    gone = db.delete_topic("a")
    assert gone == [Registration("channel", "a", "c"), Registration("topic", "a", "")]
    assert db.topics() == ["b"]
    assert Registration("topic", "a", "") not in db.lookup_registrations(p1.id)
    db.delete_topic("*")  # "*" matches every topic, as Go's FindRegistrations does
    assert db.topics() == []
    assert db.lookup_registrations(p1.id) == [CLIENT]


def test_registrations_listing_and_zero_tombstone_time() -> None:
    db, _ = make()
    p2, p1 = peer(2, db), peer(1, db)
    db.register(p1, "t")
    db.register(p2, "t")
    listing = dict(db.registrations())
    assert list(listing) == [CLIENT, Registration("topic", "t", "")]
    assert [p.peer_info for p in listing[Registration("topic", "t", "")]] == [p1, p2]
    assert listing[CLIENT][0].tombstoned_at == ZERO_TIME_UNIX_NANO
    assert repr(listing[CLIENT][0]) == "b1 [4160, 4161]"


def test_many_peers_lookup_is_indexed() -> None:
    db, _ = make()
    peers = [peer(i, db) for i in range(2000)]
    for i, p in enumerate(peers):
        db.register(p, f"t{i % 50}", f"c{i % 7}")
    assert len(db.topics()) == 50
    assert len(db.active_producers("t3", 300 * S, 45 * S)) == 40
    for p in peers[:1000]:
        db.remove_peer(p.id)
    assert len(db.active_producers("t3", 300 * S, 45 * S)) == 20


def _state(db: RegistrationDB) -> list[tuple[Registration, list[tuple[str, bool, int]]]]:
    return [
        (reg, [(p.peer_info.id, p.tombstoned, p.tombstoned_at) for p in ps])
        for reg, ps in db.registrations()
    ]


def test_add_producer_all_is_add_producer_in_turn() -> None:
    """A run of REGISTERs in one call: the same registrations, memberships (a tombstoned one
    kept), /lookup cache drops and answer as one add_producer per key."""
    keys = [
        *RegistrationDB.register_keys("t", "c"),
        *RegistrationDB.register_keys("t"),
        *RegistrationDB.register_keys("u", "d"),
        *RegistrationDB.register_keys("t", "c"),
    ]
    assert keys[:2] == [Registration("channel", "t", "c"), Registration("topic", "t", "")]
    dbs = []
    for bulk in (False, True):
        db, clock = make()
        p, q = peer(1, db), peer(2, db)
        db.add_producer(Registration("topic", "u", ""), p)
        assert db.tombstone("u", "b1:4161") == 1
        db.lookup("t", 300 * S, 45 * S, lambda ch, ps: (ch, [x.id for x in ps]))
        if bulk:
            added = db.add_producer_all(p, keys)
            added += db.add_producer_all(q, keys[:2])
        else:
            added = [k for k in keys if db.add_producer(k, p)]
            added += [k for k in keys[:2] if db.add_producer(k, q)]
        assert added == [*keys[:2], Registration("channel", "u", "d"), *keys[:2]]
        assert db.lookup("t", 300 * S, 45 * S, lambda ch, ps: (ch, [x.id for x in ps])) == (
            ["c"],
            [p.id, q.id],
        )
        assert db.lookup_registrations(p.id) == sorted({CLIENT, *keys})
        dbs.append(_state(db))
    assert dbs[0] == dbs[1]
    assert (Registration("topic", "u", ""), [("127.0.0.1:50001", True, 1_700_000_000 * S)]) in (
        dbs[1]
    )


def test_add_producer_all_before_identify() -> None:
    db, _ = make()
    p = peer(1)  # not identified: add_producer's way, which indexes the peer too
    assert db.add_producer_all(p, RegistrationDB.register_keys("t")) == [
        Registration("topic", "t", "")
    ]
    assert db.remove_peer(p.id) == [Registration("topic", "t", "")]
