"""The replication stream of one topic: what the leader sends (:class:`LeaderStream`, one
:class:`Link` per other placement node), what a follower keeps (:class:`ReplicaLog`), and how a
node rejoins after a leader change. docs/replication.md explains the design; this docstring
gives the layouts a reader of the code needs.

``ENTRY`` = epoch (u32), seq (u64), delay in ms (u32, DPUB's; 0 otherwise), big-endian, then
the message record as message.py lays it out. (epoch, seq) names an entry cluster-wide; names
only grow along a log.

``POST /replica/append?topic=T&epoch=E&first=S&prev=P[&reset=1]`` carries ``[u32 size][entry]*``.
``prev`` is the name the follower's log must end with (``E:S``), ``-`` (the start of the
leader's history) or ``?`` (a probe). Answers: 200 ``{"next":N,"last":"E:S"}`` (plus
``"dirty"`` for a probe) once the entries are in the replica log and fsynced; 409
``{"message":"E_STALE_EPOCH"}`` (the sender was deposed) or ``{"message":"E_GAP E:S"}`` (the
log ends elsewhere).

Follower: a DiskQueue ``<topic>#replica`` whose read position is what this node has put into
its own topic; the last entry's name survives restarts in ``<topic>#replica.last`` (written
after the fsync of what it names). Leader: this epoch's entries while a link needs them, a
history of at most MAX_RETAINED older entries, and one future per publish command resolved in
seq order as the commit point passes it. With --replica-ack=all-isr committed records go to
``on_commit(plain, deferred)`` in seq order (the high watermark); with ``leader`` the caller
puts them into the topic at once."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Any, TypeAlias

from ..diskqueue import DiskQueue

log = logging.getLogger("nsqpy.replication")

ENTRY = struct.Struct(">IQI")
_SIZE = struct.Struct(">I")
#: The nsqd record header (message.py): 8 timestamp + 2 attempts + 16 ID.
RECORD_HEADER = 26
#: Most bytes one append request carries (more waits for the next request).
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: Most entries kept for a follower catching up (it is given up beyond).
MAX_RETAINED = 1_000_000
#: Sender backoff after a failed request, seconds.
RETRY_DELAY = 0.05
#: Longest wait between failed requests to a follower out of the ISR (down, restarting).
MAX_BACKOFF = 0.5

#: What a committed advance hands over: the plain records (seq order) and the DPUB ones with
#: their delay in ms; returns False when they could not be put (their publishers are refused).
OnCommit: TypeAlias = Callable[[list[bytes], list[tuple[bytes, int]]], bool]


class StaleEpoch(Exception):
    """A follower has seen a newer epoch than the sender's: the sender is deposed."""


Name = tuple[int, int]


def entry_name(entry: bytes) -> Name:
    """An entry's (epoch, seq)."""
    epoch, seq, _ = ENTRY.unpack_from(entry)
    return epoch, seq


def name_text(name: Name | None) -> str:
    """A name as the wire spells it: ``"E:S"``, or ``"-"`` for none (an empty log)."""
    return "-" if name is None else f"{name[0]}:{name[1]}"


def parse_name(text: str) -> Name | None:
    """The inverse of :func:`name_text`. ValueError when malformed."""
    if text == "-":
        return None
    epoch, sep, seq = text.partition(":")
    if not sep:
        raise ValueError(f"bad entry name {text!r}")
    return int(epoch), int(seq)


class Gap(Exception):
    """The batch does not follow what the follower has: ``last`` is the name of its last
    entry (None: its log is empty or its last name unknown), ``expected`` the seq it expects
    next in the sender's epoch (0 when its last entry is of an older epoch)."""

    def __init__(self, last: Name | None, expected: int) -> None:
        super().__init__(f"gap: follower's last entry is {name_text(last)}")
        self.last = last
        self.expected = expected


class NotFollowing(OSError):
    """A reset was asked of a node that still leads the topic in its own view (its copy of
    the record is older than the sender's): refused for now, the sender tries again."""


def encode_entries(entries: list[bytes]) -> bytes:
    """``[u32 size][entry]*`` for one append request."""
    pack = _SIZE.pack
    return b"".join(b for e in entries for b in (pack(len(e)), e))


def decode_entries(body: bytes) -> list[bytes]:
    """The entries of an append request body. ValueError when it does not parse."""
    out: list[bytes] = []
    i, n = 0, len(body)
    unpack = _SIZE.unpack_from
    while i < n:
        if i + 4 > n:
            raise ValueError("truncated entry size")
        (size,) = unpack(body, i)
        j = i + 4 + size
        if j > n or size < ENTRY.size + RECORD_HEADER:
            raise ValueError(f"bad entry size {size}")
        out.append(body[i + 4 : j])
        i = j
    return out


_LAST_SIZE = 32  # the ``.last`` file: "E:S" padded with spaces, rewritten in place


class ReplicaLog:
    """A follower's copy of one topic's stream: the DiskQueue ``<topic>#replica`` made by
    ``open_queue(name)`` (Storage.new_backend's sizes plus the entry header).

    ``last`` is the name of the last entry appended (None: none, or unknown), kept across
    restarts in ``last_path`` (``<topic>#replica.last``; written after the fsync of the data
    it names, never fsynced itself: a stale one names an older entry, which only makes the
    leader send some entries again, skipped by :meth:`drain`). ``epoch`` is the newest sender
    epoch seen, ``min_epoch`` the oldest epoch still accepted (raised by :meth:`fence` when
    this node learns of a newer record, so a deposed leader's late appends are refused even
    before the new leader sent anything). ``dirty()`` says whether this node's own topic
    still holds messages (from an earlier leadership of its own); ``on_reset()`` empties that
    topic for a leader of the given epoch and returns False when it cannot (this node does not
    know that epoch's record yet, or still leads in its own view)."""

    def __init__(
        self,
        topic: str,
        dq: DiskQueue,
        last_path: str | None = None,
        dirty: Callable[[], bool] | None = None,
        on_reset: Callable[[int], bool] | None = None,
    ) -> None:
        self.topic = topic
        self.dq = dq
        self.epoch = 0
        self.appended = 0
        self.resets = 0
        self.min_epoch = 0
        self.lock = asyncio.Lock()
        self.dirty = dirty
        self.on_reset = on_reset
        #: Entries taken out by drain() at the last promotion (the new leader's history).
        self.retained: deque[bytes] = deque(maxlen=MAX_RETAINED)
        self._data_fd = -1  # read-only fd of the write file, for the data-only fsync
        self._data_num = -1  # its file number (-1: none yet: the next sync is a full one)
        self.last: Name | None = None
        self._last_fd = -1
        if last_path is not None:
            self._last_fd = os.open(last_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                self.last = parse_name(os.pread(self._last_fd, _LAST_SIZE, 0).decode().strip())
            except (ValueError, UnicodeDecodeError):
                self.last = None  # absent or torn: unknown, the leader sends everything

    @property
    def next_seq(self) -> int:
        """The seq expected next in the newest sender epoch seen (0 when none of it is here)."""
        last = self.last
        return last[1] + 1 if last is not None and last[0] == self.epoch else 0

    def fence(self, epoch: int) -> None:
        """Refuse appends of epochs older than ``epoch`` from now on."""
        self.min_epoch = max(self.min_epoch, epoch)

    async def request(
        self, epoch: int, entries: list[bytes], prev: str | None, reset: bool = False
    ) -> dict[str, Any]:
        """One ``/replica/append`` request: :meth:`append`, then the answer
        ``{"next": N, "last": "E:S"}`` (with ``"dirty"`` for a probe, ``prev="?"``)."""
        await self.append(epoch, 0, entries, prev, reset)
        answer: dict[str, Any] = {"next": self.next_seq, "last": name_text(self.last)}
        if prev == "?":
            answer["dirty"] = bool(self.dirty is not None and self.dirty())
        return answer

    async def append(
        self,
        epoch: int,
        first: int,
        entries: list[bytes],
        prev: str | None = None,
        reset: bool = False,
    ) -> int:
        """Append the entries a leader of ``epoch`` sent (each names itself; those not after
        :attr:`last` are skipped: this log has them), fsync, and return :attr:`next_seq`.

        ``prev``: ``"?"`` a probe (nothing appended); ``"-"`` the batch starts the leader's
        history, to go after whatever this log has; ``"E:S"`` the name this log must end with
        (Gap otherwise); None (no chain check) only refuses a batch starting past the next seq
        of the epoch this log ends in. ``reset``: first empty this node's topic (on_reset) and
        this log (the leader found the topic dirty: a deposed leader's own data, its
        unacknowledged tail included, gives way to the leader's history). ``first`` is the
        sender's seq of the batch, informational. StaleEpoch, Gap, NotFollowing, OSError."""
        async with self.lock:
            if epoch < self.epoch or epoch < self.min_epoch:
                raise StaleEpoch()
            self.epoch = epoch
            if prev == "?":
                return self.next_seq
            if reset:
                self._reset(epoch)
            last = self.last
            if prev is None:
                if entries and last is not None:
                    head = entry_name(entries[0])
                    if head[0] == last[0] and head[1] > last[1] + 1:
                        raise Gap(last, self.next_seq)
            elif prev != "-" and parse_name(prev) != last:
                raise Gap(last, self.next_seq)
            i, n = 0, len(entries)
            if last is not None:
                while i < n and entry_name(entries[i]) <= last:
                    i += 1
            fresh = entries[i:] if i else entries
            if fresh:
                dq = self.dq
                dq.put_many(fresh)
                loop = asyncio.get_running_loop()
                if dq.needs_sync() or dq.write_file_num != self._data_num:
                    # the meta file too: due by --sync-every/--sync-timeout, or a new file
                    await loop.run_in_executor(None, dq.prepare_sync())
                    self._reopen_data()
                else:
                    dq.flush()
                    await loop.run_in_executor(None, os.fsync, self._data_fd)
                self.last = entry_name(fresh[-1])
                self._write_last()
                self.appended += len(fresh)
            return self.next_seq

    def _reset(self, epoch: int) -> None:
        if self.on_reset is not None and not self.on_reset(epoch):
            raise NotFollowing(f"topic {self.topic}: still leading here, not reset")
        log.warning("topic %s: replica log reset to the leader's history", self.topic)
        self.dq.empty()
        self._close_data()
        self.last = None
        self._write_last()
        self.resets += 1

    def _write_last(self) -> None:
        if self._last_fd >= 0:
            os.pwrite(self._last_fd, name_text(self.last).encode().ljust(_LAST_SIZE), 0)

    def _reopen_data(self) -> None:
        """Keep a read-only fd on the write file: fsync through any fd of a file makes its
        data durable, and the DiskQueue reopens past the meta file's write position (it keeps
        records found beyond it, diskqueue.py), so between meta syncs an append costs one
        fsync of the data."""
        num = self.dq.write_file_num
        if num == self._data_num:
            return
        self._close_data()
        self._data_fd = os.open(self.dq.file_name(num), os.O_RDONLY | os.O_CLOEXEC)
        self._data_num = num

    def _close_data(self) -> None:
        if self._data_fd >= 0:
            os.close(self._data_fd)
        self._data_fd, self._data_num = -1, -1

    def drain(self, limit: int = 1024) -> list[tuple[int, bytes]]:
        """Consume up to ``limit`` entries not yet put into this node's topic:
        [(delay_ms, record)], [] when none is left. An entry whose name is not after the one
        drained before it (sent twice after a stale ``.last``) is skipped. Every entry
        returned is also kept in :attr:`retained` (the newest MAX_RETAINED)."""
        out: list[tuple[int, bytes]] = []
        hs = ENTRY.size
        unpack = ENTRY.unpack_from
        keep = self.retained
        while not out:
            _, raw = self.dq.read_many(limit)
            if not raw:
                break
            top = entry_name(keep[-1]) if keep else (-1, -1)
            for e in raw:
                epoch, seq, delay = unpack(e)
                if (epoch, seq) <= top:
                    continue
                top = (epoch, seq)
                keep.append(e)
                out.append((delay, e[hs:]))
        return out

    def trim(self, finished: Callable[[bytes], bool], limit: int) -> int:
        """Drop up to ``limit`` entries from the front of the part not yet put into this
        node's topic, while ``finished(record)`` (the nsqd record, without the entry header)
        says every channel finished it (local.trim_log, from the progress rounds); returns
        how many went. Such an entry is neither put into the topic at a promotion nor sent
        as history: no channel could deliver it again. One peek/advance each, so only what
        is dropped is consumed (a crash before the meta file's next sync brings some back:
        filtered again at a promotion). OSError from the DiskQueue."""
        dq = self.dq
        hs = ENTRY.size
        n = 0
        while n < limit:
            e = dq.peek()
            if e is None or not finished(e[hs:]):
                break
            dq.advance()
            n += 1
        return n

    def take_retained(self) -> list[bytes]:
        """The entries drained since the last call, in order (then forgotten here)."""
        out = list(self.retained)
        self.retained.clear()
        return out

    def sync_job(self) -> Callable[[], None]:
        return self.dq.prepare_sync()

    def close(self) -> None:
        self._close_data()
        if self._last_fd >= 0:
            os.close(self._last_fd)
            self._last_fd = -1
        self.dq.close()


class Link:
    """The leader's sender to one follower: ``node_id``, ``acked`` (the seq of this epoch it
    expects next: everything below is durable there; 0 while it is still given the history
    before this epoch), ``behind_since`` (monotonic seconds since when it has had entries
    pending without acknowledging, 0 when caught up), ``last`` (the name of the follower's
    last entry, as it last answered), ``probed`` (``last`` is known: a probe or an append
    answered since the link started or last failed), ``reset`` (it answered its topic dirty:
    its next request empties its topic and log)."""

    __slots__ = (
        "acked",
        "backoff",
        "behind_since",
        "in_isr",
        "last",
        "node_id",
        "probed",
        "refused",
        "reset",
        "task",
        "wake",
    )

    def __init__(self, node_id: str, acked: int) -> None:
        self.node_id = node_id
        #: False while catching up (out of the ISR: not waited for); ``refused``: it answered
        #: E_STALE_EPOCH, so it is not kept for catch-up either.
        self.in_isr = True
        self.refused = False
        self.acked = acked
        self.behind_since = 0.0
        self.last: Name | None = None
        self.probed = False
        self.reset = False
        self.backoff = RETRY_DELAY
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class LeaderStream:
    """One topic's stream as its leader in ``epoch``: ``append`` assigns seqs and keeps the
    entries until every link has them; ``commit_waiter`` gives a future answered True once
    every in-sync link acknowledged up to it and ``allowed()`` says acknowledging is safe (a
    ``may_acknowledge`` and min-ISR check), False otherwise. ``http`` is an aiohttp
    ClientSession; ``address_of(node_id)`` a follower's HTTP "host:port" ("" when unknown);
    ``on_lagging(node_id)`` is called (once per lag) for a link that acknowledged nothing for
    ``timeout`` seconds while entries were pending.

    Catch-up (docs/replication.md, "Rejoining"): every other placement node gets a link
    for the whole epoch, waited for only while it is in the ISR. A link first probes the
    follower for the name of its last entry and whether its topic is dirty, then sends what
    follows that name in this leader's history: :attr:`history` (the entries it drained from
    its replica log at promotion, under their old names, at most ``MAX_RETAINED``), then this
    epoch's entries, which are kept for every out-of-ISR link (at most ``MAX_RETAINED``
    behind; past that it is given up for this epoch). Once an out-of-ISR follower has
    everything appended so far, the link counts again at once (so no publish is acknowledged
    without it from then on) and ``on_caught_up(node_id)`` is called, which re-admits it to
    the ISR in etcd (Coordinator.expand_isr).

    ``on_commit``: the high watermark (module docstring); None when the caller delivers at the
    local append. ``dropped`` counts the records it never handed over (refused, or uncommitted
    when the stream closed)."""

    def __init__(
        self,
        topic: str,
        epoch: int,
        http: Any,
        address_of: Callable[[str], str],
        allowed: Callable[[], bool],
        on_lagging: Callable[[str], None],
        timeout: float,
        on_caught_up: Callable[[str], None] | None = None,
        on_commit: OnCommit | None = None,
    ) -> None:
        self.topic = topic
        self.epoch = epoch
        self.http = http
        self.address_of = address_of
        self.allowed = allowed
        self.on_lagging = on_lagging
        self.on_caught_up = on_caught_up
        self.timeout = timeout
        self.base = 0  # seq of entries[0]
        self.entries: list[bytes] = []
        self.next_seq = 0
        self.links: dict[str, Link] = {}
        self.waiters: deque[tuple[int, asyncio.Future[bool]]] = deque()
        self.committed = 0
        self.closed = False
        self.history: list[bytes] = []  # set_history
        self.given_up: set[str] = set()  # out-of-ISR nodes this epoch can no longer serve
        self.on_commit = on_commit
        #: Records not yet committed: (first seq, end seq, records, delay ms) per append.
        self.pending: deque[tuple[int, int, list[bytes], int]] = deque()
        self.dropped = 0

    # ------------------------------------------------------------ links

    def set_history(self, entries: list[bytes]) -> None:
        """The entries before this epoch that this leader holds (drained from its replica log
        at promotion, oldest first, names increasing): sent to a follower after its last."""
        self.history = entries

    def set_links(self, followers: list[str], others: list[str] | None = None) -> None:
        """``followers``: the in-sync followers now; ``others``: the other placement nodes
        (node ids). Every one of them has a link (new ones start with a probe); those out of
        the ISR are not waited for (catch-up), and are stopped instead when they refused this
        epoch, were given up, or catch-up is off; then re-check the waiters."""
        catch_up = self.on_caught_up is not None
        wanted = set(followers)
        if catch_up:
            wanted.update(n for n in others or () if n not in self.given_up)
        for node_id, link in list(self.links.items()):
            if node_id not in followers:
                if link.refused or node_id not in wanted:
                    self._stop_link(self.links.pop(node_id))
                else:
                    link.in_isr = False
        for node_id in [*followers, *(n for n in wanted if n not in followers)]:
            link_now = self.links.get(node_id)
            if link_now is not None:
                if node_id in followers:
                    link_now.in_isr = True
            else:
                link = Link(node_id, self.base)
                link.in_isr = node_id in followers
                link.task = asyncio.get_running_loop().create_task(
                    self._send_loop(link), name=f"replicate-{self.topic}-{node_id}"
                )
                self.links[node_id] = link
        self._advance()

    def _stop_link(self, link: Link) -> None:
        if link.task is not None:
            link.task.cancel()
            link.task = None

    def close(self, answer: bool = False) -> None:
        """Stop every link and answer every waiter ``answer`` (False: not acknowledged)."""
        self.closed = True
        for link in self.links.values():
            self._stop_link(link)
        self.links.clear()
        self.dropped += sum(end - first for first, end, _, _ in self.pending)
        self.pending.clear()
        while self.waiters:
            _, fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(answer)

    # ------------------------------------------------------------ publishing

    def append(self, records: list[bytes], delay_ms: int = 0) -> int:
        """Assign the next seqs to ``records`` and queue them for every link; returns the seq
        after the last one (what commit_waiter takes)."""
        seq = self.next_seq
        head = ENTRY.pack
        epoch = self.epoch
        entries = self.entries
        for r in records:
            entries.append(head(epoch, seq, delay_ms) + r)
            seq += 1
        if self.on_commit is not None and records:
            self.pending.append((self.next_seq, seq, records, delay_ms))
        self.next_seq = seq
        waited = False
        for link in self.links.values():
            link.wake.set()
            waited = waited or link.in_isr
        if not waited:  # no in-sync follower (only catching-up ones, or none): committed now
            self._advance()
        return seq

    def commit_waiter(self, end: int) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if end <= self.committed:
            fut.set_result(self.allowed())
        else:
            self.waiters.append((end, fut))
        return fut

    def _advance(self) -> None:
        """Recompute the committed seq, answer the waiters it passed, drop entries every link
        has."""
        links = self.links.values()
        committed = min((lk.acked for lk in links if lk.in_isr), default=self.next_seq)
        self.committed = committed
        waiters = self.waiters
        pending = self.pending
        ok: bool | None = None
        if pending and pending[0][0] < committed:
            ok = self._hand_over(committed, self.allowed())
        if waiters and waiters[0][0] <= committed:
            if ok is None:
                ok = self.allowed()
            while waiters and waiters[0][0] <= committed:
                _, fut = waiters.popleft()
                if not fut.done():
                    fut.set_result(ok)
        keep = committed
        for lk in list(links):
            if not lk.in_isr:
                if self.next_seq - lk.acked > MAX_RETAINED:
                    log.warning(
                        "topic %s: %s is too far behind to catch up", self.topic, lk.node_id
                    )
                    self._stop_link(self.links.pop(lk.node_id))
                else:
                    keep = min(keep, lk.acked)
        drop = keep - self.base
        if drop > 0:
            del self.entries[:drop]
            self.base = keep

    def _hand_over(self, committed: int, ok: bool) -> bool:
        """The pending records below ``committed`` go to on_commit (``ok``) or are dropped;
        returns whether their publishers may be acknowledged."""
        pending = self.pending
        plain: list[bytes] = []
        deferred: list[tuple[bytes, int]] = []
        while pending and pending[0][0] < committed:
            first, end, records, delay = pending[0]
            if end <= committed:
                pending.popleft()
            else:  # an MPUB split across append requests: the committed part only
                cut = committed - first
                pending[0] = (committed, end, records[cut:], delay)
                records = records[:cut]
            if delay:
                deferred.extend((r, delay) for r in records)
            elif plain:
                plain.extend(records)
            else:
                plain = list(records)
        if ok and self.on_commit is not None and self.on_commit(plain, deferred):
            return True
        self.dropped += len(plain) + len(deferred)
        return False

    # ------------------------------------------------------------ one link

    def _batch(self, link: Link) -> list[bytes] | None:
        """What ``link`` needs next (at most MAX_REQUEST_BYTES): the history entries after its
        follower's last name, else this epoch's entries after it; [] when it has everything,
        None when what it needs is no longer kept."""
        last = link.last
        if last is not None and last[0] >= self.epoch:
            start = min(last[1] + 1, self.next_seq) if last[0] == self.epoch else self.next_seq
        else:
            hist = self.history
            i = 0 if last is None else bisect_right(hist, last, key=entry_name)
            if i < len(hist):
                return _take(hist, i)
            start = 0
        if start < self.base:
            return None
        return _take(self.entries, start - self.base)

    def _acked_of(self, last: Name | None) -> int:
        if last is None or last[0] < self.epoch:
            return 0
        return min(last[1] + 1, self.next_seq) if last[0] == self.epoch else self.next_seq

    async def _send_loop(self, link: Link) -> None:
        lagging_reported = False
        node = link.node_id
        while not self.closed:
            if link.reset and link.in_isr:
                # a dirty follower still in the ISR: out of it first (so it is never elected
                # while its log is being replaced), then reset
                if not lagging_reported:
                    lagging_reported = True
                    self.on_lagging(node)
                await asyncio.sleep(RETRY_DELAY)
                continue
            batch: list[bytes] | None = []
            params = {"topic": self.topic, "epoch": str(self.epoch), "first": "0"}
            if not link.probed:
                params["prev"] = "?"
            else:
                if link.reset:
                    link.last = None
                    params["reset"] = "1"
                batch = self._batch(link)
                if batch is None:
                    log.warning("topic %s: %s is too far behind to catch up", self.topic, node)
                    self.given_up.add(node)
                    self.links.pop(node, None)
                    self.on_lagging(node)
                    self._advance()
                    return
                if not batch and not link.reset:
                    link.behind_since = 0.0
                    lagging_reported = False
                    if not link.in_isr and self.on_caught_up is not None:
                        link.in_isr = True  # waited for from now on, before etcd says so
                        self.on_caught_up(node)
                        self._advance()
                    link.wake.clear()
                    await link.wake.wait()
                    continue
                params["prev"] = "-" if link.reset else name_text(link.last)
                params["first"] = str(link.acked)
                if not link.behind_since:
                    link.behind_since = time.monotonic()
            address = self.address_of(node)
            url = f"http://{address}/replica/append"
            try:
                if not address:
                    raise OSError(f"no address for node {node}")
                async with self.http.post(
                    url, params=params, data=encode_entries(batch or []), timeout=self.timeout
                ) as resp:
                    text = await resp.read()
                    answer = json.loads(text) if text else {}
                    status = resp.status
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: retried, then lagging
                status, answer = -1, {"message": repr(exc)}
            message = str(answer.get("message", ""))
            if status == 200:
                link.backoff = RETRY_DELAY
                link.last = parse_name(str(answer.get("last", "-")))
                if not link.probed:
                    link.probed = True
                    link.reset = bool(answer.get("dirty"))
                    if link.reset:
                        log.info(
                            "topic %s: %s holds data of its own: resetting it", self.topic, node
                        )
                elif "reset" in params:
                    link.reset = False
                link.acked = self._acked_of(link.last)
                if link.acked >= self.next_seq and not self._batch(link):
                    link.behind_since = 0.0
                elif batch:
                    link.behind_since = time.monotonic()
                self._advance()
                continue
            if status == 409 and message == "E_STALE_EPOCH":
                link.refused = True
                log.warning("topic %s: %s has a newer epoch than %d", self.topic, node, self.epoch)
                self.on_lagging(node)
                return
            if status == 409 and message.startswith("E_GAP "):
                link.last = parse_name(message[6:])  # where the follower really is
                link.acked = self._acked_of(link.last)
                continue
            link.probed = False  # it may have restarted: ask again where it is
            if (
                link.in_isr
                and not lagging_reported
                and link.behind_since
                and time.monotonic() - link.behind_since >= self.timeout
            ):
                log.warning(
                    "topic %s: follower %s lags (%s): leaving the ISR", self.topic, node, message
                )
                lagging_reported = True
                self.on_lagging(node)
            await asyncio.sleep(link.backoff)
            if not link.in_isr:
                link.backoff = min(link.backoff * 2, MAX_BACKOFF)


def _take(entries: list[bytes], start: int) -> list[bytes]:
    """Entries from ``start`` on, at most MAX_REQUEST_BYTES of them (one at least)."""
    batch: list[bytes] = []
    size = 0
    for j in range(start, len(entries)):
        e = entries[j]
        if batch and size + len(e) > MAX_REQUEST_BYTES:
            break
        batch.append(e)
        size += len(e) + 4
    return batch
