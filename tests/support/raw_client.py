"""A blocking TCP V2 client for exact-byte tests: nsqpy.testing.wire_client.WireClient on
127.0.0.1 with every read under a timeout and heartbeats left as frames, plus the commands the
tests send most (IDENTIFY, SUB, PUB) checked against nsqd's answers."""

from __future__ import annotations

import json
import socket
import struct

from nsqpy import wire
from nsqpy.message import decode_record
from nsqpy.testing.wire_client import WireClient


class RawClient(WireClient):
    """A blocking TCP V2 client for exact-byte tests (nsqpy.testing.wire_client.WireClient on
    127.0.0.1:``port``; every read has a timeout; heartbeats come out as frames, unanswered)."""

    def __init__(self, port: int, timeout: float = 5, magic: bytes = wire.MAGIC_V2) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        super().__init__(sock, timeout=timeout, answer_heartbeats=False)
        if magic:
            self.send(magic)

    def cmd(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.command(name, *params, body=body)

    def read_non_heartbeat(self, timeout: float | None = None) -> tuple[int, bytes]:
        while True:
            f = self.read_frame(timeout)
            if f != (wire.FRAME_TYPE_RESPONSE, wire.HEARTBEAT):
                return f

    def expect_response(self, data: bytes = b"OK") -> None:
        assert self.read_non_heartbeat() == (wire.FRAME_TYPE_RESPONSE, data)

    def read_message(self, timeout: float | None = None) -> tuple[int, int, bytes, bytes]:
        ftype, data = self.read_non_heartbeat(timeout)
        assert ftype == wire.FRAME_TYPE_MESSAGE, (ftype, data)
        return decode_record(data)

    def identify(self, **fields: object) -> bytes:  # type: ignore[override]
        self.cmd(b"IDENTIFY", body=json.dumps(fields).encode())
        ftype, data = self.read_non_heartbeat()
        assert ftype == wire.FRAME_TYPE_RESPONSE, data
        return data

    def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.cmd(b"SUB", topic.encode(), channel.encode())
        self.expect_response()
        if rdy is not None:
            self.rdy(rdy)

    def pub(self, topic: str, body: bytes) -> None:
        self.cmd(b"PUB", topic.encode(), body=body)
        self.expect_response()

    def closed_by_server(self, timeout: float = 5) -> bool:
        """True when the server closes the connection within ``timeout`` s (frames are
        skipped)."""
        try:
            while True:
                self.read_frame(timeout)
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        except OSError:
            return True


def pack_len(n: int) -> bytes:
    """``n`` as the V2 protocol writes a size: 4 bytes, big-endian, signed."""
    return struct.pack(">i", n)
