"""Every nsqd setting in one place: nsqpy-d's option table.

Strategy: `Options` mirrors nsqd 1.3's Options struct (nsqd/options.go, apps/nsqd/options.go):
same names (snake_case), same defaults. It is also the table (internal/optiontable.py) from
which nsqpy-d's flags, --help, --config file keys and GET/PUT /config/<opt> names are
generated: each option field is declared once, with its flag, default and help, in --help
order; a plain field (queue_scan_interval_ms) is an internal setting nsqd has no flag for.
Durations are integer milliseconds and say so in their name (`*_ms`); sizes are bytes. Go's
duration syntax itself lives in internal/godur.py, the version constants and line in
build_info.py (both re-exported here)."""

from __future__ import annotations

import binascii
import socket
from dataclasses import dataclass
from typing import Any

from .build_info import NSQ_VERSION, NSQPY_VERSION, version_string
from .internal.godur import format_go_duration_ms, parse_go_duration_ms, parse_go_duration_ns
from .internal.optiontable import (
    Kind,
    OptionFields,
    Table,
    boolean,
    computed,
    duration,
    flag,
    http_client_connect_timeout,
    http_client_request_timeout,
    log_format,
    log_level,
    log_prefix,
    option,
    repeated,
    size,
    statsd_interval,
    statsd_prefix,
)

__all__ = [
    "NSQPY_VERSION",
    "NSQ_VERSION",
    "TABLE",
    "Options",
    "default_node_id",
    "format_go_duration_ms",
    "parse_go_duration_ms",
    "parse_go_duration_ns",
    "parse_percentiles",
    "version_string",
]


def default_node_id(hostname: str | None = None) -> int:
    """nsqd's default --node-id: crc32(md5(hostname)) % 1024 (nsqd/options.go NewOptions)."""
    try:  # CPython's own MD5: hashlib would load OpenSSL's digests first (start-up time)
        from _md5 import md5
    except ImportError:  # a build without it
        from hashlib import md5
    host = socket.gethostname() if hostname is None else hostname
    # zlib's CRC-32 (binascii's: zlib is a module of its own to load)
    return binascii.crc32(md5(host.encode()).digest()) % 1024


def parse_percentiles(values: Any) -> list[float]:
    """--e2e-processing-latency-percentile values (each may be comma separated), highest first
    as nsqd's FloatArray keeps them. Raises click.UsageError on a value that is not a float."""
    out: list[float] = []
    for v in values or ():
        for part in str(v).split(","):
            try:
                out.append(float(part))
            except ValueError:
                import click

                raise click.UsageError(f"Could not parse: {part}") from None
    return sorted(out, reverse=True)


def _go_floats(values: list[float]) -> list[float | int]:
    """The percentiles as Go's JSON writes them (1.0 as 1), for /config."""
    from .quantile import go_float

    return [go_float(v) if isinstance(v, float) else v for v in values]


def _tls_required(value: str) -> int:
    """--tls-required's value as nsqd's tlsRequiredOption reads it (tls.parse_tls_required)."""
    from .tls import parse_tls_required

    return parse_tls_required(value)


def _tls_min_version(value: str) -> str:
    """--tls-min-version's value as nsqd's tlsMinVersionOption reads it."""
    from .tls import parse_tls_min_version

    return parse_tls_min_version(value)


@dataclass(init=False, repr=False, eq=False)  # OptionFields': fast to declare
class Options(OptionFields):
    """nsqd's options with nsqd 1.3's defaults (nsqd/options.go NewOptions), in --help order;
    durations in milliseconds (``*_ms``), sizes in bytes."""

    log_level: str = log_level()
    log_prefix: str = log_prefix("[nsqd] ")
    log_format: str = log_format()
    node_id: int = computed(
        "node-id",
        int,
        default_node_id,
        "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)",
        cfg="id",
    )

    tcp_address: str = option(
        "tcp-address",
        "0.0.0.0:4150",
        "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)",
    )
    http_address: str = option(
        "http-address",
        "0.0.0.0:4151",
        "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix "
        "socket)",
    )
    https_address: str = option(
        "https-address",
        "0.0.0.0:4152",
        "<addr>:<port> to listen on for HTTPS clients (used once TLS is configured)",
    )
    broadcast_address: str = computed(
        "broadcast-address",
        str,
        socket.gethostname,
        "address that will be registered with lookupd (defaults to the OS hostname)",
    )
    broadcast_tcp_port: int = option(
        "broadcast-tcp-port", 0, "TCP port that will be registered with lookupd"
    )
    broadcast_http_port: int = option(
        "broadcast-http-port", 0, "HTTP port that will be registered with lookupd"
    )
    # the AUTH client's timeouts (auth.py)
    http_client_connect_timeout_ms: int = http_client_connect_timeout()
    http_client_request_timeout_ms: int = http_client_request_timeout()

    data_path: str = option("data-path", "", "path to store disk-backed messages")
    mem_queue_size: int = option(
        "mem-queue-size", 10000, "number of messages to keep in memory (per topic/channel)"
    )
    max_bytes_per_file: int = size(
        "max-bytes-per-file", 100 * 1024 * 1024, "number of bytes per diskqueue file before rolling"
    )
    sync_every: int = option("sync-every", 2500, "number of messages per diskqueue fsync")
    sync_timeout_ms: int = duration("sync-timeout", 2000, "duration of time per diskqueue fsync")

    queue_scan_interval_ms: int = 100  # no flag in nsqd
    queue_scan_refresh_interval_ms: int = 5000  # no flag in nsqd
    queue_scan_worker_pool_max: int = option(
        "queue-scan-worker-pool-max",
        4,
        "max concurrency for checking in-flight and deferred message timeouts",
    )
    queue_scan_selection_count: int = option(
        "queue-scan-selection-count",
        20,
        "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts",
    )
    queue_scan_dirty_percent: float = 0.25  # no flag in nsqd

    msg_timeout_ms: int = duration(
        "msg-timeout", 60_000, "default duration to wait before auto-requeing a message"
    )
    max_msg_timeout_ms: int = duration(
        "max-msg-timeout", 15 * 60_000, "maximum duration before a message will timeout"
    )
    max_msg_size: int = size(
        "max-msg-size", 1024 * 1024, "maximum size of a single message in bytes"
    )
    max_req_timeout_ms: int = duration(
        "max-req-timeout", 3_600_000, "maximum requeuing timeout for a message"
    )
    max_body_size: int = size(
        "max-body-size", 5 * 1024 * 1024, "maximum size of a single command body"
    )
    client_timeout_ms: int = 60_000  # no flag in nsqd (heartbeats: half of it)

    max_heartbeat_interval_ms: int = duration(
        "max-heartbeat-interval",
        60_000,
        "maximum client configurable duration of time between client heartbeats",
    )
    max_rdy_count: int = option("max-rdy-count", 2500, "maximum RDY count for a client")
    max_output_buffer_size: int = size(
        "max-output-buffer-size",
        64 * 1024,
        "maximum client configurable size (in bytes) for a client output buffer",
    )
    max_output_buffer_timeout_ms: int = duration(
        "max-output-buffer-timeout",
        30_000,
        "maximum client configurable duration of time between flushing to a client",
    )
    min_output_buffer_timeout_ms: int = duration(
        "min-output-buffer-timeout",
        25,
        "minimum client configurable duration of time between flushing to a client",
    )
    output_buffer_timeout_ms: int = duration(
        "output-buffer-timeout", 250, "default duration of time between flushing data to clients"
    )

    # Dead letters (beyond nsqd; nsqpy's own flags): a message that would be delivered more than
    # max_attempts times moves to the topic "<topic>.<channel><dead_letter_suffix>". 0 = off.
    max_attempts: int = option(
        "max-attempts",
        0,
        "[nsqpy] move a message to the dead-letter topic <topic>.<channel><suffix> instead of "
        "delivering it more than this many times (0 = never, as nsqd)",
    )
    dead_letter_suffix: str = option(
        "dead-letter-suffix",
        ".dead",
        "[nsqpy] suffix of dead-letter topic names (<topic>.<channel><suffix>)",
    )
    max_channel_consumers: int = option(
        "max-channel-consumers",
        0,
        "maximum channel consumer connection count per nsqd instance (0 = unlimited)",
    )

    # statsd (statsd.py); the prefix's "%s" becomes the host key at start, as nsqd's New does.
    statsd_address: str = option(
        "statsd-address", "", "UDP <addr>:<port> of a statsd daemon for pushing stats"
    )
    statsd_interval_ms: int = statsd_interval("duration between pushing to statsd")
    statsd_mem_stats: bool = boolean(
        "statsd-mem-stats", True, "toggle sending memory and GC stats to statsd"
    )
    statsd_prefix: str = statsd_prefix(
        "prefix used for keys sent to statsd (%s for host replacement)"
    )
    statsd_udp_packet_size: int = size(
        "statsd-udp-packet-size", 508, "the size in bytes of statsd UDP packets"
    )
    statsd_exclude_ephemeral: bool = boolean(
        "statsd-exclude-ephemeral",
        False,
        "Skip ephemeral topics and channels when sending stats to statsd",
    )
    # GET /metrics (metrics.py, beyond nsqd): leave #ephemeral topics and channels out.
    metrics_exclude_ephemeral: bool = boolean(
        "metrics-exclude-ephemeral",
        False,
        "[nsqpy] leave ephemeral topics and channels out of GET /metrics",
    )
    # GET /metrics (metrics_compat.py): also serve an exporter's families ("" = off).
    metrics_compat: str = option(
        "metrics-compat",
        "",
        "[nsqpy] also serve another exporter's metric families on GET /metrics: nsq_exporter "
        "(lovoo/nsq_exporter 2.x names) or nsq_exporter_v1 (its 1.0.x names)",
    )

    # end-to-end processing latency (quantile.py); no percentiles = not tracked.
    e2e_processing_latency_percentiles: list[float] = repeated(
        "e2e-processing-latency-percentile",
        "message processing time percentiles (as float (0, 1.0]) to track (can be specified "
        "multiple times or comma separated '1.0,0.99,0.95', default none)",
        parse=parse_percentiles,
        to_json=_go_floats,
    )
    e2e_processing_latency_window_time_ms: int = duration(
        "e2e-processing-latency-window-time",
        10 * 60_000,
        "calculate end to end latency quantiles for this duration of time (ie: 60s would only "
        "show quantile calculations from the past 60 seconds)",
    )

    deflate: bool = boolean(
        "deflate", True, "enable deflate feature negotiation (client compression)"
    )
    max_deflate_level: int = option(
        "max-deflate-level", 6, "max deflate compression level a client can negotiate"
    )
    snappy: bool = boolean("snappy", True, "enable snappy feature negotiation (client compression)")

    # AUTH (auth.py): the auth servers.
    auth_http_addresses: list[str] = repeated(
        "auth-http-address",
        "<addr>:<port> or a full url to query auth server (may be given multiple times)",
    )
    auth_http_request_method: str = option(
        "auth-http-request-method", "get", "HTTP method to use for auth server requests"
    )

    # TLS (tls.py): --tls-required is 0 (false), 1 (tcp-https) or 2 (true), as nsqd's.
    tls_cert: str = option("tls-cert", "", "path to certificate file")
    tls_key: str = option("tls-key", "", "path to key file")
    tls_client_auth_policy: str = option(
        "tls-client-auth-policy",
        "",
        "client certificate auth policy ('require' or 'require-verify')",
    )
    tls_root_ca_file: str = option("tls-root-ca-file", "", "path to certificate authority file")
    tls_required: int = option(
        "tls-required",
        0,
        "require TLS for client connections (true, false, tcp-https)",
        flag_default="false",
        parse=_tls_required,
        bare_true=True,
    )
    tls_min_version: str = option(
        "tls-min-version",
        "tls1.0",
        "minimum SSL/TLS version acceptable ('tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
        parse=_tls_min_version,
    )

    # nsqlookupd registration (lookup_peer.py): also PUT /config/nsqlookupd_tcp_addresses.
    nsqlookupd_tcp_addresses: list[str] = repeated(
        "lookupd-tcp-address", "lookupd TCP address (may be given multiple times)"
    )

    # Replicated topics through etcd (nsqpy's own; nsqpy/replication/). Without
    # --etcd-endpoints none of these is read and no replication code runs.
    etcd_endpoints: str = option(
        "etcd-endpoints",
        "",
        "[nsqpy] etcd v3 client addresses HOST:PORT[,HOST:PORT...] enabling replicated "
        "topics (empty: off)",
        config_api=False,
    )
    etcd_cluster: str = option(
        "etcd-cluster",
        "default",
        "[nsqpy] cluster name: this node's etcd keys live under /nsqpy/<name>/ (the node id "
        "in etcd is --node-id)",
        config_api=False,
    )
    etcd_lease_ttl: int = option(
        "etcd-lease-ttl",
        5,
        "[nsqpy] seconds of this node's etcd lease: a leader lost for this long is replaced",
        config_api=False,
    )
    replicas: int = option(
        "replicas",
        1,
        "[nsqpy] replication factor of topics created on this node (1: not replicated; "
        "/topic/create?replicas=N sets it per topic)",
        config_api=False,
    )
    replica_ack: str = option(
        "replica-ack",
        "all-isr",
        "[nsqpy] when a replicated publish is answered OK: 'all-isr' (every in-sync replica has it "
        "in its replica log, see --replica-sync) or 'leader' (the leader has it)",
        config_api=False,
    )
    replica_sync: str = option(
        "replica-sync",
        "write",
        "[nsqpy] when a follower acknowledges replicated entries: 'write' (written to its "
        "replica log, fsynced right after) or 'fsync' (after that fsync)",
        config_api=False,
    )
    min_isr: int = option(
        "min-isr",
        1,
        "[nsqpy] fewest in-sync replicas (leader included) with which a replicated publish "
        "is acknowledged",
        config_api=False,
    )
    replica_timeout_ms: int = duration(
        "replica-timeout",
        2000,
        "[nsqpy] how long a follower may leave a replicated record unacknowledged before "
        "the leader drops it from the in-sync replicas",
        config_api=False,
    )

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
        # refused with or without --etcd-endpoints: a bad value in a config file is found
        # the day it is written, not the day etcd is added
        if self.replicas < 1:
            raise ValueError("--replicas must be >= 1")
        if self.min_isr < 1:
            raise ValueError("--min-isr must be >= 1")
        if self.replica_ack not in ("all-isr", "leader"):
            raise ValueError("--replica-ack must be all-isr or leader")
        if self.replica_sync not in ("write", "fsync"):
            raise ValueError("--replica-sync must be write or fsync")
        if self.etcd_lease_ttl < 1:
            raise ValueError("--etcd-lease-ttl must be >= 1")
        if self.metrics_compat not in ("", "nsq_exporter", "nsq_exporter_v1"):
            raise ValueError("--metrics-compat must be nsq_exporter or nsq_exporter_v1")
        for p in self.e2e_processing_latency_percentiles:
            if not 0 < p <= 1:
                raise ValueError(f"invalid E2E processing latency percentile: {p:g}")


#: nsqpy-d's option table: its click options, Go booleans, cfg names (internal/optiontable.py).
TABLE = Table(
    Options,
    program="nsqpy-d",
    go_name="nsqd",
    flags_after={
        "https_address": (
            flag("tcp-port", Kind.INT, "shorthand: port of --tcp-address"),
            flag("http-port", Kind.INT, "shorthand: port of --http-address"),
        ),
        "nsqlookupd_tcp_addresses": (
            flag("worker-id", Kind.BOOL, "[deprecated] use --node-id", default=False, hidden=True),
        ),
    },
    # nsqd 1.3 flags that nsqpy-d does not implement yet: refused at start, by name.
    unimplemented=("enable-experiment",),
)
