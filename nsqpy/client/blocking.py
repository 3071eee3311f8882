"""Blocking wrappers for threads (Spark executors, the Go-style command-line tools).

Strategy: each wrapper owns one event loop (uvloop when installed) running in a daemon thread;
every call is ``asyncio.run_coroutine_threadsafe`` plus a bounded wait, so no call blocks
longer than its ``timeout`` (TimeoutError then, the coroutine cancelled). The consumer is
pull-style: its handler, inline on the loop, turns auto-response off and hands each message
to a ``queue.Queue``; the calling thread takes them with :meth:`BlockingConsumer.get` and
answers with ``msg.finish()`` / ``requeue()`` / ``touch()``, which are safe from any thread (the
connection moves the write onto its loop). RDY still bounds what waits in the queue:
max_in_flight messages at most."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, Self, TypeVar

from .config import Config
from .consumer import Consumer, ConsumerStats
from .message import Message
from .producer import Producer, ProducerPool

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()


class _LoopThread:
    """An event loop running in a daemon thread until close()."""

    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self._closing = False
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._closing

    def close(self) -> None:
        self._closing = True
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()

    def run_then_close(self, coro: Coroutine[Any, Any, Any], timeout: float) -> None:
        """run(``coro``, ``timeout``), then close(), also when the run raised."""
        try:
            self.run(coro, timeout)
        finally:
            self.close()


class _StopOnExit:
    """``with wrapper:`` returns the wrapper and calls its stop() on the way out."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BlockingProducer(_StopOnExit):
    """A :class:`~nsqpy.client.Producer` (one address) or
    :class:`~nsqpy.client.ProducerPool` (a list) for threads: the same methods, blocking, each
    bounded by ``timeout`` seconds (TimeoutError) and raising what the async ones raise.
    Thread-safe; a context manager (``stop()`` at exit)."""

    def __init__(
        self, addr: str | Sequence[str], config: Config | None = None, timeout: float = 10.0
    ) -> None:
        self.timeout = timeout
        self._lt = _LoopThread("nsqpy-producer")
        self._p: Producer | ProducerPool = (
            Producer(addr, config) if isinstance(addr, str) else ProducerPool(addr, config)
        )

    def publish(self, topic: str, body: bytes) -> None:
        """PUB; see Producer.publish."""
        self._lt.run(self._p.publish(topic, body), self.timeout)

    def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB; see Producer.multi_publish."""
        self._lt.run(self._p.multi_publish(topic, bodies), self.timeout)

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB (``delay`` in seconds); see Producer.deferred_publish."""
        self._lt.run(self._p.deferred_publish(topic, delay, body), self.timeout)

    def ping(self) -> None:
        """Connect if needed (a single Producer only)."""
        if isinstance(self._p, Producer):
            self._lt.run(self._p.ping(), self.timeout)

    def stop(self) -> None:
        """Close the connections and the loop thread; a no-op once done."""
        if self._lt.closed:
            return
        self._lt.run_then_close(self._p.stop(), self.timeout)


class BlockingConsumer(_StopOnExit):
    """A :class:`~nsqpy.client.Consumer` for threads, pull-style: connect, then ``get()``
    messages and answer each (``finish()``, ``requeue(delay)``, ``touch()``) from any thread.
    Every call is bounded by ``timeout`` seconds (TimeoutError) and raises what the async
    one raises. A context manager (``stop()`` at exit)."""

    def __init__(
        self, topic: str, channel: str, config: Config | None = None, timeout: float = 10.0
    ) -> None:
        self.timeout = timeout
        self._q: queue.Queue[Message] = queue.Queue()
        self._lt = _LoopThread("nsqpy-consumer")
        self.consumer = Consumer(topic, channel, config)
        self.consumer.add_handler(self._take)

    def _take(self, msg: Message) -> None:
        msg.disable_auto_response()
        self._q.put(msg)

    def connect_to_nsqd(self, addr: str) -> None:
        """See Consumer.connect_to_nsqd."""
        self._lt.run(self.consumer.connect_to_nsqd(addr), self.timeout)

    def connect_to_nsqds(self, addrs: Sequence[str]) -> None:
        """See Consumer.connect_to_nsqds."""
        self._lt.run(self.consumer.connect_to_nsqds(addrs), self.timeout)

    def connect_to_lookupd(self, addr: str) -> None:
        """See Consumer.connect_to_lookupd."""
        self._lt.run(self.consumer.connect_to_lookupd(addr), self.timeout)

    def connect_to_lookupds(self, addrs: Sequence[str]) -> None:
        """See Consumer.connect_to_lookupds."""
        self._lt.run(self.consumer.connect_to_lookupds(addrs), self.timeout)

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, or None when none came within ``timeout`` s (default: the
        wrapper's timeout). The caller must answer it."""
        try:
            return self._q.get(timeout=self.timeout if timeout is None else timeout)
        except queue.Empty:
            return None

    def messages(self, idle: float = 1.0) -> Iterator[Message]:
        """Yield messages until none comes for ``idle`` seconds."""
        while True:
            m = self.get(idle)
            if m is None:
                return
            yield m

    def stats(self) -> ConsumerStats:
        """See Consumer.stats."""

        async def get() -> ConsumerStats:
            return self.consumer.stats()

        return self._lt.run(get(), self.timeout)

    def stop(self, timeout: float | None = None) -> None:
        """CLS, requeue the messages not taken, wait until those taken are answered (at most
        ``timeout`` s, default the wrapper's), close, end the loop thread; a no-op once
        done."""
        if self._lt.closed:
            return
        t = self.timeout if timeout is None else timeout
        while True:  # messages nobody took go back now, without backoff
            try:
                self._q.get_nowait().requeue(0, backoff=False)
            except queue.Empty:
                break
        self._lt.run_then_close(self.consumer.stop(t), t + 5)
