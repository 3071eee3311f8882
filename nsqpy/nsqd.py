# NSQD: the core owner.
#
# Strategy: one object owns the topics, the GUID factory, the connected clients and the
# health string, and starts the TCP listener, the HTTP API and the queue-scan loop on one event
# loop. Transports call into it; it never reaches into a socket itself. Topic and channel
# creation and deletion bump ``channels_version`` so the queue scanner refreshes its sample set.
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

from .channel import Channel
from .guid import GUIDFactory
from .message import Message
from .options import Options
from .queue_scan import QueueScanner
from .topic import Topic, TopicError

log = logging.getLogger("nsqpy")


def _split_host_port(addr: str) -> tuple[str, int]:
    """Go's net.SplitHostPort for "host:port", "[v6]:port" and ":port"."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError(f"address {addr}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def format_addr(sockname: tuple) -> str:
    """A listener address as Go prints it: 127.0.0.1:4150, [::]:4150."""
    host, port = sockname[0], sockname[1]
    if host in ("0.0.0.0", "::"):
        return f"[::]:{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class NSQD:
    """The daemon's state: ``topics`` by name, ``clients`` by id, options, health."""

    def __init__(self, opts: Options) -> None:
        opts.validate()
        self.opts = opts
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, object] = {}
        self.guid = GUIDFactory(opts.node_id)
        self.start_time = int(time.time())
        self.channels_version = 0
        self._client_seq = 0
        self._health_error: str | None = None
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http_runner: object | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self.scanner = QueueScanner(opts, self.channels, lambda: self.channels_version)

    # ------------------------------------------------------------ health

    @property
    def health(self) -> str:
        """ "OK" or "NOK - <error>", as nsqd's GetHealth."""
        return "OK" if self._health_error is None else f"NOK - {self._health_error}"

    def is_healthy(self) -> bool:
        return self._health_error is None

    def set_health(self, err: Exception | None) -> None:
        self._health_error = None if err is None else str(err)

    # ------------------------------------------------------------ clients

    def next_client_id(self) -> int:
        self._client_seq += 1
        return self._client_seq

    def add_client(self, client: object) -> None:
        self.clients[client.client_id] = client  # type: ignore[attr-defined]

    def remove_client(self, client: object) -> None:
        self.clients.pop(client.client_id, None)  # type: ignore[attr-defined]

    # ------------------------------------------------------------ messages, topics, channels

    def new_message(self, body: bytes) -> Message:
        """A new Message with a fresh ID, stamped now (Unix ns)."""
        return Message(self.guid.new_id(), body, time.time_ns())

    def get_topic(self, name: str) -> Topic:
        """The topic ``name``, created if needed (the name must already be valid)."""
        t = self.topics.get(name)
        if t is None:
            t = Topic(name, self._new_channel, self._channels_changed, self._ephemeral_topic_gone)
            self.topics[name] = t
            log.info("TOPIC(%s): created", name)
        return t

    def get_existing_topic(self, name: str) -> Topic:
        t = self.topics.get(name)
        if t is None:
            raise TopicError("topic does not exist")
        return t

    def delete_existing_topic(self, name: str) -> None:
        t = self.topics.pop(name, None)
        if t is None:
            raise TopicError("topic does not exist")
        log.info("TOPIC(%s): deleting", name)
        t.close()

    def channels(self) -> list[Channel]:
        return [c for t in self.topics.values() for c in t.channels.values()]

    def iter_topics(self) -> Iterator[Topic]:
        return iter(sorted(self.topics.values(), key=lambda t: t.name))

    def _new_channel(self, topic: Topic, name: str) -> Channel:
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        return Channel(
            topic.name,
            name,
            max_msg_timeout_ms=self.opts.max_msg_timeout_ms,
            on_last_client_gone=self._ephemeral_channel_gone,
        )

    def _channels_changed(self) -> None:
        self.channels_version += 1

    def _ephemeral_channel_gone(self, ch: Channel) -> None:
        t = self.topics.get(ch.topic_name)
        if t is not None and t.channels.get(ch.name) is ch:
            log.info("TOPIC(%s): deleting channel %s", t.name, ch.name)
            t.delete_existing_channel(ch.name)

    def _ephemeral_topic_gone(self, t: Topic) -> None:
        if self.topics.get(t.name) is t:
            self.delete_existing_topic(t.name)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen on --tcp-address and --http-address and start the queue-scan loop.

        Raises OSError (with nsqd's "listen (addr) failed - ..." text) when a port is taken.
        """
        from .http_api import start_http
        from .protocol_v2 import ClientV2

        loop = asyncio.get_running_loop()
        host, port = _split_host_port(self.opts.tcp_address)
        try:
            self._tcp_server = await loop.create_server(
                lambda: ClientV2(self), host or None, port, reuse_address=True, backlog=1024
            )
        except OSError as e:
            raise OSError(f"listen ({self.opts.tcp_address}) failed - {e}") from e
        sock = self._tcp_server.sockets[0].getsockname()
        self.tcp_address = (sock[0], sock[1])
        log.info("TCP: listening on %s", format_addr(sock))

        host, port = _split_host_port(self.opts.http_address)
        try:
            self._http_runner, sock = await start_http(self, host or None, port)
        except OSError as e:
            raise OSError(f"listen ({self.opts.http_address}) failed - {e}") from e
        self.http_address = (sock[0], sock[1])
        log.info("HTTP: listening on %s", format_addr(sock))

        self._scan_task = asyncio.create_task(self.scanner.run())

    async def stop(self) -> None:
        """Stop accepting, close every client, stop the loops (SIGTERM/SIGINT)."""
        log.info("NSQ: closing topics")
        if self._tcp_server is not None:
            self._tcp_server.close()
            if self.tcp_address is not None:
                log.info("TCP: closing %s", format_addr(self.tcp_address))
        for c in list(self.clients.values()):
            c.close()  # type: ignore[attr-defined]
        if self._scan_task is not None:
            self._scan_task.cancel()
            try:
                await self._scan_task
            except asyncio.CancelledError:
                pass
        if self._http_runner is not None:
            await self._http_runner.cleanup()  # type: ignore[attr-defined]
        log.info("NSQ: bye")
