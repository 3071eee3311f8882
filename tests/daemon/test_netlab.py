"""tests/support/netlab.py, the separate network hosts the failure tests of replicated topics run
on: nsqpy-d in one host is reached from another host and from the machine, a cut link makes it
unreachable from both (bounded by a connect timeout), and healing brings it back."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from support.netlab import NetLab, unavailable

from nsqpy.testing import Nsqd, wait_for

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def test_a_cut_host_is_unreachable_until_healed() -> None:
    with NetLab(2) as lab:
        nsqd = Nsqd(
            [f"--broadcast-address={lab.address(0)}"],
            cmd=lab.command(0, [sys.executable, "-m", "nsqpy"]),
            host=lab.address(0),
        )
        try:
            # from the other host: publish over HTTP through the bridge
            url = f"http://{lab.address(0)}:{nsqd.http_port}/pub?topic=lab"
            pub = lab.command(
                1,
                [
                    sys.executable,
                    "-c",
                    (
                        "import sys, urllib.request as u; "
                        "print(u.urlopen(u.Request(sys.argv[1], data=b'hi'), timeout=5).read())"
                    ),
                    url,
                ],
            )
            out = subprocess.run(pub, capture_output=True, text=True, timeout=30)
            assert out.stdout.strip() == "b'OK'", out.stderr
            assert nsqd.depth("lab") == 1
            lab.cut(0)
            assert not _reachable(lab.address(0), nsqd.tcp_port)
            lab.heal(0)
            wait_for(lambda: _reachable(lab.address(0), nsqd.tcp_port), what="healed link")
            assert nsqd.depth("lab") == 1
        finally:
            nsqd.stop()
