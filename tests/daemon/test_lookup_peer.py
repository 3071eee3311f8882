"""nsqpy-d's registration with nsqlookupd (nsqpy/lookup_peer.py), byte for byte as nsqd 1.3.

A recording lookupd (a plain TCP server on loopback that answers as nsqlookupd's protocol does:
the IDENTIFY JSON, "OK" for everything else) captures exactly what nsqpy-d sends: the magic,
IDENTIFY's body, REGISTER/UNREGISTER as topics and channels come and go, the whole state after a
reconnect. The end-to-end tests at the bottom use the real nsqpy-lookupd. These check the wiring
in a real process; the timing (PING every 15 s, the 1 s dial and reply deadlines, reconnects)
is checked on a virtual clock in tests/unit/test_lookup_peer_timing.py.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time

import pytest
from support.daemons import Daemon

from nsqpy.testing import wait_for

pytest.register_assert_rewrite("support.topic_start_checks")

from support import topic_start_checks  # noqa: E402

_SIZE = struct.Struct(">i")


class RecordingLookupd:
    """A loopback TCP server speaking nsqlookupd's side of the V1 protocol; ``conns`` lists,
    per accepted connection, the commands received: (text line, body or None)."""

    def __init__(self, http_port: int = 0, identify_reply: bytes | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.http_port = http_port
        self.identify_reply = identify_reply
        self.conns: list[list[tuple[str, bytes | None]]] = []
        self.magics: list[bytes] = []
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append([])
                self.socks.append(c)
                idx = len(self.conns) - 1
            threading.Thread(target=self._serve, args=(c, idx), daemon=True).start()

    def _serve(self, c: socket.socket, idx: int) -> None:
        f = c.makefile("rb")
        try:
            magic = f.read(4)
            self.magics.append(magic)
            while True:
                line = f.readline()
                if not line:
                    return
                text = line.rstrip(b"\n").decode()
                body = None
                if text == "IDENTIFY":
                    (n,) = _SIZE.unpack(f.read(4))
                    body = f.read(n)
                    reply = (
                        self.identify_reply
                        or json.dumps(
                            {
                                "tcp_port": self.port,
                                "http_port": self.http_port,
                                "version": "1.3.0",
                                "broadcast_address": "127.0.0.1",
                                "hostname": "recorder",
                            }
                        ).encode()
                    )
                else:
                    reply = b"OK"
                with self.lock:
                    self.conns[idx].append((text, body))
                c.sendall(_SIZE.pack(len(reply)) + reply)
        except OSError:
            return

    def commands(self, conn: int = -1) -> list[str]:
        with self.lock:
            return [t for t, _ in self.conns[conn]] if self.conns else []

    def identify_body(self, conn: int = -1) -> dict:
        with self.lock:
            for t, b in self.conns[conn]:
                if t == "IDENTIFY":
                    assert b is not None
                    return json.loads(b)
        raise AssertionError("no IDENTIFY")

    def drop_connections(self) -> None:
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.closed = True
        self.drop_connections()
        self.sock.close()


@pytest.fixture
def recorder():
    r = RecordingLookupd()
    yield r
    r.close()


def _post(d, path: str) -> None:
    code, body, _ = d.http("POST", path)
    assert code == 200, body


def test_identify_and_registrations_are_nsqds(daemon_factory, recorder):
    d = daemon_factory(f"--lookupd-tcp-address={recorder.address}", "--broadcast-address=127.0.0.1")
    wait_for(lambda: recorder.conns and recorder.commands(), what="IDENTIFY")
    # and its answer read (the empty state then sent): a topic made before would be in the
    # state and its REGISTER then sent once more, as nsqd would too
    wait_for(lambda: "peer info {TCPPort:" in d.log_text(), what="IDENTIFY's answer read")
    assert recorder.magics[0] == b"  V1"
    body = recorder.identify_body()
    # go's json.Marshal of a map: keys sorted; ports are the bound ones when not set; node_id
    # is nsqpy's addition (Go's nsqlookupd ignores it; nsqpy-lookupd routes /message by it)
    assert list(body) == [
        "broadcast_address",
        "hostname",
        "http_port",
        "node_id",
        "tcp_port",
        "version",
    ]
    assert 0 <= body["node_id"] < 1024
    assert body["broadcast_address"] == "127.0.0.1"
    assert body["hostname"] == socket.gethostname()
    assert (body["tcp_port"], body["http_port"]) == (d.tcp_port, d.http_port)
    assert body["version"] == "1.3.0"
    assert recorder.commands() == ["IDENTIFY"]  # no topics yet: no state to register

    _post(d, "/topic/create?topic=t1")
    _post(d, "/channel/create?topic=t1&channel=c1")
    _post(d, "/channel/create?topic=t1&channel=c2%23ephemeral")
    _post(d, "/channel/delete?topic=t1&channel=c1")
    _post(d, "/topic/delete?topic=t1")
    want = [
        "IDENTIFY",
        "REGISTER t1",
        "REGISTER t1 c1",
        "REGISTER t1 c2#ephemeral",
        "UNREGISTER t1 c1",
        "UNREGISTER t1",
        "UNREGISTER t1 c2#ephemeral",
    ]
    wait_for(lambda: len(recorder.commands()) >= len(want), what="registrations")
    assert recorder.commands() == want
    assert len(recorder.conns) == 1  # one connection throughout
    for line in (
        f"LOOKUPD({recorder.address}): channel REGISTER t1 c1",
        f"LOOKUPD({recorder.address}): peer info {{TCPPort:",
    ):  # the log reaches the test through a pipe: wait for each line
        wait_for(lambda line=line: line in d.log_text(), what=line)


def test_broadcast_flags_go_into_identify_and_info(daemon_factory, recorder):
    d = daemon_factory(
        f"--lookupd-tcp-address={recorder.address}",
        "--broadcast-address=node-a.example",
        "--broadcast-tcp-port=14150",
        "--broadcast-http-port=14151",
    )
    wait_for(lambda: recorder.conns and recorder.commands(), what="IDENTIFY")
    body = recorder.identify_body()
    assert (body["broadcast_address"], body["tcp_port"], body["http_port"]) == (
        "node-a.example",
        14150,
        14151,
    )
    info = json.loads(d.http("GET", "/info")[1])
    assert info["broadcast_address"] == "node-a.example"
    assert (info["tcp_port"], info["http_port"]) == (d.tcp_port, d.http_port)  # the real ones
    assert json.loads(d.http("GET", "/config/broadcast_tcp_port")[1]) == 14150


def test_reconnect_sends_the_whole_state_again(daemon_factory, recorder):
    d = daemon_factory(f"--lookupd-tcp-address={recorder.address}")
    _post(d, "/topic/create?topic=a")
    _post(d, "/topic/create?topic=b")
    _post(d, "/channel/create?topic=b&channel=x")
    _post(d, "/channel/create?topic=b&channel=y")
    wanted = {"REGISTER a", "REGISTER b x", "REGISTER b y"}
    wait_for(lambda: wanted <= set(recorder.commands(0)), what="first registrations")
    recorder.drop_connections()
    # the next command finds the connection gone; one after it reconnects with the state
    for n in range(30):
        _post(d, f"/topic/create?topic=later{n}")
        try:
            wait_for(lambda: len(recorder.conns) >= 2, timeout=1, what="reconnect")
            break
        except AssertionError:
            continue
    else:
        raise AssertionError("nsqpy-d did not reconnect")
    wait_for(lambda: "IDENTIFY" in recorder.commands(1), what="re-IDENTIFY")
    wait_for(lambda: wanted <= set(recorder.commands(1)), what="state")
    cmds = recorder.commands(1)
    assert recorder.magics[1] == b"  V1"
    assert cmds[0] == "IDENTIFY"
    # the state comes first; commands that were written on the dead connection may follow it
    # (a repeat of what the state says is harmless: LookupPeer._on_connect)
    state = cmds[1 : 1 + len(wanted)]
    assert set(state) == wanted  # a topic with channels is registered through them


def test_registration_after_restart_covers_loaded_topics(daemon_factory, recorder, tmp_path):
    d = daemon_factory(f"--lookupd-tcp-address={recorder.address}")
    _post(d, "/topic/create?topic=kept")
    _post(d, "/channel/create?topic=kept&channel=ch")
    assert d.stop() == 0
    d2 = Daemon([f"--lookupd-tcp-address={recorder.address}"], d.data_path)
    try:
        wait_for(lambda: len(recorder.conns) >= 2 and len(recorder.commands(1)) >= 2, what="state")
        assert recorder.commands(1) == ["IDENTIFY", "REGISTER kept ch"]
    finally:
        assert d2.stop() == 0


def test_put_config_moves_to_the_new_lookupds(daemon_factory, recorder):
    other = RecordingLookupd()
    try:
        d = daemon_factory(f"--lookupd-tcp-address={recorder.address}")
        _post(d, "/topic/create?topic=t")
        wait_for(lambda: "REGISTER t" in recorder.commands(), what="first lookupd")
        body = json.dumps([other.address]).encode()
        code, got, _ = d.http("PUT", "/config/nsqlookupd_tcp_addresses", body)
        assert (code, got) == (200, body)
        wait_for(lambda: other.commands() == ["IDENTIFY", "REGISTER t"], what="second lookupd")
        _post(d, "/topic/create?topic=u")
        wait_for(lambda: "REGISTER u" in other.commands(), what="new registration")
        assert "REGISTER u" not in recorder.commands()
        removing = f"LOOKUP({recorder.address}): removing peer"
        wait_for(lambda: removing in d.log_text(), what=removing)
    finally:
        other.close()


def test_unreachable_or_silent_lookupd_never_blocks_the_broker(daemon_factory):
    # a port nothing listens on, and a lookupd that accepts and never answers
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_addr = f"127.0.0.1:{dead.getsockname()[1]}"
    dead.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    silent_addr = f"127.0.0.1:{silent.getsockname()[1]}"
    try:
        d = daemon_factory(
            f"--lookupd-tcp-address={dead_addr}", f"--lookupd-tcp-address={silent_addr}"
        )
        c = d.raw()
        t0 = time.monotonic()
        for i in range(20):
            c.pub(f"topic{i}", b"x")  # each a new topic: a notification per lookupd
        c.sub("topic0", "ch", rdy=1)
        assert c.read_message()[3] == b"x"
        assert time.monotonic() - t0 < 5
        assert d.http("GET", "/ping")[:2] == (200, b"OK")
        wait_for(lambda: f"LOOKUPD({dead_addr})" in d.log_text(), what="error logged")
        c.close()
    finally:
        silent.close()


# ----------------------------------------------------------------------------- with nsqpy-lookupd


def _lookup(lookupd, topic: str) -> dict:
    code, body, _ = lookupd.http("GET", f"/lookup?topic={topic}")
    return json.loads(body) if code == 200 else {}


def test_nodes_found_through_nsqpy_lookupd(daemon_factory, lookupd_factory, tmp_path):
    lk = lookupd_factory()
    a = daemon_factory(f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1")
    b = Daemon(
        [f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1"],
        tmp_path / "b",
    )
    a.raw().pub("shared", b"1")
    b.raw().pub("shared", b"2")
    wait_for(lambda: len(_lookup(lk, "shared").get("producers") or []) == 2, what="2 producers")
    ports = sorted(p["tcp_port"] for p in _lookup(lk, "shared")["producers"])
    assert ports == sorted([a.tcp_port, b.tcp_port])
    # a killed node leaves /lookup once its connection drops
    b.proc.kill()
    b.proc.wait(5)
    wait_for(lambda: len(_lookup(lk, "shared").get("producers") or []) == 1, what="1 producer")


def test_new_topic_creates_the_channels_other_nodes_have(daemon_factory, lookupd_factory):
    """nsqd's GetTopic: a topic new on this node first learns its channels from lookupd, so a
    message published at once reaches every channel (here two, one of them ephemeral: not
    pre-created)."""
    lk = lookupd_factory()
    a = daemon_factory(f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1")
    _post(a, "/topic/create?topic=orders")
    _post(a, "/channel/create?topic=orders&channel=billing")
    _post(a, "/channel/create?topic=orders&channel=audit")
    sub = a.raw()
    sub.sub("orders", "tmp#ephemeral")
    wait_for(
        lambda: len(json.loads(lk.http("GET", "/channels?topic=orders")[1])["channels"]) == 3,
        what="channels registered",
    )
    b = daemon_factory(f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1")
    wait_for(lambda: json.loads(b.http("GET", "/config/nsqlookupd_tcp_addresses")[1]), what="cfg")
    wait_for(lambda: "peer info" in b.log_text(), what="b identified")
    b.raw().pub("orders", b"first")

    def depths() -> dict[str, int]:
        topics = b.stats(topic="orders")["topics"]
        return {c["channel_name"]: c["depth"] for c in topics[0]["channels"]} if topics else {}

    # the PUB was answered once lookupd had answered: the message is in both channels
    assert depths() == {"billing": 1, "audit": 1}
    sub.close()


def test_tombstoned_topic_reappears_when_the_node_registers_it_again(
    daemon_factory, lookupd_factory
):
    """nsqadmin's "tombstone" flow: the topic is hidden for that node in /lookup while the
    tombstone lives; deleted there (UNREGISTER) and made again (REGISTER), it is a new producer
    and returned again at once (the lifetime's expiry itself: tests/unit/test_registration_db)."""
    lk = lookupd_factory("--tombstone-lifetime=60s")
    a = daemon_factory(f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1")
    _post(a, "/topic/create?topic=gone")
    wait_for(lambda: len(_lookup(lk, "gone").get("producers") or []) == 1, what="registered")
    node = f"127.0.0.1:{a.http_port}"
    assert lk.http("POST", f"/topic/tombstone?topic=gone&node={node}")[0] == 200
    assert _lookup(lk, "gone")["producers"] == []
    _post(a, "/topic/delete?topic=gone")  # nsqd UNREGISTERs it
    wait_for(
        lambda: "gone" not in lk.get_json("/nodes")["producers"][0]["topics"],
        what="unregistered",
    )
    _post(a, "/topic/create?topic=gone")
    wait_for(lambda: len(_lookup(lk, "gone").get("producers") or []) == 1, what="back")


# ------------------------------------------------------------ in process: REGISTER leaves at once


@pytest.mark.asyncio
async def test_register_and_unregister_leave_before_the_metadata_write(
    recorder, tmp_path, monkeypatch
):
    """A topic or channel created or deleted is on the lookupd's socket when the call that
    made it returns, before nsqd.dat is written (which then runs off the loop). In process,
    with the NSQD core on this test's loop and the recording lookupd on its own thread: the
    loop does not run between the core call and the first check, so nothing scheduled on it
    (the coalesced metadata write) can have happened yet."""
    import asyncio

    from nsqpy import nsqd as nsqd_mod
    from nsqpy import storage as storage_mod
    from nsqpy.options import Options

    events: list[str] = []
    real_write = storage_mod.write_sync_file

    def recording_write(path: str, data: bytes, fsync: bool = True) -> None:
        real_write(path, data, fsync)
        events.append("nsqd.dat written: " + data.decode())

    monkeypatch.setattr(storage_mod, "write_sync_file", recording_write)
    n = nsqd_mod.NSQD(Options(data_path=str(tmp_path), nsqlookupd_tcp_addresses=[recorder.address]))
    n.open()
    n.start_loops()
    try:
        assert n.lookup is not None
        peer = n.lookup.peers[0]
        deadline = asyncio.get_running_loop().time() + 10
        while not peer._ready:  # connected, IDENTIFY answered, the (empty) state sent
            assert asyncio.get_running_loop().time() < deadline, "lookupd never identified"
            await asyncio.sleep(0.01)

        def sent(cmd: str) -> bool:  # seen by the recorder thread (bounded thread wait)
            end = time.monotonic() + 5
            while cmd not in recorder.commands():
                if time.monotonic() > end:
                    return False
                time.sleep(0.002)
            return True

        async def written(name: str) -> None:
            end = asyncio.get_running_loop().time() + 10
            while not any(name in e for e in events):
                assert asyncio.get_running_loop().time() < end, f"nsqd.dat never had {name}"
                await asyncio.sleep(0.01)

        t = n.get_topic("reg_t")
        assert sent("REGISTER reg_t"), recorder.commands()
        assert not events, "nsqd.dat was written before the REGISTER left"
        await written("reg_t")

        events.clear()
        t.get_channel("reg_c")
        assert sent("REGISTER reg_t reg_c"), recorder.commands()
        assert not events
        await written("reg_c")

        events.clear()
        t.delete_existing_channel("reg_c")
        assert sent("UNREGISTER reg_t reg_c"), recorder.commands()
        assert not events
        await written('"channels":null')

        events.clear()
        n.delete_existing_topic("reg_t")
        assert sent("UNREGISTER reg_t"), recorder.commands()
        assert not events
    finally:
        await n.close()


# ------------------------------------------------- a new topic's channels, before the answer


def test_new_topic_answers_after_its_lookupd_channels(daemon_factory, lookupd_factory):
    """nsqd's GetTopic: the command or request that makes a topic is answered after the
    lookupd query for its channels, so /stats read at once shows the message in the channel
    (the same checks run against Go's nsqd in tests/interop/test_topic_start_go.py)."""
    lk = lookupd_factory()
    d = daemon_factory(f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1")
    topic_start_checks.wait_registered(d, lk)
    for check in topic_start_checks.CHECKS.values():
        check(d, lk)


def _silent_listener() -> socket.socket:
    """A listener that accepts (the kernel's backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    s.settimeout(30)  # accept(): a bound for the test, never a timing expectation
    return s


def _refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _answered_within(c, timeout: float) -> bool:
    """Whether ``c``'s socket has a reply ready within ``timeout`` seconds (no read)."""
    return bool(select.select([c.sock], [], [], timeout)[0])


def test_a_silent_lookupd_holds_the_first_publish_while_others_are_served(daemon_factory):
    """The lookupd's HTTP API accepts the /channels query and stays silent (until this test
    lets it go): the PUB that made the topic waits for it, the loop serves every other client
    meanwhile, and the PUB is answered once the query ends (here: the lookupd goes away)."""
    http = _silent_listener()
    recorder = RecordingLookupd(http_port=http.getsockname()[1])
    try:
        d = daemon_factory("--broadcast-address=127.0.0.1", "--http-client-request-timeout=120s")
        _post(d, "/topic/create?topic=ready")  # no lookupd yet: started at once
        _post(d, "/channel/create?topic=ready&channel=ch")
        body = json.dumps([recorder.address]).encode()
        assert d.http("PUT", "/config/nsqlookupd_tcp_addresses", body)[0] == 200
        wait_for(lambda: "peer info" in d.log_text(), what="the lookupd identified")

        waiting = d.raw()
        waiting.cmd(b"PUB", b"fresh", body=b"held")
        conn, _ = http.accept()  # nsqd's /channels query: the PUB waits on it
        try:
            other = d.raw()
            other.pub("ready", b"served")
            other.close()
            assert d.http("GET", "/ping")[:2] == (200, b"OK")
            assert d.depth("ready", "ch") == 1
            # the topic exists; the waiting PUB puts its message only once it has started
            assert [t["depth"] for t in d.stats(topic="fresh")["topics"]] == [0]
            assert not _answered_within(waiting, 0)
        finally:
            # the lookupd goes away (listener first: aiohttp may try a new connection once):
            # the query fails, the topic starts
            http.close()
            conn.close()
        waiting.expect_response()
        waiting.close()
        assert d.depth("fresh") == 1  # no channel anywhere: the topic keeps it
        # the log reaches the test through a pipe: wait for the line rather than race it
        wait_for(
            lambda: (
                "failed to query nsqlookupd for channels to pre-create for topic fresh"
                in d.log_text()
            ),
            what="the failed channel query logged",
        )
    finally:
        recorder.close()
        http.close()


def test_a_silent_lookupd_delays_the_first_publish_by_the_request_timeout(daemon_factory):
    """Two lookupds: one's HTTP API refuses connections, the other's never answers. The
    first PUB of a topic is answered once nsqd's HTTP client gives up on the silent one
    (--http-client-request-timeout, here 2 s): not before, and never much later."""
    http = _silent_listener()
    silent = RecordingLookupd(http_port=http.getsockname()[1])
    refused = RecordingLookupd(http_port=_refused_port())
    try:
        d = daemon_factory(
            "--broadcast-address=127.0.0.1",
            "--http-client-request-timeout=2s",
            f"--lookupd-tcp-address={silent.address}",
            f"--lookupd-tcp-address={refused.address}",
        )
        wait_for(lambda: d.log_text().count("peer info") >= 2, what="both lookupds identified")
        c = d.raw(timeout=60)
        t0 = time.monotonic()
        c.pub("bounded", b"x")
        elapsed = time.monotonic() - t0
        assert 1.9 <= elapsed < 30, elapsed
        assert d.depth("bounded") == 1  # started: no channel anywhere, the topic keeps it
        c.pub("bounded", b"y")  # started: no more waiting (no bound asserted)
        c.close()
        wait_for(lambda: "timed out after 2 s" in d.log_text(), what="the timeout logged")
    finally:
        silent.close()
        refused.close()
        http.close()
