"""AUTH answers expire by an injected clock: nsqpy/auth.py's AuthState and its use by the V2
protocol's sans-IO core (nsqpy/protocol_v2.py, nsqpy/auth_session.py).

No auth server, no sockets, no sleeps: answers are made by ``parse_auth_response`` from the
JSON an auth server would send, stamped by the test's clock, and handed to the core where the
connection would hand the query's result; the test moves the clock past the TTL. The rules are
nsqd 1.3's (internal/auth/authorizations.go State.IsExpired: expired once ``Expires`` is before
now; nsqd/protocol_v2.go CheckAuth: an expired answer is asked again before PUB, MPUB, DPUB and
SUB, and a failed query is E_AUTH_FAILED). The wiring to a real auth server and the event
loop's clock is tests/daemon/test_auth.py's.
"""

from __future__ import annotations

import pytest
from test_protocol_v2 import Client, Clock, err, ok

from nsqpy import wire
from nsqpy.auth import AuthError, parse_auth_response
from nsqpy.nsqd import NSQD
from nsqpy.options import Options
from nsqpy.protocol_v2 import CLOSE, SUSPEND, WAIT_AUTH, ProtocolV2

pytestmark = pytest.mark.unit

TTL = 60  # seconds


def answer(topic: str = ".*", perms: tuple[str, ...] = ("publish", "subscribe")) -> dict:
    """An auth server's JSON answer granting ``perms`` on ``topic`` (any channel)."""
    return {
        "ttl": TTL,
        "identity": "me",
        "identity_url": "https://id/me",
        "authorizations": [{"topic": topic, "channels": [".*"], "permissions": list(perms)}],
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def core(tmp_path, clock) -> ProtocolV2:
    nsqd = NSQD(Options(data_path=str(tmp_path)))
    nsqd.auth = object()  # type: ignore[assignment]  # auth servers configured
    return ProtocolV2(nsqd, clock.s)


def authed(core: ProtocolV2, clock: Clock, data: dict | None = None) -> Client:
    """A client whose AUTH got ``data`` (default: everything allowed), stamped now."""
    c = Client(core)
    assert c.cmd(b"AUTH", body=b"s3cret") == SUSPEND
    assert core.resume(c.state, parse_auth_response(data or answer(), clock.s)) == 0
    assert c.only()[0] == wire.FRAME_TYPE_RESPONSE
    return c


def expect_requery(c: Client) -> None:
    """The last command was suspended on a query to the auth servers with the AUTH secret."""
    wait = c.state.wait
    assert wait is not None and (wait.kind, wait.arg) == (WAIT_AUTH, "s3cret")
    assert c.frames() == []  # nothing answered before the query's answer


def test_answer_expires_ttl_seconds_after_it_was_stamped(clock) -> None:
    state = parse_auth_response(answer(), clock.s)
    assert state.ttl == TTL and state.expires == clock.s() + TTL
    clock.advance_ms(TTL * 1000)
    assert not state.is_expired()  # Go: expired once Expires is *before* now
    clock.advance_ms(1)
    assert state.is_expired()


@pytest.mark.parametrize("ttl", [0, -1, 1.5, "60", True])
def test_invalid_ttl_refused(clock, ttl) -> None:
    with pytest.raises(AuthError, match="invalid TTL"):
        parse_auth_response(dict(answer(), ttl=ttl), clock.s)


def test_pub_within_ttl_uses_the_cached_answer(core, clock) -> None:
    c = authed(core, clock)
    clock.advance_ms(TTL * 1000)
    assert c.cmd(b"PUB", b"t", body=b"x") == 0
    assert c.only() == ok()
    assert c.state.wait is None


def test_ttl_expiry_requeries_then_the_command_runs(core, clock) -> None:
    c = authed(core, clock)
    clock.advance_ms(TTL * 1000 + 1)
    assert c.cmd(b"PUB", b"t", body=b"after") == SUSPEND
    expect_requery(c)
    assert "t" not in core.nsqd.topics  # not run before the answer
    assert core.resume(c.state, parse_auth_response(answer(), clock.s)) == 0
    assert c.only() == ok()
    assert core.nsqd.topics["t"].depth == 1
    # the new answer is cached for its own TTL, from when it came
    clock.advance_ms(TTL * 1000)
    assert c.cmd(b"PUB", b"t", body=b"cached") == 0
    assert c.only() == ok()
    clock.advance_ms(1)
    assert c.cmd(b"PUB", b"t", body=b"again") == SUSPEND
    expect_requery(c)


def test_ttl_expiry_then_revoked_is_unauthorized(core, clock) -> None:
    c = authed(core, clock, answer("^orders$", ("publish",)))
    clock.advance_ms(TTL * 1000 + 1)
    assert c.cmd(b"PUB", b"orders", body=b"revoked") == SUSPEND
    expect_requery(c)
    revoked = parse_auth_response(answer("^other$", ("publish",)), clock.s)
    assert core.resume(c.state, revoked) == CLOSE
    assert c.only() == err(b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""')
    assert "orders" not in core.nsqd.topics


def test_ttl_expiry_with_auth_server_gone_is_auth_failed(core, clock) -> None:
    c = authed(core, clock)
    clock.advance_ms(TTL * 1000 + 1)
    assert c.cmd(b"SUB", b"orders", b"c") == SUSPEND
    expect_requery(c)
    assert core.resume(c.state, AuthError("failed to auth against x - refused")) == CLOSE
    assert c.only() == err(b"E_AUTH_FAILED AUTH failed")
    assert "orders" not in core.nsqd.topics


def test_expired_mpub_reads_its_body_then_requeries(core, clock) -> None:
    c = authed(core, clock)
    clock.advance_ms(TTL * 1000 + 1)
    # the check before the body sees the expiry and lets the body in; the handler asks again
    assert c.send(wire.encode_mpub(b"t", [b"a", b"b"])) == SUSPEND
    expect_requery(c)
    assert core.resume(c.state, parse_auth_response(answer(), clock.s)) == 0
    assert c.only() == ok()
    assert core.nsqd.topics["t"].depth == 2


def test_expired_sub_requeries_then_subscribes(core, clock) -> None:
    c = authed(core, clock)
    clock.advance_ms(TTL * 1000 + 1)
    assert c.cmd(b"SUB", b"t", b"c") == SUSPEND
    expect_requery(c)
    assert core.resume(c.state, parse_auth_response(answer(), clock.s)) == 0
    assert c.only() == ok()
    assert "c" in core.nsqd.topics["t"].channels
    # another client on the same core has no answer of its own: AUTH first
    fresh = Client(core)
    assert fresh.cmd(b"SUB", b"t", b"c") == CLOSE
    assert fresh.only() == err(b"E_AUTH_FIRST AUTH required before SUB")
