"""Go's flag syntax on nsqpy's command lines: what NSQ's Go daemons accept, rewritten for click.

Strategy: click parses; this module rewrites Go-only spellings first (``-flag value``,
``-flag=value``, ``--bool=false``, bare booleans) and supplies the click type of a Go flag's
value (go_value_type: a duration or an int read as Go's flag package reads them, for the
daemons' tables and the tools' alike; click is imported only when a command line needs it).
What a daemon's flags are (which are booleans, which are refused as not yet built) comes from
its option table (internal/optiontable.py); the log format lives in internal/lg.py. Source:
Go's src/flag/flag.go (parseOne, boolFlag)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
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
def _go_value_class() -> Any:
    """GoValue's class, made once: it subclasses click.ParamType, so click is imported here,
    when a command line first needs it, not when this module is."""
    import click

    class GoValue(click.ParamType):  # type: ignore[type-arg]
        """A Go flag's value as text, read by ``parse`` into the field's type; a value that is
        already an instance of ``given`` (from a config file, or a default) is turned into
        that type by ``given_as`` instead. Text ``parse`` refuses (ValueError) is a usage
        error in the words of Go's flag package: 'invalid value "X" for flag -name: parse
        error'. ``name`` is the type's name in click's messages."""

        def __init__(
            self,
            name: str,
            parse: Callable[[str], Any],
            given: tuple[type, ...],
            given_as: Callable[[Any], Any],
        ) -> None:
            self.name = name
            self._parse = parse
            self._given = given
            self._given_as = given_as

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, self._given):
                return self._given_as(value)
            try:
                return self._parse(str(value))
            except ValueError:
                # what ParamType.fail does, spelled out so the type holds where click is
                # untyped (the isolated build environment of the compiled install has no click)
                flag = param.name.replace("_", "-")
                raise click.BadParameter(
                    f'invalid value "{value}" for flag -{flag}: parse error',
                    ctx=ctx,
                    param=param,
                ) from None

    return GoValue


def go_value_type(
    name: str,
    parse: Callable[[str], Any],
    given: tuple[type, ...] = (int,),
    given_as: Callable[[Any], Any] = lambda value: value,
) -> Any:
    """A click type for a Go flag's value (see _go_value_class): ``parse`` reads the text,
    a value already of a ``given`` type passes through ``given_as``; imports click."""
    return _go_value_class()(name, parse, given, given_as)


@functools.cache
def go_duration_type() -> Any:
    """The click type of a Go duration flag ("60s", "1m30s", "250ms") as whole milliseconds;
    an int (from a config file: go-options reads an integer duration as milliseconds) passes
    as it is. Made once; imports click."""
    return go_value_type("duration", parse_go_duration_ms)
