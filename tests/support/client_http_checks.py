"""The checks of nsqpy.client's HTTP admin clients (NsqdHTTPClient, LookupdClient and their
blocking wrappers), written once and run against any nsqd and nsqlookupd pair: nsqpy-d with
nsqpy-lookupd (tests/daemon/test_client_http.py), and Go's nsqd and nsqlookupd 1.3 side by side
with them (tests/interop/test_client_http_go.py).

Each check is a coroutine taking a ``Pair`` (an nsqd registered with a lookupd, broadcasting
127.0.0.1); it names its own topics, so the checks share one pair. Waits are on conditions
(``eventually``), bounded wide."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from nsqpy.client import (
    BlockingLookupdClient,
    BlockingNsqdHTTPClient,
    LookupdClient,
    NsqdHTTPClient,
    NSQHTTPError,
    Producer,
)
from nsqpy.client.stats import ChannelStats, ClientStats, NsqdStats, PubCount, TopicStats

WAIT = 15.0  # seconds: a bound for conditions, never a timing expectation


@dataclass(frozen=True)
class Pair:
    """An nsqd (its TCP and HTTP ``host:port``) registered with a lookupd (its HTTP)."""

    impl: str  # "nsqpy" or "go"
    nsqd_tcp: str
    nsqd_http: str
    lookupd_http: str

    @property
    def nsqd_tcp_port(self) -> int:
        return int(self.nsqd_tcp.rsplit(":", 1)[1])

    @property
    def nsqd_http_port(self) -> int:
        return int(self.nsqd_http.rsplit(":", 1)[1])


async def eventually(
    get: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool], what: str
) -> Any:
    """Poll ``get()`` until ``ok`` holds for its value (returned); AssertionError naming
    ``what`` and the last value after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while True:
        value = await get()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {value!r}")
        await asyncio.sleep(0.05)


async def topic_stats(c: NsqdHTTPClient, topic: str) -> TopicStats:
    t = (await c.stats(topic=topic)).topic(topic)
    assert t is not None, topic
    return t


async def channel_stats(c: NsqdHTTPClient, topic: str, channel: str) -> ChannelStats:
    ch = (await topic_stats(c, topic)).channel(channel)
    assert ch is not None, (topic, channel)
    return ch


# ------------------------------------------------------------------------------------ checks


async def check_ping_and_info(p: Pair) -> None:
    async with NsqdHTTPClient(p.nsqd_http) as nsqd, LookupdClient(p.lookupd_http) as lk:
        assert await nsqd.ping() == "OK"
        assert await lk.ping() == "OK"
        info = await nsqd.info()
        assert info["version"] == "1.3.0"
        assert (info["tcp_port"], info["http_port"]) == (p.nsqd_tcp_port, p.nsqd_http_port)
        assert info["broadcast_address"] == "127.0.0.1"
        assert (await lk.info())["version"] == "1.3.0"


async def check_publish_and_stats(p: Pair) -> None:
    topic, channel = "pub_stats", "ch"
    async with NsqdHTTPClient(p.nsqd_http) as c:
        await c.create_topic(topic)
        await c.create_channel(topic, channel)
        await c.pub(topic, b"one")
        await c.mpub(topic, [b"two", b"three"])
        await c.mpub(topic, [b"four\nwith a newline", b"\x00five"], binary=True)
        await c.pub(topic, b"later", defer=3600)
        # Go's nsqd copies a message to the channels after answering (topic.go messagePump)
        await eventually(
            lambda: channel_stats(c, topic, channel),
            lambda ch: (ch.depth, ch.deferred_count) == (5, 1),
            "five messages and one deferred in the channel",
        )
        stats = await c.stats(include_mem=True)
        assert isinstance(stats, NsqdStats)
        assert stats.version == "1.3.0" and stats.health == "OK" and stats.start_time > 0
        assert stats.memory is not None and "heap_objects" in stats.memory
        t = stats.topic(topic)
        assert t is not None and t.message_count == 6 and not t.paused
        assert t.message_bytes == sum(
            map(len, [b"one", b"two", b"three", b"four\nwith a newline", b"\x00five", b"later"])
        )
        assert t.depth == 0
        ch = t.channel(channel)
        assert ch is not None and (ch.depth, ch.deferred_count) == (5, 1)
        assert ch.in_flight_count == 0 and ch.message_count == 6
        assert ch.clients == [] and ch.client_count == 0
        assert ch.e2e_processing_latency.count == 0
        # filtered: one topic, one channel; unknown topic: none
        only = await c.stats(topic=topic, channel=channel)
        assert [x.topic_name for x in only.topics] == [topic]
        assert [x.channel_name for x in only.topics[0].channels] == [channel]
        assert (await c.stats(topic="pub_stats_none")).topics == []
        text = await c.stats_text(topic=topic)
        assert f"[{topic}" in text and f"[{channel}" in text


async def check_clients_in_stats(p: Pair) -> None:
    topic, channel = "client_stats", "ch"
    producer = Producer(p.nsqd_tcp)
    try:
        await producer.publish(topic, b"x")
        await producer.publish(topic, b"y")
        async with NsqdHTTPClient(p.nsqd_http) as c:
            await c.create_channel(topic, channel)
            stats = await c.stats(topic=topic)
            mine = [cl for cl in stats.producers if any(pc.topic == topic for pc in cl.pub_counts)]
            assert len(mine) == 1 and isinstance(mine[0], ClientStats)
            assert PubCount(topic, 2) in mine[0].pub_counts
            assert mine[0].version == "V2" and mine[0].user_agent.startswith("nsqpy")
            assert mine[0].remote_address.startswith("127.0.0.1:")
            bare = await c.stats(topic=topic, include_clients=False)
            assert bare.producers == []
    finally:
        await producer.stop()


async def check_ephemeral_names(p: Pair) -> None:
    """ "#" reaches the daemon as part of the name (quoted in the query)."""
    topic, channel = "ephem#ephemeral", "ch#ephemeral"
    async with NsqdHTTPClient(p.nsqd_http) as c:
        await c.create_topic(topic)
        await c.create_channel(topic, channel)
        t = await topic_stats(c, topic)
        assert [x.channel_name for x in t.channels] == [channel]
        await c.delete_topic(topic)
        assert (await c.stats(topic=topic)).topics == []


async def check_pause_empty_delete(p: Pair) -> None:
    topic, channel = "pause_empty", "ch"
    async with NsqdHTTPClient(p.nsqd_http) as c:
        await c.create_topic(topic)
        await c.create_channel(topic, channel)
        await c.pause_topic(topic)
        await c.pause_channel(topic, channel)
        t = await topic_stats(c, topic)
        assert t.paused and t.channels[0].paused
        await c.unpause_topic(topic)
        await c.unpause_channel(topic, channel)
        t = await topic_stats(c, topic)
        assert not t.paused and not t.channels[0].paused
        await c.mpub(topic, [b"a", b"b", b"c"])
        await eventually(lambda: channel_stats(c, topic, channel), lambda ch: ch.depth == 3, "3")
        await c.empty_channel(topic, channel)
        assert (await channel_stats(c, topic, channel)).depth == 0
        await c.pause_topic(topic)  # held in the topic now
        await c.pub(topic, b"d")
        assert (await topic_stats(c, topic)).depth == 1
        await c.empty_topic(topic)
        assert (await topic_stats(c, topic)).depth == 0
        await c.delete_channel(topic, channel)
        assert (await topic_stats(c, topic)).channels == []
        await c.delete_topic(topic)
        assert (await c.stats(topic=topic)).topics == []


async def check_nsqd_errors(p: Pair) -> None:
    async with NsqdHTTPClient(p.nsqd_http) as c:
        cases: list[tuple[Awaitable[Any], int, str]] = [
            (c.delete_topic("errors_none"), 404, "TOPIC_NOT_FOUND"),
            (c.pause_topic("errors_none"), 404, "TOPIC_NOT_FOUND"),
            (c.empty_channel("errors_none", "ch"), 404, "TOPIC_NOT_FOUND"),
            (c.create_channel("errors_none", "ch"), 404, "TOPIC_NOT_FOUND"),
            (c.pub("errors", b""), 400, "MSG_EMPTY"),
            (c.get_config("no_such_option"), 400, "INVALID_OPTION"),
            (c.put_config("mem_queue_size", 5), 400, "INVALID_OPTION"),
            (c.put_config("log_level", "loud"), 400, "INVALID_VALUE"),
        ]
        for coro, status, text in cases:
            with pytest.raises(NSQHTTPError) as e:
                await coro
            assert (e.value.status, e.value.message) == (status, text)
        await c.create_topic("errors")
        with pytest.raises(NSQHTTPError) as e:
            await c.delete_channel("errors", "none")
        assert (e.value.status, e.value.message) == (404, "CHANNEL_NOT_FOUND")
        with pytest.raises(NSQHTTPError) as e:
            await c.pub("errors", b"x", defer=10 * 24 * 3600)  # beyond --max-req-timeout
        assert (e.value.status, e.value.message) == (400, "INVALID_DEFER")
    # names are checked before any request: a client of a closed port says ValueError
    dead = NsqdHTTPClient("127.0.0.1:1", timeout=5)
    for bad in (
        dead.pub("bad topic", b"x"),
        dead.create_channel("ok", "bad/channel"),
        dead.mpub("x" * 65, [b"x"]),
        dead.mpub("ok", [b"a\nb"]),  # a newline in newline mode
        dead.pause_channel("ok", ""),
        LookupdClient("127.0.0.1:1").lookup("a+b"),
    ):
        with pytest.raises(ValueError):
            await bad
    await dead.close()


async def check_config(p: Pair) -> None:
    async with NsqdHTTPClient(p.nsqd_http) as c:
        assert await c.get_config("mem_queue_size") == 10000
        assert await c.get_config("msg_timeout") == 60_000_000_000  # ns
        assert await c.get_config("broadcast_address") == "127.0.0.1"
        lookupds = await c.get_config("nsqlookupd_tcp_addresses")
        assert isinstance(lookupds, list) and len(lookupds) == 1
        assert await c.put_config("log_level", "debug") == 1
        assert await c.get_config("log_level") == 1
        assert await c.put_config("log_level", "info") == 2
        assert await c.put_config("nsqlookupd_tcp_addresses", lookupds) == lookupds


async def check_lookupd_discovery(p: Pair) -> None:
    topic, channel = "lookup_disc", "ch"
    async with NsqdHTTPClient(p.nsqd_http) as c, LookupdClient(p.lookupd_http) as lk:
        await c.create_topic(topic)
        await c.create_channel(topic, channel)
        found = await eventually(
            lambda: lk.channels(topic), lambda chans: channel in chans, "channel registered"
        )
        assert found == [channel]
        res = await lk.lookup(topic)
        assert res.channels == [channel]
        assert [x.tcp_address for x in res.producers] == [f"127.0.0.1:{p.nsqd_tcp_port}"]
        prod = res.producers[0]
        assert (prod.http_port, prod.version) == (p.nsqd_http_port, "1.3.0")
        assert prod.http_address == f"127.0.0.1:{p.nsqd_http_port}"
        assert prod.remote_address.startswith("127.0.0.1:") and prod.hostname
        assert topic in await lk.topics()
        node = next(n for n in await lk.nodes() if n.tcp_port == p.nsqd_tcp_port)
        i = node.topics.index(topic)
        assert node.tombstones[i] is False and len(node.tombstones) == len(node.topics)
        # tombstoned: out of /lookup, flagged in /nodes
        await lk.tombstone_topic(topic, prod.http_address)
        await eventually(lambda: lk.lookup(topic), lambda r: r.producers == [], "tombstone")
        node = next(n for n in await lk.nodes() if n.tcp_port == p.nsqd_tcp_port)
        assert node.tombstones[node.topics.index(topic)] is True


async def check_lookupd_registry(p: Pair) -> None:
    topic = "lookupd_only"
    async with LookupdClient(p.lookupd_http) as lk:
        with pytest.raises(NSQHTTPError) as e:
            await lk.lookup(topic)
        assert (e.value.status, e.value.message) == (404, "TOPIC_NOT_FOUND")
        await lk.create_topic(topic)
        assert topic in await lk.topics()
        res = await lk.lookup(topic)
        assert (res.channels, res.producers) == ([], [])
        await lk.create_channel(topic, "a")
        await lk.create_channel(topic, "b")
        assert sorted(await lk.channels(topic)) == ["a", "b"]
        await lk.delete_channel(topic, "a")
        assert await lk.channels(topic) == ["b"]
        with pytest.raises(NSQHTTPError) as e:
            await lk.delete_channel(topic, "a")
        assert (e.value.status, e.value.message) == (404, "CHANNEL_NOT_FOUND")
        await lk.delete_topic(topic)
        assert topic not in await lk.topics()
        assert await lk.channels(topic) == []
        await lk.tombstone_topic(topic, "127.0.0.1:1")  # no such producer: nothing to do


def check_blocking_clients(p: Pair) -> None:
    """The blocking wrappers, from this (non-loop) thread."""
    topic = "blocking"
    with BlockingNsqdHTTPClient(p.nsqd_http) as c, BlockingLookupdClient(p.lookupd_http) as lk:
        assert c.ping() == "OK" and lk.ping() == "OK"
        c.create_topic(topic)
        c.create_channel(topic, "ch")
        c.pub(topic, b"x")
        c.mpub(topic, [b"y", b"z"], binary=True)
        deadline = time.monotonic() + WAIT  # Go's topic pump copies after the answer
        while c.stats(topic=topic).topics[0].channels[0].depth != 3:
            assert time.monotonic() < deadline, "three messages in the channel"
            time.sleep(0.05)
        with pytest.raises(NSQHTTPError) as e:
            c.delete_topic("blocking_none")
        assert e.value.message == "TOPIC_NOT_FOUND"
        with pytest.raises(ValueError):
            c.pub("no good", b"x")
        assert lk.info()["version"] == "1.3.0"
        with pytest.raises(AttributeError):
            c.no_such_method()


#: every check, by name; a coroutine function runs under asyncio.run, a plain one as it is
CHECKS: dict[str, Callable[[Pair], Any]] = {
    "ping_and_info": check_ping_and_info,
    "publish_and_stats": check_publish_and_stats,
    "clients_in_stats": check_clients_in_stats,
    "ephemeral_names": check_ephemeral_names,
    "pause_empty_delete": check_pause_empty_delete,
    "nsqd_errors": check_nsqd_errors,
    "config": check_config,
    "lookupd_discovery": check_lookupd_discovery,
    "lookupd_registry": check_lookupd_registry,
    "blocking_clients": check_blocking_clients,
}


def run_check(name: str, pair: Pair) -> None:
    """Run the check called ``name`` against ``pair``."""
    fn = CHECKS[name]
    if asyncio.iscoroutinefunction(fn):
        asyncio.run(fn(pair))
    else:
        fn(pair)
