"""nsqadmin's Main: the HTTP listener, the cluster client, the history sampler, the notifier.

Strategy: as nsqadmin.New/Main: the options are checked first (ValueError with nsqadmin's
text), then the listener is bound and "HTTP: listening on <addr>" logged with the real port
(port 0 picks a free one). The JSON API (http_api) and the pages (pages) share one ClusterInfo
and one HTTP client session; the routes sit under --base-path, with http.aio.go_router's
redirect/405/404 rules around them. The sampler task asks the cluster every
--sample-interval and records every topic's and channel's totals in the History (it never
lets an error escape: a failed round is logged and the next one tried)."""

from __future__ import annotations

import asyncio
import logging
import posixpath
import ssl
import time
from typing import Any

from aiohttp import web

from ..internal.aiotasks import cancel_and_wait
from ..internal.clusterinfo import types as ci
from ..internal.clusterinfo.data import ClusterInfo
from ..internal.clusterinfo.http_client import HTTPClient
from ..internal.clusterinfo.types import UpstreamError
from ..internal.http.aio import go_router, start_site
from ..internal.lg import log_listening
from ..internal.netaddr import format_listen_addr, split_host_port
from ..internal.reqmetrics import CONTENT_TYPE
from . import http_api, pages
from .history import History, Key
from .metrics import UpstreamMetrics
from .notify import Notifier
from .options import AdminOptions

log = logging.getLogger("nsqpy")


def client_ssl_context(opts: AdminOptions) -> ssl.SSLContext | None:
    """The HTTP client's TLS settings (--http-client-tls-*); None for the defaults. Raises
    ValueError with nsqadmin's text when a file cannot be used."""
    if not (
        opts.http_client_tls_insecure_skip_verify
        or opts.http_client_tls_cert
        or opts.http_client_tls_root_ca_file
    ):
        return None
    ctx = ssl.create_default_context()
    if opts.http_client_tls_insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if opts.http_client_tls_cert:
        try:
            ctx.load_cert_chain(opts.http_client_tls_cert, opts.http_client_tls_key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(
                f"failed to LoadX509KeyPair {opts.http_client_tls_cert}, "
                f"{opts.http_client_tls_key} - {e}"
            ) from None
    if opts.http_client_tls_root_ca_file:
        try:
            ctx.load_verify_locations(opts.http_client_tls_root_ca_file)
        except OSError as e:
            raise ValueError(
                f"failed to read TLS root CA file {opts.http_client_tls_root_ca_file} - {e}"
            ) from None
        except ssl.SSLError:
            raise ValueError(
                f"failed to AppendCertsFromPEM {opts.http_client_tls_root_ca_file}"
            ) from None
    return ctx


def history_samples(rows: list[ci.Stats]) -> dict[Key, tuple[int, int]]:
    """(depth, message_count) per history key from per-node topic rows: each topic, each
    channel (cluster-wide) and ("total",): every channel's depth and messages together."""
    out: dict[Key, tuple[int, int]] = {}
    total_depth = total_count = 0
    for t in rows:
        d, c = out.get(("topic", t["topic_name"]), (0, 0))
        out[("topic", t["topic_name"])] = (d + t["depth"], c + t["message_count"])
        for ch in t.get("channels") or []:
            key = ("channel", t["topic_name"], ch["channel_name"])
            d, c = out.get(key, (0, 0))
            out[key] = (d + ch["depth"], c + ch["message_count"])
            total_depth += ch["depth"]
            total_count += ch["message_count"]
    out[("total",)] = (total_depth, total_count)
    return out


class AdminServer:
    """nsqadmin around ``opts``: ``await start()``, then ``await stop()``."""

    def __init__(self, opts: AdminOptions) -> None:
        self.opts = opts
        self.http_address: tuple[Any, ...] | None = None
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.client: HTTPClient | None = None
        self.notifier: Notifier | None = None
        self.history = History(opts.sample_interval_ms / 1000, opts.history_window_ms / 1000)
        self.upstream = UpstreamMetrics(opts.nsqlookupd_http_addresses)

    def build_app(self) -> web.Application:
        opts = self.opts
        self.client = HTTPClient(
            opts.http_client_connect_timeout_ms / 1000,
            opts.http_client_request_timeout_ms / 1000,
            client_ssl_context(opts),
        )
        self.client.observe = self.upstream.observe
        self.cluster = ClusterInfo(
            self.client, opts.nsqlookupd_http_addresses, opts.nsqd_http_addresses
        )
        self.notifier = Notifier(opts.notification_http_endpoint, self.client.timeout)
        api = http_api.AdminAPI(opts, self.cluster, self.notifier)
        page = pages.Pages(opts, self.cluster, api, self.history)
        app = web.Application(middlewares=[go_router])
        base = opts.base_path

        def bp(p: str) -> str:  # Go's path.Join(basePath, p)
            return posixpath.normpath(posixpath.join(base, p.lstrip("/")))

        pages.add_routes(app, page, bp)
        http_api.add_routes(app, api, bp)
        app.router.add_get(bp("/metrics"), self.metrics, allow_head=False)
        return app

    async def metrics(self, request: web.Request) -> web.Response:
        """GET /metrics (beyond nsqadmin): upstream request times and errors by kind
        (admin/metrics.py), in Prometheus' text format."""
        return web.Response(body=self.upstream.scrape(), headers={"Content-Type": CONTENT_TYPE})

    async def start(self) -> None:
        """Check the options, bind --http-address, start the sampler and the notifier. Raises
        ValueError (bad options) or OSError ("listen (addr) failed - ...")."""
        opts = self.opts
        opts.validate()
        app = self.build_app()
        host, port = split_host_port(opts.http_address)
        try:
            self._runner, self.http_address = await start_site(app, host or None, port)
        except OSError as e:
            raise OSError(f"listen ({opts.http_address}) failed - {e}") from None
        log_listening(log, "HTTP", format_listen_addr(self.http_address))
        assert self.notifier is not None
        self.notifier.start()
        self._sampler = asyncio.get_running_loop().create_task(self._sample_loop())

    def status(self) -> str:
        """What a supervisor shows (internal/daemon.py): "HTTP <addr>"."""
        return f"HTTP {format_listen_addr(self.http_address)}" if self.http_address else ""

    async def sample_once(self) -> None:
        """One history round: every node's /stats (no clients) into the History."""
        producers, _ = await self.cluster.producers()
        rows, _, _ = await self.cluster.stats(producers, "", "", False)
        self.history.record(time.time(), history_samples(rows))

    async def _sample_loop(self) -> None:
        interval = self.opts.sample_interval_ms / 1000
        while True:
            started = time.monotonic()
            try:
                await self.sample_once()
            except UpstreamError as e:
                log.warning("history sample: %s", e)
            except Exception:  # the sampler must outlive any one bad answer
                log.exception("history sample failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def stop(self) -> None:
        """Stop the sampler and the notifier, close the listener and the client session."""
        await cancel_and_wait([self._sampler])
        self._sampler = None
        if self.notifier is not None:
            await self.notifier.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.client is not None:
            await self.client.close()
