"""nsqpy-lookupd's cached /lookup answers and its lines at a stop, on the real process.

Each change a peer or an HTTP client makes shows in the next /lookup (the answer is cached per
topic until a change: nsqpy/lookupd/registration_db.py); at SIGTERM every connected peer's
registrations are logged as left, one line each, as Go nsqlookupd 1.3 logs them
(lookup_protocol_v1.go IOLoop's end), and each listener's "closing" line."""

from __future__ import annotations

import json
import re
import socket
import struct
import time

from support.daemons import Lookupd


class Peer:
    """A simulated nsqd on the V1 protocol, identified as ``name``:``http_port``."""

    def __init__(self, lk: Lookupd, name: str, http_port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", lk.tcp_port), timeout=5)
        body = json.dumps(
            {"broadcast_address": name, "tcp_port": 4150, "http_port": http_port, "version": "1"}
        ).encode()
        self.sock.sendall(b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        self.buf = b""
        self.read()

    def read(self) -> bytes:
        while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack(">i", self.buf[:4])[0]:
            chunk = self.sock.recv(65536)
            assert chunk, "closed by nsqpy-lookupd"
            self.buf += chunk
        (n,) = struct.unpack(">i", self.buf[:4])
        data, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
        return data

    def cmds(self, *lines: bytes) -> None:
        self.sock.sendall(b"".join(line + b"\n" for line in lines))
        assert [self.read() for _ in lines] == [b"OK"] * len(lines)


def lookup(lk: Lookupd, topic: str) -> tuple[int, list[str], list[str]]:
    code, body, _ = lk.http("GET", f"/lookup?topic={topic}")
    if code != 200:
        return code, [], []
    data = json.loads(body)
    return code, data["channels"], [p["broadcast_address"] for p in data["producers"]]


def test_lookupd_lookup_follows_every_change(lookupd) -> None:
    lk = lookupd
    a, b = Peer(lk, "a", 1001), Peer(lk, "b", 1002)
    a.cmds(b"REGISTER t", b"REGISTER t c1")
    assert lookup(lk, "t") == (200, ["c1"], ["a"])
    assert lookup(lk, "t") == (200, ["c1"], ["a"])  # the cached answer
    b.cmds(b"REGISTER t c2")
    assert lookup(lk, "t") == (200, ["c1", "c2"], ["a", "b"])
    b.cmds(b"UNREGISTER t c2")
    assert lookup(lk, "t") == (200, ["c1", "c2"], ["a", "b"])  # Go keeps an empty channel
    b.cmds(b"UNREGISTER t")
    assert lookup(lk, "t") == (200, ["c1", "c2"], ["a"])
    assert lk.http("POST", "/channel/create?topic=t&channel=c3")[0] == 200
    assert lookup(lk, "t") == (200, ["c1", "c2", "c3"], ["a"])
    assert lk.http("POST", "/channel/delete?topic=t&channel=c2")[0] == 200
    assert lookup(lk, "t") == (200, ["c1", "c3"], ["a"])
    b.cmds(b"REGISTER t")
    assert lk.http("POST", "/topic/tombstone?topic=t&node=a:1001")[0] == 200
    assert lookup(lk, "t") == (200, ["c1", "c3"], ["b"])
    b.sock.close()  # a disconnect leaves every registration at once
    deadline = time.monotonic() + 5
    while lookup(lk, "t")[2] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lookup(lk, "t") == (200, ["c1", "c3"], [])
    assert lk.http("POST", "/topic/delete?topic=t")[0] == 200
    assert lookup(lk, "t") == (404, [], [])
    assert lk.http("POST", "/topic/create?topic=t")[0] == 200
    assert lookup(lk, "t") == (200, [], [])  # a's producer left with the deleted registration
    a.cmds(b"REGISTER t")
    assert lookup(lk, "t") == (200, [], ["a"])


def test_lookupd_stop_logs_what_go_logs(lookupd_factory) -> None:
    lk = lookupd_factory()
    peers = [Peer(lk, f"p{i}", 2000 + i) for i in range(3)]
    for p in peers:
        p.cmds(*(b"REGISTER t%d c" % j for j in range(50)))
    deadline = time.monotonic() + 5  # the lines so far reach the test's reader thread
    while sum(" REGISTER " in ln for ln in lk.lines) < 3 * 101 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = len(lk.lines)
    assert lk.stop() == 0
    lines = [re.sub(r"^\[nsqlookupd\] \S+ \S+ ", "", ln) for ln in lk.lines[before:]]
    unregister = [ln for ln in lines if " UNREGISTER " in ln]
    assert len(unregister) == 3 * (1 + 50 + 50)  # client, topics, channels of each peer
    assert len(set(unregister)) == len(unregister)
    assert sum("exiting ioloop" in ln for ln in lines) == 3
    addrs = {ln.split("(")[1].split(")")[0] for ln in unregister}
    assert len(addrs) == 3
    for addr in addrs:
        assert f"INFO: DB: client({addr}) UNREGISTER category:channel key:t7 subkey:c" in lines
        assert f"INFO: DB: client({addr}) UNREGISTER category:topic key:t7 subkey:" in lines
        assert f"INFO: DB: client({addr}) UNREGISTER category:client key: subkey:" in lines
    assert f"INFO: TCP: closing 127.0.0.1:{lk.tcp_port}" in lines
    assert f"INFO: HTTP: closing 127.0.0.1:{lk.http_port}" in lines
    assert len(lines) == len(unregister) + 3 + 2
