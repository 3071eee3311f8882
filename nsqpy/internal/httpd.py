"""The HTTP rules every NSQ daemon shares (nsqd, nsqlookupd) and the small server they run on.

Strategy: one owner for what Go's net/http, NSQ's internal/http_api and its router
(julienschmidt/httprouter 1.3 with HandleMethodNotAllowed) do around the handlers, so that
nsqpy-d and nsqpy-lookupd answer like nsqd and nsqlookupd for anything a handler does not decide:

- "V1" answers (http_api.RespondV1): 200 with the raw body (a str or bytes as is, None empty,
  anything else JSON as Go's encoding/json writes it); an error as {"message": "<TEXT>"} with
  its status code; every V1 answer carries `X-Nsq-Content-Type: nsq; version=1.0`, JSON ones
  `Content-Type: application/json; charset=utf-8`.
- The router: a path that differs from a route only by a trailing slash or by letter case is
  redirected (301 for GET, 307 for other methods; Go's http.Redirect body for GET); OPTIONS on a
  known path answers 200 with `Allow`; a known path with another method answers 405
  {"message":"METHOD_NOT_ALLOWED"} with `Allow`; anything else 404 {"message":"NOT_FOUND"}.
  `Allow` lists the path's methods and OPTIONS, sorted (Go's order is its map order).
- Headers as net/http writes them: the handler's sorted by name, then Date, Content-Length
  and, when the handler set none, a Content-Type sniffed from the body (text/plain for text).

The server: one asyncio.Protocol per connection; h11 (sans-IO HTTP/1.1) parses the requests,
the answers are written here (h11's writer has its own status line and header order). Keep-
alive as net/http and h11 agree (HTTP/1.1 without "Connection: close"), pipelined requests
answered in order (later ones wait in the parser, reading paused), a request's body buffered
only up to what its route reads (Route.body_limit + 1 bytes; a larger Content-Length is refused
before anything is read), net/http's 256 KiB rule for a body left unread, HTTPS through
asyncio's TLS transport, and at most _EVENTS_PER_PASS parser events per loop pass for one
connection (reading pauses while its answers wait in a full socket buffer).
Handlers are plain functions of a Request returning a Response, or coroutines for the few that
wait on something (those run as a task; the connection answers in order meanwhile).
nsqpy-admin stays on aiohttp: its adapter of these rules is httpd_aio (loaded on first use of
the names below that return aiohttp objects, so the daemons never import aiohttp)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import posixpath
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, cast

import h11

log = logging.getLogger("nsqpy")

NSQ_HEADER = {"X-Nsq-Content-Type": "nsq; version=1.0"}
JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"

# Go's http.StatusText for the codes NSQ answers (Python's phrases differ for a few).
_REASONS = {
    100: "Continue",
    200: "OK",
    301: "Moved Permanently",
    307: "Temporary Redirect",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Request Entity Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

# net/http's limits: MaxHeaderBytes (1 MiB plus its 4096 bytes of slack) for a request head,
# and how much of an unread request body it reads and drops to keep the connection alive.
MAX_HEADER_BYTES = (1 << 20) + 4096
_DISCARD_LIMIT = 256 << 10
_EVENTS_PER_PASS = 96


class NsqHTTPError(Exception):
    """An http_api.Err: an HTTP status code and the message text nsqd/nsqlookupd answer."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


# ---------------------------------------------------------------- Request and Response


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


def plain_text(text: str | bytes, status: int = 200) -> Response:
    """http_api.PlainText: the text as is, Content-Type left to the sniffer (text/plain)."""
    return Response(status, text.encode() if isinstance(text, str) else text)


def error_answer(code: int, text: str, headers: dict[str, str] | None = None) -> Response:
    """RespondV1 for an error: ``{"message": text}`` with status ``code``."""
    return Response(
        code,
        b'{"message":' + go_json(text) + b"}",
        {**NSQ_HEADER, "Content-Type": JSON_TYPE, **(headers or {})},
    )


def json_answer(data: Any, status: int = 200) -> Response:
    """A V1 JSON answer, bytes as Go's encoding/json.Marshal writes them (go_json)."""
    return Response(status, go_json(data), {**NSQ_HEADER, "Content-Type": JSON_TYPE})


def v1(data: Any) -> Response:
    """RespondV1 for a 200: str/bytes raw, None empty, a Response as is, anything else JSON."""
    if data is None:
        return Response(200, b"", dict(NSQ_HEADER))
    if isinstance(data, Response):
        return data
    if isinstance(data, str):
        return Response(200, data.encode(), dict(NSQ_HEADER))
    if isinstance(data, bytes):
        return Response(200, data, dict(NSQ_HEADER))
    return json_answer(data)


HandlerResult = Response | Awaitable[Response]
Handler = Callable[[Request], HandlerResult]


def api(fn: Callable[[Request], Any]) -> Handler:
    """A handler that returns data (or a coroutine of it) or raises NsqHTTPError, as a V1
    handler: the data through v1(), the error through error_answer()."""

    async def later(pending: Awaitable[Any]) -> Response:
        try:
            return v1(await pending)
        except NsqHTTPError as e:
            return error_answer(e.code, e.text)

    def handle(request: Request) -> HandlerResult:
        try:
            data = fn(request)
        except NsqHTTPError as e:
            return error_answer(e.code, e.text)
        if isinstance(data, Awaitable):
            return later(data)
        return v1(data)

    return handle


# ---------------------------------------------------------------- Go's JSON and query strings


def go_json(data: Any) -> bytes:
    """``data`` as Go's encoding/json.Marshal writes it: compact, non-ASCII as UTF-8, and
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` etc. (dict order kept)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if "<" in text or ">" in text or "&" in text or "\u2028" in text or "\u2029" in text:
        text = (
            text.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return text.encode("utf-8", "surrogateescape")


_HEX = "0123456789abcdefABCDEF"


def _unescape(s: str, plus_is_space: bool) -> str:
    """``%XX`` as a byte (and ``+`` as a space in a query); ValueError on a bad escape."""
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


# ---------------------------------------------------------------- httprouter's rules


def fixed_path(
    plain: Iterable[str], dynamic: list[tuple[re.Pattern[str], str]], path: str
) -> str | None:
    """httprouter's redirect target for ``path`` among one method's routes: the trailing-slash
    twin of a route, else a route equal to the cleaned path ignoring case (and a trailing
    slash). ``plain`` are fixed paths; ``dynamic`` (regex, formatter) pairs such as
    (``/config/(?P<opt>[^/]+)``, ``/config/{opt}``) match their fixed parts ignoring case, the
    parameter's value kept as sent. None when nothing fits."""
    exact = {p: p for p in plain}
    folded = {p.lower(): p for p in exact}
    loose = [(re.compile(rx.pattern, re.IGNORECASE), fmt) for rx, fmt in dynamic]

    def route_for(candidate: str, ignore_case: bool) -> str | None:
        hit = folded.get(candidate.lower()) if ignore_case else exact.get(candidate)
        if hit is not None:
            return hit
        for pattern, formatter in loose:
            match = pattern.fullmatch(candidate)
            if match is not None:
                target = formatter.format(**match.groupdict())
                if ignore_case or target == candidate:
                    return target
        return None

    if len(path) > 1 and path.endswith("/"):
        twin = route_for(path[:-1], False)
        if twin is not None:
            return twin
    twin = route_for(path + "/", False)
    if twin is not None:
        return twin
    # httprouter's CleanPath: "." and ".." resolved, repeated slashes collapsed
    cleaned = posixpath.normpath("/" + path.lstrip("/")) if path not in ("", "/") else "/"
    for candidate in (cleaned, cleaned.rstrip("/") or "/"):
        hit = route_for(candidate, True)
        if hit is not None:
            return hit
    return None


def go_html_escape(text: str) -> str:
    """Go's html.EscapeString (what http.Redirect puts in its body): &#34; and &#39; for quotes."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
        .replace("'", "&#39;")
    )


_PATH_SAFE = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~$&+,/:;=@"
)


def go_escape_path(path: str) -> str:
    """Go's url.PathEscape rules for a whole path (what URL.String writes after httprouter
    set a fixed path): bytes other than letters, digits and ``-_.~$&+,/:;=@`` as %XX."""
    raw = path.encode("utf-8", "surrogateescape")
    if all(c in _PATH_SAFE for c in raw):
        return path
    return "".join(chr(c) if c in _PATH_SAFE else f"%{c:02X}" for c in raw)


def redirect_parts(
    method: str, target: str, raw_query: str, has_query: bool
) -> tuple[int, bytes, dict[str, str]]:
    """Go's http.Redirect as httprouter calls it: (status, body, headers). 301 for GET with an
    HTML body, 307 for other methods without one. ``target`` is a decoded path (escaped here as
    Go does); the query is carried over as sent (raw, and a lone "?" too, as Go's URL.String
    keeps it)."""
    target = go_escape_path(target)
    if raw_query or has_query:
        target += "?" + raw_query
    if method == "GET":
        body = f'<a href="{go_html_escape(target)}">Moved Permanently</a>.\n\n'
        return 301, body.encode(), {"Content-Type": HTML_TYPE, "Location": target}
    headers = {"Location": target}
    if method == "HEAD":
        headers["Content-Type"] = HTML_TYPE
    return 307, b"", headers


def allow_header(methods: set[str]) -> str:
    """The ``Allow`` value: the path's methods and OPTIONS, sorted."""
    return ", ".join(sorted(methods | {"OPTIONS"}))


class Route:
    """One method and path's handler. ``body_limit``: how many body bytes the handler reads
    (a function of the daemon's options, read per request), None for a handler that reads none."""

    __slots__ = ("handler", "body_limit")

    def __init__(self, handler: Handler, body_limit: Callable[[], int] | None) -> None:
        self.handler = handler
        self.body_limit = body_limit


class Router:
    """httprouter's table: fixed paths and paths with ``{name}`` parts (one segment each)."""

    def __init__(self) -> None:
        self._plain: dict[str, dict[str, Route]] = {}
        self._dynamic: list[tuple[re.Pattern[str], str, dict[str, Route]]] = []

    def add(
        self,
        method: str,
        path: str,
        handler: Handler,
        body_limit: Callable[[], int] | None = None,
    ) -> None:
        route = Route(handler, body_limit)
        if "{" not in path:
            self._plain.setdefault(path, {})[method] = route
            return
        rx = re.compile(re.sub(r"\\{(\w+)\\}", r"(?P<\1>[^/]+)", re.escape(path)))
        for pattern, _, methods in self._dynamic:
            if pattern.pattern == rx.pattern:
                methods[method] = route
                return
        self._dynamic.append((rx, path, {method: route}))

    def get(self, path: str, handler: Handler) -> None:
        self.add("GET", path, handler)

    def post(
        self, path: str, handler: Handler, body_limit: Callable[[], int] | None = None
    ) -> None:
        self.add("POST", path, handler, body_limit)

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route for ``method path`` (case-sensitive) and its named parts, or None."""
        methods = self._plain.get(path)
        if methods is not None:
            route = methods.get(method)
            return (route, {}) if route is not None else None
        for pattern, _, by_method in self._dynamic:
            if method in by_method:
                m = pattern.fullmatch(path)
                if m is not None:
                    return by_method[method], m.groupdict()
        return None

    def methods_for(self, path: str) -> set[str]:
        """The methods some route answers for ``path`` exactly."""
        found = set(self._plain.get(path, ()))
        for pattern, _, by_method in self._dynamic:
            if pattern.fullmatch(path):
                found.update(by_method)
        return found

    def fixed_path(self, method: str, path: str) -> str | None:
        plain = [p for p, by_method in self._plain.items() if method in by_method]
        dynamic = [(rx, fmt) for rx, fmt, by_method in self._dynamic if method in by_method]
        if not plain and not dynamic:
            return None  # no route at all for this method: httprouter goes on to 405/404
        return fixed_path(plain, dynamic, path)

    def unrouted(self, request: Request) -> Response:
        """httprouter's answer when no route matches (see the module comment)."""
        method, path = request.method, request.path
        if method != "CONNECT" and path != "/":
            target = self.fixed_path(method, path)
            if target is not None and target != path:
                return Response(
                    *redirect_parts(method, target, request.raw_query, request.has_query)
                )
        methods = self.methods_for(path)
        methods.discard(method)
        if method == "OPTIONS":
            if methods:
                return Response(200, b"", {"Allow": allow_header(methods)})
        elif methods:
            return error_answer(405, "METHOD_NOT_ALLOWED", {"Allow": allow_header(methods)})
        return error_answer(404, "NOT_FOUND")


# ---------------------------------------------------------------- the wire


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_date_cache: list[Any] = [0, ""]


def http_date() -> str:
    """Now as net/http's Date header (RFC 7231 IMF-fixdate), computed once per second."""
    now = int(time.time())
    if now != _date_cache[0]:
        t = time.gmtime(now)
        _date_cache[1] = (
            f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
        )
        _date_cache[0] = now
    return str(_date_cache[1])


_HTML_SIGS = tuple(
    s.encode()
    for s in (
        "<!DOCTYPE HTML",
        "<HTML",
        "<HEAD",
        "<SCRIPT",
        "<IFRAME",
        "<H1",
        "<DIV",
        "<FONT",
        "<TABLE",
        "<A",
        "<STYLE",
        "<TITLE",
        "<B",
        "<BODY",
        "<BR",
        "<P",
        "<!--",
    )
)
_BINARY = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")


def sniff(body: bytes) -> str:
    """net/http's DetectContentType for what NSQ answers: HTML, XML, else text/plain unless
    the first 512 bytes hold binary control bytes (application/octet-stream)."""
    head = body[:512].lstrip(b"\t\n\x0c\r ")
    if head[:1] == b"<":
        upper = head[:16].upper()
        for sig in _HTML_SIGS:
            if upper.startswith(sig) and head[len(sig) : len(sig) + 1] in (b" ", b">"):
                return HTML_TYPE
        if head.startswith(b"<?xml"):
            return "text/xml; charset=utf-8"
    if _BINARY.search(head):
        return "application/octet-stream"
    return TEXT_TYPE


_BAD_REQUEST = (
    b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%d %s"
)
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _Conn(asyncio.Protocol):
    """One HTTP connection: bytes into h11, requests to the router, answers in order.

    h11 parses; the answers are written here (net/http's header order and status lines, which
    h11's writer does not produce) and h11 is not told of them: each request is parsed by its
    own h11.Connection, the next one taking over the bytes left after it (trailing_data), once
    the answer is out. That halves h11's work per request, and keep-alive follows h11's rule
    (HTTP/1.1 without ``Connection: close``)."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.transport: asyncio.Transport | None = None
        self.request: Request | None = None
        self.route: Route | None = None
        self.limit = 0  # body bytes to buffer for the current request (limit+1 read at most)
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.dispatched = False  # the current request went to its handler
        self.answered = False  # ... and its answer is written
        self.keep_alive = True
        self.discarded = 0  # body bytes read and dropped after dispatch
        self.task: asyncio.Task[None] | None = None
        self.preset: Response | None = None  # the server's `before` answer
        self.write_paused = False
        self.read_paused = False
        self.scheduled = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)
        self.transport = None
        if self.task is not None:
            self.task.cancel()
            self.task = None

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool:
        self.h11.receive_data(b"")
        self._process()
        # half-closed: the answer still goes out, then we close (TLS has no half-close)
        return not self.server.secure

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._resume()
        self._process()

    def _pause(self) -> None:
        if not self.read_paused and self.transport is not None:
            self.read_paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.read_paused and self.transport is not None and not self.write_paused:
            self.read_paused = False
            self.transport.resume_reading()

    # the request/answer cycle

    def _process(self) -> None:
        budget = _EVENTS_PER_PASS
        while (
            self.transport is not None
            and not self.transport.is_closing()
            and self.task is None
            and not self.write_paused
        ):
            if budget == 0:
                # bounded work per pass: go on at the loop's next turn, read nothing meanwhile
                if not self.scheduled:
                    self.scheduled = True
                    self._pause()
                    asyncio.get_running_loop().call_soon(self._continue)
                return
            budget -= 1
            conn = self.h11
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                self._bad_request(e)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                if conn.their_state is h11.DONE:
                    if self.answered:
                        self._next_request()
                        continue
                    self._pause()  # the answer is on its way: hold further requests back
                return
            tp = type(event)
            if tp is h11.Data:
                self._body(event.data)  # type: ignore[union-attr]
            elif tp is h11.Request:
                self._begin(event)  # type: ignore[arg-type]
            elif tp is h11.EndOfMessage:
                if not self.dispatched:
                    self._dispatch()
            elif tp is h11.ConnectionClosed:
                self.transport.close()
                return

    def _continue(self) -> None:
        self.scheduled = False
        self._resume()
        self._process()

    def _next_request(self) -> None:
        """The request is read and answered: a fresh parser takes the bytes after it."""
        if not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            return
        data, closed = self.h11.trailing_data
        self.h11 = conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        if data:
            conn.receive_data(bytes(data))
        if closed:
            conn.receive_data(b"")
        self.request = None
        self.answered = False
        self._resume()

    def _begin(self, ev: h11.Request) -> None:
        target = ev.target.decode("utf-8", "surrogateescape")
        request = Request(ev.method.decode("ascii"), target, ev.headers, self.server.secure)
        self.request = request
        self.chunks = []
        self.buffered = 0
        self.discarded = 0
        self.dispatched = False
        self.answered = False
        self.route = None
        # h11's keep-alive rule: HTTP/1.1 without "Connection: close"
        self.keep_alive = ev.http_version == b"1.1"
        if self.keep_alive:
            for name, value in ev.headers:
                if name == b"connection" and b"close" in value.lower().split(b","):
                    self.keep_alive = False
        before = self.server.before
        self.preset = before(request) if before is not None else None
        if self.preset is None:
            found = self.server.router.match(request.method, request.path)
            if found is not None:
                self.route, request.params = found
        limit = self.route.body_limit if self.route is not None else None
        self.limit = limit() if limit is not None else -1
        cl = request.content_length
        if self.limit < 0 or (cl is not None and cl > self.limit):
            self._dispatch()  # the handler reads no body, or refuses this one by its length
        elif self.h11.they_are_waiting_for_100_continue and self.transport is not None:
            self.transport.write(_CONTINUE)

    def _body(self, data: bytes) -> None:
        if self.dispatched:
            self.discarded += len(data)
            if self.discarded > _DISCARD_LIMIT and self.transport is not None:
                self.transport.close()  # net/http gives up on an unread body past 256 KiB
            return
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > self.limit:
            self._dispatch()  # limit+1 bytes are enough for the handler to say it is too big

    def _dispatch(self) -> None:
        request = self.request
        assert request is not None
        self.dispatched = True
        if self.chunks:
            body = b"".join(self.chunks)
            request.body = body[: self.limit + 1] if len(body) > self.limit else body
            self.chunks = []
        answer: HandlerResult | None = self.preset
        if answer is None:
            route = self.route
            if route is None:
                answer = self.server.router.unrouted(request)
            else:
                try:
                    answer = route.handler(request)
                except Exception:
                    log.exception("HTTP: %s %s failed", request.method, request.path)
                    answer = error_answer(500, "INTERNAL_ERROR")
        if isinstance(answer, Response):
            self._send(answer)
        else:
            self.task = asyncio.get_running_loop().create_task(self._later(answer))

    async def _later(self, pending: Awaitable[Response]) -> None:
        request = self.request
        try:
            answer = await pending
        except asyncio.CancelledError:
            raise
        except Exception:
            assert request is not None
            log.exception("HTTP: %s %s failed", request.method, request.path)
            answer = error_answer(500, "INTERNAL_ERROR")
        self.task = None
        if self.transport is not None:
            self._send(answer)
            self._process()

    def _send(self, answer: Response) -> None:
        """Write ``answer`` as net/http does, then go on with the next request (or close)."""
        transport = self.transport
        request = self.request
        if transport is None or request is None:
            return
        conn = self.h11
        left = 0 if request.chunked else (request.content_length or 0) - self.buffered
        if conn.their_state is h11.SEND_BODY and (
            conn.they_are_waiting_for_100_continue or left > _DISCARD_LIMIT
        ):
            # answered before the body ended: net/http reads and drops up to 256 KiB of the rest
            # to keep the connection (a chunked rest too: past that, _body closes); a longer
            # one, or one the client holds back for a 100 Continue, closes it
            self.keep_alive = False
        http10 = conn.their_http_version == b"1.0"
        body = answer.body
        reason = _REASONS.get(answer.status) or f"status code {answer.status}"
        head = [f"HTTP/1.{0 if http10 else 1} {answer.status} {reason}\r\n"]
        for name, value in sorted(answer.headers.items()):
            if "\n" in value or "\r" in value:
                log.error("HTTP: %s %s: bad header %s dropped", request.method, request.path, name)
                continue
            head.append(f"{name}: {value}\r\n")
        head.append(f"Date: {http_date()}\r\n")
        is_head = request.method == "HEAD"
        if body or not is_head:
            head.append(f"Content-Length: {len(body)}\r\n")
        if body and "Content-Type" not in answer.headers:
            head.append(f"Content-Type: {sniff(body)}\r\n")
        if not self.keep_alive and not http10:  # an HTTP/1.0 answer implies it, as net/http's
            head.append("Connection: close\r\n")
        head.append("\r\n")
        out = "".join(head).encode("utf-8", "surrogateescape")
        transport.write(out + body if body and not is_head else out)
        self.answered = True
        if not self.keep_alive and conn.their_state is not h11.DONE:
            transport.close()  # what is left of the body is not read
        elif conn.their_state is h11.DONE:
            self._next_request()

    def _bad_request(self, e: h11.RemoteProtocolError) -> None:
        """What net/http answers to a request it cannot parse, then the connection closes."""
        transport = self.transport
        if transport is None:
            return
        if not self.answered:
            code = e.error_status_hint if e.error_status_hint in (400, 431) else 400
            reason = _REASONS[code].encode()
            if "Missing mandatory Host" in str(e):
                reason += b": missing required Host header"
            transport.write(_BAD_REQUEST % (code, reason, code, reason))
        transport.close()


class HTTPServer:
    """One listening socket serving ``router``; ``before(request)`` may answer a request
    before routing (nsqd's TLS_REQUIRED). Built by serve()."""

    def __init__(
        self,
        router: Router,
        secure: bool,
        before: Callable[[Request], Response | None] | None,
    ) -> None:
        self.router = router
        self.secure = secure
        self.before = before
        self.conns: set[_Conn] = set()
        self.server: asyncio.AbstractServer | None = None
        self.address: tuple[Any, ...] = ()

    async def close(self) -> None:
        """Stop listening and close every connection (answers already written go out)."""
        if self.server is not None:
            self.server.close()
        for c in list(self.conns):
            if c.task is not None:
                c.task.cancel()
            if c.transport is not None:
                c.transport.close()
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except TimeoutError:
                pass
            self.server = None


def _bound_socket(host: str | None, port: int) -> socket.socket | None:
    """A TCP socket bound to an IP-literal ``host`` (SO_REUSEADDR, IPV6_V6ONLY, as asyncio's
    create_server sets them), or None for a name or no host, which create_server resolves.
    (Resolving a literal costs nothing but loads the idna codec, 2-7 ms of start-up.)
    Raises OSError in create_server's words when the address cannot be bound."""
    if not host:
        return None
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            text = (e.strerror or str(e)).lower()
            raise OSError(
                e.errno, f"error while attempting to bind on address {(host, port)!r}: {text}"
            ) from None
        sock.setblocking(False)
        return sock
    return None


async def listen(
    factory: Callable[[], asyncio.Protocol],
    host: str | None,
    port: int,
    ssl_context: Any = None,
    backlog: int = 1024,
) -> asyncio.Server:
    """loop.create_server for a daemon's listener (TCP or HTTP): SO_REUSEADDR, ``backlog``,
    TLS with ``ssl_context``; an IP-literal host is bound without a resolver call. Raises
    OSError when the address cannot be bound."""
    if not 0 <= port <= 65535:
        raise OSError(f"listen tcp: address {port}: invalid port")  # Go's net.Listen text
    loop = asyncio.get_running_loop()
    sock = _bound_socket(host, port)
    if sock is None:
        return await loop.create_server(
            factory, host, port, reuse_address=True, backlog=backlog, ssl=ssl_context
        )
    try:
        return await loop.create_server(factory, sock=sock, backlog=backlog, ssl=ssl_context)
    except BaseException:
        sock.close()
        raise


async def listen_unix(
    factory: Callable[[], asyncio.Protocol], path: str, backlog: int = 1024
) -> asyncio.Server:
    """A listener on the unix socket ``path`` (nsqd's <path> form of --tcp-address and
    --http-address). Like Go's net.Listen("unix"), an existing file at ``path`` is refused
    (OSError "bind: address already in use"); close_unix() removes the socket file, as Go's
    UnixListener.Close does."""
    if os.path.lexists(path):
        raise OSError(f"listen unix {path}: bind: address already in use")
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(factory, path, backlog=backlog)


def close_unix(path: str) -> None:
    """Remove a unix listener's socket file (after closing the listener); never raises."""
    try:
        os.unlink(path)
    except OSError:
        pass


async def serve(
    router: Router,
    host: str | None,
    port: int,
    ssl_context: Any = None,
    before: Callable[[Request], Response | None] | None = None,
    unix_path: str | None = None,
) -> HTTPServer:
    """Serve ``router`` on host:port (port 0: the OS picks one), over TLS with ``ssl_context``,
    or on the unix socket ``unix_path`` when given (no TLS there). ``server.address`` is the
    bound socket address ((path,) for a unix socket). Raises OSError when it cannot bind."""
    server = HTTPServer(router, ssl_context is not None, before)
    if unix_path is not None:
        server.server = await listen_unix(lambda: _Conn(server), unix_path)
        server.address = (unix_path,)
        return server
    server.server = await listen(lambda: _Conn(server), host, port, ssl_context)
    server.address = tuple(server.server.sockets[0].getsockname())
    return server


# ---------------------------------------------------------------- nsqpy-admin's aiohttp names

_AIOHTTP_NAMES = ("error_response", "go_json_response", "go_router", "start_site")


def __getattr__(name: str) -> Any:
    """The aiohttp flavour of these rules (httpd_aio), imported on first use by nsqpy-admin."""
    if name in _AIOHTTP_NAMES:
        from . import httpd_aio

        return getattr(httpd_aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
