"""The NSQ TCP V2 wire format, sans-IO.

Strategy: bytes in, commands out; frames in, bytes out. No sockets, no asyncio. The parser keeps
one bytearray and a read position, checks every size limit before it waits for a body (so a
client cannot make us buffer more than --max-body-size), and drops consumed bytes in one
`del buf[:n]` per compaction, never per frame. Error types carry nsqd's E_* codes and texts and
whether nsqd treats them as fatal (error frame, then close) or not (error frame, go on).

One owner per layout: this module owns the frames (``[4-byte size][4-byte type][data]``, and
:func:`iter_frames` to walk a buffer of them); a message frame's data is a message record, whose
layout message.py owns (encode_message/decode_message here are message.py's functions).

Source of truth: https://nsq.io/clients/tcp_protocol_spec.html and nsqd/protocol_v2.go (1.3)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import ClassVar, Final

from .internal.names import NAME_RE as _NAME_RE  # noqa: F401  (the rule's one owner)
from .internal.names import is_valid_name as is_valid_name
from .message import ATTEMPTS_START, HEADER_LENGTH, ID_LENGTH, Message
from .message import decode_record as decode_message  # noqa: F401  (re-exported)
from .message import encode_record as encode_message

MAGIC_V2 = b"  V2"

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

#: A frame's header: 4-byte size (of type + data), 4-byte frame type; the data follows.
FRAME_HEADER_LENGTH = 8

#: message.py's record layout, under the names this module has always exported.
MSG_ID_LENGTH = ID_LENGTH
MSG_HEADER_LENGTH = HEADER_LENGTH
_FIN_LINE_LENGTH = 21  # b"FIN " + 16-byte ID + b"\n"
# take_fins compares every 21st byte of a run of FIN lines with these (at most this many lines
# are checked at once; a longer run is taken in several calls).
_FIN_RUN_MAX = 4096
_NEWLINES = b"\n" * _FIN_RUN_MAX
_F_RUN = b"F" * _FIN_RUN_MAX
_I_RUN = b"I" * _FIN_RUN_MAX
_N_RUN = b"N" * _FIN_RUN_MAX
_SPACES = b" " * _FIN_RUN_MAX

HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"

#: An MPUB body up to this size that arrives whole is split at once; a larger one, or one that
#: arrives in parts, is taken in as it arrives, at most MPUB_SCAN_STEP messages per call, so a
#: body of a million tiny messages (valid or lying about its count) never holds the caller for
#: the whole split.
MPUB_SPLIT_AT_ONCE = 64 * 1024
MPUB_SCAN_STEP = 1024

#: Longest command line we buffer while waiting for its "\n". nsqd reads lines through a 16 KiB
#: bufio.Reader and drops the connection when a line does not fit; we do the same, but say why.
MAX_LINE_LENGTH = 16 * 1024

_LEN = struct.Struct(">i")
_FRAME_HEADER = struct.Struct(">ii")  # size (frame type + data), frame type
_SIZE_TYPE = struct.Struct(">ii")
_ATTEMPTS = struct.Struct(">H")
# where append_record_frame patches the attempts: after the frame header, at the record's own
_FRAME_ATTEMPTS: Final = FRAME_HEADER_LENGTH + ATTEMPTS_START

BODY_COMMANDS = frozenset((b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"))


class ClientError(Exception):
    """A non-fatal protocol error: nsqd answers with an error frame and keeps the connection.

    The error frame's data is ``b"<code> <description>"`` (internal/protocol/errors.go).
    """

    # A class attribute (ClassVar), so that mypyc keeps it on the class as Python does.
    fatal: ClassVar[bool] = False

    def __init__(self, code: str, desc: str) -> None:
        super().__init__(f"{code} {desc}")
        self.code = code
        self.desc = desc

    @property
    def text(self) -> bytes:
        """The error frame's data, e.g. ``b"E_INVALID invalid command FOO"``. Client bytes
        quoted in ``desc`` as surrogate escapes come out as the raw bytes they were (nsqd
        formats them with %s: invalid UTF-8 is echoed as is)."""
        return f"{self.code} {self.desc}".encode("utf-8", "surrogateescape")


class FatalClientError(ClientError):
    """A fatal protocol error: nsqd sends the error frame, then closes the connection."""

    fatal: ClassVar[bool] = True


_U64 = (1 << 64) - 1


def byte_to_base10(b: bytes) -> int:
    """nsqd's ByteToBase10: unsigned decimal digits only, ``b""`` is 0, and the value wraps
    modulo 2**64 as Go's uint64 arithmetic does (``99999999999999999999`` is
    7766279631452241919).

    Raises ValueError on any other byte (no sign, no spaces).
    """
    if not b:
        return 0
    # bytes.isdigit() accepts only ASCII 0-9 for bytes objects.
    if not b.isdigit():
        raise ValueError("failed to convert to Base10")
    if len(b) <= 19:  # below 10**19 < 2**64: no wrap
        return int(b)
    n = 0
    for i in range(0, len(b), 18):  # chunks: int() of a huge string hits Python's digit limit
        chunk = b[i : i + 18]
        n = (n * 10 ** len(chunk) + int(chunk)) & _U64
    return n


def go_int64(n: int) -> int:
    """Go's int64(n) of a uint64 value: two's complement reinterpretation."""
    n &= _U64
    return n - (1 << 64) if n >> 63 else n


def go_ms_duration_ns(ms: int) -> int:
    """Go's ``time.Duration(ms) * time.Millisecond`` for a uint64 ``ms``: nanoseconds as a
    wrapping int64 (so a huge count can come out negative, or small)."""
    return go_int64(ms * 1_000_000)


# --------------------------------------------------------------------------------------------
# Encoders (server side)


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """One frame: ``[4-byte size][4-byte frame type][data]``, size = 4 + len(data), big-endian."""
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    """A response frame (frame type 0), e.g. ``OK``, ``_heartbeat_`` or IDENTIFY's JSON."""
    return _FRAME_HEADER.pack(len(data) + 4, FRAME_TYPE_RESPONSE) + data


def encode_error(err: ClientError) -> bytes:
    """An error frame (frame type 1) carrying ``b"<code> <desc>"``."""
    text = err.text
    return _FRAME_HEADER.pack(len(text) + 4, FRAME_TYPE_ERROR) + text


def append_message_frame(
    out: bytearray, timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes
) -> None:
    """Append one message frame (frame type 2) to ``out``.

    Layout (TCP spec, "Data Format" / nsqd message.go WriteTo)::

        [4-byte size][4-byte frame type = 2][8-byte timestamp, ns][2-byte attempts]
        [16-byte hex message ID][body]

    size = 4 + 26 + len(body). All integers big-endian. The frame's data is the record
    (message.encode_record: message.py owns that layout).
    """
    out += _SIZE_TYPE.pack(4 + MSG_HEADER_LENGTH + len(body), FRAME_TYPE_MESSAGE)
    out += encode_message(timestamp_ns, attempts, msg_id, body)


def append_record_frame(out: bytearray, record: bytes, attempts: int) -> None:
    """Append the message frame of a stored ``record`` (message.py's layout: the frame's
    payload is the record itself) with ``attempts`` written over the record's own count: the
    8-byte size and type, the record in one copy, the 2 attempt bytes patched in place."""
    start = len(out)
    out += _SIZE_TYPE.pack(len(record) + 4, FRAME_TYPE_MESSAGE)
    out += record
    _ATTEMPTS.pack_into(out, start + _FRAME_ATTEMPTS, attempts)


def append_record_frames(out: bytearray, msgs: list[Message]) -> None:
    """append_record_frame for each of ``msgs`` in order (each one's ``record`` with its
    ``attempts``). Typed as message.Message, not as any object with those attributes: the
    compiled build then reads the two slots directly instead of by Python's attribute lookup."""
    pack = _SIZE_TYPE.pack
    size = -1
    header = b""
    for m in msgs:
        record = m.record
        if len(record) != size:  # one header for a run of equal sizes (the usual batch)
            size = len(record)
            header = pack(size + 4, FRAME_TYPE_MESSAGE)
        at = len(out) + _FRAME_ATTEMPTS
        out += header
        out += record
        # the uint16 attempts, big-endian, as two byte stores (compiled: no call, no object)
        attempts = m.attempts
        out[at] = (attempts >> 8) & 255
        out[at + 1] = attempts & 255


# --------------------------------------------------------------------------------------------
# Encoders (client side): used by tests, benchmarks and in-process clients.


def encode_command(name: bytes, *params: bytes, body: bytes | None = None) -> bytes:
    """A client command: ``NAME param1 param2\\n`` then, for body commands, a 4-byte size and
    the body."""
    line = b" ".join((name, *params)) + b"\n"
    if body is None:
        return line
    return line + _LEN.pack(len(body)) + body


def encode_mpub(topic: bytes, bodies: list[bytes]) -> bytes:
    """``MPUB <topic>\\n[4-byte body size][4-byte count]([4-byte size][bytes])*``."""
    parts = [_LEN.pack(len(bodies))]
    for b in bodies:
        parts.append(_LEN.pack(len(b)))
        parts.append(b)
    return encode_command(b"MPUB", topic, body=b"".join(parts))


def iter_frames(
    buf: bytes | bytearray | memoryview, start: int = 0, stop: int | None = None
) -> Iterator[tuple[int, int, int]]:
    """``(frame_type, data_start, data_end)`` for each whole frame in ``buf[start:stop]``, in
    order, without copying: the frame's data is ``buf[data_start:data_end]`` (for a message
    frame, a record: its ID is at ``data_start + message.ID_START``, its body at
    ``data_start + message.BODY_START``).

    Frames lie back to back, so the bytes consumed are those up to the last ``data_end``
    yielded (``start`` when none is): what remains is the partial tail of a frame, to be kept
    until more bytes arrive. Raises ValueError at a frame whose size field is below 4 (it
    cannot hold its type: the stream is not V2 frames)."""
    end = len(buf) if stop is None else stop
    # The same header walk as nsqpy.client.frames.scan_frames_struct, kept: that one is the
    # consumer's per-read loop filling index lists, this one a generator over any buffer.
    unpack = _FRAME_HEADER.unpack_from
    pos = start
    while end - pos >= 8:
        size, ftype = unpack(buf, pos)
        if size < 4:
            raise ValueError(f"bad frame size {size} at offset {pos}")
        data_end = pos + 4 + size
        if data_end > end:
            return
        yield ftype, pos + 8, data_end
        pos = data_end


class FrameReader:
    """Client-side frame splitter: feed bytes, get ``(frame_type, data)`` tuples."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        frames = []
        pos = 0
        for ftype, start, pos in iter_frames(buf):
            frames.append((ftype, bytes(buf[start:pos])))
        if pos:
            del buf[:pos]
        return frames


# --------------------------------------------------------------------------------------------
# Command parser (server side)

#: A parsed command: ``(name, params, body)``. ``params[0]`` is the name again (nsqd's params).
#: ``body`` is None for bodiless commands, bytes for IDENTIFY/AUTH/PUB/DPUB, and a list of
#: bodies for MPUB.
Command = tuple[bytes, list[bytes], "bytes | list[bytes] | None"]


class CommandParser:
    """Incremental parser for client commands (after the 4-byte magic).

    ``feed(data)`` appends bytes; ``next_command()`` returns one whole command or None when more
    bytes are needed; ``compact()`` drops consumed bytes (call it once the caller has drained
    ``next_command``). ``precheck(name, params)``, if given, runs when a body command's line is
    complete and before its size is read, mirroring the checks nsqd makes before it reads a
    body (state, parameter count, topic name); it may raise :class:`ClientError`.

    Size checks, with nsqd's texts: PUB/DPUB bodies against ``max_msg_size`` (E_BAD_MESSAGE);
    IDENTIFY/AUTH/MPUB bodies against ``max_body_size`` (E_BAD_BODY); each MPUB message against
    ``max_msg_size``. Every parse error raised is fatal.
    """

    __slots__ = (
        "_body_len",
        "_buf",
        "_mpub_at",
        "_mpub_bodies",
        "_mpub_i",
        "more_work",
        "_pending",
        "_pos",
        "max_body_size",
        "max_msg_size",
        "precheck",
    )

    def __init__(
        self,
        max_msg_size: int,
        max_body_size: int,
        precheck: Callable[[bytes, list[bytes]], None] | None = None,
    ) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._pending: tuple[bytes, list[bytes]] | None = None
        self._body_len = -1
        self._mpub_at = 0  # MPUB body being received: offset of its next unchecked size
        self._mpub_i = 0  # ... and that message's index
        self._mpub_bodies: list[bytes] = []  # ... and the messages taken so far
        #: An MPUB body is in but not all taken yet (MPUB_SCAN_STEP messages per call): call
        #: next_command again on a later pass even if no byte arrives.
        self.more_work = False
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.precheck = precheck

    def feed(self, data: bytes | bytearray) -> None:
        self._buf += data

    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return len(self._buf) - self._pos

    def compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def next_command(self) -> Command | None:
        buf = self._buf
        pos = self._pos
        pending = self._pending
        if pending is None:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if len(buf) - pos > MAX_LINE_LENGTH:
                    raise FatalClientError(
                        "E_INVALID", f"command line longer than {MAX_LINE_LENGTH} bytes"
                    )
                return None
            if nl - pos > MAX_LINE_LENGTH:
                raise FatalClientError(
                    "E_INVALID", f"command line longer than {MAX_LINE_LENGTH} bytes"
                )
            end = nl
            if end > pos and buf[end - 1] == 13:  # optional '\r'
                end -= 1
            params = bytes(buf[pos:end]).split(b" ")
            self._pos = pos = nl + 1
            name = params[0]
            if name not in BODY_COMMANDS:
                return name, params, None
            if self.precheck is not None:
                self.precheck(name, params)
            pending = self._pending = (name, params)
            self._body_len = -1
        name = pending[0]
        n = self._body_len
        if n < 0:
            if len(buf) - pos < 4:
                return None
            n = _LEN.unpack_from(buf, pos)[0]
            self._check_body_len(name, n)
            self._body_len = n
            self._pos = pos = pos + 4
            self._mpub_at = 0
        if len(buf) - pos < n:
            if name == b"MPUB":
                self._scan_mpub(pos, n, False)
            return None
        if name == b"MPUB" and (self._mpub_at or n > MPUB_SPLIT_AT_ONCE):
            bodies = self._scan_mpub(pos, n, True)
            if bodies is None:
                return None  # more_work: the split goes on at the next call
        else:
            bodies = None
        self._pending = None
        self._body_len = -1
        self._pos = pos + n
        if bodies is not None:
            self._mpub_bodies = []
            return name, pending[1], bodies
        with memoryview(buf) as mv:
            if name == b"MPUB":
                return name, pending[1], self._split_mpub(mv[pos : pos + n])
            return name, pending[1], bytes(mv[pos : pos + n])

    def take_fins(self, limit: int) -> list[bytes]:
        """Consume up to ``limit`` whole ``FIN <16-byte id>\n`` lines at the parse position (a
        consumer's usual traffic: one recv brings many) and return their IDs; [] when the next
        command is anything else, which next_command() then parses as usual."""
        if self._pending is not None:
            return []
        buf = self._buf
        pos = self._pos
        k = (len(buf) - pos) // _FIN_LINE_LENGTH
        if k > limit:
            k = limit
        if k > _FIN_RUN_MAX:
            k = _FIN_RUN_MAX
        if k <= 0:
            return []
        # The usual case: every whole line here is a FIN. Check the k lines at once (each
        # 21-byte line starts with "FIN ", its only newline is its last byte, its only space
        # the one after FIN, and no "\r" precedes the newline: nsqd splits on spaces and
        # strips a "\r", which would make the ID another length; with the newlines where the
        # first check puts them, only a line's byte 19 can be that "\r"), then slice the IDs
        # out; anything else takes the line-by-line walk below.
        stop = pos + k * _FIN_LINE_LENGTH
        chunk = bytes(buf[pos:stop])
        if (
            chunk[20::21] == _NEWLINES[:k]
            and chunk.count(b"\n") == k
            and chunk.count(b" ") == k
            and b"\r" not in chunk[19::21]
            and chunk[0::21] == _F_RUN[:k]
            and chunk[1::21] == _I_RUN[:k]
            and chunk[2::21] == _N_RUN[:k]
            and chunk[3::21] == _SPACES[:k]
        ):
            self._pos = stop
            return [chunk[i : i + 16] for i in range(4, stop - pos, _FIN_LINE_LENGTH)]
        end = len(buf) - _FIN_LINE_LENGTH
        out: list[bytes] = []
        startswith = buf.startswith
        find = buf.find
        while (
            pos <= end
            and startswith(b"FIN ", pos)
            and buf[pos + 20] == 10
            and buf[pos + 19] != 13
            and find(b" ", pos + 4, pos + 20) < 0
            and find(b"\n", pos + 4, pos + 20) < 0
        ):
            out.append(bytes(buf[pos + 4 : pos + 20]))
            pos += _FIN_LINE_LENGTH
            if len(out) >= limit:
                break
        self._pos = pos
        return out

    def eof_error(self) -> FatalClientError | None:
        """The error nsqd answers when the client's stream ends here (EOF, a half-close), or
        None when nsqd closes silently (between commands, or inside a command line).

        nsqd reads a body command's size and body straight from the socket, so an EOF inside
        them fails that read: "failed to read (message) body size" or "failed to read (message)
        body", and for MPUB whichever read of its count, sizes and messages came up short.
        Called once, at EOF: the parse loop itself never looks for it.
        """
        pending = self._pending
        if pending is None:
            return None
        name = pending[0]
        cmd = name.decode()
        message = name == b"PUB" or name == b"DPUB"
        code, what = ("E_BAD_MESSAGE", "message body") if message else ("E_BAD_BODY", "body")
        n = self._body_len
        if n < 0:
            return FatalClientError(code, f"{cmd} failed to read {what} size")
        if name == b"MPUB":
            at = self._mpub_at
            if at and not self.more_work:
                # what arrived is taken in already (_scan_mpub): answer from where it stopped,
                # without splitting a body of a million messages again
                avail = len(self._buf) - self._pos
                i = self._mpub_i
                count = _LEN.unpack_from(self._buf, self._pos)[0]
                if i < count:
                    if avail - at < 4:
                        text = f"MPUB failed to read message({i}) body size"
                    else:
                        text = "MPUB failed to read message body"
                    return FatalClientError("E_BAD_MESSAGE", text)
                size = max(avail, n)
                return FatalClientError(
                    "E_BAD_BODY",
                    f"MPUB body size {size} does not match its {count} messages "
                    f"({size - at} bytes left over)",
                )
            with memoryview(self._buf) as mv:
                try:
                    self._split_mpub(mv[self._pos :], n)
                except FatalClientError as e:
                    return e
        return FatalClientError(code, f"{cmd} failed to read {what}")

    def _scan_mpub(self, start: int, n: int, whole: bool) -> list[bytes] | None:
        """Take in the part of an MPUB body received so far (``start``: its offset in the
        buffer, ``n``: its declared size; ``whole``: all of it is in): its count, then each
        message as it arrives, with _split_mpub's checks and errors. nsqd reads and checks each
        part before reading on, so a bad count or size is refused before the rest of the body
        is buffered (or, on a compressed stream, inflated). At most MPUB_SCAN_STEP messages
        are taken per call (``more_work`` is then set: call next_command again, on a later
        pass); returns the bodies once the whole body is taken, else None."""
        buf = self._buf
        end = len(buf)
        at = self._mpub_at
        if at == 0:
            if end - start < 4:
                return None
            count = _LEN.unpack_from(buf, start)[0]
            if count <= 0 or count > (self.max_body_size - 4) // 5:
                raise FatalClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
            at = 4
            self._mpub_i = 0
            self._mpub_bodies = []
        count = _LEN.unpack_from(buf, start)[0]
        i = self._mpub_i
        bodies = self._mpub_bodies
        max_msg = self.max_msg_size
        unpack = _LEN.unpack_from
        stop = min(count, i + MPUB_SCAN_STEP)
        avail = end - start
        if avail > n:
            avail = n
        while i < stop and at + 4 <= avail:
            size = unpack(buf, start + at)[0]
            if size <= 0:
                raise FatalClientError(
                    "E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}"
                )
            if size > max_msg:
                raise FatalClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg}")
            if at + 4 + size > avail:
                break
            at += 4
            bodies.append(bytes(buf[start + at : start + at + size]))
            at += size
            i += 1
        self._mpub_at = at
        self._mpub_i = i
        self.more_work = i == stop and i < count and at + 4 <= avail
        if not whole or self.more_work:
            return None
        if i < count:
            if n - at < 4:
                raise FatalClientError(
                    "E_BAD_MESSAGE", f"MPUB failed to read message({i}) body size"
                )
            raise FatalClientError("E_BAD_MESSAGE", "MPUB failed to read message body")
        if at != n:
            raise FatalClientError(
                "E_BAD_BODY",
                f"MPUB body size {n} does not match its {count} messages "
                f"({n - at} bytes left over)",
            )
        return bodies

    def _check_body_len(self, name: bytes, n: int) -> None:
        cmd = name.decode()
        if name == b"PUB" or name == b"DPUB":
            if n <= 0:
                raise FatalClientError("E_BAD_MESSAGE", f"{cmd} invalid message body size {n}")
            if n > self.max_msg_size:
                raise FatalClientError(
                    "E_BAD_MESSAGE", f"{cmd} message too big {n} > {self.max_msg_size}"
                )
        elif name == b"MPUB":
            if n <= 0:
                raise FatalClientError("E_BAD_BODY", f"MPUB invalid body size {n}")
            if n > self.max_body_size:
                raise FatalClientError(
                    "E_BAD_BODY", f"MPUB body too big {n} > {self.max_body_size}"
                )
        else:  # IDENTIFY, AUTH: nsqd checks "too big" before "<= 0"
            if n > self.max_body_size:
                raise FatalClientError(
                    "E_BAD_BODY", f"{cmd} body too big {n} > {self.max_body_size}"
                )
            if n <= 0:
                raise FatalClientError("E_BAD_BODY", f"{cmd} invalid body size {n}")

    def _split_mpub(self, mv: memoryview, declared: int = -1) -> list[bytes]:
        """Split an MPUB body ``[4-byte count]([4-byte size][bytes])*`` (nsqd readMPUB);
        ``declared`` is the body size the client sent when ``mv`` is only the part received.

        Beyond nsqd: the body must hold exactly ``count`` messages. nsqd reads ``count``
        messages from the stream whatever the body size said, so a wrong count makes it read
        the next command as a message or the rest of this body as commands; we refuse the MPUB
        with E_BAD_BODY instead.
        """
        total = len(mv)
        if total < 4:
            raise FatalClientError("E_BAD_BODY", "MPUB failed to read message count")
        count = _LEN.unpack_from(mv, 0)[0]
        max_messages = (self.max_body_size - 4) // 5
        if count <= 0 or count > max_messages:
            raise FatalClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
        max_msg = self.max_msg_size
        bodies = []
        pos = 4
        unpack = _LEN.unpack_from
        for i in range(count):
            if total - pos < 4:
                raise FatalClientError(
                    "E_BAD_MESSAGE", f"MPUB failed to read message({i}) body size"
                )
            size = unpack(mv, pos)[0]
            pos += 4
            if size <= 0:
                raise FatalClientError(
                    "E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}"
                )
            if size > max_msg:
                raise FatalClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg}")
            if total - pos < size:
                raise FatalClientError("E_BAD_MESSAGE", "MPUB failed to read message body")
            bodies.append(bytes(mv[pos : pos + size]))
            pos += size
        if pos != total or declared > total:
            size = max(total, declared)
            raise FatalClientError(
                "E_BAD_BODY",
                f"MPUB body size {size} does not match its {count} messages "
                f"({size - pos} bytes left over)",
            )
        return bodies
