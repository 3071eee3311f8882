"""nsq_to_file's ``--datetime-format``: strftime codes turned into a Go time layout, then that
layout formatted as Go's time.Format does.

Strategy: two steps, as NSQ's apps/nsq_to_file/strftime.go (a copy of jehiah/go-strftime):
``%Y`` and friends become Go layout tokens (``2006``...), every other character is copied
into the layout unchanged; then the whole layout is formatted with Go's rules, so literal text
that happens to spell a Go token (``1``, ``2``, ``Jan``, ``15``...) is a date part there too,
exactly as in Go. The layout tokens are those of Go's src/time/format.go nextStdChunk (the
fractional-second tokens are left out: no strftime code makes them)."""

from __future__ import annotations

import time

#: strftime code -> Go layout token (strftime.go's conversion table).
CONVERSION = {
    "B": "January",
    "b": "Jan",
    "m": "01",
    "A": "Monday",
    "a": "Mon",
    "d": "02",
    "H": "15",
    "I": "03",
    "M": "04",
    "S": "05",
    "Y": "2006",
    "y": "06",
    "p": "PM",
    "Z": "MST",
    "z": "-0700",
    "%": "%",
}

_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()


def to_layout(fmt: str) -> str:
    """strftime.go's first step: the Go layout for strftime format ``fmt``."""
    out: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        if fmt[i] == "%" and i <= n - 2 and fmt[i + 1] in CONVERSION:
            out.append(CONVERSION[fmt[i + 1]])
            i += 2
            continue
        out.append(fmt[i])
        i += 1
    return "".join(out)


def _zone(t: time.struct_time, colon: bool, seconds: bool, z: bool, short: bool) -> str:
    off = t.tm_gmtoff or 0
    if z and off == 0:
        return "Z"
    sign = "-" if off < 0 else "+"
    off = abs(off)
    hh, mm, ss = off // 3600, off // 60 % 60, off % 60
    sep = ":" if colon else ""
    if short:
        return f"{sign}{hh:02d}"
    return f"{sign}{hh:02d}{sep}{mm:02d}" + (f"{sep}{ss:02d}" if seconds else "")


#: Go's zone tokens, longest first: (token, colon, seconds, Z-for-UTC, hours only).
_ZONES = (
    ("-07:00:00", True, True, False, False),
    ("-070000", False, True, False, False),
    ("-07:00", True, False, False, False),
    ("-0700", False, False, False, False),
    ("-07", False, False, False, True),
    ("Z07:00:00", True, True, True, False),
    ("Z070000", False, True, True, False),
    ("Z07:00", True, False, True, False),
    ("Z0700", False, False, True, False),
    ("Z07", False, False, True, True),
)


def go_format(layout: str, t: time.struct_time) -> str:
    """Go's time.Format(layout) of local time ``t`` (tokens as nextStdChunk finds them)."""
    out: list[str] = []
    i, n = 0, len(layout)
    hour12 = t.tm_hour % 12 or 12
    while i < n:
        rest = layout[i:]
        tok: str | None = None
        val = ""
        c = rest[0]
        if rest.startswith("January"):
            tok, val = "January", _MONTHS[t.tm_mon - 1]
        elif rest.startswith("Jan"):
            tok, val = "Jan", _MONTHS[t.tm_mon - 1][:3]
        elif rest.startswith("Monday"):
            tok, val = "Monday", _DAYS[t.tm_wday]
        elif rest.startswith("Mon"):
            tok, val = "Mon", _DAYS[t.tm_wday][:3]
        elif rest.startswith("MST"):
            tok, val = "MST", t.tm_zone or _zone(t, False, False, False, False)
        elif c == "0" and len(rest) > 1 and rest[1] in "123456":
            tok = rest[:2]
            val = {
                "1": f"{t.tm_mon:02d}",
                "2": f"{t.tm_mday:02d}",
                "3": f"{hour12:02d}",
                "4": f"{t.tm_min:02d}",
                "5": f"{t.tm_sec:02d}",
                "6": f"{t.tm_year % 100:02d}",
            }[rest[1]]
        elif rest.startswith("002"):
            tok, val = "002", f"{t.tm_yday:03d}"
        elif rest.startswith("15"):
            tok, val = "15", f"{t.tm_hour:02d}"
        elif c == "1":
            tok, val = "1", str(t.tm_mon)
        elif rest.startswith("2006"):
            tok, val = "2006", f"{t.tm_year:04d}"
        elif c == "2":
            tok, val = "2", str(t.tm_mday)
        elif rest.startswith("_2006"):
            tok, val = "_2006", f"_{t.tm_year:04d}"
        elif rest.startswith("__2"):
            tok, val = "__2", f"{t.tm_yday:3d}"
        elif rest.startswith("_2"):
            tok, val = "_2", f"{t.tm_mday:2d}"
        elif c in "345":
            tok = c
            val = str({"3": hour12, "4": t.tm_min, "5": t.tm_sec}[c])
        elif rest.startswith("PM"):
            tok, val = "PM", "PM" if t.tm_hour >= 12 else "AM"
        elif rest.startswith("pm"):
            tok, val = "pm", "pm" if t.tm_hour >= 12 else "am"
        elif c in "-Z":
            for ztok, colon, secs, z, short in _ZONES:
                if rest.startswith(ztok):
                    tok, val = ztok, _zone(t, colon, secs, z, short)
                    break
        if tok is None:
            out.append(c)
            i += 1
        else:
            out.append(val)
            i += len(tok)
    return "".join(out)


def strftime(fmt: str, when: float | None = None) -> str:
    """``fmt`` (strftime codes: %Y %y %m %d %H %I %M %S %p %B %b %A %a %Z %z %%) formatted at
    Unix time ``when`` (default: now) in local time, as nsq_to_file's strftime does."""
    return go_format(to_layout(fmt), time.localtime(when))
