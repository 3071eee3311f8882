"""The flag tables of NSQ's Go tools and one parser for all of them.

Strategy: each tool declares its flags once as a tuple of ``Flag`` (name, kind, default, help,
as in the tool's Go source ``apps/<tool>/*.go`` of NSQ v1.3.0); ``parse`` rewrites Go's flag
spellings with nsqpy's goflag (``-flag value``, ``-flag=value``, ``--bool=false``, bare
booleans) and lets a click command built from the table read the result. Repeatable flags
(Go's ``app.StringArray``: ``--topic``, ``--nsqd-tcp-address``, ``--consumer-opt``...) collect
every value in order. Durations come back as float seconds, as go-nsq's options do.
``Fatal`` is Go's ``log.Fatal``: the message goes to stderr with the log package's stamp and
the tool exits 1 (``fail``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from ..internal.godur import format_go_duration_ns, parse_go_duration_ns
from ..internal.goflag import go_value_type, normalize_go_flags
from ..internal.gostrconv import parse_int
from ..internal.gousage import UsageFlag, go_float, usage_command

#: The NSQ release whose tools' flags and output these are.
NSQ_TOOLS_VERSION = "1.3.0"

STR, INT, FLOAT, BOOL, DURATION, LIST = "str", "int", "float", "bool", "duration", "list"


@dataclass(frozen=True)
class Flag:
    """One Go flag: ``name`` as Go spells it (``nsqd-tcp-address``, ``n``); ``kind`` one of
    STR, INT, FLOAT, BOOL, DURATION (Go duration text, parsed to float seconds) or LIST (a
    repeatable string flag); ``default`` in the parsed type."""

    name: str
    kind: str
    default: Any
    help: str = ""

    @property
    def key(self) -> str:
        """The name as a Python identifier (``nsqd_tcp_address``)."""
        return self.name.replace("-", "_")

    def usage(self) -> UsageFlag:
        """This flag as Go's ``-h`` shows it: Go's type name, and the default unless it is the
        type's zero value."""
        d = self.default
        shown: str | None = None
        if self.kind == STR:
            shown = d or None
        elif self.kind == INT:
            shown = str(d) if d else None
        elif self.kind == FLOAT:
            shown = go_float(d) if d else None
        elif self.kind == BOOL:
            shown = "true" if d else None
        elif self.kind == DURATION:
            shown = format_go_duration_ns(round(d * 1e9)) if d else None
        return UsageFlag(self.name, _GO_TYPE_NAMES[self.kind], shown, self.help, self.kind == STR)


#: Go's names of the flags' value types, as the usage text shows them (a StringArray: "value").
_GO_TYPE_NAMES = {
    STR: "string",
    INT: "int",
    FLOAT: "float",
    BOOL: "",
    DURATION: "duration",
    LIST: "value",
}


_TYPES: dict[str, Any] = {
    STR: click.STRING,
    INT: go_value_type("int", parse_int),
    FLOAT: click.FLOAT,
    DURATION: go_value_type(
        "duration",
        lambda text: parse_go_duration_ns(text) / 1e9,
        given=(float, int),
        given_as=float,
    ),
}

#: Flags every tool has.
VERSION = Flag("version", BOOL, False, "print version string")

#: Flags several tools declare alike (each Go tool declares its own, with these same words).
LOOKUPD_HTTP_ADDRESS = Flag(
    "lookupd-http-address", LIST, (), "lookupd HTTP address (may be given multiple times)"
)
NSQD_TCP_ADDRESS = Flag(
    "nsqd-tcp-address", LIST, (), "nsqd TCP address (may be given multiple times)"
)
MAX_IN_FLIGHT = Flag("max-in-flight", INT, 200, "max number of messages to allow in flight")
CONSUMER_OPT = Flag("consumer-opt", LIST, (), "option to passthrough to nsq.Consumer (name,value)")
PRODUCER_OPT = Flag("producer-opt", LIST, (), "option to passthrough to nsq.Producer (name,value)")
HTTP_CONNECT_TIMEOUT = Flag(
    "http-client-connect-timeout", DURATION, 2.0, "timeout for HTTP connect"
)
STATUS_EVERY = Flag(
    "status-every", INT, 250, "the # of requests between logging status, 0 disables"
)
UPSTREAM_MODE = Flag("mode", STR, "hostpool", "the upstream request mode: round-robin, hostpool")


def _command(program: str, table: Sequence[Flag]) -> click.Command:
    params: list[click.Parameter] = []
    for f in table:
        spellings = [f"--{f.name}"] + ([f"-{f.name}"] if len(f.name) == 1 else [])
        if f.kind == BOOL:
            decl = f"{'/'.join(spellings)}/--no-{f.name}"
            opt = click.Option([decl, f.key], default=f.default, help=f.help)
        elif f.kind == LIST:
            opt = click.Option([*spellings, f.key], multiple=True, help=f.help)
        else:
            opt = click.Option(
                [*spellings, f.key], type=_TYPES[f.kind], default=f.default, help=f.help
            )
        params.append(opt)
    cls = usage_command(program, lambda: [f.usage() for f in table])
    return cls(program, params=params, callback=lambda **kw: kw)


def parse(program: str, table: Sequence[Flag], argv: Sequence[str]) -> dict[str, Any] | None:
    """``argv`` (Go flag syntax) read against ``table``: {key: value}, LIST values as lists.

    None when the usage was shown (``-h``, ``-help``, ``--help``: Go's flag.PrintDefaults
    layout, internal/gousage.py, on stdout). Exits 2 with click's usage error for an unknown
    flag or a value of the wrong type, as Go's flag package exits 2 (its text differs).
    """
    bools = [f.name for f in table if f.kind == BOOL]
    cmd = _command(program, table)
    try:
        args = normalize_go_flags(list(argv), bools, program=program)
        ctx = cmd.make_context(program, args)
        with ctx:
            values: dict[str, Any] = cmd.invoke(ctx)
    except click.exceptions.Exit as e:  # --help
        if e.exit_code:
            sys.exit(e.exit_code)
        return None
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    for f in table:
        if f.kind == LIST:
            values[f.key] = list(values[f.key])
    return values


def log(text: str) -> None:
    """A line of Go's log package on stderr: ``2006/01/02 15:04:05 text`` (local time)."""
    stamp = time.strftime("%Y/%m/%d %H:%M:%S")
    sys.stderr.write(f"{stamp} {text}\n")
    sys.stderr.flush()


#: NSQ's internal/lg levels, as --log-level spells them, and their names in a line.
LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
_LEVEL_NAMES = {1: "DEBUG", 2: "INFO", 3: "WARNING", 4: "ERROR", 5: "FATAL"}
_app_log: list = ["", 2]  # prefix, least level


def set_app_log(prefix: str, level: str) -> None:
    """The prefix and least level of ``app_log`` (nsq_to_file's --log-prefix, --log-level);
    ValueError for a level NSQ does not know."""
    if level.lower() not in LOG_LEVELS:
        raise ValueError(level)
    _app_log[:] = [prefix, LOG_LEVELS[level.lower()]]


def app_log(level: int, text: str) -> None:
    """A line of NSQ's internal/lg on stderr: ``<prefix>2006/01/02 15:04:05.000000 INFO: text``,
    left out below the level set with set_app_log."""
    if level < _app_log[1]:
        return
    now = time.time()
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
    micros = int(now % 1 * 1e6)
    sys.stderr.write(f"{_app_log[0]}{stamp}.{micros:06d} {_LEVEL_NAMES[level]}: {text}\n")
    sys.stderr.flush()


def fail(text: str) -> NoReturn:
    """Go's log.Fatal: ``text`` logged on stderr, then exit 1."""
    log(text)
    sys.stdout.flush()
    sys.exit(1)


def print_version(program: str) -> None:
    """``-version``: the tool's name, nsqpy's version and the NSQ release whose flags it takes."""
    from .. import __version__

    click.echo(f"{program} v{NSQ_TOOLS_VERSION} (nsqpy {__version__})")


def parse_tool_flags(
    program: str, table: Sequence[Flag], argv: Sequence[str]
) -> dict[str, Any] | None:
    """``parse``, then ``-version``: None when the usage or the version line was printed (the
    tool then returns), else the values. The order of Go's tools that check ``-version`` first."""
    opts = parse(program, table, argv)
    if opts is None:
        return None
    if opts["version"]:
        print_version(program)
        return None
    return opts


def split_opt(opt: str) -> tuple[str, Any]:
    """A go-nsq ``--consumer-opt``/``--producer-opt`` value (go-nsq config_flag.go): ``name,value``
    -> (name, value); a bare ``name`` means boolean true."""
    name, comma, value = opt.partition(",")
    return (name, value) if comma else (name, True)


def require_topic_and_channel(opts: dict[str, Any]) -> None:
    """The consuming tools' first check: both --topic and --channel given, else exit 1."""
    if not opts["topic"] or not opts["channel"]:
        fail("--topic and --channel are required")


def require_positive(opts: dict[str, Any], *keys: str) -> None:
    """The Go tools' "--<flag> should be positive" (exit 1) for the first of ``keys`` (flag
    keys, ``http_client_connect_timeout``) whose value is 0 or less; an unset one (None)
    passes."""
    for key in keys:
        value = opts[key]
        if value is not None and value <= 0:
            fail(f"--{key.replace('_', '-')} should be positive")


def check_one_source(nsqd: Sequence[str], lookupd: Sequence[str], flag: str) -> None:
    """The Go tools' rule: ``--<flag>`` or ``--lookupd-http-address``, exactly one of them."""
    if not nsqd and not lookupd:
        fail(f"--{flag} or --lookupd-http-address required")
    if nsqd and lookupd:
        fail(f"use --{flag} or --lookupd-http-address not both")
