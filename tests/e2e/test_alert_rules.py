"""docker/prometheus/: the alerting rules for nsqpy-d's /metrics and the config that loads them.

``promtool`` (Debian's ``prometheus`` package) checks the rule file and the config and runs the
rules' unit tests (nsq-alerts.test.yml: a series per alert that fires it, and look-alikes that
must not); those tests skip, saying so, where promtool is missing. Without promtool the rules
are still held to what a real nsqpy-d exports: every metric name an alert or its unit test
uses must appear in a scrape of the daemon.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.daemons import ROOT

from nsqpy.replication.metrics import NAMES as REPLICATION_NAMES

pytestmark = pytest.mark.timeout(60)

DIR = ROOT / "docker" / "prometheus"
RULES = DIR / "nsq-alerts.yml"
UNIT_TESTS = DIR / "nsq-alerts.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian package 'prometheus' provides it)",
)

# PromQL words that look like metric names but are not (functions, operators, keywords)
_PROMQL_WORDS = {"and", "or", "unless", "on", "ignoring", "by", "without", "bool", "offset"}
_PROMQL_WORDS |= {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "group"}
# series from Prometheus itself rather than from nsqpy-d
_SCRAPE_SERIES = {"up"}


def promtool(*args: str, cwd: Path = DIR) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=30)


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (identifiers not followed by "(")."""
    no_labels = re.sub(r"\{[^}]*\}", "", expr)
    no_labels = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", no_labels
    )
    no_ranges = re.sub(r"\[[^\]]*\]", "", no_labels)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", no_ranges))
    return names - _PROMQL_WORDS


@needs_promtool
def test_promtool_check_rules():
    r = promtool("check", "rules", RULES.name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in r.stdout


@needs_promtool
def test_promtool_unit_tests_fire_each_alert():
    r = promtool("test", "rules", UNIT_TESTS.name)
    assert r.returncode == 0, r.stdout + r.stderr
    # every alert is exercised by at least one firing case
    tested = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for group in tested
        for case in group["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in alert_rules()}


@needs_promtool
def test_promtool_check_config():
    r = promtool("check", "config", "prometheus.yml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_is_documented():
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_rules_use_names_nsqpy_d_exports(daemon_factory):
    """Every series an alert (or its unit test) reads is in a real scrape: names and the
    ``quantile`` label value the latency alert selects. The ``nsq_replication_*`` names
    (served only with --etcd-endpoints) are checked against the replication collector's list,
    which tests/daemon/test_replication_metrics.py holds to a live 3-node scrape."""
    d = daemon_factory("--e2e-processing-latency-percentile=0.99")
    assert d.http("POST", "/topic/create?topic=t")[0] == 200
    assert d.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
    code, body, _ = d.http("GET", "/metrics")
    assert code == 200
    exported: set[str] = set()
    quantiles: set[str] = set()
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            exported.add(s.name)
            if s.name == "nsq_channel_e2e_processing_latency_seconds":
                quantiles.add(s.labels["quantile"])
    used: set[str] = set()
    for rule in alert_rules():
        used |= metric_names(rule["expr"])
    for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for series in group["input_series"]:
            used.add(series["series"].split("{", 1)[0])
    assert used - _SCRAPE_SERIES - exported - REPLICATION_NAMES == set()
    assert {"nsq_replication_isr", "nsq_replication_follower_lag_entries"} <= used
    assert {"nsq_channel_depth", "nsq_channel_clients", "nsq_healthy"} <= used
    assert 'quantile="0.99"' in RULES.read_text() and "0.99" in quantiles
