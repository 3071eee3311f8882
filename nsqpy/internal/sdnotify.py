"""The service manager's notification protocol (systemd's sd_notify), for every nsqpy daemon.

Strategy: a supervisor that starts a daemon with ``$NOTIFY_SOCKET`` set (systemd with
``Type=notify``) learns its state from datagrams of ``KEY=VALUE`` lines sent to that
AF_UNIX datagram socket (a name starting with ``@`` is an abstract socket: a NUL byte in
its place). internal/daemon.py sends ``READY=1`` with a ``STATUS=`` line once the daemon's
listeners accept connections, ``STOPPING=1`` when a signal asks it to stop, and, when
``$WATCHDOG_USEC`` is set (and ``$WATCHDOG_PID``, if set, is this process), ``WATCHDOG=1``
every half of that period from a timer on the event loop, so a loop that stops turning stops
the pings and the supervisor restarts the daemon. Without ``$NOTIFY_SOCKET`` every call does
nothing. A send that fails (the supervisor went away) is dropped: notification is never a
reason for the daemon to stop. No libsystemd: the protocol is one ``sendto`` per state
change. Sources: systemd's sd_notify(3), sd_watchdog_enabled(3), systemd.service(5)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping


def socket_address(name: str) -> str | bytes:
    """The address ``$NOTIFY_SOCKET`` names: a path as it is, ``@name`` as the abstract
    socket ``b"\\0name"``."""
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    return name


def watchdog_period(env: Mapping[str, str], pid: int) -> float | None:
    """The watchdog period in seconds from ``$WATCHDOG_USEC`` (microseconds), or None when no
    watchdog is asked for: unset, not a positive integer, or ``$WATCHDOG_PID`` names another
    process (sd_watchdog_enabled's rules)."""
    usec = env.get("WATCHDOG_USEC", "")
    try:
        period = int(usec)
    except ValueError:
        return None
    if period <= 0:
        return None
    owner = env.get("WATCHDOG_PID", "")
    if owner:
        try:
            if int(owner) != pid:
                return None
        except ValueError:
            return None
    return period / 1e6


class Notifier:
    """One process's link to its supervisor (see the module docstring).

    ``env`` defaults to the process environment. ``enabled`` is False without
    ``$NOTIFY_SOCKET``; ``watchdog_s`` is the period asked for, or None."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        name = env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = socket_address(name) if name else None
        self._sock: socket.socket | None = None
        self.watchdog_s = watchdog_period(env, os.getpid()) if name else None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, *lines: str) -> bool:
        """Send ``lines`` (``"READY=1"``, ``"STATUS=..."``) as one datagram; True when it was
        sent, False without a supervisor or when the send failed."""
        if self._address is None:
            return False
        data = "\n".join(lines).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(data, self._address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        """``READY=1`` and ``STATUS=<status>`` (one line: newlines become spaces)."""
        return self.send("READY=1", "STATUS=" + " ".join(status.splitlines()))

    def status(self, status: str) -> bool:
        """``STATUS=<status>`` alone."""
        return self.send("STATUS=" + " ".join(status.splitlines()))

    def stopping(self, status: str = "stopping") -> bool:
        """``STOPPING=1`` and ``STATUS=<status>``."""
        return self.send("STOPPING=1", "STATUS=" + " ".join(status.splitlines()))

    def start_watchdog(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send ``WATCHDOG=1`` now and every half of the watchdog period from ``loop`` until
        stop_watchdog(); nothing when no watchdog is asked for."""
        if self.watchdog_s is None or self._timer is not None:
            return
        interval = self.watchdog_s / 2

        def ping() -> None:
            self.send("WATCHDOG=1")
            self._timer = loop.call_later(interval, ping)

        ping()

    def stop_watchdog(self) -> None:
        """Stop the pings (the supervisor stops watching once told STOPPING=1)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """Stop the pings and close the socket."""
        self.stop_watchdog()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
