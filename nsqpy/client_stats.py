"""A V2 client as /stats and /message see it: one typed record and the Client protocol.

Strategy: as nsqd's ClientV2.Stats returns a ClientStats value, a client answers ``stats()``
with a ClientStats record (a snapshot of its counters and identity), which stats.py turns into
nsqd's JSON and message_lookup.py into a message's "client" field; neither reads a client's
attributes. This module imports nothing of the daemon, so every side can import it. The record
is an immutable named tuple: a dataclass of as many fields costs the daemon's start-up a
millisecond of generated code."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class ClientStats(NamedTuple):
    """One client's stats (nsqd/client_v2.go ClientStats; the JSON names are stats.py's).

    ``client_id`` is the daemon's numeric id, ``client_name`` IDENTIFY's client_id (the JSON's
    "client_id"); ``state`` nsqd's numbering (protocol_v2.STATE_*); ``codec`` "snappy",
    "deflate" or ""; ``connect_ts`` Unix seconds; ``pub_counts`` messages published per topic
    (the client's own dict: read it, do not keep it)."""

    client_id: int
    client_name: str
    hostname: str
    remote_address: str
    user_agent: str
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_ts: int
    sample_rate: int
    codec: str
    authed: bool
    auth_identity: str
    auth_identity_url: str
    pub_counts: dict[str, int]
    tls: bool
    tls_version: str
    tls_cipher_suite: str


class Client(Protocol):
    """What the daemon's registry and its readers need of a client (client_v2.Connection)."""

    client_id: int

    def stats(self) -> ClientStats:
        """A snapshot of this client's stats."""
        ...
