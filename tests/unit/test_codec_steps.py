"""The compression codecs' bounded inflation (nsqpy/compression.py) in process: a bomb is
inflated in steps of at most the asked size (snappy: whole chunks), the rest stays compressed,
and a snappy chunk stating more than 64 KiB is refused before it is inflated. The daemon under
real bombs is checked in tests/daemon/test_bombs.py."""

from __future__ import annotations

import zlib

import cramjam
import pytest


def deflate(parts: list[bytes]) -> bytes:
    """Raw deflate (no zlib header, as NSQ's deflate stream) of ``parts``, sync-flushed."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join([c.compress(p) for p in parts] + [c.flush(zlib.Z_SYNC_FLUSH)])


def repeat(unit: bytes, total: int) -> list[bytes]:
    """``total`` bytes of ``unit`` repeated, as 1 MiB blocks."""
    block = unit * (1024 * 1024 // len(unit))
    return [block] * (total // len(block))


def test_codecs_inflate_in_bounded_steps():
    """take(limit) inflates at most limit bytes (snappy: whole chunks, at most 64 KiB past
    it) and keeps the rest compressed; pending says whether any is left."""
    from nsqpy.compression import DeflateCodec, SnappyCodec

    d = DeflateCodec(6)
    d.feed(deflate(repeat(b"\0" * 1024, 8 * 1024 * 1024)))
    sizes = []
    while d.pending:
        sizes.append(len(d.take(65536)))
    assert max(sizes) == 65536 and sum(sizes) == 8 * 1024 * 1024
    s = SnappyCodec()
    s.feed(bytes(cramjam.snappy.compress(b"\0" * (2 * 1024 * 1024))))
    total = 0
    while s.pending:
        got = len(s.take(100_000))
        assert 0 < got <= 100_000 + 65536
        total += got
    assert total == 2 * 1024 * 1024
    # a chunk stating more than 64 KiB uncompressed is refused before it is inflated
    from nsqpy.compression import CompressionError

    bad = SnappyCodec()
    bad.feed(b"\x00\x09\x00\x00" + b"\0\0\0\0" + b"\x81\x80\x08" + b"\0\0")  # states 131073
    with pytest.raises(CompressionError):
        bad.take(65536)
