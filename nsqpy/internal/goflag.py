"""The outside every nsqpy daemon shares with NSQ's Go daemons: Go's flag syntax, Go durations on
the command line, and the log line format of NSQ's internal/lg package.

Strategy: click parses; this module rewrites Go-only spellings first (``-flag value``,
``-flag=value``, ``--bool=false``, bare booleans) and supplies a click type for Go durations.
Each daemon's cli.py lists its own boolean flags and its not-yet-built flags and calls these."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import click

from ..options import parse_go_duration_ms

GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}
_LEVEL_NAMES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}


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
                raise click.UsageError(
                    f"flag --{name} is an NSQ flag that {program} does not implement yet"
                )
            if name in bare_true and not eq:
                arg = f"--{name}=true"
            if name in bool_flags and eq:
                if value in GO_TRUE:
                    arg = f"--{name}"
                elif value in GO_FALSE:
                    arg = f"--no-{name}"
                else:
                    raise click.UsageError(
                        f'invalid boolean value "{value}" for -{name}: parse error'
                    )
        out.append(arg)
    return out


class GoDuration(click.ParamType):
    """A Go duration ("60s", "1m30s", "250ms") on the command line, as whole milliseconds."""

    name = "duration"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_go_duration_ms(str(value))
        except ValueError:
            self.fail(
                f'invalid value "{value}" for flag -{param.name.replace("_", "-")}: parse error',
                param,
                ctx,
            )


DURATION = GoDuration()


class NsqLogFormatter(logging.Formatter):
    """internal/lg's line: ``<prefix>2006/01/02 15:04:05.000000 LEVEL: message`` (local time)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", t) + f".{int(record.created % 1 * 1e6):06d}"
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        return f"{self.prefix}{stamp} {level}: {record.getMessage()}"


def setup_logging(prefix: str, level: str, logger: str = "nsqpy") -> None:
    """Send ``logger``'s records to stderr in NSQ's format at ``level`` (debug, info, warn,
    error or fatal; KeyError for anything else)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqLogFormatter(prefix))
    log = logging.getLogger(logger)
    log.handlers[:] = [handler]
    log.setLevel(LOG_LEVELS[level.lower()])
    log.propagate = False


def option(name: str, typ: Any, default: Any, help: str) -> Any:
    """A click option ``--name`` with a default shown in --help."""
    return click.option(f"--{name}", type=typ, default=default, show_default=True, help=help)


def daemon_options(log_prefix: str) -> Any:
    """The flags every NSQ daemon has: --config, --version, --log-level, --log-prefix (default
    ``log_prefix``) and the deprecated --verbose. A decorator for a click command."""

    def apply(f: Any) -> Any:
        for deco in reversed(
            (
                option("config", str, "", "path to config file"),
                click.option("--version", is_flag=True, help="print version string"),
                option(
                    "log-level",
                    click.Choice(sorted(LOG_LEVELS), case_sensitive=False),
                    "info",
                    "set log verbosity: debug, info, warn, error, or fatal",
                ),
                option("log-prefix", str, log_prefix, "log message prefix"),
                click.option(
                    "--verbose/--no-verbose",
                    default=False,
                    help="[deprecated] has no effect, use --log-level",
                ),
            )
        ):
            f = deco(f)
        return f

    return apply


def version_or_config(
    kw: dict[str, Any],
    version: Callable[[], str],
    refused: frozenset[str] = frozenset(),
    cfg_to_flag: dict[str, str] | None = None,
) -> bool:
    """The start every NSQ daemon's command shares: with --version print ``version()`` and
    return False (nothing more to do); else fill ``kw`` from --config (nsqpy.config.apply_file)
    and return True. A config file that cannot be used is logged as FATAL and exits 1, as the Go
    daemons do."""
    if kw["version"]:
        click.echo(version())
        return False
    from .. import config

    try:
        config.apply_file(click.get_current_context(), kw, refused, cfg_to_flag)
    except config.ConfigError as e:
        setup_logging(kw["log_prefix"], kw["log_level"])
        logging.getLogger("nsqpy").critical("failed to load config file %s - %s", kw["config"], e)
        sys.exit(1)
    return True
