"""Go's encoding/json, both ways, for the three daemons: one encoder and one struct decoder.

Strategy: Python's json module does the parsing and the writing; this module adds what makes
its bytes and its verdicts Go's.

Encoding (``encode``): json.Marshal's bytes: compact, non-ASCII as UTF-8, and ``<``, ``>``,
``&``, U+2028 and U+2029 escaped as ``\\u003c`` etc.; dict order kept (Go writes struct fields in
declaration order and sorts map keys: callers build their dicts that way). Every V1 answer of
nsqd, nsqlookupd and nsqpy-admin (errors included) goes through it.

Decoding (``GoStruct``): a JSON body read into a Go struct of scalar fields, as Go's
``json.Unmarshal(body, &s)`` (``GoStruct.unmarshal``: the whole body is one value; nsqd's
IDENTIFY) or ``json.NewDecoder(body).Decode(&s)`` (``GoStruct.decode``: the first value, the
rest left unread; nsqadmin's POST bodies). The rules, from encoding/json (decode.go, scanner.go,
Go 1.19-1.21):

- keys match field names case-insensitively (bytes.EqualFold: a key's lower case, with "ſ" as
  "s" and the Kelvin sign as "k"); unknown keys are skipped, and so is anything nested under
  them; each key is decoded in document order, so of a repeated key the last value wins but
  every one is type-checked; ``null`` leaves a field as it was, ``null`` for the whole value
  leaves every field unset;
- invalid UTF-8 inside a string becomes U+FFFD, outside one it is a syntax error; a lone UTF-16
  surrogate escape (``"\\ud800"``) becomes U+FFFD; a BOM, NaN and Infinity are syntax errors
  (Python's json would take all three but the BOM);
- a value of the wrong JSON kind for its field, a number with a fraction or exponent for an
  integer field, or an integer outside the field's range (int/int64, int32) is a type error; Go
  decodes on and reports the first one;
- the error texts are Go's: ``EOF`` / ``unexpected EOF`` (Decoder) or ``unexpected end of JSON
  input`` (Unmarshal) for an empty or cut body, ``invalid character 'x' looking for beginning
  of value`` and its siblings for a syntax error, ``json: cannot unmarshal number into Go struct
  field .action of type string`` for a type error.

Python's json finds a syntax error (objects come back as their pairs, in order); its message is
mapped onto Go's by what it was expecting. One known difference, kept on purpose: nesting deeper
than Python's recursion limit (about 1000 levels) is refused with "exceeded max depth" where Go
allows 10000.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NoReturn

# ---------------------------------------------------------------- encoding


def encode(data: Any) -> bytes:
    """``data`` as Go's encoding/json.Marshal writes it (see the module docstring): bytes."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if "<" in text or ">" in text or "&" in text or "\u2028" in text or "\u2029" in text:
        text = (
            text.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return text.encode("utf-8", "surrogateescape")


def error_body(text: str) -> bytes:
    """The body of NSQ's V1 error answer (http_api.RespondV1 of an Err): ``{"message":TEXT}``."""
    return b'{"message":' + encode(text) + b"}"


# ---------------------------------------------------------------- decoding


class GoJSONError(ValueError):
    """A body Go's decoder refuses; ``str()`` is encoding/json's error text."""


#: Go field types a GoStruct knows, with the integer ranges of the integer ones.
_INT_RANGES = {
    "int": (-(2**63), 2**63),
    "int64": (-(2**63), 2**63),
    "int32": (-(2**31), 2**31),
}
_KINDS = {"string": str, "bool": bool}
_ANY = "any"  # Go's interface{}: any value, kept as Python's json gives it

_CONTEXT = {
    "Expecting value": "looking for beginning of value",
    "Expecting property name enclosed in double quotes": (
        "looking for beginning of object key string"
    ),
    "Expecting ':' delimiter": "after object key",
    "Invalid control character at": "in string literal",
    "Invalid \\escape": "in string escape code",
    "Extra data": "after top-level value",
}

# strconv.Quote's escapes for the bytes encoding/json's quoteChar may show
_NAMED_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r"}


def _quote_char(c: str) -> str:
    """encoding/json's quoteChar of the byte at a syntax error: 'x', with strconv.Quote's
    escapes (a non-ASCII character shows as its first UTF-8 byte read as a Latin-1 rune)."""
    b = c.encode("utf-8", "surrogateescape")[0]
    if b == 0x27:
        return "'\\''"
    if b == 0x22:
        return "'\"'"
    if b in _NAMED_ESCAPES:
        return f"'{_NAMED_ESCAPES[b]}'"
    if b < 0x20 or b == 0x7F:
        return f"'\\x{b:02x}'"
    if 0x80 <= b <= 0xA0 or b == 0xAD:  # not printable for Go's strconv.IsPrint
        return f"'\\u{b:04x}'"
    return f"'{chr(b)}'"


def _innermost(doc: str, pos: int) -> str:
    """The innermost open bracket ("{" or "[") before ``pos``, strings skipped."""
    stack: list[str] = []
    in_str = esc = False
    for c in doc[:pos]:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


_EOF = "unexpected EOF"


def _syntax_error(e: json.JSONDecodeError) -> str:
    """Go's text for the syntax error Python's decoder reported (_EOF for a cut value)."""
    doc, pos = e.doc, e.pos
    if e.msg.startswith("Unterminated string") or pos >= len(doc):
        return _EOF
    literal = {"t": "true", "f": "false", "n": "null"}.get(doc[pos])
    if e.msg == "Expecting value" and literal:  # Go's scanner fails inside the literal
        for i, want in enumerate(literal):
            if pos + i >= len(doc):
                return _EOF
            if doc[pos + i] != want:
                got = _quote_char(doc[pos + i])
                return f"invalid character {got} in literal {literal} (expecting '{want}')"
    if e.msg == "Expecting ',' delimiter":
        where = _innermost(doc, pos)
        context = "after array element" if where == "[" else "after object key:value pair"
    else:
        context = _CONTEXT.get(e.msg, "looking for beginning of value")
    return f"invalid character {_quote_char(doc[pos])} {context}"


class _Constant(Exception):
    """NaN, Infinity or -Infinity met by Python's decoder (Go's scanner refuses them)."""


def _no_constant(name: str) -> NoReturn:
    raise _Constant(name)


def _constant_error(name: str) -> str:
    if name.startswith("-"):
        return "invalid character 'I' in numeric literal"
    return f"invalid character '{name[0]}' looking for beginning of value"


class _Float(float):
    """A JSON number with a fraction or exponent, keeping its text for Go's error."""

    __slots__ = ("text",)
    text: str


def _float(text: str) -> _Float:
    f = _Float(text)
    f.text = text
    return f


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs in document order (repeats kept)."""

    __slots__ = ()


_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_float, object_pairs_hook=_Pairs
)
#: compiled by re at the first non-ASCII string (re caches it), not at start-up
_LONE_SURROGATE = "[\ud800-\udfff]"


def _fold(key: str) -> str:
    """bytes.EqualFold's view of a key for ASCII field names: lower case, "ſ" as "s" (the
    Kelvin sign's lower case is already "k")."""
    key = key.lower()
    return key if key.isascii() else key.replace("\u017f", "s")


def _go_string(s: str) -> str:
    """A decoded JSON string as Go holds it: a lone surrogate escape is U+FFFD."""
    return s if s.isascii() else re.sub(_LONE_SURROGATE, "\ufffd", s)


def _plain(v: Any) -> Any:
    """A parsed value as json.loads gives it (objects as dicts, numbers as int/float)."""
    if isinstance(v, _Pairs):
        return {_go_string(k): _plain(x) for k, x in v}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, float):
        return float(v)
    return _go_string(v) if type(v) is str else v


def _kind(v: Any) -> str:
    """encoding/json's name of a JSON value's kind in an UnmarshalTypeError."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list) and not isinstance(v, _Pairs):
        return "array"
    return "object"


def anonymous_struct_type(fields: Mapping[str, str]) -> str:
    """reflect's name of an anonymous struct whose fields carry json tags, e.g.
    ``struct { Topic string "json:\\"topic\\"" }`` (Go's text for a value it cannot hold)."""
    parts = [f'{f.capitalize()} {t} "json:\\"{f}\\""' for f, t in fields.items()]
    return "struct { " + "; ".join(parts) + " }"


def _parse_whole(raw: bytes) -> Any:
    """json.Unmarshal's parse: ``raw`` (UTF-8, invalid bytes as U+FFFD) is one JSON value,
    whitespace around it allowed. Raises GoJSONError with Go's text."""
    text = raw.decode("utf-8", "replace")
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        found = _syntax_error(e)
        if found == _EOF:
            found = "unexpected end of JSON input"
        raise GoJSONError(found) from None
    except _Constant as e:
        raise GoJSONError(_constant_error(str(e))) from None
    except RecursionError:
        raise GoJSONError("exceeded max depth") from None


def unmarshal_strings(raw: bytes) -> list[str] | None:
    """json.Unmarshal(raw, &[]string{}): the list, or None for ``null`` (Go's nil slice).
    Raises GoJSONError with Go's text (a syntax error, a non-array, a non-string element)."""
    value = _parse_whole(raw)
    if value is None:
        return None
    if not isinstance(value, list) or isinstance(value, _Pairs):
        raise GoJSONError(f"json: cannot unmarshal {_kind(value)} into Go value of type []string")
    for v in value:
        if not isinstance(v, str) and v is not None:
            raise GoJSONError(f"json: cannot unmarshal {_kind(v)} into Go value of type string")
    return [_go_string(v) if v is not None else "" for v in value]


class GoStruct:
    """A Go struct's JSON view: its scalar fields by json name, and the names Go's errors use.

    ``fields`` maps each json name (lower case) to its Go type: "string", "bool", "int",
    "int64", "int32", or "any" (interface{}: any value, as json.loads gives it). ``name`` is
    the struct's type name as a field error shows it (``identifyDataV2``; "" for an anonymous
    struct) and ``type_name`` its reflect name as a wrong top-level value's error shows it
    (``nsqd.identifyDataV2``; for an anonymous struct, anonymous_struct_type's text when None).
    Results are dicts of the fields present in the body (not null), by json name."""

    __slots__ = ("name", "type_name", "fields")

    def __init__(self, fields: Mapping[str, str], name: str = "", type_name: str | None = None):
        for t in fields.values():
            if t not in _INT_RANGES and t not in _KINDS and t != _ANY:
                raise ValueError(f"GoStruct: unsupported Go type {t!r}")
        self.fields = dict(fields)
        self.name = name
        self.type_name = type_name if type_name is not None else anonymous_struct_type(fields)

    def unmarshal(self, raw: bytes) -> dict[str, Any]:
        """json.Unmarshal(raw, &s): the whole of ``raw`` is one JSON value (whitespace around
        it allowed). Raises GoJSONError with Go's text."""
        return self._fields_of(_parse_whole(raw))

    def decode(self, raw: bytes) -> dict[str, Any]:
        """json.NewDecoder(raw).Decode(&s): the first JSON value of ``raw``, what follows it
        left unread. Raises GoJSONError with Go's text ("EOF" for nothing but whitespace)."""
        text = raw.decode("utf-8", "replace").lstrip(" \t\r\n")
        if not text:
            raise GoJSONError("EOF")
        try:
            value, _ = _DECODER.raw_decode(text)
        except json.JSONDecodeError as e:
            raise GoJSONError(_syntax_error(e)) from None
        except _Constant as e:
            raise GoJSONError(_constant_error(str(e))) from None
        except RecursionError:
            raise GoJSONError("exceeded max depth") from None
        return self._fields_of(value)

    def _fields_of(self, value: Any) -> dict[str, Any]:
        """The struct's fields of a parsed value, type-checked as Go's decoder does."""
        out: dict[str, Any] = {}
        if value is None:
            return out
        if not isinstance(value, _Pairs):
            raise GoJSONError(
                f"json: cannot unmarshal {_kind(value)} into Go value of type {self.type_name}"
            )
        fields = self.fields
        error = ""
        for key, v in value:
            name = _fold(key)
            go_type = fields.get(name)
            if go_type is None or v is None:
                continue
            if go_type == _ANY:
                out[name] = _plain(v)
                continue
            bad = self._type_error(v, go_type)
            if bad is None:
                out[name] = _go_string(v) if type(v) is str else v
            elif not error:  # Go decodes on and reports the first type error
                error = (
                    f"json: cannot unmarshal {bad} into Go struct field "
                    f"{self.name}.{name} of type {go_type}"
                )
        if error:
            raise GoJSONError(error)
        return out

    @staticmethod
    def _type_error(v: Any, go_type: str) -> str | None:
        """None when ``v`` fits ``go_type``, else the value part of Go's UnmarshalTypeError."""
        span = _INT_RANGES.get(go_type)
        if span is None:
            return None if isinstance(v, _KINDS[go_type]) else _kind(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return _kind(v)
        if isinstance(v, float):  # a fraction or an exponent: strconv.ParseInt refuses it
            return f"number {getattr(v, 'text', repr(v))}"
        if not span[0] <= v < span[1]:
            return f"number {v}"
        return None
