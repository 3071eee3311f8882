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

from . import harness, proto, report
from .target import Target

SUB, PUB = 0, 1


@dataclass
class E2EConfig(harness.ConsumerConfig):
    """``rate`` messages a second, sent one PUB each (``batch`` 1) or as MPUBs of ``batch``
    bodies, to one subscriber. The first ``warmup`` seconds are not measured; the subscriber
    waits up to ``drain`` seconds after the publisher for what is still on its way.
    ``output_buffer_timeout`` (ms) is sent in the subscriber's IDENTIFY when given; ``samples``
    names a CSV file for every measured message (publish time in ms after the start, latency
    in ms)."""

    topic: str = "e2e_bench"
    rate: int = 10_000
    batch: int = 1
    warmup: float = 1.0
    drain: float = 5.0
    output_buffer_timeout: int | None = None
    samples: str | None = None
    name: str = "e2e"


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list (q in [0, 100])."""
    if not sorted_values:
        return 0
    k = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * q // 100) - 1))
    return sorted_values[int(k)]


def _publisher(ctx: harness.ConnContext, addr: tuple[str, int], cfg: E2EConfig) -> dict[str, Any]:
    client = proto.connect(addr, "e2e-pub")
    sock = client.sock
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
        acks = _Acks(client)
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
        client.close()


class _Acks:
    """Counts the OK frames coming back to a pipelining publisher, without blocking."""

    def __init__(self, client: proto.WireClient) -> None:
        self.client = client
        self.count = 0

    def poll(self) -> None:
        while True:
            try:
                self.client.fill(socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            self._take()

    def _take(self) -> None:
        client = self.client
        buf = client.buf
        for ftype, start, end in client.frames():
            client.pos = end
            if ftype == proto.FRAME_RESPONSE and buf[start:end] == proto.HEARTBEAT:
                client.send(proto.NOP)
            elif ftype == proto.FRAME_RESPONSE and buf[start:end] == b"OK":
                self.count += 1
            else:
                raise proto.ProtocolError(f"publish answered {ftype} {bytes(buf[start:end])!r}")

    def wait_for(self, commands: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count < commands:
            left = deadline - time.monotonic()
            if left <= 0:
                raise proto.ProtocolError(f"only {self.count}/{commands} publishes acknowledged")
            self.client.sock.settimeout(left)
            self.client.fill()
            self._take()


def _subscriber(ctx: harness.ConnContext, addr: tuple[str, int], cfg: E2EConfig) -> dict[str, Any]:
    identify = {}
    if cfg.output_buffer_timeout is not None:
        identify["output_buffer_timeout"] = cfg.output_buffer_timeout
    client = proto.connect(addr, "e2e-sub", **identify)
    try:
        proto.subscribe(client, cfg.topic, cfg.channel)
        client.send(proto.rdy(cfg.rdy))
        client.sock.settimeout(0.05)
        start_ns = ctx.ready()
        warm_ns = start_ns + int(cfg.warmup * 1e9)
        i, counts, stop = ctx.index, ctx.counts, ctx.stop
        received = stale = warm = 0
        lat = array("q")
        pub_times = array("q") if cfg.samples else None
        stamp_from = proto.STAMP.unpack_from
        fill, fin_received = client.fill, proto.fin_received
        monotonic_ns = time.monotonic_ns
        body_start = proto.MSG_BODY_START
        while not stop[i]:
            try:
                fill()
            except TimeoutError:
                continue
            t = monotonic_ns()
            spans = fin_received(client)
            # the FINs are out; the bodies stay in the buffer until the next fill()
            buf = client.buf
            for start, end in spans:
                b = start + body_start
                ts = stamp_from(buf, b)[0] if end - b >= 8 else 0
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
            if spans:
                counts[i] = received
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
        client.close()


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
    how = "PUB" if cfg.batch <= 1 else f"MPUB of {cfg.batch}"
    return report.rate_row(
        cfg.name,
        f"{how}, {cfg.size} B at {cfg.rate:,}/s, 1 pub + 1 sub (RDY {cfg.rdy})",
        res,
        pub["sent"],
        pub["last_send_ns"],
        pub["sent"] * cfg.size,
        delivered=sub["received"],
        lost=pub["sent"] - sub["received"],
        stale=sub["stale"],
        measured=sub["measured"],
        **{f"{k}_ms": sub[f"{k}_ns"] / 1e6 for k in ("p50", "p90", "p99", "p999", "max", "mean")},
    )
