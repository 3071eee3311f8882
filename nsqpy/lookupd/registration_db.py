"""nsqlookupd's registration database, pure: no sockets, no asyncio, no wall clock of its own.

Strategy: the same model as nsqlookupd/registration_db.go (a registration is a
(category, key, subkey) triple: ("client", "", ""), ("topic", T, ""), ("channel", T, C); each
maps peer id -> Producer), stored as a tree category -> key -> subkey -> producers so that exact
finds are O(1) and "*" finds only walk one category (or one topic's channels), plus an index
peer id -> registrations so a disconnect or /nodes never scans the whole map. Registrations
outlive their last producer, as in Go (only the #ephemeral rules of UNREGISTER drop them). Time
is a `now()` callable returning Unix nanoseconds, injected so tests control expiry and
tombstones. Lists come back in a fixed order where Go's map order is random: registrations
sorted, producers in the order they registered."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..internal.netaddr import dial_address

#: Go's time.Time{}.UnixNano() (an overflowed int64): what /debug shows for "tombstoned_at" of
#: a producer that was never tombstoned.
ZERO_TIME_UNIX_NANO = -6795364578871345152

EPHEMERAL_SUFFIX = "#ephemeral"

Clock = Callable[[], int]


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
    sent (Go's nsqd sends none); it is not part of the JSON Go's nsqlookupd answers.
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


class Producer:
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
    producers: Iterable[Producer], inactive_timeout_ns: int, tombstone_lifetime_ns: int, now: int
) -> list[Producer]:
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


class RegistrationDB:
    """nsqlookupd's RegistrationDB (registration_db.go) plus the rules of the V1 protocol's
    REGISTER/UNREGISTER/disconnect and of /topic/tombstone that act on it.

    ``now`` returns Unix nanoseconds (default time.time_ns).
    """

    def __init__(self, now: Clock = time.time_ns) -> None:
        self.now = now
        # category -> key -> subkey -> peer id -> Producer
        self._tree: dict[str, dict[str, dict[str, dict[str, Producer]]]] = {}
        # peer id -> the registrations it is a producer of
        self._by_peer: dict[str, set[Registration]] = {}

    # ------------------------------------------------------------ primitives (Go's methods)

    def _producers(self, k: Registration) -> dict[str, Producer] | None:
        keys = self._tree.get(k.category)
        if keys is None:
            return None
        subkeys = keys.get(k.key)
        if subkeys is None:
            return None
        return subkeys.get(k.subkey)

    def _ensure(self, k: Registration) -> dict[str, Producer]:
        subkeys = self._tree.setdefault(k.category, {}).setdefault(k.key, {})
        producers = subkeys.get(k.subkey)
        if producers is None:
            producers = subkeys[k.subkey] = {}
        return producers

    def __contains__(self, k: Registration) -> bool:
        return self._producers(k) is not None

    def add_registration(self, k: Registration) -> None:
        """Create ``k`` with no producers (a no-op when it exists)."""
        self._ensure(k)

    def add_producer(self, k: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` to ``k`` (creating it); False when the peer was already there (its
        Producer, and so its tombstone, is kept)."""
        producers = self._ensure(k)
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        self._by_peer.setdefault(peer.id, set()).add(k)
        return True

    def remove_producer(self, k: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove the peer from ``k``: (was it there, producers left). The registration stays,
        even empty (as in Go)."""
        producers = self._producers(k)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            regs = self._by_peer.get(peer_id)
            if regs is not None:
                regs.discard(k)
                if not regs:
                    del self._by_peer[peer_id]
        return removed, len(producers)

    def remove_registration(self, k: Registration) -> None:
        """Drop ``k`` and its producers."""
        keys = self._tree.get(k.category)
        if keys is None:
            return
        subkeys = keys.get(k.key)
        if subkeys is None:
            return
        producers = subkeys.pop(k.subkey, None)
        if not subkeys:
            del keys[k.key]
        if producers:
            for peer_id in producers:
                regs = self._by_peer.get(peer_id)
                if regs is not None:
                    regs.discard(k)
                    if not regs:
                        del self._by_peer[peer_id]

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """Registrations matching; "*" as key or subkey matches any. Sorted."""
        keys = self._tree.get(category)
        if keys is None:
            return []
        if key != "*" and subkey != "*":
            subkeys = keys.get(key)
            if subkeys is not None and subkey in subkeys:
                return [Registration(category, key, subkey)]
            return []
        out: list[Registration] = []
        for k in sorted(keys) if key == "*" else ([key] if key in keys else []):
            subkeys = keys[k]
            if subkey == "*":
                out.extend(Registration(category, k, s) for s in sorted(subkeys))
            elif subkey in subkeys:
                out.append(Registration(category, k, subkey))
        return out

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching registrations, each peer once (the first registration's
        Producer wins, registrations taken in sorted order)."""
        if key != "*" and subkey != "*":
            producers = self._producers(Registration(category, key, subkey))
            return list(producers.values()) if producers else []
        seen: dict[str, Producer] = {}
        for reg in self.find_registrations(category, key, subkey):
            for peer_id, p in self._producers(reg).items():  # type: ignore[union-attr]
                seen.setdefault(peer_id, p)
        return list(seen.values())

    def producer(self, k: Registration, peer_id: str) -> Producer | None:
        """The peer's Producer in ``k``, if any."""
        producers = self._producers(k)
        return producers.get(peer_id) if producers else None

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every registration the peer is a producer of, sorted."""
        return sorted(self._by_peer.get(peer_id, ()))

    def registrations(self) -> list[tuple[Registration, list[Producer]]]:
        """Every registration with its producers (sorted by key, producers by peer id)."""
        out = []
        for category in sorted(self._tree):
            keys = self._tree[category]
            for key in sorted(keys):
                subkeys = keys[key]
                for subkey in sorted(subkeys):
                    producers = subkeys[subkey]
                    out.append(
                        (
                            Registration(category, key, subkey),
                            [producers[i] for i in sorted(producers)],
                        )
                    )
        return out

    # ------------------------------------------------------------ the rules built on them

    def identify(self, peer: PeerInfo) -> bool:
        """IDENTIFY: stamp last_update and add the peer to ("client", "", "")."""
        peer.last_update = self.now()
        return self.add_producer(CLIENT, peer)

    def ping(self, peer: PeerInfo) -> int:
        """PING: refresh last_update; returns nanoseconds since the previous update."""
        now = self.now()
        since = now - peer.last_update
        peer.last_update = now
        return since

    def register(self, peer: PeerInfo, topic: str, channel: str = "") -> list[Registration]:
        """REGISTER topic [channel] (lookup_protocol_v1.go): the channel registration first, then
        the topic's. Returns the registrations the peer was newly added to."""
        added = []
        if channel:
            k = Registration("channel", topic, channel)
            if self.add_producer(k, peer):
                added.append(k)
        k = Registration("topic", topic, "")
        if self.add_producer(k, peer):
            added.append(k)
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
            gone, left = self.remove_producer(k, peer_id)
            if gone:
                removed.append(k)
            if left == 0 and channel.endswith(EPHEMERAL_SUFFIX):
                self.remove_registration(k)
            return removed, unexpected
        for reg in self.find_registrations("channel", topic, "*"):
            if self.remove_producer(reg, peer_id)[0]:
                unexpected.append(reg)
        k = Registration("topic", topic, "")
        gone, left = self.remove_producer(k, peer_id)
        if gone:
            removed.append(k)
        if left == 0 and topic.endswith(EPHEMERAL_SUFFIX):
            self.remove_registration(k)
        return removed, unexpected

    def remove_peer(self, peer_id: str) -> list[Registration]:
        """A producer's connection closed: it leaves every registration at once. Registrations
        themselves stay, #ephemeral ones included (nsqlookupd 1.3 does the same)."""
        regs = self.lookup_registrations(peer_id)
        for reg in regs:
            self.remove_producer(reg, peer_id)
        return regs

    def tombstone(self, topic: str, node: str) -> int:
        """/topic/tombstone: tombstone the topic's producers whose "broadcast_address:http_port"
        is ``node``; returns how many."""
        now = self.now()
        n = 0
        for p in self.find_producers("topic", topic, ""):
            if _is_node(p.peer_info, node):
                p.tombstone(now)
                n += 1
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
