"""Go's strconv rules where nsqpy must read text exactly as NSQ's Go daemons do.

Strategy: small pure functions named after their Go originals, each stating which spellings
Go accepts; callers turn ValueError into their own error (a usage error, an E_* reply).
Source: Go's src/strconv/atob.go, atoi.go and quote.go."""

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


def quote(b: bytes) -> str:
    """Go's strconv.Quote (and %q) of a byte string: ``"..."`` with Go's escapes; an invalid
    UTF-8 byte is written ``\\xNN``. For the error texts nsqd and nsqadmin answer with."""
    s = b.decode("utf-8", "surrogateescape")
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0xDC80 <= o <= 0xDCFF:  # an invalid UTF-8 byte
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}
