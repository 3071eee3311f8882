"""nsqpy-lookupd end to end: the real process on loopback, raw sockets and HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from support.daemons import DAEMON_CWD, Lookupd

from nsqpy.build_info import build_name
from nsqpy.options import NSQPY_VERSION
from nsqpy.testing import wait_for

NSQD_BODY = {
    "broadcast_address": "nsqd1",
    "hostname": "nsqd1.local",
    "tcp_port": 4150,
    "http_port": 4151,
    "version": "1.3.0",
}


def frame(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def identify_cmd(body: dict | bytes) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(raw)) + raw


class Conn:
    """A raw "  V1" connection: replies are [4-byte size][data]."""

    def __init__(self, lk: Lookupd, magic: bytes = b"  V1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", lk.tcp_port), timeout=5)
        self.buf = b""
        if magic:
            self.sock.sendall(magic)

    @property
    def local(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, timeout: float = 5) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">i", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    data, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return data
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by server")
            self.buf += chunk

    def read_raw_until_close(self, timeout: float = 5) -> bytes:
        """Every byte until the server closes (AssertionError if it does not)."""
        deadline = time.monotonic() + timeout
        out = self.buf
        self.buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"not closed; got {out!r}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return out
            if not chunk:
                return out
            out += chunk

    def cmd(self, line: bytes) -> bytes:
        self.send(line + b"\n")
        return self.read()

    def identify(self, **over: object) -> dict:
        self.send(identify_cmd({**NSQD_BODY, **over}))
        return json.loads(self.read())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[Lookupd]:
    """One nsqpy-lookupd for the many error cases (each uses its own connections)."""
    lk = Lookupd([])
    yield lk
    assert lk.stop() == 0


def expect_fatal(c: Conn, data: bytes, text: bytes) -> None:
    c.send(data)
    assert c.read_raw_until_close() == frame(text)


# ---------------------------------------------------------------------------------- TCP


def test_identify_register_ping_exact_bytes(lookupd_factory) -> None:
    lk = lookupd_factory("--broadcast-address=lk.example")
    c = Conn(lk)
    c.send(b"PING\n")
    assert c.read() == b"OK"  # PING before IDENTIFY is fine
    c.send(identify_cmd(NSQD_BODY))
    reply = c.read()
    expected = {
        "broadcast_address": "lk.example",
        "hostname": socket.gethostname(),
        "http_port": lk.http_port,
        "tcp_port": lk.tcp_port,
        "version": "1.3.0",
    }
    # json.Marshal of a map: compact, keys sorted
    assert reply == json.dumps(expected, separators=(",", ":")).encode()
    c.send(b"REGISTER t1 c1\nREGISTER t1\nUNREGISTER t1 c1\nPING\n")
    raw = b""
    while len(raw) < 24:
        raw += c.sock.recv(100)
    assert raw == frame(b"OK") * 4
    # whitespace is trimmed as strings.TrimSpace does, \r\n included
    assert c.cmd(b"  REGISTER t2 c2\r") == b"OK"
    assert lk.get_json("/channels?topic=t2") == {"channels": ["c2"]}
    c.close()


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"BLAH\n", b"E_INVALID invalid command BLAH"),
        (b"\n", b"E_INVALID invalid command "),
        (b"ping\n", b"E_INVALID invalid command ping"),
        (b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
        (b"UNREGISTER t\n", b"E_INVALID client must IDENTIFY"),
        (identify_cmd(b"{bad"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (identify_cmd(b""), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (identify_cmd(b"[1]"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (
            identify_cmd({**NSQD_BODY, "tcp_port": "4150"}),
            b"E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            identify_cmd({**NSQD_BODY, "http_port": 4151.5}),
            b"E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (identify_cmd(b"null"), b"E_BAD_BODY IDENTIFY missing fields"),
        (identify_cmd({**NSQD_BODY, "version": ""}), b"E_BAD_BODY IDENTIFY missing fields"),
        (identify_cmd({**NSQD_BODY, "tcp_port": 0}), b"E_BAD_BODY IDENTIFY missing fields"),
        (
            b"IDENTIFY\n" + struct.pack(">i", 100 * 1024 * 1024),
            b"E_BAD_BODY IDENTIFY invalid body size 104857600",
        ),
        (b"IDENTIFY\n" + struct.pack(">i", -1), b"E_BAD_BODY IDENTIFY invalid body size -1"),
        (b"X" * 20000, b"E_INVALID command line longer than 16384 bytes"),
    ],
)
def test_errors_are_fatal_and_isolated(shared, data: bytes, text: bytes) -> None:
    lookupd = shared
    other = Conn(lookupd)
    other.identify()
    assert other.cmd(b"REGISTER keep") == b"OK"
    c = Conn(lookupd)
    expect_fatal(c, data, text)
    c.close()
    # the other connection is untouched
    assert other.cmd(b"PING") == b"OK"
    assert lookupd.get_json("/lookup?topic=keep")["producers"][0]["broadcast_address"] == "nsqd1"
    other.close()


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (b"REGISTER", b"E_INVALID REGISTER insufficient number of params"),
        (b"UNREGISTER", b"E_INVALID UNREGISTER insufficient number of params"),
        (b"REGISTER bad*topic", b"E_BAD_TOPIC REGISTER topic name 'bad*topic' is not valid"),
        (b"REGISTER t bad!ch", b"E_BAD_CHANNEL REGISTER channel name 'bad!ch' is not valid"),
        (
            b"UNREGISTER " + b"x" * 65,
            b"E_BAD_TOPIC UNREGISTER topic name '" + b"x" * 65 + b"' is not valid",
        ),
        (b"REGISTER  t", b"E_BAD_TOPIC REGISTER topic name '' is not valid"),
        (b"IDENTIFY", b"E_INVALID cannot IDENTIFY again"),
    ],
)
def test_identified_errors(shared, line: bytes, text: bytes) -> None:
    lookupd = shared
    c = Conn(lookupd)
    c.identify()
    expect_fatal(c, line + b"\n", text)
    # the producer left with the connection
    wait_for(lambda: lookupd.get_json("/nodes") == {"producers": []}, 5, what="node gone")


def test_bad_magic_and_garbage(lookupd) -> None:
    c = Conn(lookupd, magic=b"  V2")
    assert c.read_raw_until_close() == frame(b"E_BAD_PROTOCOL")
    g = Conn(lookupd, magic=b"")
    g.send(os.urandom(3000))
    assert g.read_raw_until_close().startswith(frame(b"E_BAD_PROTOCOL"))
    # a connection that closes before the magic, and one closing mid-IDENTIFY
    Conn(lookupd, magic=b" ").close()
    m = Conn(lookupd)
    m.send(b"IDENTIFY\n\x00\x00")
    m.sock.shutdown(socket.SHUT_WR)
    assert m.read_raw_until_close() == frame(b"E_BAD_BODY IDENTIFY failed to read body size")
    m2 = Conn(lookupd)
    m2.send(b"IDENTIFY\n\x00\x00\x00\x10{}")
    m2.sock.shutdown(socket.SHUT_WR)
    assert m2.read_raw_until_close() == frame(b"E_BAD_BODY IDENTIFY failed to read body")
    ok = Conn(lookupd)
    assert ok.cmd(b"PING") == b"OK"
    assert lookupd.alive()


def test_identify_json_is_decoded_as_go_does(lookupd) -> None:
    c = Conn(lookupd)
    body = (
        b'{"BROADCAST_ADDRESS":"x","broadcast_address":"nsqd9","tcp_port":1,"TCP_Port":4150,'
        b'"http_port":4151,"version":"1.3.0","hostname":null,"extra":{"a":[1]},'
        b'"remote_address":"spoofed","topology_zone":"z1"}'
    )
    c.send(identify_cmd(body))
    c.read()
    assert c.cmd(b"REGISTER t") == b"OK"
    (p,) = lookupd.get_json("/lookup?topic=t")["producers"]
    assert p == {
        "remote_address": c.local,
        "hostname": "",
        "broadcast_address": "nsqd9",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
    }  # v1.3.0 has no topology fields: "topology_zone" is ignored


def test_split_writes_and_pipelining(lookupd) -> None:
    c = Conn(lookupd, magic=b"")
    data = b"  V1" + identify_cmd(NSQD_BODY) + b"REGISTER a b\nPING\n"
    for i in range(len(data)):
        c.send(data[i : i + 1])
    assert json.loads(c.read())["version"] == "1.3.0"
    assert c.read() == b"OK"
    assert c.read() == b"OK"
    # many commands in one write
    c.send(b"PING\n" * 5000)
    for _ in range(5000):
        assert c.read() == b"OK"


def test_disconnect_removes_producer_at_once(lookupd) -> None:
    c = Conn(lookupd)
    c.identify()
    c.cmd(b"REGISTER t c")
    c.cmd(b"REGISTER e#ephemeral x#ephemeral")
    assert len(lookupd.get_json("/lookup?topic=t")["producers"]) == 1
    c.close()
    wait_for(
        lambda: lookupd.get_json("/lookup?topic=t")["producers"] == [], 5, what="producer gone"
    )
    assert lookupd.get_json("/nodes") == {"producers": []}
    assert lookupd.get_json("/debug") == {}
    # registrations stay, #ephemeral ones too (nsqlookupd 1.3)
    assert lookupd.get_json("/topics") == {"topics": ["e#ephemeral", "t"]}
    assert lookupd.get_json("/lookup?topic=t") == {"channels": ["c"], "producers": []}


def test_unregister_ephemeral(lookupd) -> None:
    c = Conn(lookupd)
    c.identify()
    c.cmd(b"REGISTER t#ephemeral c#ephemeral")
    c.cmd(b"REGISTER t#ephemeral c2")
    assert c.cmd(b"UNREGISTER t#ephemeral c#ephemeral") == b"OK"
    assert lookupd.get_json("/channels?topic=t%23ephemeral") == {"channels": ["c2"]}
    assert c.cmd(b"UNREGISTER t#ephemeral") == b"OK"
    assert lookupd.get_json("/topics") == {"topics": []}
    assert lookupd.get_json("/channels?topic=t%23ephemeral") == {"channels": ["c2"]}


def test_inactive_producer_timeout(lookupd_factory) -> None:
    lk = lookupd_factory("--inactive-producer-timeout=1s")
    idle, pinger = Conn(lk), Conn(lk)
    idle.identify(broadcast_address="idle")
    pinger.identify(broadcast_address="pinger")
    idle.cmd(b"REGISTER t")
    pinger.cmd(b"REGISTER t")

    def active() -> list[str]:
        pinger.cmd(b"PING")
        return [p["broadcast_address"] for p in lk.get_json("/lookup?topic=t")["producers"]]

    assert sorted(active()) == ["idle", "pinger"]
    wait_for(lambda: active() == ["pinger"], 5, what="idle producer to expire")
    nodes = lk.get_json("/nodes")["producers"]
    assert [n["broadcast_address"] for n in nodes] == ["pinger"]
    # it is hidden, not removed: a PING brings it back
    assert idle.cmd(b"PING") == b"OK"
    assert sorted(active()) == ["idle", "pinger"]


def test_tombstone(lookupd_factory) -> None:
    lk = lookupd_factory("--tombstone-lifetime=1s")
    a, b = Conn(lk), Conn(lk)
    a.identify(broadcast_address="a", http_port=1001)
    b.identify(broadcast_address="b", http_port=1002)
    a.cmd(b"REGISTER t")
    a.cmd(b"REGISTER u")
    b.cmd(b"REGISTER t")
    code, body, _ = lk.http("POST", "/topic/tombstone?topic=t&node=a:1001")
    assert (code, body) == (200, b"")
    got = lk.get_json("/lookup?topic=t")["producers"]
    assert [p["broadcast_address"] for p in got] == ["b"]
    assert [p["broadcast_address"] for p in lk.get_json("/lookup?topic=u")["producers"]] == ["a"]
    nodes = {n["broadcast_address"]: n for n in lk.get_json("/nodes")["producers"]}
    assert nodes["a"]["topics"] == ["t", "u"] and nodes["a"]["tombstones"] == [True, False]
    debug = lk.get_json("/debug")
    entry = next(e for e in debug["topic:t:"] if e["broadcast_address"] == "a")
    assert entry["tombstoned"] is True and entry["tombstoned_at"] > 0
    # after the lifetime it is visible again
    wait_for(
        lambda: len(lk.get_json("/lookup?topic=t")["producers"]) == 2, 5, what="tombstone expiry"
    )
    assert lk.http("POST", "/topic/tombstone?topic=t")[:2] == (
        400,
        b'{"message":"MISSING_ARG_NODE"}',
    )
    assert lk.http("POST", "/topic/tombstone?node=a:1")[:2] == (
        400,
        b'{"message":"MISSING_ARG_TOPIC"}',
    )


# ---------------------------------------------------------------------------------- HTTP


def test_http_shapes(lookupd) -> None:
    lk = lookupd
    code, body, headers = lk.http("GET", "/ping")
    assert (code, body) == (200, b"OK")
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert "X-Nsq-Content-Type" not in headers
    code, body, headers = lk.http("GET", "/info")
    assert (code, body) == (200, b'{"version":"1.3.0"}')
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"  # Go's canonical case
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert lk.http("GET", "/topics")[1] == b'{"topics":[]}'
    assert lk.http("GET", "/nodes")[1] == b'{"producers":[]}'
    assert lk.http("GET", "/debug")[1] == b"{}"
    assert lk.http("GET", "/channels?topic=x")[1] == b'{"channels":[]}'

    c = Conn(lk)
    c.identify()
    c.cmd(b"REGISTER t c")
    code, body, _ = lk.http("GET", "/lookup?topic=t")
    assert code == 200
    assert body == (
        b'{"channels":["c"],"producers":[{"remote_address":"'
        + c.local.encode()
        + b'","hostname":"nsqd1.local","broadcast_address":"nsqd1","tcp_port":4150,'
        b'"http_port":4151,"version":"1.3.0"}]}'
    )
    node = lk.get_json("/nodes")["producers"][0]
    assert list(node) == [
        "remote_address",
        "hostname",
        "broadcast_address",
        "tcp_port",
        "http_port",
        "version",
        "tombstones",
        "topics",
    ]
    assert node["topics"] == ["t"] and node["tombstones"] == [False]
    debug = lk.get_json("/debug")
    assert list(debug) == ["channel:t:c", "client::", "topic:t:"]
    entry = debug["client::"][0]
    assert list(entry) == sorted(entry)
    assert entry["id"] == c.local
    assert entry["tombstoned"] is False
    assert entry["tombstoned_at"] == -6795364578871345152  # Go's zero time in UnixNano
    assert abs(entry["last_update"] - time.time_ns()) < 60 * 10**9


def test_http_create_delete(lookupd) -> None:
    lk = lookupd

    def post(path: str) -> tuple[int, bytes]:
        code, body, _ = lk.http("POST", path)
        return code, body

    assert post("/topic/create?topic=b") == (200, b"")
    assert post("/topic/create?topic=a") == (200, b"")
    assert post("/topic/create") == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert post("/topic/create?topic=a*") == (400, b'{"message":"INVALID_ARG_TOPIC"}')
    assert lk.get_json("/topics") == {"topics": ["a", "b"]}
    assert lk.get_json("/lookup?topic=a") == {"channels": [], "producers": []}
    assert post("/channel/create?topic=c&channel=z") == (200, b"")
    assert post("/channel/create?topic=c&channel=y") == (200, b"")
    assert post("/channel/create?topic=c") == (400, b'{"message":"MISSING_ARG_CHANNEL"}')
    assert post("/channel/create?channel=x") == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert post("/channel/create?topic=c&channel=x!") == (400, b'{"message":"INVALID_ARG_CHANNEL"}')
    assert post("/channel/create?topic=c!&channel=x") == (400, b'{"message":"INVALID_ARG_TOPIC"}')
    assert lk.get_json("/topics") == {"topics": ["a", "b", "c"]}
    assert lk.get_json("/channels?topic=c") == {"channels": ["y", "z"]}
    assert post("/channel/delete?topic=c&channel=y") == (200, b"")
    assert post("/channel/delete?topic=c&channel=y") == (404, b'{"message":"CHANNEL_NOT_FOUND"}')
    assert lk.get_json("/channels?topic=c") == {"channels": ["z"]}
    assert post("/topic/delete?topic=c") == (200, b"")
    assert post("/topic/delete?topic=never") == (200, b"")
    assert post("/topic/delete") == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert lk.get_json("/topics") == {"topics": ["a", "b"]}
    assert lk.get_json("/channels?topic=c") == {"channels": []}
    # first value of a repeated key; + and %XX decoded as Go's url.ParseQuery
    assert post("/topic/create?topic=d%23ephemeral&topic=zz") == (200, b"")
    assert lk.get_json("/topics") == {"topics": ["a", "b", "d#ephemeral"]}
    assert lk.http("GET", "/lookup?topic=nope")[:2] == (404, b'{"message":"TOPIC_NOT_FOUND"}')
    assert lk.http("GET", "/lookup")[:2] == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert lk.http("GET", "/channels")[:2] == (400, b'{"message":"MISSING_ARG_TOPIC"}')
    assert lk.http("GET", "/lookup?topic=a;b")[:2] == (400, b'{"message":"INVALID_REQUEST"}')
    assert lk.http("GET", "/lookup?topic=%zz")[:2] == (400, b'{"message":"INVALID_REQUEST"}')


def test_router_behaviour(lookupd) -> None:
    lk = lookupd
    code, body, headers = lk.http("OPTIONS", "/lookup")
    assert (code, body, headers["Allow"]) == (200, b"", "GET, OPTIONS")
    code, body, headers = lk.http("POST", "/lookup")
    assert (code, body) == (405, b'{"message":"METHOD_NOT_ALLOWED"}')
    assert headers["Allow"] == "GET, OPTIONS"
    code, body, headers = lk.http("GET", "/topic/create")
    assert (code, headers["Allow"]) == (405, "OPTIONS, POST")
    code, body, headers = lk.http("GET", "/PING")
    assert (code, headers["Location"]) == (301, "/ping")
    code, body, headers = lk.http("GET", "/topics/")
    assert (code, headers["Location"]) == (301, "/topics")
    code, _, headers = lk.http("POST", "/topic/create/?topic=x")
    assert (code, headers["Location"]) == (307, "/topic/create?topic=x")
    assert lk.http("GET", "/nope")[:2] == (404, b'{"message":"NOT_FOUND"}')
    assert lk.http("GET", "/config/x")[:2] == (404, b'{"message":"NOT_FOUND"}')  # not in 1.3


# ---------------------------------------------------------------------------------- CLI


def run_cli(*args: str, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nsqpy.lookupd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=DAEMON_CWD,
    )


def test_version() -> None:
    r = run_cli("--version")
    py = ".".join(map(str, sys.version_info[:3]))
    assert r.returncode == 0
    build = build_name()  # the package's build: "-mypyc" at the end when compiled
    tag = "" if build == "pure" else f"-{build}"
    assert r.stdout == f"nsqlookupd v1.3.0 (built w/nsqpy-{NSQPY_VERSION}-python{py}{tag})\n"
    assert run_cli("-version").stdout == r.stdout
    assert run_cli("-version=true").stdout == r.stdout


def test_bad_flags() -> None:
    r = run_cli("--no-such-flag")
    assert r.returncode == 2 and "no-such-flag" in r.stderr
    r = run_cli("--tombstone-lifetime=soon")
    assert r.returncode == 2 and 'invalid value "soon" for flag -tombstone-lifetime' in r.stderr
    r = run_cli("-verbose=maybe")
    assert r.returncode == 2 and 'invalid boolean value "maybe"' in r.stderr
    r = run_cli("--tcp-address=127.0.0.1")
    assert r.returncode == 1 and "missing port in address" in r.stderr
    r = run_cli("--config=/nonexistent/lookupd.toml")
    assert r.returncode == 1 and "failed to load config file /nonexistent/lookupd.toml" in r.stderr


def test_go_flag_syntax_config_and_log_prefix(lookupd_factory, tmp_path) -> None:
    cfg = tmp_path / "lookupd.toml"
    cfg.write_text('broadcast_address = "from-config"\ntombstone_lifetime = "3s"\n')
    lk = lookupd_factory(
        "-log-prefix",
        "[LK] ",
        "-verbose",
        "-inactive-producer-timeout",
        "2m",
        f"-config={cfg}",
    )
    assert any(
        line.startswith("[LK] ") and "TCP: listening on 127.0.0.1:" in line for line in lk.lines
    )
    c = Conn(lk)
    assert c.identify()["broadcast_address"] == "from-config"


def test_port_taken_exits_1(lookupd) -> None:
    r = run_cli(f"--tcp-address={lookupd.tcp_address}", "--http-address=127.0.0.1:0")
    assert r.returncode == 1
    assert f"listen ({lookupd.tcp_address}) failed" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_0(sig) -> None:
    lk = Lookupd([])
    c = Conn(lk)
    c.identify()
    lk.proc.send_signal(sig)
    assert lk.proc.wait(10) == 0
    lk.stop()
    assert any("TCP: listening on 127.0.0.1:" in line for line in lk.lines)
    assert any("HTTP: listening on 127.0.0.1:" in line for line in lk.lines)


def test_client_not_reading_replies_does_not_stall_others(lookupd) -> None:
    flood = Conn(lookupd)
    flood.sock.setblocking(False)
    sent = 0
    chunk = b"PING\n" * 20000
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sent < 50 * len(chunk):
        try:
            sent += flood.sock.send(chunk)
        except BlockingIOError:
            break  # the daemon stopped reading it: its socket buffers are full
    other = Conn(lookupd)
    other.identify()
    assert other.cmd(b"REGISTER t") == b"OK"
    assert lookupd.get_json("/topics") == {"topics": ["t"]}
    flood.close()
    assert other.cmd(b"PING") == b"OK"


def test_json_written_as_go_does(lookupd) -> None:
    c = Conn(lookupd)
    c.send(identify_cmd({**NSQD_BODY, "hostname": "h\u00e9<&>\ud800"}))
    c.read()
    c.cmd(b"REGISTER t")
    body = lookupd.http("GET", "/lookup?topic=t")[1]
    # UTF-8 as is, HTML characters escaped, a lone surrogate decoded as U+FFFD
    assert '"hostname":"h\u00e9\\u003c\\u0026\\u003e\ufffd"'.encode() in body


def test_half_close_still_answers_every_command(lookupd) -> None:
    c = Conn(lookupd)
    c.send(identify_cmd(NSQD_BODY) + b"REGISTER t\n" + b"PING\n" * 1000 + b"IDENTIFY\n\x00")
    c.sock.shutdown(socket.SHUT_WR)
    raw = c.read_raw_until_close()
    assert raw.endswith(frame(b"OK") * 1001 + frame(b"E_INVALID cannot IDENTIFY again"))
