"""The client's settings: go-nsq's Config, option for option, in Python units.

Strategy: one dataclass whose fields carry go-nsq's option names (config.go's ``opt`` tags) and
defaults; every duration is a float in **seconds** (go-nsq keeps time.Duration). Bounds are
go-nsq's ``min``/``max`` tags, checked by :meth:`Config.validate` and by :meth:`Config.set`.
``set(name, value)`` is go-nsq's Config.Set as the Go tools' ``--consumer-opt`` and
``--producer-opt`` flags use it: hyphens read as underscores, strings coerced as Go's coerce()
does (durations with time.ParseDuration's grammar, booleans with strconv.ParseBool's), and
``set_flag("name,value")`` is go-nsq's ConfigFlag (the flag value as the tools get it). TLS is
either the file options (go-nsq's tlsConfig handler: ``tls_root_ca_file``, ``tls_cert``,
``tls_key``, ``tls_insecure_skip_verify``, ``tls_min_version``) or a ready ``ssl.SSLContext``
in ``tls_context``; :meth:`Config.ssl_context` builds the context a connection uses.

Source: github.com/nsqio/go-nsq config.go (v1.1)."""

from __future__ import annotations

import dataclasses
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from ..internal.godur import parse_go_duration_ns

#: What the client says it is in IDENTIFY's user_agent (go-nsq says "go-nsq/<version>").
USER_AGENT = "nsqpy.client/1.0"

#: go-nsq's tls_min_version spellings.
_TLS_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.SSLv3,
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}

_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))

_MINUTE = 60.0


def _hostname() -> str:
    return socket.gethostname()


def parse_go_bool(text: str) -> bool:
    """Go's strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False; else
    ValueError."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"invalid syntax {text!r}")


def _dur(default: float, lo: float | None = None, hi: float | None = None, doc: str = "") -> Any:
    meta: dict[str, Any] = {"kind": "duration", "doc": doc}
    if lo is not None:
        meta["min"] = lo
    if hi is not None:
        meta["max"] = hi
    return field(default=default, metadata=meta)


def _num(default: Any, lo: Any = None, hi: Any = None) -> Any:
    meta: dict[str, Any] = {}
    if lo is not None:
        meta["min"] = lo
    if hi is not None:
        meta["max"] = hi
    return field(default=default, metadata=meta)


@dataclass
class Config:
    """Settings shared by :class:`~nsqpy.client.Producer` and :class:`~nsqpy.client.Consumer`
    (go-nsq's Config; every duration in seconds, a float).

    Connection: ``dial_timeout`` (s, 1), ``read_timeout`` (s, 60; 0.1..300: a connection that
    reads nothing for that long, heartbeats included, is dropped), ``write_timeout`` (s, 1;
    0.1..300: a write buffer that does not drain for that long drops the connection).
    Discovery: ``lookupd_poll_interval`` (s, 60; 0.01..300), ``lookupd_poll_jitter`` (fraction
    of the interval, 0.3; 0..1), ``lookupd_poll_timeout`` (s, 60).
    Requeues: ``max_requeue_delay`` (s, 900; 0..3600), ``default_requeue_delay`` (s, 90; a
    handler failure requeues after attempts × this, capped at max_requeue_delay).
    Backoff: ``backoff_multiplier`` (s, 1: level n pauses multiplier × 2**n),
    ``max_backoff_duration`` (s, 120), ``max_attempts`` (5; a message delivered more often is
    finished without its handler; 0 = no limit).
    RDY: ``max_in_flight`` (1), ``low_rdy_idle_timeout`` (s, 10: a connection idle that long
    gives up its RDY when connections outnumber max_in_flight), ``low_rdy_timeout`` (s, 30),
    ``rdy_redistribute_interval`` (s, 5; 0.001..5).
    IDENTIFY: ``client_id`` (short host name), ``hostname``, ``user_agent``,
    ``heartbeat_interval`` (s, 30; 0 or below disables, sent as -1), ``sample_rate`` (0..99),
    ``output_buffer_size`` (bytes, 16384), ``output_buffer_timeout`` (s, 0.25; 0 or below
    disables), ``msg_timeout`` (s, 0 = nsqd's own), ``tls_v1``, ``deflate``,
    ``deflate_level`` (1..9, 6), ``snappy``, ``auth_secret`` (sent in AUTH when nsqd says
    auth_required). ``max_msg_size`` (bytes, 0 = no limit: a larger frame from nsqd drops the
    connection; a producer refuses a larger body before sending it, until nsqd names its own
    limit).
    TLS: ``tls_context`` (an ssl.SSLContext used as is), else one built from
    ``tls_root_ca_file``, ``tls_cert``/``tls_key`` (client certificate),
    ``tls_insecure_skip_verify`` and ``tls_min_version`` ("tls1.0".."tls1.3").
    nsqpy's own: ``auto_touch`` (bool, False: the consumer TOUCHes every in-flight message at
    ``auto_touch_fraction`` (0.5) of the message timeout nsqd announced, until it is answered).

    Raises ValueError (from :meth:`validate`, :meth:`set`) for values out of go-nsq's bounds.
    """

    dial_timeout: float = _dur(1.0)
    read_timeout: float = _dur(60.0, 0.1, 5 * _MINUTE)
    write_timeout: float = _dur(1.0, 0.1, 5 * _MINUTE)
    lookupd_poll_interval: float = _dur(60.0, 0.01, 5 * _MINUTE)
    lookupd_poll_jitter: float = _num(0.3, 0.0, 1.0)
    lookupd_poll_timeout: float = _dur(60.0)
    max_requeue_delay: float = _dur(15 * _MINUTE, 0.0, 60 * _MINUTE)
    default_requeue_delay: float = _dur(90.0, 0.0, 60 * _MINUTE)
    backoff_multiplier: float = _dur(1.0, 0.0, 60 * _MINUTE)
    max_backoff_duration: float = _dur(2 * _MINUTE, 0.0, 60 * _MINUTE)
    max_attempts: int = _num(5, 0, 65535)
    low_rdy_idle_timeout: float = _dur(10.0, 1.0, 5 * _MINUTE)
    low_rdy_timeout: float = _dur(30.0, 1.0, 5 * _MINUTE)
    rdy_redistribute_interval: float = _dur(5.0, 0.001, 5.0)
    client_id: str = field(default_factory=lambda: _hostname().split(".")[0])
    hostname: str = field(default_factory=_hostname)
    user_agent: str = USER_AGENT
    heartbeat_interval: float = _dur(30.0)
    sample_rate: int = _num(0, 0, 99)
    tls_v1: bool = False
    tls_context: ssl.SSLContext | None = None
    tls_root_ca_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_insecure_skip_verify: bool = False
    tls_min_version: str = ""
    deflate: bool = False
    deflate_level: int = _num(6, 1, 9)
    snappy: bool = False
    output_buffer_size: int = 16384
    output_buffer_timeout: float = _dur(0.25)
    max_in_flight: int = _num(1, 0)
    msg_timeout: float = _dur(0.0, 0.0)
    max_msg_size: int = _num(0, 0)
    auth_secret: str = ""
    auto_touch: bool = False
    auto_touch_fraction: float = _num(0.5, 0.05, 0.95)

    # ------------------------------------------------------------------ go-nsq's Set

    def set(self, name: str, value: Any) -> None:
        """go-nsq's ``Config.Set(option, value)``: ``name`` with - or _ (``max-in-flight``),
        ``value`` a Python value or a string as the Go tools' ``--consumer-opt=name,value``
        give it: durations "30s"/"250ms" (time.ParseDuration; a number is seconds), booleans
        strconv.ParseBool's spellings, integers in base 10. Raises ValueError for an unknown
        option, a value that does not parse, or one outside go-nsq's bounds (the config is
        then unchanged)."""
        opt = name.strip().replace("-", "_")
        fields = {f.name: f for f in dataclasses.fields(self)}
        f = fields.get(opt)
        if f is None or opt == "tls_context":
            raise ValueError(f"invalid option {name}")
        kind = f.metadata.get("kind")
        current = getattr(self, opt)
        try:
            if isinstance(value, bool) and not isinstance(current, bool):
                raise ValueError("invalid value type")  # go-nsq's coerce refuses it too
            if kind == "duration":
                coerced: Any = _coerce_duration(value)
            elif isinstance(current, bool):
                coerced = parse_go_bool(value) if isinstance(value, str) else bool(value)
            elif isinstance(current, int):
                coerced = int(value, 10) if isinstance(value, str) else int(value)
            elif isinstance(current, float):
                coerced = float(value)
            else:
                coerced = str(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"failed to coerce option {opt} ({value!r}) - {e}") from None
        _check_bounds(opt, coerced, f.metadata)
        if opt == "tls_min_version" and coerced and coerced not in _TLS_VERSIONS:
            raise ValueError(f"ERROR: {coerced} is not a tls version")
        setattr(self, opt, coerced)

    def set_flag(self, opt: str) -> None:
        """One ``--consumer-opt``/``--producer-opt`` value of the Go tools (go-nsq's
        ConfigFlag.Set): ``"name,value"`` split at the first comma, then :meth:`set`; a bare
        ``"name"`` sets it to true. Raises ValueError as set()."""
        key, sep, value = opt.partition(",")
        self.set(key, value if sep else True)

    def validate(self) -> None:
        """Check every bounded field and that heartbeat_interval < read_timeout (go-nsq's
        Validate). Raises ValueError."""
        for f in dataclasses.fields(self):
            _check_bounds(f.name, getattr(self, f.name), f.metadata)
        if self.heartbeat_interval > self.read_timeout:
            raise ValueError(
                f"heartbeat_interval {self.heartbeat_interval}s must be less than "
                f"read_timeout {self.read_timeout}s"
            )
        if self.tls_min_version and self.tls_min_version not in _TLS_VERSIONS:
            raise ValueError(f"ERROR: {self.tls_min_version} is not a tls version")

    def copy(self) -> Config:
        """A shallow copy (the SSL context, if any, is shared)."""
        return dataclasses.replace(self)

    # ------------------------------------------------------------------ TLS

    def ssl_context(self) -> ssl.SSLContext:
        """The context for tls_v1: ``tls_context`` when given, else a client context built from
        the tls_* file options (system CAs unless tls_root_ca_file; no verification with
        tls_insecure_skip_verify, as Go's InsecureSkipVerify). Raises OSError/ssl.SSLError for
        unreadable files."""
        if self.tls_context is not None:
            return self.tls_context
        ctx = ssl.create_default_context(cafile=self.tls_root_ca_file or None)
        if self.tls_insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key or None)
        if self.tls_min_version:
            ctx.minimum_version = _TLS_VERSIONS[self.tls_min_version]
        return ctx

    # ------------------------------------------------------------------ IDENTIFY

    def identify_body(self) -> dict[str, Any]:
        """IDENTIFY's JSON fields, as go-nsq's conn.identify sends them (milliseconds on the
        wire; -1 disables heartbeats or output buffering)."""
        hb = int(self.heartbeat_interval * 1000) if self.heartbeat_interval > 0 else -1
        obt = int(self.output_buffer_timeout * 1000) if self.output_buffer_timeout > 0 else -1
        return {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "short_id": self.client_id,
            "long_id": self.hostname,
            "tls_v1": self.tls_v1,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "snappy": self.snappy,
            "feature_negotiation": True,
            "heartbeat_interval": hb,
            "sample_rate": self.sample_rate,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": obt,
            "msg_timeout": int(self.msg_timeout * 1000),
        }


def _coerce_duration(value: Any) -> float:
    if isinstance(value, str):
        return parse_go_duration_ns(value.strip()) / 1e9
    if isinstance(value, bool):
        raise ValueError("invalid value type")
    return float(value)


def _check_bounds(opt: str, value: Any, meta: Any) -> None:
    lo = meta.get("min")
    hi = meta.get("max")
    if lo is not None and value < lo:
        raise ValueError(f"invalid {opt} ! {value} < {lo}")
    if hi is not None and value > hi:
        raise ValueError(f"invalid {opt} ! {value} > {hi}")
