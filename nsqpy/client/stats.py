"""nsqd's GET /stats?format=json as typed records, for NsqdHTTPClient.stats.

Strategy: one frozen dataclass per level of the answer (NsqdStats > TopicStats > ChannelStats
> ClientStats, with E2eLatency and PubCount), each field named as nsqd 1.3's JSON key (so the
JSON field names in NSQ's docs read straight onto the attributes). ``from_json`` (one for all
levels) takes a key where it is present, read as the field's type says (a list of records, a
record), and the field's default where it is not (older nsqds, omitempty keys); a
key no field has (nsqpy-d's ``replication``, ``max_attempts``, ``dead_letter_count``, a newer
nsqd's additions) is kept in ``extra`` rather than dropped or refused. Go's JSON null for an
empty list reads as []. Source: nsqd/stats.go (TopicStats, ChannelStats, ClientV2Stats),
nsqd/http.go (doStats), internal/quantile (Result)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

_Reader = Callable[[Any], Any]


def _reader(hint: Any) -> _Reader | None:
    """How a field typed ``hint`` reads its JSON value: a list of records item by item (Go's
    null as []), a record with its ``from_json`` (or, for a record without ``extra``, from
    its keys, each required: KeyError), None for a plain value taken as it is."""
    if typing.get_origin(hint) is list:
        item = _reader(typing.get_args(hint)[0])
        if item is None:
            return None
        return lambda v: [item(x) for x in v or []]
    if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
        return None
    if issubclass(hint, _Record):
        return hint.from_json
    names = [f.name for f in dataclasses.fields(hint)]
    return lambda v: hint(*(v[n] for n in names))


_READERS: dict[type, dict[str, _Reader]] = {}


def _readers(cls: type) -> dict[str, _Reader]:
    """The fields of ``cls`` that hold records, each with its reader (made once per class)."""
    readers = _READERS.get(cls)
    if readers is None:
        hints = typing.get_type_hints(cls)
        found = {f.name: _reader(hints[f.name]) for f in dataclasses.fields(cls)}
        readers = _READERS[cls] = {n: read for n, read in found.items() if read is not None}
    return readers


class _Record:
    """A level of the answer: ``from_json`` reads known keys into the fields (records nested
    as the field types say) and keeps the rest in ``extra``."""

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """The record of the JSON object ``data``; ValueError when it is not an object."""
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        readers = _readers(cls)
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kw: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key == "extra" or key not in names:
                extra[key] = value
            else:
                read = readers.get(key)
                kw[key] = value if read is None else read(value)
        kw["extra"] = extra
        return cls(**kw)


@dataclass(frozen=True)
class Percentile:
    """One tracked quantile: ``quantile`` in (0, 1], ``value`` in nanoseconds."""

    quantile: float
    value: int


@dataclass(frozen=True)
class PubCount:
    """A producer's publishes to one topic (``pub_counts`` of a client)."""

    topic: str
    count: int


@dataclass(frozen=True)
class E2eLatency(_Record):
    """``e2e_processing_latency``: ``count`` samples and the tracked ``percentiles`` (empty
    when nsqd tracks none: its --e2e-processing-latency-percentile is unset)."""

    count: int = 0
    percentiles: list[Percentile] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """As every record; JSON null (nsqd's omitted latency) reads as no samples."""
        return cls() if data is None else super().from_json(data)


@dataclass(frozen=True)
class ClientStats(_Record):
    """One connection (nsqd's ClientV2Stats): a consumer under its channel, or a producer
    under ``NsqdStats.producers``. ``connect_ts`` in Unix seconds; ``state`` nsqd's number
    (3 subscribed); ``sample_rate`` in percent (0: all)."""

    client_id: str = ""
    hostname: str = ""
    version: str = ""
    remote_address: str = ""
    state: int = 0
    ready_count: int = 0
    in_flight_count: int = 0
    message_count: int = 0
    finish_count: int = 0
    requeue_count: int = 0
    connect_ts: int = 0
    sample_rate: int = 0
    deflate: bool = False
    snappy: bool = False
    user_agent: str = ""
    authed: bool = False
    auth_identity: str = ""
    auth_identity_url: str = ""
    pub_counts: list[PubCount] = field(default_factory=list)
    tls: bool = False
    tls_cipher_suite: str = ""
    tls_version: str = ""
    tls_negotiated_protocol: str = ""
    tls_negotiated_protocol_is_mutual: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChannelStats(_Record):
    """One channel of a topic. ``depth`` counts memory and disk (``backend_depth`` the disk
    part); ``clients`` is [] when /stats was asked without clients."""

    channel_name: str = ""
    depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    message_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    client_count: int = 0
    clients: list[ClientStats] = field(default_factory=list)
    paused: bool = False
    e2e_processing_latency: E2eLatency = field(default_factory=E2eLatency)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicStats(_Record):
    """One topic and its channels; ``message_bytes`` is the bodies' total size in bytes."""

    topic_name: str = ""
    channels: list[ChannelStats] = field(default_factory=list)
    depth: int = 0
    backend_depth: int = 0
    message_count: int = 0
    message_bytes: int = 0
    paused: bool = False
    e2e_processing_latency: E2eLatency = field(default_factory=E2eLatency)
    extra: dict[str, Any] = field(default_factory=dict)

    def channel(self, name: str) -> ChannelStats | None:
        """The channel called ``name``, or None."""
        return next((c for c in self.channels if c.channel_name == name), None)


@dataclass(frozen=True)
class NsqdStats(_Record):
    """The whole answer. ``start_time`` in Unix seconds; ``health`` "OK" or nsqd's reason;
    ``memory`` nsqd's memory keys (None unless asked with ``include_mem``); ``producers``
    the publishing connections ([] when asked without clients)."""

    version: str = ""
    health: str = ""
    start_time: int = 0
    topics: list[TopicStats] = field(default_factory=list)
    memory: dict[str, Any] | None = None
    producers: list[ClientStats] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """The records of a /stats?format=json answer; ValueError when it has not its shape."""
        try:
            return super().from_json(data)
        except (KeyError, TypeError) as e:
            raise ValueError(f"not an nsqd /stats answer: {e!r}") from None

    def topic(self, name: str) -> TopicStats | None:
        """The topic called ``name``, or None."""
        return next((t for t in self.topics if t.topic_name == name), None)
