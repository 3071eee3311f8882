"""e2e: publish-to-deliver latency at a fixed rate. One publisher process sends --rate messages a
second (PUB, or MPUBs of --e2e-batch bodies), paced by the clock: message k is due at
start + k/rate, and whatever is due is sent at once, so a late wake-up never lowers the rate.
It does not wait for each OK (it reads them as they come, without blocking), as a producer
with a steady stream would. Each body starts with the 8-byte time.monotonic_ns() taken just
before the send (the clock every process on the machine shares). One subscriber process (SUB,
RDY --rdy, FINs batched per recv) stamps each recv and records deliver - publish per message.
The first --warmup seconds of messages are left out of the percentiles."""

from __future__ import annotations

import socket
import time
from array import array
from dataclasses import dataclass
from typing import Any

from nsqpy import wire

from . import harness, proto
from .target import Target

_BUF_SIZE = 1 << 20
SUB, PUB = 0, 1


@dataclass
class E2EConfig:
    topic: str = "e2e_bench"
    channel: str = "ch"
    size: int = 200
    rate: int = 10_000
    batch: int = 1  # 1: PUB per message; N: MPUB of N bodies
    rdy: int = 2500
    runfor: float = 10.0
    count: int = 10_000_000
    warmup: float = 1.0
    drain: float = 5.0
    output_buffer_timeout: int | None = None  # ms, sent in IDENTIFY when given
    samples: str | None = None  # CSV path: publish time (ms after start), latency (ms)
    progress: bool = True
    name: str = "e2e"


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list (q in [0, 100])."""
    if not sorted_values:
        return 0
    k = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * q // 100) - 1))
    return sorted_values[int(k)]


def _publisher(ctx: harness.ConnContext, addr: tuple[str, int], cfg: E2EConfig) -> dict[str, Any]:
    sock = proto.connect(addr, "e2e-pub")
    try:
        topic = cfg.topic.encode()
        pad = b"x" * max(0, cfg.size - 8)
        pub_prefix = b"PUB " + topic + b"\n" + proto.LEN.pack(8 + len(pad))
        one = proto.LEN.pack(8 + len(pad))

        def mpub(stamp: bytes, k: int) -> bytes:
            body = proto.LEN.pack(k) + (one + stamp + pad) * k
            return wire.encode_command(b"MPUB", topic, body=body)

        limit = min(cfg.count, int(cfg.rate * cfg.runfor))
        batch = max(1, cfg.batch)
        rate = cfg.rate
        # Blocking mode: recv(MSG_DONTWAIT) then returns at once (a socket with a timeout would
        # wait for the timeout instead).
        sock.settimeout(None)
        start_ns = ctx.ready()
        i, counts, stop = ctx.index, ctx.counts, ctx.stop
        sendall = sock.sendall
        monotonic_ns = time.monotonic_ns
        acks = _Acks(sock)
        sent = commands = 0
        last_send_ns = start_ns
        while sent < limit and not stop[i]:
            now = monotonic_ns()
            due = min(limit, (now - start_ns) * rate // 1_000_000_000 + 1)
            n = due - sent
            if batch > 1 and due < limit:
                n -= n % batch
            if n > 0:
                stamp = proto.STAMP.pack(monotonic_ns())
                if batch == 1:
                    sendall((pub_prefix + stamp + pad) * n)
                    commands += n
                else:
                    full, rest = divmod(n, batch)
                    data = mpub(stamp, batch) * full + (mpub(stamp, rest) if rest else b"")
                    sendall(data)
                    commands += full + (1 if rest else 0)
                sent += n
                counts[i] = sent
                last_send_ns = now
            else:
                next_due = start_ns + (sent + batch) * 1_000_000_000 // rate
                wait = (next_due - now) / 1e9
                if wait > 0:
                    time.sleep(min(wait, 0.05))
            acks.poll()
        acks.wait_for(commands, timeout=10)
        return {"sent": sent, "acked_commands": acks.count, "last_send_ns": last_send_ns}
    finally:
        sock.close()


class _Acks:
    """Counts the OK frames coming back to a pipelining publisher, without blocking."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.count = 0

    def poll(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                raise proto.ProtocolError("connection closed by server")
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= 8:
            size, ftype = proto.FRAME_HEADER.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            body = bytes(buf[pos + 8 : pos + 4 + size])
            pos += 4 + size
            if ftype == proto.FRAME_RESPONSE and body == proto.HEARTBEAT:
                self.sock.sendall(proto.NOP)
            elif ftype == proto.FRAME_RESPONSE and body == b"OK":
                self.count += 1
            else:
                raise proto.ProtocolError(f"publish answered {ftype} {body!r}")
        del buf[:pos]

    def wait_for(self, commands: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count < commands:
            left = deadline - time.monotonic()
            if left <= 0:
                raise proto.ProtocolError(f"only {self.count}/{commands} publishes acknowledged")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise proto.ProtocolError("connection closed by server")
            self._feed(data)


def _subscriber(ctx: harness.ConnContext, addr: tuple[str, int], cfg: E2EConfig) -> dict[str, Any]:
    identify = {}
    if cfg.output_buffer_timeout is not None:
        identify["output_buffer_timeout"] = cfg.output_buffer_timeout
    sock = proto.connect(addr, "e2e-sub", **identify)
    try:
        proto.subscribe(sock, cfg.topic, cfg.channel)
        sock.sendall(proto.rdy(cfg.rdy))
        sock.settimeout(0.05)
        start_ns = ctx.ready()
        warm_ns = start_ns + int(cfg.warmup * 1e9)
        i, counts, stop = ctx.index, ctx.counts, ctx.stop
        buf = bytearray(_BUF_SIZE)
        mv = memoryview(buf)
        have = 0
        received = stale = warm = 0
        lat = array("q")
        pub_times = array("q") if cfg.samples else None
        unpack_from = proto.FRAME_HEADER.unpack_from
        stamp_from = proto.STAMP.unpack_from
        recv_into, sendall = sock.recv_into, sock.sendall
        monotonic_ns = time.monotonic_ns
        fin_join = b"\nFIN ".join
        while not stop[i]:
            try:
                n = recv_into(mv[have:])
            except TimeoutError:
                continue
            t = monotonic_ns()
            if n == 0:
                raise proto.ProtocolError("connection closed by server")
            have += n
            pos = 0
            ids = []
            while have - pos >= 8:
                size, ftype = unpack_from(buf, pos)
                end = pos + 4 + size
                if end > have:
                    break
                if ftype == 2:
                    ids.append(mv[pos + 18 : pos + 34])
                    ts = stamp_from(buf, pos + 34)[0] if size >= 38 else 0
                    if ts < start_ns:
                        stale += 1
                    else:
                        received += 1
                        if ts >= warm_ns:
                            lat.append(t - ts)
                            if pub_times is not None:
                                pub_times.append(ts - start_ns)
                        else:
                            warm += 1
                elif ftype == 0:
                    if mv[pos + 8 : end] == proto.HEARTBEAT:
                        sendall(proto.NOP)
                else:
                    raise proto.ProtocolError(f"error frame: {bytes(mv[pos + 8 : end])!r}")
                pos = end
            if ids:
                sendall(b"FIN " + fin_join(ids) + b"\n")
                counts[i] = received
                ids = []
            if pos:
                rest = bytes(mv[pos:have])
                have = len(rest)
                buf[:have] = rest
            elif have == len(buf):
                mv.release()
                buf.extend(bytes(len(buf)))
                mv = memoryview(buf)
        mv.release()
        if cfg.samples and pub_times is not None:
            with open(cfg.samples, "w") as f:
                f.write("publish_ms,latency_ms\n")
                for p, v in zip(pub_times, lat):
                    f.write(f"{p / 1e6:.3f},{v / 1e6:.3f}\n")
        values = sorted(lat)
        return {
            "received": received,
            "stale": stale,
            "warmup": warm,
            "measured": len(values),
            "p50_ns": percentile(values, 50),
            "p90_ns": percentile(values, 90),
            "p99_ns": percentile(values, 99),
            "p999_ns": percentile(values, 99.9),
            "max_ns": values[-1] if values else 0,
            "mean_ns": sum(values) / len(values) if values else 0,
        }
    finally:
        sock.close()


def run_e2e(target: Target, cfg: E2EConfig) -> dict[str, Any]:
    # Start from an empty channel: old messages would carry old publish times.
    target.create_channel(cfg.topic, cfg.channel)
    target.empty_channel(cfg.topic, cfg.channel)
    addr = target.tcp

    def conn(ctx: harness.ConnContext) -> dict[str, Any]:
        if ctx.index == SUB:
            return _subscriber(ctx, addr, cfg)
        return _publisher(ctx, addr, cfg)

    def policy(elapsed: float, counts: Any, stop: Any, done: Any) -> None:
        if elapsed >= cfg.runfor:
            stop[PUB] = 1
        if done[PUB] and counts[SUB] >= counts[PUB]:
            stop[SUB] = 1
        if elapsed >= cfg.runfor + cfg.drain:
            stop[PUB] = stop[SUB] = 1

    res = harness.run(
        cfg.name,
        conn,
        2,
        2,
        policy,
        hard_limit=cfg.runfor + cfg.drain + 10,
        progress=cfg.progress,
        daemon_pid=target.pid,
        unit="delivered",
        progress_index=[SUB],
    )
    sub, pub = res.results[SUB], res.results[PUB]
    duration = max((pub["last_send_ns"] - res.start_ns) / 1e9, 1e-9)
    how = "PUB" if cfg.batch <= 1 else f"MPUB of {cfg.batch}"
    return {
        "mode": cfg.name,
        "workload": f"{how}, {cfg.size} B at {cfg.rate:,}/s, 1 pub + 1 sub (RDY {cfg.rdy})",
        "count": pub["sent"],
        "delivered": sub["received"],
        "lost": pub["sent"] - sub["received"],
        "stale": sub["stale"],
        "measured": sub["measured"],
        "duration_s": duration,
        "msgs_per_s": pub["sent"] / duration,
        "mb_per_s": pub["sent"] * cfg.size / duration / 1024 / 1024,
        "p50_ms": sub["p50_ns"] / 1e6,
        "p90_ms": sub["p90_ns"] / 1e6,
        "p99_ms": sub["p99_ns"] / 1e6,
        "p999_ms": sub["p999_ns"] / 1e6,
        "max_ms": sub["max_ns"] / 1e6,
        "mean_ms": sub["mean_ns"] / 1e6,
        "daemon_cpu": res.daemon_cpu_share,
        "client_cpu": res.client_cpu_share,
    }
