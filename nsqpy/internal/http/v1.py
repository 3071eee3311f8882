"""NSQ's "V1" HTTP answers (internal/http_api.RespondV1 and Err), shared by the three daemons.

Strategy: pure functions from what a handler returns to a Response. A 200 carries the raw body
(a str or bytes as is, None empty, anything else JSON as Go's encoding/json writes it, through
internal.gojson); an error is ``{"message": "<TEXT>"}`` with its status code; every V1 answer
carries ``X-Nsq-Content-Type: nsq; version=1.0``, JSON ones ``Content-Type: application/json;
charset=utf-8``. Handlers raise NsqHTTPError for an error answer; ``api`` wraps a handler that
returns data (or a coroutine of it) into one that returns a Response."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..gojson import encode, error_body
from .request import JSON_TYPE, Handler, HandlerResult, Request, Response

NSQ_HEADER = {"X-Nsq-Content-Type": "nsq; version=1.0"}


class NsqHTTPError(Exception):
    """An http_api.Err: an HTTP status code and the message text nsqd/nsqlookupd answer."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def plain_text(text: str | bytes, status: int = 200) -> Response:
    """http_api.PlainText: the text as is, Content-Type left to the sniffer (text/plain)."""
    return Response(status, text.encode() if isinstance(text, str) else text)


def error_answer(code: int, text: str, headers: dict[str, str] | None = None) -> Response:
    """RespondV1 for an error: ``{"message": text}`` with status ``code``."""
    return Response(
        code,
        error_body(text),
        {**NSQ_HEADER, "Content-Type": JSON_TYPE, **(headers or {})},
    )


def json_answer(data: Any, status: int = 200) -> Response:
    """A V1 JSON answer, bytes as Go's encoding/json.Marshal writes them (gojson.encode)."""
    return Response(status, encode(data), {**NSQ_HEADER, "Content-Type": JSON_TYPE})


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
