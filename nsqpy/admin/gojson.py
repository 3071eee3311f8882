"""nsqadmin's request bodies as Go decodes them: json.NewDecoder(req.Body).Decode(&struct{...}).

Strategy: pure. The first JSON value of the body is read (what follows it is left unread, as
a Decoder does), its keys matched to the struct's string fields case-insensitively, and every
failure worded as encoding/json words it (Go 1.19), because nsqadmin answers that text as the
400's message: "EOF" for an empty body, "unexpected EOF" for a cut one, "invalid character 'x'
looking for beginning of value" and its siblings for a syntax error, "json: cannot unmarshal
number into Go struct field .action of type string" for a wrong type. Python's json decoder
finds the error; its message is mapped onto Go's by what it was expecting."""

from __future__ import annotations

import json
from typing import Any

_CONTEXT = {
    "Expecting value": "looking for beginning of value",
    "Expecting property name enclosed in double quotes": (
        "looking for beginning of object key string"
    ),
    "Expecting ':' delimiter": "after object key",
    "Invalid control character at": "in string literal",
    "Invalid \\escape": "in string escape code",
}


class GoJSONError(ValueError):
    """A body Go's decoder refuses; ``str()`` is encoding/json's error text."""


def _quote_char(c: str) -> str:
    """encoding/json's quoteChar: 'x', with Go's escapes for the odd ones."""
    if c == "'":
        return "'\\''"
    if c == '"':
        return "'\"'"
    q = json.dumps(c)[1:-1]  # \n, \t, \u0001 ... as strconv.Quote mostly writes them
    return f"'{q}'"


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


def _syntax_error(e: json.JSONDecodeError) -> str:
    doc, pos = e.doc, e.pos
    if e.msg.startswith("Unterminated string") or pos >= len(doc):
        return "unexpected EOF"
    literal = {"t": "true", "f": "false", "n": "null"}.get(doc[pos])
    if e.msg == "Expecting value" and literal:  # Go's scanner fails inside the literal
        for i, want in enumerate(literal):
            if pos + i >= len(doc):
                return "unexpected EOF"
            if doc[pos + i] != want:
                got = _quote_char(doc[pos + i])
                return f"invalid character {got} in literal {literal} (expecting '{want}')"
    if e.msg == "Expecting ',' delimiter":
        where = _innermost(doc, pos)
        context = "after array element" if where == "[" else "after object key:value pair"
    else:
        context = _CONTEXT.get(e.msg, "looking for beginning of value")
    return f"invalid character {_quote_char(doc[pos])} {context}"


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def go_struct_type(fields: tuple[str, ...]) -> str:
    """reflect's name of an anonymous struct of string fields with json tags, e.g.
    struct { Topic string "json:\\"topic\\"" }."""
    parts = [f'{f.capitalize()} string "json:\\"{f}\\""' for f in fields]
    return "struct { " + "; ".join(parts) + " }"


def decode_struct(raw: bytes, fields: tuple[str, ...]) -> dict[str, str]:
    """The string ``fields`` (json names, lower case) of the first JSON value of ``raw``, ""
    when absent or null. Raises GoJSONError with encoding/json's text."""
    text = raw.decode("utf-8", "replace").lstrip(" \t\r\n")
    if not text:
        raise GoJSONError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as e:
        raise GoJSONError(_syntax_error(e)) from None
    out = dict.fromkeys(fields, "")
    if value is None:
        return out
    if not isinstance(value, dict):
        raise GoJSONError(
            f"json: cannot unmarshal {_kind(value)} into Go value of type {go_struct_type(fields)}"
        )
    error = ""
    for key, v in value.items():
        name = key if key in fields else next((f for f in fields if f == key.lower()), None)
        if name is None or v is None:
            continue
        if isinstance(v, str):
            out[name] = v
        elif not error:  # Go decodes on and reports the first type error
            error = f"json: cannot unmarshal {_kind(v)} into Go struct field .{name} of type string"
    if error:
        raise GoJSONError(error)
    return out
