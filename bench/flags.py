"""Command-line flags several bench programs share, each declared (and parsed) here once.

``--daemon LABEL=CMD`` names a daemon a comparison alternates with the others, ``--variant
LABEL=PYTHONPATH`` a code tree put in front of the installed nsqpy, ``--runs N`` how many runs
of each, ``--json PATH`` where every run goes; ``positive`` and ``seconds`` are the argument
types of counts and durations. A program keeps its own help text where its meaning is its own.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Protocol


class _Container(Protocol):
    """An ArgumentParser or one of its argument groups."""

    def add_argument(self, *args: Any, **kwargs: Any) -> Any: ...


#: The help of ``--json`` where the file holds every run and the medians.
JSON_HELP = "write every run and the medians as JSON"


def positive(v: str) -> int:
    """argparse type: an integer > 0 (ArgumentTypeError otherwise)."""
    n = int(v)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{v} is not a positive integer")
    return n


def seconds(v: str) -> float:
    """argparse type: a duration in seconds > 0, with or without a trailing ``s``."""
    x = float(v.rstrip("s"))
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{v} is not a positive duration")
    return x


def add_daemon(p: _Container, help: str) -> None:
    """``--daemon LABEL=CMD``, repeatable (read with ``daemons``)."""
    p.add_argument("--daemon", action="append", default=[], metavar="LABEL=CMD", help=help)


def daemons(specs: list[str]) -> list[tuple[str, str | None]]:
    """``(label, command)`` of each ``--daemon``, in the order given: ``LABEL=CMD``; the
    command None (nsqpy-d as this Python runs it) for ``LABEL=`` and for the bare word
    ``nsqpy``; any other bare word is a command that labels itself."""
    out: list[tuple[str, str | None]] = []
    for spec in specs:
        label, sep, cmd = spec.partition("=")
        if sep:
            out.append((label, cmd or None))
        else:
            out.append((label, None if label == "nsqpy" else label))
    return out


def add_variant(p: _Container, help: str | None = None) -> None:
    """``--variant LABEL=PYTHONPATH``, repeatable (read with ``variants``)."""
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=PYTHONPATH", help=help)


def variants(specs: list[str], prog: str) -> list[tuple[str, str]]:
    """``(label, absolute path)`` of each ``--variant``; ``[("installed", "")]`` when none is
    given. SystemExit (naming ``prog``) for a spec without ``=``."""
    out = []
    for v in specs:
        label, sep, path = v.partition("=")
        if not sep:
            raise SystemExit(f"{prog}: --variant {v!r} is not LABEL=PYTHONPATH")
        out.append((label, os.path.abspath(path)))
    return out or [("installed", "")]


def add_runs(p: _Container, default: int, of: str = "daemon") -> None:
    """``--runs N``: runs of each ``of`` (daemon, variant, ...), taken in turn."""
    p.add_argument(
        "--runs",
        type=positive,
        default=default,
        help=f"runs per {of}, alternating (default {default})",
    )


def add_json(p: _Container, help: str | None = JSON_HELP) -> None:
    """``--json PATH``."""
    p.add_argument("--json", metavar="PATH", help=help)
