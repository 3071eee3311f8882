"""nsqpy.internal.netaddr: host:port both ways, [v6] included, and the places that use it."""

from __future__ import annotations

import pytest

from nsqpy.internal.clusterinfo.types import producer_from_nsqd
from nsqpy.internal.netaddr import (
    dial_address,
    format_listen_addr,
    is_unix_address,
    join_host_port,
    split_host_port,
    split_host_port_lenient,
)
from nsqpy.spark.lookup import producer_address, producer_http_address
from nsqpy.statsd import resolve_prefix


@pytest.mark.parametrize(
    ("addr", "want"),
    [
        ("127.0.0.1:4150", ("127.0.0.1", 4150)),
        ("[::1]:4150", ("::1", 4150)),
        ("[fe80::1%eth0]:1", ("fe80::1%eth0", 1)),
        (":4151", ("", 4151)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_split_host_port(addr: str, want: tuple[str, int]) -> None:
    assert split_host_port(addr) == want
    assert join_host_port(*want) == addr


@pytest.mark.parametrize(
    ("addr", "text"),
    [
        ("localhost", "address localhost: missing port in address"),
        ("::1:4150", "address ::1:4150: too many colons in address"),
        ("host:http", "address host:http: invalid port"),
    ],
)
def test_split_host_port_refuses_as_go(addr: str, text: str) -> None:
    with pytest.raises(ValueError, match=f"^{text}$"):
        split_host_port(addr)
    assert split_host_port_lenient(addr) == ("", 0)


def test_join_and_dial() -> None:
    assert join_host_port("::1", 4151) == "[::1]:4151"
    assert join_host_port("host", 1) == "host:1"
    assert dial_address("::1", 4151) == "[::1]:4151"
    assert dial_address("[::1]", 4151) == "[::1]:4151"
    assert dial_address("h.local", 4150) == "h.local:4150"


def test_listen_and_unix_addresses() -> None:
    assert format_listen_addr(("0.0.0.0", 4150)) == "[::]:4150"
    assert format_listen_addr(("::", 4150, 0, 0)) == "[::]:4150"
    assert format_listen_addr(("::1", 4150, 0, 0)) == "[::1]:4150"
    assert is_unix_address("/tmp/nsqd.sock") and not is_unix_address("[::1]:4150")


def test_users_of_netaddr_take_v6() -> None:
    v6 = {"broadcast_address": "::1", "tcp_port": 4150, "http_port": 4151}
    assert producer_address(v6) == "[::1]:4150"
    assert producer_http_address(v6) == "[::1]:4151"
    assert producer_address({**v6, "broadcast_address": "[::1]"}) == "[::1]:4150"
    assert resolve_prefix("nsq.%s", "::1", 4151) == "nsq.[__1]_4151."
    assert resolve_prefix("nsq.%s", "10.0.0.1", 4151) == "nsq.10_0_0_1_4151."
    p = producer_from_nsqd({"version": "1.3.0"}, [], "[::1]:4151")
    assert (p["broadcast_address"], p["http_port"]) == ("::1", 4151)
    p = producer_from_nsqd({"version": "1.3.0"}, [], "nsqd.local:4151")
    assert (p["broadcast_address"], p["http_port"]) == ("nsqd.local", 4151)
