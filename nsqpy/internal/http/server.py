"""The daemons' HTTP/1.1 server on h11: listeners, connections, keep-alive, bounded work.

Strategy: one asyncio.Protocol per connection (Connection); http.head reads each request head
in bounded slices (net/http's 1 MiB limit and 431 answer), then h11 (sans-IO HTTP/1.1) takes
the head's framing and reads the body; a request without a body (a GET, /ping) needs no h11,
which is imported at the first request that has one (start-up time); the answers are
written here, as Go's net/http writes them (h11's writer has its own status line and header
order): the handler's headers sorted by name, then Date, Content-Length and, when the
handler set none, a Content-Type sniffed from the body (text/plain for text).
Requests go to a http.router.Router; what its routes do not decide is answered by its rules.

- Keep-alive as net/http and h11 agree (HTTP/1.1 without "Connection: close"); pipelined
  requests are answered in order (later ones wait in the parser).
- A request's body is buffered only up to what its route reads (Route.body_limit + 1 bytes; a
  larger Content-Length is refused before anything is read); net/http's 256 KiB rule for a body
  left unread.
- HTTPS through asyncio's TLS transport; unix socket listeners (nsqd's <path> addresses).
- Reading goes through one internal.readgate.ReadGate: at most _EVENTS_PER_PASS parser events
  and _PASS_SECONDS per loop pass for one connection, a head read in steps of at most
  _HEAD_BYTES_PER_STEP bytes and _HEAD_LINES_PER_STEP lines with the time checked between
  steps; less time when the pass's connections have spent what they share, and nothing at all
  once it is spent (internal.passbudget: a request can cost milliseconds) (BUDGET: the rest
  waits for the loop's next turn), nothing
  read while its answers wait in a full socket buffer (BACKPRESSURE), and nothing while a
  request's answer is on its way (SUSPENDED).
- Handlers are plain functions of a Request returning a Response, or coroutines for the few
  that wait on something (those run as a task; the connection answers in order meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from ..gotime import http_date
from ..passbudget import SHARED
from ..readgate import BACKPRESSURE, BUDGET, SUSPENDED, ReadGate
from .head import DONE, MAX_HEADER_BYTES, NEED_DATA, HeadError, HeadReader
from .request import HTML_TYPE, TEXT_TYPE, HandlerResult, Request, Response
from .router import Route, Router
from .v1 import error_answer

if TYPE_CHECKING:
    import h11

log = logging.getLogger("nsqpy")


def _load_h11() -> None:
    """Import h11, which frames request bodies, at the first request that has one (a request
    without a body is framed here, and the import costs start-up more than the first /ping)."""
    global h11
    import h11


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

# net/http's limit on how much of an unread request body it reads and drops to keep the
# connection alive (MAX_HEADER_BYTES, its limit on a request head, is http.head's).
_DISCARD_LIMIT = 256 << 10
# One connection's work per loop pass: at most this many parser events and this much time (cut
# to what the pass's connections share, internal.passbudget); the rest waits for the loop's next
# turn. A head is read in steps of at most this many bytes and lines, the time checked between
# steps.
_EVENTS_PER_PASS = 96
_PASS_SECONDS = 0.002
_HEAD_BYTES_PER_STEP = 4 << 10
_HEAD_LINES_PER_STEP = 64
# net/http's rstAvoidanceDelay: after a 431 it closes its write side and waits this long before
# closing, so the client reads the answer instead of a reset.
_LINGER = 0.5


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


class Connection(asyncio.Protocol):
    """One HTTP connection: bytes into a HeadReader, then h11, requests to the router, answers
    in order.

    A HeadReader reads each head, h11 the body after it; the answers are written here
    (net/http's header order and status lines, which h11's writer does not produce) and h11 is
    not told of them: each request's body is framed by its own h11.Connection, and the next
    head's HeadReader takes over the bytes left after it (trailing_data) once the answer is
    out. That halves h11's work per request, and keep-alive follows h11's rule
    (HTTP/1.1 without ``Connection: close``)."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        # the body's parser; None for a request without a body (or before the first head)
        self.h11: h11.Connection | None = None
        self.rest = bytearray()  # without h11: the bytes after the head, as they come
        self.version = b"1.1"  # the request's HTTP version
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
        self.gate = ReadGate()  # why reading is paused: BUDGET, BACKPRESSURE, SUSPENDED
        self.scheduled = False
        self.head: HeadReader | None = HeadReader()  # reading a head (h11 has the body)
        self.headers: list[tuple[bytes, bytes]] = []  # the last head's header lines
        self._target = b""  # the last head's request target, as sent
        self._method = b""  # and its method (framing() may shorten a long one for h11)
        self.eof = False
        self.lingering = False  # answered 431: what comes in is dropped until the close

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.gate.attach(self.transport)
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)
        self.transport = None
        self.gate.attach(None)
        if self.task is not None:
            self.task.cancel()
            self.task = None

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return
        if self.head is not None:
            self.head.feed(data)
        elif self.h11 is None:
            self.rest += data
        else:
            self.h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool:
        self.eof = True
        if self.lingering:
            return False
        if self.head is None and self.h11 is not None:
            self.h11.receive_data(b"")
        self._process()
        # half-closed: the answer still goes out, then we close (TLS has no half-close)
        return not self.server.secure

    def pause_writing(self) -> None:
        self.gate.pause(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.gate.resume(BACKPRESSURE)
        self._process()

    # the request/answer cycle

    def _process(self) -> None:
        budget = _EVENTS_PER_PASS
        # nothing at all once the pass's shared time is spent (one request may cost
        # milliseconds): put off to the next turn
        until = 0.0 if SHARED.spent() else SHARED.until(_PASS_SECONDS)
        while (
            self.transport is not None
            and not self.transport.is_closing()
            and self.task is None
            and not self.gate.bits & BACKPRESSURE
            and not self.lingering
        ):
            if budget == 0 or time.perf_counter() > until:
                # bounded work per pass: go on at the loop's next turn, read nothing meanwhile
                if not self.scheduled:
                    self.scheduled = True
                    self.gate.pause(BUDGET)
                    if SHARED.spent():
                        SHARED.put_off(self._continue)  # first at the next turn, in order
                    else:
                        asyncio.get_running_loop().call_soon(self._continue)
                return
            budget -= 1
            head = self.head
            if head is not None:
                if not self._read_head(head):
                    return
                continue  # a step is short (_HEAD_BYTES_PER_STEP, _HEAD_LINES_PER_STEP)
            conn = self.h11
            if conn is None:  # a request without a body: dispatched with its head
                if self.answered:
                    self._next_request()
                    continue
                self.gate.pause(SUSPENDED)
                return
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                code = e.error_status_hint if e.error_status_hint in (400, 431) else 400
                missing_host = "Missing mandatory Host" in str(e)
                detail = "missing required Host header" if missing_host else ""
                self._bad_request(code, detail)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                if conn.their_state is h11.DONE:
                    if self.answered:
                        self._next_request()
                        continue
                    self.gate.pause(SUSPENDED)  # the answer is on its way: hold the next back
                return
            tp = type(event)
            if tp is h11.Data:
                self._body(event.data)  # type: ignore[union-attr]
            elif tp is h11.Request:
                # h11's keep-alive rule: HTTP/1.1 without "Connection: close"; framing()
                # passes only "close" on
                keep_alive = event.http_version == b"1.1" and not any(  # type: ignore[union-attr]
                    name == b"connection"
                    for name, _ in event.headers  # type: ignore[union-attr]
                )
                self._begin(event.http_version, keep_alive)  # type: ignore[union-attr]
            elif tp is h11.EndOfMessage:
                if not self.dispatched:
                    self._dispatch()
            elif tp is h11.ConnectionClosed:
                self.transport.close()
                return

    def _read_head(self, head: HeadReader) -> bool:
        """One slice of the head; once it is whole, h11 takes its framing and the bytes after
        it. False when nothing more can be done now (more bytes needed, or refused)."""
        try:
            state = head.step(_HEAD_BYTES_PER_STEP, _HEAD_LINES_PER_STEP)
        except HeadError as e:
            self._bad_request(e.status, e.detail)
            return False
        if state == NEED_DATA:
            if self.eof and self.transport is not None:
                if head.pending:
                    self._bad_request(400, "")  # cut off in the middle of a head
                else:
                    self.transport.close()
            return False
        if state == DONE:
            self.head = None
            self.headers = head.headers
            self._target = head.target
            self._method = head.method
            keep_alive = head.bodiless_keep_alive()
            if keep_alive is not None:
                self.h11 = None
                self.rest = bytearray(head.rest)
                self._begin(head.version, keep_alive)
                if not self.dispatched:
                    self._dispatch()
                return True
            if "h11" not in globals():
                _load_h11()
            self.h11 = conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
            conn.receive_data(head.framing() + head.rest)
            if self.eof:
                conn.receive_data(b"")
        return True

    def _continue(self) -> None:
        self.scheduled = False
        self.gate.resume(BUDGET)
        self._process()

    def _next_request(self) -> None:
        """The request is read and answered: a fresh parser takes the bytes after it."""
        if not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            return
        data: bytes | bytearray
        if self.h11 is None:
            data, closed = self.rest, self.eof
            self.rest = bytearray()
        else:
            data, closed = self.h11.trailing_data
        self.head = HeadReader(bytes(data))
        self.eof = self.eof or closed
        self.request = None
        self.answered = False
        self.gate.resume(SUSPENDED)

    def _begin(self, version: bytes, keep_alive: bool) -> None:
        target = self._target.decode("utf-8", "surrogateescape")
        headers, self.headers = self.headers, []
        request = Request(self._method.decode("ascii"), target, headers, self.server.secure)
        self.request = request
        self.chunks = []
        self.buffered = 0
        self.discarded = 0
        self.dispatched = False
        self.answered = False
        self.route = None
        self.version = version
        self.keep_alive = keep_alive
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
        elif (
            self.h11 is not None
            and self.h11.they_are_waiting_for_100_continue
            and self.transport is not None
        ):
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
        done = conn is None or conn.their_state is h11.DONE  # the request is read to its end
        if (
            conn is not None
            and conn.their_state is h11.SEND_BODY
            and (conn.they_are_waiting_for_100_continue or left > _DISCARD_LIMIT)
        ):
            # answered before the body ended: net/http reads and drops up to 256 KiB of the rest
            # to keep the connection (a chunked rest too: past that, _body closes); a longer
            # one, or one the client holds back for a 100 Continue, closes it
            self.keep_alive = False
        http10 = self.version == b"1.0"
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
        if not self.keep_alive and not done:
            transport.close()  # what is left of the body is not read
        elif done:
            self._next_request()

    def _bad_request(self, code: int, detail: str) -> None:
        """What net/http answers to a request it cannot parse (``code`` 400 or 431, ``detail``
        Go's text after the reason, if any), then the connection closes: after a 431 as
        net/http's closeWriteAndWait does (write side shut, the rest read and dropped for
        _LINGER seconds), so the client gets the answer rather than a reset."""
        transport = self.transport
        if transport is None:
            return
        if not self.answered:
            reason = _REASONS[code].encode()
            if detail:
                reason += b": " + detail.encode()
            transport.write(_BAD_REQUEST % (code, reason, code, reason))
        self.head = None
        if code == 431 and not self.answered and transport.can_write_eof():
            self.lingering = True
            self.gate.resume(BUDGET)
            self.scheduled = True  # no budget continuation: nothing more is parsed
            transport.write_eof()
            asyncio.get_running_loop().call_later(_LINGER, transport.close)
            return
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
        self.conns: set[Connection] = set()
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 2)
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
    if os.path.lexists(path):  # noqa: ASYNC240 (at start-up, before anything is served)
        raise OSError(f"listen unix {path}: bind: address already in use")
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(factory, path, backlog=backlog)


def close_unix(path: str) -> None:
    """Remove a unix listener's socket file (after closing the listener); never raises."""
    with contextlib.suppress(OSError):
        os.unlink(path)


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
        server.server = await listen_unix(lambda: Connection(server), unix_path)
        server.address = (unix_path,)
        return server
    server.server = await listen(lambda: Connection(server), host, port, ssl_context)
    server.address = tuple(server.server.sockets[0].getsockname())
    return server
