"""Diskqueue chunks built by hand for the tests of what takes them as read
(DiskQueue.read_framed's shape): records laid out as a go-diskqueue data file holds them."""

from __future__ import annotations


def framed_chunk(
    records: list[bytes], before: bytes = b"", after: bytes = b""
) -> tuple[bytes, list[int]]:
    """(chunk, offs): ``records`` each after its 4-byte big-endian size, between ``before``
    and ``after`` (bytes of the file that are not taken); record k is
    ``chunk[offs[k] + 4 : offs[k + 1]]``."""
    chunk = bytearray(before)
    offs = []
    for r in records:
        offs.append(len(chunk))
        chunk += len(r).to_bytes(4, "big") + r
    offs.append(len(chunk))
    chunk += after
    return bytes(chunk), offs
