"""Times written as Go's time package writes them, for the three daemons and their tools.

Strategy: one owner for every wall-clock text nsqpy shows: RFC 3339 (Go's time.RFC3339
``2006-01-02T15:04:05Z07:00``, optionally with milliseconds ``.000``; "Z" for a zero offset, else
``+hh:mm``), the same date and time with a space (``2006-01-02 15:04:05``, nsqpy-admin's pages),
and net/http's Date header (http.TimeFormat, RFC 7231's IMF-fixdate, computed once per second
since every HTTP answer carries it). Times are Unix seconds (int or float); "local" is the
process's time zone, as Go's time.Local. Formatting goes through time.strftime with only the
numeric directives, which no locale changes."""

from __future__ import annotations

import time

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def zone_offset(t: time.struct_time) -> str:
    """Go's ``Z07:00``: "Z" at offset 0, else ``+hh:mm`` / ``-hh:mm``."""
    off = t.tm_gmtoff or 0
    if off == 0:
        return "Z"
    sign = "+" if off > 0 else "-"
    return f"{sign}{abs(off) // 3600:02d}:{abs(off) % 3600 // 60:02d}"


def _struct(seconds: int, utc: bool) -> time.struct_time:
    return time.gmtime(seconds) if utc else time.localtime(seconds)


def rfc3339(ts: float, *, utc: bool = False) -> str:
    """Unix seconds ``ts`` as Go's t.Format(time.RFC3339) in the local zone (UTC with ``utc``):
    ``2006-01-02T15:04:05+01:00``, ``2006-01-02T14:04:05Z`` (a fraction is dropped)."""
    t = _struct(int(ts // 1), utc)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + zone_offset(t)


def rfc3339_ms(ms: int, *, utc: bool = False) -> str:
    """Unix milliseconds ``ms`` as Go's layout ``2006-01-02T15:04:05.000Z07:00``."""
    s, rest = divmod(int(ms), 1000)
    t = _struct(s, utc)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{rest:03d}" + zone_offset(t)


def date_time(ts: float, *, utc: bool = False) -> str:
    """Unix seconds ``ts`` as Go's layout ``2006-01-02 15:04:05``, local time unless ``utc``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", _struct(int(ts // 1), utc))


def date_time_ms(ms: int, *, utc: bool = False) -> str:
    """Unix milliseconds ``ms`` as Go's layout ``2006-01-02 15:04:05.000``."""
    s, rest = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", _struct(s, utc)) + f".{rest:03d}"


_date_cache: list[object] = [0, ""]


def http_date() -> str:
    """Now as net/http's Date header (http.TimeFormat, ``Mon, 02 Jan 2006 15:04:05 GMT``),
    computed once per second."""
    now = int(time.time())
    if now != _date_cache[0]:
        t = time.gmtime(now)
        _date_cache[1] = (
            f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
        )
        _date_cache[0] = now
    return str(_date_cache[1])
