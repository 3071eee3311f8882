"""nsqpy.client.http and nsqpy.client.stats without a daemon: addresses, error texts, nsqd's
/stats JSON (the shape nsqpy/stats.py emits) read into records, and that importing
nsqpy.client pulls in neither aiohttp nor a daemon module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.daemons import ROOT

from nsqpy.client.http import Producer, _config_value, _error_text, base_url
from nsqpy.client.stats import E2eLatency, NsqdStats, Percentile, PubCount

STATS = {
    "version": "1.3.0",
    "health": "OK",
    "start_time": 1700000000,
    "topics": [
        {
            "topic_name": "t",
            "channels": [
                {
                    "channel_name": "c",
                    "depth": 2,
                    "backend_depth": 1,
                    "in_flight_count": 1,
                    "deferred_count": 0,
                    "message_count": 3,
                    "requeue_count": 0,
                    "timeout_count": 0,
                    "client_count": 1,
                    "clients": [
                        {
                            "client_id": "w",
                            "hostname": "h",
                            "version": "V2",
                            "remote_address": "127.0.0.1:5000",
                            "state": 3,
                            "ready_count": 10,
                            "in_flight_count": 1,
                            "message_count": 1,
                            "finish_count": 0,
                            "requeue_count": 0,
                            "connect_ts": 1700000001,
                            "sample_rate": 0,
                            "deflate": False,
                            "snappy": True,
                            "user_agent": "go-nsq/1.1.0",
                            "tls": False,
                            "tls_cipher_suite": "",
                            "tls_version": "",
                            "tls_negotiated_protocol": "",
                            "tls_negotiated_protocol_is_mutual": False,
                        }
                    ],
                    "paused": True,
                    "e2e_processing_latency": {
                        "count": 5,
                        "percentiles": [{"quantile": 0.99, "value": 1200}],
                    },
                    "max_attempts": 5,
                    "dead_letter_count": 0,
                }
            ],
            "depth": 0,
            "backend_depth": 0,
            "message_count": 3,
            "message_bytes": 9,
            "paused": False,
            "e2e_processing_latency": {"count": 0, "percentiles": None},
            "replication": {"replicas": 1},
        }
    ],
    "producers": [
        {"client_id": "p", "pub_counts": [{"topic": "t", "count": 3}], "state": 0},
    ],
}


def test_stats_records_carry_nsqd_field_names_and_keep_extra_keys() -> None:
    s = NsqdStats.from_json(json.loads(json.dumps(STATS)))
    t = s.topic("t")
    assert t is not None and s.topic("u") is None
    assert (t.message_count, t.message_bytes, t.extra) == (3, 9, {"replication": {"replicas": 1}})
    assert t.e2e_processing_latency == E2eLatency(0, [])
    ch = t.channel("c")
    assert ch is not None and ch.paused and (ch.depth, ch.backend_depth) == (2, 1)
    assert ch.extra == {"max_attempts": 5, "dead_letter_count": 0}
    assert ch.e2e_processing_latency.percentiles == [Percentile(0.99, 1200)]
    cl = ch.clients[0]
    assert (cl.client_id, cl.state, cl.snappy, cl.authed, cl.pub_counts) == (
        "w",
        3,
        True,
        False,
        [],
    )
    assert s.producers[0].pub_counts == [PubCount("t", 3)]
    assert s.memory is None


def test_stats_null_lists_read_as_empty_and_bad_shapes_raise() -> None:
    s = NsqdStats.from_json({"version": "1.3.0", "topics": None, "producers": None})
    assert (s.topics, s.producers) == ([], [])
    with pytest.raises(ValueError):
        NsqdStats.from_json([])
    with pytest.raises(ValueError):
        NsqdStats.from_json({"topics": [{"channels": [{"clients": [{"pub_counts": [{}]}]}]}]})


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1:4151", "http://127.0.0.1:4151"),
        ("[::1]:4151", "http://[::1]:4151"),
        ("https://nsqd.example:4152/", "https://nsqd.example:4152"),
        ("http://proxy/nsqd", "http://proxy/nsqd"),
    ],
)
def test_base_url(address: str, url: str) -> None:
    assert base_url(address) == url


def test_error_text_reads_v1_pre_1_0_and_raw_bodies() -> None:
    assert _error_text(b'{"message":"TOPIC_NOT_FOUND"}') == "TOPIC_NOT_FOUND"
    assert _error_text(b'{"status_code":404,"status_txt":"TOPIC_NOT_FOUND","data":null}') == (
        "TOPIC_NOT_FOUND"
    )
    assert _error_text(b"NOK - unhealthy\n") == "NOK - unhealthy"


def test_config_value_follows_the_content_type() -> None:
    assert _config_value(b"10000", "application/json; charset=utf-8") == 10000
    assert _config_value(b"123", "text/plain; charset=utf-8") == "123"


def test_producer_addresses() -> None:
    p = Producer.from_json({"broadcast_address": "::1", "tcp_port": 1, "http_port": 2, "new": 0})
    assert (p.tcp_address, p.http_address, p.topics) == ("[::1]:1", "[::1]:2", [])


def test_http_names_come_from_nsqpy_client_on_first_use() -> None:
    import nsqpy.client
    from nsqpy.client import http

    assert nsqpy.client.NsqdHTTPClient is http.NsqdHTTPClient
    assert {"LookupdClient", "NSQHTTPError"} <= set(dir(nsqpy.client))
    with pytest.raises(AttributeError):
        nsqpy.client.NoSuchName  # noqa: B018


def test_import_nsqpy_client_stays_light() -> None:
    code = "import sys, nsqpy.client; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    mods = set(out.stdout.split())
    heavy = {"aiohttp", "nsqpy.nsqd", "nsqpy.topic", "nsqpy.channel", "nsqpy.http_api"}
    heavy.add("nsqpy.client.http")  # imported on first use of its names
    assert not heavy & mods
    assert not {m for m in mods if m.startswith(("nsqpy.lookupd", "nsqpy.admin"))}
