"""One HTTP request and its answer as the daemons' handlers see them, and Go's URL decoding.

Strategy: plain data, no I/O. A Request is built by the server (http.server) from h11's event
and carries what net/http's Request gives nsqd's handlers: the decoded path, the raw query (Go's
URL.RawQuery, parsed on demand by parse_go_query as url.ParseQuery does), the headers as h11
lowers them, the body read so far and the route's named path parts. A Response is a status, body
bytes and the handler's own headers; the server adds Date, Content-Length and a sniffed
Content-Type as net/http does. Handlers are plain functions of a Request returning a Response,
or coroutines for the few that wait on something (Handler, HandlerResult)."""

from __future__ import annotations

import binascii
from collections.abc import Awaitable, Callable, Sequence

JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"


class Request:
    """One request as a handler sees it.

    ``path`` is the decoded URL path, ``raw_query`` the query as sent (after the first ``?``,
    ``has_query`` telling whether there was one), ``body`` what was read of the body (at most the
    route's body_limit + 1 bytes, or b"" when ``content_length`` alone exceeds it), ``params``
    the route's named path parts, ``secure`` True on the HTTPS listener."""

    __slots__ = (
        "method",
        "path",
        "raw_query",
        "has_query",
        "headers",
        "content_length",
        "chunked",
        "body",
        "params",
        "secure",
    )

    def __init__(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[bytes, bytes]] = (),
        secure: bool = False,
    ) -> None:
        self.method = method
        if target[:1] != "/" and "://" in target:
            # absolute-form ("http://host/path?q"): net/http routes on its path
            rest = target.partition("://")[2]
            cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
            target = rest[cut:]
            if target[:1] != "/":
                target = "/" + target
        raw_path, q, self.raw_query = target.partition("?")
        self.has_query = bool(q)
        self.path = _path_unescape(raw_path)
        self.headers = headers
        self.content_length: int | None = None
        self.chunked = False  # a body of unknown length (Transfer-Encoding)
        for name, value in headers:
            if name == b"content-length":
                self.content_length = int(value)
            elif name == b"transfer-encoding":
                self.chunked = True
        self.body = b""
        self.params: dict[str, str] = {}
        self.secure = secure

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        key = name.lower().encode()
        for k, v in self.headers:
            if k == key:
                return v.decode("latin-1")
        return None


class Response:
    """An answer: status, body bytes and the handler's headers (canonical names, as Go's
    Header.Set writes them). Content-Length, Date and a sniffed Content-Type are added when sent."""

    __slots__ = ("status", "body", "headers")

    def __init__(
        self, status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers if headers is not None else {}


HandlerResult = Response | Awaitable[Response]
Handler = Callable[[Request], HandlerResult]


# ---------------------------------------------------------------- Go's URL decoding


_HEX = "0123456789abcdefABCDEF"


def _unescape(s: str, plus_is_space: bool) -> str:
    """``%XX`` as a byte (and ``+`` as a space in a query); ValueError on a bad escape.

    In C, whatever the size: ``%XX`` is quoted-printable's ``=XX`` once the literal ``=`` (and,
    in a query, ``+``) are written as escapes themselves, so binascii.a2b_qp decodes it (a
    megabyte of path in a few ms, where a byte loop took a second). Each well-formed escape
    shortens the text by two bytes and a malformed one by fewer (a2b_qp keeps or drops it;
    a ``%`` before CR or LF, its soft line break, is sent to the slow path first), so the
    length tells whether all were well-formed; if not, _unescape_bytewise names the bad one."""
    raw = s.encode("utf-8", "surrogateescape")
    if (b"\r" in raw or b"\n" in raw) and (b"%\r" in raw or b"%\n" in raw):  # memchr first
        return _unescape_bytewise(s, plus_is_space)
    raw = raw.replace(b"=", b"=3D")
    if plus_is_space:
        raw = raw.replace(b"+", b"=20")
    raw = raw.replace(b"%", b"=")
    out = binascii.a2b_qp(raw)
    if len(raw) - len(out) != 2 * raw.count(b"="):
        return _unescape_bytewise(s, plus_is_space)  # raises, naming the escape
    return out.decode("utf-8", "surrogateescape")


def _unescape_bytewise(s: str, plus_is_space: bool) -> str:
    """_unescape one byte at a time: the ValueError names the first bad escape as Go does."""
    out = bytearray()
    raw = s.encode("utf-8", "surrogateescape")
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == 0x25:  # %
            hx = raw[i + 1 : i + 3].decode("latin-1")
            if len(hx) < 2 or hx[0] not in _HEX or hx[1] not in _HEX:
                raise ValueError(f'invalid URL escape "%{hx}"')
            out.append(int(hx, 16))
            i += 3
        else:
            out.append(0x20 if c == 0x2B and plus_is_space else c)
            i += 1
    return out.decode("utf-8", "surrogateescape")


def _query_unescape(s: str) -> str:
    """Go's url.QueryUnescape: ``+`` is a space, ``%XX`` a byte; ValueError on a bad escape."""
    if "%" not in s:
        return s.replace("+", " ")
    return _unescape(s, True)


def _path_unescape(s: str) -> str:
    """A request path decoded (``%XX`` as bytes, ``+`` kept); a bad escape is left as sent."""
    if "%" not in s:
        return s
    try:
        return _unescape(s, False)
    except ValueError:
        return s


def parse_go_query(raw_query: str) -> dict[str, list[str]]:
    """Go's url.ParseQuery of a raw query string: key -> values in order.

    Raises ValueError where Go returns an error (a ``;`` in a pair, a bad ``%`` escape): NSQ's
    handlers answer that with 400 INVALID_REQUEST.
    """
    values: dict[str, list[str]] = {}
    error: ValueError | None = None
    for pair in raw_query.split("&"):
        if not pair:
            continue
        if ";" in pair:
            error = error or ValueError("invalid semicolon separator in query")
            continue
        key, _, value = pair.partition("=")
        try:
            k, v = _query_unescape(key), _query_unescape(value)
        except ValueError as e:
            error = error or e
            continue
        values.setdefault(k, []).append(v)
    if error is not None:
        raise error
    return values


def first_values(raw_query: str) -> dict[str, str]:
    """parse_go_query's first value of each key (Go's r.URL.Query().Get); ValueError as it."""
    return {k: v[0] for k, v in parse_go_query(raw_query).items()}
