"""Without --etcd-endpoints nothing of nsqpy/replication is loaded: a daemon's core, its V2
protocol and its HTTP router are built in a fresh interpreter, whose sys.modules is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.daemons import ROOT

_PROGRAM = """
import sys
from nsqpy import cli, server
from nsqpy.http_api import build_router
from nsqpy.nsqd import NSQD
from nsqpy.options import Options
from nsqpy.protocol_v2 import ProtocolV2

nsqd = NSQD(Options(data_path=sys.argv[1]))
core = ProtocolV2(nsqd)
build_router(nsqd)
assert core.replication is None and nsqd.replication is None
print(" ".join(sorted(m for m in sys.modules if m.startswith("nsqpy.replication"))))
"""


def test_no_replication_module_without_etcd(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == ""
