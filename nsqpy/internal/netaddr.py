"""Network addresses as NSQ's Go daemons write and read them.

Strategy: one owner for "host:port" in both directions, shared by nsqd, nsqlookupd, statsd and
the lookup peer, nsqpy-admin and the Spark connector: Go's net.SplitHostPort rules for reading
("host:port", "[v6]:port", ":port"), net.JoinHostPort's for writing ("[v6]:port"), and the way
nsqd's logs print a bound listener ("127.0.0.1:4150", "[::]:4150"). Nothing else in nsqpy joins
or splits an address by hand."""

from __future__ import annotations

from typing import Any


def split_host_port(addr: str) -> tuple[str, int]:
    """Go's net.SplitHostPort for ``host:port``, ``[v6]:port`` and ``:port``.

    Returns (host without brackets, port). Raises ValueError with Go's wording when the port is
    missing ("address X: missing port in address") or not a number.
    """
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError(f"address {addr}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"address {addr}: too many colons in address")
    try:
        return host, int(port)
    except ValueError:
        raise ValueError(f"address {addr}: invalid port") from None


def is_unix_address(addr: str) -> bool:
    """nsqd's util.TypeOfAddr: a listen address that Go's net.SplitHostPort refuses (no
    colon, a colon inside an unbracketed host, an unmatched bracket) is a unix socket path;
    any other is TCP (even with a bad port, which listening then refuses)."""
    host, sep, _ = addr.rpartition(":")
    if not sep:
        return True
    if host.startswith("["):
        return not host.endswith("]") or "[" in host[1:] or "]" in host[:-1]
    return ":" in host or "[" in host or "]" in host


def join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: ``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def dial_address(host: str, port: int) -> str:
    """An address to connect to from a host NSQ reported (a broadcast address): as
    join_host_port, but a host already in brackets (``[::1]``) is kept as it is."""
    if host.startswith("[") and host.endswith("]"):
        return f"{host}:{port}"
    return join_host_port(host, port)


def split_host_port_lenient(addr: str) -> tuple[str, int]:
    """split_host_port as Go code that ignores its error reads it: ("", 0) for an address
    net.SplitHostPort refuses (nsqadmin's fallback for an nsqd without a broadcast address)."""
    try:
        return split_host_port(addr)
    except ValueError:
        return "", 0


def format_listen_addr(sockname: tuple[Any, ...]) -> str:
    """A bound listener's address as nsqd's startup line prints it: ``127.0.0.1:4150``, and
    ``[::]:4150`` for a wildcard (IPv4 or IPv6) listener."""
    host, port = sockname[0], sockname[1]
    if host in ("0.0.0.0", "::"):
        return f"[::]:{port}"
    return join_host_port(host, port)
