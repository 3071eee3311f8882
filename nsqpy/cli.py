"""nsqpy-d: the command line, logging, signals and lifecycle.

Strategy: nsqd's flags with nsqd's names, defaults and Go flag syntax (``-flag value``,
``-flag=value``, ``--flag value``, ``--flag=value``, bare booleans and ``-bool=false``), parsed
by click after a small rewrite of Go-only spellings. An nsqd flag whose feature nsqpy-d does not
have yet stops the start with a message naming it, never silently ignored. Log lines keep
nsqd's shape on stderr: ``[nsqd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on ...``."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from . import config
from .internal import goflag
from .internal.goflag import DURATION, setup_logging
from .options import Options, version_string

# nsqd 1.3 flags that nsqpy-d does not implement yet: refused at start, by name.
UNIMPLEMENTED_FLAGS = frozenset(
    [
        "enable-experiment",
    ]
)

BOOL_FLAGS = frozenset(
    (
        "version",
        "verbose",
        "deflate",
        "snappy",
        "worker-id",
        "statsd-mem-stats",
        "statsd-exclude-ephemeral",
        "metrics-exclude-ephemeral",
    )
)


def normalize_go_flags(argv: list[str]) -> list[str]:
    """nsqd's flags in Go syntax rewritten for click (goflag.normalize_go_flags); raises
    click.UsageError for an nsqd flag that is not implemented or a bad boolean value."""
    return goflag.normalize_go_flags(
        argv, BOOL_FLAGS, UNIMPLEMENTED_FLAGS, bare_true=("tls-required",)
    )


_D = Options()


_opt = goflag.option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@goflag.daemon_options("[nsqd] ")
@click.option(
    "--node-id",
    type=int,
    default=None,
    help="unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)",
)
@_opt(
    "tcp-address",
    str,
    _D.tcp_address,
    "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)",
)
@_opt(
    "http-address",
    str,
    _D.http_address,
    "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)",
)
@_opt(
    "https-address",
    str,
    _D.https_address,
    "<addr>:<port> to listen on for HTTPS clients (used once TLS is configured)",
)
@click.option("--tcp-port", type=int, default=None, help="shorthand: port of --tcp-address")
@click.option("--http-port", type=int, default=None, help="shorthand: port of --http-address")
@click.option(
    "--broadcast-address",
    type=str,
    default=None,
    help="address that will be registered with lookupd (defaults to the OS hostname)",
)
@_opt("broadcast-tcp-port", int, 0, "TCP port that will be registered with lookupd")
@_opt("broadcast-http-port", int, 0, "HTTP port that will be registered with lookupd")
@_opt("http-client-connect-timeout", DURATION, "2s", "timeout for HTTP connect")
@_opt("http-client-request-timeout", DURATION, "5s", "timeout for HTTP request")
@_opt("data-path", str, "", "path to store disk-backed messages")
@_opt(
    "mem-queue-size",
    int,
    _D.mem_queue_size,
    "number of messages to keep in memory (per topic/channel)",
)
@_opt(
    "max-bytes-per-file",
    int,
    100 * 1024 * 1024,
    "number of bytes per diskqueue file before rolling",
)
@_opt("sync-every", int, 2500, "number of messages per diskqueue fsync")
@_opt("sync-timeout", DURATION, "2s", "duration of time per diskqueue fsync")
@_opt(
    "queue-scan-worker-pool-max",
    int,
    _D.queue_scan_worker_pool_max,
    "max concurrency for checking in-flight and deferred message timeouts",
)
@_opt(
    "queue-scan-selection-count",
    int,
    _D.queue_scan_selection_count,
    "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts",
)
@_opt("msg-timeout", DURATION, "1m0s", "default duration to wait before auto-requeing a message")
@_opt("max-msg-timeout", DURATION, "15m0s", "maximum duration before a message will timeout")
@_opt("max-msg-size", int, _D.max_msg_size, "maximum size of a single message in bytes")
@_opt("max-req-timeout", DURATION, "1h0m0s", "maximum requeuing timeout for a message")
@_opt("max-body-size", int, _D.max_body_size, "maximum size of a single command body")
@_opt(
    "max-heartbeat-interval",
    DURATION,
    "1m0s",
    "maximum client configurable duration of time between client heartbeats",
)
@_opt("max-rdy-count", int, _D.max_rdy_count, "maximum RDY count for a client")
@_opt(
    "max-output-buffer-size",
    int,
    _D.max_output_buffer_size,
    "maximum client configurable size (in bytes) for a client output buffer",
)
@_opt(
    "max-output-buffer-timeout",
    DURATION,
    "30s",
    "maximum client configurable duration of time between flushing to a client",
)
@_opt(
    "min-output-buffer-timeout",
    DURATION,
    "25ms",
    "minimum client configurable duration of time between flushing to a client",
)
@_opt(
    "output-buffer-timeout",
    DURATION,
    "250ms",
    "default duration of time between flushing data to clients",
)
@_opt(
    "max-attempts",
    int,
    0,
    "[nsqpy] move a message to the dead-letter topic <topic>.<channel><suffix> instead of "
    "delivering it more than this many times (0 = never, as nsqd)",
)
@_opt(
    "dead-letter-suffix",
    str,
    ".dead",
    "[nsqpy] suffix of dead-letter topic names (<topic>.<channel><suffix>)",
)
@_opt(
    "max-channel-consumers",
    int,
    0,
    "maximum channel consumer connection count per nsqd instance (0 = unlimited)",
)
@_opt("statsd-address", str, "", "UDP <addr>:<port> of a statsd daemon for pushing stats")
@_opt("statsd-interval", DURATION, "1m0s", "duration between pushing to statsd")
@click.option(
    "--statsd-mem-stats/--no-statsd-mem-stats",
    default=True,
    help="toggle sending memory and GC stats to statsd",
)
@_opt(
    "statsd-prefix",
    str,
    "nsq.%s",
    "prefix used for keys sent to statsd (%s for host replacement)",
)
@_opt("statsd-udp-packet-size", int, 508, "the size in bytes of statsd UDP packets")
@click.option(
    "--statsd-exclude-ephemeral/--no-statsd-exclude-ephemeral",
    default=False,
    help="Skip ephemeral topics and channels when sending stats to statsd",
)
@click.option(
    "--metrics-exclude-ephemeral/--no-metrics-exclude-ephemeral",
    default=False,
    help="[nsqpy] leave ephemeral topics and channels out of GET /metrics",
)
@click.option(
    "--e2e-processing-latency-percentile",
    multiple=True,
    help="message processing time percentiles (as float (0, 1.0]) to track (can be specified "
    "multiple times or comma separated '1.0,0.99,0.95', default none)",
)
@_opt(
    "e2e-processing-latency-window-time",
    DURATION,
    "10m0s",
    "calculate end to end latency quantiles for this duration of time (ie: 60s would only show "
    "quantile calculations from the past 60 seconds)",
)
@click.option(
    "--deflate/--no-deflate",
    default=True,
    help="enable deflate feature negotiation (client compression)",
)
@_opt("max-deflate-level", int, 6, "max deflate compression level a client can negotiate")
@click.option(
    "--snappy/--no-snappy",
    default=True,
    help="enable snappy feature negotiation (client compression)",
)
@click.option(
    "--auth-http-address",
    multiple=True,
    help="<addr>:<port> or a full url to query auth server (may be given multiple times)",
)
@_opt("auth-http-request-method", str, "get", "HTTP method to use for auth server requests")
@_opt("tls-cert", str, "", "path to certificate file")
@_opt("tls-key", str, "", "path to key file")
@_opt(
    "tls-client-auth-policy",
    str,
    "",
    "client certificate auth policy ('require' or 'require-verify')",
)
@_opt("tls-root-ca-file", str, "", "path to certificate authority file")
@_opt("tls-required", str, "false", "require TLS for client connections (true, false, tcp-https)")
@_opt(
    "tls-min-version",
    str,
    "tls1.0",
    "minimum SSL/TLS version acceptable ('tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
)
@click.option(
    "--lookupd-tcp-address",
    multiple=True,
    help="lookupd TCP address (may be given multiple times)",
)
@click.option(
    "--worker-id/--no-worker-id", default=False, hidden=True, help="[deprecated] use --node-id"
)
def nsqpy_d(**kw: Any) -> None:
    """nsqpy-d: a drop-in nsqd (NSQ 1.3) in Python."""
    if not goflag.version_or_config(kw, version_string, UNIMPLEMENTED_FLAGS):
        return
    opts = options_from_flags(kw)
    setup_logging(opts.log_prefix, opts.log_level)
    try:
        opts.validate()
    except ValueError as e:
        logging.getLogger("nsqpy").critical("failed to instantiate nsqd - %s", e)
        sys.exit(1)
    run(opts)


def _with_port(addr: str, port: int) -> str:
    host = addr.rpartition(":")[0]
    return f"{host}:{port}"


def options_from_flags(kw: dict[str, Any]) -> Options:
    o = Options()
    if kw["node_id"] is not None:
        o.node_id = kw["node_id"]
    o.log_level = kw["log_level"].lower()
    o.log_prefix = kw["log_prefix"]
    o.tcp_address = kw["tcp_address"]
    o.http_address = kw["http_address"]
    o.https_address = kw["https_address"]
    if kw["tcp_port"] is not None:
        o.tcp_address = _with_port(o.tcp_address, kw["tcp_port"])
    if kw["http_port"] is not None:
        o.http_address = _with_port(o.http_address, kw["http_port"])
    if kw["broadcast_address"]:
        o.broadcast_address = kw["broadcast_address"]
    o.broadcast_tcp_port = kw["broadcast_tcp_port"]
    o.broadcast_http_port = kw["broadcast_http_port"]
    o.data_path = kw["data_path"]
    o.mem_queue_size = kw["mem_queue_size"]
    o.max_bytes_per_file = kw["max_bytes_per_file"]
    o.sync_every = kw["sync_every"]
    o.sync_timeout_ms = kw["sync_timeout"]
    o.queue_scan_worker_pool_max = kw["queue_scan_worker_pool_max"]
    o.queue_scan_selection_count = kw["queue_scan_selection_count"]
    o.msg_timeout_ms = kw["msg_timeout"]
    o.max_msg_timeout_ms = kw["max_msg_timeout"]
    o.max_msg_size = kw["max_msg_size"]
    o.max_req_timeout_ms = kw["max_req_timeout"]
    o.max_body_size = kw["max_body_size"]
    o.max_heartbeat_interval_ms = kw["max_heartbeat_interval"]
    o.max_rdy_count = kw["max_rdy_count"]
    o.max_output_buffer_size = kw["max_output_buffer_size"]
    o.max_output_buffer_timeout_ms = kw["max_output_buffer_timeout"]
    o.min_output_buffer_timeout_ms = kw["min_output_buffer_timeout"]
    o.output_buffer_timeout_ms = kw["output_buffer_timeout"]
    o.max_channel_consumers = kw["max_channel_consumers"]
    o.max_attempts = kw["max_attempts"]
    o.dead_letter_suffix = kw["dead_letter_suffix"]
    o.statsd_address = kw["statsd_address"]
    o.statsd_prefix = kw["statsd_prefix"]
    o.statsd_interval_ms = kw["statsd_interval"]
    o.statsd_mem_stats = kw["statsd_mem_stats"]
    o.statsd_udp_packet_size = kw["statsd_udp_packet_size"]
    o.statsd_exclude_ephemeral = kw["statsd_exclude_ephemeral"]
    o.metrics_exclude_ephemeral = kw["metrics_exclude_ephemeral"]
    o.e2e_processing_latency_window_time_ms = kw["e2e_processing_latency_window_time"]
    o.e2e_processing_latency_percentiles = config.parse_percentiles(
        kw["e2e_processing_latency_percentile"]
    )
    o.deflate = kw["deflate"]
    o.max_deflate_level = kw["max_deflate_level"]
    o.snappy = kw["snappy"]
    o.http_client_connect_timeout_ms = kw["http_client_connect_timeout"]
    o.http_client_request_timeout_ms = kw["http_client_request_timeout"]
    o.auth_http_addresses = list(kw["auth_http_address"])
    o.nsqlookupd_tcp_addresses = list(kw["lookupd_tcp_address"])
    o.auth_http_request_method = kw["auth_http_request_method"]
    o.tls_cert = kw["tls_cert"]
    o.tls_key = kw["tls_key"]
    o.tls_client_auth_policy = kw["tls_client_auth_policy"]
    o.tls_root_ca_file = kw["tls_root_ca_file"]
    from .tls import parse_tls_min_version, parse_tls_required

    try:
        o.tls_required = parse_tls_required(kw["tls_required"])
        o.tls_min_version = parse_tls_min_version(kw["tls_min_version"])
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    return o


def run(opts: Options) -> None:
    """Start nsqd on uvloop and serve until SIGTERM or SIGINT; exits 0 on a clean stop."""
    from .internal.daemon import freeze_startup_objects, raise_nofile_limit, serve
    from .nsqd import NSQD
    from .server import Server

    raise_nofile_limit()
    log = logging.getLogger("nsqpy")
    log.info(version_string())
    log.info("ID: %d", opts.node_id)
    serve(
        "nsqd",
        lambda: Server(NSQD(opts)),
        on_signal="NSQ: received signal, exiting",
        after_start=freeze_startup_objects,
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        args = normalize_go_flags(args)
    except click.UsageError as e:
        click.echo(f"nsqpy-d: {e.format_message()}", err=True)
        sys.exit(2)
    nsqpy_d.main(args=args, prog_name="nsqpy-d")


if __name__ == "__main__":
    main()
