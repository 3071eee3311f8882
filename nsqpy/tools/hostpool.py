"""go-hostpool's standard pool, as nsq_to_nsq and nsq_to_http use it for ``--mode hostpool``.

Strategy: round robin over the hosts that are not marked dead; a host marked failed is dead
and skipped until its retry time (30 s, doubling at each retry up to 900 s), when it is handed
out once more to be tried; when every host is dead, all are reset and the first is used.
Success marks a host alive. Source: github.com/bitly/go-hostpool (hostpool.go, host_entry.go).
``epsilon-greedy`` (go-hostpool's latency-weighted pool) is served by this pool too."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

INITIAL_RETRY_DELAY = 30.0
MAX_RETRY_INTERVAL = 900.0


@dataclass
class _Host:
    host: str
    dead: bool = False
    next_retry: float = 0.0
    retry_delay: float = 0.0


class HostPool:
    """``get()`` the next host; ``mark(host, ok)`` after using it. ``clock`` in seconds."""

    def __init__(self, hosts: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        if not hosts:
            raise ValueError("a host pool needs hosts")
        self._hosts = [_Host(h) for h in hosts]
        self._by_name = {h.host: h for h in self._hosts}
        self._next = 0
        self._clock = clock

    def get(self) -> str:
        now = self._clock()
        n = len(self._hosts)
        for i in range(n):
            idx = (i + self._next) % n
            h = self._hosts[idx]
            if not h.dead:
                self._next = idx + 1
                return h.host
            if h.next_retry < now:
                h.retry_delay = min(h.retry_delay * 2, MAX_RETRY_INTERVAL)
                h.next_retry = now + h.retry_delay
                self._next = idx + 1
                return h.host
        for h in self._hosts:
            h.dead = False
        self._next = 0
        return self._hosts[0].host

    def mark(self, host: str, ok: bool) -> None:
        h = self._by_name.get(host)
        if h is None:
            return
        if ok:
            h.dead = False
        elif not h.dead:
            h.dead = True
            h.retry_delay = INITIAL_RETRY_DELAY
            h.next_retry = self._clock() + INITIAL_RETRY_DELAY
