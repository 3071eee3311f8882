"""nsqpy-lookupd: the command line, logging, signals and lifecycle.

Strategy: apps/nsqlookupd's flags with their names, defaults and Go flag syntax, generated
from nsqpy-lookupd's option table (options.py, through internal/optiontable.py, as nsqpy-d),
a TOML --config file (command line, then file, then default), nsqlookupd's log lines on
stderr ("[nsqlookupd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on 127.0.0.1:4160"),
uvloop, and exit 0 on SIGTERM/SIGINT (the command and lifecycle nsqpy-admin shares:
internal/daemon_cli.py). Imports stay light: a plain start imports neither click nor nsqd's
modules, and the daemon's own modules load only when it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..build_info import version_string as nsq_version_string
from ..internal.daemon_cli import DaemonCommand
from .options import TABLE, LookupdOptions

if TYPE_CHECKING:
    from ..internal.daemon import Startable


def _daemon(opts: LookupdOptions) -> Startable:
    from .nsqlookupd import NSQLookupd
    from .server import Server

    return Server(NSQLookupd(opts))


DAEMON = DaemonCommand(
    TABLE, "nsqpy-lookupd: a drop-in nsqlookupd (NSQ 1.3) in Python.", nsq_version_string, _daemon
)

#: the console script: argv (sys.argv[1:] when None) in Go or click syntax
main = DAEMON.main


#: ``nsqpy_lookupd``, the click command, built when first asked for (it imports click)
__getattr__ = DAEMON.module_getattr(__name__, "nsqpy_lookupd")

if __name__ == "__main__":
    main()
