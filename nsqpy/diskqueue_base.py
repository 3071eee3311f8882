"""The state every part of a DiskQueue works on, and go-diskqueue's format constants.

Strategy: DiskQueue (diskqueue.py, the public entry and the format's description) is one object
on the event loop's thread whose hot paths (put, peek, read_many) read and write plain slots;
its code is split by job into mixins that share that state: the writer (diskqueue_writer.py),
the reader (diskqueue_reader.py), the meta file and sync jobs (diskqueue_meta.py) and the
recovery from crashes and corruption (diskqueue_recovery.py). This module declares the shared
attributes once (the concrete class holds the slots), so each mixin is typed on its own."""

from __future__ import annotations

import logging
import re
import struct
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

_LEN = struct.Struct(">i")  # a record's size prefix: int32 big-endian

#: Bytes asked for per pread; several records are parsed out of one chunk.
READ_CHUNK = 64 * 1024
#: put() flushes the write buffer before it grows past this.
WRITE_BUFFER_LIMIT = 1 << 20
#: A record's size field is an int32 and the record must fit in a Python slice comfortably.
MAX_RECORD_SIZE = (1 << 31) - 5

# go reads the meta file with fmt.Fscanf("%d\n%d,%d\n%d,%d\n"): signed decimals, spaces before
# a number allowed, the newlines required (the last one may be missing at end of file).
META_RE = re.compile(
    rb"[ \t]*([+-]?\d+)[ \t]*\n"
    rb"[ \t]*([+-]?\d+)[ \t]*,[ \t]*([+-]?\d+)[ \t]*\n"
    rb"[ \t]*([+-]?\d+)[ \t]*,[ \t]*([+-]?\d+)[ \t]*(?:\n|\Z)"
)


class DiskQueueClosed(OSError):
    """An operation on a diskqueue after close() or delete() (go-diskqueue: "exiting")."""


class QueueState:
    """The attributes of a DiskQueue (see DiskQueue.__init__ for what each one means), and
    for the type checker the methods one part calls in another. The slots live here, so
    that every mixin (``__slots__ = ()``) shares this one layout."""

    __slots__ = (
        "_clock",
        "_closed",
        "_depth",
        "_durable_read_num",
        "_pending_since",
        "_last_text",
        "_log",
        "_meta_closed",
        "_meta_lock",
        "_meta_path",
        "_meta_seq",
        "_meta_seq_written",
        "_need_sync",
        "_next_pos",
        "_obsolete",
        "_obsolete_lock",
        "_ops",
        "_peeked",
        "_rbuf",
        "_rbuf_off",
        "_read_fd",
        "_read_num",
        "_read_pos",
        "_read_size",
        "_sync_timeout",
        "_wbuf",
        "_wbuf_start",
        "_write_fd",
        "_write_num",
        "_write_pos",
        "data_path",
        "max_bytes_per_file",
        "max_msg_size",
        "min_msg_size",
        "name",
        "read_floor",
        "sync_every",
        "sync_timeout_ms",
    )

    name: str
    data_path: str
    max_bytes_per_file: int
    min_msg_size: int
    max_msg_size: int
    sync_every: int
    sync_timeout_ms: int
    read_floor: Callable[[], tuple[int, int, int] | None] | None
    _sync_timeout: float
    _log: logging.Logger
    _clock: Callable[[], float]
    _meta_path: str
    _depth: int
    _read_num: int
    _read_pos: int
    _next_pos: int
    _write_num: int
    _write_pos: int
    _wbuf: bytearray
    _wbuf_start: int
    _write_fd: int | None
    _read_fd: int | None
    _read_size: int
    _rbuf: bytes
    _rbuf_off: int
    _peeked: bytes | None
    _ops: int
    _pending_since: float
    _need_sync: bool
    _last_text: bytes
    _closed: bool
    _meta_lock: threading.Lock
    _meta_seq: int
    _meta_seq_written: int
    _meta_closed: bool
    _durable_read_num: int
    _obsolete_lock: threading.Lock
    _obsolete: list[int]

    if TYPE_CHECKING:

        def file_name(self, num: int) -> str: ...
        def flush(self) -> None: ...
        def sync(self) -> None: ...
        def _close_write(self) -> None: ...
        def _close_read(self) -> None: ...
        def _next_read_file(self) -> None: ...
        def _bad_read_file(self, reason: str) -> None: ...
        def _check_tail(self) -> None: ...
        def _meta_text(self) -> tuple[int, bytes]: ...
        def _retrieve_meta(self) -> tuple[int, int, int, int, int]: ...
        def _remove(self, path: str) -> OSError | None: ...
