"""nsqpy.client with every connection feature nsqd negotiates, against nsqpy-d: TLS (also with
a client certificate nsqd requires and verifies), snappy, deflate, AUTH, and their mixes.

Each case starts a daemon with the flags the case needs, subscribes a Consumer, publishes through
a Producer (PUB, MPUB, and a DPUB of a minute), reads the PUB and MPUB back, then checks in
nsqd's /stats that the DPUB waits in the channel's deferred queue and that every client
connection really used what the case asked for (tls, snappy, deflate, authed). The same
cases run against Go nsqd in tests/interop/test_client_go.py (``run_case`` is shared). The TLS
certificates and the auth server are test_tls's and test_auth's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from test_auth import STANDARD, AuthServer
from test_tls import Certs

from nsqpy.client import Config, Consumer, NSQError, Producer

#: name → (client options, needs TLS on nsqd, needs client cert, needs auth)
CASES: dict[str, dict[str, Any]] = {
    "tls": {"tls_v1": True},
    "tls-client-cert": {"tls_v1": True, "client_cert": True},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True, "deflate_level": 3},
    "tls-snappy": {"tls_v1": True, "snappy": True},
    "tls-deflate": {"tls_v1": True, "deflate": True},
    "auth": {"auth": True},
    "tls-snappy-auth": {"tls_v1": True, "snappy": True, "auth": True},
}


#: A body of many snappy chunks (64 KiB each) and many inflate steps, incompressible in part.
BIG = (bytes(range(256)) * 1024 + b"z" * 300_000)[:500_000]


def daemon_flags(case: dict[str, Any], certs: Certs, authd: AuthServer | None) -> list[str]:
    """The nsqd flags (nsqpy-d's and Go's spellings are the same) a case needs."""
    flags: list[str] = []
    if case.get("tls_v1"):
        flags += certs.flags()
        if case.get("client_cert"):
            flags += [
                f"--tls-root-ca-file={certs.ca_file}",
                "--tls-client-auth-policy=require-verify",
                "--tls-required=tcp-https",  # TCP needs TLS, the plain HTTP port stays open
            ]
    if case.get("auth"):
        assert authd is not None
        authd.set(STANDARD)
        flags.append(f"--auth-http-address={authd.address}")
    return flags


def client_config(case: dict[str, Any], certs: Certs) -> Config:
    cfg = Config(max_in_flight=50, heartbeat_interval=1.0)
    if case.get("tls_v1"):
        cfg.set("tls_v1", "true")
        cfg.set("tls_root_ca_file", certs.ca_file)
        if case.get("client_cert"):
            cfg.set("tls_cert", certs.client_cert)
            cfg.set("tls_key", certs.client_key)
    for k in ("snappy", "deflate", "deflate_level"):
        if k in case:
            cfg.set(k, case[k])
    if case.get("auth"):
        cfg.auth_secret = "pubsub"
    return cfg


async def run_case(
    tcp_address: str, case: dict[str, Any], certs: Certs, stats: Callable[[], dict[str, Any]]
) -> None:
    """Subscribe, publish (PUB, MPUB of 50 with one 500 KB body, a DPUB of 60 s) and consume
    the 51 over connections with the case's features; check /stats' deferred count and client
    fields."""
    cfg = client_config(case, certs)
    got: list[bytes] = []
    done = asyncio.Event()

    def handler(msg) -> None:
        got.append(msg.body)
        if len(got) == 51:
            done.set()

    c = Consumer("orders", "ch", cfg)
    c.add_handler(handler)
    await c.connect_to_nsqd(tcp_address)
    p = Producer(tcp_address, cfg)
    await p.publish("orders", b"one")
    await p.multi_publish("orders", [b"m%03d" % i for i in range(49)] + [BIG])
    # Deferred for a minute: it must sit in the channel's deferred queue (Go nsqd would only
    # scan a new channel after its 5 s QueueScanRefreshInterval anyway).
    await p.deferred_publish("orders", 60, b"deferred")
    ident = p._conn.identify_response if p._conn else {}
    assert ident.get("tls_v1") is bool(case.get("tls_v1"))
    assert ident.get("snappy") is bool(case.get("snappy"))
    assert ident.get("deflate") is bool(case.get("deflate"))
    assert ident.get("auth_required") is bool(case.get("auth"))
    await asyncio.wait_for(done.wait(), 10)
    assert sorted(got) == sorted([b"one", BIG, *(b"m%03d" % i for i in range(49))])

    st = await asyncio.to_thread(stats)
    (ch,) = [ch for t in st["topics"] for ch in t["channels"]]
    assert ch["deferred_count"] == 1, ch
    clients = list(ch["clients"] or [])
    clients += st.get("producers") or []
    assert clients, st
    for cl in clients:
        assert cl["tls"] is bool(case.get("tls_v1")), cl
        assert cl["snappy"] is bool(case.get("snappy")), cl
        assert cl["deflate"] is bool(case.get("deflate")), cl
        assert cl.get("authed", False) is bool(case.get("auth")), cl
        if case.get("client_cert"):
            assert cl.get("tls_version", "").startswith("TLS"), cl
    await c.stop(5)
    await p.stop()
    assert c.stats().finished == 51


def nsqd_stats(d) -> dict[str, Any]:
    code, body, _ = d.http("GET", "/stats?format=json&include_clients=true")
    assert code == 200, body
    return json.loads(body)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("client-certs"))


@pytest.fixture
def authd(tmp_path):
    root = tmp_path / "authd"
    root.mkdir()
    s = AuthServer(root)
    yield s
    s.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("name", list(CASES))
async def test_client_features_against_nsqpy_d(daemon_factory, certs, authd, name):
    case = CASES[name]
    d = daemon_factory(*daemon_flags(case, certs, authd))
    await run_case(d.tcp_address, case, certs, lambda: nsqd_stats(d))


@pytest.mark.asyncio
async def test_client_auth_refused_and_missing_secret(daemon_factory, certs, authd):
    """A secret the auth server refuses gives E_AUTH_FAILED; a publish the grant does not allow
    gives E_UNAUTHORIZED; no secret at all when nsqd requires AUTH fails before any command."""
    d = daemon_factory(*daemon_flags({"auth": True}, certs, authd))
    with pytest.raises(NSQError) as e:
        await Producer(d.tcp_address, Config(auth_secret="wrong")).publish("orders", b"x")
    assert e.value.code == "E_AUTH_FAILED"
    p = Producer(d.tcp_address, Config(auth_secret="subonly"))
    with pytest.raises(NSQError) as e:
        await p.publish("orders", b"x")
    assert e.value.code == "E_UNAUTHORIZED"
    await p.stop()
    with pytest.raises(NSQError) as e:
        await Producer(d.tcp_address).publish("orders", b"x")
    assert e.value.code == "E_AUTH_REQUIRED"


@pytest.mark.asyncio
async def test_client_tls_required_and_untrusted(daemon_factory, certs):
    """--tls-required: a plain client is refused (E_INVALID) and a TLS client whose CA does not
    trust nsqd's certificate fails the handshake."""
    import ssl

    d = daemon_factory(*certs.flags(), "--tls-required=true")
    with pytest.raises(NSQError) as e:
        await Producer(d.tcp_address).publish("t", b"x")
    assert e.value.code == "E_INVALID"
    cfg = Config(tls_v1=True)  # system CAs: trustme's CA is not among them
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await Producer(d.tcp_address, cfg).publish("t", b"x")
    ok = Config(tls_v1=True, tls_root_ca_file=certs.ca_file)
    p = Producer(d.tcp_address, ok)
    await p.publish("t", b"x")
    await p.stop()
