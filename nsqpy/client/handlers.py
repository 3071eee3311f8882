"""Running a consumer's handlers: the handler contract, where each handler runs, giving up.

Strategy: one :class:`HandlerRunner` per ``Consumer.add_handler`` call. The contract is the same
wherever the handler runs, and safe for the habits of every NSQ client:

- returning ``None`` or ``True`` (or anything else but ``False``) FINs the message (go-nsq,
  gnsq: a handler that returns normally succeeded);
- returning ``False`` REQs it with backoff (pynsq's Reader);
- raising REQs it with backoff (go-nsq's returned error, gnsq, pynsq), the error logged;
- after ``message.enable_async()`` (go-nsq's DisableAutoResponse) none of that happens: the
  handler, or whoever it hands the message to, calls ``finish()``, ``requeue()`` or
  ``touch()``, from any thread;
- a message delivered more than ``max_attempts`` times (0: never) is not given to the handler:
  ``giving_up(message)`` runs (go-nsq's LogFailedMessage, pynsq's giving_up, gnsq's
  on_giving_up), then the message is FINed (unless the hook answered it or called
  enable_async()). The check is go-nsq's shouldFailMessage: ``attempts > max_attempts``.

Where a handler runs (``concurrency`` as given to add_handler):

- a coroutine function: ``concurrency`` (default 1) tasks on the consumer's loop;
- a plain function with ``concurrency=N``: N worker threads (a ThreadPoolExecutor of N), so a
  handler that blocks (I/O, a database, ``time.sleep``) never holds the event loop, which
  keeps answering heartbeats, sending RDY and writing FINs meanwhile;
- a plain function without ``concurrency``: called inline on the event loop as frames are
  parsed (no queue, no thread: the fastest path, for handlers that do not block). One that
  runs longer than a quarter of the heartbeat interval is logged once, pointing at
  ``concurrency``.

Messages reach the workers through one asyncio.Queue shared by every handler of the consumer,
as go-nsq's handler goroutines share one channel; answers are written on the loop's thread.

Source: go-nsq consumer.go (handlerLoop, shouldFailMessage), pynsq reader.py
(_handle_message, giving_up), gnsq consumer.py (handle_message, on_giving_up)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Callable
from time import monotonic
from typing import Any

from .config import Config
from .message import Message

log = logging.getLogger("nsqpy.client")

#: A handler: called with each Message; a plain function or a coroutine function.
Handler = Callable[[Message], Any]
#: A giving_up hook: called with a Message delivered more than max_attempts times.
GivingUp = Callable[[Message], Any]


def is_coroutine_function(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def`` function, a partial of one,
    or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


class HandlerRunner:
    """One handler of a consumer: ``handler`` run as the module docstring says, ``concurrency``
    (None: inline for a plain function, 1 task for a coroutine function; N: N threads or N
    tasks), ``giving_up`` (sync or async, or None), ``config`` the consumer's (max_attempts is
    read at each message, heartbeat_interval here, for the slow inline call warning)."""

    def __init__(
        self,
        handler: Handler,
        concurrency: int | None,
        giving_up: GivingUp | None,
        config: Config,
    ) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency {concurrency} < 1")
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if giving_up is not None and not callable(giving_up):
            raise TypeError(f"giving_up must be callable, not {type(giving_up).__name__}")
        self.handler = handler
        self.giving_up = giving_up
        self.config = config
        self.is_async = is_coroutine_function(handler)
        self.threads = not self.is_async and concurrency is not None
        self.concurrency = concurrency or 1
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        hb = config.heartbeat_interval
        #: an inline call longer than this (s) is logged, once
        self._slow_after = hb / 4 if hb > 0 else 1.0

    @property
    def can_run_inline(self) -> bool:
        """A plain function added without ``concurrency``."""
        return not self.is_async and not self.threads

    # ------------------------------------------------------------------ the contract

    def gives_up(self, msg: Message) -> bool:
        """go-nsq's shouldFailMessage: max_attempts > 0 and attempts > max_attempts."""
        n = self.config.max_attempts
        return n > 0 and msg.attempts > n

    def answer(self, msg: Message, result: Any) -> None:
        """Auto response for a handler that returned ``result``: False REQs (with backoff),
        anything else FINs; nothing once answered or after enable_async()."""
        if msg._responded or not msg._auto:
            return
        if result is False:
            msg.requeue()
        else:
            msg.finish()

    def failed(self, msg: Message, err: BaseException) -> None:
        """Auto response for a handler that raised: REQ with backoff, the error logged."""
        log.error("handler returned error (%r) for msg %s", err, msg.id.decode())
        if not msg._responded and msg._auto:
            msg.requeue()

    def _log_giving_up(self, msg: Message) -> None:
        log.warning("msg %s attempted %d times, giving up", msg.id.decode(), msg.attempts)

    def _after_giving_up(self, msg: Message) -> None:
        if not msg._responded and msg._auto:
            msg.finish()

    async def give_up(self, msg: Message) -> None:
        """Run giving_up (in a thread for a threaded handler's plain hook), then FIN."""
        self._log_giving_up(msg)
        hook = self.giving_up
        if hook is not None:
            try:
                if self.threads and not is_coroutine_function(hook):
                    r = await asyncio.get_running_loop().run_in_executor(self._pool, hook, msg)
                else:
                    r = hook(msg)
                if inspect.isawaitable(r):
                    await r
            except Exception:
                log.exception("giving_up hook failed for msg %s", msg.id.decode())
        self._after_giving_up(msg)

    # ------------------------------------------------------------------ inline

    def run_inline(self, msg: Message) -> None:
        """Run a plain handler now, on the loop (see can_run_inline)."""
        n = self.config.max_attempts
        if n and msg.attempts > n:
            self._give_up_inline(msg)
            return
        t0 = monotonic()
        try:
            r = self.handler(msg)
        except Exception as e:
            self.failed(msg, e)
            return
        if monotonic() - t0 > self._slow_after:
            self._warn_slow(monotonic() - t0)
        if r is None or r is True:  # the common case, answered without further checks
            if msg._auto and not msg._responded:
                msg.finish()
            return
        if inspect.isawaitable(r):  # e.g. a lambda calling an async function
            self._track(self._await_then(r, msg, None))
            return
        self.answer(msg, r)

    def _give_up_inline(self, msg: Message) -> None:
        hook = self.giving_up
        if hook is not None and is_coroutine_function(hook):
            self._track(self.give_up(msg))
            return
        self._log_giving_up(msg)
        if hook is not None:
            try:
                r = hook(msg)
            except Exception:
                log.exception("giving_up hook failed for msg %s", msg.id.decode())
            else:
                if inspect.isawaitable(r):  # a plain function that made a coroutine
                    self._track(self._await_then(r, msg, self._after_giving_up))
                    return
        self._after_giving_up(msg)

    async def _await_then(
        self, aw: Any, msg: Message, then: Callable[[Message], None] | None
    ) -> None:
        try:
            r = await aw
        except Exception as e:
            if then is None:
                self.failed(msg, e)
            else:
                log.exception("giving_up hook failed for msg %s", msg.id.decode())
                then(msg)
            return
        if then is None:
            self.answer(msg, r)
        else:
            then(msg)

    def _track(self, coro: Any) -> None:
        t: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _warn_slow(self, took: float) -> None:
        self._slow_after = float("inf")  # once
        log.warning(
            "handler %r held the event loop for %.3f s (heartbeats, RDY and FIN wait "
            "meanwhile): add it with add_handler(fn, concurrency=N) to run it in N threads",
            self.handler,
            took,
        )

    # ------------------------------------------------------------------ workers

    def start(self, queue: asyncio.Queue[Message | None]) -> None:
        """Start the workers (tasks; with threads, each task hands messages to the pool)."""
        if self.threads:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix="nsqpy-handler"
            )
        for _ in range(self.concurrency):
            self._workers.append(asyncio.ensure_future(self._worker(queue)))

    async def _worker(self, queue: asyncio.Queue[Message | None]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            msg = await queue.get()
            if msg is None:
                return
            if self.gives_up(msg):
                await self.give_up(msg)
                continue
            try:
                if self._pool is not None:
                    r = await loop.run_in_executor(self._pool, self.handler, msg)
                else:
                    r = self.handler(msg)
                if inspect.isawaitable(r):
                    r = await r
            except Exception as e:
                self.failed(msg, e)
                continue
            self.answer(msg, r)

    @property
    def workers(self) -> int:
        """How many worker tasks this handler has (0 inline)."""
        return len(self._workers)

    async def stop(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the workers (each ends at the None the consumer puts
        in the queue per worker) and the inline handlers' pending coroutines, then cancel
        what is left and let the thread pool go (threads still in a handler finish on their
        own; their answers go nowhere once the connection is closed)."""
        pending = [*self._workers, *self._tasks]
        if pending:
            await asyncio.wait(pending, timeout=max(0.1, timeout))
        for t in pending:
            t.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
