"""Screenshot of Prometheus's graph page while the leader of a replicated topic is killed.

    cd REPO && python docs/screenshots/prometheus_isr.py [--out docs/screenshots/prometheus-isr.png]

Starts a real etcd (tests/support/etcd_server.py), three nsqpy-d nodes joined through it
(tests/support/replication_cluster.py) with a topic ``ledger`` replicated on all three, and a real
Prometheus (tests/support/prometheus_server.py) scraping the nodes every second with the alert rules
loaded. A publisher thread sends to whichever node leads the topic, 10 messages a second. Once
Prometheus has some seconds of a full ISR, the leader is killed with SIGKILL; the ISR drops to
2 of 3 and a follower takes over; the killed node is then started again on its data and
rejoins, and the ISR goes back to 3. Every phase waits on what Prometheus reports (bounded),
not on fixed sleeps, apart from the few seconds each phase is left visible on the graph.

The PNG is Prometheus's classic graph page (Debian's build) rendered by headless Chromium
through Playwright: ``/graph?g0.expr=...`` with the ISR and the placement of the topic, and a
second graph of which node leads it. Prints the phases' times and the PNG's path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # tests/support's helpers

from support.etcd_server import EtcdServer  # noqa: E402
from support.prometheus_server import PrometheusServer, static_job  # noqa: E402
from support.replication_cluster import Nodes, create  # noqa: E402

from nsqpy.testing import Nsqd  # noqa: E402

RULES = ROOT / "docker" / "prometheus" / "nsq-alerts.yml"
TOPIC = "ledger"
ISR = f'max by (topic) (nsq_replication_isr{{topic="{TOPIC}"}})'
PLACEMENT = f'max by (topic) (nsq_replication_replicas{{topic="{TOPIC}"}})'
#: Both on one graph, told apart by a label of their own (``or`` keeps one series per labels).
GRAPH = (
    f'label_replace({ISR}, "series", "in-sync replicas", "", "")'
    f' or label_replace({PLACEMENT}, "series", "placement", "", "")'
)
LEADER = f'nsq_replication_is_leader{{topic="{TOPIC}"}} == 1'
CHROMIUM = os.environ.get("NSQPY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def log(msg: str, t0: float) -> None:
    print(f"{time.monotonic() - t0:6.1f}s  {msg}", flush=True)


class Publisher(threading.Thread):
    """Publishes to the current leader of TOPIC every 0.1 s; failures (the leader gone, an
    election under way) are counted and retried on the next tick."""

    def __init__(self, cluster: Nodes) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stopping = threading.Event()
        self.sent = 0
        self.failed = 0

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            leader = self.cluster.current_leader(TOPIC)
            try:
                if leader is None:
                    raise OSError("no leader")
                leader.pub(TOPIC, b"m%d" % self.sent)
                self.sent += 1
            except (OSError, AssertionError):
                self.failed += 1


def value(prom: PrometheusServer, expr: str) -> float | None:
    series = prom.query(expr)
    return float(series[0]["value"][1]) if series else None


def wait_value(prom: PrometheusServer, expr: str, want: float, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while value(prom, expr) != want:
        if time.monotonic() > deadline:
            raise SystemExit(f"{expr} did not reach {want} within {timeout} s")
        time.sleep(0.5)


def screenshot(prom: PrometheusServer, out: Path, range_s: int) -> None:
    from playwright.sync_api import sync_playwright

    params = {
        "g0.expr": GRAPH,
        "g0.tab": "0",
        "g0.range_input": f"{range_s}s",
        "g1.expr": LEADER,
        "g1.tab": "0",
        "g1.range_input": f"{range_s}s",
    }
    url = f"{prom.url}/graph?{urllib.parse.urlencode(params)}"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
            timeout=60_000,
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(url, wait_until="networkidle", timeout=60_000)
            # both graphs drawn (rickshaw renders an svg path per series)
            page.wait_for_function(
                "document.querySelectorAll('.graph_area svg path').length >= 3", timeout=60_000
            )
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs/screenshots/prometheus-isr.png")
    ap.add_argument("--hold", type=float, default=15, help="seconds each phase stays on the graph")
    args = ap.parse_args()
    t0 = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="nsqpy-prom-shot-"))
    etcd = EtcdServer(base / "etcd")
    cluster = Nodes(etcd, "screenshot", base / "nodes")
    prom = None
    publisher = Publisher(cluster)
    try:
        nodes: list[Nsqd] = [cluster.start(i) for i in (1, 2, 3)]
        create(nodes[0], TOPIC, 3, nodes)
        leader = cluster.leader(TOPIC)
        log(f"3 nodes, {TOPIC} replicated on 3, leader node {cluster.node_id(leader)}", t0)
        prom = PrometheusServer(
            base / "prometheus", [static_job("nsqd", [n.http_address for n in nodes])], [RULES]
        )
        prom.wait_targets_up(60)
        publisher.start()
        wait_value(prom, ISR, 3, 60)
        log("Prometheus sees an ISR of 3", t0)
        time.sleep(args.hold)
        killed = cluster.node_id(leader)
        leader.kill()
        t_kill = time.monotonic()
        log(f"kill -9 of the leader, node {killed}", t0)
        wait_value(prom, ISR, 2, 90)
        new = cluster.leader(TOPIC, timeout=60)
        log(
            f"Prometheus sees an ISR of 2 ({time.monotonic() - t_kill:.1f}s after the kill),"
            f" new leader node {cluster.node_id(new)}",
            t0,
        )
        time.sleep(args.hold)
        cluster.restart(killed)
        log(f"node {killed} started again on its data", t0)
        wait_value(prom, ISR, 3, 120)
        log("Prometheus sees an ISR of 3 again", t0)
        time.sleep(args.hold / 2)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        screenshot(prom, args.out, int(time.monotonic() - t0) + 10)
        log(f"published {publisher.sent} ({publisher.failed} attempts failed); PNG {args.out}", t0)
    finally:
        publisher.stopping.set()
        if prom is not None:
            prom.stop()
        try:
            cluster.stop()
        finally:
            etcd.stop()
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
