"""AUTH against nsqd's auth-server protocol (internal/auth/authorizations.go).

Strategy: the query is one aiohttp request, awaited off the connection's synchronous command
path (the connection stops reading and queues nothing new until the answer is in, so commands
keep their order). The answer is an AuthState: identity, TTL-based expiry and authorisations
whose topic and channel patterns are compiled once. Patterns are searched (unanchored), as Go's
regexp.MatchString does. aiohttp is imported when an nsqd has auth servers, not at start-up.

Time is an injected ``clock`` (monotonic seconds, default time.monotonic): the answer keeps the
clock it was stamped by and checks its expiry against that same clock, so the daemon's
connections pass their protocol's clock (the event loop's) and unit tests a clock they move."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .internal import gojson

if TYPE_CHECKING:
    import aiohttp

_PERMISSIONS = ("subscribe", "publish")


class AuthError(Exception):
    """The auth servers could not be queried or answered nonsense (never shown to clients)."""


@dataclass
class Authorization:
    topic: re.Pattern[str]
    channels: list[re.Pattern[str]]
    permissions: list[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        if channel:
            if "subscribe" not in self.permissions:
                return False
        elif "publish" not in self.permissions:
            return False
        if not self.topic.search(topic):
            return False
        return any(c.search(channel) for c in self.channels)


@dataclass
class AuthState:
    """An auth server's answer (Go's auth.State): ``ttl`` seconds, the identity, the compiled
    authorizations, and ``expires``, the ``clock`` time (seconds) past which it is asked again."""

    ttl: int
    identity: str
    identity_url: str
    authorizations: list[Authorization] = field(default_factory=list)
    expires: float = 0.0  # clock() seconds
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)

    def is_allowed(self, topic: str, channel: str) -> bool:
        return any(a.is_allowed(topic, channel) for a in self.authorizations)

    def is_expired(self) -> bool:
        """Go's State.IsExpired: ``expires`` is before now (by ``clock``)."""
        return self.expires < self.clock()


def _compile(pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise AuthError(f"unable to compile {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise AuthError(f"unable to compile {pattern!r} {e}") from None


def parse_auth_response(data: Any, clock: Callable[[], float] = time.monotonic) -> AuthState:
    """Validate and compile an auth server's JSON answer, as nsqd's QueryAuthd does; it
    expires ``ttl`` seconds after now by ``clock``. Raises AuthError (Go's error texts)."""
    if not isinstance(data, dict):
        raise AuthError("response is not a JSON object")
    auths = []
    for a in data.get("authorizations") or []:
        if not isinstance(a, dict):
            raise AuthError("authorization is not a JSON object")
        perms = a.get("permissions") or []
        for p in perms:
            if p not in _PERMISSIONS:
                raise AuthError(f"unknown permission {p}")
        auths.append(
            Authorization(
                topic=_compile(a.get("topic", "")),
                channels=[_compile(c) for c in a.get("channels") or []],
                permissions=list(perms),
            )
        )
    ttl = data.get("ttl", 0)
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        raise AuthError(f"invalid TTL {ttl!r}")
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(
        ttl=ttl,
        identity=str(data.get("identity") or ""),
        identity_url=str(data.get("identity_url") or ""),
        authorizations=auths,
        expires=clock() + ttl,
        clock=clock,
    )


async def query_authd(
    session: aiohttp.ClientSession,
    authd: str,
    params: dict[str, str],
    method: str,
    clock: Callable[[], float] = time.monotonic,
) -> AuthState:
    """One auth server's answer to ``params`` by GET or POST (``method``), stamped by
    ``clock``. Raises AuthError, or aiohttp's errors for the request itself."""
    endpoint = authd if "://" in authd else f"http://{authd}/auth"
    headers = {"Accept": "application/vnd.nsq; version=1.0"}
    if method == "post":
        # nsqd POSTs json.Marshal(url.Values): every value a one-element list, keys sorted
        body = gojson.encode({k: [params[k]] for k in sorted(params)})
        headers["Content-Type"] = "application/json"
        req = session.post(endpoint, data=body, headers=headers)
    else:
        from urllib.parse import urlencode  # with an auth server only, not at start-up

        req = session.get(f"{endpoint}?{urlencode(sorted(params.items()))}", headers=headers)
    async with req as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise AuthError(f"got response {resp.status} {resp.reason} {raw!r}")
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise AuthError(str(e)) from None
    return parse_auth_response(data, clock)


class AuthClient:
    """The auth servers of one nsqd (--auth-http-address, repeatable) and their HTTP client."""

    def __init__(
        self, addresses: list[str], method: str, connect_timeout_ms: int, request_timeout_ms: int
    ) -> None:
        import aiohttp

        self.addresses = list(addresses)
        self.method = method
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_ms / 1000, connect=connect_timeout_ms / 1000
        )
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def query(
        self,
        remote_ip: str,
        tls: bool,
        common_name: str,
        secret: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> AuthState:
        """Ask the auth servers in turn, from a random one (nsqd QueryAnyAuthd); the answer
        expires by ``clock`` (monotonic seconds). Raises AuthError with every server's error."""
        import aiohttp

        params = {
            "remote_ip": remote_ip,
            "tls": "true" if tls else "false",
            "secret": secret,
            "common_name": common_name,
        }
        session = self._get_session()
        n = len(self.addresses)
        start = random.randrange(n)
        errors: list[str] = []
        for i in range(n):
            a = self.addresses[(start + i) % n]
            try:
                return await query_authd(session, a, params, self.method, clock)
            except (AuthError, aiohttp.ClientError, TimeoutError, ValueError) as e:
                errors.append(f"failed to auth against {a} - {e}")
        raise AuthError("; ".join(errors))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
