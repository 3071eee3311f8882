"""nsqpy-admin in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

A module-scoped cluster (nsqpy-lookupd + two nsqpy-d) with traffic and connected consumers;
each page is opened, what it shows is checked against the daemons' /stats, the buttons are
pressed (pause, empty, delete) and the daemons' state checked; the live refresh is watched
updating the counter without a reload; the pages are used with JavaScript off. A PNG of each
page goes to $NSQPY_ARTIFACTS (or a pytest temporary directory). With
NSQPY_UPDATE_SCREENSHOTS=1 the documentation's screenshots (topic, channel, node, counter pages) are
written to docs/screenshots/ as well.

Skips (saying why) when Playwright or Chromium is missing; never downloads a browser.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.admin_cluster import (  # noqa: F401 (cluster_fixture: the "cluster" fixture, shared)
    Admin,
    Cluster,
    admin_over,
    cluster_fixture,
    consume,
    dead_letter,
    message_page,
    pub_both,
)
from support.daemons import ROOT
from support.etcd_server import EtcdServer, etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.raw_client import RawClient
from support.replication_cluster import Nodes, repl_stats

from nsqpy.testing import wait_for
from nsqpy.testing.process import Nsqlookupd

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("NSQPY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
README_SHOTS = ROOT / "docs" / "screenshots"

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("NSQPY_ARTIFACTS")
    d = Path(env) / "admin-screenshots" if env else tmp_path_factory.mktemp("admin-screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from admin_over(cluster, "2s")


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 760})
    pg = ctx.new_page()
    pg.set_default_timeout(20_000)
    pg.on("dialog", lambda d: d.accept())
    yield pg
    ctx.close()


def shot(page: Page, artifacts: Path, name: str, readme: bool = False) -> None:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if readme and os.environ.get("NSQPY_UPDATE_SCREENSHOTS") == "1":
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(README_SHOTS / f"{name}.png"), full_page=False)


def num(page: Page, selector: str) -> int:
    return int(page.inner_text(selector).replace(",", "").strip())


def samples(admin: Admin, topic: str) -> int:
    """How many history samples the admin has of ``topic`` (its depth chart's data-samples)."""
    code, body, _ = admin.http("GET", f"/topics/{topic}")
    m = re.search(rb'data-samples="(\d+)"', body)
    return int(m.group(1)) if code == 200 and m else 0


def next_sample(admin: Admin, topic: str) -> None:
    """Wait for the admin's sampler to take one more sample of ``topic``."""
    n = samples(admin, topic)
    wait_for(lambda: samples(admin, topic) > n, 15, interval=0.2, what="a history sample")


# ---------------------------------------------------------------------------- traffic


@pytest.fixture(scope="module")
def traffic(cluster: Cluster, admin: Admin) -> Iterator[list[RawClient]]:
    """Topic "orders" on both nodes with channels billing (a consumer on each node, some
    messages finished and requeued) and audit (no consumer, messages queued), published in
    bursts one history sample apart so the charts have a shape."""
    topic = "orders"
    pub_both(cluster, topic, 1, 1)
    for n in cluster.nodes:
        for ch in ("billing", "audit"):
            n.post("/channel/create", topic=topic, channel=ch)
    a, b = cluster.nodes
    next_sample(admin, topic)
    for burst in (40, 90, 20, 60):
        a.mpub(topic, [b"order-a-%d" % i for i in range(burst)])
        b.mpub(topic, [b"order-b-%d" % i for i in range(burst // 2)])
        next_sample(admin, topic)
    clients = [consume(a, topic, "billing", 30, requeue=3), consume(b, topic, "billing", 20)]
    wait_for(
        lambda: cluster.channel_stats(a, topic, "billing")["requeue_count"] == 3, 10, what="req"
    )
    try:
        yield clients
    finally:
        for c in clients:
            c.close()


# ---------------------------------------------------------------------------- pages


def test_pages_show_what_the_daemons_report(
    page: Page, admin: Admin, cluster: Cluster, traffic: Any, artifacts: Path
) -> None:
    topic = "orders"
    a, b = cluster.nodes
    next_sample(admin, topic)  # the consumers' work is in the charts

    page.goto(admin.url + "/topics")
    row = f'#topics tr[data-topic="{topic}"]'
    assert num(page, f"{row} td.depth") == sum(
        cluster.topic_stats(n, topic)["depth"] for n in (a, b)
    )
    shot(page, artifacts, "topics")

    page.goto(f"{admin.url}/topics/{topic}")
    for n in (a, b):
        own = cluster.topic_stats(n, topic)
        r = f'#topic-nodes tr[data-node="{n.http_address}"]'
        assert num(page, f"{r} td.depth") == own["depth"]
        assert num(page, f"{r} td.messages") == own["message_count"]
    total = sum(cluster.topic_stats(n, topic)["message_count"] for n in (a, b))
    assert num(page, "#topic-nodes tr.total td.messages") == total
    for ch in ("billing", "audit"):
        depth = sum(cluster.channel_stats(n, topic, ch)["depth"] for n in (a, b))
        assert num(page, f'#channels tr[data-channel="{ch}"] td.depth') == depth
    assert page.locator("svg.spark polyline").count() >= 2
    shot(page, artifacts, "topic", readme=True)

    page.goto(f"{admin.url}/topics/{topic}/billing")
    own = {n.http_address: cluster.channel_stats(n, topic, "billing") for n in (a, b)}
    for addr, st in own.items():
        r = f'#channel-nodes tr[data-node="{addr}"]'
        assert num(page, f"{r} td.depth") == st["depth"]
        assert num(page, f"{r} td.inflight") == st["in_flight_count"]
        assert num(page, f"{r} td.clients") == st["client_count"] == 1
    rows = page.locator("#clients tbody tr")
    assert rows.count() == 2
    for st in own.values():
        (c,) = st["clients"]
        r = page.locator(f'#clients tr[data-client="{c["remote_address"]}"]')
        assert r.locator("td.addr").inner_text() == c["remote_address"]
        assert "admin-test/1.0" in r.locator("td.ua").inner_text()
        assert r.locator("td.rdy").inner_text() == str(c["ready_count"])
        assert r.locator("td.finished").inner_text() == str(c["finish_count"])
        assert r.locator("td.requeued").inner_text() == str(c["requeue_count"])
        assert "plain" in r.locator("td.attrs").inner_text()
        assert "since" in r.locator("td.since").inner_text()
    shot(page, artifacts, "channel", readme=True)

    page.goto(admin.url + "/nodes")
    for n in (a, b):
        r = page.locator(f'#nodes tr[data-node="{n.http_address}"]')
        assert r.locator("td.version").inner_text().startswith("1.3.0")
        assert cluster.lookupd.http_address in r.locator("td.lookupd").inner_text()
        assert int(r.locator("td.topics").inner_text()) == len(n.stats()["topics"])
        assert "since" in r.locator("td.uptime").inner_text()
    shot(page, artifacts, "nodes")

    page.goto(f"{admin.url}/nodes/{a.http_address}")
    assert num(page, "dd.total-messages") == sum(t["message_count"] for t in a.stats()["topics"])
    assert num(page, "dd.total-clients") == 1
    assert (
        num(page, f'#node-topics tr[data-topic="{topic}"] td.depth')
        == (cluster.topic_stats(a, topic)["depth"])
    )
    shot(page, artifacts, "node", readme=True)

    page.goto(admin.url + "/lookup")
    producers = page.locator(f'#lookup tr[data-topic="{topic}"] td.producers').inner_text()
    assert a.http_address in producers and b.http_address in producers
    shot(page, artifacts, "lookup")


def test_counter_refreshes_live(
    page: Page, admin: Admin, cluster: Cluster, traffic: Any, artifacts: Path
) -> None:
    def channel_total() -> int:
        return sum(
            c["message_count"]
            for n in cluster.nodes
            for t in n.stats()["topics"]
            for c in t["channels"]
        )

    page.goto(admin.url + "/counter")
    assert num(page, "#total-messages") == channel_total()
    before = num(page, "#total-messages")
    page.wait_for_selector("#refresh:not([hidden])")
    cluster.nodes[1].mpub("orders", [b"more"] * 25)  # two channels: +50
    page.wait_for_function(
        "n => Number(document.getElementById('total-messages').dataset.count) >= n",
        arg=before + 50,
        timeout=20_000,
    )
    assert num(page, "#total-messages") == channel_total()
    shot(page, artifacts, "counter", readme=True)


def test_buttons_pause_empty_delete(
    page: Page, admin: Admin, cluster: Cluster, artifacts: Path
) -> None:
    topic = "ui_buttons"
    pub_both(cluster, topic, 4, 6)
    for n in cluster.nodes:
        n.post("/channel/create", topic=topic, channel="c")
        n.post("/channel/create", topic=topic, channel="d")
    cluster.nodes[0].mpub(topic, [b"x"] * 5)
    assert cluster.channel_stats(cluster.nodes[0], topic, "c")["depth"] > 0

    page.goto(f"{admin.url}/topics/{topic}")
    with page.expect_navigation():
        page.click(".actions button:has-text('Pause')")
    assert "pause topic" in page.inner_text(".notice")
    assert all(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
    assert page.locator("h1 .badge.paused").count() == 1
    with page.expect_navigation():
        page.click(".actions button:has-text('Unpause')")
    assert not any(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)

    page.goto(f"{admin.url}/topics/{topic}/c")
    with page.expect_navigation():
        page.click(".actions button:has-text('Pause')")
    assert all(cluster.channel_stats(n, topic, "c")["paused"] for n in cluster.nodes)
    with page.expect_navigation():
        page.click(".actions button:has-text('Empty')")
    assert all(cluster.channel_stats(n, topic, "c")["depth"] == 0 for n in cluster.nodes)
    assert num(page, "#channel-nodes tr.total td.depth") == 0
    shot(page, artifacts, "channel-after-empty")
    with page.expect_navigation():
        page.click(".actions button:has-text('Delete')")
    assert page.url.rstrip("/").endswith(f"/topics/{topic}") or f"/topics/{topic}?" in page.url
    assert all(cluster.channel_stats(n, topic, "c") is None for n in cluster.nodes)
    assert page.locator('#channels tr[data-channel="c"]').count() == 0

    with page.expect_navigation():
        page.click(".actions button:has-text('Delete')")
    assert all(cluster.topic_stats(n, topic) is None for n in cluster.nodes)
    wait_for(lambda: not cluster.lookupd.producers(topic), 10, what="topic gone from lookupd")


def test_pages_work_with_javascript_off(
    browser: Browser, admin: Admin, cluster: Cluster, artifacts: Path
) -> None:
    topic = "ui_nojs"
    pub_both(cluster, topic, 2, 2)
    ctx = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 760})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(20_000)
        pg.goto(f"{admin.url}/topics/{topic}")
        assert pg.locator("#refresh").is_hidden()  # live refresh needs JavaScript
        assert num(pg, "#topic-nodes tr.total td.messages") == 4
        with pg.expect_navigation():
            pg.click(".actions button:has-text('Pause')")  # no confirm without JavaScript
        assert all(cluster.topic_stats(n, topic)["paused"] for n in cluster.nodes)
        pg.goto(admin.url + "/lookup")
        pg.fill("input[name=topic]", "ui_made")
        pg.fill("input[name=channel]", "made_ch")
        with pg.expect_navigation():
            pg.click("form.create button")
        assert "created ui_made/made_ch" in pg.inner_text(".notice")
        assert cluster.lookupd.get_json("/channels?topic=ui_made")["channels"] == ["made_ch"]
        shot(pg, artifacts, "lookup-nojs")
    finally:
        ctx.close()


def test_non_admin_sees_disabled_buttons_and_gets_403(
    browser: Browser, cluster: Cluster, artifacts: Path
) -> None:
    topic = "ui_acl"
    pub_both(cluster, topic, 1, 1)
    a = Admin([f"--lookupd-http-address={cluster.lookupd.http_address}", "--admin-user=alice"])
    try:
        ctx = browser.new_context(extra_http_headers={"X-Forwarded-User": "mallory"})
        pg = ctx.new_page()
        pg.set_default_timeout(20_000)
        pg.goto(f"{a.url}/topics/{topic}")
        assert pg.locator(".actions button").first.is_disabled()
        assert "read-only" in pg.inner_text("header")
        # a page whose button was enabled by hand: the server still refuses
        pg.eval_on_selector_all(".actions button", "bs => bs.forEach(b => b.disabled = false)")
        pg.on("dialog", lambda d: d.accept())
        with pg.expect_navigation():
            pg.click(".actions button:has-text('Delete')")
        assert "FORBIDDEN" in pg.inner_text("#error")
        shot(pg, artifacts, "forbidden")
        assert all(cluster.topic_stats(n, topic) is not None for n in cluster.nodes)
        ctx.close()
    finally:
        assert a.stop() == 0, a.log()


def test_stopped_node_shows_as_error_row_while_the_page_refreshes(
    page: Page, admin: Admin, cluster: Cluster, artifacts: Path
) -> None:
    topic = "ui_sigstop"
    pub_both(cluster, topic, 3, 7)
    n1, n2 = cluster.nodes
    page.goto(f"{admin.url}/topics/{topic}")
    page.wait_for_selector("#refresh:not([hidden])")
    assert page.locator("#topic-nodes tr.node-error").count() == 0
    os.kill(n1.pid, signal.SIGSTOP)
    try:
        # the live refresh brings the error row in (request timeout 2 s + refresh 1 s)
        row = page.wait_for_selector("#topic-nodes tr.node-error", timeout=20_000)
        assert row is not None and n1.http_address in row.inner_text()
        assert "deadline" in row.inner_text()
        assert num(page, f'#topic-nodes tr[data-node="{n2.http_address}"] td.messages') == 7
        assert num(page, "#topic-nodes tr.total td.messages") == 7
        assert n1.http_address in page.inner_text("#warnings")
        shot(page, artifacts, "topic-node-stopped")
    finally:
        os.kill(n1.pid, signal.SIGCONT)
    page.wait_for_selector("#topic-nodes tr.node-error", state="detached", timeout=20_000)
    assert num(page, "#topic-nodes tr.total td.messages") == 10


def test_dead_letter_counts_and_replay_button(
    page: Page, admin: Admin, cluster: Cluster, artifacts: Path
) -> None:
    """nsqpy-d's dead letters: the counts beside the channel, and the channel page's replay
    button putting them back into the channel on every node."""
    topic, dead = "ui_dlq", "ui_dlq.work.dead"
    n1, n2 = cluster.nodes
    dead_letter(cluster, n1, topic, "work", 4)
    dead_letter(cluster, n2, topic, "work", 2)
    cluster.wait_registered(dead)

    page.goto(f"{admin.url}/topics/{topic}")
    row = '#channels tr[data-channel="work"]'
    assert num(page, f"{row} .dead-count") == 6
    assert page.inner_text(f"{row} .dead-waiting") == "6 to replay"
    page.goto(f"{admin.url}/topics/{topic}/work")
    assert num(page, "dd.max-attempts") == 1
    assert num(page, "dd.dead-count") == 6
    assert page.inner_text("dd.dead-waiting").startswith(f"6 in {dead}")
    assert num(page, "#channel-nodes tr.total td.depth") == 0
    shot(page, artifacts, "channel-dead-letters")
    with page.expect_navigation():
        page.click("form.replay button")
    assert "6 replayed" in page.inner_text(".notice")
    assert [cluster.channel_stats(n, topic, "work")["depth"] for n in (n1, n2)] == [4, 2]
    assert [cluster.topic_stats(n, dead)["depth"] for n in (n1, n2)] == [0, 0]
    assert num(page, "#channel-nodes tr.total td.depth") == 6
    assert page.locator("form.replay button").is_disabled()  # nothing left to replay
    shot(page, artifacts, "channel-replayed")


def _reload_until(page: Page, selector: str, timeout: float = 60) -> None:
    """Reload ``page`` until ``selector`` is on it. A lookup behind the page can outlast the
    admin's 1 s upstream timeout on a loaded machine (see message_page): the page then says so,
    and asking again is what its user would do. AssertionError with the last page's text."""

    def shown() -> bool:
        if page.locator(selector).count():
            return True
        page.reload()
        return False

    try:
        wait_for(shown, timeout, 0.5, what=f"{selector} on {page.url}")
    except AssertionError as e:
        raise AssertionError(f"{e}; the last page:\n{page.inner_text('body')}") from None


def test_message_search_box(page: Page, admin: Admin, cluster: Cluster, artifacts: Path) -> None:
    """The header's search box finds a message by ID through nsqpy-lookupd: the node that
    made it, and where it is (in flight to a consumer on one channel, queued on another)."""
    topic = "ui_find"
    n2 = cluster.nodes[1]
    n2.post("/topic/create", topic=topic)
    for ch in ("billing", "audit"):
        n2.post("/channel/create", topic=topic, channel=ch)
    n2.pub(topic, b'{"order": 42}')
    c = RawClient(n2.tcp_port)
    try:
        c.identify(user_agent="finder/1.0", client_id="finder", hostname="finder-host")
        c.sub(topic, "billing", rdy=1)
        msg_id = c.read_message(10)[2].decode()
        message_page(admin, f"id={msg_id}")  # the lookupd's first lookup done (see there)
        page.goto(admin.url + "/topics")
        box = "header form.search input[name=id]"
        page.fill(box, msg_id)
        with page.expect_navigation():
            page.press(box, "Enter")
        assert page.input_value(box) == msg_id
        assert page.inner_text("dd.node-id") == "102"
        _reload_until(page, "dd.producer")
        assert n2.http_address in page.inner_text("dd.producer")
        billing = page.locator('#locations tr[data-channel="billing"]')
        assert billing.locator("td.state").inner_text() == "in flight"
        assert "finder/1.0" in billing.locator("td.details").inner_text()
        assert page.inner_text('#locations tr[data-channel="audit"] td.state') == "memory"
        page.check("form.lookup-message input[name=body]")
        with page.expect_navigation():
            page.click("form.lookup-message button")
        _reload_until(page, "#message-body")
        assert page.inner_text("#message-body") == '{"order": 42}'
        shot(page, artifacts, "message", readme=True)
    finally:
        c.close()


@needs_etcd
def test_replication_placement_buttons_ask_then_change(
    browser: Browser, artifacts: Path, etcd: EtcdServer, tmp_path: Path
) -> None:
    """A replicated topic's page: Change R asks for confirmation naming the new R (dismissed:
    nothing sent), then, accepted, raises R; Reassign asks naming the nodes and places the
    topic on them; the Replication table shows the new placement."""
    lookupd = Nsqlookupd([])
    nodes = Nodes(etcd, "ui_placement", tmp_path)
    a = None
    topic = "ui_repl"
    try:
        la = f"--lookupd-tcp-address={lookupd.tcp_address}"
        started = [nodes.start(i, la) for i in (51, 52, 53)]
        started[0].post("/topic/create", topic=topic, replicas="2")
        leader = nodes.leader(topic)
        leader.mpub(topic, [b"a", b"b"])
        wait_for(lambda: lookupd.producers(topic), 10, what="the leader registered")
        a = Admin([f"--lookupd-http-address={lookupd.http_address}"])
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        pg = ctx.new_page()
        pg.set_default_timeout(30_000)
        asked: list[str] = []
        answer = [False]

        def on_dialog(d: Any) -> None:
            asked.append(d.message)
            d.accept() if answer[0] else d.dismiss()

        pg.on("dialog", on_dialog)
        pg.goto(f"{a.url}/topics/{topic}")
        forms = "#placement-actions"
        assert pg.input_value(f"{forms} input[name=replicas]") == "2"
        pg.fill(f"{forms} input[name=replicas]", "3")
        pg.click(f"{forms} button:has-text('Change R')")  # dismissed: nothing is sent
        assert asked and "to 3?" in asked[-1]
        assert len((repl_stats(leader, topic) or {}).get("placement", [])) == 2
        answer[0] = True
        with pg.expect_navigation():
            pg.click(f"{forms} button:has-text('Change R')")
        assert "(R=3)" in pg.inner_text(".notice")
        wait_for(lambda: len((repl_stats(leader, topic) or {}).get("isr", [])) == 3, 30, what="R=3")
        own = repl_stats(leader, topic)
        assert own is not None
        keep = [own["leader"], next(n for n in own["placement"] if n != own["leader"])]
        pg.goto(f"{a.url}/topics/{topic}")
        pg.fill(f"{forms} input[name=nodes]", ",".join(keep))
        with pg.expect_navigation():
            pg.click(f"{forms} button:has-text('Reassign')")
        assert ",".join(keep) in asked[-1]
        assert "(R=2)" in pg.inner_text(".notice")
        wait_for(
            lambda: sorted((repl_stats(leader, topic) or {}).get("placement", [])) == sorted(keep),
            30,
            what="the new placement",
        )
        pg.goto(f"{a.url}/topics/{topic}")
        cell = pg.inner_text("#replication td.placement")
        assert sorted(re.findall(r"node (\d+)", cell)) == sorted(keep)
        shot(pg, artifacts, "replication-placement")
        ctx.close()
    finally:
        if a is not None:
            assert a.stop() == 0, a.log()
        nodes.stop()
        lookupd.stop()
