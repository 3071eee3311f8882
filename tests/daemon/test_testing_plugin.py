"""nsqpy.testing: the pytest plugin works from another project's suite, and leaves no daemon.

A temporary project outside this repository (its own directory, no conftest of ours) holds a
test that takes the plugin's fixtures by name only: ``nsqd`` (publish with pynsq's Writer,
consume with pynsq's Reader), ``nsq_cluster`` (two nodes found through nsqlookupd) and a test that
fails on purpose. The inner pytest runs in a child process with the interpreter that has nsqpy
installed (the plugin comes in through the ``pytest11`` entry point). Afterwards no nsqpy daemon
started by it is alive.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

INNER_TEST = """
import nsq
import tornado.ioloop


def _consume(addresses, topic, channel, n, lookupd=None):
    got = []
    loop = tornado.ioloop.IOLoop.current()

    def handler(message):
        got.append(message.body)
        if len(got) >= n:
            loop.stop()
        return True

    kw = {"lookupd_http_addresses": [lookupd], "lookupd_poll_interval": 1} if lookupd else {
        "nsqd_tcp_addresses": addresses}
    reader = nsq.Reader(topic=topic, channel=channel, message_handler=handler,
                        max_in_flight=10, **kw)
    timeout = loop.call_later(20, loop.stop)
    loop.start()
    loop.remove_timeout(timeout)
    reader.close()
    return got


def test_pynsq_publish_and_consume(nsqd):
    writer = nsq.Writer([nsqd.tcp_address])
    loop = tornado.ioloop.IOLoop.current()
    done = []

    def publish():
        if not writer.conns:
            loop.call_later(0.05, publish)
            return
        writer.pub("events", b"hello", callback=lambda conn, data: (done.append(data), loop.stop()))

    loop.call_later(0.05, publish)
    timeout = loop.call_later(20, loop.stop)
    loop.start()
    loop.remove_timeout(timeout)
    assert done == [b"OK"]
    nsqd.wait_depth("events", 1)
    assert _consume([nsqd.tcp_address], "events", "archive", 1) == [b"hello"]


def test_cluster_through_lookupd(nsq_cluster):
    cluster = nsq_cluster(2)
    for i, node in enumerate(cluster.nodes):
        node.pub("orders", b"from node %d" % i)
    cluster.wait_registered("orders")
    got = _consume(None, "orders", "billing", 2, lookupd=cluster.lookupd_http_address)
    assert sorted(got) == [b"from node 0", b"from node 1"]


def test_fails_on_purpose(nsqd):
    nsqd.pub("t", b"x")
    assert False, "this test fails; its daemon must still be stopped"
"""


def _daemons_marked(mark: str) -> set[int]:
    """PIDs of live ``python -m nsqpy`` / ``-m nsqpy.lookupd`` processes whose environment holds
    NSQPY_TEST_MARK=mark (they inherited it from the run that started them)."""
    want = f"NSQPY_TEST_MARK={mark}".encode()
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if b"-m" in argv and (b"nsqpy" in argv or b"nsqpy.lookupd" in argv) and want in environ:
            pids.add(int(entry))
    return pids


@pytest.mark.slow
def test_fixtures_in_a_project_outside_the_repo(tmp_path: Path) -> None:
    project = tmp_path / "someone-elses-project"
    (project / "tests").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "consumer-app"\nversion = "0"\n')
    (project / "tests" / "test_app.py").write_text(textwrap.dedent(INNER_TEST))
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NSQPY_TEST_MARK"] = mark
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = r.stdout + r.stderr
    assert "1 failed, 2 passed" in out, out[-4000:]
    assert "this test fails; its daemon must still be stopped" in out
    leftover = _daemons_marked(mark)
    assert not leftover, f"daemons left behind: {leftover}"


@pytest.mark.slow
def test_a_killed_test_run_takes_its_daemons_along(tmp_path: Path) -> None:
    """Even a test process killed with SIGKILL (no finalizer runs) leaves no daemon: the
    children have PR_SET_PDEATHSIG."""
    script = tmp_path / "hold.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from nsqpy.testing import Nsqd, Nsqlookupd
            d, lk = Nsqd(), Nsqlookupd()
            print(d.pid, lk.pid, flush=True)
            time.sleep(60)
            """
        )
    )
    mark = uuid.uuid4().hex
    env = {**os.environ, "NSQPY_TEST_MARK": mark}
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout is not None
        pids = [int(x) for x in p.stdout.readline().split()]
        assert len(pids) == 2 and set(pids) == _daemons_marked(mark)
    finally:
        p.kill()
        p.wait(10)
    from nsqpy.testing import wait_for

    wait_for(lambda: not _daemons_marked(mark), timeout=10, what="children gone")
