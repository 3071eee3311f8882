"""One V2 connection's AUTH state and rules: the secret, the auth server's answer and its TTL.

Strategy: sans-IO, as protocol_v2. nsqd asks its auth servers from the connection's own
goroutine, so a client's commands wait for the answer in order; here the event loop must not
wait, so the rules only say *when* to ask: ``authenticate`` (AUTH) and ``authorize`` (PUB, MPUB,
DPUB, SUB past the answer's TTL) tell protocol_v2 to suspend the command on an auth-server
query, which client_v2.Connection runs (nsqpy.auth's HTTP query) before it hands the answer
back (``answered`` for AUTH; ``state`` set directly for a query again). The rules are nsqd's
(nsqd/protocol_v2.go AUTH and CheckAuth, nsqd/client_v2.go QueryAuthd/IsAuthorized): AUTH only
once and before anything but IDENTIFY; PUB/MPUB/DPUB/SUB need an authorization for their topic
(and channel); an answer past its TTL is asked again before the next such command; an
auth-server failure is E_AUTH_FAILED without its details (protocol_v2 logs them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import wire
from .internal.gojson import encode
from .internal.gostrconv import quote as go_quote
from .wire import FatalClientError

if TYPE_CHECKING:
    from .auth import AuthState


class AuthSession:
    """AUTH for one connection: ``secret`` (the AUTH body) and ``state``, the last answer
    (None before AUTH)."""

    __slots__ = ("secret", "state")

    def __init__(self) -> None:
        self.secret = ""
        self.state: AuthState | None = None

    def authenticate(self, body: bytes) -> None:
        """The AUTH command (its state and parameter checks made): keep the secret ``body``;
        the caller then asks the auth servers. Raises FatalClientError E_INVALID "AUTH already
        set" on a second AUTH that had authorizations."""
        state = self.state
        if state is not None and state.authorizations:
            raise FatalClientError("E_INVALID", "AUTH already set")
        self.secret = body.decode("utf-8", "replace")

    def answered(self, state: AuthState) -> bytes:
        """AUTH's answer is in: keep it; returns the reply frame (the identity JSON). Raises
        FatalClientError E_UNAUTHORIZED when it grants nothing."""
        self.state = state
        if not state.authorizations:
            raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        resp = {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
        return wire.encode_response(encode(resp))

    def authorize(self, cmd: str, topic: str, channel: str) -> bool:
        """nsqd's CheckAuth for ``cmd`` on ``topic`` (and ``channel``, "" for publishing): True
        when allowed; False when the answer has expired (ask again, then check again); raises
        FatalClientError E_AUTH_FIRST (no AUTH yet) or E_UNAUTHORIZED."""
        state = self.state
        if state is None or not state.authorizations:
            raise FatalClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
        if state.is_expired():
            return False
        if not state.is_allowed(topic, channel):
            raise FatalClientError(
                "E_UNAUTHORIZED",
                f"AUTH failed for {cmd} on {go_quote(topic.encode())} {go_quote(channel.encode())}",
            )
        return True

    def check_before_body(self, cmd: str, topic: str) -> bool:
        """The check nsqd makes before reading a body (MPUB): True when it was made; False when
        the answer has expired (the command's handler asks again once the body is in)."""
        state = self.state
        if state is not None and state.is_expired():
            return False
        return self.authorize(cmd, topic, "")
