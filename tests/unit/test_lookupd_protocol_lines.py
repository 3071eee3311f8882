"""nsqpy.lookupd.protocol_v1 in process: remembered REGISTER lines and the lines logged per
registration, as nsqlookupd 1.3 logs them (lookup_protocol_v1.go: one "DB: client(..) REGISTER"
line per registration a REGISTER adds; at a connection's end "PROTOCOL(V1): [..] exiting
ioloop", then one "DB: client(..) UNREGISTER" line per registration the peer leaves)."""

from __future__ import annotations

import asyncio
import json
import logging
import struct

import pytest

from nsqpy.lookupd import protocol_v1
from nsqpy.lookupd.nsqlookupd import NSQLookupd
from nsqpy.lookupd.options import LookupdOptions
from nsqpy.lookupd.protocol_v1 import LookupProtocolV1

OK = b"\x00\x00\x00\x02OK"


class FakeTransport:
    """What LookupProtocolV1 uses of a transport; ``data`` is everything written."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.data = b""
        self.closed = False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", self.port) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def connect(
    lk: NSQLookupd, port: int, identify: bool = True
) -> tuple[LookupProtocolV1, FakeTransport]:
    proto = LookupProtocolV1(lk)
    tr = FakeTransport(port)
    proto.connection_made(tr)  # type: ignore[arg-type]
    proto.data_received(b"  V1")
    if identify:
        body = json.dumps(
            {"broadcast_address": "n", "tcp_port": port, "http_port": port + 1, "version": "1.3.0"}
        ).encode()
        proto.data_received(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        tr.data = b""  # IDENTIFY's answer
    return proto, tr


@pytest.fixture
def lk() -> NSQLookupd:
    protocol_v1._PARSED.clear()
    return NSQLookupd(LookupdOptions())


def test_lookupd_remembered_line_still_needs_identify(lk: NSQLookupd) -> None:
    a, ta = connect(lk, 1000)
    a.data_received(b"REGISTER t c\nREGISTER t c\n")
    assert ta.data == OK * 2
    assert b"REGISTER t c" in protocol_v1._PARSED
    b, tb = connect(lk, 2000, identify=False)
    b.data_received(b"REGISTER t c\n")
    err = b"E_INVALID client must IDENTIFY"
    assert tb.data == struct.pack(">i", len(err)) + err
    assert tb.closed
    c, tc = connect(lk, 3000)
    c.data_received(b"REGISTER t c\nUNREGISTER t c\nUNREGISTER t c\n")
    assert tc.data == OK * 3
    assert [p.peer_info.tcp_port for p in lk.db.find_producers("channel", "t", "c")] == [1000]
    assert [p.peer_info.tcp_port for p in lk.db.find_producers("topic", "t", "")] == [1000, 3000]


def test_lookupd_remembered_lines_are_bounded(lk: NSQLookupd, monkeypatch) -> None:
    monkeypatch.setattr(protocol_v1, "MAX_PARSED_LINES", 3)
    a, ta = connect(lk, 1000)
    a.data_received(b"".join(b"REGISTER t%d\n" % i for i in range(7)))
    assert ta.data == OK * 7
    assert 1 <= len(protocol_v1._PARSED) <= 3
    a.data_received(b"REGISTER bad!name\n")  # never remembered
    assert b"REGISTER bad!name" not in protocol_v1._PARSED
    assert ta.closed


def test_lookupd_logs_one_line_per_registration_as_go(lk: NSQLookupd, caplog) -> None:
    caplog.set_level(logging.INFO, logger="nsqpy")
    a, ta = connect(lk, 1000)
    caplog.clear()
    a.data_received(b"REGISTER t c\nREGISTER t c\nREGISTER t\nREGISTER u\n")
    assert ta.data == OK * 4
    me = "127.0.0.1:1000"
    assert caplog.messages == [
        f"DB: client({me}) REGISTER category:channel key:t subkey:c",
        f"DB: client({me}) REGISTER category:topic key:t subkey:",
        f"DB: client({me}) REGISTER category:topic key:u subkey:",
    ]
    assert all(r.levelno == logging.INFO and r.name == "nsqpy" for r in caplog.records)
    caplog.clear()
    a.close()
    assert caplog.messages == [
        f"PROTOCOL(V1): [{me}] exiting ioloop",
        f"DB: client({me}) UNREGISTER category:client key: subkey:",
        f"DB: client({me}) UNREGISTER category:channel key:t subkey:c",
        f"DB: client({me}) UNREGISTER category:topic key:t subkey:",
        f"DB: client({me}) UNREGISTER category:topic key:u subkey:",
    ]
    assert lk.db.find_producers("topic", "*", "") == []
    caplog.clear()
    a.connection_lost(None)  # the end is handled once
    assert caplog.messages == []


def test_lookupd_register_lines_off_below_info(lk: NSQLookupd, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="nsqpy")
    a, ta = connect(lk, 1000)
    a.data_received(b"REGISTER t c\n")
    a.close()
    assert caplog.messages == []
    assert lk.db.topics() == ["t"]


def test_lookupd_remembered_run_keeps_reply_order(lk: NSQLookupd) -> None:
    a, ta = connect(lk, 1000)
    a.data_received(b"REGISTER t c\nREGISTER u\n")  # now remembered
    b, tb = connect(lk, 2000)
    tb.data = b""
    b.data_received(b"REGISTER t c\nREGISTER u\nPING\nREGISTER u\nREGISTER t  c\nREGISTER t!\n")
    err = b"E_BAD_TOPIC REGISTER topic name 't!' is not valid"
    assert tb.data == OK * 5 + struct.pack(">i", len(err)) + err
    assert tb.closed
    # b's registrations were made, then left at its close
    assert [p.peer_info.tcp_port for p in lk.db.find_producers("topic", "u", "")] == [1000]


def test_lookupd_lines_through_the_daemons_handler(lk: NSQLookupd, monkeypatch) -> None:
    """With the daemons' own handler (lg's text line), a burst of registration lines is
    written straight into its pass buffer: the same lines, in order with the other records."""
    import io
    import re

    from nsqpy.internal import lg

    stream = io.StringIO()
    handler = lg.PassBufferedHandler(stream)
    handler.setFormatter(lg.NsqLogFormatter("[nsqlookupd] "))
    logger = logging.getLogger("nsqpy")
    emitted: list[int] = []
    real = handler.emit_messages

    def counting(levelno: int, messages: list[str]) -> bool:
        done = real(levelno, messages)
        emitted.append(len(messages) if done else 0)
        return done

    monkeypatch.setattr(handler, "emit_messages", counting)

    async def run() -> None:
        a, ta = connect(lk, 1000)
        a.data_received(b"REGISTER t c\nREGISTER t\nREGISTER u\n")
        b, tb = connect(lk, 2000)
        # remembered lines, with an UNREGISTER between them (its line keeps its place)
        b.data_received(b"REGISTER t c\nUNREGISTER t c\nREGISTER u\n")
        assert tb.data == OK * 3
        a.close()
        await asyncio.sleep(0)  # the end of the pass writes the buffered lines

    saved = logger.handlers, logger.propagate, logger.level
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    try:
        asyncio.run(run())
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
    stamp = r"\[nsqlookupd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} "
    lines = stream.getvalue().splitlines()
    assert lines
    assert all(re.match(stamp, line) for line in lines), lines
    a, b = "127.0.0.1:1000", "127.0.0.1:2000"
    assert [re.sub(stamp, "", line) for line in lines if "DB: " in line or "PROTOCOL" in line] == [
        f"INFO: DB: client({a}) REGISTER category:client key: subkey:",
        f"INFO: DB: client({a}) REGISTER category:channel key:t subkey:c",
        f"INFO: DB: client({a}) REGISTER category:topic key:t subkey:",
        f"INFO: DB: client({a}) REGISTER category:topic key:u subkey:",
        f"INFO: DB: client({b}) REGISTER category:client key: subkey:",
        f"INFO: DB: client({b}) REGISTER category:channel key:t subkey:c",
        f"INFO: DB: client({b}) REGISTER category:topic key:t subkey:",
        f"INFO: DB: client({b}) UNREGISTER category:channel key:t subkey:c",
        f"INFO: DB: client({b}) REGISTER category:topic key:u subkey:",
        f"INFO: PROTOCOL(V1): [{a}] exiting ioloop",
        f"INFO: DB: client({a}) UNREGISTER category:client key: subkey:",
        f"INFO: DB: client({a}) UNREGISTER category:channel key:t subkey:c",
        f"INFO: DB: client({a}) UNREGISTER category:topic key:t subkey:",
        f"INFO: DB: client({a}) UNREGISTER category:topic key:u subkey:",
    ]
    assert sum(emitted) >= 10  # the registration lines took the buffer's direct way
    assert 0 not in emitted


def test_lookupd_remembered_run_longer_than_its_window(lk: NSQLookupd) -> None:
    """A run of remembered lines longer than one look-ahead window, and lines split between
    reads: every line answered once, in order, every registration made."""
    lines = [b"REGISTER topic%05d c%d\n" % (i // 2, i % 2) for i in range(6000)]
    block = b"".join(lines)
    assert len(block) > 2 * protocol_v1._RUN_WINDOW

    async def run() -> tuple[LookupProtocolV1, FakeTransport, FakeTransport]:
        # (a connection spends COMMANDS_PER_TURN a turn, then goes on in the loop's next one)
        a, ta = connect(lk, 1000)
        a.data_received(block)  # parsed one by one, then remembered
        b, tb = connect(lk, 2000)
        b.data_received(block[:1001])
        b.data_received(block[1001:])
        for _ in range(1000):
            if not (a.gate.bits or b.gate.bits):
                break
            await asyncio.sleep(0)
        return b, ta, tb

    b, ta, tb = asyncio.run(run())
    assert ta.data == tb.data == OK * 6000
    assert not tb.closed
    assert lk.db.find_registrations("channel", "topic02999", "*") == [
        ("channel", "topic02999", "c0"),
        ("channel", "topic02999", "c1"),
    ]
    assert len(lk.db.lookup_registrations(b.peer.id if b.peer else "")) == 6000 + 3000 + 1
