"""Raw TCP listeners on loopback for client tests: one that records every byte it receives and
never answers (a peer that hangs, or proof that nothing was written), and one that answers the
V2 handshake's IDENTIFY with a JSON object of the test's choosing and records what follows.

Strategy: plain sockets and daemon threads, so sync tests (threads) and async tests (any
loop) use them alike; ``close()`` closes the listener and every accepted socket. Nothing here
speaks more of the protocol than the IDENTIFY answer: every other byte is only recorded."""

from __future__ import annotations

import json
import socket
import struct
import threading
from typing import Any

_FRAME = struct.Struct(">ii")
_LEN = struct.Struct(">i")


class RecordingListener:
    """Accepts on 127.0.0.1:<ephemeral>; ``address`` is "host:port". ``received`` holds the
    bytes read from all connections (after the IDENTIFY exchange when ``identify`` is given),
    ``accepted`` counts connections. With ``identify`` (a dict), each connection's magic and
    IDENTIFY are read and answered with that dict as a response frame."""

    def __init__(self, identify: dict[str, Any] | None = None) -> None:
        self.identify = identify
        self.received = bytearray()
        self.accepted = 0
        self.handshakes = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._srv.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                s, _ = self._srv.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._socks.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _read_exact(self, s: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("peer closed")
            buf += chunk
        return buf

    def _serve(self, s: socket.socket) -> None:
        try:
            if self.identify is not None:
                self._read_exact(s, 4)  # "  V2"
                line = b""
                while not line.endswith(b"\n"):
                    line += self._read_exact(s, 1)
                (size,) = _LEN.unpack(self._read_exact(s, 4))
                self._read_exact(s, size)
                # counted before the answer is sent: a client that has the answer can rely on it
                with self._lock:
                    self.handshakes += 1
                data = json.dumps(self.identify).encode()
                s.sendall(_FRAME.pack(len(data) + 4, 0) + data)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return
                with self._lock:
                    self.received += chunk
        except OSError:
            return

    def close(self) -> None:
        self._closed = True
        self._srv.close()
        with self._lock:
            for s in self._socks:
                s.close()

    def __enter__(self) -> RecordingListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
