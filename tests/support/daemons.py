"""nsqpy-d and nsqpy-lookupd as the tests run them: from the checkout (or the tree
NSQPY_TEST_DAEMON_CWD names), on loopback, with ephemeral ports.

Every daemon here is a separate `python -m nsqpy` process listening on 127.0.0.1 with ports
picked by the OS (port 0; the real ports are read from its "TCP: listening on" and
"HTTP: listening on" log lines, as with nsqd) and a temporary --data-path. The fixtures that
start and stop them are tests/conftest.py's."""

from __future__ import annotations

import os
from pathlib import Path

from nsqpy.testing import Nsqd, Nsqlookupd

from .raw_client import RawClient

#: The checkout.
ROOT = Path(__file__).resolve().parents[2]
#: Where the daemons under test run (`python -m nsqpy` imports the nsqpy found there first): the
#: checkout, unless NSQPY_TEST_DAEMON_CWD names another tree (tests/e2e/test_mypyc_build.py
#: points it at the compiled copy, so that the daemons run the compiled modules too).
DAEMON_CWD = Path(os.environ.get("NSQPY_TEST_DAEMON_CWD") or ROOT)


class Daemon(Nsqd):
    """A running nsqpy-d process (nsqpy.testing.Nsqd, run from DAEMON_CWD):
    ``Daemon(extra_flags, data_path)``; ``raw()`` opens a RawClient to its TCP port."""

    def __init__(self, args: list[str], data_path: Path) -> None:
        self.args = args
        super().__init__(args, data_path, cwd=DAEMON_CWD)

    def raw(self, **kw: float) -> RawClient:
        return RawClient(self.tcp_port, **kw)


class Lookupd(Nsqlookupd):
    """A running nsqpy-lookupd process (nsqpy.testing.Nsqlookupd) on loopback."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        super().__init__(args, cwd=DAEMON_CWD)
