"""Side by side with the Go originals: nsqpy-d and nsqpy-lookupd against Go nsqd 1.3,
nsqlookupd 1.3 and nsq_tail (go-nsq's ConnectToNSQLookupd).

Every test needs the Go binaries (see tests/support/gobin.py: $NSQ_GO_BIN, /opt/nsq-go/bin or the
PATH, v1.3.x) and skips, saying how to provide them, where they are absent (CI installs them
with .ci/install-go-nsq, so there every test runs).

  * Go nsqd registers with nsqpy-lookupd; nsqpy-d registers with Go nsqlookupd.
  * One scripted sequence (create/delete topics and channels on nsqd, stop nsqd) against the
    four pairs (Go|nsqpy nsqd x Go|nsqpy lookupd): the lookupd answers of /lookup, /nodes,
    /topics, /channels and /debug must be equal once ports and timestamps are normalized and
    lists sorted (Go's order is map order, i.e. unspecified; keys, types, null vs [] compared).
  * Raw "  V1" byte sequences and HTTP requests to Go nsqlookupd and nsqpy-lookupd: exact reply
    bytes, and whether the connection closes; HTTP status, body and key headers.
  * nsq_tail --lookupd-http-address=<nsqpy-lookupd> finds messages on two nsqpy-d nodes.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import gobin
from support.daemons import Daemon, Lookupd
from support.gobin import CLOSED, SHUT_WR, GoProcess, v1_exchange

from nsqpy.testing import wait_for

MAGIC = b"  V1"


def identify(body: dict[str, Any] | bytes) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(raw)) + raw


PEER = {
    "broadcast_address": "127.0.0.1",
    "hostname": "peer.local",
    "tcp_port": 4150,
    "http_port": 4151,
    "version": "1.3.0",
}
IDENT = identify(PEER)

# name -> [(bytes to send, number of replies to read)]; v1_exchange adds a final PING probe.
V1_SEQUENCES: dict[str, list[tuple[bytes, int]]] = {
    "bad_magic": [(b"  V2", 1)],
    "http_as_magic": [(b"GET / HTTP/1.0\r\n\r\n", 1)],
    "ping_before_identify": [(MAGIC + b"PING\n", 1)],
    "identify": [(MAGIC + IDENT, 1)],
    "identify_in_pieces": [(MAGIC + b"IDENTIFY\n", 0), (IDENT[9:12], 0), (IDENT[12:], 1)],
    "identify_twice": [(MAGIC + IDENT, 1), (b"IDENTIFY\n", 1)],
    "register_before_identify": [(MAGIC + b"REGISTER t c\n", 1)],
    "unregister_before_identify": [(MAGIC + b"UNREGISTER t\n", 1)],
    "register_unregister": [
        (MAGIC + IDENT, 1),
        (b"REGISTER t\n", 1),
        (b"REGISTER t c\n", 1),
        (b"REGISTER t c\n", 1),
        (b"UNREGISTER t c\n", 1),
        (b"UNREGISTER t\n", 1),
        (b"UNREGISTER never registered\n", 1),
    ],
    "register_ephemeral": [
        (MAGIC + IDENT, 1),
        (b"REGISTER t#ephemeral c#ephemeral\n", 1),
        (b"UNREGISTER t#ephemeral c#ephemeral\n", 1),
        (b"UNREGISTER t#ephemeral\n", 1),
    ],
    "register_extra_params": [(MAGIC + IDENT, 1), (b"REGISTER t c extra\n", 1)],
    "pipelined": [(MAGIC + IDENT + b"REGISTER a\nREGISTER a b\nPING\nUNREGISTER a b\n", 5)],
    "register_no_params": [(MAGIC + IDENT, 1), (b"REGISTER\n", 1)],
    "unregister_no_params": [(MAGIC + IDENT, 1), (b"UNREGISTER\n", 1)],
    "register_bad_topic": [(MAGIC + IDENT, 1), (b"REGISTER bad!topic\n", 1)],
    "register_bad_channel": [(MAGIC + IDENT, 1), (b"REGISTER t bad!channel\n", 1)],
    "unregister_bad_channel": [(MAGIC + IDENT, 1), (b"UNREGISTER t bad/channel\n", 1)],
    "register_topic_65_chars": [(MAGIC + IDENT, 1), (b"REGISTER " + b"a" * 65 + b"\n", 1)],
    "register_topic_64_chars": [(MAGIC + IDENT, 1), (b"REGISTER " + b"a" * 64 + b"\n", 1)],
    "register_double_space": [(MAGIC + IDENT, 1), (b"REGISTER  t\n", 1)],
    "register_utf8_topic": [(MAGIC + IDENT, 1), ("REGISTER tö c\n".encode(), 1)],
    "invalid_command": [(MAGIC + b"FOO bar\n", 1)],
    "lowercase_ping": [(MAGIC + b"ping\n", 1)],
    "empty_line": [(MAGIC + b"\n", 1)],
    "spaces_and_crlf": [(MAGIC + b"  PING \r\n", 1), (b"\tPING\t\n", 1)],
    "identify_bad_json": [(MAGIC + identify(b"{bad"), 1)],
    "identify_not_object": [(MAGIC + identify(b"[1,2]"), 1)],
    "identify_null": [(MAGIC + identify(b"null"), 1)],
    "identify_empty_object": [(MAGIC + identify(b"{}"), 1)],
    "identify_missing_version": [
        (MAGIC + identify({k: v for k, v in PEER.items() if k != "version"}), 1)
    ],
    "identify_port_as_string": [(MAGIC + identify({**PEER, "tcp_port": "4150"}), 1)],
    "identify_unknown_and_case_keys": [
        (MAGIC + identify({**PEER, "Broadcast_Address": "10.9.9.9", "extra": [1]}), 1),
        (b"REGISTER t\n", 1),
    ],
    "identify_body_64k": [(MAGIC + identify({**PEER, "pad": "x" * 65536}), 1)],
    "identify_body_2mib": [(MAGIC + identify({**PEER, "pad": "x" * (2 << 20)}), 1)],
    "identify_truncated_then_half_close": [(MAGIC + IDENT[:-5], 0), (SHUT_WR, 1)],
    "identify_size_truncated_then_half_close": [(MAGIC + b"IDENTIFY\n\x00\x00", 0), (SHUT_WR, 1)],
    "commands_then_half_close": [(MAGIC + IDENT + b"REGISTER t\nPING\n", 3), (SHUT_WR, 0)],
    "line_20k": [(MAGIC + IDENT, 1), (b"REGISTER " + b"a" * 20000 + b"\n", 1)],
}


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def go_bins() -> dict[str, str]:
    """Paths of Go nsqd, nsqlookupd, nsq_tail v1.3.x (skips the test when one is missing)."""
    return {name: gobin.require(name) for name in gobin.NAMES}


@pytest.fixture
def go_nsqd_factory(go_bins, tmp_path: Path) -> Iterator[Callable[..., GoProcess]]:
    started: list[GoProcess] = []

    def start(*args: str) -> GoProcess:
        p = gobin.start_go_nsqd(tmp_path / f"go-nsqd{len(started)}", *args)
        started.append(p)
        return p

    yield start
    for p in started:
        rc = p.stop()
        assert rc == 0, f"Go nsqd exited {rc}:\n{p.log_text()[-3000:]}"


@pytest.fixture
def go_lookupd_factory(go_bins) -> Iterator[Callable[..., GoProcess]]:
    started: list[GoProcess] = []

    def start(*args: str) -> GoProcess:
        p = gobin.start_go_lookupd(*args)
        started.append(p)
        return p

    yield start
    for p in started:
        rc = p.stop()
        assert rc == 0, f"Go nsqlookupd exited {rc}:\n{p.log_text()[-3000:]}"


# (method, path) sent to both lookupds, in this order, after one peer registered
# REGISTER t c and REGISTER t2 over "  V1" (see _http_requests_setup).
HTTP_REQUESTS: list[tuple[str, str]] = [
    ("GET", "/ping"),
    ("HEAD", "/ping"),
    ("GET", "/PING"),
    ("GET", "/ping/"),
    ("GET", "/Ping/"),
    ("GET", "/info"),
    ("GET", "/info/"),
    ("POST", "/ping"),
    ("PUT", "/info"),
    ("DELETE", "/lookup"),
    ("GET", "/topic/create"),
    ("OPTIONS", "/ping"),
    ("OPTIONS", "/topic/create"),
    ("OPTIONS", "/debug/pprof/symbol"),
    ("OPTIONS", "*"),
    ("OPTIONS", "/nope"),
    ("GET", "/nope"),
    ("POST", "/nope"),
    ("GET", "/"),
    ("GET", "/lookup"),
    ("GET", "/lookup?topic="),
    ("GET", "/lookup?topic=t"),
    ("GET", "/lookup?topic=missing"),
    ("GET", "/lookup?topic=t&topic=t2"),
    ("GET", "/lookup?topic=%zz"),
    ("GET", "/channels"),
    ("GET", "/channels?topic=t"),
    ("GET", "/channels?topic=missing"),
    ("GET", "/topics"),
    ("GET", "/topics?x=1"),
    ("GET", "/nodes"),
    ("POST", "/topic/create"),
    ("POST", "/topic/create?topic=bad!"),
    ("POST", "/topic/create?topic=made"),
    ("POST", "/channel/create?topic=made"),
    ("POST", "/channel/create?topic=made&channel=bad!"),
    ("POST", "/channel/create?topic=made&channel=ch"),
    ("GET", "/lookup?topic=made"),
    ("POST", "/channel/delete?topic=made&channel=nope"),
    ("POST", "/channel/delete?topic=made&channel=ch"),
    ("POST", "/channel/delete?topic=made"),
    ("POST", "/topic/delete"),
    ("POST", "/topic/delete?topic=made"),
    ("POST", "/topic/delete?topic=never"),
    ("POST", "/topic/tombstone?topic=t"),
    ("POST", "/topic/tombstone?topic=t&node=127.0.0.1:4151"),
    ("GET", "/lookup?topic=t"),
    ("GET", "/nodes"),
    ("GET", "/topics"),
    ("GET", "/debug"),
]


# ---------------------------------------------------------------------------- normalizing

_PORT_RE = re.compile(r"^127\.0\.0\.1:\d+$")


def _sort_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def normalize(v: Any, ports: dict[int, str]) -> Any:
    """A JSON answer with what legitimately differs between runs replaced: "127.0.0.1:<port>"
    addresses, the given port numbers (-> their names), timestamps (-> "<ns>"); every list
    sorted (Go's order is map order); /nodes' parallel topics/tombstones sorted as pairs.
    Key order, types and null vs [] are kept."""
    if isinstance(v, list):
        return sorted((normalize(x, ports) for x in v), key=_sort_key)
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, x in v.items():
            if (
                k in ("last_update",)
                and isinstance(x, int)
                or k == "tombstoned_at"
                and v.get("tombstoned") is True
                and isinstance(x, int)
            ):
                out[k] = "<ns>"
            elif k in ("tcp_port", "http_port") and isinstance(x, int) and x in ports:
                out[k] = ports[x]
            elif isinstance(x, str) and _PORT_RE.match(x):
                out[k] = "127.0.0.1:<port>"
            else:
                out[k] = normalize(x, ports)
        topics, tombs = v.get("topics"), v.get("tombstones")
        if isinstance(topics, list) and isinstance(tombs, list) and len(topics) == len(tombs):
            pairs = sorted(zip(topics, tombs, strict=True), key=_sort_key)
            out["topics"] = [t for t, _ in pairs]
            out["tombstones"] = [b for _, b in pairs]
        return out
    return v


def answer(proc: Any, path: str, ports: dict[int, str]) -> tuple[tuple[int, Any], list[Any]]:
    """GET ``path``: ((status, normalized JSON body, or the raw body when it is not JSON),
    every JSON object's keys in document order)."""
    status, body, _ = proc.http("GET", path)
    try:
        data = json.loads(body)
    except ValueError:
        return (status, body), []
    return (status, normalize(data, ports)), keys_in_order(body)


def keys_in_order(body: bytes) -> list[list[str]]:
    """Every JSON object's keys in document order (json.Marshal's order must be kept)."""
    found: list[list[str]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append([k for k, _ in pairs])
        return dict(pairs)

    try:
        json.loads(body, object_pairs_hook=hook)
    except ValueError:
        return []
    return sorted(found)


def norm_v1(out: list[bytes | str], tcp_port: int, http_port: int) -> list[bytes | str]:
    """Raw V1 replies with the lookupd's own ports (in its IDENTIFY answer) named."""
    res: list[bytes | str] = []
    for o in out:
        if isinstance(o, bytes):
            o = o.replace(b'"tcp_port":%d' % tcp_port, b'"tcp_port":<TCP>')
            o = o.replace(b'"http_port":%d' % http_port, b'"http_port":<HTTP>')
        res.append(o)
    return res


# ---------------------------------------------------------------------------- 4. raw bytes

_DELIBERATE = "nsqpy-lookupd's deliberate limit (Go nsqlookupd has none)"
_V1_XFAIL = {
    "identify_body_2mib": f"{_DELIBERATE}: IDENTIFY body over 1 MiB is E_BAD_BODY and closed",
    "line_20k": f"{_DELIBERATE}: a command line over 16 KiB is E_INVALID and closed",
}


@pytest.fixture(scope="module")
def lookupd_pair() -> Iterator[tuple[GoProcess, Lookupd]]:
    """One Go nsqlookupd and one nsqpy-lookupd shared by the raw-bytes cases."""
    gobin.require("nsqlookupd")
    go = gobin.start_go_lookupd()
    try:
        py = Lookupd([])
    except BaseException:
        go.stop()
        raise
    yield go, py
    go_rc, py_rc = go.stop(), py.stop()
    assert (go_rc, py_rc) == (0, 0), (go.log_text()[-2000:], py.log_text()[-2000:])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=_V1_XFAIL[n]))
        if n in _V1_XFAIL
        else n
        for n in V1_SEQUENCES
    ],
)
def test_v1_bytes_match_go_lookupd(lookupd_pair, name: str) -> None:
    """The same bytes to Go nsqlookupd and nsqpy-lookupd: the same replies, byte for byte, and
    the connection closed (CLOSED last) or still open (the PING probe's OK last) alike."""
    go, py = lookupd_pair
    steps = V1_SEQUENCES[name]
    want = norm_v1(v1_exchange(go.tcp_port, steps), go.tcp_port, go.http_port)
    got = norm_v1(v1_exchange(py.tcp_port, steps), py.tcp_port, py.http_port)
    assert got == want, f"{name}: Go {want!r} vs nsqpy {got!r}"
    assert want[-1] in (CLOSED, b"OK")


def test_v1_bad_magic_variants_match(lookupd_pair) -> None:
    """Magic bytes that are not "  V1" (nsqd's "  V2", lower case, short then half-closed)."""
    go, py = lookupd_pair
    for magic in (b"  V2", b"  v1", b"V1  ", b"\x00\x00\x00\x00"):
        want = v1_exchange(go.tcp_port, [(magic, 1)])
        got = v1_exchange(py.tcp_port, [(magic, 1)])
        assert got == want == [b"E_BAD_PROTOCOL", CLOSED], magic
    want = v1_exchange(go.tcp_port, [(b"  ", 0), (SHUT_WR, 0)])
    got = v1_exchange(py.tcp_port, [(b"  ", 0), (SHUT_WR, 0)])
    assert got == want == [CLOSED]


_HTTP_KEY_HEADERS = ("Content-Type", "X-Nsq-Content-Type", "Allow", "Location", "Content-Length")


def _http_requests_setup(proc: Any) -> Any:
    """One peer identified over "  V1" with t/c and t2 registered; returns its socket."""
    import socket

    sock = socket.create_connection(("127.0.0.1", proc.tcp_port), timeout=5)
    sock.sendall(MAGIC + IDENT + b"REGISTER t c\nREGISTER t2\n")
    replies = [gobin.read_v1_reply(sock) for _ in range(3)]
    assert replies[1:] == [b"OK", b"OK"], replies
    return sock


_HTTP_XFAIL = {
    ("OPTIONS", "/debug/pprof/symbol"): "nsqpy-lookupd has no /debug/pprof routes (Go's "
    "net/http/pprof): Go 200 + Allow: GET, OPTIONS, POST; nsqpy 404 NOT_FOUND",
    ("OPTIONS", "*"): "Go's net/http answers OPTIONS * itself (200, empty, no Allow); "
    "nsqpy-lookupd answers 404 NOT_FOUND",
}


def _http_result(proc: Any, method: str, path: str) -> tuple[Any, ...]:
    status, body, headers = proc.http(method, path)
    lower = {k.lower(): v for k, v in headers.items()}  # header names are case-insensitive
    heads = {h: lower.get(h.lower()) for h in _HTTP_KEY_HEADERS}
    try:
        norm: Any = normalize(json.loads(body), {})
    except ValueError:
        norm = body
    return status, heads, norm, keys_in_order(body)


@pytest.fixture(scope="module")
def http_answers() -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """HTTP_REQUESTS in order against a fresh Go nsqlookupd and nsqpy-lookupd (one peer with
    t/c and t2): per request (Go result, nsqpy result), each (status, key headers, body with
    JSON normalized: ports, timestamps, list order, and every object's key order)."""
    go = gobin.start_go_lookupd()
    try:
        py = Lookupd([])
    except BaseException:
        go.stop()
        raise
    try:
        go_sock, py_sock = _http_requests_setup(go), _http_requests_setup(py)
        out = [(_http_result(go, m, p), _http_result(py, m, p)) for m, p in HTTP_REQUESTS]
        go_sock.close()
        py_sock.close()
    finally:
        go_rc, py_rc = go.stop(), py.stop()
    assert (go_rc, py_rc) == (0, 0)
    return out


@pytest.mark.parametrize(
    "i",
    [
        pytest.param(
            i,
            id=f"{i:02d} {m} {p}",
            marks=[pytest.mark.xfail(strict=True, reason=_HTTP_XFAIL[(m, p)])]
            if (m, p) in _HTTP_XFAIL
            else [],
        )
        for i, (m, p) in enumerate(HTTP_REQUESTS)
    ],
)
def test_http_matches_go_lookupd(http_answers, i: int) -> None:
    """Status, Content-Type, X-NSQ-Content-Type, Allow, Location, Content-Length and body."""
    method, path = HTTP_REQUESTS[i]
    go, py = http_answers[i]
    assert py == go, f"{method} {path}:\n  Go    {go!r}\n  nsqpy {py!r}"


# ------------------------------------------------------- 1-3. nsqd registering with lookupd

KINDS = ("go", "nsqpy")
PAIRS = [(n, lk) for n in KINDS for lk in KINDS]  # (nsqd kind, lookupd kind)
_SNAP_PATHS = (
    "/nodes",
    "/topics",
    "/lookup?topic=t1",
    "/channels?topic=t1",
    "/lookup?topic=t2",
    "/channels?topic=t2",
    "/lookup?topic=e%23ephemeral",
    "/channels?topic=e%23ephemeral",
    "/debug",
)


def _start_lookupd(kind: str) -> Any:
    return gobin.start_go_lookupd() if kind == "go" else Lookupd([])


def _start_nsqd(kind: str, data_path: Path, *args: str) -> Any:
    if kind == "go":
        return gobin.start_go_nsqd(data_path, *args)
    return Daemon(list(args), data_path)


def _post(nsqd: Any, path: str) -> None:
    status, body, _ = nsqd.http("POST", path)
    assert status == 200, (path, status, body)


def _json(lk: Any, path: str) -> tuple[int, Any]:
    status, body, _ = lk.http("GET", path)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def _producers(lk: Any, topic: str) -> list[Any] | None:
    status, data = _json(lk, f"/lookup?topic={topic}")
    return data["producers"] if status == 200 else None


def _channels(lk: Any, topic: str) -> list[str]:
    return _json(lk, f"/channels?topic={topic}")[1]["channels"]


def _debug_has(lk: Any, key: str) -> bool:
    return bool(_json(lk, "/debug")[1].get(key))


def run_scenario(nsqd_kind: str, lookupd_kind: str, data_path: Path) -> dict[str, Any]:
    """The scripted sequence; returns {step: {path: (status, normalized answer)}} taken from
    the lookupd after each step (every step waits, bounded, for the lookupd to show it)."""
    lk = _start_lookupd(lookupd_kind)
    snaps: dict[str, Any] = {}
    nsqd = None
    try:
        nsqd = _start_nsqd(
            nsqd_kind,
            data_path,
            f"--lookupd-tcp-address={lk.tcp_address}",
            "--broadcast-address=127.0.0.1",
        )
        ports = {nsqd.tcp_port: "<nsqd tcp>", nsqd.http_port: "<nsqd http>"}

        def snap(step: str) -> None:
            snaps[step] = {}
            for path in _SNAP_PATHS:
                snaps[step][path], snaps[step][f"key order of {path}"] = answer(lk, path, ports)

        def wait(pred: Callable[[], Any], what: str) -> None:
            wait_for(pred, timeout=10, what=f"{nsqd_kind} nsqd -> {lookupd_kind} lookupd: {what}")

        wait(lambda: len(_json(lk, "/nodes")[1]["producers"]) == 1, "nsqd in /nodes")
        snap("registered")

        _post(nsqd, "/topic/create?topic=t1")
        wait(lambda: _producers(lk, "t1"), "t1 in /lookup")
        snap("topic_created")

        _post(nsqd, "/channel/create?topic=t1&channel=c1")
        _post(nsqd, "/channel/create?topic=t1&channel=c2")
        _post(nsqd, "/topic/create?topic=t2")
        wait(lambda: set(_channels(lk, "t1")) == {"c1", "c2"}, "t1's c1, c2 in /channels")
        wait(lambda: _producers(lk, "t2"), "t2 in /lookup")
        snap("channels_created")

        _post(nsqd, "/channel/delete?topic=t1&channel=c1")
        wait(lambda: not _debug_has(lk, "channel:t1:c1"), "c1's producer gone from /debug")
        snap("channel_deleted")

        _post(nsqd, "/topic/delete?topic=t2")
        wait(lambda: _producers(lk, "t2") == [], "t2's producer gone from /lookup")
        snap("topic_deleted")

        _post(nsqd, "/topic/create?topic=e%23ephemeral")
        _post(nsqd, "/channel/create?topic=e%23ephemeral&channel=c%23ephemeral")
        wait(lambda: _channels(lk, "e%23ephemeral") == ["c#ephemeral"], "ephemeral channel")
        wait(lambda: _producers(lk, "e%23ephemeral"), "ephemeral topic in /lookup")
        snap("ephemeral_created")

        # nsqd deletes an ephemeral topic with its last channel; lookupd forgets both.
        _post(nsqd, "/channel/delete?topic=e%23ephemeral&channel=c%23ephemeral")
        wait(
            lambda: "e#ephemeral" not in _json(lk, "/topics")[1]["topics"],
            "ephemeral topic gone from /topics",
        )
        snap("ephemeral_deleted")

        rc = nsqd.stop()
        assert rc == 0, f"{nsqd_kind} nsqd exited {rc}:\n{nsqd.log_text()[-3000:]}"
        wait(lambda: _json(lk, "/nodes")[1]["producers"] == [], "nsqd gone from /nodes")
        snap("nsqd_stopped")
    finally:
        if nsqd is not None and nsqd.alive():
            nsqd.stop()
        rc = lk.stop()
    assert rc == 0, f"{lookupd_kind} lookupd exited {rc}:\n{lk.log_text()[-3000:]}"
    return snaps


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> Callable[[str, str], dict[str, Any]]:
    """run_scenario per (nsqd kind, lookupd kind), each pair run once per module."""
    for name in ("nsqd", "nsqlookupd"):
        gobin.require(name)
    done: dict[tuple[str, str], Any] = {}

    def get(nsqd_kind: str, lookupd_kind: str) -> dict[str, Any]:
        key = (nsqd_kind, lookupd_kind)
        if key not in done:
            path = tmp_path_factory.mktemp(f"{nsqd_kind}-nsqd-{lookupd_kind}-lookupd")
            try:
                done[key] = run_scenario(nsqd_kind, lookupd_kind, path / "data")
            except BaseException as e:
                done[key] = e
        if isinstance(done[key], BaseException):
            raise done[key]
        return done[key]

    return get


def _node(topics: list[str]) -> dict[str, Any]:
    return {
        "remote_address": "127.0.0.1:<port>",
        "hostname": socket.gethostname(),
        "broadcast_address": "127.0.0.1",
        "tcp_port": "<nsqd tcp>",
        "http_port": "<nsqd http>",
        "version": "1.3.0",
        "tombstones": [False] * len(topics),
        "topics": sorted(topics),
    }


def _peer() -> dict[str, Any]:
    node = _node([])
    del node["tombstones"], node["topics"]
    return node


def check_registration(snaps: dict[str, Any]) -> None:
    """What Go nsqd + Go nsqlookupd show at each step (observed with the Go pair): a deleted
    channel or topic loses its producer but keeps its registration (still in /topics and
    /channels, /lookup answers 200 with no producers); only #ephemeral ones are forgotten."""
    not_found = (404, {"message": "TOPIC_NOT_FOUND"})
    s = snaps["registered"]
    assert s["/nodes"] == (200, {"producers": [_node([])]})
    assert s["/topics"] == (200, {"topics": []})
    assert s["/lookup?topic=t1"] == not_found
    assert s["/channels?topic=t1"] == (200, {"channels": []})

    s = snaps["topic_created"]
    assert s["/lookup?topic=t1"] == (200, {"channels": [], "producers": [_peer()]})
    assert s["/topics"] == (200, {"topics": ["t1"]})
    assert s["/nodes"] == (200, {"producers": [_node(["t1"])]})

    s = snaps["channels_created"]
    assert s["/lookup?topic=t1"] == (200, {"channels": ["c1", "c2"], "producers": [_peer()]})
    assert s["/channels?topic=t1"] == (200, {"channels": ["c1", "c2"]})
    assert s["/lookup?topic=t2"] == (200, {"channels": [], "producers": [_peer()]})
    assert s["/topics"] == (200, {"topics": ["t1", "t2"]})
    assert s["/nodes"] == (200, {"producers": [_node(["t1", "t2"])]})
    assert set(s["/debug"][1]) == {"client::", "topic:t1:", "topic:t2:"} | {
        "channel:t1:c1",
        "channel:t1:c2",
    }

    s = snaps["channel_deleted"]
    assert s["/channels?topic=t1"] == (200, {"channels": ["c1", "c2"]})
    assert s["/debug"][1].get("channel:t1:c1") is None
    assert s["/nodes"] == (200, {"producers": [_node(["t1", "t2"])]})

    s = snaps["topic_deleted"]
    assert s["/lookup?topic=t2"] == (200, {"channels": [], "producers": []})
    assert s["/topics"] == (200, {"topics": ["t1", "t2"]})
    assert s["/nodes"] == (200, {"producers": [_node(["t1"])]})

    s = snaps["ephemeral_created"]
    assert s["/lookup?topic=e%23ephemeral"] == (
        200,
        {"channels": ["c#ephemeral"], "producers": [_peer()]},
    )
    assert s["/nodes"] == (200, {"producers": [_node(["t1", "e#ephemeral"])]})

    s = snaps["ephemeral_deleted"]
    assert s["/lookup?topic=e%23ephemeral"] == not_found
    assert s["/channels?topic=e%23ephemeral"] == (200, {"channels": []})
    assert s["/topics"] == (200, {"topics": ["t1", "t2"]})
    assert s["/nodes"] == (200, {"producers": [_node(["t1"])]})

    s = snaps["nsqd_stopped"]
    assert s["/nodes"] == (200, {"producers": []})
    assert s["/lookup?topic=t1"] == (200, {"channels": ["c1", "c2"], "producers": []})
    assert s["/topics"] == (200, {"topics": ["t1", "t2"]})
    assert s["/debug"] == (200, {})


def test_go_nsqd_registers_with_nsqpy_lookupd(scenarios) -> None:
    check_registration(scenarios("go", "nsqpy"))


def test_nsqpy_d_registers_with_go_nsqlookupd(scenarios) -> None:
    check_registration(scenarios("nsqpy", "go"))


def test_go_pair_is_the_reference(scenarios) -> None:
    """The expectations above are what the Go pair itself does."""
    check_registration(scenarios("go", "go"))


def test_nsqpy_pair_registers(scenarios) -> None:
    check_registration(scenarios("nsqpy", "nsqpy"))


@pytest.mark.parametrize("pair", [p for p in PAIRS if p != ("go", "go")], ids="-".join)
def test_answers_match_the_go_pair(scenarios, pair: tuple[str, str]) -> None:
    """Every lookupd answer at every step equals the Go pair's (after normalizing)."""
    want = scenarios("go", "go")
    got = scenarios(*pair)
    diffs = [
        f"{step} GET {path}:\n  Go pair {want[step][path]!r}\n  {pair}   {got[step][path]!r}"
        for step in want
        for path in want[step]
        if got.get(step, {}).get(path) != want[step][path]
    ]
    assert not diffs, "\n".join(diffs)


# ---------------------------------------------------------------------------- 5. nsq_tail


@pytest.mark.parametrize(
    "lookupd_kind, nsqd_kinds",
    [("nsqpy", ("nsqpy", "nsqpy")), ("go", ("nsqpy", "nsqpy")), ("nsqpy", ("go", "nsqpy"))],
    ids=["nsqpy-lookupd+2-nsqpy-d", "go-lookupd+2-nsqpy-d", "nsqpy-lookupd+go-nsqd+nsqpy-d"],
)
def test_nsq_tail_discovers_nodes_through_lookupd(
    go_bins, tmp_path: Path, lookupd_kind: str, nsqd_kinds: tuple[str, str]
) -> None:
    """go-nsq's ConnectToNSQLookupd (nsq_tail --lookupd-http-address) finds every node
    registered for the topic and receives the messages published to each."""
    lk = _start_lookupd(lookupd_kind)
    nodes: list[Any] = []
    try:
        for i, kind in enumerate(nsqd_kinds):
            nodes.append(
                _start_nsqd(
                    kind,
                    tmp_path / f"node{i}",
                    f"--lookupd-tcp-address={lk.tcp_address}",
                    "--broadcast-address=127.0.0.1",
                )
            )
        want = []
        for i, node in enumerate(nodes):
            for j in range(3):
                body = f"node{i}-msg{j}".encode()
                status, resp, _ = node.http("POST", "/pub?topic=tailed", body)
                assert (status, resp) == (200, b"OK"), (status, resp)
                want.append(body.decode())
        wait_for(
            lambda: len(_producers(lk, "tailed") or []) == 2,
            timeout=10,
            what="both nodes in /lookup?topic=tailed",
        )
        tail = subprocess.run(
            [
                go_bins["nsq_tail"],
                f"--lookupd-http-address={lk.http_address}",
                "--topic=tailed",
                f"-n={len(want)}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert tail.returncode == 0, tail.stderr[-3000:]
        assert sorted(tail.stdout.splitlines()) == sorted(want), tail.stderr[-3000:]
        # It found them through the lookupd, not any other way.
        assert f"querying nsqlookupd http://{lk.http_address}/lookup?topic=tailed" in tail.stderr
        for node in nodes:
            assert f"({node.tcp_address}) connecting to nsqd" in tail.stderr, tail.stderr
    finally:
        for node in nodes:
            node.stop()
        lk.stop()


# ------------------------------------------------ what nsqd sends to a lookupd, Go vs nsqpy


class Recorder:
    """A fake nsqlookupd on 127.0.0.1 that records what each nsqd connection sends (magic,
    command lines, IDENTIFY bodies) and answers as nsqlookupd does."""

    def __init__(self) -> None:
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.items: list[list[tuple[str, bytes]]] = []  # per connection, in order
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
                self.items.append([])
                items = self.items[-1]
            threading.Thread(target=self._serve, args=(conn, items), daemon=True).start()

    def _serve(self, conn: socket.socket, items: list[tuple[str, bytes]]) -> None:
        f = conn.makefile("rb")
        try:
            items.append(("magic", f.read(4)))
            while line := f.readline():
                items.append(("line", line))
                if line.strip() == b"IDENTIFY":
                    (size,) = struct.unpack(">i", f.read(4))
                    items.append(("identify body", f.read(size)))
                    reply = b'{"broadcast_address":"rec","hostname":"rec","http_port":1,'
                    reply += b'"tcp_port":2,"version":"1.3.0"}'
                else:
                    reply = b"OK"
                conn.sendall(struct.pack(">i", len(reply)) + reply)
        except OSError:
            pass

    def lines(self, i: int) -> list[str]:
        """Connection i's command lines (PINGs left out: their timing is the ticker's)."""
        with self.lock:
            items = list(self.items[i]) if i < len(self.items) else []
        return [d.decode() for k, d in items if k == "line" and d != b"PING\n"]

    def drop(self, i: int) -> None:
        self.conns[i].shutdown(socket.SHUT_RDWR)
        self.conns[i].close()

    def close(self) -> None:
        self.srv.close()
        for c in self.conns:
            c.close()


# (nsqd HTTP POSTs, the lines they must cause, compared as a set: Go's notifications are
# goroutines, so the order inside one step is not fixed)
NSQD_STEPS: list[tuple[list[str], list[str]]] = [
    (["/topic/create?topic=t1"], ["REGISTER t1\n"]),
    (["/channel/create?topic=t1&channel=c1"], ["REGISTER t1 c1\n"]),
    (["/topic/create?topic=t2"], ["REGISTER t2\n"]),
    (["/channel/delete?topic=t1&channel=c1"], ["UNREGISTER t1 c1\n"]),
    (["/topic/delete?topic=t2"], ["UNREGISTER t2\n"]),
    (
        ["/topic/create?topic=t3", "/channel/create?topic=t3&channel=c3"],
        ["REGISTER t3\n", "REGISTER t3 c3\n"],
    ),
    (["/topic/delete?topic=t3"], ["UNREGISTER t3\n", "UNREGISTER t3 c3\n"]),
    (
        ["/topic/create?topic=e%23ephemeral", "/channel/create?topic=e%23ephemeral&channel=c"],
        ["REGISTER e#ephemeral\n", "REGISTER e#ephemeral c\n"],
    ),
    # The last channel of an ephemeral topic gone: nsqd deletes the topic too.
    (
        ["/channel/delete?topic=e%23ephemeral&channel=c"],
        ["UNREGISTER e#ephemeral c\n", "UNREGISTER e#ephemeral\n"],
    ),
]


def _effective(lines: list[str]) -> list[str]:
    """The lines without a REGISTER of what is registered already (a no-op for any lookupd).
    Go nsqd sends one when a topic is created while it is still listing its topics for a fresh
    connection (right after IDENTIFY): the topic then comes in that list and in its own
    notification, a timing race in Go nsqd, not a difference in what is registered."""
    active: set[str] = set()
    out: list[str] = []
    for line in lines:
        cmd, _, key = line.partition(" ")
        if cmd == "REGISTER":
            if key in active:
                continue
            active.add(key)
        elif cmd == "UNREGISTER":
            active.discard(key)
        out.append(line)
    return out


def record_nsqd(kind: str, data_path: Path) -> dict[str, Any]:
    """Drive one nsqd against a Recorder: IDENTIFY, NSQD_STEPS, then the lookupd drops the
    connection and two topics are created (Go loses the command sent on the dead connection;
    the next one reconnects). Returns what was seen, ports named."""
    rec = Recorder()
    nsqd = None
    seen: dict[str, Any] = {}
    try:
        nsqd = _start_nsqd(
            kind, data_path, f"--lookupd-tcp-address={rec.address}", "--broadcast-address=127.0.0.1"
        )

        def wait(pred: Callable[[], Any], what: str) -> None:
            wait_for(pred, timeout=20, what=f"{kind} nsqd: {what}")

        wait(lambda: rec.lines(0) == ["IDENTIFY\n"], "IDENTIFY")
        seen["magic"] = rec.items[0][0]
        body = rec.items[0][2][1]
        body = body.replace(b'"tcp_port":%d' % nsqd.tcp_port, b'"tcp_port":<TCP>')
        body = body.replace(b'"http_port":%d' % nsqd.http_port, b'"http_port":<HTTP>')
        seen["identify body"] = body
        for i, (posts, lines) in enumerate(NSQD_STEPS):
            before = len(_effective(rec.lines(0)))
            for p in posts:
                _post(nsqd, p)
            n = before + len(lines)
            wait(lambda n=n: len(_effective(rec.lines(0))) >= n, f"step {i} {posts}")
            seen[f"step {i} {posts}"] = sorted(_effective(rec.lines(0))[before:])
        rec.drop(0)
        _post(nsqd, "/topic/create?topic=t4")
        _post(nsqd, "/topic/create?topic=t5")
        state = {"REGISTER t1\n", "REGISTER t4\n", "REGISTER t5\n"}
        wait(lambda: state <= set(rec.lines(1)), "reconnect with the whole state")
        seen["reconnect magic"] = rec.items[1][0]
        seen["reconnect first line"] = rec.lines(1)[0]
        # What the new connection leaves registered: nsqpy-d pipelines its commands, so a
        # command the lookupd answered but nsqpy-d had not read the answer of when the
        # connection dropped can come once more after the state (docs/compatibility.md); a
        # lookupd ends in the same registrations either way.
        registered: set[str] = set()
        for line in rec.lines(1)[1:]:
            cmd, _, key = line.partition(" ")
            if cmd == "REGISTER":
                registered.add(line)
            elif cmd == "UNREGISTER":
                registered.discard("REGISTER " + key)
        seen["reconnect registrations"] = sorted(registered)
        seen["connections"] = len(rec.conns)
        rc = nsqd.stop()
        assert rc == 0, nsqd.log_text()[-3000:]
    finally:
        if nsqd is not None and nsqd.alive():
            nsqd.stop()
        rec.close()
    return seen


def test_nsqpy_d_sends_what_go_nsqd_sends(go_bins, tmp_path: Path) -> None:
    """The exact bytes Go nsqd sends a lookupd (IDENTIFY body, REGISTER/UNREGISTER lines per
    topic and channel change, whole state on reconnect), and nsqpy-d sends the same."""
    want = record_nsqd("go", tmp_path / "go")
    assert want["magic"] == ("magic", b"  V1")
    host = socket.gethostname().encode()
    assert want["identify body"] == (
        b'{"broadcast_address":"127.0.0.1","hostname":"' + host + b'","http_port":<HTTP>,'
        b'"tcp_port":<TCP>,"version":"1.3.0"}'
    )
    assert want["reconnect registrations"] == ["REGISTER t1\n", "REGISTER t4\n", "REGISTER t5\n"]
    got = record_nsqd("nsqpy", tmp_path / "nsqpy")
    # One deliberate addition: nsqpy-d's node id (docs/operations/index.md), a key Go's
    # nsqlookupd ignores (test_go_lookupd_takes_nsqpy_d below); the rest is byte for byte.
    body = got["identify body"]
    assert re.search(rb',"node_id":\d+,', body), body
    got["identify body"] = re.sub(rb'"node_id":\d+,', b"", body)
    diffs = [
        f"{k}:\n  Go    {want[k]!r}\n  nsqpy {got.get(k)!r}" for k in want if got.get(k) != want[k]
    ]
    assert not diffs, "\n".join(diffs)


def test_unix_socket_listeners_match_go_nsqd(tmp_path):
    """--tcp-address/--http-address as socket paths (nsqd's util.TypeOfAddr) on both daemons:
    the same /info (ports -1), the same PUB reply over the TCP socket, the same listening
    lines, and the socket files gone after SIGTERM."""
    import sys

    from support.unixsock import start_on_unix_sockets, unix_http, unix_pub

    results = {}
    for name, cmd in (("go", [gobin.require("nsqd")]), ("py", [sys.executable, "-m", "nsqpy"])):
        d = tmp_path / name
        d.mkdir()
        p = start_on_unix_sockets(cmd, d)
        if name == "go":
            gobin.wait_signal_handlers(p.proc.pid)
        try:
            code, body = unix_http(f"{d}/http.sock", "GET", "/info")
            info = json.loads(body)
            info.pop("start_time")
            pub = unix_pub(f"{d}/tcp.sock", b"ux", b"hi")
        finally:
            returncode = p.stop(15)
        err = p.log_text()
        lines = sorted(  # Go logs each closing line from its own goroutine: any order
            re.sub(r"^\[nsqd\] \S+ \S+ ", "", ln).replace(str(d), "D")
            for ln in err.splitlines()
            if "listening on" in ln or "closing D" in ln.replace(str(d), "D")
        )
        gone = not (d / "tcp.sock").exists() and not (d / "http.sock").exists()
        results[name] = (code, info, pub, lines, gone, returncode)
    assert results["py"] == results["go"]
    assert results["go"][1]["tcp_port"] == -1 and results["go"][4]
