r"""nsqd's side of nsqlookupd: registration of this node's topics and channels.

Strategy: asyncio glue, like protocol_v2. The core only calls the synchronous notifications
(`topic_added`, `channel_removed`, ...); each lookupd has one LookupPeer task that reads the
replies on its own connection, so a slow or dead lookupd never blocks the broker or the other
lookupds. A notification is written to the lookupd's socket at once, inside the call that
created or deleted the topic or channel (before nsqd.dat is rewritten, before any other work of
the loop), when that lookupd is connected and identified and nothing is queued before it;
the task then reads its reply (replies come in command order). Otherwise it is queued and the
task sends it, one round trip at a time. As nsqd 1.3 (nsqd/lookup.go, nsqd/lookup_peer.go):

- A peer connects lazily, with a 1 s dial timeout, and on every (re)connect sends the magic
  "  V1", IDENTIFY with this node's JSON (broadcast_address, hostname, http_port, tcp_port,
  version; keys in Go's sorted map order) and then the whole state: REGISTER <topic> for a
  topic without channels, REGISTER <topic> <channel> for each channel of the others.
- Every 15 s a PING; a command's reply is read with a 1 s deadline; any I/O error closes the
  connection, and the next command (a notification or the next PING) reconnects.
- A command that cannot be sent because the lookupd is unreachable is dropped: the state sent
  after the reconnect covers it.
- A new topic (not while loading nsqd.dat) asks every identified lookupd's HTTP API for the
  topic's channels (`GET /channels?topic=`, all lookupds at once, each within
  --http-client-request-timeout) and creates them (ephemeral ones excepted) before the topic
  hands out messages, so that no channel misses what is published meanwhile. nsqd makes that
  call blocking inside GetTopic; here the query runs as a task, the topic holds its messages
  until the answer is in, and the command or HTTP request that met the new topic waits for it
  (NSQD.topic_started) while the loop serves everyone else.

Timing: every deadline and tick reads the running loop's clock (``loop.time()``, asyncio's
timers through ``asyncio.wait_for``), never the wall clock, and the intervals are the peer's
``ping_interval_s`` and ``io_timeout_s``; so tests run a peer on a loop with a virtual clock
(nsqpy.testing.virtual_time) and see 15 s of PINGs and 1 s deadlines pass at once.

Wire (nsq.io TCP protocol for nsqlookupd): commands are "NAME params...\n", IDENTIFY followed by
a 4-byte big-endian body size and the JSON body; every reply is a 4-byte big-endian size and
the data ("OK", the IDENTIFY JSON, or an "E_..." error text)."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .internal import gojson
from .internal.netaddr import join_host_port, split_host_port
from .options import NSQ_VERSION, Options

log = logging.getLogger("nsqpy")

MAGIC_V1 = b"  V1"
#: Seconds between PINGs to each lookupd (nsqd's lookupLoop ticker).
PING_INTERVAL_S = 15.0
#: Seconds allowed for a dial, and for each write and read (lookupPeer's deadlines).
IO_TIMEOUT_S = 1.0
#: Accept header NSQ clients send to lookupd's HTTP API.
ACCEPT_V1 = "application/vnd.nsq; version=1.0"

_SIZE = struct.Struct(">i")
_PING = b"PING\n"


_warmed = False


def warm_import_aiohttp() -> None:
    """Import aiohttp on a background thread, once. Its first import takes 0.2-2 s of CPU;
    done lazily on the event loop (at the first lookupd /channels query, i.e. the first topic
    created) it would stall every client for that long. A daemon thread interleaves it with
    the loop at the interpreter's switch interval instead; start-up stays aiohttp-free."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    threading.Thread(target=_import_aiohttp, name="warm-aiohttp", daemon=True).start()


_aiohttp: Any = None


def _import_aiohttp() -> Any:
    global _aiohttp
    mod = importlib.import_module("aiohttp")  # waits for another thread's import to finish
    _aiohttp = mod
    return mod


async def load_aiohttp() -> Any:
    """The aiohttp module, imported off the loop's thread the first time (never half
    initialized: sys.modules has it from the start of a thread's import)."""
    if _aiohttp is not None:
        return _aiohttp
    return await asyncio.to_thread(_import_aiohttp)


class LookupdError(Exception):
    """A failed exchange with one lookupd (connect, write, read or an oversized reply)."""


def register_cmd(topic: str, channel: str = "") -> bytes:
    """``REGISTER <topic> [<channel>]\\n`` (go-nsq's Register: an empty channel is left out)."""
    return f"REGISTER {topic} {channel}\n".encode() if channel else f"REGISTER {topic}\n".encode()


def unregister_cmd(topic: str, channel: str = "") -> bytes:
    """``UNREGISTER <topic> [<channel>]\\n``."""
    if channel:
        return f"UNREGISTER {topic} {channel}\n".encode()
    return f"UNREGISTER {topic}\n".encode()


def identify_cmd(info: dict[str, Any]) -> bytes:
    """``IDENTIFY\\n`` + 4-byte size + JSON body as nsqd's json.Marshal of a map writes it
    (keys sorted, compact)."""
    body = gojson.encode(dict(sorted(info.items())))
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def _cmd_text(cmd: bytes) -> str:
    """A command as nsqd logs it (go-nsq's Command.String: name and params, no body)."""
    return cmd.split(b"\n", 1)[0].decode(errors="replace")


def _peer_info_text(info: dict[str, Any]) -> str:
    """lookupPeer.Info as Go's %+v prints it."""
    return (
        f"{{TCPPort:{info.get('tcp_port', 0)} HTTPPort:{info.get('http_port', 0)} "
        f"Version:{info.get('version', '')} BroadcastAddress:{info.get('broadcast_address', '')}}}"
    )


class LookupPeer:
    """One lookupd: its connection, pending commands and the info its IDENTIFY reply gave.

    ``info`` holds the reply's ``tcp_port``, ``http_port``, ``version`` and
    ``broadcast_address`` once identified (empty before). ``ping_interval_s`` (seconds between
    PINGs) and ``io_timeout_s`` (the dial, write and read deadline) default to nsqd's.
    """

    def __init__(
        self,
        addr: str,
        max_body_size: int,
        identity: Callable[[], dict[str, Any]],
        state: Callable[[], list[bytes]],
        *,
        ping_interval_s: float = PING_INTERVAL_S,
        io_timeout_s: float = IO_TIMEOUT_S,
    ) -> None:
        self.ping_interval_s = ping_interval_s
        self.io_timeout_s = io_timeout_s
        self.addr = addr
        self.info: dict[str, Any] = {}
        self.connected = False
        self._max_body_size = max_body_size
        self._identity = identity
        self._state = state
        self._queue: deque[bytes] = deque()
        # Commands written at once by send(), whose replies the task has yet to read.
        self._unanswered: deque[bytes] = deque()
        # Connected, identified and the state sent: send() may write at once.
        self._ready = False
        self._wake = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def __repr__(self) -> str:
        return f"LookupPeer({self.addr})"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, cmd: bytes) -> None:
        """Send a command: written to the socket now when the lookupd is identified and no
        command waits before it, else queued for the peer's task (never blocks either way;
        the task reads the reply)."""
        w = self._writer
        if self._ready and not self._queue and w is not None and not w.is_closing():
            w.write(cmd)
            self._unanswered.append(cmd)
        else:
            self._queue.append(cmd)
        self._wake.set()

    async def close(self) -> None:
        """Stop the peer's task and close its connection (bounded: a cancellation that
        asyncio.wait_for swallows in Python 3.11 cannot make this wait for ever)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            self._wake.set()
            await asyncio.wait([task], timeout=2 * self.io_timeout_s)
        self._disconnect()
        self._unanswered.clear()

    # ------------------------------------------------------------ the peer's task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._ensure_connected()  # nsqd's Command(nil): start the connection
        except LookupdError:
            pass
        next_ping = loop.time() + self.ping_interval_s
        while not self._closing:
            if not self._queue and not self._unanswered:
                try:
                    await asyncio.wait_for(self._wake.wait(), max(0.0, next_ping - loop.time()))
                except TimeoutError:
                    pass
            self._wake.clear()
            if loop.time() >= next_ping:
                next_ping = loop.time() + self.ping_interval_s
                log.debug("LOOKUPD(%s): sending heartbeat", self.addr)
                self._queue.append(_PING)
            while self._unanswered and not self._closing:
                if self._reader is None:  # a round trip lost the connection under them
                    self._queue.extendleft(reversed(self._unanswered))
                    self._unanswered.clear()
                    break
                cmd = self._unanswered[0]
                try:
                    await self._read_reply()
                except LookupdError as e:
                    log.error("LOOKUPD(%s): %s - %s", self.addr, _cmd_text(cmd), e)
                    # nsqd sends one command at a time: only this one met the dead
                    # connection; those written behind it go through a new one (which
                    # sends the whole state first), not wait for the next PING
                    self._unanswered.popleft()
                    self._queue.extendleft(reversed(self._unanswered))
                    self._unanswered.clear()
                    break
                if self._unanswered:
                    self._unanswered.popleft()
            while self._queue and not self._closing:
                cmd = self._queue.popleft()
                try:
                    await self._command(cmd)
                except LookupdError as e:
                    log.error("LOOKUPD(%s): %s - %s", self.addr, _cmd_text(cmd), e)

    async def _command(self, cmd: bytes) -> bytes:
        await self._ensure_connected()
        return await self._round_trip(cmd)

    async def _ensure_connected(self) -> None:
        if self.connected:
            return
        log.info("LOOKUP connecting to %s", self.addr)
        try:
            host, port = split_host_port(self.addr)
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host or None, port), self.io_timeout_s
            )
        except (OSError, ValueError, TimeoutError) as e:
            raise LookupdError(f"dial tcp {self.addr}: {e or 'i/o timeout'}") from None
        self._reader, self._writer = reader, writer
        self.connected = True
        try:
            writer.write(MAGIC_V1)
            await self._on_connect()
        except LookupdError:
            self._disconnect()
            raise

    async def _on_connect(self) -> None:
        """nsqd's connectCallback: IDENTIFY, then the whole state. Commands still pending go
        out after it, in order, as nsqd sends each command after its connectCallback: a
        repeat of what the state says is harmless, but dropping them is not (a REGISTER sent
        after the state with its UNREGISTER dropped would leave a registration behind)."""
        cmd = identify_cmd(self._identity())
        resp = await self._round_trip(cmd)
        if resp.startswith(b"E_"):
            log.info("LOOKUPD(%s): lookupd returned %s", self.addr, resp.decode(errors="replace"))
            raise LookupdError(resp.decode(errors="replace"))
        try:
            info = json.loads(resp)
            if not isinstance(info, dict):
                raise ValueError("not an object")
        except ValueError:
            log.error("LOOKUPD(%s): parsing response - %s", self.addr, resp[:200])
            raise LookupdError("bad IDENTIFY response") from None
        self.info = info
        log.info("LOOKUPD(%s): peer info %s", self.addr, _peer_info_text(info))
        if not info.get("broadcast_address"):
            log.error("LOOKUPD(%s): no broadcast address", self.addr)
        for cmd in self._state():
            log.info("LOOKUPD(%s): %s", self.addr, _cmd_text(cmd))
            await self._round_trip(cmd)
        self._ready = True

    async def _round_trip(self, cmd: bytes) -> bytes:
        """Write ``cmd`` and read its reply (4-byte size + data), each within io_timeout_s.
        Only called with no reply outstanding for an earlier command."""
        writer = self._writer
        if writer is None:
            raise LookupdError("not connected")
        try:
            writer.write(cmd)
            await asyncio.wait_for(writer.drain(), self.io_timeout_s)
        except (OSError, TimeoutError) as e:
            self._disconnect()
            raise LookupdError(str(e) or type(e).__name__) from None
        return await self._read_reply()

    async def _read_reply(self) -> bytes:
        """Read the next reply (4-byte big-endian size + data) within io_timeout_s for each
        part. Raises LookupdError (and disconnects) on EOF, a timeout or an oversized reply."""
        reader = self._reader
        if reader is None:
            raise LookupdError("not connected")
        try:
            head = await asyncio.wait_for(reader.readexactly(4), self.io_timeout_s)
            (size,) = _SIZE.unpack(head)
            if size > self._max_body_size or size < 0:
                raise LookupdError(
                    f"response body size ({size}) is greater than limit ({self._max_body_size})"
                )
            return await asyncio.wait_for(reader.readexactly(size), self.io_timeout_s)
        except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError) as e:
            self._disconnect()
            raise LookupdError(str(e) or type(e).__name__) from None
        except LookupdError:
            self._disconnect()
            raise

    def _disconnect(self) -> None:
        """Close the connection; the commands awaiting a reply stay for the task to settle."""
        self.connected = False
        self._ready = False
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class Node(Protocol):
    """What the lookup peers read of the daemon (NSQD): its options and its topics (each with
    ``name`` and ``channels`` by name)."""

    opts: Options
    topics: dict[str, Any]


class LookupPeers:
    """Every lookupd this node registers with (--lookupd-tcp-address, PUT /config).

    The core's notifications fan out to every peer's queue; ``http_addresses`` gives the
    identified lookupds' HTTP API addresses (broadcast_address:http_port).
    """

    def __init__(self, nsqd: Node) -> None:
        self.nsqd = nsqd
        self.peers: list[LookupPeer] = []
        self._hostname = socket.gethostname()
        self._session: Any = None
        self._pending: set[asyncio.Task[None]] = set()
        #: Replicated topics (nsqpy/replication): topic -> whether this node registers it
        #: (only a replicated topic's leader does); None (R=1 nodes) registers every topic.
        self.registers: Callable[[str], bool] | None = None

    # ------------------------------------------------------------ peers

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """Keep the peers still listed, close the others, add (and connect) the new ones, as
        nsqd's lookupLoop on an options change."""
        wanted = list(dict.fromkeys(addresses))
        if wanted:
            warm_import_aiohttp()
        kept: list[LookupPeer] = []
        for p in self.peers:
            if p.addr in wanted:
                kept.append(p)
            else:
                log.info("LOOKUP(%s): removing peer", p.addr)
                self._spawn(p.close())
        have = {p.addr for p in kept}
        for addr in wanted:
            if addr in have:
                continue
            log.info("LOOKUP(%s): adding peer", addr)
            peer = LookupPeer(addr, self.nsqd.opts.max_body_size, self.identity, self.state)
            peer.start()
            kept.append(peer)
        self.peers = kept

    def identity(self) -> dict[str, Any]:
        """IDENTIFY's body: what lookupd records about this node."""
        o = self.nsqd.opts
        return {
            "version": NSQ_VERSION,
            "tcp_port": o.broadcast_tcp_port,
            "http_port": o.broadcast_http_port,
            "hostname": self._hostname,
            "broadcast_address": o.broadcast_address,
            # Beyond nsqd: lets nsqpy-lookupd route GET /message?id= to this node (Go's
            # nsqlookupd ignores unknown IDENTIFY fields).
            "node_id": o.node_id,
        }

    def state(self) -> list[bytes]:
        """The REGISTER commands for every topic and channel this node has now."""
        cmds: list[bytes] = []
        registers = self.registers
        for t in self.nsqd.topics.values():
            if registers is not None and not registers(t.name):
                continue
            if not t.channels:
                cmds.append(register_cmd(t.name))
            else:
                cmds.extend(register_cmd(t.name, c) for c in t.channels)
        return cmds

    def http_addresses(self) -> list[str]:
        """HTTP API addresses of the identified lookupds (nsqd's lookupdHTTPAddrs)."""
        out = []
        for p in self.peers:
            addr = p.info.get("broadcast_address")
            if addr:
                out.append(join_host_port(str(addr), int(p.info.get("http_port", 0))))
        return out

    async def close(self) -> None:
        for task in list(self._pending):
            task.cancel()
        for p in self.peers:
            await p.close()
        self.peers = []
        if self._session is not None:
            await self._session.close()
            self._session = None
        log.info("LOOKUP: closing")

    # ------------------------------------------------------------ notifications (sync)

    def _notify(self, branch: str, cmd: bytes) -> None:
        for p in self.peers:
            log.info("LOOKUPD(%s): %s %s", p.addr, branch, _cmd_text(cmd))
            p.send(cmd)

    def topic_added(self, topic: str) -> None:
        if self.peers and (self.registers is None or self.registers(topic)):
            self._notify("topic", register_cmd(topic))

    def topic_removed(self, topic: str) -> None:
        if self.peers:
            self._notify("topic", unregister_cmd(topic))

    def channel_added(self, topic: str, channel: str) -> None:
        if self.peers and (self.registers is None or self.registers(topic)):
            self._notify("channel", register_cmd(topic, channel))

    def channel_removed(self, topic: str, channel: str) -> None:
        if self.peers:
            self._notify("channel", unregister_cmd(topic, channel))

    def register_topic(self, t: Any) -> None:
        """A replicated topic this node now leads: REGISTER it and each of its channels."""
        if self.peers:
            self._notify("topic", register_cmd(t.name))
            for c in t.channels:
                self._notify("channel", register_cmd(t.name, c))

    def unregister_topic(self, t: Any) -> None:
        """A replicated topic this node no longer leads: UNREGISTER its channels and it."""
        if self.peers:
            for c in t.channels:
                self._notify("channel", unregister_cmd(t.name, c))
            self._notify("topic", unregister_cmd(t.name))

    # ------------------------------------------------------------ channel pre-creation

    def precreate_channels(self, topic: str, done: Callable[[list[str]], None]) -> bool:
        """Ask the lookupds for ``topic``'s channels and call ``done(names)`` with them (also
        after errors or timeouts, with what was found; at the latest
        --http-client-request-timeout after this call, or when the peers close). Returns
        False, calling nothing, when no lookupd is identified yet (nsqd then logs an error and
        starts the topic at once)."""
        addrs = self.http_addresses()
        if not addrs:
            if self.nsqd.opts.nsqlookupd_tcp_addresses:
                log.error(
                    "no available nsqlookupd to query for channels to pre-create for topic %s",
                    topic,
                )
            return False
        self._spawn(self._query_channels(topic, addrs, done))
        return True

    async def _query_channels(
        self, topic: str, addrs: list[str], done: Callable[[list[str]], None]
    ) -> None:
        names: list[str] = []
        # the whole exchange with each lookupd, aiohttp's first import included, is bounded
        # as nsqd's HTTP client bounds it (Client.Timeout: the request timeout)
        bound = self.nsqd.opts.http_client_request_timeout_ms / 1000
        try:
            results = await asyncio.gather(
                *(asyncio.wait_for(self._channels_of(a, topic), bound) for a in addrs),
                return_exceptions=True,
            )
            errors = []
            for addr, r in zip(addrs, results):
                if isinstance(r, TimeoutError):
                    errors.append(f"{addr}: timed out after {bound:g} s")
                elif isinstance(r, BaseException):
                    errors.append(f"{addr}: {r}")
                else:
                    names.extend(n for n in r if n not in names)
            if errors:
                log.warning(
                    "failed to query nsqlookupd for channels to pre-create for topic %s - %s",
                    topic,
                    "; ".join(errors),
                )
        finally:
            done(names)

    async def _channels_of(self, addr: str, topic: str) -> list[str]:
        aiohttp = await load_aiohttp()
        if self._session is None:
            o = self.nsqd.opts
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=o.http_client_request_timeout_ms / 1000,
                    connect=o.http_client_connect_timeout_ms / 1000,
                )
            )
        url = f"http://{addr}/channels"
        async with self._session.get(
            url, params={"topic": topic}, headers={"Accept": ACCEPT_V1}
        ) as r:
            if r.status != 200:
                raise LookupdError(f"got response {r.status}")
            data = json.loads(await r.read())
        if isinstance(data, dict) and "data" in data and "channels" not in data:
            data = data["data"]  # pre-1.0 lookupd envelope
        channels = (data or {}).get("channels") or []
        return [str(c) for c in channels]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
