"""A plain blocking publisher on nsqpy.testing.wire_client.WireClient for the tests that want
exact commands (IDENTIFY, PUB, MPUB one at a time): no TLS, compression or AUTH. The Spark
connector's own publisher is nsqpy.spark.client.BatchPublisher."""

from __future__ import annotations

import json
import socket
from typing import Any

from nsqpy import wire
from nsqpy.client import NSQError
from nsqpy.spark.client import USER_AGENT, parse_address
from nsqpy.testing.wire_client import ConnectionClosed, WireClient


class NSQConnection:
    """A blocking publishing connection to the nsqd at ``address`` (``host:port``): connect()
    sends the magic and IDENTIFY, pub() and mpub() wait for OK; NSQError for any other answer,
    ConnectionError when nsqd closes the connection, TimeoutError after ``timeout`` s."""

    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self.wire: WireClient | None = None
        self.settings: dict[str, Any] = {}

    def connect(self) -> dict[str, Any]:
        """Connect, send the magic and IDENTIFY; returns nsqd's settings. Raises OSError,
        NSQError."""
        self.wire = WireClient.connect(parse_address(self.address), timeout=self.timeout)
        try:
            fields = {"client_id": socket.gethostname().split(".")[0],
                      "user_agent": USER_AGENT, "feature_negotiation": True}  # fmt: skip
            self.wire.command(b"IDENTIFY", body=json.dumps(fields).encode())
            data = self._response()
            self.settings = json.loads(data) if data.startswith(b"{") else {}
        except BaseException:
            self.close()
            raise
        return self.settings

    def pub(self, topic: str, body: bytes) -> None:
        """PUB and wait for OK; raises NSQError when nsqd answers anything else."""
        self._send(wire.encode_command(b"PUB", topic.encode(), body=body))
        self._expect_ok()

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        """MPUB and wait for OK; raises NSQError when nsqd answers anything else."""
        self._send(wire.encode_mpub(topic.encode(), bodies))
        self._expect_ok()

    def _send(self, data: bytes) -> None:
        if self.wire is None:
            raise ConnectionError(f"connection to {self.address} is closed")
        self.wire.send(data)

    def _response(self) -> bytes:
        if self.wire is None:
            raise ConnectionError(f"connection to {self.address} is closed")
        try:
            ftype, data = self.wire.read_frame(self.timeout)
        except ConnectionClosed as e:
            raise ConnectionError(f"{self.address} closed the connection") from e
        if ftype == wire.FRAME_TYPE_ERROR:
            raise NSQError.from_frame(data)
        if ftype != wire.FRAME_TYPE_RESPONSE:
            raise NSQError("E_BAD_RESPONSE", f"unexpected frame type {ftype}")
        return data

    def _expect_ok(self) -> None:
        data = self._response()
        if data != wire.OK:
            raise NSQError("E_BAD_RESPONSE", f"expected OK, got {data[:100]!r}")

    def close(self) -> None:
        client, self.wire = self.wire, None
        if client is not None:
            try:
                client.close()
            except OSError:
                pass
