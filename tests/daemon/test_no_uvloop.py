"""nsqpy-d where uvloop is not installed (Windows, PyPy: the dependency's environment marker
leaves it out): the daemon says so in its log and serves on asyncio's own event loop, and
nsqpy.client publishes and consumes through it. uvloop is hidden from the child interpreter
by a ``None`` entry in sys.modules, which makes ``import uvloop`` raise ImportError exactly as
a missing package does."""

from __future__ import annotations

import asyncio
import sys

import pytest
from support.daemons import DAEMON_CWD

from nsqpy.client import Config, Consumer, Producer
from nsqpy.testing import Nsqd

pytestmark = pytest.mark.asyncio

WITHOUT_UVLOOP = (
    "import sys; sys.modules['uvloop'] = None; from nsqpy.cli import main; main(sys.argv[1:])"
)


@pytest.fixture
def nsqd_without_uvloop(tmp_path):
    cmd = [sys.executable, "-c", WITHOUT_UVLOOP]
    d = Nsqd(data_path=tmp_path, cmd=cmd, cwd=DAEMON_CWD, wait_ping=True)
    yield d
    assert d.stop() == 0, d.log_text()[-3000:]


async def test_nsqd_runs_without_uvloop(nsqd_without_uvloop):
    d = nsqd_without_uvloop
    assert "uvloop is not installed: running on asyncio's own event loop" in d.log_text()
    got: list[bytes] = []
    async with Producer(d.tcp_address) as p:
        await p.multi_publish("plain", [b"a", b"b"])
    async with Consumer("plain", "ch", Config(max_in_flight=2)) as c:
        c.add_handler(lambda m: got.append(m.body))
        await c.connect_to_nsqd(d.tcp_address)
        await asyncio.wait_for(_until(lambda: len(got) == 2), 15)
    assert sorted(got) == [b"a", b"b"]
    assert d.depth("plain", "ch") == 0


async def _until(pred) -> None:
    while not pred():
        await asyncio.sleep(0.02)
