"""A new topic's start after its lookupd channel query (NSQD.topic_started), in process.

nsqd's GetTopic asks the lookupds for a new topic's channels and creates them before it returns
the topic, so the PUB, MPUB or SUB that made it is answered only then. Here a real NSQD (temp
data dir) and the sans-IO protocol core run on the test's event loop; the lookupds are stood in
for by an object that records the query and lets the test answer it (``answer``), so no socket
and no timer is involved: the test decides when the query ends."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nsqpy import wire
from nsqpy.nsqd import NSQD
from nsqpy.options import Options
from nsqpy.protocol_v2 import SUSPEND, WAIT_FUTURE, ClientState, ProtocolV2


class HeldQuery:
    """LookupPeers' side that the core calls: notifications are ignored, every channel query
    is kept until ``answer`` (the lookupds' channel names for that topic)."""

    def __init__(self) -> None:
        self.queries: dict[str, Callable[[list[str]], None]] = {}

    def topic_added(self, topic: str) -> None:
        pass

    def topic_removed(self, topic: str) -> None:
        pass

    def channel_added(self, topic: str, channel: str) -> None:
        pass

    def channel_removed(self, topic: str, channel: str) -> None:
        pass

    def precreate_channels(self, topic: str, done: Callable[[list[str]], None]) -> bool:
        self.queries[topic] = done
        return True

    def answer(self, topic: str, names: list[str]) -> None:
        self.queries.pop(topic)(names)


@pytest.fixture
def node(tmp_path) -> tuple[NSQD, HeldQuery]:
    n = NSQD(Options(data_path=str(tmp_path)))
    lookup = HeldQuery()
    n.lookup = lookup  # type: ignore[assignment]
    return n, lookup


def run(core: ProtocolV2, c: ClientState, name: bytes, *params: bytes, body=None) -> int:
    """One command through the parser (its checks before a body included), as the
    connection runs it."""
    parser = wire.CommandParser(core.opts.max_msg_size, core.opts.max_body_size, c.precheck)
    parser.feed(wire.encode_command(name, *params, body=body))
    cmd = parser.next_command()
    assert cmd is not None
    return core.execute(c, cmd[0], cmd[1], cmd[2])


def replies(c: ClientState) -> list[tuple[int, bytes]]:
    out = bytes(c.out)
    c.out.clear()
    frames = []
    while out:
        size = int.from_bytes(out[:4], "big")
        frames.append((int.from_bytes(out[4:8], "big"), out[8 : 4 + size]))
        out = out[4 + size :]
    return frames


OK = [(wire.FRAME_TYPE_RESPONSE, b"OK")]


@pytest.mark.asyncio
@pytest.mark.parametrize("cmd", [b"PUB", b"MPUB"])
async def test_the_publish_that_makes_a_topic_waits_for_its_channels(node, cmd) -> None:
    n, lookup = node
    core = ProtocolV2(n)
    c = ClientState(core)
    body = b"\x00\x00\x00\x01\x00\x00\x00\x01x" if cmd == b"MPUB" else b"x"  # MPUB: 1 message
    assert run(core, c, cmd, b"t", body=body) == SUSPEND
    wait = c.wait
    assert wait is not None and wait.kind == WAIT_FUTURE
    t = n.topics["t"]
    assert t.starting and t.depth == 0 and replies(c) == []  # nothing put, nothing answered
    assert not wait.arg.done()

    lookup.answer("t", ["known", "tmp#ephemeral", "bad!name"])
    assert wait.arg.done() and not t.starting
    assert list(t.channels) == ["known"]  # ephemeral and invalid names are not made
    assert core.resume(c, wait.arg.result()) == 0
    assert replies(c) == OK
    assert (t.depth, t.channels["known"].depth) == (0, 1)
    assert c.pub_counts == {"t": 1}

    # started: the next publish is answered at once
    assert run(core, c, b"PUB", b"t", body=b"y") == 0
    assert replies(c) == OK and t.channels["known"].depth == 2


@pytest.mark.asyncio
async def test_sub_to_a_new_topic_waits_for_its_channels(node) -> None:
    n, lookup = node
    core = ProtocolV2(n)
    c = ClientState(core)
    assert run(core, c, b"SUB", b"t", b"mine") == SUSPEND
    assert c.wait is not None and replies(c) == []
    fut = c.wait.arg
    lookup.answer("t", ["known"])
    assert core.resume(c, fut.result()) == 0
    assert replies(c) == OK
    assert sorted(n.topics["t"].channels) == ["known", "mine"]


@pytest.mark.asyncio
async def test_every_waiter_has_its_own_future(node) -> None:
    """A connection that goes away cancels its wait; the others still go on."""
    n, lookup = node
    t = n.get_topic("t")
    first, second = n.topic_started(t), n.topic_started(t)
    assert first is not None and second is not None and first is not second
    first.cancel()
    lookup.answer("t", [])
    assert second.done() and second.result() is None
    assert n.topic_started(t) is None  # started: nothing to wait for


@pytest.mark.asyncio
async def test_a_topic_deleted_while_it_starts_releases_its_waiters(node) -> None:
    n, lookup = node
    t = n.get_topic("t")
    fut = n.topic_started(t)
    assert fut is not None
    n.delete_existing_topic("t")
    lookup.answer("t", ["known"])
    assert fut.done()
    assert "t" not in n.topics and t.channels == {}  # nothing made on the deleted topic


@pytest.mark.asyncio
async def test_no_lookupd_identified_starts_the_topic_at_once(node) -> None:
    n, lookup = node
    lookup.precreate_channels = lambda topic, done: False  # type: ignore[method-assign]
    t = n.get_topic("t")
    assert not t.starting and n.topic_started(t) is None
    core = ProtocolV2(n)
    c = ClientState(core)
    assert run(core, c, b"PUB", b"t", body=b"x") == 0
    assert replies(c) == OK
