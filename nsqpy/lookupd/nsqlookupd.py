"""nsqpy-lookupd's core: the registration DB and the connected clients (options: options.py).

Strategy: as nsqlookupd/nsqlookupd.go. The core owns the RegistrationDB and
the connected clients; the transports (protocol_v1.py, http_api.py) call into it, and
server.py binds them around it."""

from __future__ import annotations

import logging
import socket
from typing import Protocol

from ..build_info import NSQ_VERSION
from ..internal.gojson import encode as go_json
from .metrics import LookupdMetrics
from .options import LookupdOptions
from .registration_db import RegistrationDB


class Client(Protocol):
    """A connected nsqd (protocol_v1.LookupProtocolV1) as the core sees it."""

    def close(self) -> None:
        """Drop the connection (its producer leaves the DB)."""
        ...


log = logging.getLogger("nsqpy")


class NSQLookupd:
    """nsqlookupd's state: ``db``, the connected ``clients``, the listeners' addresses
    (set by server.py) and what /metrics counts (``metrics``, metrics.py)."""

    def __init__(self, opts: LookupdOptions, db: RegistrationDB | None = None) -> None:
        self.opts = opts
        self.db = db if db is not None else RegistrationDB()
        self.clients: set[Client] = set()
        self.tcp_address: tuple | None = None
        self.http_address: tuple | None = None
        self.metrics = LookupdMetrics()
        self._identify_reply: bytes | None = None

    @property
    def inactive_producer_timeout_ns(self) -> int:
        return self.opts.inactive_producer_timeout_ms * 1_000_000

    @property
    def tombstone_lifetime_ns(self) -> int:
        return self.opts.tombstone_lifetime_ms * 1_000_000

    def identify_response(self) -> bytes:
        """IDENTIFY's JSON answer (the same for every client, so built once)."""
        if self._identify_reply is None:
            tcp = self.tcp_address[1] if self.tcp_address else 0
            http = self.http_address[1] if self.http_address else 0
            self._identify_reply = identify_response(tcp, http, self.opts.broadcast_address)
        return self._identify_reply


def identify_response(tcp_port: int, http_port: int, broadcast_address: str) -> bytes:
    """IDENTIFY's answer: json.Marshal of a map, so keys sorted."""

    return go_json(
        {
            "broadcast_address": broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": http_port,
            "tcp_port": tcp_port,
            "version": NSQ_VERSION,
        }
    )
