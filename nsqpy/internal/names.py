"""Topic and channel names: nsqd's rule, with one owner for the daemons and the client.

Strategy: one compiled pattern and one length bound, as nsqd's internal/protocol/names.go keeps
them (``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1 to 64 characters, the ``#ephemeral`` suffix counted
in the length). :func:`is_valid_name` answers yes or no on the hot path (wire.py re-exports it
for the daemons); :func:`name_problem` says which part of the rule a name breaks, so that the
client can refuse a name before any byte is written with an error naming the rule. Pure: no
imports from the rest of nsqpy.

Source: nsqd internal/protocol/names.go (IsValidTopicName, IsValidChannelName, isValidName)."""

from __future__ import annotations

import re

#: Longest topic or channel name nsqd accepts (characters, suffix included).
MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"

NAME_RE = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")

#: The rule in words, as error messages quote it.
NAME_RULE = (
    f"1 to {MAX_NAME_LENGTH} characters of [.a-zA-Z0-9_-], "
    f"optionally ending in {EPHEMERAL_SUFFIX!r}"
)

_BAD_CHAR = re.compile(r"[^.a-zA-Z0-9_-]")


def is_valid_name(name: str | bytes) -> bool:
    """Whether ``name`` (str, or bytes read as ASCII) is a valid topic or channel name: 1 to 64
    characters of ``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral``."""
    if isinstance(name, bytes):
        try:
            name = name.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        return False
    return NAME_RE.fullmatch(name) is not None


def name_problem(name: object) -> str | None:
    """None when ``name`` is a valid name (a str, as :func:`is_valid_name` says), else the part
    of the rule it breaks, in words: its type, its length, the first character outside the set
    (with its position), or a ``#`` not part of the ``#ephemeral`` suffix."""
    if not isinstance(name, str):
        return f"a name is a str, not {type(name).__name__}"
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is {len(name)} characters long, over {MAX_NAME_LENGTH}"
    if NAME_RE.fullmatch(name) is not None:
        return None
    stem = name[: -len(EPHEMERAL_SUFFIX)] if name.endswith(EPHEMERAL_SUFFIX) else name
    m = _BAD_CHAR.search(stem)
    if m is None:  # only the stem is left to blame: it is empty ("#ephemeral" alone)
        return f"nothing before the {EPHEMERAL_SUFFIX!r} suffix"
    ch = m.group()
    if ch == "#":
        return f"'#' at position {m.start()} is not the start of the {EPHEMERAL_SUFFIX!r} suffix"
    return f"character {ch!r} at position {m.start()} is not one of [.a-zA-Z0-9_-]"
