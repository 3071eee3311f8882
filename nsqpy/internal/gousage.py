"""The usage text of a Go program's flags, as Go's flag package prints it for ``-h``.

Strategy: one owner for the help of every nsqpy command that takes Go flags (the daemons'
option tables in internal/optiontable.py, the tools' tables in tools/flags.py): each turns
its rows into ``UsageFlag`` records and this module lays them out, sorted by name, as
flag.PrintDefaults does::

    Usage of nsq_tail:
      -channel string
        \tNSQ channel
      -max-in-flight int
        \tmax number of messages to allow in flight (default 200)
      -n\tone-letter flag without a type: on the same line

``go_usage_command()`` is the click command class (built at first use: click is imported only
by a command line that needs it) that answers ``-h``, ``--h``, ``-help`` and
``--help`` (Go's flag package takes one or two dashes) with that text on stdout, exit 0 (Go
writes it to stderr; stdout serves ``| less`` and ``| grep`` as Python tools do, and
``2>&1`` reads both). Source: Go's src/flag/flag.go (PrintDefaults,
UnquoteUsage, isZeroValue, defaultUsage)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import click


@dataclass(frozen=True)
class UsageFlag:
    """One flag as its usage shows it.

    ``name`` as Go spells it (``max-in-flight``); ``type_name`` Go's name of the value's type
    (``string``, ``int``, ``float``, ``duration``, ``value``; ``""`` for a boolean);
    ``default`` the default as Go's ``String()`` prints it, or ``None`` when it is the type's
    zero value (then no "(default ...)"); ``quote`` whether Go quotes it (string flags).
    """

    name: str
    type_name: str
    default: str | None
    help: str
    quote: bool = False


def go_quote(text: str) -> str:
    """Go's strconv.Quote for the characters a default can hold: a double-quoted string with
    backslash, quote and control characters escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(value: float) -> str:
    """A float64 as Go's flag prints it (strconv.FormatFloat 'g', shortest): 1.0 -> "1"."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _unquote_usage(f: UsageFlag) -> tuple[str, str]:
    """flag.UnquoteUsage: a name in back quotes in the help becomes the value's name and
    loses its quotes; otherwise the type's name."""
    first = f.help.find("`")
    if first >= 0:
        second = f.help.find("`", first + 1)
        if second >= 0:
            name = f.help[first + 1 : second]
            return name, f.help[:first] + name + f.help[second + 1 :]
    return f.type_name, f.help


def format_usage(program: str, flags: Sequence[UsageFlag]) -> str:
    """``Usage of <program>:`` and every flag, sorted by name, in PrintDefaults' layout;
    the text ends with a newline."""
    lines = [f"Usage of {program}:\n"]
    for f in sorted(flags, key=lambda x: x.name):
        type_name, usage = _unquote_usage(f)
        line = f"  -{f.name}" + (f" {type_name}" if type_name else "")
        # a short line (a one-letter name without a type) keeps its help on the same line
        line += "\t" if len(line) <= 4 else "\n    \t"
        line += usage.replace("\n", "\n    \t")
        if f.default is not None:
            shown = go_quote(f.default) if f.quote else f.default
            line += f" (default {shown})"
        lines.append(line + "\n")
    return "".join(lines)


@functools.cache
def go_usage_command() -> type[click.Command]:
    """The GoUsageCommand class (see below), made once; imports click."""
    import click

    class GoUsageCommand(click.Command):
        """A click command whose help is Go's usage text: ``-h``, ``--h`` and ``--help``
        (``-help`` is ``--help`` once goflag has rewritten Go's single dash) print it on stdout
        and exit 0.

        ``go_flags`` gives the flags when help is asked for (so the rows are read only then);
        ``go_program`` names the program in the first line.
        """

        go_flags: Callable[[], Sequence[UsageFlag]] = staticmethod(lambda: ())
        go_program: str = ""

        def __init__(
            self, name: str | None, context_settings: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            settings = dict(context_settings or {})
            settings["help_option_names"] = ["-h", "--h", "--help"]
            super().__init__(name, context_settings=settings, **kw)

        def get_help(self, ctx: click.Context) -> str:
            program = self.go_program or ctx.info_name or self.name or ""
            # click's echo ends the line
            return format_usage(program, self.go_flags()).rstrip("\n")

        def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            formatter.write(self.get_help(ctx))

    return GoUsageCommand


def usage_command(program: str, flags: Callable[[], Sequence[UsageFlag]]) -> type[click.Command]:
    """A ``GoUsageCommand`` class (go_usage_command) bound to ``program`` and its ``flags``,
    for ``click.command(cls=...)``."""
    return type(
        "GoUsage",
        (go_usage_command(),),
        {"go_flags": staticmethod(flags), "go_program": program},
    )
