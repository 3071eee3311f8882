"""A new topic learns its channels from nsqlookupd before the command that made it is answered:
the checks of tests/support/topic_start_checks.py on Go's nsqd with Go's nsqlookupd 1.3 and on
nsqpy-d with nsqpy-lookupd, side by side (/topic/create, /channel/create, then /pub or PUB: the
message is in the channel at once; a first PUB, MPUB, /pub or SUB finds the channels the lookupd
knows). The Go half needs the Go binaries (tests/support/gobin.py) and skips, saying why, without
them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import gobin

pytest.register_assert_rewrite("support.topic_start_checks")

from support import topic_start_checks  # noqa: E402
from support.daemons import Daemon, Lookupd  # noqa: E402

pytestmark = pytest.mark.timeout(90)

IMPLS = ("nsqpy", "go")


@pytest.fixture(scope="module", params=IMPLS)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, Any]]:
    """(nsqd, lookupd): an nsqd registered with a lookupd (broadcasting 127.0.0.1), Go's or
    nsqpy's, once the nsqd has read the lookupd's IDENTIFY answer."""
    impl: str = request.param
    if impl == "go":
        gobin.require("nsqd")
        gobin.require("nsqlookupd")
    data: Path = tmp_path_factory.mktemp(f"topic_start_{impl}")
    lk = gobin.start_go_lookupd() if impl == "go" else Lookupd([])
    flags = [f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1"]
    try:
        nsqd = gobin.start_go_nsqd(data, *flags) if impl == "go" else Daemon(flags, data)
    except BaseException:
        lk.stop()
        raise
    try:
        topic_start_checks.wait_registered(nsqd, lk)
        yield nsqd, lk
    finally:
        rc = (nsqd.stop(), lk.stop())
    assert rc == (0, 0), (nsqd.log_text()[-2000:], lk.log_text()[-2000:])


@pytest.mark.parametrize("check", list(topic_start_checks.CHECKS))
def test_topic_start(pair: tuple[Any, Any], check: str) -> None:
    run: Callable[[Any, Any], None] = topic_start_checks.CHECKS[check]
    run(*pair)
