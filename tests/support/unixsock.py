"""nsqd on unix sockets (nsqd's util.TypeOfAddr: an address that is not host:port is a socket
path), shared by tests/daemon/test_cli.py and tests/interop/test_go_interop.py: start a daemon
with both listeners on socket files through nsqpy.testing's launcher, and talk HTTP and the V2
protocol over those files."""

from __future__ import annotations

import http.client
import socket as so
from pathlib import Path

from nsqpy.testing import DaemonProcess


def start_on_unix_sockets(cmd: list[str], d: Path, timeout: float = 15) -> DaemonProcess:
    """``cmd`` (an nsqd) on unix sockets d/tcp.sock and d/http.sock (nsqpy.testing's launcher
    reads both from its "listening on" lines); returns once its HTTP socket answers /ping."""
    p = DaemonProcess(
        [*cmd, f"--tcp-address={d}/tcp.sock", f"--http-address={d}/http.sock", f"--data-path={d}"],
        cwd=d,
        start_timeout=timeout,
    )
    assert p.addresses == {"TCP": f"{d}/tcp.sock", "HTTP": f"{d}/http.sock"}, p.addresses
    assert unix_http(f"{d}/http.sock", "GET", "/ping") == (200, b"OK")
    return p


def unix_http(path: str, method: str, url: str, body: bytes = b"") -> tuple[int, bytes]:
    """(status, body) of one HTTP request over the unix socket ``path`` (5 s timeout)."""
    s = so.socket(so.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    c = http.client.HTTPConnection("nsqd")
    c.sock = s
    c.request(method, url, body=body or None)
    r = c.getresponse()
    out = r.status, r.read()
    s.close()
    return out


def unix_pub(path: str, topic: bytes, body: bytes) -> bytes:
    """The first reply frame (up to 10 bytes) to magic + one PUB over the unix socket ``path``."""
    s = so.socket(so.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    s.sendall(b"  V2PUB " + topic + b"\n" + len(body).to_bytes(4, "big") + body)
    reply = b""
    while len(reply) < 10:
        chunk = s.recv(64)
        if not chunk:
            break
        reply += chunk
    s.close()
    return reply
