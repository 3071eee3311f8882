"""Why a connection is not being read: one gate with reason bits, for every server protocol.

Strategy: a connection stops reading for several independent reasons at once: its per-pass
budget is spent (go on at the loop's next turn), its peer does not read the replies
(``pause_writing``), a command waits on something slow (AUTH's query). Each reason is one bit;
the transport's ``pause_reading`` is called when the first bit is set and ``resume_reading`` when
the last one is cleared, so no reason's end can restart reading that another reason still
holds. nsqpy-d's V2 connection (client_v2.py), the HTTP server's connection
(internal/http/server.py) and nsqpy-lookupd's V1 connection (lookupd/protocol_v1.py) all read
through one.

A gate without a transport (before ``connection_made``, or after the connection is lost) only
keeps its bits. Transport errors on pause/resume (a transport already closing) are ignored: the
connection's own loss handling runs anyway.
"""

from __future__ import annotations

from typing import Protocol

#: The per-pass work budget is spent: reading resumes at the loop's next turn.
BUDGET = 1
#: The peer does not read its replies (pause_writing, or too many replies unread).
BACKPRESSURE = 2
#: A command waits on an outside answer (AUTH's query to the auth server).
SUSPENDED = 4


class Readable(Protocol):
    """The part of an asyncio transport the gate drives."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def is_closing(self) -> bool: ...


class ReadGate:
    """Reason bits over one transport's reading (see the module docstring).

    ``pause(reason)`` sets a bit and pauses the transport if it was the first;
    ``resume(reason)`` clears it and resumes the transport if it was the last. Both return the
    bits left set afterwards, so a caller can tell whether reading actually went on (0) or which
    reason still holds it.
    """

    __slots__ = ("bits", "transport")

    def __init__(self, transport: Readable | None = None) -> None:
        self.transport = transport
        #: The reasons set now (BUDGET | BACKPRESSURE | SUSPENDED); 0 means reading.
        self.bits = 0

    def attach(self, transport: Readable | None) -> None:
        """Bind (or, with None, release) the transport; a paused gate pauses the new one."""
        self.transport = transport
        if transport is not None and self.bits:
            self._call(transport.pause_reading)

    def pause(self, reason: int) -> int:
        """Set ``reason``; pause the transport if nothing held it before. Returns the bits."""
        if not self.bits and self.transport is not None:
            self._call(self.transport.pause_reading)
        self.bits |= reason
        return self.bits

    def resume(self, reason: int) -> int:
        """Clear ``reason``; resume the transport if no other reason holds it. Returns the bits
        left (0: the transport reads again)."""
        was = self.bits
        now = self.bits = was & ~reason
        if was and not now and self.transport is not None:
            self._call(self.transport.resume_reading)
        return now

    def holds(self, reason: int) -> bool:
        """Whether ``reason`` is set."""
        return bool(self.bits & reason)

    def _call(self, fn: object) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            fn()  # type: ignore[operator]
        except (RuntimeError, AttributeError):
            pass  # a transport torn down under us: its connection_lost follows
