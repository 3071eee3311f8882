"""The replication stream on the wire (replication/stream_server.py, courier.py): a leader's
connection to a follower's TCP port that opens with "  RS" and carries length-prefixed frames,
each holding ``/replica/append-many``'s parts and answered, in order, with its JSON answer
(the follower first answers the magic with its own; the leader sends nothing before).

- raw socket to a real nsqpy-d joined to etcd: a probe, two appends sent back to back before
  any answer (pipelined), a frame whose parts do not parse, an older epoch: each answered in
  its turn as ``/replica/append`` would have answered it, and the replica log holds exactly the
  entries, as sent;
- a node without replication answers the magic E_BAD_PROTOCOL and closes (nsqd's answer to an
  unknown magic), which turns a leader's courier to HTTP requests for that node;
- a follower that never answers: the frames out fail once the courier's timeout passed, and
  the next append opens a new stream;
- a real R=3 topic: the followers are sent the stream, and every publish is acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from support.etcd_server import etcd_fixture, needs_etcd  # noqa: F401 (the fixture)
from support.replication_cluster import (
    Nodes,
    cluster_fixture,  # noqa: F401 (the fixture)
    create,
)

from nsqpy.client import Producer
from nsqpy.replication.courier import Courier
from nsqpy.replication.entries import (
    ENTRY,
    RECORD_HEADER,
    STREAM_MAGIC,
    encode_entries,
    encode_frame,
    encode_parts,
)
from nsqpy.testing.process import Nsqd, wait_for

pytestmark = [pytest.mark.timeout(120)]


def _entry(epoch: int, seq: int) -> bytes:
    return ENTRY.pack(epoch, seq, 0) + bytes(RECORD_HEADER) + b"body-%d" % seq


def _frame(topic: str, epoch: int, prev: str, entries: list[bytes]) -> bytes:
    q = {"topic": topic, "epoch": str(epoch), "first": "0", "prev": prev}
    return encode_frame(encode_parts([(q, encode_entries(entries))]))


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the follower closed the stream"
            out += chunk
        return out

    (size,) = struct.unpack(">I", exactly(4))
    return exactly(size)


def _answers(sock: socket.socket) -> Any:
    return json.loads(_read_frame(sock))


@needs_etcd
def test_stream_frames_are_answered_in_order_and_written_as_sent(cluster: Nodes) -> None:
    n = cluster.start(1)
    with socket.create_connection(("127.0.0.1", n.tcp_port), timeout=30) as sock:
        sock.sendall(STREAM_MAGIC)
        assert sock.recv(4, socket.MSG_WAITALL) == STREAM_MAGIC  # the follower's own first
        sock.sendall(_frame("s", 1, "?", []))
        assert _answers(sock) == {"answers": [[200, {"next": 0, "last": "-", "dirty": False}]]}
        first = [_entry(1, i) for i in range(3)]
        then = [_entry(1, i) for i in range(3, 5)]
        # back to back, the second chained on the first before its answer came
        sock.sendall(_frame("s", 1, "-", first) + _frame("s", 1, "1:2", then))
        assert _answers(sock) == {"answers": [[200, {"next": 3, "last": "1:2"}]]}
        assert _answers(sock) == {"answers": [[200, {"next": 5, "last": "1:4"}]]}
        sock.sendall(encode_frame(b"\0\0\0\x09not-parts"))
        assert _answers(sock) == {"message": "BAD_BODY"}
        sock.sendall(_frame("s", 2, "1:4", [_entry(2, 0)]) + _frame("s", 1, "2:0", [_entry(1, 5)]))
        assert _answers(sock) == {"answers": [[200, {"next": 1, "last": "2:0"}]]}
        assert _answers(sock) == {"answers": [[409, {"message": "E_STALE_EPOCH"}]]}
        sock.sendall(_frame("s", 2, "2:7", [_entry(2, 8)]))
        assert _answers(sock) == {"answers": [[409, {"message": "E_GAP 2:0"}]]}
    data = Path(n.data_path) / "s#replica.diskqueue.000000.dat"
    wait_for(data.exists, 10, what="the replica log's data file")
    assert data.read_bytes() == encode_entries([*first, *then, _entry(2, 0)])


def test_a_node_without_replication_refuses_the_magic_and_the_courier_turns_to_http() -> None:
    n = Nsqd(https=False)
    try:
        with socket.create_connection(("127.0.0.1", n.tcp_port), timeout=30) as sock:
            sock.sendall(STREAM_MAGIC)
            raw = _read_frame(sock)
            assert raw == struct.pack(">I", 1) + b"E_BAD_PROTOCOL"
            assert sock.recv(1) == b""  # closed

        async def two() -> tuple[Any, Any, Courier]:
            c = Courier("x", lambda _: n.http_address, 10, lambda _: n.tcp_address)
            q = {"topic": "s", "epoch": "1", "first": "0", "prev": "?"}
            try:
                refused = await c.append(q, b"")
                again = await c.append(q, b"")  # over HTTP: nsqd has no replica routes
                return refused, again, c
            finally:
                c.close()

        refused, again, courier = asyncio.run(two())
        assert refused[0] == -1
        assert not courier.streams
        assert again[0] == 404
    finally:
        n.stop()


@needs_etcd
def test_an_r3_topic_streams_to_its_followers(cluster: Nodes) -> None:
    nodes = [cluster.start(i) for i in (1, 2, 3)]
    create(nodes[0], "t", 3, nodes)
    leader = cluster.leader("t")

    async def publish() -> None:
        p = Producer(leader.tcp_address)
        await p.connect()
        try:
            for k in range(20):
                await p.multi_publish("t", [b"m%d-%d" % (k, j) for j in range(10)])
                await p.publish("t", b"p%d" % k)
        finally:
            await p.stop()

    asyncio.run(publish())
    for f in nodes:
        if f is not leader:
            wait_for(lambda f=f: "replication stream from" in f.log_text(), 10, what="stream")


def test_a_follower_that_never_answers_fails_the_frames_out_and_the_next_opens_again() -> None:
    """A follower that takes the stream and answers nothing: every frame out is failed (-1)
    once the courier's timeout passed; the next append opens a new stream, which a follower
    that answers serves."""

    async def run() -> tuple[Any, Any, Any, int]:
        opened = []
        answering = asyncio.Event()

        async def follower(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            opened.append(writer)
            try:
                assert await reader.readexactly(4) == STREAM_MAGIC
                writer.write(STREAM_MAGIC)
                while True:
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    await reader.readexactly(size)
                    if answering.is_set():
                        writer.write(encode_frame(b'{"answers":[[200,{"next":1,"last":"1:0"}]]}'))
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()  # the leader gave the stream up

        server = await asyncio.start_server(follower, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        c = Courier("x", lambda _: "", 0.5, lambda _: f"127.0.0.1:{port}")
        q = {"topic": "s", "epoch": "1", "first": "0", "prev": "-"}
        try:
            body = encode_entries([_entry(1, 0)])
            first, second = await asyncio.gather(c.append(q, body), c.append(q, body))
            answering.set()
            third = await c.append(q, body)
            return first, second, third, len(opened)
        finally:
            c.close()
            server.close()

    first, second, third, opened = asyncio.run(run())
    assert first[0] == second[0] == -1
    assert "no answer in time" in first[1]["message"]
    assert third == (200, {"next": 1, "last": "1:0"})
    assert opened == 2
