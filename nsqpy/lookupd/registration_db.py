"""nsqlookupd's registration database, pure: no sockets, no asyncio, no wall clock of its own.

Strategy: the same model as nsqlookupd/registration_db.go (a registration is a
(category, key, subkey) triple: ("client", "", ""), ("topic", T, ""), ("channel", T, C); each
maps peer id -> Membership). Each registration is one entry, reached both from a flat map
(exact finds: one dict lookup) and from a tree category -> key -> subkey (so "*" finds walk one
category, or one topic's channels), plus an index peer id -> its registrations (in the order
they were made) so a disconnect or /nodes never scans the whole map. Registrations outlive
their last producer, as in Go (only the #ephemeral rules of UNREGISTER drop them). Time is a
`now()` callable returning Unix nanoseconds, injected so tests control expiry and tombstones.
Lists come back in a fixed order where Go's map order is random: registrations sorted,
producers in the order they registered.

Memory at cluster scale (200 nsqds x 1,500 registrations each) is one dict slot per
(registration, peer) in each direction: the Registration tuple (and its strings) is the
entry's one object, shared by every peer's index, and a peer's memberships share one
untombstoned Membership until a tombstone gives that membership its own.

/lookup's answer is cached per topic (``lookup``): an entry is dropped by every change that
can alter it (a producer or registration of the topic added or removed, a channel
registration of the topic, a tombstone; an identify, or a PING of a peer that was inactive,
for the peer's topics), and it carries its own expiry: the first instant at which one of its
producers goes inactive or a tombstone hiding one runs out. A peer's ``last_update`` must
change only through ``identify`` and ``ping`` for the cache to stay right."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Generic, NamedTuple, TypeVar

from ..internal.gojson import encode as go_json
from ..internal.netaddr import dial_address

#: Go's time.Time{}.UnixNano() (an overflowed int64): what /debug shows for "tombstoned_at" of
#: a producer that was never tombstoned.
ZERO_TIME_UNIX_NANO = -6795364578871345152

EPHEMERAL_SUFFIX = "#ephemeral"

Clock = Callable[[], int]
T = TypeVar("T")


class Registration(NamedTuple):
    """A registration key: ("client", "", ""), ("topic", topic, "") or ("channel", topic, ch)."""

    category: str
    key: str
    subkey: str

    def is_match(self, category: str, key: str, subkey: str) -> bool:
        """Go's Registration.IsMatch: equal category; key/subkey equal or the pattern is "*"."""
        return (
            category == self.category
            and (key == "*" or key == self.key)
            and (subkey == "*" or subkey == self.subkey)
        )


CLIENT = Registration("client", "", "")


class PeerInfo:
    """One identified nsqd connection (registration_db.go PeerInfo).

    ``id`` is the connection's remote address ("127.0.0.1:54321"); ports are ints; last_update
    is Unix nanoseconds of the IDENTIFY or last PING. ``node_id`` is the node id an nsqpy-d
    sent in its IDENTIFY (beyond nsqlookupd: it routes GET /message?id=), -1 when none was
    sent (Go's nsqd sends none); it is not part of the JSON Go's nsqlookupd answers. Equal
    only to itself. A plain class with slots (a slotted dataclass costs lookupd's start-up a
    millisecond of generated code).
    """

    __slots__ = (
        "id",
        "remote_address",
        "hostname",
        "broadcast_address",
        "tcp_port",
        "http_port",
        "version",
        "last_update",
        "node_id",
        "_json",
    )

    def __init__(
        self,
        id: str,
        remote_address: str = "",
        hostname: str = "",
        broadcast_address: str = "",
        tcp_port: int = 0,
        http_port: int = 0,
        version: str = "",
        last_update: int = 0,
        node_id: int = -1,
    ) -> None:
        self.id = id
        self.remote_address = remote_address
        self.hostname = hostname
        self.broadcast_address = broadcast_address
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.last_update = last_update
        self.node_id = node_id
        self._json: tuple[tuple[object, ...], bytes] | None = None

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in PeerInfo.__slots__[:-1])
        return f"PeerInfo({shown})"

    def to_json(self) -> dict[str, object]:
        """The peer as /lookup lists it, in Go's field order (1.3.0 has no topology fields)."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }

    def json_bytes(self) -> bytes:
        """``to_json()`` encoded as Go's encoding/json writes it (gojson.encode), kept until
        one of its fields changes (a peer's fields are set once, at IDENTIFY)."""
        fields = (
            self.remote_address,
            self.hostname,
            self.broadcast_address,
            self.tcp_port,
            self.http_port,
            self.version,
        )
        kept = self._json
        if kept is None or kept[0] != fields:
            kept = self._json = (fields, go_json(self.to_json()))
        return kept[1]


class Membership:
    """A peer's membership in one registration; the tombstone belongs to that membership
    (registration_db.go Producer). ``tombstoned_at`` is Unix nanoseconds."""

    __slots__ = ("peer_info", "tombstoned", "tombstoned_at")

    def __init__(self, peer_info: PeerInfo) -> None:
        self.peer_info = peer_info
        self.tombstoned = False
        self.tombstoned_at = ZERO_TIME_UNIX_NANO

    def tombstone(self, now: int) -> None:
        self.tombstoned = True
        self.tombstoned_at = now

    def is_tombstoned(self, lifetime_ns: int, now: int) -> bool:
        """Tombstoned less than ``lifetime_ns`` ago (so a lifetime of 0 never hides)."""
        return self.tombstoned and now - self.tombstoned_at < lifetime_ns

    def __repr__(self) -> str:
        p = self.peer_info
        return f"{p.broadcast_address} [{p.tcp_port}, {p.http_port}]"


def filter_by_active(
    producers: Iterable[Membership], inactive_timeout_ns: int, tombstone_lifetime_ns: int, now: int
) -> list[Membership]:
    """Go's Producers.FilterByActive: drop producers not heard from for more than
    ``inactive_timeout_ns`` and those tombstoned within ``tombstone_lifetime_ns``."""
    return [
        p
        for p in producers
        if now - p.peer_info.last_update <= inactive_timeout_ns
        and not p.is_tombstoned(tombstone_lifetime_ns, now)
    ]


def _is_node(peer: PeerInfo, node: str) -> bool:
    """Whether /topic/tombstone's ``node`` names ``peer``: its HTTP address as nsqadmin sends
    it (``host:port``, ``[v6]:port``), or as nsqlookupd compares it, fmt.Sprintf("%s:%d")
    (``::1:4151`` for an IPv6 broadcast address: Go's form, kept so every node Go matches still
    matches)."""
    host, port = peer.broadcast_address, peer.http_port
    if node == dial_address(host, port):
        return True
    head, sep, tail = node.rpartition(":")
    return bool(sep) and head == host and tail == str(port)


class _Entry:
    """One registration: its canonical key and its producers (peer id -> Membership)."""

    __slots__ = ("reg", "producers")

    def __init__(self, reg: Registration) -> None:
        self.reg = reg
        self.producers: dict[str, Membership] = {}


class _Peer:
    """One peer id's side: the Membership its untombstoned memberships share and its
    registrations in the order they were made (a dict used as an ordered set)."""

    __slots__ = ("producer", "regs")

    def __init__(self, producer: Membership) -> None:
        self.producer = producer
        self.regs: dict[Registration, None] = {}


class _Cached(Generic[T]):
    """A cached /lookup answer: valid while ``built <= now < until``."""

    __slots__ = ("value", "built", "until")

    def __init__(self, value: T, built: int, until: int) -> None:
        self.value = value
        self.built = built
        self.until = until


class RegistrationDB:
    """nsqlookupd's RegistrationDB (registration_db.go) plus the rules of the V1 protocol's
    REGISTER/UNREGISTER/disconnect and of /topic/tombstone that act on it.

    ``now`` returns Unix nanoseconds (default time.time_ns).
    """

    def __init__(self, now: Clock = time.time_ns) -> None:
        self.now = now
        # Registration -> its entry (a plain (category, key, subkey) tuple finds it too)
        self._flat: dict[tuple[str, str, str], _Entry] = {}
        # category -> key -> subkey -> the same entries
        self._tree: dict[str, dict[str, dict[str, _Entry]]] = {}
        # peer id -> its shared Membership and registrations
        self._by_peer: dict[str, _Peer] = {}
        # topic -> cached /lookup answer, all built with the same two durations
        self._lookups: dict[str, _Cached[object]] = {}
        self._lookup_params = (-1, -1)

    # ------------------------------------------------------------ primitives (Go's methods)

    def _entry(self, k: tuple[str, str, str]) -> _Entry:
        """``k``'s entry, created (empty) when missing."""
        e = self._flat.get(k)
        if e is None:
            reg = k if type(k) is Registration else Registration(*k)
            e = self._flat[reg] = _Entry(reg)
            self._tree.setdefault(reg.category, {}).setdefault(reg.key, {})[reg.subkey] = e
            self._changed(reg)
        return e

    def _changed(self, reg: Registration) -> None:
        """``reg`` or its producers changed: drop the /lookup answer it is part of."""
        if reg.category != "client" and self._lookups:
            self._lookups.pop(reg.key, None)

    def __contains__(self, k: Registration) -> bool:
        return k in self._flat

    def add_registration(self, k: Registration) -> None:
        """Create ``k`` with no producers (a no-op when it exists)."""
        self._entry(k)

    def add_producer(self, k: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` to ``k`` (creating it); False when the peer was already there (its
        Membership, and so its tombstone, is kept)."""
        return self._add(k, peer) is not None

    def _add(self, k: tuple[str, str, str], peer: PeerInfo) -> Registration | None:
        """add_producer: the registration (its one object) when the peer was added, else None.
        ``k`` may be a plain tuple."""
        e = self._flat.get(k)
        if e is None:
            e = self._entry(k)
        producers = e.producers
        pid = peer.id
        if pid in producers:
            return None
        side = self._by_peer.get(pid)
        if side is None:
            side = self._by_peer[pid] = _Peer(Membership(peer))
        shared = side.producer
        producers[pid] = shared if shared.peer_info is peer else Membership(peer)
        reg = e.reg
        side.regs[reg] = None
        if self._lookups and reg.category != "client":
            self._lookups.pop(reg.key, None)
        return reg

    def remove_producer(self, k: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove the peer from ``k``: (was it there, producers left). The registration stays,
        even empty (as in Go)."""
        e = self._flat.get(k)
        if e is None:
            return False, 0
        producers = e.producers
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self._forget(peer_id, e.reg)
            self._changed(e.reg)
        return removed, len(producers)

    def _forget(self, peer_id: str, reg: Registration) -> None:
        side = self._by_peer.get(peer_id)
        if side is not None:
            side.regs.pop(reg, None)
            if not side.regs:
                del self._by_peer[peer_id]

    def remove_registration(self, k: Registration) -> None:
        """Drop ``k`` and its producers."""
        e = self._flat.pop(k, None)
        if e is None:
            return
        reg = e.reg
        keys = self._tree[reg.category]
        subkeys = keys[reg.key]
        del subkeys[reg.subkey]
        if not subkeys:
            del keys[reg.key]
        for peer_id in e.producers:
            self._forget(peer_id, reg)
        self._changed(reg)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """Registrations matching; "*" as key or subkey matches any. Sorted."""
        if key != "*" and subkey != "*":
            e = self._flat.get((category, key, subkey))
            return [e.reg] if e is not None else []
        keys = self._tree.get(category)
        if keys is None:
            return []
        out: list[Registration] = []
        for k in sorted(keys) if key == "*" else ([key] if key in keys else []):
            subkeys = keys[k]
            if subkey == "*":
                out.extend(subkeys[s].reg for s in sorted(subkeys))
            elif subkey in subkeys:
                out.append(subkeys[subkey].reg)
        return out

    def find_producers(self, category: str, key: str, subkey: str) -> list[Membership]:
        """Producers of the matching registrations, each peer once (the first registration's
        Membership wins, registrations taken in sorted order)."""
        if key != "*" and subkey != "*":
            e = self._flat.get((category, key, subkey))
            return list(e.producers.values()) if e is not None else []
        seen: dict[str, Membership] = {}
        for reg in self.find_registrations(category, key, subkey):
            for peer_id, p in self._flat[reg].producers.items():
                seen.setdefault(peer_id, p)
        return list(seen.values())

    def producer(self, k: Registration, peer_id: str) -> Membership | None:
        """The peer's Membership in ``k``, if any."""
        e = self._flat.get(k)
        return e.producers.get(peer_id) if e is not None else None

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every registration the peer is a producer of, sorted."""
        side = self._by_peer.get(peer_id)
        return sorted(side.regs) if side is not None else []

    def registrations(self) -> list[tuple[Registration, list[Membership]]]:
        """Every registration with its producers (sorted by key, producers by peer id)."""
        out = []
        for category in sorted(self._tree):
            keys = self._tree[category]
            for key in sorted(keys):
                subkeys = keys[key]
                for subkey in sorted(subkeys):
                    e = subkeys[subkey]
                    producers = e.producers
                    out.append((e.reg, [producers[i] for i in sorted(producers)]))
        return out

    # ------------------------------------------------------------ the rules built on them

    def identify(self, peer: PeerInfo) -> bool:
        """IDENTIFY: stamp last_update and add the peer to ("client", "", "")."""
        peer.last_update = self.now()
        self._peer_topics_changed(peer.id)
        return self.add_producer(CLIENT, peer)

    def ping(self, peer: PeerInfo) -> int:
        """PING: refresh last_update; returns nanoseconds since the previous update."""
        now = self.now()
        since = now - peer.last_update
        peer.last_update = now
        if since > self._lookup_params[0]:
            # the peer may have been inactive, so missing from cached answers
            self._peer_topics_changed(peer.id)
        return since

    def _peer_topics_changed(self, peer_id: str) -> None:
        lookups = self._lookups
        side = self._by_peer.get(peer_id)
        if lookups and side is not None:
            for reg in side.regs:
                if reg.category == "topic":
                    lookups.pop(reg.key, None)

    @staticmethod
    def register_keys(topic: str, channel: str = "") -> tuple[Registration, ...]:
        """The registrations REGISTER topic [channel] adds its peer to, in order (see
        ``register``)."""
        t = Registration("topic", topic, "")
        return (Registration("channel", topic, channel), t) if channel else (t,)

    def register(self, peer: PeerInfo, topic: str, channel: str = "") -> list[Registration]:
        """REGISTER topic [channel] (lookup_protocol_v1.go): the channel registration first, then
        the topic's. Returns the registrations the peer was newly added to."""
        added = []
        if channel:
            reg = self._add(("channel", topic, channel), peer)
            if reg is not None:
                added.append(reg)
        reg = self._add(("topic", topic, ""), peer)
        if reg is not None:
            added.append(reg)
        return added

    def add_producer_all(
        self, peer: PeerInfo, keys: Iterable[tuple[str, str, str]]
    ) -> list[Registration]:
        """``add_producer(k, peer)`` for each of ``keys`` in turn (a run of REGISTERs: each
        one's ``register_keys``), in one call: the registrations the peer was newly added to,
        in that order."""
        flat = self._flat
        lookups = self._lookups
        pid = peer.id
        side = self._by_peer.get(pid)
        if side is None or side.producer.peer_info is not peer:
            # not identified here, or another PeerInfo under the same id: add_producer's way
            return [reg for k in keys if (reg := self._add(k, peer)) is not None]
        regs = side.regs
        shared = side.producer
        added = []
        for k in keys:
            e = flat.get(k)
            if e is None:
                e = self._entry(k)
            producers = e.producers
            if pid in producers:
                continue
            producers[pid] = shared
            reg = e.reg
            regs[reg] = None
            if lookups and reg.category != "client":
                lookups.pop(reg.key, None)
            added.append(reg)
        return added

    def unregister(
        self, peer_id: str, topic: str, channel: str = ""
    ) -> tuple[list[Registration], list[Registration]]:
        """UNREGISTER topic [channel] (lookup_protocol_v1.go).

        With a channel: leave that channel; an ``#ephemeral`` channel left with no producer is
        dropped. Without: leave every channel of the topic (Go warns about each: nsqd removes
        channels first), then the topic; an ``#ephemeral`` topic left with no producer is
        dropped (its channel registrations stay, as in Go).

        Returns (registrations left, unexpected channel registrations left).
        """
        removed: list[Registration] = []
        unexpected: list[Registration] = []
        if channel:
            k = Registration("channel", topic, channel)
            name = channel
        else:
            for reg in self.find_registrations("channel", topic, "*"):
                if self.remove_producer(reg, peer_id)[0]:
                    unexpected.append(reg)
            k = Registration("topic", topic, "")
            name = topic
        gone, left = self.remove_producer(k, peer_id)
        if gone:
            removed.append(k)
        if left == 0 and name.endswith(EPHEMERAL_SUFFIX):
            self.remove_registration(k)
        return removed, unexpected

    def remove_peer(self, peer_id: str) -> list[Registration]:
        """A producer's connection closed: it leaves every registration at once, which come
        back in the order they were made. Registrations themselves stay, #ephemeral ones
        included (nsqlookupd 1.3 does the same)."""
        side = self._by_peer.pop(peer_id, None)
        if side is None:
            return []
        regs = list(side.regs)
        flat = self._flat
        lookups = self._lookups
        for reg in regs:
            del flat[reg].producers[peer_id]
            if lookups and reg.category != "client":
                lookups.pop(reg.key, None)
        return regs

    def tombstone(self, topic: str, node: str) -> int:
        """/topic/tombstone: tombstone the topic's producers whose "broadcast_address:http_port"
        is ``node``; returns how many."""
        now = self.now()
        n = 0
        for reg in self.find_registrations("topic", topic, ""):
            producers = self._flat[reg].producers
            for peer_id, p in list(producers.items()):
                if _is_node(p.peer_info, node):
                    side = self._by_peer.get(peer_id)
                    if side is not None and p is side.producer:
                        # a shared Membership: this membership gets its own
                        p = producers[peer_id] = Membership(p.peer_info)
                    p.tombstone(now)
                    n += 1
            self._changed(reg)
        return n

    def delete_topic(self, topic: str) -> list[Registration]:
        """/topic/delete: drop the topic's channel registrations, then the topic's ("*"
        patterns apply, as in Go). Returns what was dropped."""
        regs = self.find_registrations("channel", topic, "*")
        regs += self.find_registrations("topic", topic, "")
        for reg in regs:
            self.remove_registration(reg)
        return regs

    # ------------------------------------------------------------ queries of the HTTP API

    def topics(self) -> list[str]:
        """Every topic registration's name, sorted."""
        return [r.key for r in self.find_registrations("topic", "*", "")]

    def channels(self, topic: str) -> list[str]:
        """The topic's channel registrations' names, sorted."""
        return [r.subkey for r in self.find_registrations("channel", topic, "*")]

    def active_producers(
        self, topic: str, inactive_timeout_ns: int, tombstone_lifetime_ns: int
    ) -> list[PeerInfo]:
        """/lookup's producers: the topic's, neither inactive nor freshly tombstoned."""
        producers = self.find_producers("topic", topic, "")
        active = filter_by_active(producers, inactive_timeout_ns, tombstone_lifetime_ns, self.now())
        return [p.peer_info for p in active]

    def lookup(
        self,
        topic: str,
        inactive_timeout_ns: int,
        tombstone_lifetime_ns: int,
        build: Callable[[list[str], list[PeerInfo]], T],
    ) -> T | None:
        """/lookup?topic=: None when the topic has no registration, else ``build(channels,
        active producers)`` (as ``channels`` and ``active_producers`` give them), cached until
        something changes it (see the module docstring). A cached value is returned as is, so
        it must not be changed by the caller. "*" (every topic, as in Go) is never cached."""
        now = self.now()
        params = (inactive_timeout_ns, tombstone_lifetime_ns)
        if params != self._lookup_params:
            self._lookups.clear()
            self._lookup_params = params
        hit = self._lookups.get(topic)
        if hit is not None and hit.built <= now < hit.until:
            return hit.value  # type: ignore[return-value]
        if topic == "*":
            if not self.find_registrations("topic", topic, ""):
                return None
            peers = self.active_producers(topic, inactive_timeout_ns, tombstone_lifetime_ns)
            return build(self.channels(topic), peers)
        e = self._flat.get(("topic", topic, ""))
        if e is None:
            return None
        until = now + inactive_timeout_ns + 1
        peers = []
        for p in e.producers.values():
            peer = p.peer_info
            if now - peer.last_update > inactive_timeout_ns:
                continue  # back only by a PING, which drops the cached answer
            if p.is_tombstoned(tombstone_lifetime_ns, now):
                until = min(until, p.tombstoned_at + tombstone_lifetime_ns)
                continue
            until = min(until, peer.last_update + inactive_timeout_ns + 1)
            peers.append(peer)
        value = build(self.channels(topic), peers)
        self._lookups[topic] = _Cached(value, now, until)
        return value

    def peers_with_node_id(self, node_id: int, inactive_timeout_ns: int) -> list[PeerInfo]:
        """The active identified peers that sent ``node_id`` (more than one distinct node is
        a configuration error: node ids must be unique in a cluster)."""
        clients = self.find_producers("client", "", "")
        active = filter_by_active(clients, inactive_timeout_ns, 0, self.now())
        return [p.peer_info for p in active if p.peer_info.node_id == node_id]

    def nodes(
        self, inactive_timeout_ns: int, tombstone_lifetime_ns: int
    ) -> list[tuple[PeerInfo, list[str], list[bool]]]:
        """/nodes: each active identified peer (tombstones do not hide it) with its topics
        (sorted) and, per topic, whether its producer there is tombstoned."""
        now = self.now()
        clients = self.find_producers("client", "", "")
        out = []
        for p in filter_by_active(clients, inactive_timeout_ns, 0, now):
            peer = p.peer_info
            topics = [r.key for r in self.lookup_registrations(peer.id) if r.category == "topic"]
            tombstones = []
            for t in topics:
                tp = self.producer(Registration("topic", t, ""), peer.id)
                tombstones.append(
                    tp is not None
                    and tp.peer_info is peer
                    and tp.is_tombstoned(tombstone_lifetime_ns, now)
                )
            out.append((peer, topics, tombstones))
        return out
