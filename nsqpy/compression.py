# Stream compression negotiated in IDENTIFY: snappy (the framed stream format) and deflate (raw
# deflate, as Go's compress/flate).
#
# Strategy: one codec object per connection with two methods, ``decompress(data)`` for the bytes
# read (any split: partial frames are kept for the next call) and ``compress(data)`` for one
# output flush (the protocol coalesces frames, so this runs once per flush, not per frame). Each
# compress call ends on a boundary the client can decode at once: a whole snappy chunk, or a
# deflate Z_SYNC_FLUSH. The codecs run in C/Rust (zlib, cramjam); Python only slices frames.
from __future__ import annotations

import struct
import zlib

import cramjam

# Snappy framing format (https://github.com/google/snappy/blob/main/framing_format.txt).
SNAPPY_STREAM_HEADER = b"\xff\x06\x00\x00sNaPpY"
_MAX_CHUNK = 65536
_CHUNK_HEADER = struct.Struct("<I")


class CompressionError(Exception):
    """The peer sent a stream the codec cannot decode (the connection is then closed)."""


class SnappyCodec:
    """Framed snappy, as github.com/golang/snappy's Reader and Writer (used by nsqd)."""

    __slots__ = ("_in", "_wrote_header")

    name = "snappy"

    def __init__(self) -> None:
        self._in = bytearray()
        self._wrote_header = False

    def compress(self, data: bytes | bytearray) -> bytes:
        # cramjam writes a whole framed stream (header + chunks of at most 64 KiB with their
        # masked CRC-32C); the stream header goes out once, as golang/snappy's Writer does.
        framed = bytes(cramjam.snappy.compress(bytes(data)))
        if self._wrote_header:
            return framed[len(SNAPPY_STREAM_HEADER) :]
        self._wrote_header = True
        return framed

    def decompress(self, data: bytes | bytearray) -> bytes:
        buf = self._in
        buf += data
        n = len(buf)
        pos = 0
        # Find the end of the last whole chunk; the codec checks types, lengths and CRCs.
        while n - pos >= 4:
            header = _CHUNK_HEADER.unpack_from(buf, pos)[0]
            ctype = header & 0xFF
            clen = header >> 8
            if ctype in (0x00, 0x01) and clen > _MAX_CHUNK + 4 + 32 + _MAX_CHUNK // 6:
                raise CompressionError(f"snappy: chunk too large ({clen} bytes)")
            if 0x02 <= ctype <= 0x7F:
                raise CompressionError(f"snappy: unsupported chunk type {ctype:#x}")
            if n - pos - 4 < clen:
                break
            pos += 4 + clen
        if pos == 0:
            return b""
        whole = bytes(buf[:pos])
        del buf[:pos]
        if not whole.startswith(SNAPPY_STREAM_HEADER):
            whole = SNAPPY_STREAM_HEADER + whole
        try:
            return bytes(cramjam.snappy.decompress(whole))
        except Exception as e:  # cramjam raises its own DecompressionError
            raise CompressionError(f"snappy: {e}") from None


#: Most bytes one socket read may inflate to (deflate), far above any legitimate batch of
#: commands (--max-body-size is 5 MiB by default).
MAX_INFLATE = 64 * 1024 * 1024


class DeflateCodec:
    """Raw deflate (no zlib header), as Go's compress/flate; flushed with Z_SYNC_FLUSH."""

    __slots__ = ("_c", "_d", "level")

    name = "deflate"

    def __init__(self, level: int) -> None:
        self.level = level
        self._c = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._d = zlib.decompressobj(-15)

    def compress(self, data: bytes | bytearray) -> bytes:
        c = self._c
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes | bytearray) -> bytes:
        """Inflate one read. At most MAX_INFLATE bytes come out of one read (a "zip bomb" of a
        few KiB would otherwise expand to gigabytes before the parser's limits apply)."""
        d = self._d
        try:
            out = d.decompress(data, MAX_INFLATE + 1)
        except zlib.error as e:
            raise CompressionError(f"flate: {e}") from None
        if len(out) > MAX_INFLATE or d.unconsumed_tail:
            raise CompressionError(f"flate: one read inflates past {MAX_INFLATE} bytes")
        return out


Codec = SnappyCodec | DeflateCodec
