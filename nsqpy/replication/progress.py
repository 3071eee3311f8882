"""Channel progress of replicated topics: what each of the leader's channels has
finished, kept by the followers, so that a new leader redelivers only what may be unfinished.

Which messages count as finished. Message IDs are nsqd's snowflake GUIDs (guid.py): one node's
IDs strictly increase, and a leader makes every record of its stream itself (nsqd.new_records /
new_record, then LeaderStream.append in the same synchronous call), so within one node's IDs
the stream order is the ID order (assumed across a node's restarts too: its clock does not go
back past IDs it made before, which nsqd's IDs need anyway to stay unique). The leader keeps
``high``: per minting node id (the GUID's 10 node bits), the highest ID it has put into its
topic (committed records; at a promotion, every replica-log entry it went through). A channel's
progress is a snapshot of the IDs it still holds (Channel.held_ids: queued, read ahead, in
flight, deferred) taken in the same event-loop step as ``high``; then an ID ``g`` of node ``n``
was finished in that channel iff ``g <= high[n]`` and ``g`` is not held. Past ``MAX_LIVE`` held
IDs (for every channel: past ``MAX_ROUND_BYTES`` for the round) only the per-node lowest held
ID (the *floor*) is sent: ``g`` was finished iff ``g <= high[n]`` and ``g < floor[n]`` (no
floor for ``n``: nothing of ``n`` is held). A channel with messages on disk not yet read (or
more than ``MAX_HELD``) cannot be enumerated: it is sent as unknown, and the follower keeps
what it had for it. A topic that holds messages itself (no channel yet, paused, starting, a
backlog being moved to its channels) sends no round: those messages are in no channel yet. A
topic whose channels exist but that has put no message yet does send one (nothing finished):
without it, a leader lost in its topic's first second of traffic left no record naming the
channels, and the new leader's backlog went to whichever channel subscribed first.

Why an older record stays safe. A finished message never comes back into its channel (what a
REQ, a timeout or a disconnect puts back was never finished), so what a record says finished
stays true; a follower may keep a channel's older entry when the new round says unknown, and a
message published after a round is just not known finished (``> high``).

Wire and file layout (msgpack, integers as msgpack ints, ``live`` as bin):

- ``POST /replica/progress?topic=T&epoch=E`` body:
  ``{"v": 1, "epoch": E, "high": {node: guid}, "channels": {name: entry | nil}}`` with
  ``entry = {"floor": {node: guid}, "live": bin | nil}``; ``live`` is the held IDs as
  big-endian u64s, ascending (nil past MAX_LIVE); nil for the entry: unknown. Answer 200
  ``{"rounds": N}`` once written, 409 ``{"message": "E_STALE_EPOCH"}`` from a deposed leader.
- The follower's side file ``<data-path>/<topic>#replica.progress`` (written to a temporary
  name, fsynced, renamed over): ``{"v": 1, "topic": T, "epoch": E, "rounds": N, "channels":
  {name: {"high": {..}, "floor": {..}, "live": bin | nil} | nil}}``: each channel keeps the
  ``high`` of the round its entry came from.

At promotion (:class:`Promotion`): the channels named are created first (each gets its copy
of the backlog; a topic with no channel would otherwise hand it to whichever channel comes
first), then each replica-log entry goes into each channel unless that channel's entry says
it was finished; the entries put into a named channel are counted as *redelivered* (they may
have been delivered before). Channels the record does not name get every entry, uncounted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
from typing import TYPE_CHECKING, Any, Protocol

import msgpack

from ..guid import NODE_ID_BITS, NODE_ID_SHIFT
from ..internal.fileutil import write_sync_file
from ..message import HEADER_LENGTH, ID_END, ID_START
from ..topic import Topic
from .broker import Broker
from .role import TopicRole

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("nsqpy.replication")

LAYOUT_VERSION = 1
#: Seconds between two progress rounds of a leader.
INTERVAL = 1.0
#: Most held IDs sent per channel (8 bytes each); past it the floors only.
MAX_LIVE = 16_384
#: Most held messages a channel's snapshot walks through; past it the channel is unknown.
MAX_HELD = 100_000
#: Largest round body sent with the held IDs (the follower takes up to entries.py's
#: MAX_REQUEST_BYTES plus --max-msg-size); past it every channel sends its floors only.
MAX_ROUND_BYTES = 4 * 1024 * 1024
#: The side file's name after the topic's ('#' as in the replica log's "<topic>#replica").
FILE_SUFFIX = "#replica.progress"
#: a side file's temp file: fileutil.write_sync_file's "<path>.<digits>.tmp", or ".tmp<N>"
_TEMP_NAME = re.compile(r".+" + re.escape(FILE_SUFFIX) + r"(\.[0-9]+\.tmp|\.tmp[0-9]+)")

_NODE_MASK = (1 << NODE_ID_BITS) - 1


def node_of(guid: int) -> int:
    """The minting node id (``--node-id``) of a GUID."""
    return (guid >> NODE_ID_SHIFT) & _NODE_MASK


def guid_of(record: bytes) -> int:
    """A message record's ID as an integer (the 16 hex digits at ID_START)."""
    return int(record[ID_START:ID_END], 16)


class ChannelProgress:
    """One channel's entry: ``high`` and ``floor`` (node id -> GUID), ``live`` (the held IDs
    as packed big-endian u64s, or None past MAX_LIVE)."""

    __slots__ = ("_live_set", "floor", "high", "live")

    def __init__(self, high: dict[int, int], floor: dict[int, int], live: bytes | None) -> None:
        self.high = high
        self.floor = floor
        self.live = live
        self._live_set: frozenset[int] | None = None

    def finished(self, guid: int) -> bool:
        """Was the message ``guid`` finished in this channel (module docstring)?"""
        h = self.high.get(node_of(guid))
        if h is None or guid > h:
            return False
        if self.live is not None:
            live = self._live_set
            if live is None:
                n = len(self.live) // 8
                live = self._live_set = frozenset(struct.unpack(f">{n}Q", self.live))
            return guid not in live
        f = self.floor.get(node_of(guid))
        return f is None or guid < f

    def to_obj(self) -> dict[str, Any]:
        return {"high": self.high, "floor": self.floor, "live": self.live}


def _int_map(obj: Any, what: str) -> dict[int, int]:
    if not isinstance(obj, dict) or not all(
        isinstance(k, int) and isinstance(v, int) for k, v in obj.items()
    ):
        raise ValueError(f"progress: {what} must map integers to integers")
    return obj


def _entry(obj: Any, high: dict[int, int] | None) -> ChannelProgress | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ValueError("progress: a channel entry must be a map or nil")
    live = obj.get("live")
    if live is not None and (not isinstance(live, bytes) or len(live) % 8):
        raise ValueError("progress: live must be bin of u64s or nil")
    h = _int_map(obj.get("high"), "high") if high is None else high
    return ChannelProgress(h, _int_map(obj.get("floor"), "floor"), live)


# ------------------------------------------------------------------ leader side


def note_high(high: dict[int, int], other: dict[int, int]) -> None:
    """Raise ``high`` (node id -> GUID) to ``other`` where it is higher."""
    for node, g in other.items():
        if g > high.get(node, -1):
            high[node] = g


def note_records(
    high: dict[int, int], plain: list[bytes], deferred: list[tuple[bytes, int]]
) -> None:
    """``high`` after putting records this node made in order (IDs increase: the last plain
    and the last deferred one are enough)."""
    for r in (*plain[-1:], *(r for r, _ in deferred[-1:])):
        g = guid_of(r)
        n = node_of(g)
        if g > high.get(n, -1):
            high[n] = g


def snapshot(topic: Topic, high: dict[int, int]) -> dict[str, dict[str, Any] | None] | None:
    """The ``channels`` of a round for ``topic`` (topic.Topic), or None when no round can be
    made now (it holds messages itself, or has no channel). A topic that has put nothing yet
    (``high`` empty) still sends its channels, each with nothing finished: a follower promoted
    before the first message's round then knows them and gives each its copy of the backlog.
    Synchronous: one event-loop step."""
    if topic.depth or topic.paused or topic.starting or not topic.channels:
        return None
    out: dict[str, dict[str, Any] | None] = {}
    for name, ch in topic.channels.items():
        if ch.ephemeral:
            continue
        ids = ch.held_ids(MAX_HELD)
        if ids is None:
            out[name] = None
            continue
        guids = [int(i, 16) for i in ids]
        floor: dict[int, int] = {}
        for g in guids:
            n = node_of(g)
            f = floor.get(n)
            if f is None or g < f:
                floor[n] = g
        live: bytes | None = None
        if len(guids) <= MAX_LIVE:
            guids.sort()
            live = struct.pack(f">{len(guids)}Q", *guids)
        out[name] = {"floor": floor, "live": live}
    return out


def encode_round(
    epoch: int, high: dict[int, int], channels: dict[str, dict[str, Any] | None]
) -> bytes:
    """A /replica/progress body (module docstring)."""
    body: bytes = msgpack.packb(
        {"v": LAYOUT_VERSION, "epoch": epoch, "high": high, "channels": channels}
    )
    return body


def decode_round(body: bytes) -> tuple[int, dict[str, ChannelProgress | None]]:
    """(epoch, channel name -> entry or None) of a /replica/progress body; ValueError when it
    is not a layout-1 round."""
    try:
        obj = msgpack.unpackb(body, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several kinds
        raise ValueError(f"progress: not msgpack: {exc}") from None
    if not isinstance(obj, dict) or obj.get("v") != LAYOUT_VERSION:
        raise ValueError("progress: not a layout-1 round")
    epoch = obj.get("epoch")
    channels = obj.get("channels")
    if not isinstance(epoch, int) or not isinstance(channels, dict):
        raise ValueError("progress: epoch or channels missing")
    high = _int_map(obj.get("high"), "high")
    out: dict[str, ChannelProgress | None] = {}
    for name, e in channels.items():
        if not isinstance(name, str):
            raise ValueError("progress: channel names must be strings")
        out[name] = _entry(e, high)
    return epoch, out


class Peers(Protocol):
    """What a leader's rounds need of node.Replication: the daemon, the members' HTTP
    addresses (node id -> "host:port"), the HTTP client and the request timeout (seconds)."""

    @property
    def nsqd(self) -> Broker: ...

    @property
    def members(self) -> dict[str, str]: ...

    @property
    def http(self) -> aiohttp.ClientSession | None: ...

    @property
    def timeout(self) -> float: ...


class Rounds:
    """A leader's progress rounds. ``repl``: node.Replication (as Peers); a round of topic
    role ``tr`` reads ``tr.stream`` (epoch, links), ``tr.high`` and the local topic, and
    counts ``tr.progress_sent``."""

    def __init__(self, repl: Peers) -> None:
        self.repl = repl

    async def loop(self, tr: TopicRole) -> None:
        """While leader (cancelled at step-down): a round every INTERVAL seconds."""
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                await self.round(tr)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged; the next round tries again
                log.warning("REPLICATION: progress round: %r", exc)

    async def round(self, tr: TopicRole) -> None:
        """One round: a snapshot of the topic's channels (one event-loop step) sent to every
        follower the stream has a link to; nothing when no round can be made now."""
        stream = tr.stream
        name = tr.state.record.topic
        t = self.repl.nsqd.topics.get(name)
        if stream is None or t is None or stream.closed:
            return
        channels = snapshot(t, tr.high)
        targets = [lk.node_id for lk in stream.links.values() if not lk.refused]
        if channels is None or not targets:
            return
        body = encode_round(stream.epoch, tr.high, channels)
        if len(body) > MAX_ROUND_BYTES:  # many channels: floors only (the follower's limit)
            for entry in channels.values():
                if entry is not None:
                    entry["live"] = None
            body = encode_round(stream.epoch, tr.high, channels)
        answers = await asyncio.gather(
            *(self._send(name, stream.epoch, node, body) for node in targets)
        )
        if any(answers):
            tr.progress_sent += 1

    async def ask_leader(self, leader: str, topic: str) -> None:
        """Ask node ``leader`` for one round of ``topic`` now (its ``POST /replica/round``,
        answered once sent: before leadership moves off it in a placement change).
        OSError (unreachable, or it answered other than 200), TimeoutError."""
        repl = self.repl
        address = repl.members.get(leader, "")
        if not address or repl.http is None:
            raise OSError(f"no address for node {leader}")
        async with repl.http.post(
            f"http://{address}/replica/round",
            params={"topic": topic},
            # seconds: aiohttp makes them a ClientTimeout(total=...)
            timeout=repl.timeout * 2,  # type: ignore[arg-type]
        ) as resp:
            await resp.read()
            if resp.status != 200:
                raise OSError(f"node {leader} answered {resp.status}")

    async def _send(self, topic: str, epoch: int, node: str, body: bytes) -> bool:
        repl = self.repl
        address = repl.members.get(node, "")
        http = repl.http
        if not address or http is None:
            return False
        params = {"topic": topic, "epoch": str(epoch)}
        try:
            async with http.post(
                f"http://{address}/replica/progress",
                params=params,
                data=body,
                # seconds: aiohttp makes them a ClientTimeout(total=...)
                timeout=repl.timeout,  # type: ignore[arg-type]
            ) as resp:
                await resp.read()
                return bool(resp.status == 200)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next round tries again
            log.debug("REPLICATION: progress to %s: %r", node, exc)
            return False


# ------------------------------------------------------------------ follower side


class ProgressStore:
    """The progress records a follower keeps, per topic, in memory and in its side file under
    ``data_path``. ``rounds[topic]``: rounds received (since this process started)."""

    def __init__(self, data_path: str) -> None:
        self.data_path = data_path
        self.records: dict[str, dict[str, ChannelProgress | None]] = {}
        self.epochs: dict[str, int] = {}
        self.rounds: dict[str, int] = {}

    def path(self, topic: str) -> str:
        return os.path.join(self.data_path, topic + FILE_SUFFIX)

    def merge(self, topic: str, epoch: int, channels: dict[str, ChannelProgress | None]) -> bytes:
        """Take a round: a channel sent as unknown keeps its older entry; channels not named
        are gone. Returns the side file's new content (for :meth:`write`)."""
        old = self.records.get(topic) or {}
        new = {name: (cp if cp is not None else old.get(name)) for name, cp in channels.items()}
        self.records[topic] = new
        self.epochs[topic] = epoch
        n = self.rounds[topic] = self.rounds.get(topic, 0) + 1
        content: bytes = msgpack.packb(
            {
                "v": LAYOUT_VERSION,
                "topic": topic,
                "epoch": epoch,
                "rounds": n,
                "channels": {k: (v.to_obj() if v is not None else None) for k, v in new.items()},
            }
        )
        return content

    async def receive(self, topic: str, epoch: int, body: bytes, newest: int) -> int:
        """A /replica/progress round: merged and written (in an executor) before it returns
        the rounds taken for ``topic``. ``newest``: the newest epoch this node knows for the
        topic (-1: it leads it, so refuses). ValueError (bad body), StaleEpoch, OSError."""
        from .entries import StaleEpoch

        _, channels = decode_round(body)
        if newest < 0 or epoch < newest:
            raise StaleEpoch
        content = self.merge(topic, epoch, channels)
        await asyncio.get_running_loop().run_in_executor(None, self.write, topic, content)
        return self.rounds[topic]

    def write(self, topic: str, content: bytes) -> None:
        """Atomically replace the side file (fileutil.write_sync_file: temp file, fsync,
        rename; the temp file is removed when that fails). Blocking: run it in an executor.
        OSError."""
        write_sync_file(self.path(topic), content)

    def sweep(self) -> list[str]:
        """Remove side-file temp files that a crash in the middle of :meth:`write` left in
        ``data_path`` ("<topic>#replica.progress.<digits>.tmp", and the ".tmp<N>" names of
        earlier builds); call before any write. Returns the names removed (errors logged)."""
        removed: list[str] = []
        try:
            names = os.listdir(self.data_path)
        except OSError as exc:
            log.error("REPLICATION: cannot list %s: %s", self.data_path, exc)
            return removed
        for name in names:
            if _TEMP_NAME.fullmatch(name) is None:
                continue
            try:
                os.unlink(os.path.join(self.data_path, name))
                removed.append(name)
            except OSError as exc:
                log.error("REPLICATION: cannot remove %s: %s", name, exc)
        if removed:
            log.info("REPLICATION: removed %d leftover progress temp files", len(removed))
        return removed

    def load(self, topic: str) -> dict[str, ChannelProgress | None] | None:
        """The record of ``topic``: in memory, else from its side file; None when none (or it
        does not parse, which is logged)."""
        rec = self.records.get(topic)
        if rec is not None:
            return rec
        try:
            with open(self.path(topic), "rb") as f:
                obj = msgpack.unpackb(f.read(), strict_map_key=False)
            if not isinstance(obj, dict) or obj.get("v") != LAYOUT_VERSION:
                raise ValueError("not a layout-1 progress file")
            chans = obj["channels"]
            rec = {str(k): _entry(v, None) for k, v in chans.items()}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("REPLICATION: topic %s: progress file unreadable: %s", topic, exc)
            return None
        self.records[topic] = rec
        return rec

    def forget(self, topic: str) -> None:
        """Drop the record of ``topic`` (used at this node's promotion, and with the topic)."""
        self.records.pop(topic, None)
        self.epochs.pop(topic, None)
        try:
            os.unlink(self.path(topic))
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("REPLICATION: topic %s: cannot remove the progress file: %s", topic, exc)


# ------------------------------------------------------------------ promotion


class Promotion:
    """Puts replica-log entries into ``topic`` at a promotion, filtered by ``record`` (channel
    name -> entry or None; None or {} for no record: everything into the topic as for R=1).
    ``high`` gathers node id -> highest ID gone through; ``redelivered`` counts (entry,
    named channel) puts."""

    def __init__(self, topic: Topic, record: dict[str, ChannelProgress | None] | None) -> None:
        self.topic = topic
        self.record = record or {}
        self.high: dict[int, int] = {}
        self.redelivered = 0
        for name in self.record:
            topic.get_channel(name)

    def put(self, batch: list[tuple[int, bytes]]) -> None:
        """One drained batch of (delay ms, record), in log order. TopicError, OSError."""
        high = self.high
        guids = []
        for _, r in batch:
            g = guid_of(r)
            guids.append(g)
            n = node_of(g)
            if g > high.get(n, -1):
                high[n] = g
        t = self.topic
        if not self.record or not t.channels:
            plain = [r for d, r in batch if not d]
            if plain:
                t.put_many(plain, in_order=False)
            for d, r in batch:
                if d:
                    t.put_deferred(r, d)
            return
        t.message_count += len(batch)
        t.message_bytes += sum(len(r) for _, r in batch) - HEADER_LENGTH * len(batch)
        for name, ch in list(t.channels.items()):
            named = name in self.record
            cp = self.record.get(name)
            plain = []
            n = 0
            for g, (d, r) in zip(guids, batch, strict=True):
                if cp is not None and cp.finished(g):
                    continue
                n += 1
                if d:
                    ch.put_deferred(r, d)
                else:
                    plain.append(r)
            if plain:
                ch.put_many(plain, in_order=False)
            if named:
                self.redelivered += n
