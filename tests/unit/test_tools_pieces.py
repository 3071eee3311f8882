"""The pure pieces of the `nsqpy` Go tools: Go flag syntax on the tools' flag tables, go-nsq's
``name,value`` options, go-hostpool's order and retries, nsq_to_nsq's JSON filter and Go's
JSON text, nsq_to_http's GET URLs and headers, nsq_stat's line, to_nsq's stdin splitting."""

from __future__ import annotations

import asyncio
import os

import pytest

from nsqpy.internal.clusterinfo import types as ci
from nsqpy.tools import flags, nsq_stat, nsq_tail, nsq_to_file
from nsqpy.tools.hostpool import INITIAL_RETRY_DELAY, HostPool
from nsqpy.tools.nsq_to_http import get_url, parse_headers
from nsqpy.tools.nsq_to_nsq import Backoff, JsonFilter, go_float
from nsqpy.tools.to_nsq import pieces


def test_tools_flags_take_go_spellings() -> None:
    argv = [
        "-topic", "a", "--topic=b", "-nsqd-tcp-address=127.0.0.1:4150", "-n", "5",
        "-print-topic", "--consumer-opt=max_attempts,3", "-consumer-opt", "snappy",
    ]  # fmt: skip
    o = flags.parse("nsq_tail", nsq_tail.FLAGS, argv)
    assert o is not None
    assert o["topic"] == ["a", "b"] and o["n"] == 5 and o["print_topic"] is True
    assert o["nsqd_tcp_address"] == ["127.0.0.1:4150"]
    assert o["consumer_opt"] == ["max_attempts,3", "snappy"]
    assert o["max_in_flight"] == 200 and o["channel"] == ""


def test_tools_flags_durations_and_booleans() -> None:
    o = flags.parse(
        "nsq_to_file",
        nsq_to_file.FLAGS,
        ["-gzip=false", "--rotate-interval", "1m30s", "-sync-interval=250ms", "-topic=x"],
    )
    assert o is not None
    assert o["gzip"] is False and o["rotate_interval"] == 90.0 and o["sync_interval"] == 0.25
    assert o["topic_refresh"] == 60.0 and o["gzip_level"] == 6


def test_tools_flags_refuse_unknown_and_bad_values() -> None:
    with pytest.raises(SystemExit) as e:
        flags.parse("nsq_stat", nsq_stat.FLAGS, ["--no-such-flag=1"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        flags.parse("nsq_stat", nsq_stat.FLAGS, ["--interval=5"])  # Go needs a unit
    with pytest.raises(SystemExit):
        flags.parse("nsq_stat", nsq_stat.FLAGS, ["--count=1_0"])


def test_tools_go_nsq_option_split() -> None:
    assert flags.split_opt("max_attempts,3") == ("max_attempts", "3")
    assert flags.split_opt("tls_v1") == ("tls_v1", True)
    assert flags.split_opt("a,b,c") == ("a", "b,c")


def test_tools_hostpool_round_robin_and_dead_hosts() -> None:
    now = [0.0]
    pool = HostPool(["a", "b", "c"], clock=lambda: now[0])
    assert [pool.get() for _ in range(4)] == ["a", "b", "c", "a"]
    pool.mark("b", False)
    assert [pool.get() for _ in range(3)] == ["c", "a", "c"]
    now[0] = INITIAL_RETRY_DELAY + 1  # b is due for a retry: handed out once
    assert [pool.get() for _ in range(3)] == ["a", "b", "c"]
    assert pool.get() == "a"
    pool.mark("b", True)
    assert [pool.get() for _ in range(2)] == ["b", "c"]
    for h in "abc":
        pool.mark(h, False)
    assert pool.get() == "a"  # all dead: reset, the first one


def test_tools_json_filter_rules() -> None:
    f = JsonFilter("b", "", ["a", "c", "b"])
    assert f.apply(b'{"a":1,"b":"x<y","c":2.5,"z":true}') == b'{"a":1,"b":"x\\u003cy","c":2.5}'
    assert f.apply(b'{"a":1}') is None  # required field missing: dropped
    assert f.apply(b"[1]") is None and f.apply(b"nope") is None
    assert f.apply(b'{"b":{"k":3.0,"j":[1e21,1e-7]}}') == b'{"b":{"j":[1e+21,1e-07],"k":3}}'
    assert f.apply(b'{"b":1,"a":1e21}') == b'{"a":1e+21,"b":1}'
    v = JsonFilter("b", "7", [])
    assert v.apply(b'{"b":7.0}') == b'{"b":7.0}' and v.apply(b'{"b":"7"}') == b'{"b":"7"}'
    assert v.apply(b'{"b":true}') is None and v.apply(b'{"b":8}') is None
    with pytest.raises(Backoff):
        v.apply(b'{"c":1}')  # a required value with the field missing: backoff
    s = JsonFilter("b", "yes", [])
    assert s.apply(b'{"b":"yes"}') is not None and s.apply(b'{"b":1}') is None


@pytest.mark.parametrize(
    "f,text",
    [(2.5, "2.5"), (3.0, "3"), (1e20, "100000000000000000000"), (1e21, "1e+21"),
     (1e-6, "0.000001"), (1e-7, "1e-07"), (-1.5e-10, "-1.5e-10"), (123456789.125, "123456789.125")],
)  # fmt: skip
def test_tools_go_float_text(f: float, text: str) -> None:
    assert go_float(f) == text


def test_tools_get_url_and_headers() -> None:
    assert get_url("http://h/p?m=%s&x=100%%", b"a b&c/\xc3\xbc~") == (
        "http://h/p?m=a+b%26c%2F%C3%BC~&x=100%"
    )
    assert parse_headers(["X-A: 1", "B:two:three"]) == {"X-A": "1", "B": "two:three"}
    for bad in ("novalue", "k:", ":v"):
        with pytest.raises(ValueError):
            parse_headers([bad])


def _channel_row(counters: dict[str, int]) -> dict:
    """One node's row of channel "c" of topic "t", as the cluster-info layer reads nsqd's /stats."""
    body = {"topics": [{"topic_name": "t", "channels": [{"channel_name": "c", **counters}]}]}
    return ci.node_topic_stats(body, "n:1", "h")[0]["channels"][0]


def test_tools_nsq_stat_line() -> None:
    # nsq_stat prints the cluster-wide channel (ChannelStats.Add over the nodes' rows)
    prev, cur = ci.new_channel_total("t", "c"), ci.new_channel_total("t", "c")
    ci.channel_add(prev, _channel_row({"message_count": 10, "depth": 4}))
    counters = {"message_count": 25, "depth": 6, "backend_depth": 2, "in_flight_count": 3}
    counters.update(deferred_count=1, requeue_count=2, timeout_count=1, client_count=2)
    ci.channel_add(cur, _channel_row(counters))
    line = nsq_stat.format_line(cur, prev, 2.0)
    assert line == (
        "      7       6 |       6       4       2     3     1 |"
        "       2       1           25       2\n"
    )
    assert nsq_stat.HEADER.splitlines()[1] == (
        "ingress  egress |   total     mem    disk inflt   def |"
        "     req     t-o         msgs clients"
    )


def test_tools_to_nsq_pieces_split_at_the_delimiter() -> None:
    async def collect(data: bytes, delim: bytes) -> list[bytes]:
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        try:
            return [p async for p in pieces(r, delim)]
        finally:
            os.close(r)

    assert asyncio.run(collect(b"a\n\nbb\nc", b"\n")) == [b"a", b"bb", b"c"]
    assert asyncio.run(collect(b"x,y,", b",")) == [b"x", b"y"]
    assert asyncio.run(collect(b"", b"\n")) == []


def test_tools_client_options_as_go_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from nsqpy.tools.runtime import make_config

    cfg = make_config("nsq_tail", ["max_attempts,3", "snappy", "read-timeout,90s"], 7)
    assert (cfg.max_attempts, cfg.snappy, cfg.read_timeout, cfg.max_in_flight) == (3, True, 90, 7)
    assert cfg.user_agent.startswith("nsq_tail/1.3.0 nsqpy/")
    with pytest.raises(SystemExit) as e:
        make_config("nsq_tail", ["bogus,1"])
    assert e.value.code == 2 and 'invalid value "bogus,1" for flag -consumer-opt' in (
        capsys.readouterr().err
    )
    lenient = make_config("nsq_to_file", ["bogus,1", "max_attempts,4"], strict=False)
    assert lenient.max_attempts == 4  # nsq_to_file ignores a bad option, as Go's does
