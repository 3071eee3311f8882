"""Go's strconv rules where nsqpy must read text exactly as NSQ's Go daemons do.

Strategy: small pure functions named after their Go originals, each stating which spellings
Go accepts; callers turn ValueError into their own error (a usage error, an E_* reply).
Source: Go's src/strconv/atob.go and atoi.go."""

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


def parse_int(text: str, bits: int = 64) -> int:
    """Go's strconv.ParseInt(text, 10, bits): an optional sign, then ASCII digits only (no
    spaces, no underscores, unlike Python's int()); ValueError with Go's wording for bad
    syntax or a value outside the signed ``bits``-bit range."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not (body.isascii() and body.isdigit()):
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    limit = 1 << (bits - 1)
    body = body.lstrip("0") or "0"
    n = int(body) if len(body) <= 20 else limit  # longer is out of range anyway
    n = -n if text[0] == "-" else n
    if not -limit <= n < limit:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return n
