"""nsqpy-d: the command line, logging, signals and lifecycle.

Strategy: nsqd's flags with nsqd's names, defaults and Go flag syntax (``-flag value``,
``-flag=value``, ``--flag value``, ``--flag=value``, bare booleans and ``-bool=false``), parsed
by click after a small rewrite of Go-only spellings (internal/goflag.py). The flags, their
--help and the --config file keys are generated from nsqpy-d's option table (options.TABLE);
this module adds only what no single field holds: the --tcp-port/--http-port shorthands. An
nsqd flag whose feature nsqpy-d does not have yet stops the start with a message naming it,
never silently ignored. Log lines keep nsqd's shape on stderr (internal/lg.py):
``[nsqd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on ...``. A lone ``--version`` is
answered before the option table loads (build_info.version_asked); the table, logging and
the daemon's modules are imported by the functions that use them."""

from __future__ import annotations

import functools
import sys

from .build_info import version_asked, version_string

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing is not imported for a --version
if TYPE_CHECKING:
    from typing import Any

    from .options import Options


def normalize_go_flags(argv: list[str]) -> list[str]:
    """nsqd's flags in Go syntax rewritten for click (goflag.normalize_go_flags); raises
    click.UsageError for an nsqd flag that is not implemented or a bad boolean value."""
    from .options import TABLE

    return TABLE.normalize(argv)


@functools.cache
def command() -> Any:
    """The click command of nsqpy-d (also ``cli.nsqpy_d``), made at first use: a plain start
    does not import click (optiontable.Table.fast_flags)."""
    import click

    from .options import TABLE

    @click.command(cls=TABLE.command_class)
    @TABLE.click_options
    def nsqpy_d(**kw: Any) -> None:
        """nsqpy-d: a drop-in nsqd (NSQ 1.3) in Python."""
        if not TABLE.start(kw, version_string):
            return
        start(options_from_flags(kw))

    return nsqpy_d


def __getattr__(name: str) -> Any:
    if name == "nsqpy_d":
        return command()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def start(opts: Options) -> None:
    """What nsqpy-d does with its parsed options: log as they say, refuse invalid ones (FATAL,
    exit 1, as nsqd.New), then run."""
    import logging

    from .options import TABLE

    TABLE.setup_logging(opts)
    try:
        opts.validate()
    except ValueError as e:
        logging.getLogger("nsqpy").critical("failed to instantiate nsqd - %s", e)
        sys.exit(1)
    run(opts)


def start_fast(kw: dict[str, Any]) -> bool:
    """Table.main's fast path: start with ``kw`` (the flags click would have parsed); False,
    having done nothing, when they do not make Options (click then parses, and says why)."""
    try:
        opts = options_from_flags(kw)
    except Exception:  # click.UsageError, reported by click's own parse
        return False
    start(opts)
    return True


def with_port(addr: str, port: int, flag: str = "tcp-port") -> str:
    """``addr`` (``host:port``, ``[v6]:port``, or a host without a port) with its port
    replaced by ``port``: what --tcp-port/--http-port do. An IPv6 host keeps its brackets
    (Go's net.JoinHostPort). click.UsageError naming ``flag`` when ``addr`` is no host."""
    from .internal.netaddr import join_host_port, split_host_port

    for candidate in (addr, addr + ":0"):  # the second: an address given without a port
        try:
            host, _ = split_host_port(candidate)
        except ValueError:
            continue
        return join_host_port(host, port)
    import click

    raise click.UsageError(f"--{flag}: cannot set the port of address {addr!r}")


def options_from_flags(kw: dict[str, Any]) -> Options:
    """nsqpy-d's Options from click's parsed flags (options.TABLE.from_flags, then the port
    shorthands); click.UsageError for a value the table's parsers refuse."""
    from .options import TABLE

    o: Options = TABLE.from_flags(kw)
    if kw["tcp_port"] is not None:
        o.tcp_address = with_port(o.tcp_address, kw["tcp_port"], "tcp-port")
    if kw["http_port"] is not None:
        o.http_address = with_port(o.http_address, kw["http_port"], "http-port")
    return o


def run(opts: Options) -> None:
    """Start nsqd on uvloop and serve until SIGTERM or SIGINT; exits 0 on a clean stop."""
    import logging

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
    """nsqpy-d's entry point: ``argv`` (sys.argv[1:] when None) in Go or click syntax."""
    args = sys.argv[1:] if argv is None else argv
    if version_asked(args, "nsqpy-d"):
        sys.stdout.write(version_string() + "\n")
        return
    from .options import TABLE

    TABLE.main(command, args, fast=start_fast)


if __name__ == "__main__":
    main()
