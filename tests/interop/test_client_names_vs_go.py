"""The client's name check against the daemons themselves: for random names (hypothesis), the
client accepts a topic name exactly when Go nsqd 1.3 and nsqpy-d accept it (HTTP /pub: 200,
or 400 INVALID_TOPIC), so what nsqpy.client refuses before sending is what nsqd would have
refused, no more and no less.

Go's nsqd comes from tests/support/gobin.py (skipped with the reason when it is missing)."""

from __future__ import annotations

import string
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import gobin
from support.daemons import DAEMON_CWD

from nsqpy.client.checks import InvalidNameError, check_name
from nsqpy.testing import Nsqd

NAME_CHARS = string.ascii_letters + string.digits + "._-"

NAMES = st.one_of(
    st.text(alphabet=NAME_CHARS + "# \n\t/:é", min_size=1, max_size=70),
    st.text(alphabet=NAME_CHARS, min_size=50, max_size=60).map(lambda s: s + "#ephemeral"),
    st.text(min_size=1, max_size=20),
)


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    go = gobin.start_go_nsqd(tmp_path_factory.mktemp("go-names"))
    ours = Nsqd(data_path=tmp_path_factory.mktemp("nsqpy-names"), cwd=DAEMON_CWD)
    yield go, ours
    go.stop()
    ours.stop()


def accepts(d, name: str) -> bool:
    q = urllib.parse.urlencode({"topic": name})
    code, body, _ = d.http("POST", f"/pub?{q}", b"x")
    assert code in (200, 400), (name, code, body)
    return code == 200


def client_accepts(name: str) -> bool:
    try:
        check_name(name, "topic")
    except InvalidNameError:
        return False
    return True


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=NAMES)
def test_client_name_check_agrees_with_go_nsqd_and_nsqpy_d(daemons, name: str) -> None:
    go, ours = daemons
    want = client_accepts(name)
    assert accepts(go, name) is want, name
    assert accepts(ours, name) is want, name
