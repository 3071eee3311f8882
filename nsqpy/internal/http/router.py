"""httprouter's rules around the routes, as nsqd, nsqlookupd and nsqadmin answer them.

Strategy: one owner for what julienschmidt/httprouter 1.3 (with RedirectTrailingSlash,
RedirectFixedPath and HandleMethodNotAllowed, as NSQ's daemons set it) answers when no route
takes a request, so the h11 server (Router) and nsqpy-admin's aiohttp adapter (http.aio, through
fixed_path, redirect_parts and allow_header) answer alike:

- a path that differs from a route only by a trailing slash or by letter case is redirected
  (301 for GET with Go's http.Redirect body, 307 for other methods), the query carried over;
- OPTIONS on a known path answers 200 with ``Allow``;
- a known path with another method answers 405 {"message":"METHOD_NOT_ALLOWED"} with ``Allow``;
- anything else 404 {"message":"NOT_FOUND"}.

``Allow`` lists the path's methods and OPTIONS, sorted (Go's order is its map order)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable

from .request import HTML_TYPE, Handler, Request, Response
from .v1 import error_answer


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
