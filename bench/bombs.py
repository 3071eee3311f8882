"""bombs: what hostile or broken clients cost everyone else.

Strategy: one daemon (nsqpy-d, or Go nsqd with --nsqd-cmd) on loopback; an attacker process
(its own asyncio loop, so the bench's own threads stay free) keeps --conns connections busy for
--runfor seconds, each reconnecting as soon as the daemon drops it. Meanwhile a polite client (a
thread here) publishes one message every 100 ms and times each OK, and a sampler reads the
daemon's VmRSS every 50 ms. Once the attack ends and its connections are closed the daemon
settles (--settle seconds) and its VmRSS is read again.

Two loads:

- ``bombs`` (default): every connection negotiates deflate or snappy in IDENTIFY and sends a
  stream that inflates about 1000x (deflate; snappy's format tops out near 21x): 64 MiB of
  zeros, an oversized PUB, an MPUB body of zeros at --max-body-size, 64 MiB of NOP lines.
- ``--tls``: every connection says IDENTIFY with tls_v1, completes the TLS handshake, reads
  the OK over TLS and closes, again and again (the daemon gets a throwaway certificate made with
  trustme, so this load needs the test extra).
- ``--mixed``: malformed input of every kind in turn: bad and huge lengths, garbage, over-long
  lines, broken and huge IDENTIFY JSON, lying MPUB counts, bodies cut short by an abrupt close
  (RST), HTTP junk (garbage, huge headers, a /pub body promised and never sent, lying /mpub;
  heads of 40,000 lines, 20,000 cookies, a 100 KB Content-Type, a megabyte target, one over
  net/http's 1 MiB limit; bad methods and targets; 2,000 pipelined requests), and the
  compression bombs above.

Reported: the daemon's VmRSS at start, peak (sampled) and end, the polite client's median,
slowest and count of round trips (and how many waited over 1 s), the machine's load average.
Figures are only comparable within one series on one machine: run Go and nsqpy alternately.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import socket
import statistics
import struct
import threading
import time
import urllib.request
import zlib
from dataclasses import dataclass
from typing import Any, Self

from .target import Target, proc_status_kib

_SIZE = struct.Struct(">I")
_OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
MAGIC = b"  V2"
POLITE_TOPIC = "polite_probe"
BOMB_PLAIN = 64 * 1024 * 1024  # what one deflate bomb inflates to


@dataclass
class BombsConfig:
    conns: int = 20
    runfor: float = 15.0
    settle: float = 3.0
    mixed: bool = False
    tls: bool = False
    seed: int = 18
    max_body_size: int = 5 * 1024 * 1024
    progress: bool = True
    kinds: str = ""  # comma-separated names to play (default: all of the load)


# ---------------------------------------------------------------- payloads


def _identify(**fields: Any) -> bytes:
    body = json.dumps({"feature_negotiation": True, **fields}).encode()
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def _deflate(plain_parts: list[bytes]) -> bytes:
    """A raw deflate stream (as the connection's first compressed bytes) of the parts joined."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    out = [c.compress(p) for p in plain_parts]
    out.append(c.flush(zlib.Z_SYNC_FLUSH))
    return b"".join(out)


def _repeat(unit: bytes, total: int) -> list[bytes]:
    block = unit * (1024 * 1024 // len(unit))
    return [block] * (total // len(block))


def _snappy(plain: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.compress(plain))


def make_bombs(max_body_size: int) -> dict[str, tuple[dict[str, Any], bytes]]:
    """name -> (IDENTIFY fields, compressed bytes sent after IDENTIFY's answer)."""
    zeros = _deflate(_repeat(b"\0" * 1024, BOMB_PLAIN))
    oversized_pub = _deflate([b"PUB bombs\n" + _SIZE.pack(BOMB_PLAIN), *_repeat(b"\0", BOMB_PLAIN)])
    mpub = _deflate(
        [
            b"MPUB bombs\n" + _SIZE.pack(max_body_size),
            *_repeat(b"\x00", max_body_size),
            b"\x00" * (max_body_size % (1024 * 1024)),
        ]
    )
    nops = _deflate(_repeat(b"NOP\n", BOMB_PLAIN))
    snappy_zeros = _snappy(b"\0" * (8 * 1024 * 1024))
    return {
        "deflate-zeros": ({"deflate": True}, zeros),
        "deflate-pub-64MiB": ({"deflate": True}, oversized_pub),
        "deflate-mpub-zeros": ({"deflate": True}, mpub),
        "deflate-nops": ({"deflate": True}, nops),
        "snappy-zeros": ({"snappy": True}, snappy_zeros),
    }


def make_malformed(rng: random.Random, max_body_size: int) -> dict[str, bytes]:
    """name -> bytes sent after the magic on a plain TCP connection."""

    def pub(size: int, body: bytes = b"") -> bytes:
        return b"PUB malformed\n" + _SIZE.pack(size) + body

    def identify_raw(body: bytes) -> bytes:
        return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body

    big = max_body_size - 64
    n_ints = big // 2
    nested = 5000
    one = _SIZE.pack(1) + b"x"
    many = 100_000  # tiny messages, the count 10 more than there are
    mpub_many = _SIZE.pack(many + 10) + one * many
    return {
        "pub-negative-length": pub(0xFFFFFFFF),
        "pub-zero-length": pub(0),
        "pub-huge-length": pub(1 << 30),
        "garbage": rng.randbytes(64 * 1024),
        "long-line": b"PUB " + b"a" * (64 * 1024),
        "identify-broken-json": identify_raw(b'{"client_id": "abc", "heartbeat_interval": '),
        "identify-wrong-types": identify_raw(b'{"heartbeat_interval": "x", "snappy": 3}'),
        "identify-huge-string": identify_raw(b'{"client_id":"' + b"a" * big + b'"}'),
        "identify-huge-array": identify_raw(
            b'{"user_agent":"x","junk":[' + b"1," * (n_ints - 20) + b"1]}"
        ),
        "identify-deep-nesting": identify_raw(b"[" * nested + b"]" * nested),
        "mpub-count-too-big": b"MPUB malformed\n" + _SIZE.pack(8) + _SIZE.pack(1 << 30) + one,
        "mpub-count-lies-many": b"MPUB malformed\n" + _SIZE.pack(len(mpub_many)) + mpub_many,
        "mpub-size-lies": b"MPUB malformed\n"
        + _SIZE.pack(4 + 4 + 10)
        + _SIZE.pack(1)
        + _SIZE.pack(1000)
        + b"x" * 10,
        "mpub-body-too-big": b"MPUB malformed\n" + _SIZE.pack(max_body_size + 1),
        "cut-short": pub(1000, b"x" * 10),  # then an abrupt close (RST)
    }


def make_http_junk(rng: random.Random, max_body_size: int) -> dict[str, bytes]:
    """name -> raw bytes sent to the HTTP port."""
    one = _SIZE.pack(1) + b"x"
    lying = _SIZE.pack(100000) + one * 10
    return {
        "http-garbage": rng.randbytes(16 * 1024),
        "http-huge-header": b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Junk: "
        + b"a" * (1024 * 1024)
        + b"\r\n\r\n",
        "http-body-promised": b"POST /pub?topic=malformed HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 100000000\r\n\r\n" + b"x" * 1000,
        "http-mpub-lies": b"POST /mpub?topic=malformed&binary=true HTTP/1.1\r\nHost: x\r\n"
        + f"Content-Length: {len(lying)}\r\n\r\n".encode()
        + lying,
        "http-bad-chunked": b"POST /pub?topic=malformed HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nzzzz\r\n" + b"y" * 1000,
        # valid heads a parser must not take in one gulp, each with "Connection: close"
        "http-many-headers": b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(40_000))
        + b"\r\n",
        "http-huge-content-type": b"POST /pub?topic=malformed HTTP/1.1\r\nHost: x\r\n"
        b"Connection: close\r\nContent-Length: 1\r\nContent-Type: " + b"t" * 100_000 + b"\r\n\r\nx",
        "http-many-cookies": b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: "
        + b"; ".join(b"c%d=v%d" % (i, i) for i in range(20_000))
        + b"\r\n\r\n",
        "http-huge-path": b"GET /" + b"a%41" * (256 * 1024) + b" HTTP/1.1\r\nHost: x\r\n"
        b"Connection: close\r\n\r\n",
        "http-over-limit": b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Junk: "
        + b"a" * (2 << 20)
        + b"\r\n\r\n",
        "http-bad-method": b"G(T /ping HTTP/1.1\r\nHost: x\r\n\r\n",
        "http-garbage-target": b"GET "
        + bytes(rng.randrange(0x21, 0x7F) for _ in range(64 * 1024))
        + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "http-pipelined": b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
        + b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    }


# ---------------------------------------------------------------- the attacker process


async def _drain_until_closed(reader: asyncio.StreamReader, timeout: float) -> None:
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except (TimeoutError, OSError):
        pass


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = _SIZE.unpack(await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def _bomb_once(
    addr: tuple[str, int], identify: dict[str, Any], payload: bytes, deadline: float
) -> None:
    reader, writer = await asyncio.open_connection(*addr)
    try:
        writer.write(MAGIC + _identify(**identify))
        await asyncio.wait_for(_read_frame(reader), 10)  # IDENTIFY's JSON, plain
        writer.write(payload)
        await asyncio.wait_for(writer.drain(), max(0.1, deadline - time.monotonic()))
        await _drain_until_closed(reader, max(0.1, deadline - time.monotonic()))
    finally:
        writer.transport.abort()


async def _send_once(
    addr: tuple[str, int], payload: bytes, abort: bool, deadline: float, magic: bytes = MAGIC
) -> None:
    reader, writer = await asyncio.open_connection(*addr)
    try:
        writer.write(magic + payload)
        await asyncio.wait_for(writer.drain(), max(0.1, deadline - time.monotonic()))
        if abort:
            return
        await _drain_until_closed(reader, min(2.0, max(0.1, deadline - time.monotonic())))
    finally:
        if abort:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


async def _tls_once(addr: tuple[str, int], ctx: Any) -> None:
    """One TLS upgrade: IDENTIFY tls_v1, the handshake, the OK frame over TLS, an abrupt close."""
    reader, writer = await asyncio.open_connection(*addr)
    try:
        writer.write(MAGIC + _identify(tls_v1=True))
        await asyncio.wait_for(_read_frame(reader), 10)  # IDENTIFY's JSON, plain
        await asyncio.wait_for(writer.start_tls(ctx), 10)
        await asyncio.wait_for(_read_frame(reader), 10)  # OK, over TLS
    finally:
        writer.transport.abort()


def tls_files(folder: str) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 and its key, written into ``folder`` (trustme):
    (cert path, key path)."""
    import trustme

    cert = trustme.CA().issue_cert("127.0.0.1")
    cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    cert.cert_chain_pems[0].write_to_path(cert_path)
    cert.private_key_pem.write_to_path(key_path)
    return cert_path, key_path


def _attack(tcp: tuple[str, int], http: tuple[str, int], cfg: BombsConfig, out: Any) -> None:
    """The attacker process: cfg.conns loops until cfg.runfor has passed; puts its counts."""
    rng = random.Random(cfg.seed)
    bombs = make_bombs(cfg.max_body_size)
    plays: list[tuple[str, Any]] = [(k, ("bomb", *v)) for k, v in bombs.items()]
    if cfg.mixed:
        plays = [(k, ("tcp", v)) for k, v in make_malformed(rng, cfg.max_body_size).items()]
        plays += [(k, ("http", v)) for k, v in make_http_junk(rng, cfg.max_body_size).items()]
        plays += [(k, ("bomb", *v)) for k, v in bombs.items()]
    if cfg.tls:
        plays = [("tls-handshake", ("tls",))]
    if cfg.kinds:
        wanted = set(cfg.kinds.split(","))
        plays = [p for p in plays if p[0] in wanted]
    counts: dict[str, int] = {k: 0 for k, _ in plays}
    errors = 0

    import ssl

    tls_ctx = ssl.create_default_context()
    tls_ctx.check_hostname = False
    tls_ctx.verify_mode = ssl.CERT_NONE  # the load is the handshake, not the trust

    async def worker(i: int) -> None:
        nonlocal errors
        wrng = random.Random(cfg.seed * 1000 + i)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            name, play = plays[i % len(plays)] if not cfg.mixed else wrng.choice(plays)
            try:
                async with asyncio.timeout(left):
                    if play[0] == "bomb":
                        await _bomb_once(tcp, play[1], play[2], deadline)
                    elif play[0] == "tls":
                        await _tls_once(tcp, tls_ctx)
                    elif play[0] == "tcp":
                        await _send_once(tcp, play[1], name == "cut-short", deadline)
                    else:
                        await _send_once(http, play[1], False, deadline, magic=b"")
                counts[name] += 1
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                errors += 1
                await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.gather(*(worker(i) for i in range(cfg.conns)))

    out.put("ready")
    deadline = time.monotonic() + cfg.runfor
    asyncio.run(main())
    out.put({"counts": counts, "errors": errors})


# ---------------------------------------------------------------- the bystander and sampler


class _Background:
    """A daemon thread running ``_run`` inside ``with``: leaving sets ``_stop`` and waits up to
    ``join_s`` seconds for the thread."""

    join_s = 5.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(self.join_s)

    def _run(self) -> None:
        raise NotImplementedError


class Polite(_Background):
    """A PUB every 100 ms on one connection, each OK timed (seconds)."""

    join_s = 15.0

    def __init__(self, target: Target) -> None:
        self.rtts: list[float] = []
        self.lost = False
        self._target = target
        super().__init__()

    def _run(self) -> None:
        cmd = b"PUB " + POLITE_TOPIC.encode() + b"\n" + _SIZE.pack(5) + b"hello"
        try:
            s = socket.create_connection(self._target.tcp, timeout=10)
        except OSError:
            self.lost = True
            return
        with s:
            s.sendall(MAGIC)
            while not self._stop.wait(0.1):
                t0 = time.perf_counter()
                try:
                    s.sendall(cmd)
                    got = b""
                    while len(got) < len(_OK):
                        chunk = s.recv(len(_OK) - len(got))
                        if not chunk:
                            raise OSError("closed")
                        got += chunk
                except OSError:
                    self.rtts.append(10.0)
                    self.lost = True
                    return
                self.rtts.append(time.perf_counter() - t0)


class RssSampler(_Background):
    """VmRSS of ``pid`` every 50 ms while running (KiB)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        super().__init__()

    def _run(self) -> None:
        while True:
            try:
                self.peak = max(self.peak, proc_status_kib(self.pid, "VmRSS"))
            except (OSError, RuntimeError):
                return
            if self._stop.wait(0.05):
                return


def run_bombs(target: Target, cfg: BombsConfig) -> dict[str, Any]:
    pid = target.pid
    if pid is None:
        raise RuntimeError("bombs: cannot find the daemon's process id (give --nsqd-pid)")
    target.post("/topic/create", topic=POLITE_TOPIC)
    time.sleep(1.0)  # the daemon's start-up settling (nsqpy freezes start-up objects at 0.5 s)
    rss0 = proc_status_kib(pid, "VmRSS")
    load0 = os.getloadavg()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_attack, args=(target.tcp, target.http, cfg, q), daemon=True)
    proc.start()
    q.get(timeout=120)  # payloads built
    with RssSampler(pid) as sampler, Polite(target) as polite:
        t0 = time.monotonic()
        result = q.get(timeout=cfg.runfor + 60)
        attack_s = time.monotonic() - t0
        proc.join(10)
        time.sleep(cfg.settle)
    rss1 = proc_status_kib(pid, "VmRSS")
    load1 = os.getloadavg()
    gc_pause_ms = _gc_pause_ms(target)
    rtts = sorted(polite.rtts)
    kind = "tls" if cfg.tls else "mixed" if cfg.mixed else "bombs"
    r = {
        "mode": kind,
        "conns": cfg.conns,
        "attack_s": attack_s,
        "rss_start_mib": rss0 / 1024,
        "rss_peak_mib": max(sampler.peak, rss0) / 1024,
        "rss_end_mib": rss1 / 1024,
        "polite_median_ms": statistics.median(rtts) * 1e3 if rtts else None,
        "polite_max_ms": rtts[-1] * 1e3 if rtts else None,
        "polite_count": len(rtts),
        "polite_over_1s": sum(1 for x in rtts if x > 1.0),
        "polite_lost": polite.lost,
        "load_before": load0,
        "load_after": load1,
        "gc_pause_max_ms": gc_pause_ms,
        **result,
    }
    if cfg.progress:
        print(summary_line(r), flush=True)
    return r


def _gc_pause_ms(target: Target) -> float | None:
    """The daemon's longest recent collector pause (/stats memory gc_pause_usec_100, in ms),
    None when it reports 0 (nsqpy-d did before it timed its collections) or cannot be asked."""
    url = f"http://{target.http[0]}:{target.http[1]}/stats?format=json&include_mem=true"
    try:
        with urllib.request.urlopen(url, timeout=10) as f:
            usec = json.load(f).get("memory", {}).get("gc_pause_usec_100")
    except (OSError, ValueError):
        return None
    return usec / 1000 if usec else None


def summary_line(r: dict[str, Any]) -> str:
    med = r["polite_median_ms"]
    mx = r["polite_max_ms"]
    return (
        f"[{r['mode']}] {r['conns']} conns {r['attack_s']:.1f}s: VmRSS start "
        f"{r['rss_start_mib']:.0f} MiB, peak {r['rss_peak_mib']:.0f}, end {r['rss_end_mib']:.0f}"
        f" - polite PUB median {med if med is None else round(med, 2)} ms, slowest "
        f"{mx if mx is None else round(mx, 1)} ms ({r['polite_count']} round trips, "
        f"{r['polite_over_1s']} over 1 s{', LOST' if r['polite_lost'] else ''}) - "
        f"{sum(r['counts'].values())} attacks, {r['errors']} errors - load "
        f"{r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}"
        + (f" - longest GC pause {r['gc_pause_max_ms']:.1f} ms" if r.get("gc_pause_max_ms") else "")
    )


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| daemon | mode | RSS start MiB | peak MiB | end MiB | polite median ms | "
        "polite slowest ms | round trips | attacks |\n|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.get('daemon', '?')} | {r['mode']} | {r['rss_start_mib']:.0f} | "
            f"{r['rss_peak_mib']:.0f} | {r['rss_end_mib']:.0f} | {r['polite_median_ms']:.2f} | "
            f"{r['polite_max_ms']:.1f} | {r['polite_count']} | {sum(r['counts'].values())} |"
        )
    return "\n".join(lines)
