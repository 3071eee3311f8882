"""nsqd's GET /stats?format=json as typed records, for NsqdHTTPClient.stats.

Strategy: one frozen dataclass per level of the answer (NsqdStats > TopicStats > ChannelStats
> ClientStats, with E2eLatency and PubCount), each field named as nsqd 1.3's JSON key (so the
JSON field names in NSQ's docs read straight onto the attributes). ``from_json`` takes a key
where it is present and the field's default where it is not (older nsqds, omitempty keys); a
key no field has (nsqpy-d's ``replication``, ``max_attempts``, ``dead_letter_count``, a newer
nsqd's additions) is kept in ``extra`` rather than dropped or refused. Go's JSON null for an
empty list reads as []. Source: nsqd/stats.go (TopicStats, ChannelStats, ClientV2Stats),
nsqd/http.go (doStats), internal/quantile (Result)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

R = TypeVar("R")


def _build(cls: type[R], data: Any, nested: dict[str, Any] | None = None) -> R:
    """``cls`` from the JSON object ``data``: known keys to fields (``nested`` maps a key to
    the function that reads its value), the rest to ``extra``. ValueError when ``data`` is not
    an object."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kw: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key == "extra" or key not in names:
            extra[key] = value
        elif nested and key in nested:
            kw[key] = nested[key](value)
        else:
            kw[key] = value
    kw["extra"] = extra
    return cls(**kw)


@dataclass(frozen=True)
class Percentile:
    """One tracked quantile: ``quantile`` in (0, 1], ``value`` in nanoseconds."""

    quantile: float
    value: int


@dataclass(frozen=True)
class E2eLatency:
    """``e2e_processing_latency``: ``count`` samples and the tracked ``percentiles`` (empty
    when nsqd tracks none: its --e2e-processing-latency-percentile is unset)."""

    count: int = 0
    percentiles: list[Percentile] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> E2eLatency:
        if data is None:
            return cls()
        return _build(
            cls,
            data,
            {"percentiles": lambda v: [Percentile(p["quantile"], p["value"]) for p in v or []]},
        )


@dataclass(frozen=True)
class PubCount:
    """A producer's publishes to one topic (``pub_counts`` of a client)."""

    topic: str
    count: int


@dataclass(frozen=True)
class ClientStats:
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

    @classmethod
    def from_json(cls, data: Any) -> ClientStats:
        return _build(
            cls, data, {"pub_counts": lambda v: [PubCount(p["topic"], p["count"]) for p in v or []]}
        )


@dataclass(frozen=True)
class ChannelStats:
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

    @classmethod
    def from_json(cls, data: Any) -> ChannelStats:
        return _build(
            cls,
            data,
            {
                "clients": lambda v: [ClientStats.from_json(c) for c in v or []],
                "e2e_processing_latency": E2eLatency.from_json,
            },
        )


@dataclass(frozen=True)
class TopicStats:
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

    @classmethod
    def from_json(cls, data: Any) -> TopicStats:
        return _build(
            cls,
            data,
            {
                "channels": lambda v: [ChannelStats.from_json(c) for c in v or []],
                "e2e_processing_latency": E2eLatency.from_json,
            },
        )

    def channel(self, name: str) -> ChannelStats | None:
        """The channel called ``name``, or None."""
        return next((c for c in self.channels if c.channel_name == name), None)


@dataclass(frozen=True)
class NsqdStats:
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
    def from_json(cls, data: Any) -> NsqdStats:
        """The records of a /stats?format=json answer; ValueError when it has not its shape."""
        try:
            return _build(
                cls,
                data,
                {
                    "topics": lambda v: [TopicStats.from_json(t) for t in v or []],
                    "producers": lambda v: [ClientStats.from_json(c) for c in v or []],
                },
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"not an nsqd /stats answer: {e!r}") from None

    def topic(self, name: str) -> TopicStats | None:
        """The topic called ``name``, or None."""
        return next((t for t in self.topics if t.topic_name == name), None)
