"""nsqpy-admin: the command line, logging, signals and lifecycle.

Strategy: apps/nsqadmin's flags with their names, defaults and Go flag syntax, generated from
nsqpy-admin's option table (options.py, through internal/optiontable.py, as nsqpy-d and
nsqpy-lookupd), a TOML --config file (command line, then file, then default; nsqadmin's cfg
names nsqlookupd_http_addresses, nsqd_http_addresses and admin_users), nsqadmin's log lines
on stderr ("[nsqadmin] ... INFO: HTTP: listening on 127.0.0.1:4171"), and the shared daemon
lifecycle (uvloop, exit 0 on SIGTERM/SIGINT, 1 when it cannot start). The Graphite flags are
refused by name: the admin keeps its own history instead (--sample-interval,
--history-window are nsqpy's). Imports stay light: the server's modules load only when it
runs."""

from __future__ import annotations

import logging
from typing import Any

import click

from ..options import version_string as nsq_version_string
from .options import TABLE, AdminOptions


def version_string() -> str:
    """nsqadmin's version line, "built w/" naming nsqpy and Python instead of Go."""
    return nsq_version_string("nsqadmin")


@click.command(cls=TABLE.command_class)
@TABLE.click_options
def nsqpy_admin(**kw: Any) -> None:
    """nsqpy-admin: a drop-in nsqadmin (NSQ 1.3) in Python."""
    if not TABLE.start(kw, version_string):
        return
    opts: AdminOptions = TABLE.from_flags(kw)
    TABLE.setup_logging(opts)
    run(opts)


def run(opts: Any) -> None:
    """Start nsqadmin on uvloop and serve until SIGTERM or SIGINT; exit 0 on a clean stop,
    1 when the options are refused or the listener cannot be bound."""
    from ..internal.daemon import serve
    from .server import AdminServer

    logging.getLogger("nsqpy").info(version_string())
    serve("nsqadmin", lambda: AdminServer(opts))


def main(argv: list[str] | None = None) -> None:
    """nsqpy-admin's entry point: ``argv`` (sys.argv[1:] when None) in Go or click syntax."""
    TABLE.main(lambda: nsqpy_admin, argv)


if __name__ == "__main__":
    main()
