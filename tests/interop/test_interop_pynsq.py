"""Interop: the real pynsq client (PyPI, unchanged) publishing and consuming through nsqpy-d."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.daemons import ROOT

from nsqpy.testing import wait_for


def run_roundtrip(nsqd, count: int, timeout: float, topic: str = "roundtrip") -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "tests/clients/pynsq_roundtrip.py",
            "--tcp",
            nsqd.tcp_address,
            "--http",
            nsqd.http_address,
            "--topic",
            topic,
            "--channels",
            "ch1,ch2",
            "--readers",
            "2",
            "--count",
            str(count),
            "--timeout",
            str(timeout),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout + 30,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, (report, proc.stderr[-2000:])
    return report


def check_stats_agree(nsqd, topic: str, count: int) -> None:
    def settled():
        st = nsqd.stats(topic=topic)["topics"][0]
        chans = st["channels"]
        return all(c["in_flight_count"] == 0 for c in chans) and st

    st = wait_for(settled, timeout=10, what="all in-flight messages finished")
    assert st["message_count"] == count
    assert st["depth"] == 0
    assert [c["channel_name"] for c in st["channels"]] == ["ch1", "ch2"]
    for c in st["channels"]:
        assert c["message_count"] == count
        assert c["depth"] == 0
        assert c["in_flight_count"] == 0
        assert c["deferred_count"] == 0
        assert c["requeue_count"] == 0 and c["timeout_count"] == 0


def test_pynsq_writer_and_readers(nsqd):
    count = 5000
    report = run_roundtrip(nsqd, count, timeout=60)
    assert report["pub_commands"] > 0 and report["mpub_commands"] > 0
    for ch in ("ch1", "ch2"):
        r = report["channels"][ch]
        assert (r["received"], r["distinct"], r["missing"], r["duplicates"]) == (count, count, 0, 0)
    # Both readers of each channel took a share.
    assert all(
        report["per_reader"].get(f"{ch}/{i}", 0) > 0 for ch in ("ch1", "ch2") for i in (0, 1)
    ), report["per_reader"]
    check_stats_agree(nsqd, "roundtrip", count)


@pytest.mark.slow
def test_pynsq_50000_messages_two_channels_two_readers_each(nsqd):
    """The issue's acceptance run: defaults, 50,000 messages by PUB and MPUB, channels made
    over HTTP first, two pynsq Readers per channel, each message exactly once per channel."""
    count = 50000
    report = run_roundtrip(nsqd, count, timeout=240, topic="big")
    for ch in ("ch1", "ch2"):
        r = report["channels"][ch]
        assert (r["received"], r["distinct"], r["missing"], r["duplicates"]) == (count, count, 0, 0)
    assert report["bad_ids"] == []
    check_stats_agree(nsqd, "big", count)
