"""NSQ's V1 HTTP client as Go's internal/http_api.Client is: GETV1 and POSTV1 with Go's errors.

Strategy: one aiohttp ClientSession (keep-alive, connect and request timeouts as
--http-client-connect-timeout/--http-client-request-timeout, TLS client settings), created on
first use and shared by every request; each request carries NSQ's V1 ``Accept`` header, so nsqd
and nsqlookupd answer without the pre-1.0 ``data`` envelope. A request that fails raises
FetchError whose text is Go's http client's: 'Get "URL": <reason>' and 'got response 500
Internal Server Error "<body>"'. A 403 to a plain-http URL is retried once at https on the port
the answer names (nsqd with --tls-required answers so)."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from ..gostrconv import quote as go_quote
from ..netaddr import join_host_port

#: The Accept header of NSQ's V1 HTTP API (http_api.Client's GETV1 and POSTV1).
ACCEPT_V1 = "application/vnd.nsq; version=1.0"


class FetchError(Exception):
    """One HTTP request to a daemon that failed; ``str()`` is the message nsqadmin shows."""


class HTTPClient:
    """http_api.Client: GET/POST V1 requests with nsqadmin's Accept header and deadlines
    (``connect_timeout`` and ``request_timeout`` in seconds). ``close()`` ends its session; it
    is also an async context manager that closes at exit. ``observe``, when set, is called
    after every request with (url, seconds, answered 200): nsqpy-admin's /metrics counts its
    upstream requests through it (admin/metrics.py)."""

    def __init__(
        self,
        connect_timeout: float = 2.0,
        request_timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout = aiohttp.ClientTimeout(
            total=request_timeout, sock_connect=connect_timeout, connect=connect_timeout
        )
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self.observe: Callable[[str, float, bool], None] | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=100, ssl=self.ssl_context if self.ssl_context is not None else True
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self.timeout,
                headers={"Accept": ACCEPT_V1},
            )
        return self._session

    async def __aenter__(self) -> HTTPClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, url: str, body: bytes | None = None) -> bytes:
        """The body of a 200 answer; FetchError with Go's wording otherwise.

        As http_api.Client's GETV1/POSTV1: a 403 to a plain-http URL is asked once more at
        https, on the port its JSON body names as "https_port" (nsqd with --tls-required
        answers {"message": "TLS_REQUIRED", "https_port": N} on its HTTP listener); a body
        that is not JSON is an error, a missing port is port 0, as in Go. Each call is timed
        and told to ``observe`` (a 403 asked again at https counts once)."""
        observe = self.observe
        if observe is None:
            return await self._request(method, url, body)
        t0 = time.perf_counter()
        ok = False
        try:
            data = await self._request(method, url, body)
            ok = True
            return data
        finally:
            observe(url, time.perf_counter() - t0, ok)

    async def _request(self, method: str, url: str, body: bytes | None) -> bytes:
        status, data = await self._once(method, url, body)
        if status == 403 and not url.startswith("https"):
            url = https_endpoint(url, data)
            status, data = await self._once(method, url, body)
        if status != 200:
            reason = HTTPStatus(status).phrase if status in _STATUSES else ""
            text = go_quote(data)
            raise FetchError(f"got response {status} {reason} {text}")
        return data

    async def _once(self, method: str, url: str, body: bytes | None) -> tuple[int, bytes]:
        """One request: (status, body); FetchError with Go's wording when it fails."""
        verb = method.capitalize()
        try:
            async with self.session().request(method, url, data=body) as resp:
                return resp.status, await resp.read()
        except TimeoutError:
            raise FetchError(
                f'{verb} "{url}": context deadline exceeded '
                "(Client.Timeout exceeded while awaiting headers)"
            ) from None
        except aiohttp.ClientConnectorError as e:
            where = join_host_port(e.host, e.port or 0)
            raise FetchError(f'{verb} "{url}": dial tcp {where}: {_reason(e)}') from None
        except aiohttp.ClientError as e:
            raise FetchError(f'{verb} "{url}": {e or type(e).__name__}') from None

    async def get_json(self, url: str) -> Any:
        """GETV1: the decoded JSON of a 200 answer; FetchError otherwise."""
        data = await self.request("GET", url)
        try:
            return json.loads(data)
        except ValueError as e:
            raise FetchError(f'Get "{url}": invalid JSON answer: {e}') from None

    async def post(self, url: str) -> None:
        """POSTV1: a bodyless POST that must answer 200; FetchError otherwise."""
        await self.request("POST", url)


_STATUSES = {s.value for s in HTTPStatus}


def https_endpoint(url: str, body: bytes) -> str:
    """http_api.httpsEndpoint: ``url`` with scheme https and the port of the 403 answer's
    "https_port" (0 when absent). Raises FetchError when the body is not a JSON object
    with an integer port (Go's json.Unmarshal error)."""
    try:
        port = json.loads(body).get("https_port", 0)
    except (ValueError, AttributeError) as e:
        raise FetchError(f"invalid JSON in 403 answer of {url}: {e}") from None
    if not isinstance(port, int) or isinstance(port, bool):
        raise FetchError(f"json: cannot unmarshal https_port {port!r} into Go value of type int")
    parts = urlsplit(url)
    host = parts.hostname or ""
    return urlunsplit(parts._replace(scheme="https", netloc=join_host_port(host, port)))


def _reason(e: aiohttp.ClientConnectorError) -> str:
    err = e.os_error
    if isinstance(err, ConnectionRefusedError):
        return "connect: connection refused"
    return f"connect: {err.strerror or err}" if err is not None else str(e)
