"""One option table per daemon, from which its command line, config file and /config names come.

Strategy: a daemon's options dataclass (nsqpy.options.Options, lookupd.options.LookupdOptions,
admin.options.AdminOptions) *is* its table. Each field that is an option is declared with one
of the row builders below (option, size, duration, boolean, repeated, computed, log_level,
log_prefix, log_format); the builder stores the row (flag name, kind, default, help, cfg
name, how the flag's value becomes the field's) in the field's metadata, so an option is
written exactly once and keeps its static type for mypy and IDEs. A plain field without a
row is an internal setting: no flag, no cfg name. ``Table(cls, ...)`` reads the rows back in
declaration order and generates the rest:

- the click options, in row order (the common --config, --version, --log-level, --log-prefix
  and --verbose of every NSQ daemon included, and nsqpy's --log-format), and the -h/--help
  usage in Go's layout (internal/gousage.py, via ``command_class``);
- the flags that goflag rewrites as Go booleans, and the refused not-yet-built flags;
- ``from_flags``: click's parsed flags -> the dataclass;
- the cfg names (go-options' names: the field name, without ``_ms`` for a duration, unless
  the row names another) for --config TOML files (``apply_file``) and GET/PUT /config/<opt>
  (``value_of_cfg``, answering as Go's JSON has it).

A daemon's flags that set no field of their own (nsqd's --tcp-port shorthand) are rows made
with ``flag`` and given to Table with the field they follow in --help.

Units: a DURATION field holds integer milliseconds and its name ends in ``_ms`` (the flag and
a config file take Go's syntax, "1m30s", or an integer of milliseconds); a SIZE field holds
bytes. Sources: nsq apps/*/options.go and main.go (flags), mreiferson/go-options (cfg names,
config resolution: command line, then config file, then default)."""

from __future__ import annotations

import dataclasses
import enum
import gc
import logging
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .godur import format_go_duration_ms, parse_go_duration_ms
from .lg import LOG_FORMATS, LOG_LEVEL_NUMBERS, LOG_LEVELS, fields, setup_logging

if TYPE_CHECKING:
    from .gousage import UsageFlag


class Kind(enum.Enum):
    """What a flag's value is, on the command line and in its field."""

    STR = "string"
    INT = "int"
    SIZE = "size"  #: an int of bytes (Go's flag.Int64 of a byte count)
    BOOL = "bool"  #: --name/--no-name; Go's -name, -name=false
    SWITCH = "switch"  #: --name only (--version)
    DURATION = "duration"  #: a Go duration on the command line; integer ms in the field
    LIST = "list"  #: a repeatable flag; a list in the field
    LOG_LEVEL = "log level"  #: lg's level names, any case; lower case in the field
    LOG_FORMAT = "log format"  #: lg.LOG_FORMATS, any case; lower case in the field


_META = "nsqpy.optiontable"


class _Same:
    """The sentinel of Row.flag_default: the flag's default is the field's."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


class Row:
    """One option of a daemon: its flag, how its value reads and shows, and its field.

    ``default`` is the field's default in the field's unit (ms for DURATION, bytes for SIZE);
    ``factory`` makes it instead when it depends on the host (then --help shows none and an
    empty flag keeps it). ``flag_default`` is what --help shows and click starts from when it
    is not the field's default. ``parse`` turns click's value into the field's (ValueError ->
    a usage error); ``to_json`` turns the field's value into what /config answers. ``cfg``
    and ``field`` are filled in by Table (``named``); ``config_api`` False keeps the row out
    of /config. Read-only once made (AttributeError on assignment); a plain class with slots,
    not a frozen dataclass: a daemon makes a hundred of them at every start.
    """

    __slots__ = (
        "flag",
        "kind",
        "help",
        "default",
        "factory",
        "flag_default",
        "parse",
        "to_json",
        "cfg",
        "field",
        "hidden",
        "bare_true",
        "config_api",
    )

    flag: str
    kind: Kind
    help: str
    default: Any
    factory: Callable[[], Any] | None
    flag_default: Any
    parse: Callable[[Any], Any] | None
    to_json: Callable[[Any], Any] | None
    cfg: str | None
    field: str | None
    hidden: bool
    bare_true: bool
    config_api: bool

    def __init__(
        self,
        flag: str,
        kind: Kind,
        help: str,
        default: Any = None,
        factory: Callable[[], Any] | None = None,
        flag_default: Any = SAME,
        parse: Callable[[Any], Any] | None = None,
        to_json: Callable[[Any], Any] | None = None,
        cfg: str | None = None,
        field: str | None = None,
        hidden: bool = False,
        bare_true: bool = False,
        config_api: bool = True,
    ) -> None:
        values = (
            *(flag, kind, help, default, factory, flag_default, parse, to_json, cfg, field),
            *(hidden, bare_true, config_api),
        )
        for name, value in zip(Row.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Row is read-only: cannot assign to {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in Row.__slots__)
        return f"Row({shown})"

    def named(self, field: str, cfg: str) -> Row:
        """This row bound to its dataclass field ``field`` and its cfg name ``cfg``."""
        values = [getattr(self, n) for n in Row.__slots__]
        values[8:10] = (cfg, field)
        return Row(*values)

    @property
    def param(self) -> str:
        """click's parameter name (and the key of its parsed flags): the flag, snake_case."""
        return self.flag.replace("-", "_")

    def click_default(self) -> Any:
        """The default click starts from and --help shows (None: none shown)."""
        if self.flag_default is not SAME:
            return self.flag_default
        if self.factory is not None:
            return None
        if self.kind is Kind.DURATION:
            return format_go_duration_ms(self.default)
        return self.default

    def usage(self) -> UsageFlag:
        """This row as Go's ``-h`` shows it (internal/gousage.py): Go's type name, and the
        default unless it is the type's zero value; a host-dependent default is made now."""
        from .gousage import UsageFlag  # --help only

        default = self.click_default()
        if default is None and self.factory is not None and self.kind is not Kind.LIST:
            default = self.factory()
        shown: str | None
        if self.kind in (Kind.BOOL, Kind.SWITCH):
            shown = "true" if default else None
        elif self.kind is Kind.LOG_LEVEL:
            shown = str(default).upper()  # lg.LogLevel's String()
        elif self.kind is Kind.LIST:
            shown = None
        elif self.kind is Kind.DURATION:
            shown = None if default in (None, "0s") else str(default)
        else:
            shown = None if default in (None, "", 0) else str(default)
        return UsageFlag(
            self.flag,
            _GO_TYPE_NAMES[self.kind],
            shown,
            self.help,
            self.kind in (Kind.STR, Kind.LOG_FORMAT),
        )

    def click_option(self) -> Callable[[Any], Any]:
        """The click.option decorator of this row."""
        import click

        from .goflag import go_duration_type

        name = f"--{self.flag}"
        if self.kind is Kind.BOOL:
            return click.option(
                f"{name}/--no-{self.flag}", default=self.default, help=self.help, hidden=self.hidden
            )
        if self.kind is Kind.SWITCH:
            return click.option(name, is_flag=True, help=self.help)
        if self.kind is Kind.LIST:
            return click.option(name, multiple=True, type=str, help=self.help)
        typ: Any = {
            Kind.STR: str,
            Kind.INT: int,
            Kind.SIZE: int,
            Kind.DURATION: go_duration_type(),
            Kind.LOG_LEVEL: click.Choice(sorted(LOG_LEVELS), case_sensitive=False),
            Kind.LOG_FORMAT: click.Choice(LOG_FORMATS, case_sensitive=False),
        }[self.kind]
        default = self.click_default()
        return click.option(
            name,
            type=typ,
            default=default,
            show_default=None if default is None else True,
            help=self.help,
            hidden=self.hidden,
        )


#: Go's names of the flags' value types in the usage text (lg.LogLevel and the repeatable
#: flags are flag.Value types: "value").
_GO_TYPE_NAMES = {
    Kind.STR: "string",
    Kind.INT: "int",
    Kind.SIZE: "int",
    Kind.BOOL: "",
    Kind.SWITCH: "",
    Kind.DURATION: "duration",
    Kind.LIST: "value",
    Kind.LOG_LEVEL: "value",
    Kind.LOG_FORMAT: "string",
}


class OptionFields:
    """The base of a daemon's options dataclass, declared ``@dataclass(init=False, repr=False,
    eq=False)``: keyword ``__init__``, ``__repr__`` and ``__eq__`` that behave as the ones
    ``@dataclass`` generates (fields in declaration order, each default or factory's value,
    TypeError for an unknown or missing keyword; ``Options(log_level='info', ...)``; equal
    when of the same class with equal fields; unhashable), written once here instead of
    generated and compiled per class at import: for the hundred fields of nsqd's options that
    compile is milliseconds of every daemon's start-up."""

    def __init__(self, **values: Any) -> None:
        cls = type(self)
        spec = cls.__dict__.get("_init_spec")
        if spec is None:
            spec = tuple(
                (f.name, f.default, f.default_factory)
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if f.init
            )
            cls._init_spec = spec  # type: ignore[attr-defined]
        missing = dataclasses.MISSING
        for name, default, factory in spec:
            if name in values:
                value = values.pop(name)
            elif factory is not missing:
                value = factory()
            elif default is not missing:
                value = default
            else:
                raise TypeError(f"{cls.__qualname__}.__init__() missing argument: {name!r}")
            setattr(self, name, value)
        if values:
            raise TypeError(
                f"{cls.__qualname__}.__init__() got an unexpected keyword argument"
                f" {next(iter(values))!r}"
            )

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.repr
        )
        return f"{type(self).__qualname__}({shown})"

    def _compared(self) -> tuple[Any, ...]:
        return tuple(
            getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.compare
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, OptionFields)
        return self._compared() == other._compared()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq


def _field(row: Row) -> Any:
    """A dataclass field carrying ``row``: its default, or its factory."""
    meta = {_META: row}
    if row.factory is not None:
        return dataclasses.field(default_factory=row.factory, metadata=meta)
    return dataclasses.field(default=row.default, metadata=meta)


def _scalar_kind(value: Any) -> Kind:
    return Kind.INT if isinstance(value, int) and not isinstance(value, bool) else Kind.STR


# ------------------------------------------------------------------------------ row builders
# Each returns a dataclass field (typed Any so that the annotation gives the field's type).


def option(
    flag: str,
    default: str | int,
    help: str,
    *,
    cfg: str | None = None,
    flag_default: Any = SAME,
    parse: Callable[[Any], Any] | None = None,
    bare_true: bool = False,
    config_api: bool = True,
) -> Any:
    """A string or int option (``--flag TEXT``/``--flag INTEGER``, default shown in --help).

    The kind follows ``flag_default`` when given (the flag's value, ``parse``d into the field:
    nsqd's --tls-required is the string "false" on the command line, 0 in the field), else the
    field's ``default``. ``bare_true``: Go's IsBoolFlag, a bare ``-flag`` means ``-flag=true``.
    ``config_api`` False: GET/PUT /config does not know it (nsqpy-admin's own options).
    """
    kind = _scalar_kind(default if flag_default is SAME else flag_default)
    return _field(
        Row(
            flag,
            kind,
            help,
            default,
            cfg=cfg,
            flag_default=flag_default,
            parse=parse,
            bare_true=bare_true,
            config_api=config_api,
        )
    )


def size(flag: str, default: int, help: str, *, cfg: str | None = None) -> Any:
    """A byte count (``--flag INTEGER``, default shown): the field holds bytes."""
    return _field(Row(flag, Kind.SIZE, help, default, cfg=cfg))


def duration(
    flag: str, default_ms: int, help: str, *, cfg: str | None = None, config_api: bool = True
) -> Any:
    """A Go duration flag (``--flag DURATION``, default shown as Go prints it, "1m0s"): the
    field holds integer milliseconds and its name ends in ``_ms``; /config answers ns."""
    return _field(Row(flag, Kind.DURATION, help, default_ms, cfg=cfg, config_api=config_api))


def boolean(flag: str, default: bool, help: str, *, cfg: str | None = None) -> Any:
    """A boolean flag: ``--flag/--no-flag``, and Go's ``-flag``, ``-flag=false``."""
    return _field(Row(flag, Kind.BOOL, help, default, cfg=cfg))


def repeated(
    flag: str,
    help: str,
    *,
    cfg: str | None = None,
    parse: Callable[[Any], Any] = list,
    to_json: Callable[[Any], Any] | None = None,
) -> Any:
    """A repeatable flag (``--flag X --flag Y``): the field is a list, empty by default;
    ``parse`` turns click's tuple of strings into it (default: the list of them)."""
    return _field(Row(flag, Kind.LIST, help, factory=list, cfg=cfg, parse=parse, to_json=to_json))


def computed(
    flag: str, typ: type[str] | type[int], factory: Callable[[], Any], help: str, *, cfg: str = ""
) -> Any:
    """An option whose default depends on the host (nsqd's --node-id, --broadcast-address):
    ``factory()`` makes it, --help shows none, and an empty flag (or none) keeps it."""
    kind = Kind.INT if typ is int else Kind.STR
    return _field(Row(flag, kind, help, factory=factory, cfg=cfg or None))


def log_level() -> Any:
    """Every NSQ daemon's --log-level: lg's names in any case, lower case in the field,
    lg.LogLevel's number in /config."""
    return _field(
        Row(
            "log-level",
            Kind.LOG_LEVEL,
            "set log verbosity: debug, info, warn, error, or fatal",
            "info",
            parse=str.lower,
        )
    )


def log_prefix(prefix: str) -> Any:
    """Every NSQ daemon's --log-prefix, with that daemon's default (``"[nsqd] "``)."""
    return _field(Row("log-prefix", Kind.STR, "log message prefix", prefix))


def log_format() -> Any:
    """nsqpy's --log-format of every daemon: "text" (lg's lines, the default) or "json" (one
    JSON object per line, internal/lg.py); unknown to /config, as Go's daemons have no such
    option."""
    return _field(
        Row(
            "log-format",
            Kind.LOG_FORMAT,
            "[nsqpy] log line format: text (NSQ's) or json (one object per line)",
            "text",
            parse=str.lower,
            config_api=False,
        )
    )


# Options several daemons declare alike (the same flag, default and help in each Go daemon).


def listen_address(protocol: str, default: str) -> Any:
    """nsqlookupd's and nsqadmin's --tcp-address/--http-address (``protocol`` "TCP" or
    "HTTP"), with that daemon's default ("0.0.0.0:4161"). nsqd words its own."""
    return option(
        f"{protocol.lower()}-address", default, f"<addr>:<port> to listen on for {protocol} clients"
    )


def http_client_connect_timeout() -> Any:
    """nsqd's and nsqadmin's --http-client-connect-timeout, 2s in both."""
    return duration("http-client-connect-timeout", 2_000, "timeout for HTTP connect")


def http_client_request_timeout() -> Any:
    """nsqd's and nsqadmin's --http-client-request-timeout, 5s in both."""
    return duration("http-client-request-timeout", 5_000, "timeout for HTTP request")


def statsd_prefix(help: str) -> Any:
    """nsqd's and nsqadmin's --statsd-prefix: one default, since nsqadmin's must match
    nsqd's; each daemon words its help."""
    return option("statsd-prefix", "nsq.%s", help)


def statsd_interval(help: str) -> Any:
    """nsqd's and nsqadmin's --statsd-interval (60s): one default, since nsqadmin's must match
    nsqd's; each daemon words its help."""
    return duration("statsd-interval", 60_000, help)


def flag(name: str, kind: Kind, help: str, *, default: Any = None, hidden: bool = False) -> Row:
    """A flag with no field of its own (read from the parsed flags by the daemon's cli; no
    cfg name): for Table's ``flags_after``."""
    return Row(name, kind, help, default, hidden=hidden)


#: The flags every NSQ daemon has beside --log-level and --log-prefix (apps/*/main.go).
CONFIG = flag("config", Kind.STR, "path to config file", default="")
VERSION = flag("version", Kind.SWITCH, "print version string", default=False)
VERBOSE = flag("verbose", Kind.BOOL, "[deprecated] has no effect, use --log-level", default=False)


_REFUSED: Any = object()  # what _fast_convert gives for a value click's type refuses


def _fast_convert(row: Row, value: Any) -> Any:
    """``value`` as the click type of ``row`` (Row.click_option) converts it: str as it is,
    int(), a Go duration in ms, a choice case-insensitively (as the choice is spelled in the
    list); _REFUSED where click would report an error."""
    kind = row.kind
    if value is None:
        return value
    if kind in (Kind.STR, Kind.LIST):
        return str(value)
    if kind in (Kind.INT, Kind.SIZE):
        try:
            return int(value)
        except (TypeError, ValueError):
            return _REFUSED
    if kind is Kind.DURATION:
        if isinstance(value, int):
            return value
        try:
            return parse_go_duration_ms(str(value))
        except ValueError:
            return _REFUSED
    if kind in (Kind.LOG_LEVEL, Kind.LOG_FORMAT):
        choices = sorted(LOG_LEVELS) if kind is Kind.LOG_LEVEL else LOG_FORMATS
        folded = str(value).casefold()
        found = [c for c in choices if c.casefold() == folded]
        return found[0] if len(found) == 1 else _REFUSED
    return _REFUSED


def _fast_default(row: Row) -> Any:
    """What click's option of ``row`` holds when its flag is not given (its default, through
    its type); _REFUSED when that is not known here."""
    if row.kind is Kind.LIST:
        return ()
    default = row.click_default()
    if row.kind in (Kind.BOOL, Kind.SWITCH):
        return bool(default) if isinstance(default, bool) or default is None else _REFUSED
    return _fast_convert(row, default)


class ConfigError(ValueError):
    """A config file that cannot be used (unreadable, bad TOML, bad value)."""


def load(path: str) -> dict[str, Any]:
    """The TOML file's keys and values (ConfigError with the reason when it cannot be read)."""
    import tomllib  # only when a daemon is given --config

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"open {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(e)) from None


class Table:
    """A daemon's options, generated from the rows of ``cls`` (see the module docstring).

    ``program`` names the daemon in errors ("nsqpy-d"), ``go_name`` the Go daemon it stands
    in for ("nsqd"). ``flags_after`` maps a field name to the field-less flags that follow
    its row in --help. ``unimplemented``: Go flags refused by name on the command line (and,
    with ``refuse_in_config``, as config file keys). Raises ValueError when the rows
    contradict each other (a flag or cfg name twice, a duration field without ``_ms``).
    """

    def __init__(
        self,
        cls: type,
        *,
        program: str,
        go_name: str,
        flags_after: Mapping[str, Sequence[Row]] | None = None,
        unimplemented: Collection[str] = (),
        refuse_in_config: bool = True,
    ) -> None:
        self.cls = cls
        self.program = program
        self.go_name = go_name
        self.unimplemented = frozenset(unimplemented)
        self.config_refused = self.unimplemented if refuse_in_config else frozenset()
        after = dict(flags_after or {})
        rows: list[Row] = []
        for f in dataclasses.fields(cls):
            row = f.metadata.get(_META)
            if row is None:
                continue  # an internal setting: no flag, no cfg name
            if row.kind is Kind.DURATION and not f.name.endswith("_ms"):
                raise ValueError(f"{cls.__name__}.{f.name}: a duration field ends in _ms")
            cfg = row.cfg or (f.name[:-3] if row.kind is Kind.DURATION else f.name)
            row = row.named(f.name, cfg)
            if f.name == "log_level":
                rows += (CONFIG, VERSION)
            rows.append(row)
            if f.name == "log_prefix":
                rows.append(VERBOSE)
            rows += after.pop(f.name, ())
        if after:
            raise ValueError(f"flags_after names no option field: {sorted(after)}")
        flags = [r.flag for r in rows]
        if len(set(flags)) != len(flags) or not {"config", "version"} <= set(flags):
            raise ValueError(f"{cls.__name__}: a flag twice, or no log_level/log_prefix rows")
        self.rows: tuple[Row, ...] = tuple(rows)
        #: the rows that set a field, in --help order
        self.fields: tuple[Row, ...] = tuple(r for r in rows if r.field is not None)
        self.cfg_to_flag: dict[str, str] = {r.cfg: r.flag for r in self.fields if r.cfg}
        if len(self.cfg_to_flag) != len(self.fields):
            raise ValueError(f"{cls.__name__}: a cfg name twice")
        #: what GET/PUT /config/<opt> knows, by cfg name
        self.by_cfg: dict[str, Row] = {r.cfg: r for r in self.fields if r.cfg and r.config_api}
        self.cfg_names: tuple[str, ...] = tuple(self.by_cfg)
        self.bool_flags = frozenset(r.flag for r in rows if r.kind in (Kind.BOOL, Kind.SWITCH))
        self.bare_true = frozenset(r.flag for r in rows if r.bare_true)

    # ------------------------------------------------------------------ the command line

    def click_options(self, f: Any) -> Any:
        """Decorate a click command with every row's option, in --help order."""
        for row in reversed(self.rows):
            f = row.click_option()(f)
        return f

    def usage_flags(self) -> list[UsageFlag]:
        """Every visible flag as Go's ``-h`` lists it."""
        return [r.usage() for r in self.rows if not r.hidden]

    @property
    def command_class(self) -> type:
        """The click command class for ``click.command(cls=...)`` whose ``-h``, ``-help`` and
        ``--help`` print Go's usage of this daemon's flags (internal/gousage.py)."""
        from .gousage import usage_command

        return usage_command(self.program, self.usage_flags)

    def normalize(self, argv: list[str]) -> list[str]:
        """``argv`` in Go flag syntax rewritten for click (goflag.normalize_go_flags);
        click.UsageError for a refused flag or a bad boolean."""
        from .goflag import normalize_go_flags

        return normalize_go_flags(
            argv, self.bool_flags, self.unimplemented, self.bare_true, program=self.program
        )

    def main(
        self,
        command: Callable[[], Any],
        argv: list[str] | None = None,
        fast: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Run the click command ``command()`` on ``argv`` (sys.argv[1:] when None) after the
        Go rewrite; a refused flag prints "<program>: <reason>" and exits 2.

        With ``fast``, a plain command line (fast_flags) skips click: ``fast(flags)`` runs
        the command's work with the flags click would have parsed, and returns False, having
        done nothing, when click must parse after all (a value it refuses: click says why).
        The cyclic collector is off meanwhile: the daemon's start creates nothing it could
        free (internal/daemon.py turns it on once the daemon serves)."""
        gc.disable()
        try:
            self._main(command, argv, fast)
        finally:
            gc.enable()

    def _main(
        self,
        command: Callable[[], Any],
        argv: list[str] | None,
        fast: Callable[[dict[str, Any]], bool] | None,
    ) -> None:
        args = sys.argv[1:] if argv is None else argv
        if fast is not None:
            kw = self.fast_flags(args)
            if kw is not None:
                try:
                    if fast(kw):
                        return
                except (KeyboardInterrupt, EOFError):
                    sys.stderr.write("\nAborted!\n")  # as click's main
                    sys.exit(1)
        import click

        try:
            args = self.normalize(args)
        except click.UsageError as e:
            click.echo(f"{self.program}: {e.format_message()}", err=True)
            sys.exit(2)
        command().main(args=args, prog_name=self.program)

    def fast_flags(self, argv: list[str]) -> dict[str, Any] | None:
        """click's parsed flags for a plain command line, found without importing click (it
        costs a daemon's start-up more than any other module): after the Go rewrite, every
        argument is ``--flag=value`` or ``--flag value`` of a row (a boolean: bare, or
        ``--no-flag``), each value converted as the row's click type converts it, and every
        flag not given has its click default. None for anything else (-h, --version,
        --config, a refused flag, a value the type refuses, an argument that is no flag, a
        shell completion request): click then parses the command line, and reports it."""
        env = "_" + self.program.replace("-", "_").upper() + "_COMPLETE"
        if env in os.environ:
            return None
        try:
            args = self.normalize(argv)
        except Exception:  # click.UsageError: click's path prints it
            return None
        rows = {r.flag: r for r in self.rows}
        kw: dict[str, Any] = {}
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if not arg.startswith("--"):
                return None
            name, eq, text = arg[2:].partition("=")
            row = rows.get(name)
            if row is None and not eq and name.startswith("no-"):
                row = rows.get(name[3:])
                if row is None or row.kind is not Kind.BOOL:
                    return None
                kw[row.param] = False
                continue
            if row is None or row.kind is Kind.SWITCH:
                return None
            if row.kind is Kind.BOOL:
                if eq:
                    return None
                kw[row.param] = True
                continue
            if not eq:
                if i >= len(args) or args[i].startswith("-"):
                    return None
                text = args[i]
                i += 1
            value = _fast_convert(row, text)
            if value is _REFUSED:
                return None
            if row.kind is Kind.LIST:
                kw[row.param] = (*kw.get(row.param, ()), value)
            else:
                kw[row.param] = value
        if kw.get("config"):
            return None
        for row in self.rows:
            if row.param not in kw:
                value = _fast_default(row)
                if value is _REFUSED:
                    return None
                kw[row.param] = value
        return kw

    def from_flags(self, kw: Mapping[str, Any]) -> Any:
        """The dataclass from click's parsed flags: each row's value ``parse``d (ValueError ->
        click.UsageError); a computed row given empty or not at all keeps its factory's."""
        values: dict[str, Any] = {}
        for row in self.fields:
            value = kw[row.param]
            if row.factory is not None and row.kind is not Kind.LIST and value in (None, ""):
                continue
            if row.parse is not None:
                try:
                    value = row.parse(value)
                except ValueError as e:
                    import click

                    raise click.UsageError(str(e)) from None
            values[str(row.field)] = value
        return self.cls(**values)

    def setup_logging(self, opts: Any) -> None:
        """Log as ``opts`` asks (--log-prefix, --log-level, --log-format; lg.setup_logging),
        naming the Go daemon in JSON lines."""
        setup_logging(
            opts.log_prefix,
            opts.log_level,
            log_format=getattr(opts, "log_format", "text"),
            daemon=self.go_name,
        )

    def start(self, kw: dict[str, Any], version: Callable[[], str]) -> bool:
        """The start every NSQ daemon's command shares: with --version print ``version()`` and
        return False (nothing more to do); else fill ``kw`` from --config (``apply_file``) and
        return True. A config file that cannot be used is logged as FATAL and exits 1, as the
        Go daemons do."""
        import click

        if kw["version"]:
            click.echo(version())
            return False
        try:
            self.apply_file(click.get_current_context(), kw)
        except ConfigError as e:
            setup_logging(
                kw["log_prefix"],
                kw["log_level"],
                log_format=str(kw.get("log_format") or "text").lower(),
                daemon=self.go_name,
            )
            logging.getLogger("nsqpy").critical(
                "failed to load config file %s - %s",
                kw["config"],
                e,
                extra=fields(config=kw["config"], error=str(e)),
            )
            sys.exit(1)
        return True

    # ------------------------------------------------------------------ cfg names

    def flag_of_cfg(self, cfg_name: str) -> str:
        """The flag of a cfg name (``mem_queue_size`` -> ``mem-queue-size``, nsqd's ``id`` ->
        ``node-id``); a name no row has maps to itself with dashes."""
        return self.cfg_to_flag.get(cfg_name) or cfg_name.replace("_", "-")

    def apply_file(self, ctx: Any, kw: dict[str, Any]) -> None:
        """Fill ``kw`` (click's parsed flags) from the TOML file named by --config, for every
        flag not given on the command line (go-options' Resolve: command line, then config,
        then default). Keys are cfg names (a key naming no flag is ignored, as Go's daemons
        do; a refused flag's key raises ConfigError, as do values of the wrong type)."""
        import click
        from click.core import ParameterSource

        path = kw.get("config") or ""
        if not path:
            return
        params = {p.name: p for p in ctx.command.params}
        for key, value in load(path).items():
            flag = self.flag_of_cfg(key)
            if flag in self.config_refused:
                raise ConfigError(
                    f"option {key} (--{flag}) is an {self.go_name} option that {self.program}"
                    " does not implement yet"
                )
            name = flag.replace("-", "_")
            param = params.get(name)
            if param is None or name in ("config", "version"):
                continue  # Go's daemons ignore keys they have no option for
            if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
                continue
            if getattr(param, "multiple", False) and not isinstance(value, list):
                value = [value]
            if isinstance(value, list) and not getattr(param, "multiple", False):
                raise ConfigError(f"invalid value {value!r} for {key}: not a list option")
            try:
                kw[name] = param.type_cast_value(ctx, value)
            except click.BadParameter as e:
                raise ConfigError(f"invalid value {value!r} for {key}: {e.message}") from None

    def value_of_cfg(self, opts: Any, cfg_name: str) -> tuple[Any, bool]:
        """Go's getOptByCfgName: the option's value as Go's JSON has it (a duration in integer
        nanoseconds, the log level as lg.LogLevel's number), and whether /config knows the
        name."""
        row = self.by_cfg.get(cfg_name)
        if row is None:
            return None, False
        value = getattr(opts, str(row.field))
        if row.kind is Kind.DURATION:
            return int(value) * 1_000_000, True
        if row.kind is Kind.LOG_LEVEL:
            return LOG_LEVEL_NUMBERS.get(str(value).lower(), 2), True
        if row.kind is Kind.BOOL:
            return bool(value), True
        if row.to_json is not None and value is not None:
            return row.to_json(value), True
        return value, True
