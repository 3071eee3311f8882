"""The daemon as replication sees it: the part of nsqd.NSQD that nsqpy/replication uses, as a
Protocol (the daemon imports replication, so replication cannot import the daemon).

NSQD implements it; a test can hand a smaller object. Design notes:
docs/architecture-replication.md."""

from __future__ import annotations

from typing import Protocol

from ..lookup_peer import LookupPeers
from ..options import Options
from ..topic import Topic


class Broker(Protocol):
    """nsqd.NSQD's topics, options and publishing calls, as replication uses them."""

    @property
    def opts(self) -> Options:
        """The daemon's options (--etcd-endpoints, --replicas, --replica-ack, ...)."""
        ...

    @property
    def topics(self) -> dict[str, Topic]:
        """Topic name -> Topic, every topic this node has."""
        ...

    @property
    def data_path(self) -> str:
        """The data directory (the replica logs and progress side files live there)."""
        ...

    @property
    def lookup(self) -> LookupPeers | None:
        """nsqlookupd registration (None before the loops start)."""
        ...

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        """The bound TCP address (None on a unix socket or before binding)."""
        ...

    @property
    def http_address(self) -> tuple[str, int] | None:
        """The bound HTTP address (None on a unix socket or before binding)."""
        ...

    def get_topic(self, name: str) -> Topic:
        """The topic, made when it does not exist (nsqd's GetTopic)."""
        ...

    def delete_existing_topic(self, name: str) -> None:
        """/topic/delete's deletion. TopicError when there is no such topic."""
        ...

    def new_record(self, body: bytes) -> bytes:
        """A new message's nsqd record (fresh ID, now, 0 attempts)."""
        ...

    def new_records(self, bodies: list[bytes]) -> list[bytes]:
        """new_record for each body."""
        ...

    def flush_backends(self) -> None:
        """Hand what the backends buffered to the OS (before a publish is answered)."""
        ...
