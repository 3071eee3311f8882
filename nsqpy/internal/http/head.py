"""A request head (request line and header lines) read in bounded slices, with net/http's limit.

Strategy: sans-IO, like the rest of the HTTP layer's parsing. The connection feeds bytes and
calls ``step(budget, lines)``; each call looks at whole lines only, at most about ``budget``
bytes and ``lines`` lines of them, so a head of tens of thousands of header lines, or of
megabyte values, is read in short steps over several loop passes instead of in one. Lines end
at LF with an optional CR before it; the request line and each header line are checked against
RFC 9112's grammar (the same rules h11, which frames the body, applies: token names, no
NUL/CR/LF/VT/FF in values, obs-fold joined with one space); a megabyte target or value is
checked by byte searches (memchr, translate), not by a regular expression walking it byte by
byte. A head longer than net/http's MaxHeaderBytes (1 MiB plus its 4096 bytes of slack,
Server.initialReadLimitSize) is refused with 431 as soon as that many bytes arrive without a
blank line, without looking at the rest.

Once the head is whole, ``framing()`` gives a short synthetic head carrying only what frames
the body and the connection (method, version, Host, Content-Length, Transfer-Encoding,
Connection: close, Expect: 100-continue) for h11 to read before the body; the full header list
stays here for the handlers. A request without a body needs no h11 at all:
``bodiless_keep_alive()`` says so, and what h11 would decide for it.
"""

from __future__ import annotations

import re

# net/http's MaxHeaderBytes default (1 << 20) plus the 4096 bytes it allows on top.
MAX_HEADER_BYTES = (1 << 20) + 4096

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_VERSION = re.compile(rb"HTTP/[0-9]\.[0-9]")
# bytes a header value may not hold (RFC 9112 field-value, as h11 checks it): a regular
# expression for a short value, one memchr per byte for a long one (the expression walks a
# megabyte value byte by byte: 10 ms)
_BAD_VALUE = re.compile(rb"[\x00\n\r\x0b\x0c]")
_BAD_VALUE_BYTES = (b"\x00", b"\n", b"\r", b"\x0b", b"\x0c")
_LONG_VALUE = 1024
# what a request target may hold: visible ASCII (\x21-\x7e); translate() deletes these
_VISIBLE = bytes(range(0x21, 0x7F))
_OWS = b" \t"

#: step() results: the head is whole / more bytes are needed / the budget is spent.
DONE = 0
NEED_DATA = 1
MORE = 2

# the headers h11 needs to frame a body and decide keep-alive, as passed through by framing()
_FRAMING = (b"host", b"content-length", b"transfer-encoding")


class HeadError(Exception):
    """A head net/http refuses: ``status`` is 400 or 431, ``reason`` the status line's text
    after the code (Go's StatusText, with ": missing required Host header" where Go adds it)."""

    def __init__(self, status: int, detail: str = "") -> None:
        super().__init__(detail or str(status))
        self.status = status
        self.detail = detail


class HeadReader:
    """One request head, fed bytes by ``feed`` and read by ``step``.

    After DONE: ``method`` and ``target`` (bytes as sent), ``version`` (b"1.1"), ``headers``
    ([(lower-cased name, value)] in order, obs-fold joined) and ``rest`` (the bytes after the
    head). ``step`` raises HeadError for a head net/http would refuse."""

    __slots__ = (
        "buf",
        "pos",
        "scan",
        "method",
        "target",
        "version",
        "headers",
        "rest",
        "_name",
        "_value",
        "_started",
    )

    def __init__(self, data: bytes = b"") -> None:
        self.buf = bytearray(data)
        self.pos = 0  # the start of the first line not read yet
        self.scan = 0  # where the search for the next LF goes on
        self.method = b""
        self.target = b""
        self.version = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.rest = b""
        self._name: bytes | None = None  # the header being read (obs-fold may extend it)
        self._value = b""
        self._started = False  # the request line is read

    def feed(self, data: bytes) -> None:
        """Append bytes received."""
        self.buf += data

    @property
    def pending(self) -> bool:
        """True when some bytes of a head have arrived."""
        return len(self.buf) > 0

    def step(self, budget: int, lines: int = 256) -> int:
        """Read whole lines, about ``budget`` bytes of them at most (one longer line is read
        whole) and at most ``lines`` lines: DONE, NEED_DATA or MORE (call again, at once or at
        the loop's next turn). Raises HeadError."""
        buf = self.buf
        end = self.pos + budget
        while True:
            lines -= 1
            nl = buf.find(b"\n", self.scan)
            if nl < 0:
                self.scan = len(buf)
                if len(buf) > MAX_HEADER_BYTES:
                    raise HeadError(431)
                if not self._started and buf[self.pos : self.pos + 1] and buf[self.pos] < 0x21:
                    raise HeadError(400)  # cannot be a request line
                return NEED_DATA
            if nl + 1 > MAX_HEADER_BYTES:
                raise HeadError(431)
            stop = nl - 1 if nl > self.pos and buf[nl - 1] == 0x0D else nl
            line = bytes(buf[self.pos : stop])
            self.pos = self.scan = nl + 1
            if not self._started:
                self._request_line(line)
            elif not line:
                self._finish()
                self.rest = bytes(buf[self.pos :])
                self.buf = bytearray()
                return DONE
            elif line[0] in _OWS:
                if self._name is None:
                    raise HeadError(400)  # a continuation line before any header
                self._value += b" " + line.lstrip(_OWS)
            else:
                self._finish()
                name, colon, value = line.partition(b":")
                if not colon:
                    raise HeadError(400)
                self._name = name
                self._value = value
            if self.pos >= end or lines <= 0:
                return MORE

    def _request_line(self, line: bytes) -> None:
        """``METHOD SP target SP HTTP/d.d``: a token, visible ASCII, the version."""
        parts = line.split(b" ")
        if len(parts) != 3:
            raise HeadError(400)
        method, target, version = parts
        if (
            _TOKEN.fullmatch(method) is None
            or not target
            or target.translate(None, _VISIBLE)
            or _VERSION.fullmatch(version) is None
        ):
            raise HeadError(400)
        self.method, self.target, self.version = method, target, version[5:]
        self._started = True

    def _finish(self) -> None:
        """Check and keep the header read so far, if any."""
        name = self._name
        if name is None:
            return
        self._name = None
        value = self._value.strip(_OWS)
        if _TOKEN.fullmatch(name) is None or (
            _BAD_VALUE.search(value) is not None
            if len(value) < _LONG_VALUE
            else any(b in value for b in _BAD_VALUE_BYTES)
        ):
            raise HeadError(400)
        header = (name.lower(), value)
        if header[0] == b"content-length" and header in self.headers:
            return  # a repeated equal Content-Length is one, as h11 (and Go) keep it
        self.headers.append(header)

    def framing(self) -> bytes:
        """A short head for h11 with this head's framing (see the module docstring): h11 then
        checks Host, Content-Length and Transfer-Encoding as it would in the full head."""
        method = self.method if len(self.method) <= 64 else b"GET"
        out = [method, b" / HTTP/", self.version, b"\r\n"]
        close = expect = False
        for name, value in self.headers:
            if name in _FRAMING:
                if name == b"host":
                    value = b"x"  # h11 only counts Host headers
                elif len(value) > 1024:
                    value = b"-"  # refused either way, without h11 reading a megabyte
                out += (name, b": ", value, b"\r\n")
            elif name == b"connection":
                close = close or b"close" in _tokens(value)
            elif name == b"expect":
                expect = expect or b"100-continue" in _tokens(value)
        if close:
            out.append(b"connection: close\r\n")
        if expect:
            out.append(b"expect: 100-continue\r\n")
        out.append(b"\r\n")
        return b"".join(out)

    def bodiless_keep_alive(self) -> bool | None:
        """For a head that h11, reading framing(), would take as a request without a body:
        whether the connection stays open after it (h11's rule: HTTP/1.1 without
        ``Connection: close``). None when h11 must read the framing: a Content-Length or
        Transfer-Encoding, ``Expect: 100-continue``, a version other than 1.0 and 1.1, or a
        Host count h11 refuses (none in HTTP/1.1, more than one)."""
        version = self.version
        if version != b"1.1" and version != b"1.0":
            return None
        hosts = 0
        keep_alive = version == b"1.1"
        for name, value in self.headers:
            if name == b"host":
                hosts += 1
            elif name == b"content-length" or name == b"transfer-encoding":
                return None
            elif name == b"connection":
                if b"close" in _tokens(value):
                    keep_alive = False
            elif name == b"expect" and b"100-continue" in _tokens(value):
                return None
        if hosts > 1 or (hosts == 0 and version == b"1.1"):
            return None
        return keep_alive


def _tokens(value: bytes) -> list[bytes]:
    """A comma-separated header value's elements, trimmed and lower-cased."""
    return [v.strip(_OWS).lower() for v in value.split(b",")]
