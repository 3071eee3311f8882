"""nsqd's side of nsqlookupd (nsqpy/lookup_peer.py: LookupPeer) in process, on a virtual clock.

Each test runs one LookupPeer on nsqpy.testing's VirtualTimeLoop: the clock moves only when the
loop is idle, jumping to the next timer, so nsqd's 15 s PING ticker and its 1 s dial and reply
deadlines (nsqd/lookup.go, nsqd/lookup_peer.go) are checked to the millisecond without waiting.
The lookupd is an in-process handler speaking nsqlookupd's side of the V1 protocol (magic,
IDENTIFY answered with its JSON, "OK" for everything else) reached through the loop's
in-process connections: no process, no port. tests/daemon/test_lookup_peer.py checks the
same peer wired into a real nsqpy-d against a recording lookupd and nsqpy-lookupd.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct

import pytest

from nsqpy.lookup_peer import (
    IO_TIMEOUT_S,
    PING_INTERVAL_S,
    LookupPeer,
    register_cmd,
    unregister_cmd,
)
from nsqpy.testing.virtual_time import VirtualTimeLoop, run_virtual

HOST, PORT = "127.0.0.1", 4160
ADDR = f"{HOST}:{PORT}"
_SIZE = struct.Struct(">i")


class FakeLookupd:
    """nsqlookupd's side of the V1 protocol. ``conns`` holds, per accepted connection, the
    commands received as (virtual time, text line); ``closed_at`` the time each connection
    ended; a command named in ``mute`` gets no reply, the first time it comes."""

    def __init__(self, loop: VirtualTimeLoop, identify_reply: bytes | None = None) -> None:
        self.loop = loop
        self.identify_reply = identify_reply or json.dumps(
            {"tcp_port": PORT, "http_port": 4161, "version": "1.3.0",
             "broadcast_address": HOST, "hostname": "fake"}
        ).encode()  # fmt: skip
        self.conns: list[list[tuple[float, str]]] = []
        self.magics: list[bytes] = []
        self.closed_at: list[float] = []
        self.mute: set[str] = set()
        self.writers: list[asyncio.StreamWriter] = []
        self.dropped: set[int] = set()
        loop.serve(HOST, PORT, self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn: list[tuple[float, str]] = []
        idx = len(self.conns)
        self.conns.append(conn)
        self.writers.append(writer)
        try:
            self.magics.append(await reader.readexactly(4))
            while (line := await reader.readline()) and idx not in self.dropped:
                text = line.rstrip(b"\n").decode()
                reply = b"OK"
                if text == "IDENTIFY":
                    (n,) = _SIZE.unpack(await reader.readexactly(4))
                    await reader.readexactly(n)
                    reply = self.identify_reply
                if idx in self.dropped:
                    break
                conn.append((self.loop.time(), text))
                if text in self.mute:
                    self.mute.discard(text)
                else:
                    writer.write(_SIZE.pack(len(reply)) + reply)
            while idx in self.dropped and await reader.read(65536):
                pass  # what a dropped connection still gets goes nowhere
        finally:
            self.closed_at.append(self.loop.time())

    def commands(self, conn: int = -1) -> list[str]:
        return [t for _, t in self.conns[conn]] if self.conns else []

    def times(self, name: str, conn: int = -1) -> list[float]:
        return [round(at, 6) for at, t in self.conns[conn] if t == name]

    def drop(self) -> None:
        """Close every connection as a TCP peer's close looks from the other end: the peer's
        next read finds EOF, its writes still succeed (and are never read)."""
        self.dropped.update(range(len(self.writers)))
        for w in self.writers:
            if not w.is_closing():
                w.write_eof()


class Node:
    """The daemon side the peer reads: topics (name -> channel names) as REGISTER commands."""

    def __init__(self) -> None:
        self.topics: dict[str, list[str]] = {}

    def identity(self) -> dict[str, object]:
        return {"broadcast_address": HOST, "hostname": "node", "http_port": 4151,
                "tcp_port": 4150, "version": "1.3.0"}  # fmt: skip

    def state(self) -> list[bytes]:
        cmds: list[bytes] = []
        for t, chans in self.topics.items():
            cmds.extend([register_cmd(t, c) for c in chans] or [register_cmd(t)])
        return cmds

    def add(self, peer: LookupPeer, topic: str) -> None:
        """A new topic: in the state from now on, and notified (nsqd's Notify)."""
        self.topics[topic] = []
        peer.send(register_cmd(topic))


class TimedLog(logging.Handler):
    """The nsqpy logger's messages with the loop's (virtual) time."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__(logging.DEBUG)
        self.loop = loop
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((round(self.loop.time(), 6), record.getMessage()))

    def find(self, text: str) -> list[float]:
        return [at for at, msg in self.records if text in msg]


@pytest.fixture
def timed_log():
    handlers: list[TimedLog] = []
    logger = logging.getLogger("nsqpy")
    old = logger.level
    logger.setLevel(logging.DEBUG)

    def attach(loop: VirtualTimeLoop) -> TimedLog:
        h = TimedLog(loop)
        logger.addHandler(h)
        handlers.append(h)
        return h

    yield attach
    for h in handlers:
        logger.removeHandler(h)
    logger.setLevel(old)


async def until(t: float) -> None:
    """Let the loop run until virtual time ``t``."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, t - loop.time()))


def new_peer(node: Node) -> LookupPeer:
    peer = LookupPeer(ADDR, 1 << 20, node.identity, node.state)
    peer.start()
    return peer


def test_defaults_are_nsqds() -> None:
    assert (PING_INTERVAL_S, IO_TIMEOUT_S) == (15.0, 1.0)
    p = LookupPeer(ADDR, 1, dict, list)
    assert (p.ping_interval_s, p.io_timeout_s) == (15.0, 1.0)


def test_connects_at_start_then_pings_every_15_s_whatever_is_sent_between() -> None:
    async def main(loop: VirtualTimeLoop) -> FakeLookupd:
        lk, node = FakeLookupd(loop), Node()
        peer = new_peer(node)
        await until(7)
        node.add(peer, "t1")  # a notification does not move the ticker
        await until(46)
        await peer.close()
        return lk

    lk = run_virtual(main)
    assert lk.magics == [b"  V1"]
    assert lk.commands() == ["IDENTIFY", "REGISTER t1", "PING", "PING", "PING"]
    assert lk.times("IDENTIFY") == [0.0]
    assert lk.times("REGISTER t1") == [7.0]
    assert lk.times("PING") == [15.0, 30.0, 45.0]


def test_unanswered_reply_closes_after_1_s_and_the_next_command_reconnects(timed_log) -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[FakeLookupd, TimedLog, LookupPeer]:
        log = timed_log(loop)
        lk, node = FakeLookupd(loop), Node()
        lk.mute.add("REGISTER slow")
        peer = new_peer(node)
        await until(2)
        node.add(peer, "kept")
        await until(5)
        node.add(peer, "slow")  # no reply: the peer gives up at 6.0 and disconnects
        await until(5.999)
        assert peer.connected
        await until(6.001)
        assert not peer.connected
        await until(8)
        node.add(peer, "next")  # reconnects: IDENTIFY, the whole state, then this command
        await until(9)
        await peer.close()
        return lk, log, peer

    lk, log, _ = run_virtual(main)
    assert lk.closed_at[0] == pytest.approx(6.0, abs=1e-3)
    assert log.find("LOOKUPD(127.0.0.1:4160): REGISTER slow - ") == [pytest.approx(6.0, abs=1e-3)]
    assert len(lk.conns) == 2 and lk.magics == [b"  V1", b"  V1"]
    # the state covers every topic: those sent before and the one being sent
    assert lk.commands(1) == [
        "IDENTIFY", "REGISTER kept", "REGISTER slow", "REGISTER next", "REGISTER next"
    ]  # fmt: skip
    assert {round(at) for at, _ in lk.conns[1]} == {8}


def test_dial_gives_up_after_1_s_and_the_command_is_dropped(timed_log) -> None:
    async def main(loop: VirtualTimeLoop) -> TimedLog:
        log = timed_log(loop)
        loop.blackhole(HOST, PORT)
        node = Node()
        peer = new_peer(node)  # the start-up dial also hangs: it ends at 1.0, silently
        await until(3)
        node.add(peer, "t")
        await until(10)
        assert not peer.connected and not peer._queue
        await peer.close()
        return log

    log = run_virtual(main)
    assert log.find("LOOKUP connecting to 127.0.0.1:4160") == [0.0, 3.0]
    errors = log.find("LOOKUPD(127.0.0.1:4160): REGISTER t - dial tcp 127.0.0.1:4160")
    assert errors == [pytest.approx(4.0, abs=1e-3)]


def test_unreachable_lookupd_is_retried_by_the_next_ping_with_the_whole_state(timed_log) -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[FakeLookupd, TimedLog]:
        log = timed_log(loop)
        node = Node()
        peer = new_peer(node)  # nothing listens: refused at once
        await until(1)
        node.add(peer, "early")  # dropped (refused); the state after the reconnect covers it
        await until(2)
        lk = FakeLookupd(loop)  # the lookupd comes up
        await until(16)
        await peer.close()
        return lk, log

    lk, log = run_virtual(main)
    assert log.find("REGISTER early - dial tcp 127.0.0.1:4160") == [1.0]
    assert len(lk.conns) == 1
    assert lk.commands() == ["IDENTIFY", "REGISTER early", "PING"]
    assert {at for at, _ in lk.conns[0]} == {15.0}


def test_dropped_connection_costs_one_command_then_the_state_is_sent_again() -> None:
    async def main(loop: VirtualTimeLoop) -> FakeLookupd:
        lk, node = FakeLookupd(loop), Node()
        node.topics["b"] = ["x", "y"]
        peer = new_peer(node)
        await until(1)
        node.add(peer, "a")
        await until(2)
        lk.drop()
        await until(3)
        node.add(peer, "lost")  # finds the connection gone (EOF on its reply)
        await until(4)
        assert not peer.connected
        node.add(peer, "c")  # reconnects
        await until(5)
        await peer.close()
        return lk

    lk = run_virtual(main)
    assert lk.commands(0) == ["IDENTIFY", "REGISTER b x", "REGISTER b y", "REGISTER a"]
    assert lk.commands(1) == [
        "IDENTIFY", "REGISTER b x", "REGISTER b y", "REGISTER a", "REGISTER lost",
        "REGISTER c", "REGISTER c",
    ]  # fmt: skip


def test_identify_error_disconnects_and_is_logged(timed_log) -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[FakeLookupd, TimedLog, bool]:
        log = timed_log(loop)
        lk = FakeLookupd(loop, identify_reply=b"E_INVALID bad IDENTIFY")
        peer = new_peer(Node())
        await until(1)
        connected = peer.connected
        await peer.close()
        return lk, log, connected

    lk, log, connected = run_virtual(main)
    assert not connected
    assert log.find("lookupd returned E_INVALID bad IDENTIFY") == [0.0]
    assert lk.closed_at == [0.0]


def test_close_is_bounded_with_a_reply_outstanding() -> None:
    async def main(loop: VirtualTimeLoop) -> float:
        lk, node = FakeLookupd(loop), Node()
        lk.mute.add("REGISTER t")
        peer = new_peer(node)
        await until(1)
        node.add(peer, "t")
        t0 = loop.time()
        await peer.close()
        return loop.time() - t0

    assert run_virtual(main) <= 2 * IO_TIMEOUT_S


def test_commands_written_behind_the_lost_one_reconnect_at_once() -> None:
    """Two notifications in a row on a connection the lookupd dropped: the first meets the dead
    connection and is lost; the second goes through a new connection (IDENTIFY, the whole
    state, then itself), as nsqd's lookupLoop sends one command at a time. Not left for the
    next PING, 15 s later."""

    async def main(loop: VirtualTimeLoop) -> FakeLookupd:
        lk, node = FakeLookupd(loop), Node()
        node.topics["t1"] = []
        peer = new_peer(node)
        await until(1)
        lk.drop()
        await until(2)
        node.add(peer, "t4")
        node.add(peer, "t5")  # written behind t4, before t4's reply is found missing
        await until(3)
        await peer.close()
        return lk

    lk = run_virtual(main)
    assert len(lk.conns) == 2
    assert lk.commands(1) == [
        "IDENTIFY", "REGISTER t1", "REGISTER t4", "REGISTER t5", "REGISTER t5"
    ]  # fmt: skip
    assert {at for at, _ in lk.conns[1]} == {2.0}


def _registered(lines: list[str]) -> set[str]:
    """What a lookupd holds after these command lines (REGISTER adds, UNREGISTER removes)."""
    held: set[str] = set()
    for line in lines:
        cmd, _, key = line.partition(" ")
        if cmd == "REGISTER":
            held.add(key)
        elif cmd == "UNREGISTER":
            held.discard(key)
    return held


def test_commands_pending_at_a_reconnect_all_follow_the_state_in_order() -> None:
    """A topic registered and deleted again while the connection was being lost: both
    commands wait behind the lost one, and after the new connection's state (which no longer
    has the topic) both go out, in order, as nsqd sends every command after its
    connectCallback. Dropping the later ones as covered by the state would leave the first
    one's registration behind."""

    async def main(loop: VirtualTimeLoop) -> FakeLookupd:
        lk, node = FakeLookupd(loop), Node()
        node.topics["t1"] = []
        peer = new_peer(node)
        await until(1)
        lk.drop()
        await until(2)
        node.add(peer, "lost")  # meets the dead connection
        node.add(peer, "gone")
        del node.topics["gone"]
        peer.send(unregister_cmd("gone"))
        await until(3)
        await peer.close()
        return lk

    lk = run_virtual(main)
    assert len(lk.conns) == 2
    assert _registered(lk.commands(1)) == {"t1", "lost"}
    assert lk.commands(1)[-2:] == ["REGISTER gone", "UNREGISTER gone"]
