"""contrib/*.cfg.example against the option tables they document: every option of the daemon
is in its example exactly once as a commented line ``# key = default`` under a ``## ...``
description, the defaults written there are the table's (read back through the daemon's own
config file path), no key in them is one the daemon lacks, and the options nsqpy adds to
NSQ's are the ones marked [nsqpy-only]. The examples loading in the running daemons is
tests/daemon/test_example_configs.py's."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import click
import pytest
from support.daemons import ROOT

from nsqpy.admin.options import TABLE as ADMIN
from nsqpy.internal.optiontable import Kind, Table
from nsqpy.lookupd.options import TABLE as LOOKUPD
from nsqpy.options import TABLE as NSQD

EXAMPLES = {
    "nsqpy-d": (NSQD, ROOT / "contrib" / "nsqpy-d.cfg.example"),
    "nsqpy-lookupd": (LOOKUPD, ROOT / "contrib" / "nsqpy-lookupd.cfg.example"),
    "nsqpy-admin": (ADMIN, ROOT / "contrib" / "nsqpy-admin.cfg.example"),
}
_COMMENTED = re.compile(r"^# ([a-z0-9_]+) = (.*)$")


def _commented_options(path: Path) -> list[tuple[str, str, str]]:
    """(key, TOML value, description line above it) of each ``# key = value`` line."""
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _COMMENTED.match(line)
        if m:
            out.append((m.group(1), m.group(2), lines[i - 1] if i else ""))
    return out


def _host_dependent(table: Table) -> set[str]:
    """cfg names whose default the host decides (node id, broadcast address)."""
    return {str(r.cfg) for r in table.fields if r.factory is not None and r.kind is not Kind.LIST}


def _options(table: Table, cfg_file: Path | None) -> Any:
    """The daemon's options with no flags, from ``cfg_file`` (the --config path) if given."""
    cmd = click.command()(table.click_options(lambda **kw: None))
    ctx = cmd.make_context(table.program, [])
    kw = dict(ctx.params)
    if cfg_file is not None:
        kw["config"] = str(cfg_file)
        with ctx:
            table.apply_file(ctx, kw)
    return table.from_flags(kw)


@pytest.mark.parametrize("program", sorted(EXAMPLES))
def test_every_option_is_in_the_example_once_with_a_description(program: str) -> None:
    table, path = EXAMPLES[program]
    found = _commented_options(path)
    keys = [k for k, _, _ in found]
    assert sorted(keys) == sorted(str(r.cfg) for r in table.fields)
    for key, _, description in found:
        assert description.startswith("## ") and len(description) > 8, key


@pytest.mark.parametrize("program", sorted(EXAMPLES))
def test_the_commented_defaults_are_the_daemons(program: str, tmp_path: Path) -> None:
    table, path = EXAMPLES[program]
    uncommented = tmp_path / "defaults.cfg"
    uncommented.write_text("".join(f"{k} = {v}\n" for k, v, _ in _commented_options(path)))
    from_file = _options(table, uncommented)
    default = _options(table, None)
    skip = {str(r.field) for r in table.fields if str(r.cfg) in _host_dependent(table)}
    for f in dataclasses.fields(table.cls):
        if f.name not in skip:
            assert getattr(from_file, f.name) == getattr(default, f.name), f.name


@pytest.mark.parametrize("program", sorted(EXAMPLES))
def test_nsqpys_own_options_are_marked(program: str) -> None:
    table, path = EXAMPLES[program]
    own = {str(r.cfg) for r in table.fields if r.help.startswith("[nsqpy]")}
    marked = {k for k, _, d in _commented_options(path) if d.startswith("## [nsqpy-only]")}
    assert own and marked == own


@pytest.mark.parametrize("program", sorted(EXAMPLES))
def test_the_example_as_written_sets_only_known_keys(program: str) -> None:
    import tomllib

    table, path = EXAMPLES[program]
    with path.open("rb") as f:
        values = tomllib.load(f)
    assert set(values) <= set(table.cfg_to_flag)
    _options(table, path)  # and the daemon's config path takes every value
