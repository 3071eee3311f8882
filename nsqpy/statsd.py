"""statsd: push nsqd's metrics over UDP every --statsd-interval (nsqd/statsd.go).

Strategy: one asyncio task, started only when --statsd-address is set (no cost otherwise).
Each tick it reads the same stats /stats serves (get_stats, without clients), turns them into
nsqd's lines with nsqd's names (`<prefix>topic.<t>.message_count:<diff>|c`, `...depth:<n>|g`,
channel counters and gauges, e2e percentiles, `mem.*`), and packs whole lines into datagrams of
at most --statsd-udp-packet-size bytes (nsqd's BoundaryBufferedWriter). Counters are the
difference from the previous push, as nsqd's. Sending never blocks the loop: a non-blocking
UDP socket, and a failed send is logged and dropped (statsd is best effort, as in nsqd)."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from . import stats
from .internal.netaddr import join_host_port, split_host_port

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("nsqpy")


def host_key(host_port: str) -> str:
    """nsqd's statsd.HostKey: dots and colons become underscores."""
    return host_port.replace(".", "_").replace(":", "_")


def resolve_prefix(prefix: str, broadcast_address: str, http_port: int) -> str:
    """nsqd.New's prefix: "%s" -> host key of broadcast_address:http port, a trailing "."."""
    if not prefix:
        return ""
    out = prefix.replace("%s", host_key(join_host_port(broadcast_address, http_port)))
    return out if out.endswith(".") else out + "."


def _quantile_suffix(q: float) -> str:
    """Go's %.0f of q*100 (round half to even, as Go's strconv)."""
    return f"{q * 100.0:.0f}"


def metric_lines(
    topics: list[dict[str, Any]] | None,
    last: dict[str, Any],
    exclude_ephemeral: bool,
) -> tuple[list[str], dict[str, Any]]:
    """nsqd's per-topic and per-channel statsd lines (without the prefix) and the counters to
    diff against next time ({topic: (message_count, message_bytes, {channel: (msgs, requeue,
    timeout)})})."""
    lines: list[str] = []
    now: dict[str, Any] = {}
    for t in topics or []:
        tn = t["topic_name"]
        if exclude_ephemeral and tn.endswith("#ephemeral"):
            continue
        last_msgs, last_bytes, last_chans = last.get(tn, (0, 0, {}))
        lines.append(f"topic.{tn}.message_count:{t['message_count'] - last_msgs}|c")
        lines.append(f"topic.{tn}.message_bytes:{t['message_bytes'] - last_bytes}|c")
        lines.append(f"topic.{tn}.depth:{t['depth']}|g")
        lines.append(f"topic.{tn}.backend_depth:{t['backend_depth']}|g")
        for p in t["e2e_processing_latency"]["percentiles"] or []:
            lines.append(
                f"topic.{tn}.e2e_processing_latency_{_quantile_suffix(p['quantile'])}:"
                f"{int(p['value'])}|g"
            )
        chans: dict[str, tuple[int, int, int]] = {}
        for c in t["channels"]:
            cn = c["channel_name"]
            if exclude_ephemeral and cn.endswith("#ephemeral"):
                continue
            lm, lr, lt = last_chans.get(cn, (0, 0, 0))
            pre = f"topic.{tn}.channel.{cn}"
            lines.append(f"{pre}.message_count:{c['message_count'] - lm}|c")
            lines.append(f"{pre}.depth:{c['depth']}|g")
            lines.append(f"{pre}.backend_depth:{c['backend_depth']}|g")
            lines.append(f"{pre}.in_flight_count:{c['in_flight_count']}|g")
            lines.append(f"{pre}.deferred_count:{c['deferred_count']}|g")
            lines.append(f"{pre}.requeue_count:{c['requeue_count'] - lr}|c")
            lines.append(f"{pre}.timeout_count:{c['timeout_count'] - lt}|c")
            lines.append(f"{pre}.clients:{c['client_count']}|g")
            for p in c["e2e_processing_latency"]["percentiles"] or []:
                lines.append(
                    f"{pre}.e2e_processing_latency_{_quantile_suffix(p['quantile'])}:"
                    f"{int(p['value'])}|g"
                )
            chans[cn] = (c["message_count"], c["requeue_count"], c["timeout_count"])
        now[tn] = (t["message_count"], t["message_bytes"], chans)
    return lines, now


def mem_lines(ms: dict[str, Any], last_gc_runs: int) -> list[str]:
    """nsqd's mem.* lines (gauges, and gc_runs as a counter of the difference)."""
    lines = [
        f"mem.{k}:{int(ms[k])}|g"
        for k in (
            "heap_objects",
            "heap_idle_bytes",
            "heap_in_use_bytes",
            "heap_released_bytes",
            "gc_pause_usec_100",
            "gc_pause_usec_99",
            "gc_pause_usec_95",
            "next_gc_bytes",
        )
    ]
    lines.append(f"mem.gc_runs:{ms['gc_total_runs'] - last_gc_runs}|c")
    return lines


def pack(lines: list[str], prefix: str, size: int) -> list[bytes]:
    """Lines ("<prefix><stat>:<value>|<type>\\n") into datagrams of at most ``size`` bytes,
    never splitting a line (a line longer than ``size`` goes alone, as bufio does)."""
    packets: list[bytes] = []
    buf = bytearray()
    for line in lines:
        b = f"{prefix}{line}\n".encode()
        if buf and len(buf) + len(b) > size:
            packets.append(bytes(buf))
            buf.clear()
        buf += b
    if buf:
        packets.append(bytes(buf))
    return packets


class StatsdPusher:
    """The statsd loop of one NSQD."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.prefix = nsqd.opts.statsd_prefix  # resolved by NSQD.start (resolve_prefix)
        self._last: dict[str, Any] = {}
        self._last_gc_runs = 0

    def collect(self) -> list[bytes]:
        """One push's datagrams (also used by tests without a socket)."""
        opts = self.nsqd.opts
        topics, _ = stats.get_stats(self.nsqd, include_clients=False)
        lines, self._last = metric_lines(topics, self._last, opts.statsd_exclude_ephemeral)
        if opts.statsd_mem_stats:
            ms = stats.mem_stats()
            lines += mem_lines(ms, self._last_gc_runs)
            self._last_gc_runs = ms["gc_total_runs"]
        return pack(lines, self.prefix, opts.statsd_udp_packet_size)

    async def push(self) -> None:
        addr = self.nsqd.opts.statsd_address
        try:
            host, port = split_host_port(addr)
            # resolved off the loop's thread (a host name may need DNS), as nsqd dials each tick
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
            family, _, _, _, sockaddr = infos[0]
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except (OSError, ValueError):
            log.error("failed to create UDP socket to statsd(%s)", addr)
            return
        log.info("STATSD: pushing stats to %s", addr)
        try:
            sock.setblocking(False)
            sock.connect(sockaddr)
            for packet in self.collect():
                try:
                    sock.send(packet)
                except BlockingIOError:
                    break  # the kernel's buffer is full: drop the rest of this push
        except OSError as e:  # e.g. ECONNREFUSED reported for an earlier datagram
            log.error("STATSD: failed to send to %s - %s", addr, e)
        finally:
            sock.close()

    async def run(self) -> None:
        interval = max(1, self.nsqd.opts.statsd_interval_ms) / 1000
        try:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.push()
                except Exception:  # one bad push must not stop the loop
                    log.exception("STATSD: push failed")
        finally:
            log.info("STATSD: closing")
