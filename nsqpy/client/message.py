"""A message as a consumer's handler sees it, and its answer to nsqd (FIN, REQ, TOUCH).

Strategy: a small ``__slots__`` object per delivered message holding the frame's parts (ID,
body, attempts, timestamp) and its connection; answering goes through the connection (one
buffered write per loop pass) and at most once (go-nsq message.go: a second FIN or REQ is a
no-op). Methods may be called from any thread: the connection moves the write onto its
event loop.

Source: go-nsq message.go (v1.1)."""

from __future__ import annotations

from typing import Any, Protocol

from .config import Config

_FIN, _REQ, _TOUCH = 0, 1, 2


class Responder(Protocol):
    """What a message needs of its connection (conn.Conn is one)."""

    addr: str
    config: Config

    @property
    def is_open(self) -> bool: ...

    def respond(
        self, msg: Message, kind: int, delay_ms: int = 0, backoff: bool = False
    ) -> None: ...


class Message:
    """One message from nsqd: ``id`` (16 ASCII hex bytes), ``body`` (bytes), ``attempts``
    (deliveries so far, 1 on the first), ``timestamp`` (publish time, Unix ns),
    ``nsqd_address`` ("host:port" of the nsqd it came from).

    With auto response on (the default), the consumer FINs the message when the handler
    returns (None, True, anything but False) and REQs it (with backoff) when the handler
    returns False or raises; ``enable_async()`` (alias ``disable_auto_response()``) hands that
    to the handler, which must then call ``finish()`` or ``requeue()`` before nsqd's
    msg_timeout (or ``touch()`` to extend it), from any thread."""

    __slots__ = (
        "_auto",
        "_conn",
        "_responded",
        "_touch_timer",
        "attempts",
        "body",
        "id",
        "timestamp",
    )

    def __init__(self, msg_id: bytes, body: bytes, attempts: int, timestamp: int, conn: Responder):
        self.id = msg_id
        self.body = body
        self.attempts = attempts
        self.timestamp = timestamp
        self._conn = conn
        self._responded = False
        self._auto = True
        self._touch_timer: Any = None

    @property
    def nsqd_address(self) -> str:
        return self._conn.addr

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, attempts={self.attempts}, body={self.body[:40]!r})"

    def disable_auto_response(self) -> None:
        """The handler answers this message itself (finish/requeue), maybe after returning."""
        self._auto = False

    def enable_async(self) -> None:
        """pynsq's and gnsq's name for :meth:`disable_auto_response`: the handler's return
        (or raise) no longer answers; finish(), requeue() or touch() must."""
        self._auto = False

    def is_auto_response_disabled(self) -> bool:
        return not self._auto

    def is_async(self) -> bool:
        """pynsq's name for :meth:`is_auto_response_disabled`."""
        return not self._auto

    def has_responded(self) -> bool:
        """Whether finish() or requeue() was called (or the consumer answered for the
        handler)."""
        return self._responded

    def finish(self) -> None:
        """Send FIN: nsqd forgets the message. A no-op after the first finish/requeue."""
        if self._responded:
            return
        self._responded = True
        self._conn.respond(self, _FIN)

    def requeue(self, delay: float | None = None, backoff: bool = True) -> None:
        """Send REQ: nsqd delivers the message again after ``delay`` seconds. ``None`` means
        go-nsq's default: default_requeue_delay × attempts, capped at max_requeue_delay.
        ``backoff`` (go-nsq's Requeue vs RequeueWithoutBackoff) tells the consumer to back
        off (see Consumer). A no-op after the first finish/requeue."""
        if self._responded:
            return
        self._responded = True
        cfg = self._conn.config
        if delay is None or delay < 0:
            delay = min(cfg.default_requeue_delay * self.attempts, cfg.max_requeue_delay)
        self._conn.respond(self, _REQ, int(delay * 1000), backoff)

    def touch(self) -> None:
        """Send TOUCH: nsqd restarts the message's timeout. A no-op once answered."""
        if self._responded:
            return
        self._conn.respond(self, _TOUCH)
