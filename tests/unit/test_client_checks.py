"""nsqpy.client.checks: what the client refuses before writing, with nsqd's rules. The name
check is the daemon's rule (nsqpy.internal.names, which wire.py and so nsqd use), checked as a
property over random text; each refusal names the rule or the fix; body types and sizes are
refused as nsqd would, with its codes."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy import wire
from nsqpy.client import NSQError
from nsqpy.client.checks import (
    InvalidNameError,
    MessageTooBigError,
    check_bodies,
    check_body,
    check_mpub_size,
    check_name,
    check_size,
    limit_from_error,
)
from nsqpy.internal import names

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

NAME_CHARS = string.ascii_letters + string.digits + "._-"

#: Names that look fine to a person and are not (nsqd answers E_BAD_TOPIC and hangs up).
BAD_NAMES = [
    "",
    "has space",
    "new\nline",
    "trailing\n",
    "tab\there",
    "x" * 65,
    "#ephemeral",
    "a#b",
    "a#ephemeral#ephemeral",
    "émoji",
    "slash/name",
    "colon:name",
]


def client_accepts(name: str) -> bool:
    try:
        check_name(name, "topic")
    except InvalidNameError:
        return False
    return True


@SETTINGS
@given(
    st.one_of(
        st.text(max_size=80),
        st.text(alphabet=NAME_CHARS + "# \n\t", max_size=80),
        st.text(alphabet=NAME_CHARS, min_size=55, max_size=70).map(lambda s: s + "#ephemeral"),
        st.sampled_from(BAD_NAMES),
    )
)
def test_client_name_check_is_the_daemons_rule(name: str) -> None:
    """For any text, the client refuses exactly what nsqd's rule (wire.is_valid_name, used by
    nsqd's PUB/SUB/HTTP handlers) refuses."""
    assert client_accepts(name) is wire.is_valid_name(name)
    assert (names.name_problem(name) is None) is wire.is_valid_name(name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_client_refusal_names_the_rule(name: str) -> None:
    with pytest.raises(InvalidNameError) as e:
        check_name(name, "channel")
    err = e.value
    assert isinstance(err, ValueError) and isinstance(err, NSQError)
    assert err.code == "E_BAD_CHANNEL" and not err.fatal
    assert names.NAME_RULE in str(err) and repr(name) in str(err)


def test_client_refusal_says_which_part_breaks() -> None:
    def why(name: object) -> str:
        with pytest.raises(InvalidNameError) as e:
            check_name(name, "topic")
        assert e.value.code == "E_BAD_TOPIC"
        return str(e.value)

    assert "' ' at position 3" in why("has space")
    assert "'\\n' at position 3" in why("new\nline")
    assert "65 characters long, over 64" in why("x" * 65)
    assert "empty" in why("")
    assert "'#' at position 1" in why("a#b")
    assert "nothing before" in why("#ephemeral")
    assert "not bytes" in why(b"topic")
    assert check_name("ok.name_-1#ephemeral", "topic") == b"ok.name_-1#ephemeral"


def test_client_body_must_be_bytes_like() -> None:
    with pytest.raises(TypeError, match=r"not str: encode it first, e\.g\. body\.encode"):
        check_body("text")
    with pytest.raises(TypeError, match="bytes-like .* not dict"):
        check_body({"a": 1})
    with pytest.raises(TypeError, match="not int"):
        check_body(5)
    assert check_body(b"x") == b"x"
    ba = bytearray(b"ab")
    out = check_body(ba)
    ba[0] = 0  # a copy: changing the caller's buffer later changes nothing sent
    assert out == b"ab" and type(out) is bytes
    assert check_body(memoryview(b"abc")[1:]) == b"bc"
    with pytest.raises(TypeError, match="sequence of bodies"):
        check_bodies(b"one body")
    with pytest.raises(TypeError, match="sequence of bodies"):
        check_bodies("one str")
    with pytest.raises(TypeError, match="not str"):
        check_bodies([b"a", "b"])
    with pytest.raises(ValueError, match="at least one"):
        check_bodies([])


def test_client_size_checks_use_nsqds_codes() -> None:
    check_size("PUB", 10, 0)  # 0: no limit known
    check_size("PUB", 10, 10)
    with pytest.raises(MessageTooBigError) as e:
        check_size("PUB", 11, 10)
    assert (e.value.code, e.value.size, e.value.limit) == ("E_BAD_MESSAGE", 11, 10)
    assert isinstance(e.value, ValueError) and "PUB message too big 11 > 10" in str(e.value)
    check_mpub_size([b"a" * 10] * 2, 10, 4 + 2 * 14)
    with pytest.raises(MessageTooBigError) as e:
        check_mpub_size([b"a" * 10] * 2, 10, 4 + 2 * 14 - 1)
    assert e.value.code == "E_BAD_BODY" and e.value.size == 32
    with pytest.raises(MessageTooBigError) as e:
        check_mpub_size([b"a", b"a" * 11], 10, 0)
    assert e.value.code == "E_BAD_MESSAGE"


def test_client_learns_limits_from_nsqds_refusals() -> None:
    msg = NSQError.from_frame(b"E_BAD_MESSAGE PUB message too big 2000 > 1024")
    assert limit_from_error(msg) == ("max_msg_size", 1024)
    body = NSQError.from_frame(b"E_BAD_BODY MPUB body too big 9000 > 5000")
    assert limit_from_error(body) == ("max_body_size", 5000)
    assert limit_from_error(NSQError.from_frame(b"E_BAD_TOPIC PUB topic name")) is None
