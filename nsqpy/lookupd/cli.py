"""nsqpy-lookupd: the command line, logging, signals and lifecycle.

Strategy: apps/nsqlookupd's flags with their names, defaults and Go flag syntax, generated
from nsqpy-lookupd's option table (options.py, through internal/optiontable.py, as nsqpy-d),
a TOML --config file (command line, then file, then default), nsqlookupd's log lines on
stderr ("[nsqlookupd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on 127.0.0.1:4160"),
uvloop, and exit 0 on SIGTERM/SIGINT. Imports stay light: the daemon's modules load only
when it runs."""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..build_info import version_string as nsq_version_string
from .options import TABLE, LookupdOptions


def version_string() -> str:
    """nsqlookupd's version line, "built w/" naming nsqpy and Python instead of Go."""
    return nsq_version_string("nsqlookupd")


@functools.cache
def command() -> Any:
    """The click command of nsqpy-lookupd (also ``cli.nsqpy_lookupd``), made at first use: a
    plain start does not import click (optiontable.Table.fast_flags)."""
    import click

    @click.command(cls=TABLE.command_class)
    @TABLE.click_options
    def nsqpy_lookupd(**kw: Any) -> None:
        """nsqpy-lookupd: a drop-in nsqlookupd (NSQ 1.3) in Python."""
        if not TABLE.start(kw, version_string):
            return
        opts: LookupdOptions = TABLE.from_flags(kw)
        TABLE.setup_logging(opts)
        run(opts)

    return nsqpy_lookupd


def __getattr__(name: str) -> Any:
    if name == "nsqpy_lookupd":
        return command()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def start_fast(kw: dict[str, Any]) -> bool:
    """Table.main's fast path: start with ``kw`` (the flags click would have parsed); False,
    having done nothing, when they do not make options (click then parses, and says why)."""
    try:
        opts: LookupdOptions = TABLE.from_flags(kw)
    except Exception:  # click.UsageError, reported by click's own parse
        return False
    TABLE.setup_logging(opts)
    run(opts)
    return True


def run(opts: Any) -> None:
    """Start nsqlookupd on uvloop and serve until SIGTERM or SIGINT; exit 0 on a clean stop,
    1 when a listener cannot be bound."""
    from ..internal.daemon import serve
    from .nsqlookupd import NSQLookupd
    from .server import Server

    logging.getLogger("nsqpy").info(version_string())
    serve("nsqlookupd", lambda: Server(NSQLookupd(opts)))


def main(argv: list[str] | None = None) -> None:
    """nsqpy-lookupd's entry point: ``argv`` (sys.argv[1:] when None) in Go or click syntax."""
    TABLE.main(command, argv, fast=start_fast)


if __name__ == "__main__":
    main()
