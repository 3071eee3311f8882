"""Option values of the `nsq` format (source and sink), checked the same way for both.

Strategy: Spark passes every option as a string. Integers are whole decimal numbers with a
lower bound; durations are Go durations ("60s", "1m30s", "250ms", parsed by nsqpy.internal.godur,
the one owner of Go's duration syntax) or a plain number of milliseconds (go-options' coercion, as
nsqd's config file takes them). Every error names the option."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..internal.godur import parse_go_duration_ms


def int_option(options: Mapping[str, str], name: str, default: int | None, low: int = 1) -> Any:
    """``options[name]`` as an int >= ``low``, or ``default`` when absent or blank.

    Raises ValueError ("option NAME: ...") for anything else."""
    v = options.get(name)
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ValueError(f"option {name}: {v!r} is not an integer") from None
    if n < low:
        raise ValueError(f"option {name}: {n} is below {low}")
    return n


def parse_duration_ms(value: str | int | float, name: str) -> int:
    """A Go duration (``"60s"``, ``"1m30s"``, ``"250ms"``) or a plain number of milliseconds,
    as whole milliseconds (>= 0). Raises ValueError naming the option."""
    s = str(value).strip()
    try:
        ms = int(float(s))
    except ValueError:
        try:
            ms = parse_go_duration_ms(s)
        except ValueError:
            raise ValueError(
                f"option {name}: {value!r} is not a duration (e.g. 60s, 250ms, 1m30s)"
            ) from None
    if ms < 0:
        raise ValueError(f"option {name}: {value!r} is negative")
    return ms
