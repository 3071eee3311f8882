"""Queries, the Grafana dashboard and the alert rules, run by a real Prometheus against real
daemons.

One Prometheus per module (tests/support/prometheus_server.py: Debian's binary, 1 s scrapes and rule
evaluations, docker/prometheus/nsq-alerts.yml loaded) scrapes what the module starts: one
nsqpy-lookupd, two nsqpy-d registered with it (end-to-end latency percentiles on), nsqpy-admin
over the lookupd, two nsqpy-d with ``--metrics-compat`` (``nsq_exporter_v1`` and
``nsq_exporter``, where nsqpy-d has the flag) and, where etcd is installed, a three-node cluster
with a topic replicated on all three.
Traffic is real: publishes, a consumer that FINs and REQs and keeps messages in flight, a
channel with a backlog and no consumer, a topic with no channel.

Checked through ``/api/v1/query``, each expression polled until it returns a series (bounded;
a PromQL error fails at once):

- every ``nsq_*`` family a live nsqpy-d scrape holds;
- every panel query of docker/grafana/nsqpy.json, its Grafana variables substituted as Grafana
  would ("All" -> the variable's allValue, the rest their current value, ``$__rate_interval``
  a concrete range); the dashboard model itself is checked without Prometheus;
- panel queries written against lovoo/nsq_exporter's families (both of its layouts), from
  nsqpy-d's compat modes, and a public nsq_exporter dashboard's queries as published (its
  source named at PUBLIC_NSQ_EXPORTER_DASHBOARD);
- every alert rule: the expression as written must evaluate (status success); and since most
  conditions are false in a healthy cluster, each rule also has an *observable* form here (the
  condition without its threshold, or the series it compares) that must return series. A rule
  the test can make true (NsqChannelNoConsumers: the channel with a backlog and no consumer)
  must return series as written and be pending in Prometheus's /api/v1/alerts for that
  channel on each node. /api/v1/rules must list every alert with health "ok" once evaluated;
- last, a follower of the replicated topic is killed (-9): the ISR-below-placement query and
  alert expression return the topic through Prometheus, and its alert turns pending.

The tests that need Prometheus skip, saying why, where it is not installed (the dashboard
model is still checked); the replicated part runs where etcd is installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.daemons import ROOT
from support.etcd_server import EtcdServer, etcd_binary
from support.prometheus_server import PrometheusServer, prometheus_binary, static_job
from support.raw_client import RawClient
from support.replication_cluster import Nodes, create

from nsqpy.testing import NsqAdmin, Nsqd, Nsqlookupd, wait_for

pytestmark = pytest.mark.timeout(600)

DASHBOARD = ROOT / "docker" / "grafana" / "nsqpy.json"
RULES = ROOT / "docker" / "prometheus" / "nsq-alerts.yml"
E2E = "--e2e-processing-latency-percentile=0.5,0.99"

#: What $__rate_interval and friends stand for in the queries run here (Grafana computes them
#: from the scrape interval and the panel's width; any range holding a few 1 s scrapes works).
GRAFANA_BUILTINS = {
    "__rate_interval": "30s",
    "__interval": "5s",
    "__range": "5m",
    "__range_s": "300",
    "interval": "5s",
}


def nsqpy_d_flags() -> str:
    r = subprocess.run(
        [sys.executable, "-m", "nsqpy", "--help"], capture_output=True, text=True, timeout=60
    )
    return r.stdout + r.stderr


COMPAT = "metrics-compat" in nsqpy_d_flags()


# ---------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    """What the module started, and what each part exports."""

    prom: PrometheusServer
    nodes: list[Nsqd]
    lookupd: Nsqlookupd
    admin: NsqAdmin
    compat: dict[str, Nsqd] = field(default_factory=dict)
    cluster: Nodes | None = None
    replicated: list[Nsqd] = field(default_factory=list)
    consumers: list[RawClient] = field(default_factory=list)
    #: family names in a scrape, by job
    families: dict[str, set[str]] = field(default_factory=dict)


def _scrape(http_address: str) -> set[str] | None:
    """The sample names of GET http://ADDR/metrics, as Prometheus stores them (a counter's
    ``_total`` kept; None: no /metrics there)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{http_address}/metrics", timeout=20) as r:
            text = r.read().decode()
    except urllib.error.HTTPError:
        return None
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        names.update(s.name for s in fam.samples)
    return names


def _consume(node: Nsqd, topic: str, channel: str) -> RawClient:
    """A consumer that FINs two messages, REQs one and keeps the rest in flight (a minute
    between heartbeats, which it does not answer: once gone, its series stay at 0)."""
    c = RawClient(node.tcp_port, timeout=20)
    c.identify(heartbeat_interval=60_000)
    c.sub(topic, channel, rdy=10)
    ids = [c.read_message()[2] for _ in range(4)]
    c.fin(ids[0])
    c.fin(ids[1])
    c.cmd(b"REQ", ids[2], b"0")
    return c


def _traffic(node: Nsqd, consumers: list[RawClient]) -> None:
    node.post("/topic/create", topic="orders")
    node.post("/channel/create", topic="orders", channel="billing")
    node.post("/channel/create", topic="orders", channel="archive")  # no consumer: a backlog
    node.mpub("orders", [b"order-%d" % i for i in range(40)])
    node.pub("orphan", b"no channel yet")
    consumers.append(_consume(node, "orders", "billing"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if prometheus_binary() is None:
        pytest.skip("prometheus is not installed (Debian package 'prometheus')")
    base = tmp_path_factory.mktemp("prom-stack")
    started: list[Any] = []
    etcd: EtcdServer | None = None
    cluster: Nodes | None = None
    consumers: list[RawClient] = []
    prom: PrometheusServer | None = None
    try:
        lookupd = Nsqlookupd()
        started.append(lookupd)
        la = f"--lookupd-tcp-address={lookupd.tcp_address}"
        nodes = []
        for i in range(2):
            n = Nsqd([la, E2E], base / f"nsqd{i}", https=False)
            started.append(n)
            nodes.append(n)
        admin = NsqAdmin([f"--lookupd-http-address={lookupd.http_address}"])
        started.append(admin)
        compat: dict[str, Nsqd] = {}
        for layout in ("nsq_exporter_v1", "nsq_exporter") if COMPAT else ():
            n = Nsqd([f"--metrics-compat={layout}", E2E], base / layout, https=False)
            started.append(n)
            compat[layout] = n
        replicated: list[Nsqd] = []
        if etcd_binary() is not None:
            etcd = EtcdServer(base / "etcd")
            cluster = Nodes(etcd, "prometheus-queries", base / "cluster")
            replicated = [cluster.start(i, la, E2E) for i in (71, 72, 73)]
            create(replicated[0], "ledger", 3, replicated)
            cluster.leader("ledger").mpub("ledger", [b"entry-%d" % i for i in range(10)])

        for n in [*nodes, *compat.values()]:
            _traffic(n, consumers)
        # lookupd answers a /lookup; nsqpy-admin asks lookupd and the nodes
        wait_for(lambda: lookupd.producers("orders"), 20, what="orders registered")
        admin.get("/api/topics/orders")

        jobs = [
            static_job("nsqd", [n.http_address for n in [*nodes, *replicated]]),
            static_job("nsqlookupd", [lookupd.http_address]),
            static_job("nsqadmin", [admin.http_address]),
        ]
        for layout, n in compat.items():
            jobs.append(static_job(layout, [n.http_address]))
        if "nsq_exporter" in compat:
            # the public dashboard below names its scrape job "nsq"
            jobs.append(static_job("nsq", [compat["nsq_exporter"].http_address]))
        prom = PrometheusServer(base / "prometheus", jobs, [RULES])
        repl_families = _scrape(replicated[0].http_address) if replicated else None
        families = {
            "nsqd": _scrape(nodes[0].http_address) or set(),
            "nsqd_replicated": repl_families or set(),
            "nsqlookupd": _scrape(lookupd.http_address) or set(),
            "nsqadmin": _scrape(admin.http_address) or set(),
        }
        for layout, n in compat.items():
            families[layout] = _scrape(n.http_address) or set()
        yield Stack(prom, nodes, lookupd, admin, compat, cluster, replicated, consumers, families)
    finally:
        if prom is not None:
            prom.stop()
        for c in consumers:
            c.close()
        if cluster is not None:
            cluster.stop()
        if etcd is not None:
            etcd.stop()
        for d in reversed(started):
            d.stop()


# ---------------------------------------------------------------------------- helpers


def panel_targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query target, rows' nested panels included."""
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            walk(p.get("panels") or [])
            for t in p.get("targets") or []:
                if t.get("expr"):
                    out.append((p["title"], t["expr"]))

    walk(dashboard["panels"])
    return out


def variable_values(dashboard: dict[str, Any]) -> dict[str, str]:
    """Each templating variable's value as Grafana puts it in a Prometheus query: "All" (or
    nothing selected) -> its allValue, else its current value; plus GRAFANA_BUILTINS."""
    values = dict(GRAFANA_BUILTINS)
    for v in dashboard["templating"]["list"]:
        cur = (v.get("current") or {}).get("value")
        if isinstance(cur, list):
            cur = cur[0] if len(cur) == 1 else "(" + "|".join(cur) + ")"
        if cur in (None, "", "$__all") and v.get("includeAll"):
            cur = v.get("allValue") or ".*"
        values[v["name"]] = str(cur or "")
    return values


_VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute(expr: str, values: dict[str, str]) -> str:
    """``$name``, ``${name}``, ``${name:fmt}`` and ``[[name]]`` replaced by ``values[name]``
    (KeyError for a variable the dashboard does not define)."""
    return _VAR_RE.sub(lambda m: values[m.group(1) or m.group(2) or m.group(3)], expr)


def load_dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def dashboard_queries() -> list[tuple[str, str]]:
    d = load_dashboard()
    values = variable_values(d)
    return [(title, substitute(expr, values)) for title, expr in panel_targets(d)]


def alert_exprs() -> dict[str, str]:
    """nsq-alerts.yml's alerts: name -> expression."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def _has_replication(stack: Stack) -> bool:
    return any(n.startswith("nsq_replication_") for n in stack.families["nsqd_replicated"])


def _no_replication_reason(stack: Stack) -> str:
    if not stack.replicated:
        return "etcd is not installed (.ci/install-etcd)"
    return "nsqpy-d exports no nsq_replication_* families"


def _needs(expr: str, prefix: str) -> bool:
    return re.search(rf"\b{prefix}", expr) is not None


# ---------------------------------------------------------------------------- the dashboard model


def test_dashboard_is_a_grafana_10_model_with_a_datasource_variable() -> None:
    d = load_dashboard()
    assert d["schemaVersion"] >= 36 and d["uid"] and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    ids = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            ids.append(p["id"])
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
            if p["type"] != "row":
                assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert p["targets"], p["title"]
                for t in p["targets"]:
                    assert t["datasource"] == p["datasource"] and t["refId"], p["title"]
            walk(p.get("panels") or [])

    walk(d["panels"])
    assert len(ids) == len(set(ids)), "panel ids are unique"
    # no two panels share a grid cell
    cells: dict[tuple[int, int], str] = {}
    for p in d["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (p["title"], cells.get((x, y)))
                cells[(x, y)] = p["title"]
    # every variable a query uses is defined (substitute raises KeyError otherwise)
    queries = dashboard_queries()
    assert len(queries) >= 30
    assert not any("$" in q for _, q in queries), [q for _, q in queries if "$" in q]
    for v in variables.values():
        if v["type"] == "query":
            assert substitute(v["definition"], variable_values(d))
    # what the dashboard covers, by family
    text = " ".join(q for _, q in queries)
    for family in (
        "nsq_topic_messages_total",
        "nsq_channel_depth",
        "nsq_channel_in_flight",
        "nsq_channel_requeued_total",
        "nsq_channel_timed_out_total",
        "nsq_channel_e2e_processing_latency_seconds",
        "nsq_clients",
        "nsq_replication_isr",
        "nsq_replication_replicas",
        "nsq_replication_follower_lag_entries",
        "nsq_replication_is_leader",
        "nsq_replication_epoch",
        "nsqlookupd_producers",
        "nsqlookupd_lookups_total",
        "nsqadmin_upstream_requests_total",
    ):
        assert family in text, family


# ---------------------------------------------------------------------------- through Prometheus


def test_targets_up_and_alert_rules_loaded(stack: Stack) -> None:
    prom = stack.prom
    jobs = ["nsqd", *stack.compat]
    jobs += [j for j in ("nsqlookupd", "nsqadmin") if stack.families[j]]
    prom.wait_targets_up(timeout=90, jobs=jobs)
    alerts = set(alert_exprs())

    def all_evaluated() -> bool:
        rules = [r for r in prom.rules() if r["type"] == "alerting"]
        return {r["name"] for r in rules} == alerts and all(r["health"] == "ok" for r in rules)

    wait_for(all_evaluated, 60, interval=0.5, what="every alert rule loaded and evaluated ok")


@pytest.mark.parametrize(
    ("job", "prefix"),
    [("nsqd", "nsq_"), ("nsqlookupd", "nsqlookupd_"), ("nsqadmin", "nsqadmin_")],
)
def test_every_native_family_returns_series(stack: Stack, job: str, prefix: str) -> None:
    """Every sample name of the daemon's own families in a live scrape is a series in
    Prometheus (under the job that scrapes it)."""
    names = sorted(n for n in stack.families[job] if n.startswith(prefix))
    if not names:
        pytest.skip(f"{job} has no /metrics")
    if job == "nsqd":
        assert "nsq_channel_depth" in names and "nsq_topic_messages_total" in names
    exprs = [f'{n}{{job="{job}"}}' for n in names]
    found = stack.prom.wait_series(exprs, timeout=90)
    assert set(found) == set(exprs)


def test_dashboard_panels_return_series(stack: Stack) -> None:
    queries = dashboard_queries()
    have_repl = _has_replication(stack)
    run = [q for _, q in queries if have_repl or not _needs(q, "nsq_replication_")]
    found = stack.prom.wait_series(run, timeout=120)
    assert len(found) == len(set(run))
    if not have_repl:
        pytest.skip(f"replication panels not run: {_no_replication_reason(stack)}")


# Panel queries over lovoo/nsq_exporter's families (collector/stats_topic.go and
# stats_channel.go: per topic and per channel gauges labelled topic, channel, paused and, in its
# 1.0.x releases, type). No public Grafana dashboard built on these names was found in the
# searchable sources (GitHub code and web pages), so these are the queries such a dashboard's
# panels make, one per family and label shape, for each of the exporter's two layouts.
NSQ_EXPORTER_QUERIES = {
    "nsq_exporter_v1": [
        'sum by (topic) (nsq_depth{type="topic"})',
        'sum by (topic, channel) (nsq_depth{type="channel"})',
        'sum by (topic, channel) (nsq_backend_depth{type="channel"})',
        'sum by (topic) (deriv(nsq_message_count{type="topic"}[1m]))',
        'sum by (topic, channel) (deriv(nsq_message_count{type="channel"}[1m]))',
        'sum by (topic, channel) (nsq_in_flight_count{type="channel"})',
        'sum by (topic, channel) (nsq_deferred_count{type="channel"})',
        'sum by (topic, channel) (deriv(nsq_requeue_count{type="channel"}[1m]))',
        'sum by (topic, channel) (deriv(nsq_timeout_count{type="channel"}[1m]))',
        'sum by (topic, channel) (nsq_client_count{type="channel"})',
        'sum by (topic) (nsq_channel_count{type="topic"})',
        'max by (topic, channel) (nsq_e2e_latency_99p{type="channel"}) / 1e9',
        'max by (topic, channel) (nsq_e2e_latency_95p{type="channel"}) / 1e9',
        'max by (topic) (nsq_e2e_latency_99_percentile{type="topic"}) / 1e9',
        'count by (topic, paused) (nsq_depth{type="topic"})',
    ],
    "nsq_exporter": [
        'sum by (topic) (nsq_topic_depth{paused="false"})',
        'sum by (topic, channel) (nsq_channel_depth{paused="false"})',
        'sum by (topic, channel) (nsq_channel_backend_depth{paused=~"true|false"})',
        "sum by (topic) (deriv(nsq_topic_message_count[1m]))",
        "sum by (topic, channel) (deriv(nsq_channel_message_count[1m]))",
        "sum by (topic, channel) (nsq_channel_in_flight_count)",
        "sum by (topic, channel) (nsq_channel_deferred_count)",
        "sum by (topic, channel) (deriv(nsq_channel_requeue_count[1m]))",
        "sum by (topic, channel) (deriv(nsq_channel_timeout_count[1m]))",
        "sum by (topic, channel) (nsq_channel_client_count)",
        "sum by (topic) (nsq_topic_channel_count)",
        "max by (topic, channel) (nsq_channel_e2e_latency_99p) / 1e9",
        "max by (topic) (nsq_topic_e2e_latency_95_percentile) / 1e9",
    ],
}


@pytest.mark.parametrize("layout", sorted(NSQ_EXPORTER_QUERIES))
def test_nsq_exporter_dashboard_queries_return_series(stack: Stack, layout: str) -> None:
    if layout not in stack.compat:
        pytest.skip("nsqpy-d has no --metrics-compat flag")
    queries = NSQ_EXPORTER_QUERIES[layout]
    found = stack.prom.wait_series(queries, timeout=90)
    assert len(found) == len(queries)
    # and they read the compat node (job = its layout), not nsqpy's own families elsewhere
    for q in queries:
        name = re.search(r"\b(nsq_[a-z0-9_]+)", q).group(1)  # type: ignore[union-attr]
        assert name in stack.families[layout], (layout, name)


#: A public dashboard built on lovoo/nsq_exporter, queries kept verbatim: the panel queries
#: listed in the README.md of github.com/zt102545/new_nsq_exporter (a maintained fork of
#: lovoo/nsq_exporter, scraped as job "nsq"): CPU use, the process's memory, messages received,
#: backlog, and load. nsq_exporter exports its own process_* families; nsqpy-d exports its own,
#: which is what the panel means (the broker's CPU and memory) once no exporter sits between.
PUBLIC_NSQ_EXPORTER_DASHBOARD = [
    'avg(irate(process_cpu_seconds_total{job="nsq"}[5m])) by (instance) * 100',
    'process_resident_memory_bytes{job="nsq"}',
    "nsq_topic_message_count",
    "nsq_topic_depth",
    "sum(irate(nsq_topic_message_count{}[5m]))",
]


def test_public_nsq_exporter_dashboard_queries_return_series(stack: Stack) -> None:
    """The public dashboard's queries, as written, return series from nsqpy-d with
    ``--metrics-compat=nsq_exporter`` through Prometheus."""
    if "nsq_exporter" not in stack.compat:
        pytest.skip("nsqpy-d has no --metrics-compat flag")
    found = stack.prom.wait_series(PUBLIC_NSQ_EXPORTER_DASHBOARD, timeout=90)
    assert set(found) == set(PUBLIC_NSQ_EXPORTER_DASHBOARD)


#: Each alert's expression in a form that returns series in a healthy cluster under the module's
#: traffic: the compared series without the threshold (or, for an absent() rule, the series
#: whose absence it watches). A new alert in nsq-alerts.yml needs its entry here.
OBSERVABLE = {
    "NsqdDown": 'up{job="nsqd"}',
    "NsqdTargetsMissing": 'up{job="nsqd"}',
    "NsqdUnhealthy": "nsq_healthy",
    "NsqdFileDescriptorsNearLimit": 'process_open_fds{job="nsqd"} / process_max_fds{job="nsqd"}',
    "NsqTopicDepthHigh": "nsq_topic_depth unless nsq_topic_paused == 1",
    "NsqChannelDepthHigh": "nsq_channel_depth unless nsq_channel_paused == 1",
    "NsqChannelDepthGrowing": (
        "deriv(nsq_channel_depth[15m]) and nsq_channel_depth unless nsq_channel_paused == 1"
    ),
    "NsqChannelNoConsumers": (
        "nsq_channel_depth > 0 and nsq_channel_clients == 0 unless nsq_channel_paused == 1"
    ),
    "NsqChannelTimeouts": "rate(nsq_channel_timed_out_total[5m])",
    "NsqChannelRequeues": "rate(nsq_channel_requeued_total[5m])",
    "NsqChannelDeadLetters": "increase(nsq_channel_dead_lettered_total[15m])",
    "NsqChannelLatencyHigh": 'nsq_channel_e2e_processing_latency_seconds{quantile="0.99"}',
    "NsqReplicationIsrBelowPlacement": (
        "max by (topic) (nsq_replication_replicas - nsq_replication_isr)"
    ),
    "NsqReplicationIsrBelowMinIsr": (
        "max by (topic) (nsq_replication_min_isr - nsq_replication_isr)"
    ),
    "NsqReplicationNoLeader": "sum by (topic) (nsq_replication_is_leader)",
    "NsqReplicationFollowerLagGrowing": (
        "deriv(nsq_replication_follower_lag_entries[10m]) and nsq_replication_follower_lag_entries"
    ),
    "NsqReplicationFollowerStalled": "nsq_replication_follower_lag_seconds",
    "NsqReplicationPublishesRefused": "increase(nsq_replication_min_isr_refused_total[5m])",
}
#: Alerts whose condition the module's traffic makes true: their expression as written returns
#: series (the "archive" channel has a backlog and no consumer).
TRUE_HERE = {"NsqChannelNoConsumers"}


def test_alert_rule_expressions(stack: Stack) -> None:
    rules = alert_exprs()
    assert set(OBSERVABLE) == set(rules), "every alert has an observable form here"
    for expr in rules.values():
        stack.prom.query(expr)  # evaluates (PromQLError otherwise)
    replication = {a for a, expr in rules.items() if _needs(expr, "nsq_replication_")}
    have_repl = _has_replication(stack)
    run = [a for a in rules if have_repl or a not in replication]
    stack.prom.wait_series([OBSERVABLE[a] for a in run], timeout=90)
    stack.prom.wait_series([rules[a] for a in TRUE_HERE], timeout=90)
    # and NsqdTargetsMissing, the absent() rule, is quiet while nsqd targets exist
    assert stack.prom.query(rules["NsqdTargetsMissing"]) == []
    # Prometheus's rule evaluation itself holds the true one as an alert (pending: its "for"
    # has not passed), for the channel with a backlog and no consumer, on each node
    wanted = {(n.http_address, "orders", "archive") for n in stack.nodes}

    def pending() -> bool:
        got = {
            (a["labels"]["instance"], a["labels"]["topic"], a["labels"]["channel"])
            for a in stack.prom.alerts()
            if a["labels"]["alertname"] == "NsqChannelNoConsumers"
        }
        return wanted <= got

    wait_for(pending, 60, interval=0.5, what="NsqChannelNoConsumers pending for orders/archive")
    if not have_repl:
        pytest.skip(f"replication alerts not run: {_no_replication_reason(stack)}")


def test_follower_killed_shows_in_isr_queries(stack: Stack) -> None:
    """kill -9 of a follower of the replicated topic: through Prometheus, the ISR drops below
    the placement for that topic, so the alert's expression returns it."""
    if not _has_replication(stack):
        pytest.skip(_no_replication_reason(stack))
    assert stack.cluster is not None
    leader = stack.cluster.leader("ledger")
    victim = next(n for n in stack.replicated if n is not leader)
    victim.kill()
    leader.mpub("ledger", [b"after-%d" % i for i in range(5)])
    gap = stack.prom.wait_series(
        [
            (
                'max by (topic) (nsq_replication_replicas{topic="ledger"}'
                ' - nsq_replication_isr{topic="ledger"}) == 1'
            )
        ],
        timeout=90,
    )
    assert gap
    # the alert's condition is now true for the topic, and Prometheus holds the alert
    # (pending until its "for" has passed)
    firing = stack.prom.wait_series([alert_exprs()["NsqReplicationIsrBelowPlacement"]], 30)
    assert firing
    wait_for(
        lambda: any(
            a["labels"]["alertname"] == "NsqReplicationIsrBelowPlacement"
            and a["labels"].get("topic") == "ledger"
            for a in stack.prom.alerts()
        ),
        60,
        interval=0.5,
        what="NsqReplicationIsrBelowPlacement pending for ledger",
    )
