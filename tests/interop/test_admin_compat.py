"""nsqpy-admin's JSON API against the answers Go's nsqadmin 1.3 gave for the same cluster.

``tests/data/nsqadmin-1.3/record.py`` ran Go nsqlookupd + two Go nsqd + Go nsqadmin (the binaries
already on the machine), built the cluster state of ``build_state`` below and saved each answer
of ``REQUESTS`` as ``tests/data/nsqadmin-1.3/<name>.json``. This test builds the same state on
nsqpy-lookupd + two nsqpy-d + nsqpy-admin (no Go needed), asks the same requests and compares:
status codes, keys and their order, nesting and JSON types everywhere, and the values where they
do not depend on the run (names, counts, paused flags, error texts). Addresses and ports are
replaced by their role ("<A>", "<B>" the nsqds, "<L>" the lookupd, "<addr>" an ephemeral
one) on both sides; connect times and durations are compared by type only; lists of records
are compared in a canonical order (Go sorts nodes by hostname only, and both nodes share one).

Where Go's answer depends on which node answered first (TopicStats.Add reuses the first node's
channel record as the cluster-wide one: see nsqpy/internal/clusterinfo/types.py), only the
shape is compared: ``SHAPE_ONLY`` lists those places, and docs/compatibility.md lists the
difference. There a null stands for any Go slice or pointer, and nsqpy's keys must be among
Go's (Go's reused record keeps the node's own keys, e.g. a percentile's "value").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.admin_cluster import Admin
from support.raw_client import RawClient

from nsqpy.testing import Nsqd, Nsqlookupd, wait_for

DATA = Path(__file__).resolve().parent.parent / "data" / "nsqadmin-1.3"
CLIENT_HOSTNAME = "tester-host"  #: the consumer's IDENTIFY hostname (nsqds report the machine's)

# ---------------------------------------------------------------------------- the scenario


@dataclass
class Stack:
    """A lookupd, two nsqds (A and B) registered with it, an nsqadmin over the lookupd, a
    second one with --admin-user=alice (for the 403s) and a third over the two nsqds'
    addresses (--nsqd-http-address, no lookupd)."""

    lookupd: Nsqlookupd
    a: Nsqd
    b: Nsqd
    admin: Admin
    acl_admin: Admin
    direct_admin: Admin
    consumers: list[RawClient] = field(default_factory=list)

    def roles(self) -> dict[str, str]:
        """Address -> role token, longest first (so "host:4151" never eats "host:41510")."""
        m = {
            self.a.http_address: "<A>",
            self.b.http_address: "<B>",
            self.a.tcp_address: "<A.tcp>",
            self.b.tcp_address: "<B.tcp>",
            self.lookupd.http_address: "<L>",
            self.lookupd.tcp_address: "<L.tcp>",
        }
        return dict(sorted(m.items(), key=lambda kv: -len(kv[0])))

    def ports(self) -> dict[int, str]:
        return {
            self.a.http_port: "<A.http_port>",
            self.b.http_port: "<B.http_port>",
            self.a.tcp_port: "<A.tcp_port>",
            self.b.tcp_port: "<B.tcp_port>",
        }

    def stop(self) -> None:
        for c in self.consumers:
            c.close()
        for p in (self.direct_admin, self.acl_admin, self.admin):
            p.stop()
        for d in (self.a, self.b, self.lookupd):
            d.stop()


def start_stack(
    nsqd_cmd: list[str] | None, lookupd_cmd: list[str] | None, admin_cmd: list[str] | None
) -> Stack:
    """Start the daemons (nsqpy's when a command is None) on loopback, ephemeral ports."""
    lookupd = Nsqlookupd([], cmd=lookupd_cmd)
    flags = [
        f"--lookupd-tcp-address={lookupd.tcp_address}",
        "--broadcast-address=127.0.0.1",
        "--e2e-processing-latency-percentile=1.0,0.5",
    ]
    a = Nsqd(flags, cmd=nsqd_cmd, https=False)
    b = Nsqd(flags, cmd=nsqd_cmd, https=False)
    over = [f"--lookupd-http-address={lookupd.http_address}"]
    admin = Admin(over, cmd=admin_cmd)
    acl_admin = Admin([*over, "--admin-user=alice"], cmd=admin_cmd)
    direct = [f"--nsqd-http-address={a.http_address}", f"--nsqd-http-address={b.http_address}"]
    direct_admin = Admin(direct, cmd=admin_cmd)
    return Stack(lookupd, a, b, admin, acl_admin, direct_admin)


def _topic(d: Nsqd, name: str) -> dict[str, Any]:
    for t in d.stats(topic=name).get("topics") or []:
        if t["topic_name"] == name:
            return t
    return {}


def _channel(d: Nsqd, topic: str, name: str) -> dict[str, Any]:
    for c in _topic(d, topic).get("channels") or []:
        if c["channel_name"] == name:
            return c
    return {}


def build_state(s: Stack) -> None:
    """The recorded cluster state:

    - "orders" on A (30 messages) and B (20), channels "billing" and "audit" on both, "audit"
      paused on both; on A a consumer (client_id "tester", hostname "tester-host", user agent
      "admin-compat/1.0") took 5 of billing's messages: 2 FIN, 2 REQ 0, 1 REQ 60 s (deferred);
    - "events" on B only: 5 messages, no channel, the topic paused;
    - "idle" on A only: no message, channel "c1";
    - "ghost" with channel "gc" on the lookupd only (no producer: /api/topics?inactive=true)."""
    a, b = s.a, s.b
    for d in (a, b):
        d.post("/topic/create", topic="orders")  # Go nsqd's /channel/create needs the topic
        for ch in ("billing", "audit"):
            d.post("/channel/create", topic="orders", channel=ch)
    a.mpub("orders", [b"a-%d" % i for i in range(30)])
    b.mpub("orders", [b"b-%d" % i for i in range(20)])
    for d, n in ((a, 30), (b, 20)):
        for ch in ("billing", "audit"):
            wait_for(lambda d=d, ch=ch, n=n: _channel(d, "orders", ch).get("depth") == n, 10)
        d.post("/channel/pause", topic="orders", channel="audit")
    c = RawClient(a.tcp_port)
    c.identify(user_agent="admin-compat/1.0", client_id="tester", hostname=CLIENT_HOSTNAME)
    c.sub("orders", "billing", rdy=5)
    ids = [c.read_message(10)[2] for _ in range(5)]
    c.cmd(b"RDY", b"0")
    c.cmd(b"FIN", ids[0])
    c.cmd(b"FIN", ids[1])
    c.cmd(b"REQ", ids[2], b"0")
    c.cmd(b"REQ", ids[3], b"0")
    c.cmd(b"REQ", ids[4], b"60000")
    s.consumers.append(c)
    wait_for(
        lambda: (lambda ch: (ch.get("in_flight_count"), ch.get("deferred_count")) == (0, 1))(
            _channel(a, "orders", "billing")
        ),
        10,
        what="billing settled",
    )
    b.mpub("events", [b"e-%d" % i for i in range(5)])
    b.post("/topic/pause", topic="events")
    a.post("/topic/create", topic="idle")
    a.post("/channel/create", topic="idle", channel="c1")
    s.lookupd.post("/topic/create", topic="ghost")
    s.lookupd.post("/channel/create", topic="ghost", channel="gc")

    def registered() -> bool:
        lk = s.lookupd
        return (
            len(lk.producers("orders")) == 2
            and len(lk.producers("events")) == 1
            and len(lk.producers("idle")) == 1
            and sorted(lk.get_json("/channels?topic=orders")["channels"]) == ["audit", "billing"]
            and lk.get_json("/channels?topic=idle")["channels"] == ["c1"]
        )

    wait_for(registered, 15, what="every topic and channel registered with the lookupd")


@dataclass(frozen=True)
class Req:
    """One recorded request: ``path`` may hold "{A}"/"{B}" (the nsqds' HTTP addresses);
    ``body``: a dict is sent as JSON, bytes as they are, None as no body; ``direct``: ask
    the nsqadmin over --nsqd-http-address; ``acl``: ask the
    --admin-user=alice nsqadmin; ``after``: a state change (run after every read)."""

    name: str
    method: str
    path: str
    body: Any = None
    acl: bool = False
    direct: bool = False
    headers: tuple[tuple[str, str], ...] = ()


READS = [
    Req("topics", "GET", "/api/topics"),
    Req("topics_inactive", "GET", "/api/topics?inactive=true"),
    Req("topic_orders", "GET", "/api/topics/orders"),
    Req("topic_events", "GET", "/api/topics/events"),
    Req("topic_idle", "GET", "/api/topics/idle"),
    Req("topic_unknown", "GET", "/api/topics/never_seen"),
    Req("channel_billing", "GET", "/api/topics/orders/billing"),
    Req("channel_audit", "GET", "/api/topics/orders/audit"),
    Req("channel_idle_c1", "GET", "/api/topics/idle/c1"),
    Req("channel_unknown", "GET", "/api/topics/orders/never_seen"),
    Req("nodes", "GET", "/api/nodes"),
    Req("node_a", "GET", "/api/nodes/{A}"),
    Req("node_b", "GET", "/api/nodes/{B}"),
    Req("node_unknown", "GET", "/api/nodes/127.0.0.1:1"),
    Req("counter", "GET", "/api/counter"),
    Req("config_log_level", "GET", "/config/log_level"),
    Req("config_unknown", "GET", "/config/no_such_option"),
    Req("method_not_allowed", "PUT", "/api/counter"),
    Req("not_found", "GET", "/api/no_such_thing"),
    # the same reads through --nsqd-http-address (GetNSQDTopics, GetNSQDProducers, ...)
    Req("direct_topics", "GET", "/api/topics", direct=True),
    Req("direct_topics_inactive", "GET", "/api/topics?inactive=true", direct=True),
    Req("direct_topic_orders", "GET", "/api/topics/orders", direct=True),
    Req("direct_topic_events", "GET", "/api/topics/events", direct=True),
    Req("direct_topic_unknown", "GET", "/api/topics/never_seen", direct=True),
    Req("direct_channel_billing", "GET", "/api/topics/orders/billing", direct=True),
    Req("direct_nodes", "GET", "/api/nodes", direct=True),
    Req("direct_node_b", "GET", "/api/nodes/{B}", direct=True),
    Req("direct_counter", "GET", "/api/counter", direct=True),
]

ERRORS = [
    Req("err_topic_action_invalid", "POST", "/api/topics/orders", {"action": "explode"}),
    Req("err_topic_action_empty_body", "POST", "/api/topics/orders", b""),
    Req("err_topic_action_bad_json", "POST", "/api/topics/orders", b"{bad"),
    Req("err_topic_action_cut_json", "POST", "/api/topics/orders", b'{"action": "pa'),
    Req("err_topic_action_wrong_type", "POST", "/api/topics/orders", {"action": 5}),
    Req("err_topic_action_trailing", "POST", "/api/topics/orders", b'{"action": "x"} tail'),
    Req("err_topic_action_list_body", "POST", "/api/topics/orders", b"[1, 2 3]"),
    Req("err_create_array_body", "POST", "/api/topics", b"[]"),
    Req("err_channel_action_invalid", "POST", "/api/topics/orders/billing", {"action": "x"}),
    Req("err_create_invalid_topic", "POST", "/api/topics", {"topic": "bad topic!"}),
    Req("err_create_invalid_channel", "POST", "/api/topics", {"topic": "ok", "channel": "b c!"}),
    Req("err_create_empty_body", "POST", "/api/topics", b""),
    Req("err_tombstone_bad_body", "DELETE", "/api/nodes/{A}", b"not json"),
    Req("err_tombstone_invalid_topic", "DELETE", "/api/nodes/{A}", {"topic": "a b"}),
    Req("err_tombstone_unknown_node", "DELETE", "/api/nodes/127.0.0.1:1", {"topic": "orders"}),
    Req("err_pause_unknown_topic", "POST", "/api/topics/never_seen", {"action": "pause"}),
    Req("err_delete_unknown_topic", "DELETE", "/api/topics/never_seen"),
    Req("err_delete_unknown_channel", "DELETE", "/api/topics/orders/never_seen"),
    Req("err_acl_pause", "POST", "/api/topics/orders", {"action": "pause"}, acl=True),
    Req(
        "err_acl_delete_other_user",
        "DELETE",
        "/api/topics/orders",
        acl=True,
        headers=(("X-Forwarded-User", "mallory"),),
    ),
    Req("err_acl_create", "POST", "/api/topics", {"topic": "x"}, acl=True),
    Req("err_acl_tombstone", "DELETE", "/api/nodes/{A}", {"topic": "orders"}, acl=True),
]

ACTIONS = [
    Req("action_unpause_channel", "POST", "/api/topics/orders/audit", {"action": "unpause"}),
    Req("action_empty_topic", "POST", "/api/topics/events", {"action": "empty"}),
    Req("action_create", "POST", "/api/topics", {"topic": "created", "channel": "cc"}),
    Req("action_delete_channel", "DELETE", "/api/topics/idle/c1"),
    Req("action_delete_topic", "DELETE", "/api/topics/idle"),
]

AFTER = [
    Req("after_topics", "GET", "/api/topics"),
    Req("after_channel_audit", "GET", "/api/topics/orders/audit"),
    Req("after_topic_events", "GET", "/api/topics/events"),
]


def settle_after_actions(s: Stack) -> None:
    """Wait until the actions show in the lookupd and the nsqds."""
    lk = s.lookupd
    want = ["created", "events", "ghost", "orders"]
    seen: list[list[str]] = []
    wait_for(
        lambda: seen.append(sorted(lk.get_json("/topics")["topics"])) or seen[-1] == want,
        15,
        what=f"lookupd topics {want} after the actions (last seen: {seen[-1:]})",
    )
    wait_for(lambda: _topic(s.b, "events").get("depth") == 0, 10, what="events emptied")


def ask(s: Stack, r: Req) -> dict[str, Any]:
    """One request to the stack's admin: {"request", "status", "answer"} (the answer as JSON
    when it decodes, else as text)."""
    path = r.path.replace("{A}", s.a.http_address).replace("{B}", s.b.http_address)
    body: bytes | None = None
    headers = dict(r.headers)
    if isinstance(r.body, dict):
        body = json.dumps(r.body).encode()
        headers["Content-Type"] = "application/json"
    elif isinstance(r.body, bytes):
        body = r.body
        headers["Content-Type"] = "application/json"
    admin = s.acl_admin if r.acl else s.direct_admin if r.direct else s.admin
    code, out, _ = admin.http(r.method, path, body, headers)  # type: ignore[arg-type]
    try:
        answer: Any = json.loads(out)
    except ValueError:
        answer = out.decode("utf-8", "replace")
    req = {"method": r.method, "path": r.path, "body": _body_repr(r.body)}
    return {"request": req, "status": code, "answer": answer}


def _body_repr(body: Any) -> Any:
    return body.decode() if isinstance(body, bytes) else body


def run_scenario(s: Stack) -> dict[str, dict[str, Any]]:
    """Build the state, ask every request (reads, errors, then the actions and what they
    changed); the answers by request name."""
    build_state(s)
    out = {r.name: ask(s, r) for r in READS + ERRORS}
    for r in ACTIONS:
        out[r.name] = ask(s, r)
    settle_after_actions(s)
    for r in AFTER:
        out[r.name] = ask(s, r)
    return out


# ---------------------------------------------------------------------------- normalising

_ADDR = re.compile(r"127\.0\.0\.1:\d+")
PORT_KEYS = ("tcp_port", "http_port")
#: compared by JSON type only: they depend on the clock
VOLATILE = ("connect_ts", "connected", "value", "min", "max", "average")


def normalize(value: Any, roles: dict[str, str], ports: dict[int, str], key: str = "") -> Any:
    """``value`` with every known address replaced by its role, every other loopback
    address by "<addr>", the nsqds' ports by their role (dict keys too), and the machine's
    host name (an nsqd's "hostname": where it was recorded is not where it is compared) by
    "<hostname>"."""
    if isinstance(value, dict):
        return {normalize(k, roles, ports): normalize(v, roles, ports, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, roles, ports, key) for v in value]
    if key == "hostname" and value not in ("", CLIENT_HOSTNAME):
        return "<hostname>"
    if isinstance(value, str):
        for addr, role in roles.items():
            value = re.sub(re.escape(addr) + r"(?!\d)", role, value)
        return _ADDR.sub("<addr>", value)
    if key in PORT_KEYS and isinstance(value, int) and not isinstance(value, bool):
        return ports.get(value, "<port>")
    return value


def _jtype(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _sort_key(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(
            str(v.get(k, ""))
            for k in ("node", "http_port", "topic_name", "channel_name", "topic", "client_id")
        )
    return json.dumps(v, sort_keys=True)


#: (request name, JSON path prefix): Go's value there depends on which node answered first
SHAPE_ONLY: list[tuple[str, str]] = [
    ("topic_orders", "$.channels"),
    ("topic_orders", "$.nodes"),
    ("direct_topic_orders", "$.channels"),
    ("direct_topic_orders", "$.nodes"),
    ("direct_topic_events", "$.nodes"),
    ("topic_events", "$.nodes"),
    ("topic_idle", "$.nodes"),
    ("topic_idle", "$.channels"),
    ("after_topic_events", "$.nodes"),
]
#: JSON paths whose object keys are data (Go encodes maps with sorted keys)
MAPS = ("$.answer.stats", "$.answer.topics")


def compare(want: Any, got: Any, path: str = "$", values: bool = True) -> list[str]:
    """Differences between Go's answer ``want`` and nsqpy's ``got`` (both normalized)."""
    diffs: list[str] = []
    tw, tg = _jtype(want), _jtype(got)
    if tw != tg:
        if not values and "null" in (tw, tg):
            return []  # a Go slice or pointer type: null or a value
        return [f"{path}: Go has {tw} {_short(want)}, nsqpy {tg} {_short(got)}"]
    if isinstance(want, dict):
        if not values:  # shape only: nsqpy has no key Go lacks (see SHAPE_ONLY)
            if not set(got) <= set(want):
                diffs.append(f"{path}: keys Go {list(want)}, nsqpy {list(got)}")
        elif list(want) != list(got) and not (path in MAPS and set(want) == set(got)):
            diffs.append(f"{path}: keys Go {list(want)}, nsqpy {list(got)}")
        for k in want:
            if k in got:
                key_path = f"{path}.{k}"
                vals = values and k not in VOLATILE
                diffs += compare(want[k], got[k], key_path, vals)
        return diffs
    if isinstance(want, list):
        if values and len(want) != len(got):
            diffs.append(f"{path}: {len(want)} items in Go, {len(got)} in nsqpy")
        if values:
            for i, (w, g) in enumerate(
                zip(sorted(want, key=_sort_key), sorted(got, key=_sort_key))
            ):
                diffs += compare(w, g, f"{path}[{i}]", values)
        elif want:
            for i, g in enumerate(got):  # every item has the shape of one of Go's
                tries = [compare(w, g, f"{path}[{i}]", False) for w in want]
                diffs += min(tries, key=len)
        return diffs
    if values and want != got:
        diffs.append(f"{path}: Go {_short(want)}, nsqpy {_short(got)}")
    return diffs


def _short(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) < 120 else text[:117] + "..."


def compare_answer(name: str, want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """The differences of one request's {"status", "answer"}, SHAPE_ONLY applied."""
    diffs = []
    if want["status"] != got["status"]:
        diffs.append(f"status: Go {want['status']}, nsqpy {got['status']}")
    shape_only = [p for n, p in SHAPE_ONLY if n == name]
    if not shape_only:
        return diffs + compare(want["answer"], got["answer"], "$.answer")
    w, g = dict(want["answer"]), dict(got["answer"])
    for p in shape_only:
        k = p.split(".", 1)[1]
        if k in w and k in g:
            diffs += compare(w.pop(k), g.pop(k), f"$.answer.{k}", values=False)
    return diffs + compare(w, g, "$.answer")


# ---------------------------------------------------------------------------- the test


def recorded() -> dict[str, dict[str, Any]]:
    out = {}
    for f in sorted(DATA.glob("*.json")):
        if f.name != "cluster.json":
            out[f.stem] = json.loads(f.read_text())
    return out


@pytest.fixture(scope="module")
def nsqpy_answers() -> Iterator[tuple[dict[str, dict[str, Any]], Stack]]:
    s = start_stack(None, None, None)
    try:
        yield run_scenario(s), s
    finally:
        s.stop()


def test_recordings_cover_every_request() -> None:
    names = {r.name for r in READS + ERRORS + ACTIONS + AFTER}
    assert set(recorded()) == names, "re-run tests/data/nsqadmin-1.3/record.py"


@pytest.mark.parametrize("name", [r.name for r in READS + ERRORS + ACTIONS + AFTER])
def test_answer_matches_go_nsqadmin(
    name: str, nsqpy_answers: tuple[dict[str, dict[str, Any]], Stack]
) -> None:
    answers, stack = nsqpy_answers
    cluster = json.loads((DATA / "cluster.json").read_text())
    go_roles = dict(cluster["roles"].items())
    go_ports = {int(k): v for k, v in cluster["ports"].items()}
    want = normalize(recorded()[name], go_roles, go_ports)
    got = normalize(answers[name], stack.roles(), stack.ports())
    diffs = compare_answer(name, want, got)
    assert not diffs, "\n".join([f"{name} differs from Go nsqadmin 1.3:", *diffs])


def test_compare_finds_what_differs() -> None:
    """The comparison itself: a count, a key, a type, a status are each caught; a shape-only
    place lets a null stand for a Go slice; a map's key order does not matter."""
    go = {"status": 200, "answer": {"a": 1, "b": [{"node": "x", "n": 2}], "message": ""}}
    assert compare_answer("t", go, json.loads(json.dumps(go))) == []
    bad = json.loads(json.dumps(go))
    bad["answer"]["b"][0]["n"] = 3
    assert compare_answer("t", go, bad) == ["$.answer.b[0].n: Go 2, nsqpy 3"]
    bad["answer"]["b"][0] = {"n": 2, "node": "x"}
    assert "keys Go" in compare_answer("t", go, bad)[0]
    bad["answer"]["b"] = None
    assert "Go has array" in compare_answer("t", go, bad)[0]
    assert compare_answer("t", go, {**go, "status": 502})[0] == "status: Go 200, nsqpy 502"
    assert compare({"x": [1]}, {"x": None}, values=False) == []
    assert compare({"x": [1]}, {"x": "s"}, values=False) != []
    assert compare({"stats": {"a": 1, "b": 2}}, {"stats": {"b": 2, "a": 1}}, "$.answer") == []
    roles, ports = {"127.0.0.1:4151": "<A>"}, {4151: "<A.http_port>"}
    got = normalize(
        {"127.0.0.1:4151": "127.0.0.1:41510 127.0.0.1:4151", "http_port": 4151}, roles, ports
    )
    assert got == {"<A>": "<addr> <A>", "http_port": "<A.http_port>"}


def test_go_json_error_texts() -> None:
    """nsqadmin's 400 texts for bodies Go's encoding/json refuses (the recorded ones are
    checked against Go above; these are the neighbours)."""
    from nsqpy.internal.gojson import GoJSONError, GoStruct

    def decode_struct(raw: bytes, fields: tuple[str, ...]) -> dict[str, str]:
        found = GoStruct(dict.fromkeys(fields, "string")).decode(raw)
        return {f: found.get(f, "") for f in fields}

    def err(raw: bytes, *fields: str) -> str:
        with pytest.raises(GoJSONError) as e:
            decode_struct(raw, fields or ("action",))
        return str(e.value)

    assert err(b"  ") == "EOF"
    assert err(b'{"action"') == "unexpected EOF"
    assert err(b'{"action" 1}') == "invalid character '1' after object key"
    assert err(b'{"action": "x" "y"}') == "invalid character '\"' after object key:value pair"
    assert err(b"nope") == "invalid character 'o' in literal null (expecting 'u')"
    assert err(b"tru") == "unexpected EOF"
    assert err(b'{"action": true}') == (
        "json: cannot unmarshal bool into Go struct field .action of type string"
    )
    assert decode_struct(b'{"ACTION": "pause", "other": 1}', ("action",)) == {"action": "pause"}
    assert decode_struct(b"null", ("topic", "channel")) == {"topic": "", "channel": ""}
    assert decode_struct(b'{"topic": null} trailing', ("topic",)) == {"topic": ""}
