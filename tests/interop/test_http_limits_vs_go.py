"""Request heads at and over net/http's limit, side by side with Go nsqd 1.3.

net/http reads at most MaxHeaderBytes (1 MiB) plus 4096 bytes of a request head; past that it
answers ``431 Request Header Fields Too Large`` (text/plain, ``Connection: close``, the status
as body) without reading the rest, closes its write side and drops what still comes. The same
holds for an over-long request target: the request line is part of the head (Go never answers
414). Under the limit a megabyte header value or tens of thousands of header lines are a valid
request. One Go nsqd and one nsqpy-d (module scope) get the same bytes on fresh connections;
the answers must be equal byte for byte (the Date line aside).

Needs the Go binaries (tests/support/gobin.py); skips without them.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import gobin
from support.daemons import Daemon

pytestmark = pytest.mark.timeout(120)

LIMIT = (1 << 20) + 4096  # net/http's initialReadLimitSize with the default MaxHeaderBytes


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """(Go nsqd, nsqpy-d)."""
    gobin.require("nsqd")
    base: Path = tmp_path_factory.mktemp("httplimits")
    go = gobin.start_go_nsqd(base / "go")
    try:
        py = Daemon([], base / "py")
    except BaseException:
        go.stop()
        raise
    yield go, py
    assert (go.stop(), py.stop()) == (0, 0), (go.log_text()[-2000:], py.log_text()[-2000:])


def _answer(daemon: Any, raw: bytes) -> bytes:
    """Send ``raw`` (the peer may stop reading part way) and read until the server closes."""
    sock = socket.create_connection(("127.0.0.1", daemon.http_port), timeout=20)
    try:
        try:
            sock.sendall(raw)
        except OSError:
            pass  # the server answered and stopped reading before all of it was sent
        out = b""
        while True:
            try:
                more = sock.recv(65536)
            except ConnectionResetError:
                return out + b"<reset>"
            if not more:
                return re.sub(rb"\r\nDate: [^\r]*", b"", out)
            out += more
    finally:
        sock.close()


def _head_of(size: int, line: bytes = b"GET /ping HTTP/1.1\r\n") -> bytes:
    """A head of exactly ``size`` bytes (blank line included), padded by one X-Pad header."""
    fixed = line + b"Host: x\r\nConnection: close\r\nX-Pad: \r\n\r\n"
    return fixed[:-4] + b"a" * (size - len(fixed)) + b"\r\n\r\n"


HEADS = {
    "at-the-limit": _head_of(LIMIT),
    "one-over": _head_of(LIMIT + 1),
    "two-mib-value": _head_of(2 << 20),
    "two-mib-target": b"GET /" + b"p" * (2 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "one-mib-target": b"GET /" + b"p" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n"
    b"Connection: close\r\n\r\n",
    "no-line-end": b"GET /ping HTTP/1.1\r\nHost: x\r\nX-J: " + b"j" * (LIMIT + 100),
    "many-lines": b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    + b"".join(b"X-H%d: v\r\n" % i for i in range(40_000))
    + b"\r\n",
    "too-many-lines": b"GET /ping HTTP/1.1\r\nHost: x\r\n"
    + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 30) for i in range(40_000))
    + b"\r\n",
    "cookies": b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: "
    + b"; ".join(b"c%d=v" % i for i in range(20_000))
    + b"\r\n\r\n",
    "bad-method": b"G(T /ping HTTP/1.1\r\nHost: x\r\n\r\n",
    "long-method": b"A" * 100 + b" /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "close-in-a-list": b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_head_limits_answered_as_go_nsqd(pair: tuple[Any, Any], name: str) -> None:
    go, py = pair
    raw = HEADS[name]
    want = _answer(go, raw)
    assert _answer(py, raw) == want
    if name in ("one-over", "two-mib-value", "two-mib-target", "no-line-end", "too-many-lines"):
        text = b"431 Request Header Fields Too Large"
        assert want == (
            b"HTTP/1.1 " + text + b"\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Connection: close\r\n\r\n" + text
        )
