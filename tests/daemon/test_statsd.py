"""--statsd-*: nsqd's statsd lines over UDP, received by a UDP socket on 127.0.0.1.

Names and types follow nsqd/statsd.go: `<prefix>topic.<t>.message_count:<diff>|c`,
`.message_bytes|c`, `.depth|g`, `.backend_depth|g`, per channel `message_count|c`, `depth|g`,
`backend_depth|g`, `in_flight_count|g`, `deferred_count|g`, `requeue_count|c`,
`timeout_count|c`, `clients|g`, `e2e_processing_latency_<pct>|g`, and `mem.*`. The prefix's
`%s` is the host key of broadcast address and HTTP port (dots and colons as underscores) and
ends with a dot.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from support.daemons import Daemon

from nsqpy.testing import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.2)
    yield s
    s.close()


def receive(udp: socket.socket, until, timeout: float = 10) -> list[bytes]:
    """Datagrams until ``until(lines)`` is true for all lines received so far."""
    packets: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            packets.append(udp.recv(65536))
        except TimeoutError:
            pass
        lines = [ln for p in packets for ln in p.decode().splitlines()]
        if until(lines):
            return packets
    raise AssertionError(f"statsd lines not received: {packets!r}")


def parse(lines: list[str]) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for ln in lines:
        name, _, rest = ln.partition(":")
        value, _, typ = rest.partition("|")
        out.setdefault(name, []).append((int(value), typ))
    return out


def start(daemon_factory, udp: socket.socket, *args: str) -> Daemon:
    port = udp.getsockname()[1]
    return daemon_factory(
        f"--statsd-address=127.0.0.1:{port}",
        "--statsd-interval=1s",
        "--broadcast-address=127.0.0.1",
        *args,
    )


def test_statsd_pushes_nsqd_names(daemon_factory, udp):
    d = start(daemon_factory, udp, "--e2e-processing-latency-percentile=0.99")
    pre = f"nsq.127_0_0_1_{d.http_port}."
    c = d.raw()
    p = d.raw()
    try:
        c.identify()
        c.sub("st", "ch", 10)
        for i in range(3):
            p.pub("st", b"abcd%d" % i)
        for _ in range(3):
            c.cmd(b"FIN", c.read_message()[2])

        def complete(lines: list[str]) -> bool:
            got = parse(lines)
            sent = sum(v for v, _ in got.get(pre + "topic.st.message_count", []))
            fin = got.get(pre + "topic.st.channel.ch.e2e_processing_latency_99", [])
            done = bool(lines) and lines[-1].startswith(pre + "mem.gc_runs:")  # a whole push
            return sent == 3 and any(v > 0 for v, _ in fin) and done

        packets = receive(udp, complete)
    finally:
        c.close()
        p.close()
    for pk in packets:
        assert len(pk) <= 508  # --statsd-udp-packet-size default
        assert pk.endswith(b"\n")
    lines = [ln for pk in packets for ln in pk.decode().splitlines()]
    assert all(ln.startswith(pre) for ln in lines), lines[:5]
    got = parse(lines)
    t = pre + "topic.st."
    ch = t + "channel.ch."
    assert {typ for _, typ in got[t + "message_count"]} == {"c"}
    assert sum(v for v, _ in got[t + "message_bytes"]) == 15
    for name in ("depth", "backend_depth", "e2e_processing_latency_99"):
        assert got[t + name][-1][1] == "g", name
    assert sum(v for v, _ in got[ch + "message_count"]) == 3
    for name in ("depth", "backend_depth", "in_flight_count", "deferred_count", "clients"):
        assert got[ch + name][-1][1] == "g", name
    for name in ("requeue_count", "timeout_count"):
        assert got[ch + name][-1] == (0, "c"), name
    # memory and GC stats are on by default (nsqd's --statsd-mem-stats=true)
    for name in (
        "heap_objects",
        "heap_idle_bytes",
        "heap_in_use_bytes",
        "heap_released_bytes",
        "gc_pause_usec_100",
        "gc_pause_usec_99",
        "gc_pause_usec_95",
        "next_gc_bytes",
    ):
        assert got[pre + "mem." + name][-1][1] == "g", name
    assert got[pre + "mem.gc_runs"][-1][1] == "c"
    # the line goes to stderr at the end of the pass that sent the packets: the test's reader of
    # the daemon's stderr may get it after the packets
    want = f"STATSD: pushing stats to 127.0.0.1:{udp.getsockname()[1]}"
    wait_for(lambda: any(want in ln for ln in d.lines), what="the STATSD log line")


def test_statsd_prefix_packet_size_mem_stats_and_ephemeral(daemon_factory, udp):
    d = start(
        daemon_factory,
        udp,
        "--statsd-prefix=app.%s.nsqd",
        "--statsd-udp-packet-size=120",
        "--statsd-mem-stats=false",
        "--statsd-exclude-ephemeral",
    )
    assert d.http("POST", "/topic/create?topic=keep")[0] == 200
    assert d.http("POST", "/channel/create?topic=keep&channel=c")[0] == 200
    assert d.http("POST", "/channel/create?topic=keep&channel=e%23ephemeral")[0] == 200
    assert d.http("POST", "/topic/create?topic=gone%23ephemeral")[0] == 200
    pre = f"app.127_0_0_1_{d.http_port}.nsqd."

    def complete(lines: list[str]) -> bool:
        return any(ln.startswith(pre + "topic.keep.channel.c.clients:") for ln in lines)

    packets = receive(udp, complete)
    lines = [ln for pk in packets for ln in pk.decode().splitlines()]
    assert all(len(pk) <= 120 for pk in packets)
    assert len(packets) > 1
    assert not any(".mem." in ln for ln in lines)
    assert not any("ephemeral" in ln for ln in lines)
    assert all(ln.startswith(pre) for ln in lines)


def test_statsd_unreachable_address_does_not_stop_the_daemon(daemon_factory):
    d = daemon_factory("--statsd-address=127.0.0.1:9", "--statsd-interval=1s")
    # the second push is the one that meets the first datagram's ICMP "port unreachable"
    wait_for(
        lambda: sum("STATSD: pushing stats to 127.0.0.1:9" in ln for ln in d.lines) >= 3,
        timeout=20,
        what="three statsd pushes",
    )
    assert d.alive() and d.http("GET", "/ping")[:2] == (200, b"OK")
