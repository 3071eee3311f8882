"""The replication stream's entries and names: the byte layout a leader sends and a follower
keeps, and the errors of an append (leader_stream.py sends, replica_log.py keeps,
http_routes.py carries them).

Entries. Every message a leader accepts (a PUB, each message of an MPUB, a DPUB) becomes one
*entry*: ``ENTRY`` = epoch (u32), seq (u64), delay in ms (u32, DPUB's; 0 otherwise), all
big-endian, then the nsqd message record exactly as message.py lays it out (26-byte header:
timestamp, attempts, 16-byte ID; then the body). ``seq`` counts entries within one epoch from 0;
(epoch, seq) *names* an entry cluster-wide, and names only grow along a log.

An *append* is one topic's part of a round: its query ``topic=T&epoch=E&first=S&prev=P``
(``&reset=1`` for a reset) and its entries as ``[u32 size][entry]*`` (:func:`encode_entries`:
the DiskQueue's own record layout, so a follower writes the body into its log as it came,
:func:`entry_ends`); every entry names itself, so one append may carry entries of older epochs
(a new leader's history). ``prev`` is the name the follower's log must end with (``E:S``,
:func:`name_text`), ``-`` (the batch starts the leader's history: it goes after whatever the
log has) or ``?`` (a probe: nothing appended). The follower answers 200
``{"next":N,"last":"E:S"}`` (the seq of epoch E it expects next, and the name of its last
entry; ``"dirty":true|false`` too for a probe) once the entries are written to its replica log
(fsynced first with --replica-sync=fsync; replica_log.py), or 409
``{"message":"E_STALE_EPOCH"}`` (:class:`StaleEpoch`: it has seen a newer epoch, the sender was
deposed) or 409 ``{"message":"E_GAP E:S"}`` (:class:`Gap`: its log ends elsewhere: at E:S, ``-``
when empty).

Several topics in one round: one *part* per topic (:func:`encode_parts`: ``[u32 n][query: n
bytes][u32 m][entries: m bytes]`` per part), answered ``{"answers": [[status, answer], ...]}``,
one per part, in order, each what the part alone would have been answered.
:func:`take_parts` picks what one round carries.

Transport: the *replication stream*, a connection to the follower's TCP port opened with
:data:`STREAM_MAGIC` (the follower answers it with the same four bytes; the leader sends
nothing before) and carrying frames ``[u32 size][payload]`` (:func:`encode_frame`,
:class:`FrameReader`): the leader's payloads are parts, the follower's their JSON answers, in
the order of the frames (stream_server.py, courier.py). A follower without it is sent the
same over HTTP: ``POST /replica/append-many`` with the parts as its body, or ``POST
/replica/append?<query>`` with one part's entries (http_routes.py). Why a stream and not one
HTTP request per round: a frame costs the follower no HTTP parsing, and the leader may send
the next frames before the answers come (pipelining), each answer still naming what the
follower has written. Design notes: docs/architecture-replication.md."""

from __future__ import annotations

import re
import struct
from collections import deque
from itertools import chain
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode

#: An entry's header: epoch (u32), seq (u64), DPUB's delay in ms (u32), big-endian.
ENTRY = struct.Struct(">IQI")
_SIZE = struct.Struct(">I")
#: A query whose keys and values need no escaping to be read back by parse_qsl.
_PLAIN_QUERY = re.compile(
    r"[A-Za-z0-9._:?\-]+=[A-Za-z0-9._:?\-]*(?:&[A-Za-z0-9._:?\-]+=[A-Za-z0-9._:?\-]*)*"
)
#: The nsqd record header (message.py): 8 timestamp + 2 attempts + 16 ID.
RECORD_HEADER = 26
#: Most bytes one append request carries (more waits for the next request).
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: Most entries kept for a follower catching up (it is given up beyond), and the most a new
#: leader keeps as its history.
MAX_RETAINED = 1_000_000


class StaleEpoch(Exception):
    """A follower has seen a newer epoch than the sender's: the sender is deposed."""


#: An entry's name: (epoch, seq).
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
    # sizes and entries interleaved by C iterators: no Python frame per entry
    return b"".join(chain.from_iterable(zip(map(_SIZE.pack, map(len, entries)), entries)))


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


def entry_ends(body: bytes, max_size: int) -> list[int]:
    """Walk an append request body (``[u32 size][entry]*``) without copying it: the byte
    offset where each entry ends, in order. A follower writes such a body into its replica
    log as it is (the DiskQueue's own record layout: DiskQueue.put_framed). ValueError when
    it does not parse or an entry's size is outside [header, ``max_size``]."""
    ends: list[int] = []
    add = ends.append
    i, n = 0, len(body)
    lo = ENTRY.size + RECORD_HEADER
    unpack = _SIZE.unpack_from
    while i < n:
        if i + 4 > n:
            raise ValueError("truncated entry size")
        (size,) = unpack(body, i)
        i += 4 + size
        if i > n or size < lo or size > max_size:
            raise ValueError(f"bad entry size {size}")
        add(i)
    return ends


def framed_name(body: bytes, start: int) -> Name:
    """The (epoch, seq) of the entry whose size prefix is at ``start`` in an append body."""
    epoch, seq, _ = ENTRY.unpack_from(body, start + 4)
    return epoch, seq


#: One part of a multi-topic append request: the query of /replica/append and its body.
Part = tuple[dict[str, str], bytes]
#: What take_parts counts for a part besides its body: its two sizes and its query (a topic
#: name is at most 64 characters; the numbers are at most 20 digits each).
PART_OVERHEAD = 256
T = TypeVar("T")


def encode_parts(parts: list[Part]) -> bytes:
    """``[u32 n][query][u32 m][body]`` per part, for one ``/replica/append-many`` request."""
    pack = _SIZE.pack
    out: list[bytes] = []
    for params, body in parts:
        plain = "&".join([f"{k}={v}" for k, v in params.items()])
        # what urlencode would give, but for the characters it escapes (':' of a name, '?')
        query = (plain if _PLAIN_QUERY.fullmatch(plain) else urlencode(params)).encode()
        out += (pack(len(query)), query, pack(len(body)), body)
    return b"".join(out)


def decode_parts(body: bytes) -> list[Part]:
    """The inverse of :func:`encode_parts`. ValueError when it does not parse."""
    out: list[Part] = []
    i, n = 0, len(body)
    unpack = _SIZE.unpack_from
    while i < n:
        fields: list[bytes] = []
        for _ in range(2):
            if i + 4 > n:
                raise ValueError("truncated part size")
            (size,) = unpack(body, i)
            j = i + 4 + size
            if j > n:
                raise ValueError(f"bad part size {size}")
            fields.append(body[i + 4 : j])
            i = j
        query = fields[0].decode("ascii")
        out.append((dict(parse_qsl(query, keep_blank_values=True, strict_parsing=True)), fields[1]))
    return out


#: The replication stream's protocol magic, the first four bytes a leader writes on a follower's
#: TCP port (as "  V2" picks nsqd's protocol there; stream_server.py).
STREAM_MAGIC = b"  RS"


def encode_frame(payload: bytes) -> bytes:
    """One frame of the replication stream: ``[u32 size][payload]``."""
    return _SIZE.pack(len(payload)) + payload


class FrameReader:
    """The replication stream's frames, sans-IO: :meth:`feed` bytes as they come, get the
    whole frames' payloads; ValueError for a frame announced larger than ``limit`` bytes
    (nothing of it is buffered beyond what came)."""

    __slots__ = ("buf", "limit")

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        buf = self.buf
        buf += data
        out: list[bytes] = []
        i, n = 0, len(buf)
        while n - i >= 4:
            (size,) = _SIZE.unpack_from(buf, i)
            if size > self.limit:
                raise ValueError(f"frame of {size} bytes, more than {self.limit}")
            if n - i - 4 < size:
                break
            out.append(bytes(buf[i + 4 : i + 4 + size]))
            i += 4 + size
        if i:
            del buf[:i]
        return out


def take_parts(
    queue: deque[tuple[Part, T]], limit: int = MAX_REQUEST_BYTES
) -> list[tuple[Part, T]]:
    """Pop from ``queue`` (each item a part and what its sender waits on) what one request
    carries: the oldest first, while their bodies (plus PART_OVERHEAD each, for the query and
    the sizes) add up to at most ``limit`` bytes, and one at least; a topic whose part waits
    in the queue twice (not expected: one request per link at a time) goes in the next
    request, so a request never holds two parts of one topic."""
    taken: list[tuple[Part, T]] = []
    topics: set[str] = set()
    size = 0
    while queue:
        (params, body), _ = queue[0]
        topic = params.get("topic", "")
        cost = len(body) + PART_OVERHEAD
        if taken and (size + cost > limit or topic in topics):
            break
        taken.append(queue.popleft())
        topics.add(topic)
        size += cost
    return taken
