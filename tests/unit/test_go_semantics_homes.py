"""The daemons' code reaching Go's semantics through nsqpy.internal (gojson, netaddr, gotime,
gostrconv) instead of copies: IDENTIFY decoding in nsqd and nsqlookupd, the JSON they send,
addresses with IPv6 hosts, and /pub's defer arithmetic. In process, no daemon."""

from __future__ import annotations

import struct

import pytest

from nsqpy import wire
from nsqpy.auth import Authorization, AuthState
from nsqpy.auth_session import AuthSession
from nsqpy.http_api import _ms_duration_ns
from nsqpy.internal.gojson import GoJSONError
from nsqpy.lookup_peer import identify_cmd
from nsqpy.lookupd.protocol_v1 import decode_identify as lookupd_decode_identify
from nsqpy.lookupd.registration_db import PeerInfo, Registration, RegistrationDB
from nsqpy.protocol_v2 import decode_identify, decode_identify_aside
from nsqpy.stats import _client_line
from nsqpy.testing.process import DaemonProcess, Listening

# ---------------------------------------------------------------- IDENTIFY


def test_nsqd_identify_lone_surrogate_is_u_fffd() -> None:
    """Go decodes a lone UTF-16 surrogate escape as U+FFFD; keeping it made /stats fail."""
    assert decode_identify(b'{"client_id":"\\ud800x","hostname":"\\udfff"}') == {
        "client_id": "\ufffdx",
        "hostname": "\ufffd",
    }


def test_nsqd_identify_errors_are_go_json_errors() -> None:
    """A refused body raises GoJSONError (a ValueError with Go's text); the helper-process
    path turns it into None, deep nesting included."""
    with pytest.raises(GoJSONError, match="of type nsqd.identifyDataV2"):
        decode_identify(b"[1]")
    with pytest.raises(ValueError, match="identifyDataV2.sample_rate of type int32"):
        decode_identify(b'{"sample_rate":2147483648}')
    assert decode_identify_aside(b"{bad") is None
    # Go's decoder takes nesting up to 10,000 levels and ignores the unknown key; CPython's
    # json refuses 5,000 levels before 3.13 (its recursion limit: then None) and takes them
    # from 3.13 on, as Go does
    assert decode_identify_aside(b'{"x":' + b"[" * 5000 + b"]" * 5000 + b"}") in (None, {})
    assert decode_identify_aside(b'{"Client_ID":"a","client_id":"b"}') == {"client_id": "b"}


def test_lookupd_identify_through_gojson() -> None:
    peer = PeerInfo("1.2.3.4:5")
    lookupd_decode_identify(
        b'{"broadcast_address":"::1","TCP_PORT":4150,"http_port":4151,"version":"1.3.0",'
        b'"hostname":"\\ud800","node_id":7}',
        peer,
    )
    assert (peer.broadcast_address, peer.tcp_port, peer.http_port, peer.hostname) == (
        "::1",
        4150,
        4151,
        "\ufffd",
    )
    assert peer.node_id == 7
    with pytest.raises(GoJSONError, match="PeerInfo.tcp_port of type int"):
        lookupd_decode_identify(b'{"tcp_port":"4150"}', PeerInfo("x"))


# ---------------------------------------------------------------- JSON sent


def test_auth_answer_is_gos_marshal() -> None:
    """nsqd's AUTH answer (json.Marshal of a struct): UTF-8 kept, <>& escaped."""
    state = AuthState(
        ttl=60,
        identity="é<a&b>",
        identity_url="http://x/?a=1&b=2",
        authorizations=[Authorization(topic=None, channels=[], permissions=[])],  # type: ignore[arg-type]
    )
    frame = AuthSession().answered(state)
    body = (
        b'{"identity":"\xc3\xa9\\u003ca\\u0026b\\u003e",'
        b'"identity_url":"http://x/?a=1\\u0026b=2","permission_count":1}'
    )
    assert frame == wire.encode_response(body)


def test_lookup_identify_is_a_sorted_go_map() -> None:
    cmd = identify_cmd({"version": "1.3.0", "tcp_port": 1, "broadcast_address": "h<é>"})
    body = b'{"broadcast_address":"h\\u003c\xc3\xa9\\u003e","tcp_port":1,"version":"1.3.0"}'
    assert cmd == b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


# ---------------------------------------------------------------- addresses


def _client(remote: str) -> dict[str, object]:
    return {
        "remote_address": remote,
        "hostname": "h",
        "user_agent": "ua",
        "version": "V2",
        "connect_ts": 0,
        "state": 3,
        "in_flight_count": 0,
        "ready_count": 0,
        "finish_count": 0,
        "requeue_count": 0,
        "message_count": 0,
    }


@pytest.mark.parametrize(
    "remote, ident",
    [("127.0.0.1:5000", "h:5000 ua"), ("[::1]:5001", "h:5001 ua"), ("", "h: ua")],
)
def test_stats_text_client_port_is_split_host_ports(remote: str, ident: str) -> None:
    """printStats' `_, port, _ := net.SplitHostPort(RemoteAddress)`: "" when it fails."""
    assert _client_line(_client(remote)).startswith(f"[V2 {ident:<21}]")


def test_listening_port_of_v6_and_unix_addresses() -> None:
    assert Listening("TCP", "[::1]:4150").port == 4150
    assert Listening("TCP", "[::]:4151").port == 4151
    assert Listening("HTTP", "127.0.0.1:4152").port == 4152
    assert Listening("TCP", "/tmp/nsqd.sock").port == 0


def test_daemon_addresses_bracket_a_v6_host() -> None:
    d = DaemonProcess.__new__(DaemonProcess)
    d.host, d.tcp_port, d.http_port = "::1", 4150, 4151
    assert (d.tcp_address, d.http_address) == ("[::1]:4150", "[::1]:4151")
    d.host = "127.0.0.1"
    assert d.tcp_address == "127.0.0.1:4150"


@pytest.mark.parametrize(
    "broadcast, node, hit",
    [
        ("127.0.0.1", "127.0.0.1:4151", True),
        ("127.0.0.1", "127.0.0.1:4152", False),
        ("::1", "[::1]:4151", True),  # what nsqadmin sends (net.JoinHostPort)
        ("::1", "::1:4151", True),  # what Go nsqlookupd compares (fmt.Sprintf("%s:%d"))
        ("::1", "[::2]:4151", False),
        ("[::1]", "[::1]:4151", True),
    ],
)
def test_tombstone_matches_v6_nodes(broadcast: str, node: str, hit: bool) -> None:
    db = RegistrationDB(now=lambda: 1)
    peer = PeerInfo("p", broadcast_address=broadcast, tcp_port=4150, http_port=4151)
    db.add_producer(Registration("topic", "t", ""), peer)
    assert db.tombstone("t", node) == int(hit)


# ---------------------------------------------------------------- /pub?defer=


def test_defer_duration_wraps_as_gos_int64() -> None:
    """time.Duration(ms) * time.Millisecond overflows int64 in Go: /pub checks the result."""
    assert _ms_duration_ns(5) == 5_000_000
    assert _ms_duration_ns(-1) == -1_000_000
    assert _ms_duration_ns(9_223_372_036_854) == 9_223_372_036_854_000_000
    assert _ms_duration_ns(9_223_372_036_855) < 0
    assert _ms_duration_ns(18_446_744_073_710) == 448_384
