# The HTTP rules every NSQ daemon shares (nsqd, nsqlookupd), on aiohttp.
#
# Strategy: one owner for what NSQ's internal/http_api package and its router
# (julienschmidt/httprouter 1.3 with HandleMethodNotAllowed) do around the handlers, so that
# nsqpy-d and nsqpy-lookupd answer like nsqd and nsqlookupd for anything a handler does not decide:
#
# - "V1" answers (http_api.RespondV1): 200 with the raw body (a str or bytes as is, None empty,
#   anything else JSON); an error as {"message": "<TEXT>"} with its status code; every V1 answer
#   carries `X-NSQ-Content-Type: nsq; version=1.0`, JSON ones `application/json; charset=utf-8`.
# - The router: a path that differs from a route only by a trailing slash or by letter case is
#   redirected (301 for GET, 307 for other methods; Go's http.Redirect body for GET); OPTIONS on a
#   known path answers 200 with `Allow`; a known path with another method answers 405
#   {"message":"METHOD_NOT_ALLOWED"} with `Allow`; anything else 404 {"message":"NOT_FOUND"}.
#   `Allow` lists the path's methods and OPTIONS, sorted (Go's order is its map order).
from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

NSQ_HEADER = {"X-NSQ-Content-Type": "nsq; version=1.0"}
JSON_TYPE = "application/json; charset=utf-8"


class NsqHTTPError(Exception):
    """An http_api.Err: an HTTP status code and the message text nsqd/nsqlookupd answer."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def error_response(code: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    """RespondV1 for an error: ``{"message": text}`` with status ``code``."""
    return web.Response(
        status=code,
        body=json.dumps({"message": text}, separators=(",", ":")).encode(),
        headers={**NSQ_HEADER, "Content-Type": JSON_TYPE, **(headers or {})},
    )


def json_response(data: Any, status: int = 200) -> web.Response:
    """A V1 JSON answer, compact as Go's encoding/json writes it."""
    return web.Response(
        status=status,
        body=json.dumps(data, separators=(",", ":")).encode(),
        headers={**NSQ_HEADER, "Content-Type": JSON_TYPE},
    )


def v1(data: Any) -> web.Response:
    """RespondV1 for a 200: str/bytes raw, None empty, a Response as is, anything else JSON."""
    if data is None:
        return web.Response(status=200, body=b"", headers=NSQ_HEADER)
    if isinstance(data, web.StreamResponse):
        return data  # type: ignore[return-value]
    if isinstance(data, str):
        return web.Response(status=200, text=data, headers=NSQ_HEADER)
    if isinstance(data, bytes):
        return web.Response(status=200, body=data, headers=NSQ_HEADER)
    return json_response(data)


Handler = Callable[[web.Request], Awaitable[Any]]


def api(fn: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Wrap a handler that returns data or raises NsqHTTPError into a V1 aiohttp handler."""

    async def handle(request: web.Request) -> web.Response:
        try:
            return v1(await fn(request))
        except NsqHTTPError as e:
            return error_response(e.code, e.text)

    return handle


def _routes(app: web.Application) -> list[tuple[str, web.AbstractResource]]:
    return [(r.method, r.resource) for r in app.router.routes() if r.resource is not None]


def _methods_for(app: web.Application, path: str) -> set[str]:
    """The methods some route answers for ``path`` exactly (case-sensitive, as httprouter)."""
    methods: set[str] = set()
    for method, resource in _routes(app):
        info = resource.get_info()
        if "path" in info:
            if info["path"] == path:
                methods.add(method)
        elif resource.canonical and _dynamic_match(resource, path):
            methods.add(method)
    methods.discard("*")
    return methods


def _dynamic_match(resource: web.AbstractResource, path: str) -> bool:
    pattern = resource.get_info().get("pattern")
    return bool(pattern is not None and pattern.fullmatch(path))


def _fixed_path(app: web.Application, method: str, path: str) -> str | None:
    """httprouter's redirect target for ``method path``: the trailing-slash twin of a route,
    else a route equal to the cleaned path ignoring case (and a trailing slash). A route with
    a parameter (``/config/{opt}``) matches its fixed parts ignoring case; the parameter's
    value is kept as sent."""
    plain: dict[str, str] = {}
    dynamic: list[tuple[re.Pattern[str], str]] = []
    for m, resource in _routes(app):
        if m != method:
            continue
        info = resource.get_info()
        if "path" in info:
            plain[info["path"]] = info["path"]
        elif "pattern" in info and "formatter" in info:
            dynamic.append((re.compile(info["pattern"].pattern, re.IGNORECASE), info["formatter"]))
    if not plain and not dynamic:
        return None  # no route at all for this method: httprouter goes on to 405/404

    def route_for(candidate: str, ignore_case: bool) -> str | None:
        if ignore_case:
            hit = {p.lower(): p for p in plain}.get(candidate.lower())
        else:
            hit = plain.get(candidate)
        if hit is not None:
            return hit
        for pattern, formatter in dynamic:
            match = pattern.fullmatch(candidate)
            if match is not None and (
                ignore_case or formatter.format(**match.groupdict()) == candidate
            ):
                return formatter.format(**match.groupdict())
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


def _go_html_escape(text: str) -> str:
    """Go's html.EscapeString (what http.Redirect puts in its body): &#34; and &#39; for quotes."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
        .replace("'", "&#39;")
    )


def _redirect(request: web.Request, target: str) -> web.Response:
    """Go's http.Redirect: 301 for GET (HTML body), 307 for other methods (no body). The query
    is carried over as sent (raw, and a lone "?" too, as Go's URL.String keeps it)."""
    raw_query = request.rel_url.raw_query_string
    if raw_query or "?" in request.raw_path:
        target += "?" + raw_query
    location = target
    if request.method == "GET":
        body = f'<a href="{_go_html_escape(location)}">Moved Permanently</a>.\n\n'
        return web.Response(
            status=301,
            body=body.encode(),
            headers={"Location": location, "Content-Type": "text/html; charset=utf-8"},
        )
    headers = {"Location": location}
    if request.method == "HEAD":
        headers["Content-Type"] = "text/html; charset=utf-8"
    return web.Response(status=307, headers=headers)


def _allow(methods: set[str]) -> str:
    return ", ".join(sorted(methods | {"OPTIONS"}))


@web.middleware
async def go_router(request: web.Request, handler: Any) -> web.StreamResponse:
    """httprouter's behaviour around the routes (see the module comment)."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        pass
    app = request.app
    path = request.path
    if request.method != "CONNECT" and path != "/":
        target = _fixed_path(app, request.method, path)
        if target is not None and target != path:
            return _redirect(request, target)
    methods = _methods_for(app, path)
    methods.discard(request.method)
    if request.method == "OPTIONS":
        if methods:
            return web.Response(status=200, body=b"", headers={"Allow": _allow(methods)})
    elif methods:
        return error_response(405, "METHOD_NOT_ALLOWED", {"Allow": _allow(methods)})
    return error_response(404, "NOT_FOUND")


async def start_site(
    app: web.Application, host: str | None, port: int, ssl_context: Any = None
) -> tuple[web.AppRunner, tuple]:
    """Serve ``app`` on host:port (port 0: the OS picks one), over TLS with ``ssl_context``.

    Returns (runner, bound socket address); raises OSError when the address cannot be bound.
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    server = site._server
    assert server is not None
    sock = server.sockets[0].getsockname()  # type: ignore[attr-defined]
    return runner, sock


def go_json(data: Any) -> bytes:
    """``data`` as Go's encoding/json.Marshal writes it: compact, non-ASCII as UTF-8, and
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` etc. (dict order kept)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if any(c in text for c in "<>&\u2028\u2029"):
        text = (
            text.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return text.encode("utf-8", "surrogateescape")


def go_json_response(data: Any) -> web.Response:
    """A 200 V1 JSON answer with Go's encoding (go_json)."""
    return web.Response(
        status=200, body=go_json(data), headers={**NSQ_HEADER, "Content-Type": JSON_TYPE}
    )


_HEX = "0123456789abcdefABCDEF"


def _query_unescape(s: str) -> str:
    """Go's url.QueryUnescape: ``+`` is a space, ``%XX`` a byte; ValueError on a bad escape."""
    if "%" not in s:
        return s.replace("+", " ")
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
            out.append(0x20 if c == 0x2B else c)
            i += 1
    return out.decode("utf-8", "surrogateescape")


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
