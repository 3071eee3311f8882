"""Stream compression negotiated in IDENTIFY: snappy (the framed stream format) and deflate (raw
deflate, as Go's compress/flate).

Strategy: one codec object per connection. Input is inflated in bounded steps, never whole:
``feed(data)`` keeps the bytes read (any split) still compressed, ``take(limit)`` inflates about
``limit`` bytes of them (deflate: exactly at most ``limit``, through zlib's ``max_length`` and
``unconsumed_tail``; snappy: whole chunks, each at most 64 KiB, until ``limit`` is reached) and
``pending`` says whether more is waiting. The connection pulls a step only when its parser needs
more bytes and its read budget has room, so a stream that inflates 1000x (a "zip bomb") costs
one step of memory, and the parser refuses an oversized frame before the rest of it is inflated,
as nsqd's reader (a bufio.Reader over a flate/snappy reader) never holds more than its buffer.
``compress(data)`` runs once per output flush and ends on a boundary the client can decode at
once: a whole snappy chunk, or a deflate Z_SYNC_FLUSH. The codecs run in C/Rust (zlib,
cramjam); Python only slices frames. cramjam is imported by the first snappy codec, not when the
daemon starts.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

# Snappy framing format (https://github.com/google/snappy/blob/main/framing_format.txt).
SNAPPY_STREAM_HEADER = b"\xff\x06\x00\x00sNaPpY"
_MAX_CHUNK = 65536
_CHUNK_HEADER = struct.Struct("<I")
#: Largest chunk body a 64 KiB block can need (CRC + snappy's worst-case encoding).
_MAX_ENCODED = _MAX_CHUNK + 4 + 32 + _MAX_CHUNK // 6


class CompressionError(Exception):
    """The peer sent a stream the codec cannot decode (the connection is then closed)."""


#: Default inflation step (bytes): what one take() of the connection's read path asks for.
INFLATE_STEP = 64 * 1024


class _Inflater(Protocol):
    def feed(self, data: bytes | bytearray) -> None: ...

    def take(self, limit: int) -> bytes: ...


def _drain(codec: _Inflater, data: bytes | bytearray) -> bytes:
    codec.feed(data)
    parts: list[bytes] = []
    while True:
        part = codec.take(INFLATE_STEP)
        if not part:
            return b"".join(parts)
        parts.append(part)


def _uvarint(buf: bytearray, pos: int, end: int) -> int:
    """The little-endian base-128 varint at ``buf[pos:end]`` (-1 when cut short or too long)."""
    n = 0
    shift = 0
    while pos < end and shift < 35:
        b = buf[pos]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n
        pos += 1
        shift += 7
    return -1


class SnappyCodec:
    """Framed snappy, as github.com/golang/snappy's Reader and Writer (used by nsqd).

    Chunks are kept compressed until take(); each compressed chunk's block states its
    uncompressed length up front (a varint), so a run of whole chunks up to ``limit`` is found
    without inflating and then inflated in one call. A chunk over 64 KiB uncompressed is
    refused, as golang/snappy's Reader does."""

    __slots__ = ("_in", "_snappy", "_wrote_header")

    name = "snappy"

    def __init__(self) -> None:
        import cramjam

        self._snappy: Any = cramjam.snappy
        self._in = bytearray()
        self._wrote_header = False

    def compress(self, data: bytes | bytearray) -> bytes:
        # cramjam writes a whole framed stream (header + chunks of at most 64 KiB with their
        # masked CRC-32C); the stream header goes out once, as golang/snappy's Writer does.
        framed = bytes(self._snappy.compress(bytes(data)))
        if self._wrote_header:
            return framed[len(SNAPPY_STREAM_HEADER) :]
        self._wrote_header = True
        return framed

    def feed(self, data: bytes | bytearray) -> None:
        """Keep ``data`` (compressed, any split) for take()."""
        self._in += data

    @property
    def pending(self) -> bool:
        """Whether a whole chunk waits to be inflated (or an error to be raised)."""
        buf = self._in
        if len(buf) < 4:
            return False
        return len(buf) - 4 >= _CHUNK_HEADER.unpack_from(buf, 0)[0] >> 8

    def take(self, limit: int) -> bytes:
        """Inflate whole chunks until ``limit`` bytes are out (at least one chunk, so at most
        ``limit`` + 64 KiB); b"" when no whole chunk is buffered. Raises CompressionError."""
        buf = self._in
        n = len(buf)
        pos = 0
        out_len = 0
        while n - pos >= 4 and out_len < limit:
            header = _CHUNK_HEADER.unpack_from(buf, pos)[0]
            ctype = header & 0xFF
            clen = header >> 8
            if ctype == 0x00:  # compressed: CRC (4 bytes), then a block that opens with its size
                if clen > _MAX_ENCODED:
                    raise CompressionError(f"snappy: chunk too large ({clen} bytes)")
                if n - pos - 4 < clen:
                    break
                size = _uvarint(buf, pos + 8, pos + 4 + clen)
                if size < 0 or size > _MAX_CHUNK:
                    raise CompressionError("snappy: corrupt input")
                out_len += size
            elif ctype == 0x01:  # uncompressed: CRC, then the bytes
                if clen > _MAX_CHUNK + 4:
                    raise CompressionError(f"snappy: chunk too large ({clen} bytes)")
                if n - pos - 4 < clen:
                    break
                out_len += clen - 4
            elif 0x02 <= ctype <= 0x7F:
                raise CompressionError(f"snappy: unsupported chunk type {ctype:#x}")
            elif clen > _MAX_ENCODED:  # padding, skippable, or the stream identifier
                raise CompressionError(f"snappy: chunk too large ({clen} bytes)")
            elif n - pos - 4 < clen:
                break
            pos += 4 + clen
        if pos == 0:
            return b""
        whole = bytes(buf[:pos])
        del buf[:pos]
        if not whole.startswith(SNAPPY_STREAM_HEADER):
            whole = SNAPPY_STREAM_HEADER + whole
        try:
            return bytes(self._snappy.decompress(whole))
        except Exception as e:  # cramjam raises its own DecompressionError
            raise CompressionError(f"snappy: {e}") from None

    def decompress(self, data: bytes | bytearray) -> bytes:
        """Feed ``data`` and inflate all of it at once: for trusted input and tests only (the
        connection's read path uses feed/take)."""
        return _drain(self, data)


class DeflateCodec:
    """Raw deflate (no zlib header), as Go's compress/flate; flushed with Z_SYNC_FLUSH.

    Input is kept in zlib's ``unconsumed_tail`` between takes; ``_full`` notes a take that
    filled its limit (zlib may hold more output for the same input)."""

    __slots__ = ("_c", "_d", "_error", "_full", "_sync", "_tail", "level")

    name = "deflate"

    def __init__(self, level: int) -> None:
        import zlib  # the first deflate client's, not the daemon's start-up

        self.level = level
        self._c = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._d = zlib.decompressobj(-15)
        self._sync = zlib.Z_SYNC_FLUSH
        self._error = zlib.error
        self._tail = b""
        self._full = False

    def compress(self, data: bytes | bytearray) -> bytes:
        c = self._c
        return c.compress(data) + c.flush(self._sync)

    def feed(self, data: bytes | bytearray) -> None:
        """Keep ``data`` (compressed, any split) for take()."""
        tail = self._tail
        self._tail = tail + data if tail else bytes(data)

    @property
    def pending(self) -> bool:
        """Whether input waits (or the last take stopped at its limit)."""
        return self._full or bool(self._tail)

    def take(self, limit: int) -> bytes:
        """Inflate at most ``limit`` bytes (b"" when nothing waits). Raises CompressionError."""
        tail = self._tail
        if not tail and not self._full:
            return b""
        d = self._d
        try:
            out = d.decompress(tail, limit)
        except self._error as e:
            raise CompressionError(f"flate: {e}") from None
        self._tail = d.unconsumed_tail
        self._full = len(out) >= limit
        return out

    def decompress(self, data: bytes | bytearray) -> bytes:
        """Feed ``data`` and inflate all of it at once: for trusted input and tests only (the
        connection's read path uses feed/take)."""
        return _drain(self, data)


Codec = SnappyCodec | DeflateCodec
