"""The command of a daemon whose command line is its option table alone (nsqpy-lookupd,
nsqpy-admin): --version, --config, logging as the options say, then serve.

Strategy: the table (internal/optiontable.py) owns the flags, the Go usage text and the config
file; internal/daemon.py owns the process once it serves. This module joins the two in the
order every NSQ daemon's main follows (apps/nsqlookupd, apps/nsqadmin: flags, version, config,
options, logger, New, Main): the version line is printed and the command returns, or the
options are built, logging is set up, the version line logged, and the daemon served until a
signal. nsqpy-d adds to that order (its port shorthands, its checks before it starts) and so
keeps its own command (nsqpy/cli.py). The server's modules are imported only when it runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from .daemon import Startable
    from .optiontable import Table


def daemon_command(
    table: Table, doc: str, version: Callable[[str], str], make: Callable[[Any], Startable]
) -> click.Command:
    """The click command of ``table``'s daemon, described by ``doc``: ``version(go_name)``
    (nsqpy.options.version_string) is its --version line and the first line it logs, and
    ``make(options)`` builds the daemon that
    internal/daemon.serve runs; the process exits 0 after a clean stop, 1 when the daemon
    cannot start (serve's rule)."""

    def version_line() -> str:
        return version(table.go_name)

    def command(**kw: Any) -> None:
        if not table.start(kw, version_line):
            return
        opts = table.from_flags(kw)
        table.setup_logging(opts)
        from .daemon import serve

        logging.getLogger("nsqpy").info(version_line())
        serve(table.go_name, lambda: make(opts))

    command.__doc__ = doc
    decorated = table.click_options(command)
    built: click.Command = click.command(table.program, cls=table.command_class)(decorated)
    return built
