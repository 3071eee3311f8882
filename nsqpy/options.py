"""Every nsqd setting in one place.

`Options` mirrors nsqd 1.3's Options struct (nsqd/options.go): same names (snake_case), same
defaults. Durations are integer milliseconds and say so in their name (`*_ms`); sizes are bytes.
Go's duration syntax ("60s", "1m30s", "250ms") is parsed here so that nsqd command lines and
config values carry over unchanged."""

from __future__ import annotations

import hashlib
import re
import socket
import sys
import zlib
from dataclasses import dataclass, field

#: Version of NSQ that nsqpy speaks (reported in IDENTIFY, /info and /stats, as nsqd does).
NSQ_VERSION = "1.3.0"
#: nsqpy's own version.
NSQPY_VERSION = "0.1.0"


def version_string(app: str = "nsqd") -> str:
    """The daemon's version line in nsqd's shape (``--version``, the first log line and the first
    line of text /stats): "built w/" names nsqpy and Python where nsqd names its Go release."""
    py = ".".join(str(x) for x in sys.version_info[:3])
    return f"{app} v{NSQ_VERSION} (built w/nsqpy-{NSQPY_VERSION}-python{py})"


def default_node_id(hostname: str | None = None) -> int:
    """nsqd's default --node-id: crc32(md5(hostname)) % 1024 (nsqd/options.go NewOptions)."""
    host = socket.gethostname() if hostname is None else hostname
    return zlib.crc32(hashlib.md5(host.encode()).digest()) % 1024


_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration_ns(text: str) -> int:
    """Parse a Go duration string ("60s", "1m30s", "250ms", "-1.5h", "0") to nanoseconds.

    Follows Go's time.ParseDuration: an optional sign, then one or more decimal numbers each with
    a unit (ns, us/µs, ms, s, m, h); a bare "0" is allowed. Raises ValueError on anything else.
    """
    s = text
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    pos = 0
    total = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        whole, frac, unit = m.groups() if m else ("", None, "")
        if m is None or (not whole and not frac):
            raise ValueError(f"invalid duration {text!r}")
        scale = _DURATION_UNITS_NS[unit]
        total += int(whole or "0") * scale
        if frac:  # integer arithmetic, exact as Go's
            total += int(frac) * scale // 10 ** len(frac)
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def parse_go_duration_ms(text: str) -> int:
    """Go duration string to whole milliseconds (truncated toward zero)."""
    ns = parse_go_duration_ns(text)
    return ns // 1_000_000 if ns >= 0 else -(-ns // 1_000_000)


def format_go_duration_ms(ms: int) -> str:
    """Milliseconds to a Go-style duration string, as Go's Duration.String() prints it."""
    if ms == 0:
        return "0s"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    sec = rem / 1000
    sec_s = f"{sec:.3f}".rstrip("0").rstrip(".")
    out = sign
    if h:
        out += f"{h}h"
    if h or m:
        out += f"{m}m"
    return out + f"{sec_s}s"


@dataclass
class Options:
    """nsqd's options with nsqd 1.3's defaults (nsqd/options.go NewOptions)."""

    node_id: int = field(default_factory=default_node_id)
    log_level: str = "info"
    log_prefix: str = "[nsqd] "

    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0

    data_path: str = ""
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 100 * 1024 * 1024
    sync_every: int = 2500
    sync_timeout_ms: int = 2000

    queue_scan_interval_ms: int = 100
    queue_scan_refresh_interval_ms: int = 5000
    queue_scan_selection_count: int = 20
    queue_scan_worker_pool_max: int = 4
    queue_scan_dirty_percent: float = 0.25

    msg_timeout_ms: int = 60_000
    max_msg_timeout_ms: int = 15 * 60_000
    max_msg_size: int = 1024 * 1024
    max_body_size: int = 5 * 1024 * 1024
    max_req_timeout_ms: int = 3_600_000
    client_timeout_ms: int = 60_000

    max_heartbeat_interval_ms: int = 60_000
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 64 * 1024
    max_output_buffer_timeout_ms: int = 30_000
    min_output_buffer_timeout_ms: int = 25
    output_buffer_timeout_ms: int = 250
    max_channel_consumers: int = 0

    # Dead letters (beyond nsqd; nsqpy's own flags): a message that would be delivered more than
    # max_attempts times moves to the topic "<topic>.<channel><dead_letter_suffix>". 0 = off.
    max_attempts: int = 0
    dead_letter_suffix: str = ".dead"

    # nsqlookupd registration (lookup_peer.py): --lookupd-tcp-address, --config,
    # PUT /config/nsqlookupd_tcp_addresses.
    nsqlookupd_tcp_addresses: list[str] = field(default_factory=list)

    # statsd (statsd.py); the prefix's "%s" becomes the host key at start, as nsqd's New does.
    statsd_address: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_interval_ms: int = 60_000
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False

    # GET /metrics (metrics.py, beyond nsqd): leave #ephemeral topics and channels out.
    metrics_exclude_ephemeral: bool = False

    # end-to-end processing latency (quantile.py); no percentiles = not tracked.
    e2e_processing_latency_window_time_ms: int = 10 * 60_000
    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)

    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True

    # TLS (tls.py): --tls-required is 0 (false), 1 (tcp-https) or 2 (true), as nsqd's.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: int = 0
    tls_min_version: str = "tls1.0"

    # AUTH (auth.py): auth servers and the HTTP client's timeouts.
    auth_http_addresses: list[str] = field(default_factory=list)
    auth_http_request_method: str = "get"
    http_client_connect_timeout_ms: int = 2000
    http_client_request_timeout_ms: int = 5000

    def validate(self) -> None:
        """Raise ValueError with nsqd's wording for settings nsqd refuses at start (nsqd.New)."""
        if not 1 <= self.max_deflate_level <= 9:
            raise ValueError("--max-deflate-level must be [1,9]")
        if not 0 <= self.node_id < 1024:
            raise ValueError("--node-id must be [0,1024)")
        for name in (
            "mem_queue_size",
            "max_msg_size",
            "max_body_size",
            "max_rdy_count",
            "max_attempts",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        if self.auth_http_request_method not in ("post", "get"):
            raise ValueError("--auth-http-request-method must be post or get")
        if self.tls_client_auth_policy and self.tls_required == 0:
            self.tls_required = 2  # nsqd: a client auth policy implies --tls-required=true
        if self.tls_required and not (self.tls_cert or self.tls_key):
            raise ValueError("cannot require TLS client connections without TLS key and cert")
        for p in self.e2e_processing_latency_percentiles:
            if not 0 < p <= 1:
                raise ValueError(f"invalid E2E processing latency percentile: {p:g}")
