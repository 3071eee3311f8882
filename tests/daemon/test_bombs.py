"""Compression bombs cannot exhaust the daemon.

Connections negotiate deflate or snappy in IDENTIFY and send streams that inflate up to 1000x:
64 MiB of zeros (no command line ends), 64 MiB of NOP lines, a PUB declaring 64 MiB, an MPUB
body of zeros at --max-body-size. The daemon inflates in bounded steps as its parser needs
bytes, refuses an oversized frame before inflating the rest (with nsqd's error, compared side by
side with Go nsqd when its binary is there), keeps answering a polite client, and gives the
memory back once the connections close. The daemon's VmRSS is read from /proc.
"""

from __future__ import annotations

import json
import socket
import statistics
import struct
import threading
import time
import zlib
from pathlib import Path

import cramjam
import pytest
from support import gobin

from nsqpy import wire

SIZE = struct.Struct(">I")
PLAIN = 64 * 1024 * 1024
MAX_BODY = 5 * 1024 * 1024


def identify(**fields: object) -> bytes:
    return wire.encode_command(
        b"IDENTIFY", body=json.dumps({"feature_negotiation": True, **fields}).encode()
    )


def deflate(parts: list[bytes]) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join([c.compress(p) for p in parts] + [c.flush(zlib.Z_SYNC_FLUSH)])


def repeat(unit: bytes, total: int) -> list[bytes]:
    block = unit * (1024 * 1024 // len(unit))
    return [block] * (total // len(block))


def bombs() -> list[tuple[dict[str, bool], bytes]]:
    return [
        ({"deflate": True}, deflate(repeat(b"\0" * 1024, PLAIN))),
        ({"deflate": True}, deflate(repeat(b"NOP\n", PLAIN))),
        ({"deflate": True}, deflate([b"PUB bombs\n" + SIZE.pack(PLAIN), *repeat(b"\0", PLAIN)])),
        (
            {"deflate": True},
            deflate([b"MPUB bombs\n" + SIZE.pack(MAX_BODY), *repeat(b"\0", MAX_BODY)]),
        ),
        ({"snappy": True}, bytes(cramjam.snappy.compress(b"\0" * (8 * 1024 * 1024)))),
    ]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def read_frame(sock: socket.socket, buf: bytes = b"") -> tuple[bytes, bytes]:
    """(the next frame's type and data, the bytes read past it)."""
    while len(buf) < 4 or len(buf) < 4 + SIZE.unpack_from(buf)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    end = 4 + SIZE.unpack_from(buf)[0]
    return buf[4:end], buf[end:]


def bomb_once(port: int, fields: dict[str, bool], payload: bytes, stop: threading.Event) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(wire.MAGIC_V2 + identify(**fields))
        read_frame(s)  # IDENTIFY's JSON
        s.settimeout(0.5)
        view = memoryview(payload)
        try:
            while view and not stop.is_set():
                try:
                    n = s.send(view[:65536])
                except TimeoutError:
                    continue
                view = view[n:]
            while not stop.is_set() and s.recv(65536):  # until the daemon closes
                pass
        except (TimeoutError, OSError):
            pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.slow
def test_bombs_bounded_memory_and_polite_client_served(nsqd):
    payloads = bombs()
    pid = nsqd.proc.pid
    polite = socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=10)
    polite.sendall(wire.MAGIC_V2)
    pub = wire.encode_command(b"PUB", b"polite", body=b"hello")

    def round_trip() -> float:
        t0 = time.perf_counter()
        polite.sendall(pub)
        assert read_frame(polite) == (b"\0\0\0\0OK", b"")
        return time.perf_counter() - t0

    round_trip()  # the topic exists before the baseline
    start = rss_mib(pid)
    stop = threading.Event()
    attacks = [0]

    def attacker(i: int) -> None:
        fields, payload = payloads[i % len(payloads)]
        while not stop.is_set():
            try:
                bomb_once(nsqd.tcp_port, fields, payload, stop)
                attacks[0] += 1
            except OSError:
                stop.wait(0.01)

    threads = [threading.Thread(target=attacker, args=(i,), daemon=True) for i in range(20)]
    for t in threads:
        t.start()
    waits, peak = [], start
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        waits.append(round_trip())
        peak = max(peak, rss_mib(pid))
        stop.wait(0.1)
    stop.set()
    for t in threads:
        t.join(10)
    assert attacks[0] >= 20
    assert statistics.median(waits) < 1.0 and max(waits) < 1.0, waits
    assert peak - start < 100, (start, peak)
    # every attacking connection is gone (the polite one stays), then the memory is back
    deadline = time.monotonic() + 10
    while len(nsqd.get_json("/stats?format=json")["producers"]) > 1:
        assert time.monotonic() < deadline, "bomb connections still open"
        time.sleep(0.05)
    end = rss_mib(pid)
    assert end - start < 50, (start, peak, end)
    round_trip()
    polite.close()


def refused(port: int, fields: dict[str, bool], plain: bytes) -> tuple[bytes, bool]:
    """Send ``plain`` compressed after IDENTIFY: the first frame after the upgrade's OK that
    is not OK, and whether the daemon then closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(wire.MAGIC_V2 + identify(**fields))
        _, raw = read_frame(s)
        payload = deflate([plain]) if "deflate" in fields else bytes(cramjam.snappy.compress(plain))
        try:
            s.sendall(payload)
        except OSError:
            pass
        closed = False
        try:
            while chunk := s.recv(65536):
                raw += chunk
            closed = True
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
    if "deflate" in fields:
        text = zlib.decompressobj(-15).decompress(raw)
    else:
        text = bytes(cramjam.snappy.decompress(raw))
    frames = [f for f in wire.FrameReader().feed(text) if f != (wire.FRAME_TYPE_RESPONSE, b"OK")]
    return (frames[0][1] if frames else b""), closed


CASES = [
    ({"deflate": True}, b"PUB t\n" + SIZE.pack(PLAIN) + b"\0" * (4 << 20)),
    ({"snappy": True}, b"PUB t\n" + SIZE.pack(PLAIN) + b"\0" * (4 << 20)),
    ({"deflate": True}, b"MPUB t\n" + SIZE.pack(MAX_BODY + 1) + b"\0" * (4 << 20)),
    ({"deflate": True}, b"MPUB t\n" + SIZE.pack(MAX_BODY) + b"\0" * (4 << 20)),
    ({"deflate": True}, b"MPUB t\n" + SIZE.pack(MAX_BODY) + SIZE.pack(1) + SIZE.pack(PLAIN)),
]


@pytest.mark.parametrize("daemon", ["nsqpy", "go"])
def test_oversized_frames_refused_as_nsqd(daemon_factory, tmp_path: Path, daemon):
    """An oversized frame on a compressed stream: nsqd's error frame (compressed), then the
    close, before the rest of the stream is inflated; the same bytes from Go nsqd."""
    d = gobin.start_go_nsqd(tmp_path / "go") if daemon == "go" else daemon_factory()
    try:
        got = [refused(d.tcp_port, fields, plain) for fields, plain in CASES]
    finally:
        if daemon == "go":
            d.stop()
    assert got == [
        (b"E_BAD_MESSAGE PUB message too big 67108864 > 1048576", True),
        (b"E_BAD_MESSAGE PUB message too big 67108864 > 1048576", True),
        (b"E_BAD_BODY MPUB body too big 5242881 > 5242880", True),
        (b"E_BAD_BODY MPUB invalid message count 0", True),
        (b"E_BAD_MESSAGE MPUB message too big 67108864 > 1048576", True),
    ]


def test_large_identify_decoded_aside(nsqd):
    """An IDENTIFY body over LARGE_IDENTIFY is decoded off the event loop; the connection waits
    for it, then goes on in order: its reply, the upgrade it negotiated, the commands behind it.
    A broken or too deeply nested one gets nsqd's E_BAD_BODY and the close."""
    big = {"feature_negotiation": True, "deflate": True, "client_id": "c" * 200_000}
    body = json.dumps(big).encode()
    with socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=10) as s:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        pub = c.compress(wire.encode_command(b"PUB", b"aside", body=b"hi"))
        s.sendall(wire.MAGIC_V2 + wire.encode_command(b"IDENTIFY", body=body) + pub)
        reply, rest = read_frame(s)
        assert json.loads(reply[4:])["deflate"] is True
        s.sendall(c.flush(zlib.Z_SYNC_FLUSH))
        d = zlib.decompressobj(-15)
        text = d.decompress(rest)
        frames: list = []
        reader = wire.FrameReader()
        frames += reader.feed(text)
        while len(frames) < 2:
            frames += reader.feed(d.decompress(s.recv(65536)))
        assert frames[:2] == [(wire.FRAME_TYPE_RESPONSE, b"OK")] * 2  # upgrade, then PUB
    assert nsqd.get_json("/stats?format=json&topic=aside")["topics"][0]["message_count"] == 1
    for bad in (b'{"client_id": "' + b"x" * 100_000, b"[" * 40_000 + b"]" * 40_000, b"[" * 9000):
        with socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=10) as s:
            s.sendall(wire.MAGIC_V2 + wire.encode_command(b"IDENTIFY", body=bad))
            frame, _ = read_frame(s)
            assert frame == b"\0\0\0\1E_BAD_BODY IDENTIFY failed to decode JSON body"
            assert s.recv(10) == b""
