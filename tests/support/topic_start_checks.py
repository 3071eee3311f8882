"""A new topic learns its channels from nsqlookupd before the command that made it is answered
(nsqd/nsqd.go GetTopic: the lookupd query runs before the topic starts, and the HTTP handler or
TCP command answers after it). Written once for any nsqd registered with any lookupd: nsqpy-d
with nsqpy-lookupd (tests/daemon/test_lookup_peer.py) and Go's nsqd with Go's nsqlookupd side by
side with them (tests/interop/test_topic_start_go.py).

``nsqd`` and ``lookupd`` are nsqpy.testing daemon processes (their ``http``, ``post``,
``get_json`` and ports: Go's included); every check names its own topics. After each publish,
nsqpy-d's /stats is read once, at once: no polling, so a message still held by the topic shows
as a failure. Go's nsqd answers a PUB once the message is in the topic's memory channel and
copies it to the channels in the topic's own goroutine (nsqd/topic.go messagePump), so its
/stats is read until the expected depths show or the bound passes: a channel it never learned
still fails (the message stays in the topic)."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from nsqpy.testing import wait_for
from support import gobin
from support.raw_client import RawClient

WAIT = 15.0  # seconds: a bound for conditions, never a timing expectation


def _producers(lookupd: Any, topic: str) -> list[Any]:
    code, body, _ = lookupd.http("GET", "/lookup?" + urllib.parse.urlencode({"topic": topic}))
    return (json.loads(body).get("producers") or []) if code == 200 else []


def wait_registered(nsqd: Any, lookupd: Any) -> None:
    """Wait until ``nsqd`` has read its lookupd's IDENTIFY answer (so it knows the lookupd's
    HTTP address and queries it for new topics): a topic it registers shows in /lookup, and
    nsqd sends REGISTER only after that answer."""
    nsqd.post("/topic/create", topic="start_probe")
    wait_for(lambda: _producers(lookupd, "start_probe"), WAIT, what="nsqd in the lookupd")


def depths(nsqd: Any, topic: str) -> tuple[int, dict[str, int]]:
    """(the topic's own depth, {channel: depth}) from one /stats."""
    stats = nsqd.get_json("/stats?" + urllib.parse.urlencode({"format": "json", "topic": topic}))
    topics = [t for t in stats["topics"] if t["topic_name"] == topic]
    assert len(topics) == 1, topics
    t = topics[0]
    return t["depth"], {c["channel_name"]: c["depth"] for c in t["channels"] or []}


def published(nsqd: Any, topic: str, expected: tuple[int, dict[str, int]]) -> None:
    """Assert ``depths(nsqd, topic) == expected`` after a publish: at once on nsqpy-d, within
    ``WAIT`` s on Go's nsqd (whose topic pump runs after the answer; see the module text)."""
    got = depths(nsqd, topic)
    if got != expected and isinstance(nsqd, gobin.GoProcess):
        deadline = time.monotonic() + WAIT
        while got != expected and time.monotonic() < deadline:
            time.sleep(0.02)
            got = depths(nsqd, topic)
    assert got == expected, topic


def check_http_create_channel_pub(nsqd: Any, lookupd: Any) -> None:
    """/topic/create, /channel/create, /pub: the message is in the channel when /pub answers."""
    topic = "start_http"
    nsqd.post("/topic/create", topic=topic)
    nsqd.post("/channel/create", topic=topic, channel="ch")
    nsqd.post("/pub", b"x", topic=topic)
    published(nsqd, topic, (0, {"ch": 1}))


def check_http_create_then_tcp_pub(nsqd: Any, lookupd: Any) -> None:
    """/topic/create, /channel/create, then PUB over TCP."""
    topic = "start_tcp"
    nsqd.post("/topic/create", topic=topic)
    nsqd.post("/channel/create", topic=topic, channel="ch")
    c = RawClient(nsqd.tcp_port)
    try:
        c.pub(topic, b"x")
        published(nsqd, topic, (0, {"ch": 1}))
    finally:
        c.close()


def check_first_publish_finds_lookupd_channels(nsqd: Any, lookupd: Any) -> None:
    """A channel known to the lookupd only (POST /channel/create there): the first PUB, MPUB
    or /pub of the topic on this node is answered once the channel exists here and holds the
    message; a first SUB is answered once both channels exist."""
    for how in ("pub", "mpub", "http", "sub"):
        topic = f"start_known_{how}"
        lookupd.post("/channel/create", topic=topic, channel="known")
        if how == "http":
            nsqd.post("/pub", b"x", topic=topic)
        else:
            c = RawClient(nsqd.tcp_port)
            try:
                if how == "pub":
                    c.pub(topic, b"x")
                elif how == "mpub":
                    c.mpub(topic, [b"x"])
                else:
                    c.sub(topic, "mine")
                    assert depths(nsqd, topic) == (0, {"known": 0, "mine": 0})
                    continue
            finally:
                c.close()
        published(nsqd, topic, (0, {"known": 1}))


CHECKS = {
    f.__name__: f
    for f in (
        check_http_create_channel_pub,
        check_http_create_then_tcp_pub,
        check_first_publish_finds_lookupd_channels,
    )
}
