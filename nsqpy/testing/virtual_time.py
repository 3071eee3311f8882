"""An asyncio event loop with a virtual clock and an in-process network, for unit tests of
asyncio code whose behaviour is timed (heartbeats, deadlines, reconnects).

Strategy: the code under test keeps its ordinary asyncio calls (``loop.time()``,
``asyncio.sleep``, ``asyncio.wait_for``, ``asyncio.open_connection``) and runs on
VirtualTimeLoop instead of the default loop. Its clock starts at 0.0 and moves only when the
loop has nothing to run and no I/O is ready: it then jumps straight to the next timer, so 15 s
of timers pass in microseconds and always in the same order. Connections go to handlers
registered with ``serve(host, port, handler)``: each connection is a socketpair (no port is
bound, nothing leaves the process), whose far end the handler gets as an asyncio
(StreamReader, StreamWriter) pair. An address nobody serves refuses the connection
(ConnectionRefusedError), as a closed loopback port does; ``blackhole(host, port)`` makes a
dial to it hang until its caller's deadline, as an unroutable address does.

    loop = VirtualTimeLoop()
    loop.serve("127.0.0.1", 4160, handler)   # async def handler(reader, writer)
    loop.run_until_complete(main())          # main() sees loop.time() advance without waiting
    loop.close()
"""

from __future__ import annotations

import asyncio
import selectors
import socket
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

#: Real seconds the loop may block when it has neither a timer nor ready I/O (only another
#: thread could wake it); a test that deadlocks this way fails instead of hanging.
IDLE_LIMIT_S = 5.0


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Polls without blocking; when nothing is ready, advances the loop's clock by the
    timeout the loop asked for (the time to its next timer) instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            ready = super().select(IDLE_LIMIT_S)
            if not ready:
                raise RuntimeError(f"virtual loop idle: no timer, no I/O for {IDLE_LIMIT_S}s")
            return ready
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual (seconds, from 0.0) and whose
    ``create_connection`` to a host and port reaches the in-process handlers registered with
    ``serve``. ``connections`` counts the connections each served address accepted."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0
        self._handlers: dict[tuple[str, int], Handler] = {}
        self._blackholes: set[tuple[str, int]] = set()
        self._server_tasks: set[asyncio.Task[None]] = set()
        self.connections: dict[tuple[str, int], int] = {}

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (>= 0)."""
        self._now += max(0.0, seconds)

    def serve(self, host: str, port: int, handler: Handler) -> None:
        """Connections to ``host:port`` are handed to ``handler(reader, writer)`` (its own
        task; the connection's far end)."""
        self._handlers[(host, port)] = handler
        self.connections.setdefault((host, port), 0)

    def unserve(self, host: str, port: int) -> None:
        """Connections to ``host:port`` are refused from now on."""
        self._handlers.pop((host, port), None)

    def blackhole(self, host: str, port: int) -> None:
        """Connections to ``host:port`` never complete (the caller's timeout ends them)."""
        self._blackholes.add((host, port))

    async def create_connection(  # type: ignore[override]
        self, protocol_factory: Any, host: Any = None, port: Any = None, **kw: Any
    ) -> Any:
        if kw.get("sock") is not None or host is None:
            return await super().create_connection(protocol_factory, host, port, **kw)
        key = (str(host), int(port))
        if key in self._blackholes:
            await asyncio.Event().wait()  # until cancelled by the caller's deadline
        handler = self._handlers.get(key)
        if handler is None:
            raise ConnectionRefusedError(111, f"connect call failed {key}")
        self.connections[key] += 1
        near, far = socket.socketpair()
        transport, protocol = await super().create_connection(protocol_factory, sock=near)
        reader, writer = await asyncio.open_connection(sock=far)
        task = self.create_task(self._serve_one(handler, reader, writer))
        self._server_tasks.add(task)
        task.add_done_callback(self._server_tasks.discard)
        return transport, protocol

    @staticmethod
    async def _serve_one(
        handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        for task in list(self._server_tasks):
            task.cancel()
        if self._server_tasks and not self.is_running() and not self.is_closed():
            self.run_until_complete(asyncio.wait(list(self._server_tasks), timeout=1))
        super().close()


def run_virtual(main: Callable[[VirtualTimeLoop], Awaitable[Any]]) -> Any:
    """Run ``main(loop)`` to completion on a fresh VirtualTimeLoop and close it; its result."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()
