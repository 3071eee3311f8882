"""nsqlookupd's Main: the TCP and HTTP listeners around one NSQLookupd.

Strategy: as nsqlookupd/nsqlookupd.go Main: TCP first, then HTTP, each logging
"<NAME>: listening on <addr>" with the real port (port 0 picks a free one); a clean stop
closes the listeners and every connection (their producers leave the DB), logging
"<NAME>: closing <addr>" for each listener as Go's does (the order may differ: Go logs from
each listener's goroutine)."""

from __future__ import annotations

import asyncio
import logging

from ..internal.http.server import HTTPServer, listen, serve
from ..internal.lg import log_listening
from ..internal.netaddr import format_listen_addr, split_host_port
from .http_api import build_router
from .nsqlookupd import NSQLookupd
from .protocol_v1 import LookupProtocolV1

log = logging.getLogger("nsqpy")


class Server:
    """nsqlookupd's listeners around ``lookupd``: ``await start()``, then ``await stop()``."""

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http: HTTPServer | None = None

    async def start(self) -> None:
        """Listen on --tcp-address, then --http-address. Raises OSError with nsqlookupd's
        "listen (addr) failed - ..." text, ValueError for an address without a port."""
        lookupd = self.lookupd
        opts = lookupd.opts
        host, port = split_host_port(opts.tcp_address)
        try:
            self._tcp_server = await listen(lambda: LookupProtocolV1(lookupd), host or None, port)
        except OSError as e:
            raise OSError(f"listen ({opts.tcp_address}) failed - {e}") from None
        lookupd.tcp_address = self._tcp_server.sockets[0].getsockname()
        host, port = split_host_port(opts.http_address)
        try:
            self._http = await serve(build_router(lookupd), host or None, port)
        except OSError as e:
            raise OSError(f"listen ({opts.http_address}) failed - {e}") from None
        lookupd.http_address = self._http.address
        for kind, address in (("TCP", lookupd.tcp_address), ("HTTP", lookupd.http_address)):
            log_listening(log, kind, format_listen_addr(address))

    def status(self) -> str:
        """What a supervisor shows (internal/daemon.py): "TCP <addr>, HTTP <addr>"."""
        lookupd = self.lookupd
        return ", ".join(
            f"{kind} {format_listen_addr(address)}"
            for kind, address in (("TCP", lookupd.tcp_address), ("HTTP", lookupd.http_address))
            if address
        )

    async def stop(self) -> None:
        """Close the listeners and every client connection (their producers leave)."""
        lookupd = self.lookupd
        if self._tcp_server is not None:
            self._tcp_server.close()
            log.info("TCP: closing %s", format_listen_addr(lookupd.tcp_address or ("", 0)))
        for c in list(lookupd.clients):
            c.close()
        if self._http is not None:
            await self._http.close()
            self._http = None
            log.info("HTTP: closing %s", format_listen_addr(lookupd.http_address or ("", 0)))
        if self._tcp_server is not None:
            try:
                await asyncio.wait_for(self._tcp_server.wait_closed(), 2)
            except TimeoutError:
                pass
            self._tcp_server = None
