"""nsqpy-admin: the command line, logging, signals and lifecycle.

Strategy: apps/nsqadmin's flags with their names, defaults and Go flag syntax, generated from
nsqpy-admin's option table (options.py, through internal/optiontable.py, as nsqpy-d and
nsqpy-lookupd), a TOML --config file (command line, then file, then default; nsqadmin's cfg
names nsqlookupd_http_addresses, nsqd_http_addresses and admin_users), nsqadmin's log lines
on stderr ("[nsqadmin] ... INFO: HTTP: listening on 127.0.0.1:4171"), and the command and
lifecycle every table-only daemon shares (internal/daemon_cli.py: uvloop, exit 0 on
SIGTERM/SIGINT, 1 when it cannot start). The Graphite flags are refused by name: the admin
keeps its own history instead (--sample-interval, --history-window are nsqpy's). Imports stay
light: the server's modules load only when it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..build_info import version_string as nsq_version_string
from ..internal.daemon_cli import DaemonCommand
from .options import TABLE, AdminOptions

if TYPE_CHECKING:
    from ..internal.daemon import Startable


def _daemon(opts: AdminOptions) -> Startable:
    from .server import AdminServer

    return AdminServer(opts)


DAEMON = DaemonCommand(
    TABLE, "nsqpy-admin: a drop-in nsqadmin (NSQ 1.3) in Python.", nsq_version_string, _daemon
)

#: the console script: argv (sys.argv[1:] when None) in Go or click syntax
main = DAEMON.main


#: ``nsqpy_admin``, the click command, built when first asked for (it imports click)
__getattr__ = DAEMON.module_getattr(__name__, "nsqpy_admin")

if __name__ == "__main__":
    main()
