"""nsqadmin's options (nsqadmin/options.go), which are also nsqpy-admin's option table.

Strategy: as nsqpy.options for nsqd: one dataclass whose option fields are declared once, with
flag, default and help, in --help order; internal/optiontable.py generates from it the flags,
--help, the --config file keys (nsqadmin's cfg names: nsqlookupd_http_addresses,
nsqd_http_addresses, admin_users) and GET/PUT /config/<opt>'s names. Durations are whole
milliseconds (suffix _ms), and the checks nsqadmin.New makes on the options live here
(validate), so the command line, a config file and the tests all go through one door. The
Graphite flags are refused by name: the admin keeps its own history instead (its
--sample-interval, --history-window, --refresh-interval are nsqpy's, unknown to /config)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from ..internal.netaddr import split_host_port
from ..internal.optiontable import (
    OptionFields,
    Table,
    boolean,
    duration,
    http_client_connect_timeout,
    http_client_request_timeout,
    listen_address,
    log_format,
    log_level,
    log_prefix,
    option,
    repeated,
    statsd_interval,
    statsd_prefix,
)


@dataclass(init=False, repr=False, eq=False)  # OptionFields': fast to declare
class AdminOptions(OptionFields):
    """nsqadmin.Options with its defaults (NewOptions), in --help order; nsqpy-only fields
    are marked [nsqpy]."""

    log_level: str = log_level()
    log_prefix: str = log_prefix("[nsqadmin] ")
    log_format: str = log_format()
    http_address: str = listen_address("HTTP", "0.0.0.0:4171")
    base_path: str = option("base-path", "/", "URL base path")
    dev_static_dir: str = option("dev-static-dir", "", "(development use only)")
    statsd_counter_format: str = option(
        "statsd-counter-format",
        "stats.counters.%s.count",
        "The counter stats key formatting applied by the implementation of statsd (unused: no "
        "Graphite)",
    )
    statsd_gauge_format: str = option(
        "statsd-gauge-format",
        "stats.gauges.%s",
        "The gauge stats key formatting applied by the implementation of statsd (unused)",
    )
    statsd_prefix: str = statsd_prefix("prefix used for keys sent to statsd (unused)")
    statsd_interval_ms: int = statsd_interval("time interval nsqd is configured to push to statsd")
    notification_http_endpoint: str = option(
        "notification-http-endpoint",
        "",
        "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent",
    )
    http_client_connect_timeout_ms: int = http_client_connect_timeout()
    http_client_request_timeout_ms: int = http_client_request_timeout()
    http_client_tls_insecure_skip_verify: bool = boolean(
        "http-client-tls-insecure-skip-verify",
        False,
        "configure the HTTP client to skip verification of TLS certificates",
    )
    http_client_tls_root_ca_file: str = option(
        "http-client-tls-root-ca-file", "", "path to CA file for the HTTP client"
    )
    http_client_tls_cert: str = option(
        "http-client-tls-cert", "", "path to certificate file for the HTTP client"
    )
    http_client_tls_key: str = option(
        "http-client-tls-key", "", "path to key file for the HTTP client"
    )
    allow_config_from_cidr: str = option(
        "allow-config-from-cidr",
        "127.0.0.1/8",
        "A CIDR from which to allow HTTP requests to the /config endpoint",
    )
    acl_http_header: str = option(
        "acl-http-header",
        "X-Forwarded-User",
        "HTTP header to check for authenticated admin users",
    )
    nsqlookupd_http_addresses: list[str] = repeated(
        "lookupd-http-address", "lookupd HTTP address (may be given multiple times)"
    )
    nsqd_http_addresses: list[str] = repeated(
        "nsqd-http-address", "nsqd HTTP address (may be given multiple times)"
    )
    admin_users: list[str] = repeated(
        "admin-user",
        "admin user (may be given multiple times; if specified, only these users will be able "
        "to perform privileged actions; acl-http-header is used to determine the authenticated "
        "user)",
    )
    # nsqpy-only: the admin's own history of depth and rates (no Graphite needed)
    sample_interval_ms: int = duration(
        "sample-interval",
        10_000,
        "[nsqpy] how often the admin samples every topic and channel for its charts",
        config_api=False,
    )
    history_window_ms: int = duration(
        "history-window", 3_600_000, "[nsqpy] how far back the charts go", config_api=False
    )
    refresh_interval_ms: int = duration(
        "refresh-interval",
        5_000,
        "[nsqpy] live refresh of the pages (JavaScript)",
        config_api=False,
    )
    dead_letter_suffix: str = option(
        "dead-letter-suffix",
        ".dead",
        '[nsqpy] nsqpy-d\'s dead-letter topics are <topic>.<channel><suffix> ("" hides them)',
        config_api=False,
    )

    def validate(self) -> None:
        """nsqadmin.New's checks; ValueError with nsqadmin's text. Normalizes base_path."""
        if not self.nsqd_http_addresses and not self.nsqlookupd_http_addresses:
            raise ValueError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_addresses and self.nsqlookupd_http_addresses:
            raise ValueError("use --nsqd-http-address or --lookupd-http-address not both")
        if self.http_client_tls_cert and not self.http_client_tls_key:
            raise ValueError("--http-client-tls-key must be specified with --http-client-tls-cert")
        if self.http_client_tls_key and not self.http_client_tls_cert:
            raise ValueError("--http-client-tls-cert must be specified with --http-client-tls-key")
        for flag, addrs in (
            ("lookupd-http-address", self.nsqlookupd_http_addresses),
            ("nsqd-http-address", self.nsqd_http_addresses),
        ):
            for a in addrs:
                try:
                    split_host_port(a)
                except ValueError as e:
                    raise ValueError(f"failed to resolve --{flag} ({a}) - {e}") from None
        if self.allow_config_from_cidr:
            import ipaddress

            try:
                ipaddress.ip_network(self.allow_config_from_cidr, strict=False)
            except ValueError as e:
                raise ValueError(
                    f"failed to parse --allow-config-from-cidr ({self.allow_config_from_cidr})"
                    f" - {e}"
                ) from None
        if self.sample_interval_ms <= 0:
            raise ValueError("--sample-interval must be positive")
        self.base_path = normalize_base_path(self.base_path)


def normalize_base_path(p: str) -> str:
    """nsqadmin's normalizeBasePath: "" -> "/", a leading slash added, path.Clean'ed."""
    if not p:
        return "/"
    if not p.startswith("/"):
        p = "/" + p
    return posixpath.normpath(p) if p != "/" else "/"


#: nsqpy-admin's option table: its click options, Go booleans, cfg names.
TABLE = Table(
    AdminOptions,
    program="nsqpy-admin",
    go_name="nsqadmin",
    unimplemented=("graphite-url", "proxy-graphite"),
    refuse_in_config=False,  # as before the table: graphite_url in a file is ignored
)


def option_by_cfg_name(opts: AdminOptions, name: str) -> tuple[bool, Any]:
    """nsqadmin's getOptByCfgName: (known, value as Go's JSON has it: durations in
    nanoseconds, the log level as lg.LogLevel's number); nsqpy's own options are unknown."""
    value, known = TABLE.value_of_cfg(opts, name)
    return known, value
