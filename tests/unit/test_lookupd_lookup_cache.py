"""RegistrationDB.lookup's cache: every change that can alter a /lookup answer drops it.

Each case primes the cache for every topic, makes one change, and compares the cached answer
with one computed from scratch (channels() and active_producers(), which never cache) for every
topic; a random sequence of all the changes does the same after each step. The answer encoded
by parts (http_api.lookup_answer) is byte for byte json_answer's."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from nsqpy.internal.gojson import encode
from nsqpy.lookupd.http_api import lookup_answer
from nsqpy.lookupd.registration_db import PeerInfo, Registration, RegistrationDB

S = 1_000_000_000
INACTIVE = 300 * S
LIFETIME = 45 * S
TOPICS = ["a", "b", "e#ephemeral", "new"]


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000 * S

    def __call__(self) -> int:
        return self.t


def _peer(n: int) -> PeerInfo:
    return PeerInfo(
        id=f"127.0.0.1:{50000 + n}",
        remote_address=f"127.0.0.1:{50000 + n}",
        hostname=f"h{n}",
        broadcast_address=f"b{n}",
        tcp_port=4150 + 10 * n,
        http_port=4151 + 10 * n,
        version="1.3.0",
    )


def _build(channels: list[str], peers: list[PeerInfo]) -> tuple[list[str], list[str]]:
    return list(channels), [p.id for p in peers]


def cached(db: RegistrationDB, topic: str) -> tuple[list[str], list[str]] | None:
    return db.lookup(topic, INACTIVE, LIFETIME, _build)


def fresh(db: RegistrationDB, topic: str) -> tuple[list[str], list[str]] | None:
    if not db.find_registrations("topic", topic, ""):
        return None
    peers = db.active_producers(topic, INACTIVE, LIFETIME)
    return db.channels(topic), [p.id for p in peers]


def setup() -> tuple[RegistrationDB, Clock, list[PeerInfo]]:
    clock = Clock()
    db = RegistrationDB(now=clock)
    peers = [_peer(i) for i in range(3)]
    for p in peers:
        db.identify(p)
    db.register(peers[0], "a", "c1")
    db.register(peers[1], "a", "c2")
    db.register(peers[1], "b")
    db.register(peers[2], "e#ephemeral", "x")
    db.register(peers[2], "b", "c1")
    return db, clock, peers


def check_all(db: RegistrationDB) -> None:
    for t in TOPICS:
        assert cached(db, t) == fresh(db, t), t


def _expire_tombstone(db: RegistrationDB, clock: Clock, peers: list[PeerInfo]) -> None:
    db.tombstone("a", "b0:4151")
    check_all(db)
    clock.t += LIFETIME  # the tombstone runs out: the producer is back


def _go_inactive(db: RegistrationDB, clock: Clock, peers: list[PeerInfo]) -> None:
    clock.t += 100 * S
    db.ping(peers[1])
    db.add_registration(Registration("channel", "a", "c3"))
    db.add_registration(Registration("channel", "b", "c3"))
    check_all(db)  # answers built 100 s after the last PING of peers 0 and 2
    clock.t += 200 * S + 1  # peers 0 and 2 pass the timeout, peer 1 stays


def _come_back(db: RegistrationDB, clock: Clock, peers: list[PeerInfo]) -> None:
    clock.t += INACTIVE + 1
    check_all(db)  # every producer hidden, and that answer cached
    db.ping(peers[0])  # back: its topics' answers change


def _reidentify(db: RegistrationDB, clock: Clock, peers: list[PeerInfo]) -> None:
    clock.t += INACTIVE + 1
    check_all(db)
    db.identify(peers[2])


#: name -> a change (after the cache is primed)
CHANGES: dict[str, Callable[[RegistrationDB, Clock, list[PeerInfo]], object]] = {
    "register producer": lambda db, c, p: db.register(p[0], "b"),
    "register channel": lambda db, c, p: db.register(p[1], "a", "c9"),
    "register new topic": lambda db, c, p: db.register(p[0], "new"),
    "unregister channel": lambda db, c, p: db.unregister(p[0].id, "a", "c1"),
    "unregister topic": lambda db, c, p: db.unregister(p[1].id, "a"),
    "unregister ephemeral topic": lambda db, c, p: db.unregister(p[2].id, "e#ephemeral"),
    "remove peer": lambda db, c, p: db.remove_peer(p[1].id),
    "tombstone": lambda db, c, p: db.tombstone("b", "b1:4161"),
    "tombstone expiry": _expire_tombstone,
    "inactive expiry": _go_inactive,
    "ping of an inactive peer": _come_back,
    "identify again": _reidentify,
    "add channel registration": lambda db, c, p: db.add_registration(
        Registration("channel", "b", "c7")
    ),
    "add topic registration": lambda db, c, p: db.add_registration(
        Registration("topic", "new", "")
    ),
    "add producer": lambda db, c, p: db.add_producer(Registration("topic", "a", ""), p[2]),
    "remove producer": lambda db, c, p: db.remove_producer(Registration("topic", "a", ""), p[0].id),
    "remove channel registration": lambda db, c, p: db.remove_registration(
        Registration("channel", "a", "c2")
    ),
    "remove topic registration": lambda db, c, p: db.remove_registration(
        Registration("topic", "b", "")
    ),
    "delete topic": lambda db, c, p: db.delete_topic("a"),
    "delete every topic": lambda db, c, p: db.delete_topic("*"),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_lookup_cache_dropped_by_change(name: str) -> None:
    db, clock, peers = setup()
    check_all(db)  # primes the cache
    CHANGES[name](db, clock, peers)
    check_all(db)


def test_lookup_cache_is_used_until_a_change() -> None:
    db, clock, peers = setup()
    first = cached(db, "a")
    clock.t += 10 * S
    db.ping(peers[0])  # an active peer's PING changes no answer
    db.register(peers[0], "b")  # another topic's change
    assert cached(db, "a") is first
    db.register(peers[2], "a")
    assert cached(db, "a") is not first
    assert cached(db, "zz") is None
    db.add_registration(Registration("topic", "zz", ""))
    assert cached(db, "zz") == ([], [])
    # other durations: answers built again
    again = cached(db, "b")
    assert db.lookup("b", INACTIVE, 0, _build) is not again


def test_lookup_wildcard_topic_is_answered_not_cached() -> None:
    db, _, peers = setup()
    assert cached(db, "*") == fresh(db, "*")
    db.remove_peer(peers[0].id)
    assert cached(db, "*") == fresh(db, "*")


def test_lookup_cache_random_changes() -> None:
    rng = random.Random(20)
    clock = Clock()
    db = RegistrationDB(now=clock)
    peers = [_peer(i) for i in range(5)]
    for p in peers:
        db.identify(p)
    channels = ["c1", "c2", "x#ephemeral"]
    for _ in range(3000):
        op = rng.randrange(10)
        p = rng.choice(peers)
        t = rng.choice(TOPICS)
        if op <= 2:
            db.register(p, t, rng.choice(["", *channels]))
        elif op == 3:
            db.unregister(p.id, t, rng.choice(["", *channels]))
        elif op == 4:
            if rng.random() < 0.2:
                db.remove_peer(p.id)
                db.identify(p)
            else:
                db.tombstone(t, f"{p.broadcast_address}:{p.http_port}")
        elif op == 5:
            clock.t += rng.choice([1, S, 30 * S, LIFETIME, 200 * S, INACTIVE + 1])
        elif op == 6:
            db.ping(p)
        elif op == 7:
            if rng.random() < 0.1:
                db.delete_topic(t)
            else:
                db.add_registration(Registration("channel", t, rng.choice(channels)))
        elif op == 8:
            db.remove_registration(Registration("channel", t, rng.choice(channels)))
        check_all(db)


def test_lookup_answer_bytes_are_json_answers() -> None:
    peers = [_peer(1), _peer(2)]
    peers[1].hostname = "<&>\u2028 é"
    for channels, prods in (([], []), (["c1", "c<2>"], peers), (["x"], peers[:1])):
        answer = lookup_answer(channels, prods)
        assert answer.status == 200
        assert answer.body == encode(
            {"channels": channels, "producers": [p.to_json() for p in prods]}
        )
        assert answer.headers == {
            "X-Nsq-Content-Type": "nsq; version=1.0",
            "Content-Type": "application/json; charset=utf-8",
        }
    peers[0].http_port = 1  # a changed field is encoded again
    assert lookup_answer([], peers).body == encode(
        {"channels": [], "producers": [p.to_json() for p in peers]}
    )
