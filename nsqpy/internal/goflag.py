"""Go's flag syntax on nsqpy's command lines: what NSQ's Go daemons accept, rewritten for click.

Strategy: click parses; this module rewrites Go-only spellings first (``-flag value``,
``-flag=value``, ``--bool=false``, bare booleans) and supplies the click type of a Go
duration flag (go_duration_type; click is imported only when a command line needs it). What a
daemon's flags are (which are booleans, which are refused as not yet
built) comes from its option table (internal/optiontable.py); the log format lives in
internal/lg.py. Source: Go's src/flag/flag.go (parseOne, boolFlag)."""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

from .godur import parse_go_duration_ms
from .gostrconv import parse_bool


def normalize_go_flags(
    argv: list[str],
    bool_flags: Collection[str],
    unimplemented: Collection[str] = (),
    bare_true: Collection[str] = (),
    program: str = "nsqpy-d",
) -> list[str]:
    """Rewrite Go flag spellings into click's.

    ``-name`` -> ``--name``; for a name in ``bool_flags``, ``--name=true`` -> ``--name`` and
    ``--name=false`` -> ``--no-name`` (Go's accepted spellings of true and false); a name in
    ``bare_true`` (a Go flag whose type says IsBoolFlag but takes other values too) given bare
    becomes ``--name=true``. Arguments after ``--`` or a lone ``-`` are left alone.

    Raises click.UsageError for a flag in ``unimplemented`` (naming ``program``) and for a boolean
    value Go would refuse.
    """
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--" or arg == "-":
            out.extend(argv[i:])
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            arg = "-" + arg
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in unimplemented:
                import click

                raise click.UsageError(
                    f"flag --{name} is an NSQ flag that {program} does not implement yet"
                )
            if name in bare_true and not eq:
                arg = f"--{name}=true"
            if name in bool_flags and eq:
                try:
                    arg = f"--{name}" if parse_bool(value) else f"--no-{name}"
                except ValueError:
                    import click

                    raise click.UsageError(
                        f'invalid boolean value "{value}" for -{name}: parse error'
                    ) from None
        out.append(arg)
    return out


@functools.cache
def go_duration_type() -> Any:
    """The click type of a Go duration flag (a GoDuration, below), made once; imports click."""
    import click

    class GoDuration(click.ParamType):  # type: ignore[type-arg]
        """A Go duration flag ("60s", "1m30s", "250ms") as whole milliseconds; an int (from a
        config file: go-options reads an integer duration as milliseconds) passes as it is."""

        name = "duration"

        def convert(self, value: Any, param: Any, ctx: Any) -> int:
            if isinstance(value, int):
                return value
            try:
                return parse_go_duration_ms(str(value))
            except ValueError:
                # what ParamType.fail does, spelled out so the type holds where click is untyped
                # (the isolated build environment of the compiled install has no click)
                flag = param.name.replace("_", "-")
                raise click.BadParameter(
                    f'invalid value "{value}" for flag -{flag}: parse error',
                    ctx=ctx,
                    param=param,
                ) from None

    return GoDuration()
