"""nsqpy.client against Go nsqd 1.3: the feature matrix of tests/daemon/test_client_secure.py
(TLS, a verified client certificate, snappy, deflate, AUTH and their mixes: publish, consume,
then /stats' client fields), backoff and requeue attempts as Go nsqd counts them, and discovery
through Go nsqlookupd's /lookup answer.

Go's nsqd comes from tests/support/gobin.py (skipped with the reason when it is missing)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from support import gobin

from nsqpy.testing import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "daemon"))

from test_auth import AuthServer  # noqa: E402
from test_client_secure import CASES, daemon_flags, nsqd_stats, run_case  # noqa: E402
from test_tls import Certs  # noqa: E402

from nsqpy.client import Config, Consumer, Producer  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("client-go-certs"))


@pytest.fixture
def authd(tmp_path):
    root = tmp_path / "authd"
    root.mkdir()
    s = AuthServer(root)
    yield s
    s.stop()


@pytest.fixture
def go_nsqd(tmp_path):
    started: list[gobin.GoProcess] = []

    def start(*args: str) -> gobin.GoProcess:
        p = gobin.start_go_nsqd(tmp_path / f"go{len(started)}", *args)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("name", list(CASES))
async def test_client_features_against_go_nsqd(go_nsqd, certs, authd, name):
    case = CASES[name]
    d = go_nsqd(*daemon_flags(case, certs, authd))
    await run_case(d.tcp_address, case, certs, lambda: nsqd_stats(d))


@pytest.mark.asyncio
async def test_client_requeue_and_backoff_on_go_nsqd(go_nsqd):
    """A failing handler: the consumer backs off (RDY 0 for 0.1 s), tests the water (RDY 1),
    Go nsqd redelivers after the 0.5 s requeue delay with attempts 2, and the finished retry
    brings the consumer back to its max_in_flight."""
    d = go_nsqd()
    p = Producer(d.tcp_address)
    await p.publish("go_backoff", b"flaky")
    rdys: list[int] = []
    seen: list[int] = []
    done = asyncio.Event()

    def handler(msg) -> None:
        seen.append(msg.attempts)
        if msg.attempts == 1:
            raise RuntimeError("first try fails")
        done.set()

    cfg = Config(max_in_flight=7, backoff_multiplier=0.05, default_requeue_delay=0.5)
    c = Consumer("go_backoff", "ch", cfg)
    c.add_handler(handler)
    await c.connect_to_nsqd(d.tcp_address)
    conn = c.conns[d.tcp_address]
    orig = conn.set_rdy

    def spy(n: int) -> None:
        rdys.append(n)
        orig(n)

    conn.set_rdy = spy  # type: ignore[method-assign]
    await asyncio.wait_for(done.wait(), 10)
    for _ in range(100):
        if rdys[-1:] == [7]:
            break
        await asyncio.sleep(0.02)
    assert seen == [1, 2]
    assert rdys == [0, 1, 7]
    await c.stop(5)
    await p.stop()


@pytest.mark.asyncio
async def test_client_discovery_through_go_lookupd(go_nsqd):
    """Go nsqlookupd with two Go nsqd: the consumer finds both from /lookup and reads from
    both, max_in_flight 6 split 3 + 3."""
    lk = gobin.start_go_lookupd()
    try:
        flags = (f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1")
        d1, d2 = go_nsqd(*flags), go_nsqd(*flags)
        p1, p2 = Producer(d1.tcp_address), Producer(d2.tcp_address)
        await p1.publish("go_disc", b"one")
        await p2.publish("go_disc", b"two")
        await asyncio.to_thread(
            wait_for, lambda: len(lk.get_json("/lookup?topic=go_disc")["producers"]) == 2
        )
        got: list[bytes] = []
        c = Consumer("go_disc", "ch", Config(max_in_flight=6, lookupd_poll_interval=0.5))
        c.add_handler(lambda m: got.append(m.body))
        await c.connect_to_lookupd(lk.http_address)
        await asyncio.to_thread(wait_for, lambda: len(got) == 2)
        assert sorted(got) == [b"one", b"two"]
        assert sorted(c.conns) == sorted([d1.tcp_address, d2.tcp_address])
        assert sorted(conn.rdy for conn in c.conns.values()) == [3, 3]
        await c.stop(5)
        await p1.stop()
        await p2.stop()
    finally:
        assert lk.stop() == 0
