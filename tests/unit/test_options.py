"""Unit and property tests for nsqpy.options (Go durations, node id, nsqd 1.3 defaults)."""

from __future__ import annotations

import hashlib
import re
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.options import (
    Options,
    default_node_id,
    format_go_duration_ms,
    parse_go_duration_ms,
    parse_go_duration_ns,
)

SETTINGS = settings(max_examples=200, deadline=None, database=None)

MS = 1_000_000  # ns
S = 1000 * MS
M = 60 * S
H = 60 * M

# --------------------------------------------------------------------------------------------
# parse_go_duration_*


@pytest.mark.parametrize(
    "text,ms",
    [
        ("60s", 60_000),
        ("1m30s", 90_000),
        ("250ms", 250),
        ("1h", 3_600_000),
        ("1.5h", 5_400_000),
        ("300us", 0),
        ("0", 0),
        ("-2s", -2000),
        ("+2s", 2000),
        ("0s", 0),
        ("-0", 0),
        ("1h2m3s4ms", 3_723_004),
        ("2m", 120_000),
        ("1500us", 1),
        ("-1500us", -1),  # truncated toward zero
        ("0.5s", 500),
        (".5s", 500),
        ("5.s", 5000),
        ("1s500ms", 1500),
        ("1ms1s", 1001),  # units may come in any order and repeat
        ("15m", 900_000),
    ],
)
def test_parse_ms(text: str, ms: int) -> None:
    assert parse_go_duration_ms(text) == ms


@pytest.mark.parametrize(
    "text,ns",
    [
        ("300us", 300_000),
        ("300µs", 300_000),  # U+00B5 micro sign
        ("300μs", 300_000),  # U+03BC greek mu
        ("7ns", 7),
        ("1.5h", 5_400 * S),
        ("1m30s", 90 * S),
        ("-2s", -2 * S),
        ("0", 0),
        ("2h45m", 2 * H + 45 * M),
    ],
)
def test_parse_ns(text: str, ns: int) -> None:
    assert parse_go_duration_ns(text) == ns


@pytest.mark.parametrize(
    "text",
    [
        "",
        "10",
        "s",
        "1x",
        "1.2.3s",
        "-",
        "+",
        ".s",
        "-.s",
        "1 s",
        "1e3s",
        "1h-1s",
        "ms",
        "1S",
        "1sec",
        "one s",
        "--1s",
        "1s1",
        "0x10s",
        "1,5s",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration_ns(text)
    with pytest.raises(ValueError):
        parse_go_duration_ms(text)


@SETTINGS
@given(
    st.booleans(),
    st.integers(0, 1000),
    st.integers(0, 10_000),
    st.integers(0, 100_000),
    st.integers(0, 10_000_000),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
)
def test_parse_sum_of_integer_parts(
    neg: bool, h: int, m: int, s: int, ms: int, us: int, ns: int
) -> None:
    text = ("-" if neg else "") + f"{h}h{m}m{s}s{ms}ms{us}us{ns}ns"
    total = h * H + m * M + s * S + ms * MS + us * 1000 + ns  # < 2**53: exact even as a float
    expected = -total if neg else total
    assert parse_go_duration_ns(text) == expected
    ms_expected = total // MS
    assert parse_go_duration_ms(text) == (-ms_expected if neg else ms_expected)


_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


@SETTINGS
@given(
    st.sampled_from(sorted(_UNIT_MS)).flatmap(
        # keep |ns| < 2**53 (about 104 days): the exactly representable range
        lambda u: st.tuples(
            st.just(u), st.integers(-(9 * 10**9) // _UNIT_MS[u], (9 * 10**9) // _UNIT_MS[u])
        )
    )
)
def test_parse_single_integer_unit(unit_n: tuple[str, int]) -> None:
    unit, n = unit_n
    assert parse_go_duration_ms(f"{n}{unit}") == n * _UNIT_MS[unit]
    assert parse_go_duration_ns(f"{n}{unit}") == n * _UNIT_MS[unit] * MS


# Go's time.ParseDuration works in integers, so decimal fractions are exact:
# ParseDuration("1.001s") == 1001 * time.Millisecond. A float sum gives 1000999999 ns instead.
@pytest.mark.parametrize(
    "text,ns",
    [
        ("1.001s", 1_001_000_000),
        ("-1.001s", -1_001_000_000),
        ("1.000001ms", 1_000_001),
    ],
)
def test_parse_decimal_fraction_exact(text: str, ns: int) -> None:
    assert parse_go_duration_ns(text) == ns
    assert parse_go_duration_ms(text) == int(ns / MS)


@pytest.mark.parametrize("ns", [2**53 + 1, 2**63 - 1])
def test_parse_large_ns_exact(ns: int) -> None:
    assert parse_go_duration_ns(f"{ns}ns") == ns


# --------------------------------------------------------------------------------------------
# format_go_duration_ms


@pytest.mark.parametrize(
    "ms,text",
    [
        (90_000, "1m30s"),
        (250, "250ms"),
        (0, "0s"),
        (3_600_000, "1h0m0s"),
        (1, "1ms"),
        (999, "999ms"),
        (1000, "1s"),
        (1500, "1.5s"),
        (1001, "1.001s"),
        (1010, "1.01s"),
        (60_000, "1m0s"),
        (61_001, "1m1.001s"),
        (59_999, "59.999s"),
        (3_661_001, "1h1m1.001s"),
        (86_400_000, "24h0m0s"),
        (900_000, "15m0s"),
        (-90_000, "-1m30s"),
        (-250, "-250ms"),
        (-1500, "-1.5s"),
    ],
)
def test_format(ms: int, text: str) -> None:
    assert format_go_duration_ms(ms) == text


_FORMAT_RE = re.compile(r"-?(?:(\d+)h)?(?:(\d+)m)?(\d+)(?:\.(\d{1,3}))?s|-?\d+ms")


@SETTINGS
@given(st.integers(min_value=-(10**13), max_value=10**13))
def test_format_shape(ms: int) -> None:
    text = format_go_duration_ms(ms)
    if ms == 0:
        assert text == "0s"
        return
    m = _FORMAT_RE.fullmatch(text)
    assert m is not None, text
    assert text.startswith("-") is (ms < 0)
    if abs(ms) < 1000:
        assert text == f"{ms}ms"
        return
    h, mins, secs, frac = m.groups()
    assert frac is None or not frac.endswith("0")  # trailing zeros trimmed, as in Go
    if h is not None:
        assert mins is not None  # Go prints "1h0m0s", never "1h0s"
    if mins is not None:
        assert int(mins) < 60 or h is None
        assert int(secs) < 60
    if h is not None:
        assert int(mins) < 60
    total = (
        int(h or 0) * 3_600_000
        + int(mins or 0) * 60_000
        + int(secs) * 1000
        + (int(frac.ljust(3, "0")) if frac else 0)
    )
    assert total == abs(ms)


@SETTINGS
@given(
    st.one_of(
        st.integers(min_value=-999, max_value=999),
        st.integers(min_value=-(10**9), max_value=10**9).map(lambda n: n * 1000),
    )
)
def test_format_parse_roundtrip_whole_seconds_and_sub_second(ms: int) -> None:
    assert parse_go_duration_ms(format_go_duration_ms(ms)) == ms


def test_format_parse_roundtrip_every_ms_below_10s() -> None:
    bad = [
        ms for ms in range(-10_000, 10_001) if parse_go_duration_ms(format_go_duration_ms(ms)) != ms
    ]
    assert bad == []


# --------------------------------------------------------------------------------------------
# default_node_id


def test_default_node_id_deterministic_and_in_range() -> None:
    a = default_node_id("somehost")
    assert 0 <= a < 1024
    assert default_node_id("somehost") == a
    # nsqd: crc32.ChecksumIEEE(md5(hostname)) % 1024
    assert a == zlib.crc32(hashlib.md5(b"somehost").digest()) % 1024


@SETTINGS
@given(st.text(min_size=0, max_size=50))
def test_default_node_id_property(host: str) -> None:
    n = default_node_id(host)
    assert isinstance(n, int)
    assert 0 <= n < 1024
    assert default_node_id(host) == n


def test_default_node_id_varies_between_hosts() -> None:
    ids = {default_node_id(f"host{i}") for i in range(200)}
    assert len(ids) > 100


def test_default_node_id_uses_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "somehost")
    assert default_node_id() == default_node_id("somehost")


# --------------------------------------------------------------------------------------------
# Options


def test_options_defaults() -> None:
    o = Options()
    assert o.mem_queue_size == 10000
    assert o.msg_timeout_ms == 60000
    assert o.max_msg_timeout_ms == 900000
    assert o.max_msg_size == 1048576
    assert o.max_body_size == 5242880
    assert o.max_rdy_count == 2500
    assert o.max_req_timeout_ms == 3600000
    assert o.max_heartbeat_interval_ms == 60000
    assert o.tcp_address == "0.0.0.0:4150"
    assert o.http_address == "0.0.0.0:4151"
    assert o.node_id == default_node_id()
    assert 0 <= o.node_id < 1024
    o.validate()  # the defaults are valid


@pytest.mark.parametrize("node_id", [1024, -1, 5000])
def test_validate_rejects_node_id(node_id: int) -> None:
    with pytest.raises(ValueError, match="node-id"):
        Options(node_id=node_id).validate()


@pytest.mark.parametrize("node_id", [0, 1023])
def test_validate_accepts_node_id_bounds(node_id: int) -> None:
    Options(node_id=node_id).validate()


@pytest.mark.parametrize("level", [0, 10])
def test_validate_rejects_deflate_level(level: int) -> None:
    with pytest.raises(ValueError):
        Options(max_deflate_level=level).validate()


@pytest.mark.parametrize(
    "name", ["mem_queue_size", "max_msg_size", "max_body_size", "max_rdy_count"]
)
def test_validate_rejects_negative_sizes(name: str) -> None:
    with pytest.raises(ValueError):
        Options(**{name: -1}).validate()
    Options(**{name: 0}).validate()


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("replicas", 0, "--replicas"),
        ("min_isr", 0, "--min-isr"),
        ("replica_ack", "all", "--replica-ack"),
        ("replica_sync", "sync", "--replica-sync"),
        ("etcd_lease_ttl", 0, "--etcd-lease-ttl"),
    ],
)
def test_validate_refuses_replication_values_with_or_without_etcd(
    field: str, value: object, flag: str
) -> None:
    for endpoints in ("", "127.0.0.1:2379"):
        with pytest.raises(ValueError, match=flag):
            Options(**{field: value, "etcd_endpoints": endpoints}).validate()
