"""HTTP admin clients of nsqd and nsqlookupd: NsqdHTTPClient, LookupdClient, and their blocking
wrappers for threads.

Strategy: one aiohttp session per client, made on first use inside the running loop (aiohttp
is imported only then: it is slow to import, and ``import nsqpy.client`` stays light), closed
by ``close()`` or ``async with``. Each method is one request with NSQ's V1 Accept header and a
total ``timeout`` (seconds). A 200 answer is read as the endpoint gives it (plain "OK", JSON,
or nothing); any other status raises NSQHTTPError with the status and NSQ's text from the
``{"message": ...}`` body (``TOPIC_NOT_FOUND``, ``INVALID_TOPIC``, ...). Topic and channel
names are checked with the protocol's rule (nsqpy.internal.names.is_valid_name) before any
request: ValueError, no request sent. Durations given to a method are seconds, as elsewhere in
nsqpy.client; the query carries what the daemon reads (``defer`` in milliseconds).

The blocking wrappers (BlockingNsqdHTTPClient, BlockingLookupdClient) run the async client on
a loop in a daemon thread, as nsqpy.client.blocking does, each call bounded by ``timeout``.

Sources: nsqd/http.go and nsqlookupd/http.go (routes, parameters, error texts),
internal/http_api/api_response.go (V1 answers). The surface follows gnsq's NsqdHTTPClient and
LookupdClient (go-nsq has no HTTP client)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from ..internal.names import is_valid_name
from .stats import NsqdStats

if TYPE_CHECKING:
    import ssl

    import aiohttp

T = TypeVar("T")
_C = TypeVar("_C", bound="_HTTPClient")
_B = TypeVar("_B", bound="_Blocking")

#: The Accept header of NSQ's V1 HTTP API (go-nsq's api_request.go, nsqadmin's client).
ACCEPT_V1 = "application/vnd.nsq; version=1.0"
_U32 = struct.Struct(">I")


class NSQHTTPError(Exception):
    """An nsqd or nsqlookupd answer other than 200: ``status`` the HTTP status code,
    ``message`` NSQ's error text (``"TOPIC_NOT_FOUND"``; the raw body when it is not NSQ's
    JSON), ``method`` and ``url`` the request."""

    def __init__(self, status: int, message: str, method: str = "", url: str = "") -> None:
        super().__init__(f"{status} {message}" + (f" ({method} {url})" if url else ""))
        self.status = status
        self.message = message
        self.method = method
        self.url = url


def base_url(address: str) -> str:
    """``address`` ("host:port", "[v6]:port", or a URL "http(s)://host:port[/prefix]") as the
    URL the routes are joined to, without a trailing slash."""
    url = address if "://" in address else f"http://{address}"
    return url.rstrip("/")


def check_topic(topic: str) -> None:
    """ValueError unless ``topic`` is a valid topic name (1-64 of ``[.a-zA-Z0-9_-]``, maybe
    ending in ``#ephemeral``)."""
    if not is_valid_name(topic):
        raise ValueError(f"invalid topic name {topic!r}")


def check_channel(channel: str) -> None:
    """ValueError unless ``channel`` is a valid channel name (the topic rule)."""
    if not is_valid_name(channel):
        raise ValueError(f"invalid channel name {channel!r}")


def _error_text(body: bytes) -> str:
    """NSQ's text of an error answer: ``{"message": TEXT}`` (V1), ``{"status_txt": TEXT}``
    (pre-1.0), else the body itself."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        for key in ("message", "status_txt"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return text


class _HTTPClient:
    """What both clients share: the address, the session, one request, and the routes both
    daemons answer alike."""

    def __init__(
        self, address: str, timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.address = address
        self.url = base_url(address)
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    async def _request(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[bytes, str]:
        """(body, content type) of a 200 answer; NSQHTTPError for another status;
        aiohttp.ClientError or TimeoutError when the daemon cannot be reached in time."""
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        url = self.url + path
        if params:  # quoted here so that "#ephemeral" reaches the daemon as part of the name
            url += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        extra: dict[str, Any] = {} if self.ssl_context is None else {"ssl": self.ssl_context}
        async with self._session.request(
            method,
            url,
            data=body,
            headers={"Accept": ACCEPT_V1},
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            **extra,
        ) as resp:
            data = await resp.read()
            if resp.status != 200:
                raise NSQHTTPError(resp.status, _error_text(data), method, url)
            return data, resp.headers.get("Content-Type", "")

    async def _json(self, path: str, params: dict[str, str] | None = None) -> Any:
        data, _ = await self._request("GET", path, params)
        try:
            return json.loads(data)
        except ValueError:
            raise ValueError(f"{self.url}{path}: not a JSON answer: {data[:200]!r}") from None

    async def ping(self) -> str:
        """GET /ping: "OK" when the daemon is up and healthy; NSQHTTPError (500 and the
        reason) when nsqd reports itself unhealthy."""
        data, _ = await self._request("GET", "/ping")
        return data.decode("utf-8", "replace")

    async def info(self) -> dict[str, Any]:
        """GET /info: the daemon's version (and, from nsqd, its broadcast address, hostname,
        TCP and HTTP ports and start time) as the JSON object it answers."""
        data: dict[str, Any] = await self._json("/info")
        return data

    # Both daemons have these four routes with the same parameters.
    async def create_topic(self, topic: str) -> None:
        """POST /topic/create: nsqd creates the topic (and registers it with its lookupds);
        nsqlookupd registers it (no nsqd needed)."""
        await self._request("POST", "/topic/create", _topic(topic))

    async def delete_topic(self, topic: str) -> None:
        """POST /topic/delete: nsqd drops the topic, its channels and messages (404
        TOPIC_NOT_FOUND); nsqlookupd drops the topic's registrations and its channels'."""
        await self._request("POST", "/topic/delete", _topic(topic))

    async def create_channel(self, topic: str, channel: str) -> None:
        """POST /channel/create: nsqd creates the channel (and the topic, when it is not
        there yet); nsqlookupd registers the channel (and its topic)."""
        await self._request("POST", "/channel/create", _topic_channel(topic, channel))

    async def delete_channel(self, topic: str, channel: str) -> None:
        """POST /channel/delete. 404 TOPIC_NOT_FOUND or CHANNEL_NOT_FOUND from nsqd;
        404 CHANNEL_NOT_FOUND from nsqlookupd when the channel is not registered."""
        await self._request("POST", "/channel/delete", _topic_channel(topic, channel))

    async def close(self) -> None:
        """Close the session (the client makes a new one if used again)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self: _C) -> _C:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.address!r})"


def _topic_channel(topic: str, channel: str) -> dict[str, str]:
    check_topic(topic)
    check_channel(channel)
    return {"topic": topic, "channel": channel}


def _topic(topic: str) -> dict[str, str]:
    check_topic(topic)
    return {"topic": topic}


class NsqdHTTPClient(_HTTPClient):
    """nsqd's HTTP API at ``address`` ("127.0.0.1:4151" or a URL), each request bounded by
    ``timeout`` seconds; ``ssl_context`` for an ``https://`` address whose certificate the
    system's trust store does not verify (nsqd's --https-address). Every method raises
    NSQHTTPError for an error answer, ValueError for an invalid topic or channel name
    (before any request), aiohttp.ClientError or TimeoutError when nsqd cannot be reached."""

    async def stats(
        self,
        topic: str = "",
        channel: str = "",
        include_clients: bool = True,
        include_mem: bool = False,
    ) -> NsqdStats:
        """GET /stats?format=json, filtered to ``topic`` (and its ``channel``) when given, as
        typed records (client/stats.py). A topic nsqd does not have gives no topics."""
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
        if channel:
            params["channel"] = channel
        params["include_clients"] = "true" if include_clients else "false"
        params["include_mem"] = "true" if include_mem else "false"
        return NsqdStats.from_json(await self._json("/stats", params))

    async def stats_text(self, topic: str = "", channel: str = "") -> str:
        """GET /stats in nsqd's plain-text layout."""
        params = {k: v for k, v in (("topic", topic), ("channel", channel)) if v}
        data, _ = await self._request("GET", "/stats", params)
        return data.decode("utf-8", "replace")

    async def pub(self, topic: str, body: bytes, defer: float | None = None) -> None:
        """POST /pub: one message; ``defer`` seconds (sent as whole milliseconds) keeps it
        from consumers that long (nsqd refuses more than its --max-req-timeout:
        INVALID_DEFER). Errors: MSG_EMPTY, MSG_TOO_BIG (413)."""
        params = _topic(topic)
        if defer is not None:
            params["defer"] = str(round(defer * 1000))
        await self._request("POST", "/pub", params, body)

    async def mpub(self, topic: str, bodies: Sequence[bytes], binary: bool = False) -> None:
        """POST /mpub: several messages at once. Newline mode (the default) joins the bodies
        with b"\\n", so none may hold one (ValueError); ``binary`` sends nsqd's binary layout
        (4-byte count, then each body after its 4-byte size, big-endian), which carries any
        bytes. Errors: MSG_EMPTY, MSG_TOO_BIG, BODY_TOO_BIG (413)."""
        params = _topic(topic)
        if binary:
            params["binary"] = "true"
            parts = [_U32.pack(len(bodies))]
            for b in bodies:
                parts += (_U32.pack(len(b)), bytes(b))
            payload = b"".join(parts)
        else:
            if any(b"\n" in b for b in bodies):
                raise ValueError("a body holds a newline: use binary=True")
            payload = b"\n".join(bodies)
        await self._request("POST", "/mpub", params, payload)

    async def empty_topic(self, topic: str) -> None:
        """POST /topic/empty: drops the messages the topic holds (not its channels').
        404 TOPIC_NOT_FOUND."""
        await self._request("POST", "/topic/empty", _topic(topic))

    async def pause_topic(self, topic: str) -> None:
        """POST /topic/pause: no message leaves the topic for its channels. 404
        TOPIC_NOT_FOUND."""
        await self._request("POST", "/topic/pause", _topic(topic))

    async def unpause_topic(self, topic: str) -> None:
        """POST /topic/unpause. 404 TOPIC_NOT_FOUND."""
        await self._request("POST", "/topic/unpause", _topic(topic))

    async def empty_channel(self, topic: str, channel: str) -> None:
        """POST /channel/empty: drops the channel's queued messages. 404 TOPIC_NOT_FOUND or
        CHANNEL_NOT_FOUND."""
        await self._request("POST", "/channel/empty", _topic_channel(topic, channel))

    async def pause_channel(self, topic: str, channel: str) -> None:
        """POST /channel/pause: no message goes to the channel's consumers. 404
        TOPIC_NOT_FOUND or CHANNEL_NOT_FOUND."""
        await self._request("POST", "/channel/pause", _topic_channel(topic, channel))

    async def unpause_channel(self, topic: str, channel: str) -> None:
        """POST /channel/unpause. 404 TOPIC_NOT_FOUND or CHANNEL_NOT_FOUND."""
        await self._request("POST", "/channel/unpause", _topic_channel(topic, channel))

    async def get_config(self, option: str) -> Any:
        """GET /config/<option> (nsqd's cfg name: "mem_queue_size", "log_level", ...): its
        value as nsqd's JSON has it (a duration in nanoseconds, the log level as a number; a
        string option as the string). 400 INVALID_OPTION."""
        data, ctype = await self._request("GET", f"/config/{quote(option, safe='')}")
        return _config_value(data, ctype)

    async def put_config(self, option: str, value: Any) -> Any:
        """PUT /config/<option>: nsqd changes two options at run time,
        ``nsqlookupd_tcp_addresses`` (a list of "host:port") and ``log_level`` ("debug",
        "info", "warn", "error", "fatal"). A str is sent as it is, anything else as JSON.
        Answers the new value as get_config does. 400 INVALID_OPTION or INVALID_VALUE."""
        body = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        data, ctype = await self._request("PUT", f"/config/{quote(option, safe='')}", body=body)
        return _config_value(data, ctype)


def _config_value(data: bytes, content_type: str) -> Any:
    """A /config answer: JSON when nsqd says so, else the raw string (Go's RespondV1 writes
    a string value as it is)."""
    if "json" in content_type:
        return json.loads(data)
    return data.decode("utf-8", "replace")


@dataclass(frozen=True)
class Producer:
    """An nsqd as nsqlookupd lists it. ``tcp_address``/``http_address`` join the broadcast
    address and a port (IPv6 in brackets); ``topics`` and ``tombstones`` (parallel lists) come
    only from ``nodes()``."""

    remote_address: str = ""
    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    topics: list[str] = field(default_factory=list)
    tombstones: list[bool] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Producer:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("topics", "tombstones"):
            known[key] = list(known.get(key) or [])
        return cls(**known)

    def _join(self, port: int) -> str:
        host = self.broadcast_address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def tcp_address(self) -> str:
        """ "broadcast_address:tcp_port", the address consumers connect to."""
        return self._join(self.tcp_port)

    @property
    def http_address(self) -> str:
        """ "broadcast_address:http_port", also the ``node`` of tombstone_topic."""
        return self._join(self.http_port)


@dataclass(frozen=True)
class LookupResult:
    """GET /lookup's answer: the topic's registered ``channels`` and the ``producers`` (active,
    not tombstoned) that carry it."""

    channels: list[str]
    producers: list[Producer]


def _producers(data: Any) -> list[Producer]:
    if isinstance(data, dict) and "data" in data and "producers" not in data:
        data = data["data"] or {}  # a pre-1.0 answer: {"status_code", "status_txt", "data"}
    return [Producer.from_json(p) for p in (data.get("producers") or [])]


def _unwrap(data: Any) -> Any:
    """A pre-1.0 answer's ``data``, or the answer itself."""
    if isinstance(data, dict) and "status_code" in data and "data" in data:
        return data["data"] or {}
    return data


class LookupdClient(_HTTPClient):
    """nsqlookupd's HTTP API at ``address`` ("127.0.0.1:4161" or a URL), each request bounded
    by ``timeout`` seconds (``ssl_context`` as for NsqdHTTPClient). Raises as NsqdHTTPClient
    does."""

    async def lookup(self, topic: str) -> LookupResult:
        """GET /lookup?topic=: the producers of ``topic`` and its channels. 404
        TOPIC_NOT_FOUND when the topic has no registration."""
        data = _unwrap(await self._json("/lookup", _topic(topic)))
        return LookupResult(list(data.get("channels") or []), _producers(data))

    async def topics(self) -> list[str]:
        """GET /topics: every registered topic."""
        data = _unwrap(await self._json("/topics"))
        return list(data.get("topics") or [])

    async def channels(self, topic: str) -> list[str]:
        """GET /channels?topic=: the channels registered for ``topic`` ([] when none)."""
        data = _unwrap(await self._json("/channels", _topic(topic)))
        return list(data.get("channels") or [])

    async def nodes(self) -> list[Producer]:
        """GET /nodes: every active nsqd with its topics and a tombstone flag for each."""
        return _producers(_unwrap(await self._json("/nodes")))

    async def tombstone_topic(self, topic: str, node: str) -> None:
        """POST /topic/tombstone: hide the producer ``node`` ("broadcast_address:http_port",
        Producer.http_address) of ``topic`` from /lookup for the lookupd's
        --tombstone-lifetime, so that it can be deleted on that nsqd without consumers
        reconnecting. 400 MISSING_ARG_NODE when ``node`` is empty."""
        params = _topic(topic)
        params["node"] = node
        await self._request("POST", "/topic/tombstone", params)


class _Blocking:
    """The blocking face of an async client: each of its coroutine methods, run on a loop in
    a daemon thread and bounded by ``timeout`` seconds (TimeoutError)."""

    _client: _HTTPClient
    #: the async client wrapped, and the name of the loop thread (set by each subclass)
    _async_class: type[_HTTPClient]
    _thread_name: str

    def __init__(
        self, address: str, timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        from .blocking import _LoopThread

        self._client = self._async_class(address, timeout, ssl_context)
        self.timeout = timeout + 5  # the request's own bound answers first
        self._lt = _LoopThread(self._thread_name)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._lt.run(coro, self.timeout)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name) if not name.startswith("_") else None
        if method is None or not callable(method) or name == "close":
            raise AttributeError(name)

        def call(*args: Any, **kw: Any) -> Any:
            return self._run(method(*args, **kw))

        call.__doc__ = method.__doc__
        call.__name__ = name
        return call

    def close(self) -> None:
        """Close the session and the loop thread."""
        try:
            self._run(self._client.close())
        finally:
            self._lt.close()

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingNsqdHTTPClient(_Blocking):
    """NsqdHTTPClient for threads: the same methods (``ping()``, ``stats()``, ``pub()``, ...),
    blocking, raising what the async ones raise. A context manager (``close()`` at exit)."""

    _async_class = NsqdHTTPClient
    _thread_name = "nsqpy-nsqd-http"


class BlockingLookupdClient(_Blocking):
    """LookupdClient for threads: the same methods (``lookup()``, ``topics()``, ...),
    blocking, raising what the async ones raise. A context manager (``close()`` at exit)."""

    _async_class = LookupdClient
    _thread_name = "nsqpy-lookupd-http"
