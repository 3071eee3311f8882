"""nsqadmin's options (nsqadmin/options.go), one dataclass with every default in one place.

Strategy: as nsqpy.options for nsqd: field names follow the Go struct's cfg names, durations
are whole milliseconds (suffix _ms), and the checks nsqadmin.New makes on them live here
(validate), so the command line, a config file and the tests all go through one door."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ..internal.netaddr import split_host_port


@dataclass
class AdminOptions:
    """nsqadmin.Options with its defaults (NewOptions); nsqpy-only fields are marked."""

    log_level: str = "info"
    log_prefix: str = "[nsqadmin] "
    http_address: str = "0.0.0.0:4171"
    base_path: str = "/"
    dev_static_dir: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_interval_ms: int = 60_000
    nsqlookupd_http_addresses: list[str] = field(default_factory=list)
    nsqd_http_addresses: list[str] = field(default_factory=list)
    http_client_connect_timeout_ms: int = 2_000
    http_client_request_timeout_ms: int = 5_000
    http_client_tls_insecure_skip_verify: bool = False
    http_client_tls_root_ca_file: str = ""
    http_client_tls_cert: str = ""
    http_client_tls_key: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    notification_http_endpoint: str = ""
    acl_http_header: str = "X-Forwarded-User"
    admin_users: list[str] = field(default_factory=list)
    # nsqpy-only: the admin's own history of depth and rates (no Graphite needed)
    sample_interval_ms: int = 10_000  #: how often every topic and channel is sampled
    history_window_ms: int = 3_600_000  #: how far back the charts go
    refresh_interval_ms: int = 5_000  #: the pages' live refresh (JavaScript)
    dead_letter_suffix: str = ".dead"  #: nsqpy-d's dead-letter topics: <topic>.<channel><suffix>

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
