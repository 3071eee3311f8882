"""One V2 connection's AUTH state: the secret, the auth server's answer and its TTL.

Strategy: nsqd asks its auth servers from the connection's own goroutine, so a client's
commands wait for the answer in order; here the event loop must not wait. A query therefore
suspends the connection (``AuthHost.suspend_commands``: the replies so far go out, reading
stops, later commands wait in the parser), runs as a task, and resumes the connection with the
command's continuation (``AuthHost.resume_commands``), which the connection runs as a command
(its errors answered as any command's) before the commands that waited. The rules are nsqd's
(nsqd/protocol_v2.go AUTH and CheckAuth, nsqd/client_v2.go QueryAuthd/IsAuthorized): AUTH only
once and before anything but IDENTIFY; PUB/MPUB/DPUB/SUB need an authorization for their
topic (and channel); an answer past its TTL is asked again before the next such command; an
auth-server failure is E_AUTH_FAILED without its details (they only go to the log). The HTTP
query itself is nsqpy.auth's."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from . import wire
from .auth import AuthState
from .wire import FatalClientError, go_quote

log = logging.getLogger("nsqpy")


class Suspend(Exception):
    """Raised by a command waiting for the auth server: the command loop stops until the
    connection resumes."""


class AuthHost(Protocol):
    """What an AuthSession needs of its connection (protocol_v2.ClientV2)."""

    remote_address: str

    def auth_peer(self) -> tuple[str, bool, str]:
        """(remote IP, TLS on, the client certificate's common name or "")."""
        ...

    def suspend_commands(self) -> None:
        """Flush the replies so far and stop running commands until resume_commands."""

    def resume_commands(self, then: Callable[[], None] | None) -> None:
        """Run ``then`` as a command, then the commands that waited; None: the query was
        cancelled (the connection closes)."""

    def write_reply(self, frame: bytes) -> None: ...


def _no_retry() -> None:
    return None


class AuthSession:
    """AUTH for one connection. ``auth`` is the daemon's auth client (nsqpy.auth.AuthClient:
    ``await auth.query(remote_ip, tls, common_name, secret) -> AuthState``). ``state`` is the
    last answer (None before AUTH)."""

    __slots__ = ("_auth", "_host", "_loop", "_task", "secret", "state")

    def __init__(self, host: AuthHost, loop: asyncio.AbstractEventLoop, auth: Any) -> None:
        self._host = host
        self._loop = loop
        self._auth = auth
        self._task: asyncio.Task[AuthState] | None = None
        self.secret = ""
        self.state: AuthState | None = None

    def authenticate(self, body: bytes) -> NoReturn:
        """The AUTH command (its state and parameter checks made): query the auth servers with
        the secret ``body``; the identity JSON is the reply. Raises FatalClientError E_INVALID
        "AUTH already set" on a second AUTH that had authorizations; else always Suspend."""
        state = self.state
        if state is not None and state.authorizations:
            raise FatalClientError("E_INVALID", "AUTH already set")
        self.secret = body.decode("utf-8", "replace")
        self._query(self._authenticated)

    def check(self, cmd: str, topic: str, channel: str, retry: Callable[[], None]) -> None:
        """nsqd's CheckAuth for ``cmd`` on ``topic`` (and ``channel``, "" for publishing):
        returns when allowed; raises FatalClientError E_AUTH_FIRST (no AUTH yet) or
        E_UNAUTHORIZED; an expired answer is asked again first (Suspend; ``retry`` runs the
        command again once the new answer is in)."""
        state = self.state
        if state is None or not state.authorizations:
            raise FatalClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
        if state.is_expired():

            def requeried(new: AuthState) -> None:
                self.state = new
                retry()

            self._query(requeried)
        if not state.is_allowed(topic, channel):
            raise FatalClientError(
                "E_UNAUTHORIZED",
                f"AUTH failed for {cmd} on {go_quote(topic.encode())} {go_quote(channel.encode())}",
            )

    def check_before_body(self, cmd: str, topic: str) -> bool:
        """The check nsqd makes before reading a body (MPUB): True when it was made; False when
        the answer has expired (the command's handler asks again once the body is in)."""
        state = self.state
        if state is not None and state.is_expired():
            return False
        self.check(cmd, topic, "", _no_retry)
        return True

    def cancel(self) -> None:
        """The connection is closing: drop a query in progress."""
        if self._task is not None:
            self._task.cancel()

    # ------------------------------------------------------------ the query

    def _query(self, on_answer: Callable[[AuthState], None]) -> NoReturn:
        host = self._host
        host.suspend_commands()
        remote_ip, tls_on, common_name = host.auth_peer()
        task = self._loop.create_task(self._auth.query(remote_ip, tls_on, common_name, self.secret))
        self._task = task
        task.add_done_callback(lambda t: self._answered(t, on_answer))
        raise Suspend

    def _answered(
        self, task: asyncio.Task[AuthState], on_answer: Callable[[AuthState], None]
    ) -> None:
        self._task = None
        if task.cancelled():
            self._host.resume_commands(None)
            return
        exc = task.exception()  # retrieved here, whatever happens to the connection

        def then() -> None:
            if exc is not None:
                # nsqd does not leak auth server errors to untrusted clients
                log.warning("PROTOCOL(V2): [%s] AUTH failed %s", self._host.remote_address, exc)
                raise FatalClientError("E_AUTH_FAILED", "AUTH failed")
            on_answer(task.result())

        self._host.resume_commands(then)

    def _authenticated(self, state: AuthState) -> None:
        self.state = state
        if not state.authorizations:
            raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        resp = {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
        self._host.write_reply(
            wire.encode_response(json.dumps(resp, separators=(",", ":")).encode())
        )
