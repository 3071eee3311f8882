"""nsqpy-lookupd: the command line, logging, signals and lifecycle.

Strategy: apps/nsqlookupd's flags with their names, defaults and Go flag syntax, generated
from nsqpy-lookupd's option table (options.py, through internal/optiontable.py, as nsqpy-d),
a TOML --config file (command line, then file, then default), nsqlookupd's log lines on
stderr ("[nsqlookupd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on 127.0.0.1:4160"),
uvloop, and exit 0 on SIGTERM/SIGINT (the command and lifecycle nsqpy-admin shares:
internal/daemon_cli.py). Imports stay light: a plain start imports neither click nor nsqd's
modules, and the daemon's own modules load only when it runs; a lone ``--version`` loads
not even the option table (build_info.version_asked)."""

from __future__ import annotations

import functools
import sys

from ..build_info import version_asked
from ..build_info import version_string as nsq_version_string

TYPE_CHECKING = False  # typing.TYPE_CHECKING; typing is not imported for a --version
if TYPE_CHECKING:
    from typing import Any

    from ..internal.daemon import Startable
    from ..internal.daemon_cli import DaemonCommand
    from .options import LookupdOptions


def _daemon(opts: LookupdOptions) -> Startable:
    from .nsqlookupd import NSQLookupd
    from .server import Server

    return Server(NSQLookupd(opts))


@functools.cache
def daemon_command() -> DaemonCommand:
    """nsqpy-lookupd's command (also ``cli.DAEMON``), made at first use: a lone --version
    is answered without the option table."""
    from ..internal.daemon_cli import DaemonCommand
    from .options import TABLE

    return DaemonCommand(
        TABLE,
        "nsqpy-lookupd: a drop-in nsqlookupd (NSQ 1.3) in Python.",
        nsq_version_string,
        _daemon,
    )


def main(argv: list[str] | None = None) -> None:
    """The console script: ``argv`` (sys.argv[1:] when None) in Go or click syntax."""
    args = sys.argv[1:] if argv is None else argv
    if version_asked(args, "nsqpy-lookupd"):
        sys.stdout.write(nsq_version_string("nsqlookupd") + "\n")
        return
    daemon_command().main(args)


def __getattr__(name: str) -> Any:
    # ``DAEMON`` and ``nsqpy_lookupd`` (the click command, which imports click) at first use
    if name == "DAEMON":
        return daemon_command()
    if name == "nsqpy_lookupd":
        return daemon_command().command
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
