"""nsqpy-lookupd: the command line, logging, signals and lifecycle.

Strategy: apps/nsqlookupd's flags with their names, defaults and Go flag syntax (through
goflag, as nsqpy-d), a TOML --config file through nsqpy.config (command line, then file, then
default), nsqlookupd's log lines on stderr ("[nsqlookupd] 2006/01/02 15:04:05.000000 INFO:
TCP: listening on 127.0.0.1:4160"), uvloop, and exit 0 on SIGTERM/SIGINT. Imports stay
light: the daemon's modules load only when it runs."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from .. import options
from ..internal import goflag
from ..internal.goflag import DURATION, setup_logging

BOOL_FLAGS = frozenset(("version", "verbose"))


def version_string() -> str:
    """nsqlookupd's version line, "built w/" naming nsqpy and Python instead of Go."""
    return options.version_string("nsqlookupd")


_opt = goflag.option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@goflag.daemon_options("[nsqlookupd] ")
@_opt("tcp-address", str, "0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients")
@_opt("http-address", str, "0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients")
@click.option(
    "--broadcast-address",
    type=str,
    default=None,
    help="address of this lookupd node, (default to the OS hostname)",
)
@_opt(
    "inactive-producer-timeout",
    DURATION,
    "5m0s",
    "duration of time a producer will remain in the active list since its last ping",
)
@_opt(
    "tombstone-lifetime",
    DURATION,
    "45s",
    "duration of time a producer will remain tombstoned if registration remains",
)
def nsqpy_lookupd(**kw: Any) -> None:
    """nsqpy-lookupd: a drop-in nsqlookupd (NSQ 1.3) in Python."""
    if not goflag.version_or_config(kw, version_string):
        return
    from .nsqlookupd import LookupdOptions

    opts = LookupdOptions(
        log_level=kw["log_level"].lower(),
        log_prefix=kw["log_prefix"],
        tcp_address=kw["tcp_address"],
        http_address=kw["http_address"],
        inactive_producer_timeout_ms=kw["inactive_producer_timeout"],
        tombstone_lifetime_ms=kw["tombstone_lifetime"],
    )
    if kw["broadcast_address"]:
        opts.broadcast_address = kw["broadcast_address"]
    setup_logging(opts.log_prefix, opts.log_level)
    run(opts)


def run(opts: Any) -> None:
    """Start nsqlookupd on uvloop and serve until SIGTERM or SIGINT; exit 0 on a clean stop,
    1 when a listener cannot be bound."""
    from ..internal.daemon import serve
    from .nsqlookupd import NSQLookupd
    from .server import Server

    logging.getLogger("nsqpy").info(version_string())
    serve("nsqlookupd", lambda: Server(NSQLookupd(opts)))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        args = goflag.normalize_go_flags(args, BOOL_FLAGS, program="nsqpy-lookupd")
    except click.UsageError as e:
        click.echo(f"nsqpy-lookupd: {e.format_message()}", err=True)
        sys.exit(2)
    nsqpy_lookupd.main(args=args, prog_name="nsqpy-lookupd")


if __name__ == "__main__":
    main()
