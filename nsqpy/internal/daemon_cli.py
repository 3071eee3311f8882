"""The command of a daemon whose command line is its option table alone (nsqpy-lookupd,
nsqpy-admin): --version, --config, logging as the options say, then serve.

Strategy: the table (internal/optiontable.py) owns the flags, the Go usage text and the config
file; internal/daemon.py owns the process once it serves. This module joins the two in the
order every NSQ daemon's main follows (apps/nsqlookupd, apps/nsqadmin: flags, version, config,
options, logger, New, Main): the version line is printed and the command returns, or the
options are built, logging is set up, the version line logged, and the daemon served until a
signal. A plain command line starts the daemon without importing click (Table.fast_flags);
the click command is built at its first use (help, --version, --config, an error). nsqpy-d
adds to that order (its port shorthands, its checks before it starts) and so keeps its own
command (nsqpy/cli.py). The server's modules are imported only when it runs."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .daemon import Startable
    from .optiontable import Table


class DaemonCommand:
    """``table``'s daemon, described by ``doc``: ``version(go_name)`` (build_info's
    version_string) is its --version line and the first line it logs, and ``make(options)``
    builds the daemon that internal/daemon.serve runs; the process exits 0 after a clean stop,
    1 when the daemon cannot start (serve's rule). ``main`` is the console script."""

    def __init__(
        self,
        table: Table,
        doc: str,
        version: Callable[[str], str],
        make: Callable[[Any], Startable],
    ) -> None:
        self.table = table
        self.doc = doc
        self.version = version
        self.make = make

    def version_line(self) -> str:
        return self.version(self.table.go_name)

    def serve(self, opts: Any) -> None:
        """Log as ``opts`` say, log the version line, and serve until a signal."""
        self.table.setup_logging(opts)
        from .daemon import serve

        logging.getLogger("nsqpy").info(self.version_line())
        serve(self.table.go_name, lambda: self.make(opts))

    @functools.cached_property
    def command(self) -> Any:
        """The click command (built at first use: it imports click)."""
        import click

        table = self.table

        def command(**kw: Any) -> None:
            if not table.start(kw, self.version_line):
                return
            self.serve(table.from_flags(kw))

        command.__doc__ = self.doc
        decorated = table.click_options(command)
        return click.command(table.program, cls=table.command_class)(decorated)

    def start_fast(self, kw: dict[str, Any]) -> bool:
        """Table.main's fast path: serve with ``kw`` (the flags click would have parsed);
        False, having done nothing, when they do not make options (click then parses, and
        says why)."""
        try:
            opts = self.table.from_flags(kw)
        except Exception:  # click.UsageError, reported by click's own parse
            return False
        self.serve(opts)
        return True

    def module_getattr(self, module: str, name: str) -> Callable[[str], Any]:
        """A ``__getattr__`` for the daemon's cli ``module``: its click command as attribute
        ``name``, built when first asked for (it imports click)."""

        def getattr_(attr: str) -> Any:
            if attr == name:
                return self.command
            raise AttributeError(f"module {module!r} has no attribute {attr!r}")

        return getattr_

    def main(self, argv: list[str] | None = None) -> None:
        """The entry point: ``argv`` (sys.argv[1:] when None) in Go or click syntax."""
        self.table.main(lambda: self.command, argv, fast=self.start_fast)
