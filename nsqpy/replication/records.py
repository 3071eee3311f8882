"""The pure half of the coordination layer: etcd key layout, the JSON records, placement and
leader choice, and the transaction compares/operations as etcd's v3 JSON gateway spells them.

No I/O and no clock here: everything takes its inputs and returns values, so that it is tested
in process (tests/unit/test_replication_records.py). The I/O half is etcd_gateway.py (HTTP to
etcd), session.py (this node's lease) and coordinator.py (topic records).

Keys are bytes under one root, ``/nsqpy/<cluster>/`` by default:

- ``<root>nodes/<node_id>``: a :class:`NodeInfo` as JSON, written under the node's lease;
- ``<root>topics/<topic>``: a :class:`TopicRecord` as JSON.

Values are compact UTF-8 JSON objects with sorted keys and a ``"v": 1`` layout version; a
decoder refuses a version it does not know (:class:`RecordError`) rather than guess.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

#: The record layout version written in every value ("v"), refused when unknown.
LAYOUT_VERSION = 1


class ReplicationError(Exception):
    """Base of every error the replication layer raises."""


class RecordError(ReplicationError):
    """A value in etcd is not a record of a layout this code reads (bad JSON, unknown "v",
    missing or mistyped fields)."""


class NotEnoughNodes(ReplicationError):
    """Fewer live nodes than the replication factor asks for: ``needed``, ``live``."""

    def __init__(self, needed: int, live: int) -> None:
        super().__init__(f"replication factor {needed} needs {needed} live nodes, {live} live")
        self.needed = needed
        self.live = live


def default_root(cluster: str = "default") -> bytes:
    """``/nsqpy/<cluster>/`` as bytes: the prefix every key of one cluster lives under."""
    if not cluster or "/" in cluster:
        raise ValueError(f"cluster name must be non-empty without '/': {cluster!r}")
    return f"/nsqpy/{cluster}/".encode()


@dataclass(frozen=True, slots=True)
class Keys:
    """The key layout under ``root`` (bytes ending in ``/``)."""

    root: bytes

    def __post_init__(self) -> None:
        if not self.root.endswith(b"/"):
            raise ValueError(f"root must end with '/': {self.root!r}")

    @property
    def nodes(self) -> bytes:
        """Prefix of every node key."""
        return self.root + b"nodes/"

    @property
    def topics(self) -> bytes:
        """Prefix of every topic record key."""
        return self.root + b"topics/"

    def node(self, node_id: str) -> bytes:
        return self.nodes + node_id.encode()

    def topic(self, topic: str) -> bytes:
        return self.topics + topic.encode()

    def node_id_of(self, key: bytes) -> str:
        """The node id in a node key (ValueError when ``key`` is not one)."""
        return _suffix(key, self.nodes)

    def topic_of(self, key: bytes) -> str:
        """The topic name in a topic key (ValueError when ``key`` is not one)."""
        return _suffix(key, self.topics)


def _suffix(key: bytes, prefix: bytes) -> str:
    if not key.startswith(prefix) or len(key) == len(prefix):
        raise ValueError(f"{key!r} is not under {prefix!r}")
    return key[len(prefix) :].decode()


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for "every key starting with ``prefix``": the prefix with its last
    byte below 0xff incremented and the rest dropped (b"\\0" when it is all 0xff)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return b"\0"


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _loads(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{what}: not JSON: {raw[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise RecordError(f"{what}: not a JSON object")
    if obj.get("v") != LAYOUT_VERSION:
        raise RecordError(f"{what}: unknown layout version {obj.get('v')!r}")
    return obj


def _field(obj: Mapping[str, Any], name: str, kind: type, what: str) -> Any:
    val = obj.get(name)
    if not isinstance(val, kind) or (kind is int and isinstance(val, bool)):
        raise RecordError(f"{what}: field {name!r} missing or not {kind.__name__}")
    return val


def _str_list(obj: Mapping[str, Any], name: str, what: str) -> tuple[str, ...]:
    val = _field(obj, name, list, what)
    if not all(isinstance(x, str) for x in val):
        raise RecordError(f"{what}: field {name!r} must be a list of strings")
    return tuple(val)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A live node as its key's value says: ``node_id``, where its TCP/HTTP listeners are
    (``"host:port"`` strings, "" when none), and free-form string ``tags``.

    JSON: ``{"v":1,"node_id":"n1","tcp":"127.0.0.1:4150","http":"127.0.0.1:4151",
    "tags":{}}``."""

    node_id: str
    tcp: str = ""
    http: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dumps(
            {
                "v": LAYOUT_VERSION,
                "node_id": self.node_id,
                "tcp": self.tcp,
                "http": self.http,
                "tags": dict(self.tags),
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> NodeInfo:
        """Raises RecordError on a value that is not a layout-1 node record."""
        what = "node record"
        obj = _loads(raw, what)
        tags = obj.get("tags", {})
        if not isinstance(tags, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
        ):
            raise RecordError(f"{what}: tags must map strings to strings")
        return cls(
            node_id=_field(obj, "node_id", str, what),
            tcp=_field(obj, "tcp", str, what),
            http=_field(obj, "http", str, what),
            tags=tags,
        )


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One replicated topic's coordination state (docs/architecture-replication.md):

    - ``replicas``: the replication factor R (>= 1);
    - ``placement``: the R node ids holding the topic, in preference order;
    - ``leader``: the node id accepting its publishes ("" while none is eligible);
    - ``leader_lease``: the etcd lease id the leader held when it became leader; the leader is
      deposed once its node key no longer carries that lease (it lapsed, or it rejoined);
    - ``isr``: the in-sync replicas, leader first, a subset of ``placement``;
    - ``epoch``: bumped at every leader change (never by an ISR change); a node acts as leader
      only for the epoch it was elected in, and every write it makes compares it.

    JSON: ``{"v":1,"topic":"t","replicas":3,"placement":["a","b","c"],"leader":"a",
    "leader_lease":"7587…","isr":["a","b","c"],"epoch":1}`` (the lease id as a decimal string,
    as etcd's gateway prints int64s).
    """

    topic: str
    replicas: int
    placement: tuple[str, ...]
    leader: str
    leader_lease: int
    isr: tuple[str, ...]
    epoch: int

    def __post_init__(self) -> None:
        if self.replicas < 1 or len(self.placement) != self.replicas:
            raise RecordError(f"placement {self.placement} does not hold R={self.replicas}")
        if len(set(self.placement)) != len(self.placement):
            raise RecordError(f"placement {self.placement} repeats a node")
        if not set(self.isr) <= set(self.placement):
            raise RecordError(f"isr {self.isr} not within placement {self.placement}")
        if self.leader and (not self.isr or self.isr[0] != self.leader):
            raise RecordError(f"leader {self.leader!r} must head the isr {self.isr}")
        if self.epoch < 0:
            raise RecordError(f"epoch {self.epoch} is negative")

    def encode(self) -> bytes:
        return _dumps(
            {
                "v": LAYOUT_VERSION,
                "topic": self.topic,
                "replicas": self.replicas,
                "placement": list(self.placement),
                "leader": self.leader,
                "leader_lease": str(self.leader_lease),
                "isr": list(self.isr),
                "epoch": self.epoch,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> TopicRecord:
        """Raises RecordError on a value that is not a valid layout-1 topic record."""
        what = "topic record"
        obj = _loads(raw, what)
        lease = _field(obj, "leader_lease", str, what)
        if not lease.isdigit():
            raise RecordError(f"{what}: leader_lease {lease!r} is not a decimal id")
        return cls(
            topic=_field(obj, "topic", str, what),
            replicas=_field(obj, "replicas", int, what),
            placement=_str_list(obj, "placement", what),
            leader=_field(obj, "leader", str, what),
            leader_lease=int(lease),
            isr=_str_list(obj, "isr", what),
            epoch=_field(obj, "epoch", int, what),
        )

    def with_isr(self, isr: Iterable[str]) -> TopicRecord:
        """The same record with ``isr`` (kept in placement order, leader first); the epoch is
        unchanged. RecordError when the leader would leave the ISR."""
        members = set(isr)
        if self.leader and self.leader not in members:
            raise RecordError(f"the leader {self.leader!r} cannot leave the isr")
        ordered = [self.leader] if self.leader else []
        ordered += [n for n in self.placement if n in members and n != self.leader]
        return replace(self, isr=tuple(ordered))


def _rank(topic: str, node_id: str) -> bytes:
    """Rendezvous weight of ``node_id`` for ``topic``: stable across processes and versions."""
    return hashlib.blake2b(f"{topic}\0{node_id}".encode(), digest_size=8).digest()


def choose_placement(
    topic: str,
    replicas: int,
    live_nodes: Iterable[str],
    load: Mapping[str, int] | None = None,
) -> tuple[str, ...]:
    """The ``replicas`` node ids to hold a new ``topic``, first one its leader.

    Nodes holding fewer placements (``load``: node id -> number of topics placed on it, absent
    = 0) come first; ties go by rendezvous hashing of (topic, node), so different topics spread
    over equally loaded nodes and every node computes the same answer. Raises NotEnoughNodes
    when fewer than ``replicas`` nodes are live, ValueError when ``replicas`` < 1.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    nodes = sorted(set(live_nodes))
    if len(nodes) < replicas:
        raise NotEnoughNodes(replicas, len(nodes))
    counts = load or {}
    nodes.sort(key=lambda n: (counts.get(n, 0), _rank(topic, n)))
    return tuple(nodes[:replicas])


def placement_load(records: Iterable[TopicRecord]) -> dict[str, int]:
    """Node id -> how many of ``records`` place a replica on it (the ``load`` above)."""
    load: dict[str, int] = {}
    for rec in records:
        for n in rec.placement:
            load[n] = load.get(n, 0) + 1
    return load


def choose_leader(record: TopicRecord, live_nodes: Iterable[str]) -> str | None:
    """The ISR member to elect when ``record.leader``'s lease lapsed: the first live ISR member
    other than the old leader, in ISR order (so placement order); failing that the old leader
    itself when it is live again under a new lease (it held everything acknowledged); None when
    no ISR member is live: the topic then waits without a leader rather than elect an
    out-of-sync replica (no unclean election)."""
    live = set(live_nodes)
    for n in record.isr:
        if n != record.leader and n in live:
            return n
    if record.leader and record.leader in live:
        return record.leader
    return None


def elected(record: TopicRecord, leader: str, lease: int, live_nodes: Iterable[str]) -> TopicRecord:
    """The record after ``leader`` (holding etcd lease ``lease``) wins an election: epoch + 1,
    and the ISR cut to its live members with the new leader first; a deposed old leader leaves
    it (it must truncate its unacknowledged tail and catch up before it rejoins)."""
    live = set(live_nodes) | {leader}
    keep = {n for n in record.isr if n in live and (n != record.leader or n == leader)}
    isr = (leader, *(n for n in record.placement if n in keep and n != leader))
    return replace(record, leader=leader, leader_lease=lease, epoch=record.epoch + 1, isr=isr)


# --- etcd v3 gateway JSON: compares and request ops (etcdserverpb.Compare / RequestOp) ---


def b64(raw: bytes) -> str:
    """bytes as the gateway wants them in JSON (standard base64)."""
    return base64.b64encode(raw).decode()


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def cmp_absent(key: bytes) -> dict[str, Any]:
    """True while ``key`` does not exist (its create_revision is 0)."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def cmp_mod_revision(key: bytes, revision: int) -> dict[str, Any]:
    """True while ``key`` was last written at ``revision`` (nobody wrote it since we read it)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def cmp_lease(key: bytes, lease: int, *, equal: bool = True) -> dict[str, Any]:
    """True while ``key`` is (``equal``) or is not held under ``lease``; an absent key holds
    lease 0, so ``equal=False`` is also true once the key's lease expired."""
    return {
        "key": b64(key),
        "target": "LEASE",
        "result": "EQUAL" if equal else "NOT_EQUAL",
        "lease": str(lease),
    }


def op_put(key: bytes, value: bytes, lease: int = 0) -> dict[str, Any]:
    req: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        req["lease"] = str(lease)
    return {"request_put": req}


def op_get(key: bytes) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


def op_delete(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def live_node_ids(keys: Keys, node_keys: Sequence[bytes]) -> list[str]:
    """Node ids of the node keys that parse as such (others under the prefix are ignored)."""
    out: list[str] = []
    for k in node_keys:
        try:
            out.append(keys.node_id_of(k))
        except (ValueError, UnicodeDecodeError):
            continue
    return out
