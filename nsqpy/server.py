"""nsqd's Main: the listeners and services around one NSQD.

Strategy: the core (nsqd.py) knows nothing of sockets; this module composes the daemon in
nsqd's order (nsqd/nsqd.go New and Main): TLS context and auth servers from the options, the
data directory locked and loaded, then the TCP listener, HTTPS before HTTP (the plain
listener's TLS_REQUIRED answer names the HTTPS port), the loops (queue scan, diskqueue sync,
nsqlookupd registration) and statsd. A clean exit undoes it in reverse: stop accepting, close
every client, stop HTTP, then let the core write everything to disk."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from .admission import Admission
from .client_v2 import Connection
from .http_api import RouteHook, start_http
from .internal.http.server import HTTPServer, close_unix, listen, listen_unix
from .internal.lg import log_listening
from .internal.netaddr import format_listen_addr, is_unix_address, split_host_port
from .nsqd import NSQD
from .protocol_v2 import ProtocolV2

if TYPE_CHECKING:
    from .replication.node import Replication

log = logging.getLogger("nsqpy")


class Server:
    """nsqd's listeners around ``nsqd``: ``await start()``, then ``await stop()``."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        # Replicated topics (--etcd-endpoints only: nothing of nsqpy/replication is imported
        # otherwise): the daemon runs it with its loops; _replication wires its transports.
        self._repl: Replication | None = None
        if nsqd.opts.etcd_endpoints:
            from .replication.node import Replication

            self._repl = nsqd.replication = Replication(nsqd)
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http: HTTPServer | None = None
        self._https: HTTPServer | None = None
        self._abandoned = False
        # Unix socket files this server bound (removed when it closes, as Go's listeners do).
        self._unix_paths: list[str] = []
        self._tcp_name = self._http_name = self._https_name = ""

    async def start(self) -> None:
        """Raises DataDirLocked, ValueError (bad nsqd.dat, bad TLS files) or OSError (nsqd's
        "listen (addr) failed - ..." text when a port is taken)."""
        nsqd = self.nsqd
        opts = nsqd.opts
        from .tls import build_server_context

        try:
            nsqd.tls_context = build_server_context(opts)
        except (OSError, ValueError) as e:
            raise ValueError(f"failed to build TLS config - {e}") from e
        if opts.auth_http_addresses:
            from .auth import AuthClient

            nsqd.auth = AuthClient(
                opts.auth_http_addresses,
                opts.auth_http_request_method,
                opts.http_client_connect_timeout_ms,
                opts.http_client_request_timeout_ms,
            )
        try:
            nsqd.open()
            await self._listen()
        except BaseException:
            # nsqd fails in New() or LoadMetadata before anything is written: close what was
            # bound, release the data path, and leave nsqd.dat as it was (a bad one too);
            # stop() is then a no-op.
            self._abandoned = True
            for server in (self._http, self._https):
                if server is not None:
                    await server.close()
            if self._tcp_server is not None:
                self._tcp_server.close()
            for path in self._unix_paths:
                close_unix(path)
            nsqd.abandon()
            raise
        self._start_services()

    async def _listen(self) -> None:
        """Bind TCP, HTTPS (with a certificate) and HTTP, logging each address."""
        nsqd = self.nsqd
        opts = nsqd.opts
        # the V2 rules on the event loop's clock (their timers are the loop's); a Connection is
        # an asyncio.Protocol by its methods (a sans-IO ClientState underneath)
        loop = asyncio.get_running_loop()
        core = ProtocolV2(nsqd, loop.time)
        hooks = self._replication(core)
        admission = Admission(loop)  # new connections' first reads, a few per pass

        def connection() -> asyncio.Protocol:
            return cast(asyncio.Protocol, Connection(core, admission))

        # nsqd's util.TypeOfAddr: an address that is not host:port is a unix socket path
        # (then the address has no port: /info says -1, broadcast ports stay as given).
        try:
            if is_unix_address(opts.tcp_address):
                self._tcp_server = await listen_unix(connection, opts.tcp_address)
                self._unix_paths.append(opts.tcp_address)
            else:
                host, port = split_host_port(opts.tcp_address)
                self._tcp_server = await listen(connection, host or None, port)
        except (OSError, ValueError) as e:
            raise OSError(f"listen ({opts.tcp_address}) failed - {e}") from e
        if self._unix_paths:
            self._tcp_name = opts.tcp_address
        else:
            sock = self._tcp_server.sockets[0].getsockname()
            nsqd.tcp_address = (sock[0], sock[1])
            self._tcp_name = format_listen_addr(sock)
        log_listening(log, "TCP", self._tcp_name)

        if nsqd.tls_context is not None and opts.https_address:
            host, port = split_host_port(opts.https_address)
            try:
                self._https = await start_http(
                    nsqd, host or None, port, ssl_context=nsqd.tls_context, hooks=hooks
                )
            except OSError as e:
                raise OSError(f"listen ({opts.https_address}) failed - {e}") from e
            sock = self._https.address
            nsqd.https_address = (sock[0], sock[1])
            self._https_name = format_listen_addr(sock)
            log_listening(log, "HTTPS", self._https_name)

        try:
            if is_unix_address(opts.http_address):
                self._http = await start_http(
                    nsqd, None, 0, unix_path=opts.http_address, hooks=hooks
                )
                self._unix_paths.append(opts.http_address)
                self._http_name = opts.http_address
                log_listening(log, "HTTP", self._http_name)
                return
            host, port = split_host_port(opts.http_address)
            self._http = await start_http(nsqd, host or None, port, hooks=hooks)
        except (OSError, ValueError) as e:
            raise OSError(f"listen ({opts.http_address}) failed - {e}") from e
        sock = self._http.address
        nsqd.http_address = (sock[0], sock[1])
        self._http_name = format_listen_addr(sock)
        log_listening(log, "HTTP", self._http_name)

    def status(self) -> str:
        """What a supervisor shows (internal/daemon.py): the bound listeners, e.g.
        "TCP 127.0.0.1:4150, HTTP 127.0.0.1:4151"."""
        names = (("TCP", self._tcp_name), ("HTTP", self._http_name), ("HTTPS", self._https_name))
        return ", ".join(f"{kind} {name}" for kind, name in names if name)

    def _replication(self, core: ProtocolV2) -> list[RouteHook]:
        """Replicated topics (--etcd-endpoints only): their publishes attached to the V2 core,
        and the route hooks that put their HTTP routes into nsqd's API."""
        repl = self._repl
        if repl is None:
            return []
        from .replication.entries import STREAM_MAGIC
        from .replication.http_routes import install_routes
        from .replication.stream_server import stream_factory
        from .replication.tcp_publish import TCPPublish

        core.attach_replication(TCPPublish(core, repl))
        core.attach_protocol(STREAM_MAGIC, stream_factory(repl))
        return [lambda router, api: install_routes(router, api, repl)]

    def _start_services(self) -> None:
        nsqd = self.nsqd
        opts = nsqd.opts
        nsqd.start_loops()
        from .statsd import StatsdPusher, resolve_prefix

        # as nsqd.New: "%s" in --statsd-prefix becomes <broadcast address>_<http port>, once
        opts.statsd_prefix = resolve_prefix(
            opts.statsd_prefix, opts.broadcast_address, opts.broadcast_http_port
        )
        if opts.statsd_address:
            nsqd.add_task(asyncio.create_task(StatsdPusher(nsqd).run()))

    async def stop(self) -> None:
        """Clean exit (SIGTERM/SIGINT): stop accepting, close every client and the HTTP
        listeners, then the core's close() keeps every message on disk. Nothing to do after
        a failed start()."""
        if self._abandoned:
            return
        nsqd = self.nsqd
        if self._tcp_server is not None:
            self._tcp_server.close()
            log.info("TCP: closing %s", self._tcp_name)
        for c in list(nsqd.clients.values()):
            c.close()
        if self._http is not None:
            log.info("HTTP: closing %s", self._http_name)
            await self._http.close()
        if self._https is not None:
            log.info("HTTPS: closing %s", self._https_name)
            await self._https.close()
        if nsqd.auth is not None:
            await nsqd.auth.close()
        for path in self._unix_paths:
            close_unix(path)
        await nsqd.close()
