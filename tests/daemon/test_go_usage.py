"""``-h``, ``-help``, ``--help`` (and Go's ``--h``) of the nine Go-flag commands (the six
tools under `nsqpy`, nsqpy-d, nsqpy-lookupd, nsqpy-admin), run as processes: exit 0 and Go's
flag.PrintDefaults layout on stdout, defaults included."""

from __future__ import annotations

import pytest
from support.go_usage_text import COMMANDS, parse_usage, usage


@pytest.mark.parametrize("spelling", ["-h", "-help", "--help", "--h"])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_prints_go_usage(name: str, spelling: str) -> None:
    r = usage(name, spelling)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Usage of {name}:\n"), r.stdout[:200]
    flags = parse_usage(r.stdout)
    assert ("version" in flags) == (name != "to_nsq")  # Go's to_nsq has no -version
    names = [line.split()[0] for line in r.stdout.splitlines()[1:] if line.startswith("  -")]
    assert names == sorted(names)  # flag.VisitAll's order


def test_tool_usage_shows_types_and_defaults() -> None:
    flags = parse_usage(usage("nsq_to_file", "-h").stdout)
    assert flags["max-in-flight"] == (
        "int",
        "max number of messages to allow in flight (default 200)",
    )
    assert flags["channel"][0] == "string" and flags["channel"][1].endswith(
        '(default "nsq_to_file")'
    )
    assert flags["sync-interval"][0] == "duration"
    assert flags["sync-interval"][1].endswith("(default 30s)")
    assert flags["topic"][0] == "value" and "(default" not in flags["topic"][1]
    assert flags["gzip"][0] is None and "(default" not in flags["gzip"][1]
    assert flags["rotate-size"][0] == "rotate-size"  # a name in back quotes names the value
    assert "(default" not in flags["rotate-interval"][1]  # 0s is the zero value: not shown
    to_http = parse_usage(usage("nsq_to_http", "--help").stdout)
    assert to_http["sample"] == ("float", "% of messages to publish (float b/w 0 -> 1) (default 1)")


def test_help_after_other_flags_and_as_a_flag_value() -> None:
    r = usage("nsqpy-d", "--mem-queue-size=5", "-help")
    assert r.returncode == 0 and r.stdout.startswith("Usage of nsqpy-d:\n"), r.stderr
    # a value is a value, as in Go: "-h" here is the topic's name, not a help request
    r = usage("nsq_tail", "--topic", "-h", "--nsqd-tcp-address=127.0.0.1:1", "--n=1", "--x")
    assert r.returncode == 2 and "Usage of" not in r.stdout


def test_daemon_usage_shows_types_and_defaults() -> None:
    flags = parse_usage(usage("nsqpy-d", "-help").stdout)
    assert flags["mem-queue-size"][0] == "int" and flags["mem-queue-size"][1].endswith(
        "(default 10000)"
    )
    assert flags["msg-timeout"][0] == "duration"
    assert flags["msg-timeout"][1].endswith("(default 1m0s)")
    assert flags["snappy"][0] is None and flags["snappy"][1].endswith("(default true)")
    assert flags["log-level"][0] == "value" and flags["log-level"][1].endswith("(default INFO)")
    assert flags["tcp-address"][1].endswith('(default "0.0.0.0:4150")')
    assert flags["lookupd-tcp-address"][0] == "value"
    lookupd = parse_usage(usage("nsqpy-lookupd", "-h").stdout)
    assert lookupd["tombstone-lifetime"] == (
        "duration",
        "duration of time a producer will remain tombstoned if registration remains (default 45s)",
    )
