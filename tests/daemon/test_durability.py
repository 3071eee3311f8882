"""Durability: diskqueue spill, nsqd.dat, clean restarts and kill -9, on the real daemon."""

from __future__ import annotations

import json
import os
import random
import struct
import threading
import time

import pytest
from support.daemons import Daemon
from support.raw_client import RawClient

from nsqpy import wire
from nsqpy.testing import wait_for


def _holds_nothing(d: Daemon, topic: str, channel: str) -> bool:
    """/stats: the topic and the channel hold no message (nothing queued, in memory, read
    ahead or on disk, in flight or deferred), so every message was delivered and FINed."""
    (t,) = d.stats(topic=topic, channel=channel)["topics"]
    (ch,) = t["channels"]
    return t["depth"] == 0 and ch["depth"] == ch["in_flight_count"] == ch["deferred_count"] == 0


def drain(
    d: Daemon,
    topic: str,
    channel: str,
    expect: int = 0,
    rdy: int = 2500,
    quiet: float = 0.3,
    timeout: float = 60.0,
) -> list:
    """Consume and FIN the channel's messages until at least ``expect`` are in and the daemon
    holds none (_holds_nothing, asked whenever nothing arrives for 50 ms), then check for
    ``quiet`` s that nothing more arrives (anything that does is taken, and the wait starts
    again); returns the messages as (timestamp, attempts, id, body). TimeoutError after
    ``timeout`` s."""
    c = d.raw()
    c.sub(topic, channel, rdy=rdy)
    got = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            m = c.read_message(timeout=0.05)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"drained {len(got)} of {topic}/{channel}, not all") from None
            if len(got) < expect or not _holds_nothing(d, topic, channel):
                continue
            try:
                m = c.read_message(timeout=quiet)
            except TimeoutError:
                break  # all in, none left, nothing more came
        got.append(m)
        c.cmd(b"FIN", m[2])
    c.close()
    return got


@pytest.mark.parametrize("mem", ["10000", "0", "3"])
def test_clean_restart_redelivers_unfinished_and_keeps_deferred_delay(tmp_path, mem):
    data = tmp_path / "data"
    d = Daemon([f"--mem-queue-size={mem}"], data)
    p = d.raw()
    c = d.raw()
    c.sub("rt", "ch", rdy=3)
    for i in range(10):
        p.pub("rt", b"m%d" % i)
    published = time.time()  # before the DPUB: its due time is at least this + 3 s
    p.cmd(b"DPUB", b"rt", b"3000", body=b"later")
    p.expect_response()
    first = [c.read_message() for _ in range(3)]
    c.cmd(b"FIN", first[0][2])
    c.cmd(b"FIN", first[1][2])
    held = {first[2][3], c.read_message()[3], c.read_message()[3]}
    assert d.stop() == 0

    meta = json.loads((data / "nsqd.dat").read_text())
    assert meta == {
        "topics": [{"name": "rt", "paused": False, "channels": [{"name": "ch", "paused": False}]}],
        "version": "1.3.0",
    }
    assert (data / "rt:ch.diskqueue.meta.dat").exists()

    d2 = Daemon([f"--mem-queue-size={mem}"], data)
    try:
        st = d2.stats(topic="rt")["topics"][0]["channels"][0]
        if time.time() < published + 2.5:  # the DPUB is not due yet (the restart was quick)
            assert (st["depth"], st["deferred_count"]) == (8, 1)
        assert st["depth"] + st["deferred_count"] == 9
        # Read until all 9 are in, however long the restart took: each message's arrival time
        # is what is checked, not which read it came in.
        c2 = d2.raw()
        c2.sub("rt", "ch", rdy=20)
        got, arrived = [], {}
        while len(got) < 9:
            m = c2.read_message(timeout=10)
            arrived[m[3]] = time.time()
            got.append(m)
            c2.cmd(b"FIN", m[2])
        c2.close()
        bodies = sorted(m[3] for m in got)
        finished = {first[0][3], first[1][3]}
        assert bodies == sorted({b"m%d" % i for i in range(10)} - finished | {b"later"})
        # The three that were in flight at the stop come back as a second attempt.
        assert {m[3] for m in got if m[1] == 2} == held
        assert all(m[1] == 1 for m in got if m[3] not in held)
        # The deferred message kept its delay across the restart: not before publish + 3 s.
        assert arrived[b"later"] >= published + 3.0 - 0.05
    finally:
        assert d2.stop() == 0


def test_spill_past_mem_queue_size_and_read_back(daemon_factory):
    d = daemon_factory("--mem-queue-size=10", "--max-bytes-per-file=4096")
    p = d.raw()
    p.send(wire.encode_mpub(b"spill", [b"s%04d" % i for i in range(500)]))
    p.expect_response()
    st = d.stats(topic="spill")["topics"][0]
    # No channel yet: the topic keeps 10 in memory and the rest on disk.
    assert (st["depth"], st["backend_depth"]) == (500, 490)
    d.http("POST", "/channel/create?topic=spill&channel=c")
    st = wait_for(
        lambda: (lambda t: t["backend_depth"] == 0 and t)(d.stats(topic="spill")["topics"][0]),
        what="topic backlog moved to the channel",
    )
    ch = st["channels"][0]
    assert ch["depth"] == 500 and ch["backend_depth"] == 490
    files = sorted(os.listdir(d.data_path))
    assert sum(f.startswith("spill:c.diskqueue.0") for f in files) > 1  # rolled at 4 KiB
    got = drain(d, "spill", "c", expect=500)
    assert sorted(m[3] for m in got) == [b"s%04d" % i for i in range(500)]
    assert len(got) == 500


def test_second_daemon_on_same_data_dir_is_refused(tmp_path):
    d = Daemon([], tmp_path / "shared")
    try:
        import subprocess
        import sys

        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "nsqpy",
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                f"--data-path={tmp_path / 'shared'}",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert r.returncode == 1
        assert "failed to lock data-path" in r.stderr
        assert "in use by another instance" in r.stderr
        assert d.alive()
    finally:
        assert d.stop() == 0


def go_meta(depth: int, rnum: int, rpos: int, wnum: int, wpos: int) -> bytes:
    return b"%d\n%d,%d\n%d,%d\n" % (depth, rnum, rpos, wnum, wpos)


def test_opens_a_data_dir_in_go_nsqd_layout(tmp_path):
    """Files laid out byte for byte as Go nsqd 1.3 writes them (nsqd.dat, go-diskqueue data
    and meta files, nsqd's message records) open with every message in them."""
    data = tmp_path / "go"
    data.mkdir()
    (data / "nsqd.dat").write_text(
        json.dumps(
            {
                "topics": [
                    {
                        "name": "orders",
                        "paused": False,
                        "channels": [
                            {"name": "billing", "paused": False},
                            {"name": "audit", "paused": True},
                        ],
                    }
                ],
                "version": "1.3.0",
            }
        )
    )

    def records(first_id: int, n: int) -> list[bytes]:
        out = []
        for i in range(n):
            body = b"order-%d" % (first_id + i)
            rec = struct.pack(">qH", 1_700_000_000_000_000_000 + i, 0)
            rec += b"%016x" % (first_id + i) + body
            out.append(struct.pack(">i", len(rec)) + rec)
        return out

    blob = b"".join(records(0, 5))
    (data / "orders:billing.diskqueue.000000.dat").write_bytes(blob)
    (data / "orders:billing.diskqueue.meta.dat").write_bytes(go_meta(5, 0, 0, 0, len(blob)))
    # The topic itself holds two more, for the channels (file 1; file 0 consumed and removed).
    tblob = b"".join(records(100, 2))
    (data / "orders.diskqueue.000001.dat").write_bytes(tblob)
    (data / "orders.diskqueue.meta.dat").write_bytes(go_meta(2, 1, 0, 1, len(tblob)))

    d = Daemon([], data)
    try:
        st = d.stats(topic="orders")["topics"][0]
        chans = {c["channel_name"]: c for c in st["channels"]}
        assert chans["audit"]["paused"] is True
        wait_for(
            lambda: d.stats(topic="orders")["topics"][0]["depth"] == 0,
            what="topic backlog handed to the channels",
        )
        got = drain(d, "orders", "billing", expect=7)
        bodies = sorted(m[3] for m in got)
        assert bodies == sorted([b"order-%d" % i for i in (0, 1, 2, 3, 4, 100, 101)])
        assert {m[0] for m in got} >= {1_700_000_000_000_000_000}
        assert all(m[1] == 1 for m in got)
        st = d.stats(topic="orders", channel="audit")["topics"][0]["channels"][0]
        assert st["depth"] == 2
    finally:
        assert d.stop() == 0
    # What nsqpy-d leaves behind is in the same layout: nsqd.dat in nsqd's JSON shape.
    meta = json.loads((data / "nsqd.dat").read_text())
    assert meta["version"] == "1.3.0"
    assert {c["name"] for c in meta["topics"][0]["channels"]} == {"billing", "audit"}
    text = (data / "orders:audit.diskqueue.meta.dat").read_bytes()
    depth, rest = text.split(b"\n", 1)
    assert int(depth) == 2 and text.count(b"\n") == 3


class Publisher(threading.Thread):
    """Publishes bodies (PUB, MPUB and DPUB) and records those acknowledged with OK."""

    def __init__(self, port: int, prefix: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.prefix = prefix
        self.stop_evt = stop
        self.acked: list[bytes] = []
        self.n = 0
        self.ops = 0

    def run(self) -> None:
        try:
            c = RawClient(self.port, timeout=3)
            while not self.stop_evt.is_set():
                self.ops += 1
                if self.ops % 3 == 0:
                    bodies = [f"{self.prefix}-{self.n + k}".encode() for k in range(20)]
                    c.send(wire.encode_mpub(b"crash", bodies))
                elif self.ops % 7 == 1:
                    bodies = [f"{self.prefix}-{self.n}-deferred".encode()]
                    c.send(wire.encode_command(b"DPUB", b"crash", b"300", body=bodies[0]))
                else:
                    bodies = [f"{self.prefix}-{self.n}".encode()]
                    c.send(wire.encode_command(b"PUB", b"crash", body=bodies[0]))
                self.n += len(bodies)
                if c.read_non_heartbeat() != (wire.FRAME_TYPE_RESPONSE, b"OK"):
                    return
                self.acked.extend(bodies)
        except OSError:
            return


class Consumer(threading.Thread):
    """FINs every other message and holds the rest in flight (they must survive a crash)."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop_evt = stop
        self.finished: set[bytes] = set()
        self.received = 0

    def run(self) -> None:
        try:
            c = RawClient(self.port, timeout=3)
            c.sub("crash", "ch", rdy=200)
            while not self.stop_evt.is_set():
                try:
                    _, _, mid, body = c.read_message(timeout=0.5)
                except TimeoutError:
                    continue
                self.received += 1
                if self.received % 2 == 0:
                    c.cmd(b"FIN", mid)
                    self.finished.add(body)
        except (OSError, AssertionError):
            return


@pytest.mark.slow
def test_repeated_kill9_during_publish_loses_no_acknowledged_message(tmp_path):
    data = tmp_path / "crash"
    flags = ["--mem-queue-size=0", "--sync-every=1"]
    rng = random.Random(1234)
    acked: list[bytes] = []
    finished: set[bytes] = set()
    rounds = 8
    for r in range(rounds):
        d = Daemon(flags, data)
        stop = threading.Event()
        pubs = [Publisher(d.tcp_port, f"r{r}p{k}", stop) for k in range(2)]
        cons = Consumer(d.tcp_port, stop)
        for t in (*pubs, cons):
            t.start()
        time.sleep(rng.uniform(0.3, 1.2))
        d.proc.kill()  # kill -9, mid-stream
        d.proc.wait(10)
        stop.set()
        for t in (*pubs, cons):
            t.join(10)
        for p in pubs:
            acked.extend(p.acked)
        finished |= cons.finished
    assert len(acked) > 1000, len(acked)
    assert any(b.endswith(b"-deferred") for b in acked)

    d = Daemon(flags, data)
    try:
        final = drain(d, "crash", "ch")
    finally:
        assert d.stop() == 0
    delivered = finished | {m[3] for m in final}
    missing = set(acked) - delivered
    print(
        f"\nkill -9 x{rounds}: acknowledged {len(acked)} "
        f"({sum(b.endswith(b'-deferred') for b in acked)} by DPUB), finished before a kill "
        f"{len(finished)}, delivered after the last restart {len(final)}, "
        f"missing {len(missing)}, delivered again (at-least-once) "
        f"{len(finished & {m[3] for m in final})}"
    )
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"


@pytest.fixture
def tiny_fs(tmp_path):
    """A 512 KiB tmpfs (root only): a disk that fills up, and can be grown again."""
    import subprocess

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_fails_publish_then_recovers(tiny_fs):
    import subprocess

    d = Daemon(["--mem-queue-size=0", "--max-bytes-per-file=65536"], tiny_fs / "data")
    try:
        d.http("POST", "/topic/create?topic=full")
        d.http("POST", "/channel/create?topic=full&channel=c")
        acked = []
        failed = None
        body = b"x" * 4000
        for i in range(400):  # 1.6 MB of messages: more than the disk holds
            p = d.raw()
            p.cmd(b"PUB", b"full", body=body + b"%04d" % i)
            ftype, data = p.read_non_heartbeat()
            p.close()
            if ftype == wire.FRAME_TYPE_ERROR:
                failed = data
                break
            acked.append(i)
        assert failed is not None and failed.startswith(b"E_PUB_FAILED PUB failed"), failed
        assert b"No space left on device" in failed
        code, text, _ = d.http("GET", "/ping")
        assert code == 500 and text.startswith(b"NOK - "), (code, text)
        code, _, _ = d.http("POST", "/pub?topic=full", body=body)
        assert code == 500
        # The disk grows again: publishing works and the daemon is healthy.
        subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_fs)], check=True)
        p = d.raw()
        p.pub("full", b"after")
        assert d.http("GET", "/ping")[:2] == (200, b"OK")
        got = {m[3] for m in drain(d, "full", "c", expect=len(acked) + 1)}
        assert {body + b"%04d" % i for i in acked} <= got
        assert b"after" in got
        assert len(acked) > 50
    finally:
        assert d.stop() == 0


def test_paused_state_survives_restart(tmp_path):
    data = tmp_path / "p"
    d = Daemon([], data)
    d.http("POST", "/topic/create?topic=pz")
    d.http("POST", "/channel/create?topic=pz&channel=c1")
    d.http("POST", "/channel/create?topic=pz&channel=c2")
    assert d.http("POST", "/channel/pause?topic=pz&channel=c2")[0] == 200
    assert d.http("POST", "/topic/pause?topic=pz")[0] == 200
    meta = json.loads((data / "nsqd.dat").read_text())
    assert meta["topics"][0]["paused"] is True  # written at once, not only at exit
    assert d.stop() == 0
    d2 = Daemon([], data)
    try:
        t = d2.stats(topic="pz")["topics"][0]
        assert t["paused"] is True
        assert {c["channel_name"]: c["paused"] for c in t["channels"]} == {"c1": False, "c2": True}
    finally:
        assert d2.stop() == 0
