"""snappy and deflate negotiated in IDENTIFY, as nsqd 1.3: the IDENTIFY reply in plain text, then
an OK frame compressed, then both directions compressed (snappy: the framed stream format;
deflate: raw deflate, flushed so every write decodes at once); --snappy/--deflate=false turn them
off, deflate_level is capped by --max-deflate-level. Also the codec units and the real pynsq and
gnsq clients without TLS.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import cramjam
import pytest
from support.daemons import ROOT

from nsqpy import wire
from nsqpy.compression import (
    SNAPPY_STREAM_HEADER,
    CompressionError,
    DeflateCodec,
    SnappyCodec,
)
from nsqpy.testing import wait_for

OK_FRAME = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


# ------------------------------------------------------------------ client-side codecs


class SnappyPeer:
    """The client side of framed snappy (as python-snappy/golang snappy)."""

    def __init__(self) -> None:
        self.inbuf = b""
        self.sent_header = False

    def encode(self, data: bytes) -> bytes:
        framed = bytes(cramjam.snappy.compress(data))
        if self.sent_header:
            return framed[len(SNAPPY_STREAM_HEADER) :]
        self.sent_header = True
        return framed

    def decode(self, data: bytes) -> bytes:
        self.inbuf += data
        buf, out, pos = self.inbuf, b"", 0
        while len(buf) - pos >= 4:
            n = int.from_bytes(buf[pos + 1 : pos + 4], "little")
            if len(buf) - pos - 4 < n:
                break
            pos += 4 + n
        whole, self.inbuf = buf[:pos], buf[pos:]
        if whole:
            if not whole.startswith(SNAPPY_STREAM_HEADER):
                whole = SNAPPY_STREAM_HEADER + whole
            out = bytes(cramjam.snappy.decompress(whole))
        return out


class DeflatePeer:
    def __init__(self, level: int = 6) -> None:
        self.c = zlib.compressobj(level, zlib.DEFLATED, -15)
        self.d = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self.c.compress(data) + self.c.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        return self.d.decompress(data)


class CompressedClient:
    """Raw V2 client: IDENTIFY with snappy or deflate, then speaks through the peer codec."""

    def __init__(self, port: int, codec: str, extra: bytes = b"", **identify: object) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        body = {"feature_negotiation": True, codec: True, **identify}
        self.peer: SnappyPeer | DeflatePeer = (
            SnappyPeer()
            if codec == "snappy"
            else DeflatePeer(int(identify.get("deflate_level", 6)))
        )
        ident = wire.encode_command(b"IDENTIFY", body=json.dumps(body).encode())
        self.sock.sendall(wire.MAGIC_V2 + ident + (self.peer.encode(extra) if extra else b""))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            buf += self.sock.recv(65536)
        size = int.from_bytes(buf[:4], "big")
        assert buf[4:8] == b"\x00\x00\x00\x00", buf
        self.identify = json.loads(buf[8 : 4 + size])
        self.rest = buf[4 + size :]  # compressed bytes already read
        self.reader = wire.FrameReader()
        self.pending: list = []
        self.raw_seen = b""

    def frame(self, timeout: float = 5):
        deadline = time.monotonic() + timeout
        while not self.pending:
            if self.rest:
                data, self.rest = self.rest, b""
            else:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed by server")
            self.raw_seen += data
            self.pending.extend(self.reader.feed(self.peer.decode(data)))
        return self.pending.pop(0)

    def non_heartbeat(self):
        while True:
            f = self.frame()
            if f != (0, b"_heartbeat_"):
                return f

    def cmd(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.sock.sendall(self.peer.encode(wire.encode_command(name, *params, body=body)))

    def close(self) -> None:
        self.sock.close()


# ------------------------------------------------------------------ codec units


def test_snappy_codec_roundtrip_any_split():
    server, client = SnappyCodec(), SnappyPeer()
    payload = b"".join(b"message %d " % i + b"z" * (i % 700) for i in range(2000))  # > 64 KiB
    stream = client.encode(payload[:100]) + client.encode(payload[100:])
    got = b""
    for i in range(0, len(stream), 977):
        got += server.decompress(stream[i : i + 977])
    assert got == payload
    out = server.compress(payload) + server.compress(b"tail")
    assert out.startswith(SNAPPY_STREAM_HEADER)
    assert out.count(SNAPPY_STREAM_HEADER) == 1  # the header goes out once
    assert client.decode(out) == payload + b"tail"


def test_snappy_codec_rejects_garbage():
    with pytest.raises(CompressionError):
        SnappyCodec().decompress(b"\x05\x03\x00\x00abc")
    bad = bytearray(SnappyPeer().encode(b"hello world" * 10))
    bad[-1] ^= 0xFF
    with pytest.raises(CompressionError):
        SnappyCodec().decompress(bytes(bad))


def test_deflate_codec_sync_flush():
    server, client = DeflateCodec(6), DeflatePeer()
    a = server.compress(b"first frame")
    assert client.decode(a) == b"first frame"  # decodable at once: Z_SYNC_FLUSH
    assert a.endswith(b"\x00\x00\xff\xff")
    b = server.compress(b"second" * 1000)
    assert client.decode(b) == b"second" * 1000
    assert server.decompress(client.encode(b"x" * 10)) == b"x" * 10
    with pytest.raises(CompressionError):
        DeflateCodec(1).decompress(b"\xff\xff\xff\xff")


# ------------------------------------------------------------------ on the wire


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_upgrade_sequence_and_traffic(nsqd, codec):
    c = CompressedClient(nsqd.tcp_port, codec)
    assert c.identify[codec] is True
    assert c.identify["tls_v1"] is False
    # the next bytes are the OK, compressed
    assert c.frame() == (wire.FRAME_TYPE_RESPONSE, b"OK")
    assert not c.raw_seen.startswith(OK_FRAME)
    if codec == "snappy":
        # stream header, then one chunk (10 bytes this small: "uncompressed", type 0x01, as
        # golang/snappy writes when compression would not pay) with its masked CRC-32C
        assert c.raw_seen.startswith(SNAPPY_STREAM_HEADER + b"\x01\x0e\x00\x00")
    else:
        assert OK_FRAME not in c.raw_seen
    body = b"compressible " * 2000
    c.cmd(b"PUB", b"ct", body=body)
    assert c.non_heartbeat() == (0, b"OK")
    c.sock.sendall(c.peer.encode(wire.encode_mpub(b"ct", [b"a", b"b"])))
    assert c.non_heartbeat() == (0, b"OK")
    c.cmd(b"SUB", b"ct", b"ch")
    assert c.non_heartbeat() == (0, b"OK")
    c.cmd(b"RDY", b"10")
    bodies = []
    for _ in range(3):
        ftype, data = c.non_heartbeat()
        assert ftype == wire.FRAME_TYPE_MESSAGE
        _, _, mid, b = wire.decode_message(data)
        bodies.append(b)
        c.cmd(b"FIN", mid)
    assert bodies == [body, b"a", b"b"]
    st = nsqd.stats(include_clients="true")
    (client,) = st["topics"][0]["channels"][0]["clients"]
    assert client[codec] is True
    assert client["snappy" if codec == "deflate" else "deflate"] is False
    c.close()


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_bytes_behind_identify_not_lost(nsqd, codec):
    """A compressed PUB sent in the same write as IDENTIFY is read through the codec."""
    pub = wire.encode_command(b"PUB", b"early", body=b"hello")
    c = CompressedClient(nsqd.tcp_port, codec, extra=pub)
    assert c.frame() == (0, b"OK")  # the upgrade's OK
    assert c.non_heartbeat() == (0, b"OK")  # the PUB's OK
    wait_for(lambda: nsqd.stats(topic="early")["topics"], what="topic")
    c.close()


def test_deflate_level_capped(daemon_factory):
    d = daemon_factory("--max-deflate-level=3")
    c = CompressedClient(d.tcp_port, "deflate", deflate_level=9)
    assert c.identify["deflate_level"] == 3
    assert c.identify["max_deflate_level"] == 3
    assert c.frame() == (0, b"OK")
    wait_for(lambda: "upgrading connection to deflate (level 3)" in d.log_text(), what="log")
    c.close()


def test_both_codecs_refused(nsqd):
    r = nsqd.raw()
    r.cmd(
        b"IDENTIFY",
        body=json.dumps({"feature_negotiation": True, "snappy": True, "deflate": True}).encode(),
    )
    assert r.read_frame() == (
        wire.FRAME_TYPE_ERROR,
        b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
    )
    assert r.closed_by_server()


@pytest.mark.parametrize("flag,codec", [("--snappy=false", "snappy"), ("--no-deflate", "deflate")])
def test_codec_disabled_by_flag(daemon_factory, flag, codec):
    d = daemon_factory(flag)
    r = d.raw()
    data = r.identify(feature_negotiation=True, **{codec: True})
    assert json.loads(data)[codec] is False
    r.pub("t", b"plain")  # still plain
    r.close()


def test_corrupt_stream_closes(nsqd):
    c = CompressedClient(nsqd.tcp_port, "snappy")
    assert c.frame() == (0, b"OK")
    c.sock.sendall(b"\x00\x10\x00\x00" + b"\x01" * 16)  # bad CRC / data
    with pytest.raises((ConnectionError, OSError)):
        for _ in range(10):
            c.frame(timeout=3)
    wait_for(lambda: "failed to read command" in nsqd.log_text(), what="log")


# ------------------------------------------------------------------ real clients, no TLS

PYNSQ = r"""
import json, sys, logging
import nsq, tornado.ioloop
logging.basicConfig(level=logging.WARNING)
tcp, codec, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
loop = tornado.ioloop.IOLoop.current()
got = []
def handler(msg):
    got.append(bytes(msg.body))
    if len(got) >= count:
        loop.call_later(0.3, loop.stop)
    return True
reader = nsq.Reader(topic="pc", channel="c", message_handler=handler,
                    nsqd_tcp_addresses=[tcp], max_in_flight=100, **codec)
writer = nsq.Writer([tcp], **codec)
state = {"i": 0}
def pub(conn=None, data=None):
    if not writer.conns:
        loop.call_later(0.05, pub); return
    i = state["i"]
    if i >= count:
        return
    n = min(count, i + 50)
    state["i"] = n
    writer.mpub("pc", [b"%d-" % j + b"q" * (j % 2000) for j in range(i, n)], callback=pub)
loop.call_later(0.3, pub)
loop.call_later(40, loop.stop)
loop.start()
ids = sorted(int(b.split(b"-")[0]) for b in got)
print(json.dumps({"received": len(got)}))
sys.exit(0 if ids == list(range(count)) else 1)
"""


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_pynsq_compression_without_tls(nsqd, tmp_path: Path, codec):
    script = tmp_path / "c.py"
    script.write_text(PYNSQ)
    conf = {"snappy": True} if codec == "snappy" else {"deflate": True, "deflate_level": 1}
    p = subprocess.run(
        [sys.executable, str(script), nsqd.tcp_address, json.dumps(conf), "1000"],
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    wait_for(lambda: f"upgrading connection to {codec}" in nsqd.log_text(), what="log")


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_split_writes_and_large_messages(nsqd, codec):
    """Compressed commands arriving a few bytes at a time, and messages far larger than one
    snappy chunk (64 KiB), both ways."""
    c = CompressedClient(nsqd.tcp_port, codec)
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert c.frame() == (0, b"OK")
    stream = c.peer.encode(wire.encode_command(b"PUB", b"big", body=b"small one"))
    for i in range(0, len(stream), 3):
        c.sock.sendall(stream[i : i + 3])
        time.sleep(0.002)
    assert c.non_heartbeat() == (0, b"OK")
    big = bytes(range(256)) * 1200  # 300 KiB, barely compressible
    c.cmd(b"PUB", b"big", body=big)
    assert c.non_heartbeat() == (0, b"OK")
    c.cmd(b"SUB", b"big", b"ch")
    assert c.non_heartbeat() == (0, b"OK")
    c.cmd(b"RDY", b"2")
    got = []
    for _ in range(2):
        ftype, data = c.non_heartbeat()
        assert ftype == wire.FRAME_TYPE_MESSAGE
        got.append(wire.decode_message(data)[3])
    assert got == [b"small one", big]
    c.close()
