"""Go's time.Duration as NSQ's daemons read and print it: one home for the three daemons,
their config files, /stats text and the Spark connector.

Strategy: parse with time.ParseDuration's grammar in exact integer arithmetic (nanoseconds,
no float rounding), and print with Duration.String's rules from integer nanoseconds; the
millisecond forms are thin wrappers, since nsqpy keeps durations as integer milliseconds
(fields named ``*_ms``). Source: Go's src/time/format.go (ParseDuration) and time.go
(Duration.String)."""

from __future__ import annotations

import re

#: Nanoseconds per unit, as time.ParseDuration's unitMap (both micro signs, and "us").
_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")

_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000
_NS_PER_M = 60 * _NS_PER_S
_NS_PER_H = 60 * _NS_PER_M


def parse_go_duration_ns(text: str) -> int:
    """A Go duration string ("60s", "1m30s", "250ms", "-1.5h", "0") in integer nanoseconds.

    Go's time.ParseDuration: an optional sign, then one or more decimal numbers each with a
    unit (ns, us/µs/μs, ms, s, m, h); a bare "0" is allowed, a bare number is not. Fractions
    are exact (truncated below a nanosecond). Raises ValueError on anything else.
    """
    s = text
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    pos = 0
    total = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        whole, frac, unit = m.groups() if m else ("", None, "")
        if m is None or (not whole and not frac):
            raise ValueError(f"invalid duration {text!r}")
        scale = _UNITS_NS[unit]
        total += int(whole or "0") * scale
        if frac:  # integer arithmetic, exact as Go's
            total += int(frac) * scale // 10 ** len(frac)
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def parse_go_duration_ms(text: str) -> int:
    """A Go duration string in whole milliseconds (truncated toward zero); ValueError as
    parse_go_duration_ns."""
    ns = parse_go_duration_ns(text)
    return ns // _NS_PER_MS if ns >= 0 else -(-ns // _NS_PER_MS)


def format_go_duration_ns(ns: int) -> str:
    """Integer nanoseconds as Go's Duration.String() prints them: "0s", "250ns", "1.5µs",
    "1.5ms", "27.358330278s", "1m0s", "1h0m5s" (the largest unit below a second, else
    h/m/s with the seconds' fraction trimmed of trailing zeros)."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < _NS_PER_MS:
        return sign + _fraction(ns, 1_000, 3) + "µs"
    if ns < _NS_PER_S:
        return sign + _fraction(ns, _NS_PER_MS, 6) + "ms"
    h, rem = divmod(ns, _NS_PER_H)
    m, rem = divmod(rem, _NS_PER_M)
    out = sign + (f"{h}h" if h else "") + (f"{m}m" if h or m else "")
    return out + _fraction(rem, _NS_PER_S, 9) + "s"


def format_go_duration_ms(ms: int) -> str:
    """Integer milliseconds as Go's Duration.String() prints them ("0s", "250ms", "1m0s",
    "1h0m0s", "1.5s"): format_go_duration_ns of the same span."""
    return format_go_duration_ns(ms * _NS_PER_MS)


def _fraction(value: int, unit: int, digits: int) -> str:
    """``value / unit`` as Go writes it: the whole part, then up to ``digits`` decimals with
    trailing zeros (and a bare point) dropped."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")
