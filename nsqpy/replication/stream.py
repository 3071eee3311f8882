"""The replication stream of one topic: what the leader sends, what a follower keeps
(issue 21 §3, first slice).

Entries. Every message a leader accepts (a PUB, each message of an MPUB, a DPUB) becomes one
*entry*: ``ENTRY`` = epoch (u32), seq (u64), delay in ms (u32, DPUB's; 0 otherwise), all
big-endian, then the nsqd message record exactly as message.py lays it out (26-byte header:
timestamp, attempts, 16-byte ID; then the body). ``seq`` counts entries within one epoch from 0;
(epoch, seq) names an entry cluster-wide.

Transport: nsqpy-d's own HTTP port, ``POST /replica/append?topic=T&epoch=E&first=S`` with the
entries as ``[u32 size][entry]*``; the follower answers 200 ``{"next":N}`` (the seq it expects
next) once the entries are in its replica log *and fsynced*, or 409 ``{"message":"E_STALE_EPOCH"}``
(it has seen a newer epoch: the sender was deposed) or 409 ``{"message":"E_GAP N"}`` (it
expects seq N first).
Why HTTP and not a new magic on the TCP port: the request/response pair is the framing and the
acknowledgement, keep-alive connections make it a stream, and the HTTP server already answers a
handler's awaitable later without blocking anything else; a follower's answer comes after an
fsync (hundreds of microseconds at least), which dwarfs the per-request cost, and the sender
batches everything pending into one request (group commit), so the request rate is bounded by
the fsync rate, not by the publish rate.

Follower side (:class:`ReplicaLog`): a DiskQueue ``<topic>#replica`` in the data path (the
library as it is, go-diskqueue's format). Its *read* position is what this node has put into its
own topic: a follower only appends (and fsyncs before it answers: the data file alone, the meta
file too on --sync-every/--sync-timeout and on a new file); a follower promoted to leader reads
everything past the read position into its topic (:meth:`ReplicaLog.drain`), so what it
delivers next is everything it holds that its channels never had. The stream state (the epoch
seen, the next seq) lives in memory: a restarted follower accepts the next batch of any epoch
not older than one it saw.

Leader side (:class:`LeaderStream`): the entries not yet acknowledged by every link, one
:class:`Link` task per in-sync follower sending whatever is pending in one request, and the
waiters (one future per publish command, resolved in seq order when every in-sync follower's
acknowledged seq passes it).

High watermark (--replica-ack=all-isr). The leader does not put a publish into its topic when
it accepts it: the stream keeps the records of the entries not yet committed (one
``(first seq, end seq, records, delay)`` tuple per publish command, not per message), and each
time the commit point advances (:meth:`LeaderStream._advance`, once per acknowledgement round)
the records it passed go to ``on_commit(plain, deferred)`` in seq order: one put_many for the
plain ones, a put_deferred per DPUB, then one flush. So a channel never holds a message the ISR
does not have, and a failover cannot take back a delivered message. Records committed while
acknowledging is not allowed (lease uncertain, ISR below --min-isr: their publishers get
E_PUB_FAILED) are dropped, as are the uncommitted ones when the stream closes: a refused
publish is never delivered by this leader (a later leader may deliver it from its replica log,
as a producer's retry would). With --replica-ack=leader (no ``on_commit``) the watermark is the
local append: the caller puts the records into the topic at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import time
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

#: What a committed advance hands over: the plain records (seq order) and the DPUB ones with
#: their delay in ms; returns False when they could not be put (their publishers are refused).
OnCommit: TypeAlias = Callable[[list[bytes], list[tuple[bytes, int]]], bool]


class StaleEpoch(Exception):
    """A follower has seen a newer epoch than the sender's: the sender is deposed."""


class Gap(Exception):
    """The batch starts past what the follower has: ``expected`` is its next seq."""

    def __init__(self, expected: int) -> None:
        super().__init__(f"gap: follower expects seq {expected}")
        self.expected = expected


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


class ReplicaLog:
    """A follower's copy of one topic's stream: the DiskQueue ``<topic>.replica`` made by
    ``open_queue(name)`` (Storage.new_backend's sizes plus the entry header). ``epoch`` and
    ``next_seq`` are the stream position (0, -1 until the first batch); ``min_epoch`` the
    oldest epoch still accepted (raised by :meth:`fence` when this node learns of a newer
    record, so a deposed leader's late appends are refused even before the new leader sent
    anything)."""

    def __init__(self, topic: str, dq: DiskQueue) -> None:
        self.topic = topic
        self.dq = dq
        self.epoch = 0
        self.next_seq = -1
        self.appended = 0
        self.min_epoch = 0
        self.lock = asyncio.Lock()
        self._data_fd = -1  # read-only fd of the write file, for the data-only fsync
        self._data_num = -1  # its file number (-1: none yet: the next sync is a full one)

    def fence(self, epoch: int) -> None:
        """Refuse appends of epochs older than ``epoch`` from now on."""
        self.min_epoch = max(self.min_epoch, epoch)

    async def append(self, epoch: int, first: int, entries: list[bytes]) -> int:
        """Append the entries of ``epoch`` starting at seq ``first`` (those this log has
        already are skipped), fsync, and return the next seq expected. StaleEpoch, Gap,
        OSError."""
        async with self.lock:
            if epoch < self.epoch or epoch < self.min_epoch:
                raise StaleEpoch()
            if epoch > self.epoch or self.next_seq < 0:
                self.epoch = epoch
                self.next_seq = first
            if first > self.next_seq:
                raise Gap(self.next_seq)
            fresh = entries[self.next_seq - first :]
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
                self.next_seq += len(fresh)
                self.appended += len(fresh)
            return self.next_seq

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
        [(delay_ms, record)], [] when none is left."""
        _, raw = self.dq.read_many(limit)
        hs = ENTRY.size
        unpack = ENTRY.unpack_from
        return [(unpack(e)[2], e[hs:]) for e in raw]

    def sync_job(self) -> Callable[[], None]:
        return self.dq.prepare_sync()

    def close(self) -> None:
        self._close_data()
        self.dq.close()


class Link:
    """The leader's sender to one follower: ``node_id``, ``acked`` (the
    seq it expects next: everything below is durable there), ``behind_since`` (monotonic
    seconds since when it has had entries pending without acknowledging, 0 when caught up)."""

    __slots__ = ("acked", "behind_since", "in_isr", "node_id", "refused", "task", "wake")

    def __init__(self, node_id: str, acked: int) -> None:
        self.node_id = node_id
        #: False while catching up (out of the ISR: not waited for); ``refused``: it answered
        #: E_STALE_EPOCH, so it is not kept for catch-up either.
        self.in_isr = True
        self.refused = False
        self.acked = acked
        self.behind_since = 0.0
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

    Catch-up: a follower dropped from the ISR keeps its link, no longer waited for, and the
    entries from its acknowledged seq on are kept (at most ``MAX_RETAINED``; past that it is
    given up). Once it has everything appended so far, the link counts again at once (so no
    publish is acknowledged without it from then on) and ``on_caught_up(node_id)`` is called,
    which re-admits it to the ISR in etcd (Coordinator.expand_isr). A follower is complete for
    earlier epochs (it was in the ISR when this epoch began), so this epoch's tail is all it
    can miss.

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
        self.on_commit = on_commit
        #: Records not yet committed: (first seq, end seq, records, delay ms) per append.
        self.pending: deque[tuple[int, int, list[bytes], int]] = deque()
        self.dropped = 0

    # ------------------------------------------------------------ links

    def set_links(self, followers: list[str]) -> None:
        """The in-sync followers now (node ids): start links for new ones (from the oldest
        entry kept); the others are kept for catch-up, or stopped when they refused this
        epoch or catch-up is off; then re-check the waiters."""
        for node_id, link in list(self.links.items()):
            if node_id not in followers:
                if link.refused or self.on_caught_up is None:
                    self._stop_link(self.links.pop(node_id))
                else:
                    link.in_isr = False
        for node_id in followers:
            link_now = self.links.get(node_id)
            if link_now is not None:
                link_now.in_isr = True
            else:
                link = Link(node_id, self.base)
                link.task = asyncio.get_running_loop().create_task(
                    self._send_loop(link), name=f"replicate-{self.topic}-{node_id}"
                )
                self.links[node_id] = link
                if self.entries:
                    link.wake.set()
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

    async def _send_loop(self, link: Link) -> None:
        lagging_reported = False
        while not self.closed:
            if link.acked >= self.next_seq:
                link.behind_since = 0.0
                lagging_reported = False
                if not link.in_isr and self.on_caught_up is not None:
                    link.in_isr = True
                    self.on_caught_up(link.node_id)
                    self._advance()
                link.wake.clear()
                await link.wake.wait()
                continue
            now = time.monotonic()
            if not link.behind_since:
                link.behind_since = now
            start = link.acked - self.base
            if start < 0:  # entries it needs are gone (cannot happen while it is a link)
                self.on_lagging(link.node_id)
                return
            batch: list[bytes] = []
            size = 0
            for e in self.entries[start:]:
                if batch and size + len(e) > MAX_REQUEST_BYTES:
                    break
                batch.append(e)
                size += len(e) + 4
            params = {"topic": self.topic, "epoch": str(self.epoch), "first": str(link.acked)}
            address = self.address_of(link.node_id)
            url = f"http://{address}/replica/append"
            try:
                if not address:
                    raise OSError(f"no address for node {link.node_id}")
                async with self.http.post(
                    url, params=params, data=encode_entries(batch), timeout=self.timeout
                ) as resp:
                    text = await resp.read()
                    answer = json.loads(text) if text else {}
                    status = resp.status
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: retried, then lagging
                status, answer = -1, {"message": repr(exc)}
            if status == 200:
                link.acked = max(link.acked, int(answer.get("next", link.acked)))
                link.behind_since = time.monotonic() if link.acked < self.next_seq else 0.0
                if not link.in_isr and link.acked >= self.next_seq and self.on_caught_up:
                    link.in_isr = True  # waited for from now on, before etcd says so
                    self.on_caught_up(link.node_id)
                self._advance()
                continue
            if status == 409 and answer.get("message") == "E_STALE_EPOCH":
                link.refused = True
                log.warning(
                    "topic %s: %s has a newer epoch than %d", self.topic, link.node_id, self.epoch
                )
                self.on_lagging(link.node_id)
                return
            message = str(answer.get("message", ""))
            if status == 409 and message.startswith("E_GAP "):
                expected = int(message[6:])
                if expected >= self.base:
                    link.acked = expected
                    continue
            if (
                not lagging_reported
                and link.behind_since
                and time.monotonic() - link.behind_since >= self.timeout
            ):
                log.warning(
                    "topic %s: follower %s lags (%s): leaving the ISR",
                    self.topic,
                    link.node_id,
                    answer.get("message"),
                )
                lagging_reported = True
                self.on_lagging(link.node_id)
            await asyncio.sleep(RETRY_DELAY)
