"""Go's strconv rules where nsqpy must read text exactly as NSQ's Go daemons do.

Strategy: small pure functions named after their Go originals, each stating which spellings
Go accepts; callers turn ValueError into their own error (a usage error, an E_* reply).
Source: Go's src/strconv/atob.go."""

from __future__ import annotations

#: The spellings strconv.ParseBool reads as true (case matters: "tRuE" is refused).
GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
#: The spellings strconv.ParseBool reads as false.
GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool: True for GO_TRUE, False for GO_FALSE; ValueError with Go's
    wording (``strconv.ParseBool: parsing "x": invalid syntax``) for anything else."""
    if text in GO_TRUE:
        return True
    if text in GO_FALSE:
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')
