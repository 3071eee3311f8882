"""nsqpy.client.Config: go-nsq's defaults, Config.set with the Go tools' spellings
(``--consumer-opt=name,value``), go-nsq's bounds, the IDENTIFY body and the TLS context."""

from __future__ import annotations

import ssl

import pytest

from nsqpy.client import Config
from nsqpy.client.conn import NSQError, split_addr
from nsqpy.client.lookup import join_host_port, lookup_url


def test_client_config_defaults_are_go_nsqs():
    c = Config()
    assert (c.dial_timeout, c.read_timeout, c.write_timeout) == (1.0, 60.0, 1.0)
    assert (c.lookupd_poll_interval, c.lookupd_poll_jitter) == (60.0, 0.3)
    assert (c.max_requeue_delay, c.default_requeue_delay) == (900.0, 90.0)
    assert (c.backoff_multiplier, c.max_backoff_duration, c.max_attempts) == (1.0, 120.0, 5)
    assert (c.low_rdy_idle_timeout, c.heartbeat_interval, c.sample_rate) == (10.0, 30.0, 0)
    assert (c.output_buffer_size, c.output_buffer_timeout) == (16384, 0.25)
    assert (c.max_in_flight, c.msg_timeout, c.deflate_level) == (1, 0.0, 6)
    assert not (c.tls_v1 or c.snappy or c.deflate or c.auth_secret)
    assert c.client_id and "." not in c.client_id and c.hostname.startswith(c.client_id)
    c.validate()


@pytest.mark.parametrize(
    "name, value, field, want",
    [
        ("tls_v1", "true", "tls_v1", True),
        ("tls-v1", "1", "tls_v1", True),
        ("snappy", "F", "snappy", False),
        ("max_in_flight", "200", "max_in_flight", 200),
        ("max-in-flight", 3, "max_in_flight", 3),
        ("heartbeat_interval", "30s", "heartbeat_interval", 30.0),
        ("output_buffer_timeout", "250ms", "output_buffer_timeout", 0.25),
        ("lookupd_poll_interval", "1m30s", "lookupd_poll_interval", 90.0),
        ("msg_timeout", 2.5, "msg_timeout", 2.5),
        ("lookupd_poll_jitter", "0.5", "lookupd_poll_jitter", 0.5),
        ("deflate_level", "9", "deflate_level", 9),
        ("auth_secret", "s3cret", "auth_secret", "s3cret"),
        ("tls_root_ca_file", "/tmp/ca.pem", "tls_root_ca_file", "/tmp/ca.pem"),
        ("tls_min_version", "tls1.2", "tls_min_version", "tls1.2"),
    ],
)
def test_client_config_set_go_spellings(name, value, field, want):
    c = Config()
    c.set(name, value)
    assert getattr(c, field) == want


@pytest.mark.parametrize(
    "name, value, why",
    [
        ("no_such_option", "1", "invalid option"),
        ("tls_context", "x", "invalid option"),
        ("tls_v1", "yes", "failed to coerce"),
        ("max_in_flight", "2.5", "failed to coerce"),
        ("heartbeat_interval", "30", "failed to coerce"),  # Go wants a unit
        ("read_timeout", "10ms", "< 0.1"),
        ("read_timeout", "6m", "> 300"),
        ("deflate_level", "10", "> 9"),
        ("sample_rate", "100", "> 99"),
        ("lookupd_poll_jitter", "1.5", "> 1"),
        ("max_attempts", "-1", "< 0"),
        ("tls_min_version", "tls9", "not a tls version"),
    ],
)
def test_client_config_set_refuses(name, value, why):
    c = Config()
    before = Config(**{k: getattr(c, k) for k in ("client_id", "hostname")})
    with pytest.raises(ValueError, match=why.replace(".", r"\.")):
        c.set(name, value)
    assert c == before


def test_client_config_set_flag_is_go_nsqs_config_flag():
    c = Config()
    c.set_flag("max_in_flight,200")
    c.set_flag("tls_v1")  # bare name: true
    c.set_flag("user_agent,nsq_tail/1.3.0 go-nsq/1.1.0,extra")  # split at the first comma
    c.set_flag("heartbeat-interval,10s")
    assert (c.max_in_flight, c.tls_v1, c.heartbeat_interval) == (200, True, 10.0)
    assert c.user_agent == "nsq_tail/1.3.0 go-nsq/1.1.0,extra"
    with pytest.raises(ValueError, match="invalid option"):
        c.set_flag("nope,1")
    with pytest.raises(ValueError, match="failed to coerce"):
        c.set_flag("max_in_flight")  # bare: true, not an int... as Go refuses


def test_client_config_validate_heartbeat_vs_read_timeout():
    with pytest.raises(ValueError, match="heartbeat_interval"):
        Config(heartbeat_interval=61).validate()
    with pytest.raises(ValueError, match="max_in_flight"):
        Config(max_in_flight=-1).validate()


def test_client_config_identify_body_in_ms():
    body = Config(heartbeat_interval=0, output_buffer_timeout=0.1, msg_timeout=2).identify_body()
    assert body["heartbeat_interval"] == -1
    assert body["output_buffer_timeout"] == 100
    assert body["msg_timeout"] == 2000
    assert body["feature_negotiation"] is True
    assert body["short_id"] == body["client_id"] and body["long_id"] == body["hostname"]
    assert Config().identify_body()["heartbeat_interval"] == 30000


def test_client_config_ssl_context():
    c = Config(tls_insecure_skip_verify=True, tls_min_version="tls1.2")
    ctx = c.ssl_context()
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    mine = ssl.create_default_context()
    assert Config(tls_context=mine).ssl_context() is mine
    assert Config().ssl_context().verify_mode == ssl.CERT_REQUIRED


def test_client_nsq_error_and_addresses():
    e = NSQError.from_frame(b'E_BAD_TOPIC PUB topic name "a b" is not valid')
    assert (e.code, e.fatal) == ("E_BAD_TOPIC", True)
    assert e.text.startswith("PUB topic name")
    assert NSQError.from_frame(b"E_FIN_FAILED FIN x failed").fatal is False
    assert split_addr("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert split_addr("[::1]:4150") == ("::1", 4150)
    with pytest.raises(ValueError):
        split_addr("localhost")
    assert join_host_port("::1", 4150) == "[::1]:4150"
    assert lookup_url("127.0.0.1:4161", "a#ephemeral") == (
        "http://127.0.0.1:4161/lookup?topic=a%23ephemeral"
    )
    assert lookup_url("https://lk.example/x/lookup", "t") == "https://lk.example/x/lookup?topic=t"
