"""The HTTP layer's rules on aiohttp, for nsqpy-admin (the daemons serve on http.server's h11).

Strategy: an adapter only. The rules live elsewhere: the V1 error shape and Go's JSON in
internal.gojson, httprouter's redirect, OPTIONS and 405 answers in http.router; this module reads
aiohttp's route table into router.fixed_path's terms and wraps the answers in aiohttp Responses.
nsqpy-admin imports it by name; nothing the daemons import leads here, so they never load
aiohttp."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from ..gojson import encode, error_body
from .request import JSON_TYPE
from .router import allow_header, fixed_path, redirect_parts

# as aiohttp has always written it for nsqpy-admin (the daemons write Go's X-Nsq-Content-Type)
NSQ_HEADER = {"X-NSQ-Content-Type": "nsq; version=1.0"}


def error_response(code: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    """RespondV1 for an error: ``{"message": text}`` with status ``code``."""
    return web.Response(
        status=code,
        body=error_body(text),
        headers={**NSQ_HEADER, "Content-Type": JSON_TYPE, **(headers or {})},
    )


def go_json_response(data: Any) -> web.Response:
    """A 200 V1 JSON answer with Go's encoding (gojson.encode)."""
    return web.Response(
        status=200, body=encode(data), headers={**NSQ_HEADER, "Content-Type": JSON_TYPE}
    )


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
        elif resource.canonical:
            pattern = info.get("pattern")
            if pattern is not None and pattern.fullmatch(path):
                methods.add(method)
    methods.discard("*")
    return methods


def _fixed_path(app: web.Application, method: str, path: str) -> str | None:
    plain: list[str] = []
    dynamic: list[tuple[re.Pattern[str], str]] = []
    for m, resource in _routes(app):
        if m != method:
            continue
        info = resource.get_info()
        if "path" in info:
            plain.append(info["path"])
        elif "pattern" in info and "formatter" in info:
            dynamic.append((info["pattern"], info["formatter"]))
    if not plain and not dynamic:
        return None  # no route at all for this method: httprouter goes on to 405/404
    return fixed_path(plain, dynamic, path)


@web.middleware
async def go_router(request: web.Request, handler: Any) -> web.StreamResponse:
    """httprouter's behaviour around the routes (see http.router's module docstring)."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        pass
    app = request.app
    path = request.path
    if request.method != "CONNECT" and path != "/":
        target = _fixed_path(app, request.method, path)
        if target is not None and target != path:
            status, body, headers = redirect_parts(
                request.method,
                target,
                request.rel_url.raw_query_string,
                "?" in request.raw_path,
            )
            return web.Response(status=status, body=body or None, headers=headers)
    methods = _methods_for(app, path)
    methods.discard(request.method)
    if request.method == "OPTIONS":
        if methods:
            return web.Response(status=200, body=b"", headers={"Allow": allow_header(methods)})
    elif methods:
        return error_response(405, "METHOD_NOT_ALLOWED", {"Allow": allow_header(methods)})
    return error_response(404, "NOT_FOUND")


async def start_site(
    app: web.Application, host: str | None, port: int, ssl_context: Any = None
) -> tuple[web.AppRunner, tuple[Any, ...]]:
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
