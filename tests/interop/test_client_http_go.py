"""nsqpy.client's HTTP admin clients against Go's nsqd and nsqlookupd 1.3 and against nsqpy-d and
nsqpy-lookupd, side by side: every check of tests/support/client_http_checks.py runs on both pairs,
so a difference shows as one check passing on one implementation and failing on the other. The Go
half needs the Go binaries (tests/support/gobin.py) and skips, saying why, without them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import gobin

pytest.register_assert_rewrite("client_http_checks")

from support.client_http_checks import CHECKS, Pair, run_check  # noqa: E402
from support.daemons import Daemon, Lookupd  # noqa: E402

pytestmark = pytest.mark.timeout(90)

IMPLS = ("nsqpy", "go")


@pytest.fixture(scope="module", params=IMPLS)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    """An nsqd registered with a lookupd (broadcasting 127.0.0.1), Go's or nsqpy's."""
    impl: str = request.param
    if impl == "go":
        gobin.require("nsqd")
        gobin.require("nsqlookupd")
    data: Path = tmp_path_factory.mktemp(f"client_http_{impl}")
    lk = gobin.start_go_lookupd() if impl == "go" else Lookupd([])
    flags = [f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1"]
    try:
        nsqd = gobin.start_go_nsqd(data, *flags) if impl == "go" else Daemon(flags, data)
    except BaseException:
        lk.stop()
        raise
    yield Pair(impl, nsqd.tcp_address, nsqd.http_address, lk.http_address)
    rc = (nsqd.stop(), lk.stop())
    assert rc == (0, 0), (nsqd.log_text()[-2000:], lk.log_text()[-2000:])


@pytest.mark.parametrize("check", list(CHECKS))
def test_client_http(pair: Pair, check: str) -> None:
    run_check(check, pair)
