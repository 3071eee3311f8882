"""nsqpy-admin: the command line, logging, signals and lifecycle.

Strategy: apps/nsqadmin's flags with their names, defaults and Go flag syntax (through
goflag, as nsqpy-d and nsqpy-lookupd), a TOML --config file through nsqpy.config (command
line, then file, then default; nsqadmin's cfg names nsqlookupd_http_addresses,
nsqd_http_addresses and admin_users), nsqadmin's log lines on stderr ("[nsqadmin] ...
INFO: HTTP: listening on 127.0.0.1:4171"), and the shared daemon lifecycle (uvloop, exit 0
on SIGTERM/SIGINT, 1 when it cannot start). The Graphite flags are refused by name: the
admin keeps its own history instead (--sample-interval, --history-window are nsqpy's).
Imports stay light: the server's modules load only when it runs."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from ..internal import goflag
from ..internal.goflag import DURATION, setup_logging
from ..options import NSQ_VERSION, NSQPY_VERSION

BOOL_FLAGS = frozenset(("version", "verbose", "http-client-tls-insecure-skip-verify"))
UNIMPLEMENTED = frozenset(("graphite-url", "proxy-graphite"))
#: nsqadmin's cfg names that are not the flag name with dashes -> underscores
CFG_TO_FLAG = {
    "nsqlookupd_http_addresses": "lookupd-http-address",
    "nsqd_http_addresses": "nsqd-http-address",
    "admin_users": "admin-user",
}


def version_string() -> str:
    """nsqadmin's version line, "built w/" naming nsqpy and Python instead of Go."""
    py = ".".join(str(x) for x in sys.version_info[:3])
    return f"nsqadmin v{NSQ_VERSION} (built w/nsqpy-{NSQPY_VERSION}-python{py})"


_opt = goflag.option


def _multi(name: str, help: str) -> Any:
    return click.option(f"--{name}", multiple=True, type=str, help=help)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@goflag.daemon_options("[nsqadmin] ")
@_opt("http-address", str, "0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients")
@_opt("base-path", str, "/", "URL base path")
@_opt("dev-static-dir", str, "", "(development use only)")
@_opt(
    "statsd-counter-format",
    str,
    "stats.counters.%s.count",
    "The counter stats key formatting applied by the implementation of statsd (unused: no "
    "Graphite)",
)
@_opt(
    "statsd-gauge-format",
    str,
    "stats.gauges.%s",
    "The gauge stats key formatting applied by the implementation of statsd (unused)",
)
@_opt("statsd-prefix", str, "nsq.%s", "prefix used for keys sent to statsd (unused)")
@_opt("statsd-interval", DURATION, "1m0s", "time interval nsqd is configured to push to statsd")
@_opt(
    "notification-http-endpoint",
    str,
    "",
    "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent",
)
@_opt("http-client-connect-timeout", DURATION, "2s", "timeout for HTTP connect")
@_opt("http-client-request-timeout", DURATION, "5s", "timeout for HTTP request")
@click.option(
    "--http-client-tls-insecure-skip-verify/--no-http-client-tls-insecure-skip-verify",
    default=False,
    help="configure the HTTP client to skip verification of TLS certificates",
)
@_opt("http-client-tls-root-ca-file", str, "", "path to CA file for the HTTP client")
@_opt("http-client-tls-cert", str, "", "path to certificate file for the HTTP client")
@_opt("http-client-tls-key", str, "", "path to key file for the HTTP client")
@_opt(
    "allow-config-from-cidr",
    str,
    "127.0.0.1/8",
    "A CIDR from which to allow HTTP requests to the /config endpoint",
)
@_opt(
    "acl-http-header",
    str,
    "X-Forwarded-User",
    "HTTP header to check for authenticated admin users",
)
@_multi("lookupd-http-address", "lookupd HTTP address (may be given multiple times)")
@_multi("nsqd-http-address", "nsqd HTTP address (may be given multiple times)")
@_multi(
    "admin-user",
    "admin user (may be given multiple times; if specified, only these users will be able to "
    "perform privileged actions; acl-http-header is used to determine the authenticated user)",
)
@_opt(
    "sample-interval",
    DURATION,
    "10s",
    "[nsqpy] how often the admin samples every topic and channel for its charts",
)
@_opt("history-window", DURATION, "1h0m0s", "[nsqpy] how far back the charts go")
@_opt("refresh-interval", DURATION, "5s", "[nsqpy] live refresh of the pages (JavaScript)")
@_opt(
    "dead-letter-suffix",
    str,
    ".dead",
    '[nsqpy] nsqpy-d\'s dead-letter topics are <topic>.<channel><suffix> ("" hides them)',
)
def nsqpy_admin(**kw: Any) -> None:
    """nsqpy-admin: a drop-in nsqadmin (NSQ 1.3) in Python."""
    if not goflag.version_or_config(kw, version_string, cfg_to_flag=CFG_TO_FLAG):
        return
    from .options import AdminOptions

    opts = AdminOptions(
        log_level=kw["log_level"].lower(),
        log_prefix=kw["log_prefix"],
        http_address=kw["http_address"],
        base_path=kw["base_path"],
        dev_static_dir=kw["dev_static_dir"],
        statsd_prefix=kw["statsd_prefix"],
        statsd_counter_format=kw["statsd_counter_format"],
        statsd_gauge_format=kw["statsd_gauge_format"],
        statsd_interval_ms=kw["statsd_interval"],
        nsqlookupd_http_addresses=list(kw["lookupd_http_address"]),
        nsqd_http_addresses=list(kw["nsqd_http_address"]),
        http_client_connect_timeout_ms=kw["http_client_connect_timeout"],
        http_client_request_timeout_ms=kw["http_client_request_timeout"],
        http_client_tls_insecure_skip_verify=kw["http_client_tls_insecure_skip_verify"],
        http_client_tls_root_ca_file=kw["http_client_tls_root_ca_file"],
        http_client_tls_cert=kw["http_client_tls_cert"],
        http_client_tls_key=kw["http_client_tls_key"],
        allow_config_from_cidr=kw["allow_config_from_cidr"],
        notification_http_endpoint=kw["notification_http_endpoint"],
        acl_http_header=kw["acl_http_header"],
        admin_users=list(kw["admin_user"]),
        sample_interval_ms=kw["sample_interval"],
        history_window_ms=kw["history_window"],
        refresh_interval_ms=kw["refresh_interval"],
        dead_letter_suffix=kw["dead_letter_suffix"],
    )
    setup_logging(opts.log_prefix, opts.log_level)
    run(opts)


def run(opts: Any) -> None:
    """Start nsqadmin on uvloop and serve until SIGTERM or SIGINT; exit 0 on a clean stop,
    1 when the options are refused or the listener cannot be bound."""
    from ..internal.daemon import serve
    from .server import AdminServer

    logging.getLogger("nsqpy").info(version_string())
    serve("nsqadmin", lambda: AdminServer(opts))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        args = goflag.normalize_go_flags(args, BOOL_FLAGS, UNIMPLEMENTED, program="nsqpy-admin")
    except click.UsageError as e:
        click.echo(f"nsqpy-admin: {e.format_message()}", err=True)
        sys.exit(2)
    nsqpy_admin.main(args=args, prog_name="nsqpy-admin")


if __name__ == "__main__":
    main()
