"""--config FILE (nsqd's TOML config file) and GET/PUT /config/<opt> (nsqd's doConfig).

Keys are nsqd's cfg names (flag name with dashes as underscores, `id`,
`nsqlookupd_tcp_addresses`, `e2e_processing_latency_percentiles`); a flag on the command line
wins over the file (go-options' Resolve). /config answers as nsqd's RespondV1: a string option
raw, anything else as JSON (durations in integer nanoseconds).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.daemons import ROOT

from nsqpy.config import flag_name, option_value, parse_percentiles
from nsqpy.options import Options
from nsqpy.statsd import host_key

pytestmark = pytest.mark.timeout(60)


def write_cfg(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "nsqd.cfg"
    p.write_text(text)
    return p


def cfg(d, opt: str) -> tuple[int, bytes]:
    code, body, _ = d.http("GET", f"/config/{opt}")
    return code, body


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nsqpy", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )


def test_config_file_values_take_effect(daemon_factory, tmp_path):
    path = write_cfg(
        tmp_path,
        """
# an nsqd.cfg
mem_queue_size = 5000
msg_timeout = "30s"
max_msg_size = 100
max_rdy_count = 7
max_req_timeout = 120000          # an integer duration is milliseconds (go-options)
statsd_prefix = "custom.%s"
statsd_mem_stats = false
e2e_processing_latency_percentiles = [0.99, 1.0]
e2e_processing_latency_window_time = "2m"
unknown_key_nsqd_ignores = 1
""",
    )
    d = daemon_factory(f"--config={path}")
    assert cfg(d, "mem_queue_size") == (200, b"5000")
    assert cfg(d, "msg_timeout") == (200, b"30000000000")
    assert cfg(d, "max_req_timeout") == (200, b"120000000000")
    # a string answers raw; "%s" was resolved at start as nsqd.New does
    host = host_key(f"{socket.gethostname()}:{d.http_port}")
    assert cfg(d, "statsd_prefix") == (200, f"custom.{host}.".encode())
    assert cfg(d, "statsd_mem_stats") == (200, b"false")
    # sorted highest first, as from the flag (nsqd keeps a file's order)
    assert cfg(d, "e2e_processing_latency_percentiles") == (200, b"[1,0.99]")
    assert cfg(d, "e2e_processing_latency_window_time") == (200, b"120000000000")
    # behaviour, not only the stored value: --max-msg-size=100 and --max-rdy-count=7
    code, body, _ = d.http("POST", "/pub?topic=t", b"x" * 101)
    assert (code, json.loads(body)) == (413, {"message": "MSG_TOO_BIG"})
    c = d.raw()
    try:
        c.identify()
        c.sub("t", "c")
        c.cmd(b"RDY", b"8")
        ftype, data = c.read_non_heartbeat()
        assert data.startswith(b"E_INVALID"), data
    finally:
        c.close()
    # e2e tracking was switched on by the file
    assert d.http("POST", "/channel/create?topic=t&channel=e")[0] == 200
    ch = [x for x in d.stats(topic="t")["topics"][0]["channels"] if x["channel_name"] == "e"]
    assert ch[0]["e2e_processing_latency"]["percentiles"] is not None


def test_command_line_flag_wins_over_config_file(daemon_factory, tmp_path):
    path = write_cfg(
        tmp_path,
        'mem_queue_size = 5000\nmsg_timeout = "30s"\ntcp_address = "127.0.0.1:1"\n'
        "statsd_mem_stats = false\n",
    )
    # the test daemon's --tcp-address=127.0.0.1:0 is on the command line: it wins over the file
    d = daemon_factory(f"--config={path}", "--mem-queue-size=7", "--statsd-mem-stats=true")
    assert cfg(d, "mem_queue_size") == (200, b"7")
    assert cfg(d, "msg_timeout") == (200, b"30000000000")  # not on the command line: the file
    assert cfg(d, "statsd_mem_stats") == (200, b"true")
    assert d.tcp_port not in (0, 1)


def test_config_file_errors_fail_the_start(tmp_path):
    bad = write_cfg(tmp_path, "mem_queue_size = = 3\n")
    r = run_cli(f"--config={bad}", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    assert r.returncode == 1
    assert f"FATAL: failed to load config file {bad} - " in r.stderr

    r = run_cli("--config=/nonexistent/nsqd.cfg")
    assert r.returncode == 1 and "failed to load config file /nonexistent/nsqd.cfg" in r.stderr

    wrong = write_cfg(tmp_path, 'mem_queue_size = "many"\n')
    r = run_cli(f"--config={wrong}", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    assert r.returncode == 1 and "mem_queue_size" in r.stderr


# ----------------------------------------------------------------------------- /config


def test_config_nsqlookupd_tcp_addresses_get_put(nsqd):
    assert cfg(nsqd, "nsqlookupd_tcp_addresses") == (200, b"[]")
    body = b'["127.0.0.1:1","127.0.0.2:1"]'
    code, got, headers = nsqd.http("PUT", "/config/nsqlookupd_tcp_addresses", body)
    assert (code, got) == (200, body)
    h = {k.lower(): v for k, v in headers.items()}
    assert h["content-type"] == "application/json; charset=utf-8"
    assert h["x-nsq-content-type"] == "nsq; version=1.0"
    assert cfg(nsqd, "nsqlookupd_tcp_addresses") == (200, body)
    # JSON null is a nil []string in Go: stored, and answered as null
    assert nsqd.http("PUT", "/config/nsqlookupd_tcp_addresses", b"null")[:2] == (200, b"null")
    assert nsqd.http("PUT", "/config/nsqlookupd_tcp_addresses", b"[]")[:2] == (200, b"[]")


@pytest.mark.parametrize(
    "opt,body,code,text",
    [
        ("nsqlookupd_tcp_addresses", b"not json", 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b'"127.0.0.1:4160"', 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b"[1, 2]", 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b"", 413, "INVALID_VALUE"),
        ("log_level", b"loud", 400, "INVALID_VALUE"),
        ("msg_timeout", b"1s", 400, "INVALID_OPTION"),
        ("no_such_option", b"1", 400, "INVALID_OPTION"),
    ],
)
def test_config_put_errors(nsqd, opt, body, code, text):
    got_code, got, _ = nsqd.http("PUT", f"/config/{opt}", body)
    assert (got_code, json.loads(got)) == (code, {"message": text})


def test_config_put_too_big_is_413(daemon_factory):
    d = daemon_factory("--max-msg-size=10")
    code, got, _ = d.http("PUT", "/config/nsqlookupd_tcp_addresses", b'["' + b"a" * 20 + b'"]')
    assert (code, json.loads(got)) == (413, {"message": "INVALID_VALUE"})


def test_config_get_values_and_errors(nsqd):
    assert cfg(nsqd, "tcp_address") == (200, b"127.0.0.1:0")
    assert cfg(nsqd, "max_msg_size") == (200, b"1048576")
    assert cfg(nsqd, "msg_timeout") == (200, b"60000000000")
    assert cfg(nsqd, "statsd_interval") == (200, b"60000000000")
    host = host_key(f"{socket.gethostname()}:{nsqd.http_port}")
    assert cfg(nsqd, "statsd_prefix") == (200, f"nsq.{host}.".encode())
    assert cfg(nsqd, "statsd_udp_packet_size") == (200, b"508")
    assert cfg(nsqd, "e2e_processing_latency_percentiles") == (200, b"[]")
    assert cfg(nsqd, "e2e_processing_latency_window_time") == (200, b"600000000000")
    assert cfg(nsqd, "log_level") == (200, b"2")  # lg.INFO
    assert cfg(nsqd, "deflate") == (200, b"true")
    code, body = cfg(nsqd, "queue_scan_interval")  # no flag in nsqd: not reachable
    assert (code, json.loads(body)) == (400, {"message": "INVALID_OPTION"})
    code, body, _ = nsqd.http("POST", "/config/log_level", b"debug")
    assert code == 405


def test_config_put_log_level(nsqd):
    assert nsqd.http("PUT", "/config/log_level", b"debug")[:2] == (200, b"1")
    assert cfg(nsqd, "log_level") == (200, b"1")
    assert nsqd.http("PUT", "/config/log_level", b"error")[:2] == (200, b"4")


# ----------------------------------------------------------------------------- unit


def test_cfg_names_and_option_values():
    assert flag_name("mem_queue_size") == "mem-queue-size"
    assert flag_name("id") == "node-id"
    assert flag_name("nsqlookupd_tcp_addresses") == "lookupd-tcp-address"
    o = Options()
    o.node_id = 7
    assert option_value(o, "id") == (7, True)
    assert option_value(o, "sync_timeout") == (2_000_000_000, True)
    assert option_value(o, "node_id") == (None, False)


def test_percentile_flag_values_are_split_and_sorted_highest_first():
    assert parse_percentiles(("0.5,1.0", "0.99")) == [1.0, 0.99, 0.5]
    assert parse_percentiles(()) == []
