"""What the client refuses before a byte is written: bad names, bodies that are not bytes, and
bodies over the limits nsqd announced or was configured with.

Strategy: nsqd closes the connection on a bad topic or an oversized body (E_BAD_TOPIC and
E_BAD_MESSAGE are fatal client errors), which fails every publish pipelined on it; and a
``str`` body or a name with a space or a newline in it would be split or mangled on the wire.
So the producer and the consumer check first, with nsqd's own rules: the name rule is
:mod:`nsqpy.internal.names` (the one the daemons use), the size limits are nsqd's
``--max-msg-size`` (each message) and ``--max-body-size`` (an MPUB's whole body). A refused
name or size raises an :class:`~nsqpy.client.conn.NSQError` subclass that is also a
ValueError, with the code nsqd would have answered (so code catching either keeps working);
a body of the wrong type raises TypeError. Nothing here does I/O.

Source: nsqd protocol_v2.go (PUB, MPUB, DPUB, SUB checks), internal/protocol/names.go."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..internal.names import NAME_RULE, name_problem
from .conn import NSQError

#: The limits nsqd puts in its "too big" errors ("PUB message too big 2000 > 1024").
_TOO_BIG = re.compile(r"too big (\d+) > (\d+)")


class InvalidNameError(NSQError, ValueError):
    """A topic or channel name nsqd would refuse (``code`` E_BAD_TOPIC or E_BAD_CHANNEL);
    nothing was sent. The message names the rule and what breaks it."""

    @property
    def fatal(self) -> bool:
        return False


class MessageTooBigError(NSQError, ValueError):
    """A body over nsqd's max_msg_size (``code`` E_BAD_MESSAGE) or an MPUB over its
    max_body_size (E_BAD_BODY); nothing was sent. ``size`` and ``limit`` are in bytes."""

    def __init__(self, code: str, text: str, size: int, limit: int) -> None:
        super().__init__(code, text)
        self.size = size
        self.limit = limit

    @property
    def fatal(self) -> bool:
        return False


def check_name(name: Any, kind: str) -> bytes:
    """``name`` as the bytes to send, when it is a valid ``kind`` ("topic" or "channel") name;
    else InvalidNameError (a ValueError) naming the rule."""
    problem = name_problem(name)
    if problem is not None:
        code = "E_BAD_TOPIC" if kind == "topic" else "E_BAD_CHANNEL"
        raise InvalidNameError(
            code, f"invalid {kind} name {name!r}: {problem} (the rule: {NAME_RULE})"
        )
    return str(name).encode("ascii")


def check_body(body: Any) -> bytes:
    """``body`` as bytes when it is bytes-like (bytes as is; a bytearray or memoryview copied,
    since the write happens later and the caller may change them meanwhile); TypeError
    otherwise: a ``str`` must be encoded first (``body.encode("utf-8")``)."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray):
        return bytes(body)
    if isinstance(body, str):
        raise TypeError(
            "message body must be bytes, not str: encode it first, e.g. body.encode('utf-8')"
        )
    try:
        view = memoryview(body)
    except TypeError:
        raise TypeError(
            f"message body must be bytes-like (bytes, bytearray, memoryview), "
            f"not {type(body).__name__}"
        ) from None
    return view.tobytes()


def check_bodies(bodies: Any) -> list[bytes]:
    """Every body of an MPUB checked by :func:`check_body`; TypeError for a lone bytes or str
    (a sequence of bodies is wanted), ValueError for none."""
    if isinstance(bodies, bytes | bytearray | memoryview | str):
        raise TypeError(
            "multi_publish takes a sequence of bodies (a list of bytes), "
            f"not one {type(bodies).__name__}"
        )
    out = [check_body(b) for b in bodies]
    if not out:
        raise ValueError("multi_publish needs at least one body")
    return out


def check_size(cmd: str, size: int, max_msg_size: int) -> None:
    """MessageTooBigError when ``size`` > ``max_msg_size`` (bytes; 0 = no limit), in nsqd's
    words for ``cmd`` ("PUB", "MPUB" or "DPUB")."""
    if max_msg_size > 0 and size > max_msg_size:
        raise MessageTooBigError(
            "E_BAD_MESSAGE",
            f"{cmd} message too big {size} > {max_msg_size} (nsqd's max_msg_size; not sent)",
            size,
            max_msg_size,
        )


def check_mpub_size(bodies: Sequence[bytes], max_msg_size: int, max_body_size: int) -> None:
    """Each body against ``max_msg_size`` and the MPUB body (4-byte count, then a 4-byte size
    before each message) against ``max_body_size``; 0 = no limit. MessageTooBigError."""
    total = 4
    for b in bodies:
        check_size("MPUB", len(b), max_msg_size)
        total += 4 + len(b)
    if max_body_size > 0 and total > max_body_size:
        raise MessageTooBigError(
            "E_BAD_BODY",
            f"MPUB body too big {total} > {max_body_size} (nsqd's max_body_size; not sent)",
            total,
            max_body_size,
        )


def limit_from_error(err: NSQError) -> tuple[str, int] | None:
    """From nsqd's "too big" refusal, which limit it enforces: ``("max_msg_size", n)`` for an
    E_BAD_MESSAGE, ``("max_body_size", n)`` for an E_BAD_BODY; None for other errors."""
    m = _TOO_BIG.search(err.text)
    if m is None:
        return None
    if err.code == "E_BAD_MESSAGE":
        return "max_msg_size", int(m.group(2))
    if err.code == "E_BAD_BODY":
        return "max_body_size", int(m.group(2))
    return None
