# nsqpy-lookupd's core: options, the registration DB and the two listeners.
#
# Strategy: as nsqlookupd/nsqlookupd.go and options.go. The core owns the RegistrationDB and
# starts the TCP ("  V1") and HTTP servers; transports call into the DB, never the other way.
# Listening order and log lines match nsqlookupd: TCP first, then HTTP, each logging
# "<NAME>: listening on <addr>" with the real port (port 0 picks a free one).
from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass, field
from typing import Any

from ..netaddr import format_listen_addr, split_host_port
from .protocol_v1 import LookupProtocolV1, identify_response
from .registration_db import RegistrationDB

log = logging.getLogger("nsqpy")


@dataclass
class LookupdOptions:
    """nsqlookupd's Options (options.go); durations in milliseconds."""

    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    inactive_producer_timeout_ms: int = 300_000
    tombstone_lifetime_ms: int = 45_000


class NSQLookupd:
    """The daemon: ``start()`` listens, ``stop()`` closes listeners and connections."""

    def __init__(self, opts: LookupdOptions, db: RegistrationDB | None = None) -> None:
        self.opts = opts
        self.db = db if db is not None else RegistrationDB()
        self.clients: set[LookupProtocolV1] = set()
        self.tcp_address: tuple | None = None
        self.http_address: tuple | None = None
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http_runner: Any = None
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

    async def start(self) -> None:
        """Listen on --tcp-address, then --http-address. Raises OSError with nsqlookupd's
        "listen (addr) failed - ..." text, ValueError for an address without a port."""
        from .http_api import build_app

        loop = asyncio.get_running_loop()
        host, port = split_host_port(self.opts.tcp_address)
        try:
            self._tcp_server = await loop.create_server(
                lambda: LookupProtocolV1(self), host or None, port, reuse_address=True, backlog=1024
            )
        except OSError as e:
            raise OSError(f"listen ({self.opts.tcp_address}) failed - {e}") from None
        self.tcp_address = self._tcp_server.sockets[0].getsockname()
        host, port = split_host_port(self.opts.http_address)
        from ..httpd import start_site

        try:
            self._http_runner, self.http_address = await start_site(
                build_app(self), host or None, port
            )
        except OSError as e:
            raise OSError(f"listen ({self.opts.http_address}) failed - {e}") from None
        log.info("TCP: listening on %s", format_listen_addr(self.tcp_address))
        log.info("HTTP: listening on %s", format_listen_addr(self.http_address))

    async def stop(self) -> None:
        """Close the listeners and every client connection (their producers leave)."""
        if self._tcp_server is not None:
            self._tcp_server.close()
            log.info("TCP: closing %s", format_listen_addr(self.tcp_address or ("", 0)))
        for c in list(self.clients):
            c._close()
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self._http_runner = None
        if self._tcp_server is not None:
            try:
                await asyncio.wait_for(self._tcp_server.wait_closed(), 2)
            except TimeoutError:
                pass
            self._tcp_server = None
