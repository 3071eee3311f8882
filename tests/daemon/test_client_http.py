"""nsqpy.client's HTTP admin clients against nsqpy-d registered with nsqpy-lookupd: the checks
of tests/support/client_http_checks.py (Go's daemons get the same ones in
tests/interop/test_client_http_go.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("client_http_checks")

from support.client_http_checks import CHECKS, Pair, run_check  # noqa: E402
from support.daemons import Daemon, Lookupd  # noqa: E402

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


def test_https_with_an_ssl_context(daemon_factory, tmp_path: Path) -> None:
    """An ``https://`` address and a context trusting the daemon's CA (nsqd's HTTPS listener)."""
    import asyncio
    import ssl

    import trustme

    from nsqpy.client import NsqdHTTPClient
    from nsqpy.testing import wait_for

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    server.cert_chain_pems[0].write_to_path(str(cert))
    server.private_key_pem.write_to_path(str(key))
    d = daemon_factory(f"--tls-cert={cert}", f"--tls-key={key}")
    port = wait_for(lambda: d.https_port, what="HTTPS line")
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)

    async def check() -> None:
        async with NsqdHTTPClient(f"https://127.0.0.1:{port}", ssl_context=ctx) as c:
            assert await c.ping() == "OK"
            await c.create_topic("over_https")
            await c.pub("over_https", b"x")
            t = (await c.stats(topic="over_https")).topic("over_https")
            assert t is not None and t.message_count == 1

    asyncio.run(check())
