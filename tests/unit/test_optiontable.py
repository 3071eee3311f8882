"""The option tables (nsqpy.internal.optiontable): what each daemon's table generates, the
checks a table makes on itself, --tcp-port/--http-port on IPv6 addresses, and flag parity
with the Go daemons' own --help (skipped without the Go binaries)."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import click
import pytest
from click.testing import CliRunner

from nsqpy import cli, config
from nsqpy.admin.options import TABLE as ADMIN
from nsqpy.admin.options import AdminOptions, option_by_cfg_name
from nsqpy.internal.optiontable import Kind, Table, duration, flag, log_level, log_prefix, option
from nsqpy.lookupd.options import TABLE as LOOKUPD
from nsqpy.options import TABLE as NSQD
from nsqpy.options import Options

TABLES = {"nsqd": NSQD, "nsqlookupd": LOOKUPD, "nsqadmin": ADMIN}

#: nsqd 1.3's cfg names (apps/nsqd/options.go: the options that have a flag), then nsqpy-d's.
NSQD_CFG_NAMES = {
    "id", "log_level", "log_prefix", "tcp_address", "http_address", "https_address",
    "broadcast_address", "broadcast_tcp_port", "broadcast_http_port",
    "nsqlookupd_tcp_addresses", "auth_http_addresses", "auth_http_request_method",
    "http_client_connect_timeout", "http_client_request_timeout", "data_path",
    "mem_queue_size", "max_bytes_per_file", "sync_every", "sync_timeout",
    "queue_scan_selection_count", "queue_scan_worker_pool_max", "msg_timeout",
    "max_msg_timeout", "max_msg_size", "max_body_size", "max_req_timeout",
    "max_heartbeat_interval", "max_rdy_count", "max_output_buffer_size",
    "max_output_buffer_timeout", "min_output_buffer_timeout", "output_buffer_timeout",
    "max_channel_consumers", "statsd_address", "statsd_prefix", "statsd_interval",
    "statsd_mem_stats", "statsd_udp_packet_size", "statsd_exclude_ephemeral",
    "e2e_processing_latency_window_time", "e2e_processing_latency_percentiles", "tls_cert",
    "tls_key", "tls_client_auth_policy", "tls_root_ca_file", "tls_required",
    "tls_min_version", "deflate", "max_deflate_level", "snappy",
    "max_attempts", "dead_letter_suffix", "metrics_exclude_ephemeral", "metrics_compat",
}  # fmt: skip


# ------------------------------------------------------------------------- what is generated


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_row_is_one_click_option_and_every_option_field_a_row(name: str) -> None:
    table = TABLES[name]
    cmd = click.command()(table.click_options(lambda **kw: None))
    assert [p.name for p in cmd.params] == [r.param for r in table.rows]
    with_row = {f.name for f in dataclasses.fields(table.cls) if f.metadata}
    assert with_row == {r.field for r in table.fields}
    assert [r.flag for r in table.rows][:5] == ["config", "version", "log-level", "log-prefix",
                                                "verbose"]  # fmt: skip


@pytest.mark.parametrize("name", sorted(TABLES))
def test_defaults_from_no_flags_are_the_dataclass_defaults(name: str) -> None:
    table = TABLES[name]
    cmd = click.command()(table.click_options(lambda **kw: None))
    ctx = cmd.make_context("x", [])
    got = table.from_flags(ctx.params)
    want = table.cls()
    for f in dataclasses.fields(table.cls):
        if f.name not in ("node_id", "broadcast_address"):  # from the host (equal here too)
            assert getattr(got, f.name) == getattr(want, f.name), f.name
    assert dataclasses.asdict(got) == dataclasses.asdict(want)


def test_nsqd_cfg_names_are_nsqds() -> None:
    assert set(config.CFG_NAMES) == NSQD_CFG_NAMES
    assert config.CFG_TO_FLAG == {
        "id": "node-id",
        "nsqlookupd_tcp_addresses": "lookupd-tcp-address",
        "auth_http_addresses": "auth-http-address",
        "e2e_processing_latency_percentiles": "e2e-processing-latency-percentile",
    }
    o = Options(node_id=3, e2e_processing_latency_percentiles=[1.0, 0.5], log_level="warn")
    assert config.option_value(o, "e2e_processing_latency_percentiles") == ([1, 0.5], True)
    assert config.option_value(o, "log_level") == (3, True)
    assert config.option_value(o, "max_req_timeout") == (3_600_000_000_000, True)
    assert config.option_value(o, "tls_required") == (0, True)
    for internal in ("queue_scan_interval", "client_timeout", "tcp_port", "worker_id", "config"):
        assert config.option_value(o, internal) == (None, False)


def test_nsqd_go_booleans_and_refused_flags() -> None:
    assert NSQD.bool_flags == {
        "version", "verbose", "deflate", "snappy", "worker-id", "statsd-mem-stats",
        "statsd-exclude-ephemeral", "metrics-exclude-ephemeral",
    }  # fmt: skip
    assert NSQD.bare_true == {"tls-required"}
    assert NSQD.unimplemented == {"enable-experiment"}
    assert LOOKUPD.bool_flags == {"version", "verbose"}
    assert ADMIN.bool_flags == {"version", "verbose", "http-client-tls-insecure-skip-verify"}
    assert ADMIN.unimplemented == {"graphite-url", "proxy-graphite"}


def test_admin_cfg_names_leave_nsqpys_own_out_of_config() -> None:
    assert ADMIN.cfg_to_flag["nsqlookupd_http_addresses"] == "lookupd-http-address"
    assert ADMIN.cfg_to_flag["nsqd_http_addresses"] == "nsqd-http-address"
    assert ADMIN.cfg_to_flag["admin_users"] == "admin-user"
    o = AdminOptions(admin_users=["u"])
    assert option_by_cfg_name(o, "statsd_interval") == (True, 60_000_000_000)
    assert option_by_cfg_name(o, "log_level") == (True, 2)
    assert option_by_cfg_name(o, "admin_users") == (True, ["u"])
    for own in ("sample_interval", "history_window", "refresh_interval", "dead_letter_suffix"):
        assert option_by_cfg_name(o, own) == (False, None)
        assert own in ADMIN.cfg_to_flag  # but a config file may set it


def test_admin_table_answers_as_go_nsqadmins_get_opt_by_cfg_name() -> None:
    """nsqadmin's getOptByCfgName over its Options struct: fields by their cfg name, values as
    Go's JSON has them (durations in ns, the log level as its number: debug is 1); flags that
    are not struct fields (config, version, verbose) and nsqpy's own rows are not found."""
    o = AdminOptions(nsqd_http_addresses=["a:1"], log_level="debug", history_window_ms=5)
    assert option_by_cfg_name(o, "log_level") == (True, 1)
    assert option_by_cfg_name(o, "nsqd_http_addresses") == (True, ["a:1"])
    assert option_by_cfg_name(o, "http_client_connect_timeout") == (True, 2_000_000_000)
    assert option_by_cfg_name(o, "acl_http_header") == (True, "X-Forwarded-User")
    assert option_by_cfg_name(o, "notification_http_endpoint") == (True, "")
    for name in ("nope", "config", "verbose", "version", "history_window"):
        assert option_by_cfg_name(o, name) == (False, None), name


def test_percentiles_parse_through_the_row() -> None:
    kw = _parsed(["--e2e-processing-latency-percentile=0.5,1.0", "--tls-required"])
    o = cli.options_from_flags(kw)
    assert o.e2e_processing_latency_percentiles == [1.0, 0.5]
    assert o.tls_required == 2
    with pytest.raises(click.UsageError, match="Could not parse: x"):
        cli.options_from_flags(_parsed(["--e2e-processing-latency-percentile=x"]))
    with pytest.raises(click.UsageError, match="tls-required"):
        cli.options_from_flags(_parsed(["--tls-required=maybe"]))


# ------------------------------------------------------------------------- a table's own checks


def test_a_table_refuses_contradictions() -> None:
    @dataclasses.dataclass
    class NoMs:
        log_level: str = log_level()
        log_prefix: str = log_prefix("[x] ")
        timeout: int = duration("timeout", 1000, "a duration without _ms")

    with pytest.raises(ValueError, match="_ms"):
        Table(NoMs, program="x", go_name="x")

    @dataclasses.dataclass
    class Twice:
        log_level: str = log_level()
        log_prefix: str = log_prefix("[x] ")
        a: str = option("same", "", "one")
        b: str = option("same", "", "two")

    with pytest.raises(ValueError, match="twice"):
        Table(Twice, program="x", go_name="x")

    @dataclasses.dataclass
    class Ok:
        log_level: str = log_level()
        log_prefix: str = log_prefix("[x] ")

    with pytest.raises(ValueError, match="no option field"):
        Table(Ok, program="x", go_name="x", flags_after={"nope": (flag("y", Kind.INT, "y"),)})
    t = Table(Ok, program="x", go_name="x")
    assert [r.flag for r in t.rows] == ["config", "version", "log-level", "log-prefix", "verbose"]


# ------------------------------------------------------------------------- --tcp-port on IPv6


def _parsed(argv: list[str]) -> dict:
    return cli.nsqpy_d.make_context("nsqpy-d", cli.normalize_go_flags(argv)).params


@pytest.mark.parametrize(
    "addr, port, want",
    [
        ("0.0.0.0:4150", 9, "0.0.0.0:9"),
        ("[::1]:4150", 9, "[::1]:9"),
        ("[::1]", 9, "[::1]:9"),  # before netaddr: "[::9"
        ("[fe80::1%eth0]:4150", 9, "[fe80::1%eth0]:9"),
        ("localhost", 9, "localhost:9"),
        (":4150", 9, ":9"),
    ],
)
def test_with_port_keeps_ipv6_brackets(addr: str, port: int, want: str) -> None:
    assert cli.with_port(addr, port) == want


def test_with_port_refuses_what_is_no_host() -> None:
    with pytest.raises(click.UsageError, match="--http-port"):
        cli.with_port("host:port:x", 1, "http-port")


def test_port_shorthands_on_ipv6_addresses_through_the_command_line() -> None:
    o = cli.options_from_flags(
        _parsed(["-tcp-address=[::1]:4150", "--tcp-port=4", "--http-address=[::1]", "-http-port=5"])
    )
    assert (o.tcp_address, o.http_address) == ("[::1]:4", "[::1]:5")


def test_cli_runs_with_options_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Options] = []
    monkeypatch.setattr(cli, "run", seen.append)
    r = CliRunner().invoke(cli.nsqpy_d, ["--tcp-address=[::1]:1", "--tcp-port=2", "--node-id=0"])
    assert r.exit_code == 0, r.output
    assert seen[0].tcp_address == "[::1]:2" and seen[0].node_id == 0


# ------------------------------------------------------------------------- parity with Go


def _go_help(binary: str) -> dict[str, str | None]:
    """Go's flag.PrintDefaults: {flag: its "(default X)" or None}."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    flags: dict[str, str | None] = {}
    for m in re.finditer(r"^  -(\S+)[^\n]*\n((?:    \t[^\n]*\n?)+)", out.stderr, re.M):
        text = " ".join(line.strip() for line in m.group(2).splitlines())
        d = re.search(r"\(default ([^()]*)\)$", text)
        flags[m.group(1)] = d.group(1) if d else None
    return flags


#: nsqpy's flags that Go's 1.3.0 daemons do not have (beside the "[nsqpy]" ones).
NSQPY_EXTRAS = {"tcp-port", "http-port", "auth-http-request-method"}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_flags_and_defaults_match_gos_help(name: str) -> None:
    from support import gobin

    table = TABLES[name]
    go = _go_help(gobin.require(name))
    ours = {r.flag: r for r in table.rows}
    assert set(go) - set(ours) - table.unimplemented == set()
    extras = {f for f, r in ours.items() if r.help.startswith("[nsqpy]")} | NSQPY_EXTRAS
    assert set(ours) - set(go) <= extras
    for f, go_default in go.items():
        row = ours.get(f)
        if row is None or go_default is None or f in ("node-id", "broadcast-address"):
            continue  # refused, no default shown, or from the host
        mine = row.click_default()
        if row.kind is Kind.BOOL:
            mine = str(row.default).lower()
        go_default = go_default.split(",")[0].strip('"')  # '0, i.e., unlimited'
        assert str(mine).lower() == go_default.lower(), f
