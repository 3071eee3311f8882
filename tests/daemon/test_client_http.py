"""nsqpy.client's HTTP admin clients against nsqpy-d registered with nsqpy-lookupd: the checks
of tests/client_http_checks.py (Go's daemons get the same ones in
tests/interop/test_client_http_go.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("client_http_checks")

from client_http_checks import CHECKS, Pair, run_check  # noqa: E402
from conftest import Daemon, Lookupd  # noqa: E402

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    lk = Lookupd([])
    try:
        nsqd = Daemon(
            [f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1"],
            Path(tmp_path_factory.mktemp("client_http")),
        )
    except BaseException:
        lk.stop()
        raise
    yield Pair("nsqpy", nsqd.tcp_address, nsqd.http_address, lk.http_address)
    rc = (nsqd.stop(), lk.stop())
    assert rc == (0, 0), (nsqd.log_text()[-2000:], lk.log_text()[-2000:])


@pytest.mark.parametrize("check", list(CHECKS))
def test_client_http(pair: Pair, check: str) -> None:
    run_check(check, pair)
