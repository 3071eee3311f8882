"""The flags that ``-h`` lists, ours next to Go's (NSQ v1.3.0, tests/support/gobin.py finds them):
the six tools list the same names; a daemon lists every name of its Go daemon except the few it
refuses or never had (named below), plus its own extras. Names only: help texts differ."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.daemons import DAEMON_CWD
from support.go_usage_text import COMMANDS, parse_usage
from support.gobin import require

#: our command -> Go's program
GO_NAMES = {
    "nsq_tail": "nsq_tail",
    "nsq_stat": "nsq_stat",
    "nsq_to_file": "nsq_to_file",
    "nsq_to_http": "nsq_to_http",
    "nsq_to_nsq": "nsq_to_nsq",
    "to_nsq": "to_nsq",
    "nsqpy-d": "nsqd",
    "nsqpy-lookupd": "nsqlookupd",
    "nsqpy-admin": "nsqadmin",
}

#: Go flags a daemon does not list: nsqd's deprecated alias of --node-id, and nsqadmin's
#: Graphite flags (refused by name: nsqpy-admin has no Graphite)
NOT_LISTED = {"nsqpy-d": {"worker-id"}, "nsqpy-admin": {"graphite-url", "proxy-graphite"}}


def go_binary(program: str) -> str:
    """Go's ``program`` (gobin checks the versions of nsqd, nsqlookupd and the tools that
    answer --version; the others are taken from next to Go's nsq_tail)."""
    if program in ("nsqd", "nsqlookupd", "nsq_tail"):
        return require(program)
    path = Path(require("nsq_tail")).parent / program
    if not os.access(path, os.X_OK):
        pytest.skip(f"Go {program} not found next to Go nsq_tail ({path})")
    return str(path)


def flag_names(cmd: list[str]) -> set[str]:
    r = subprocess.run(cmd, cwd=DAEMON_CWD, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    text = r.stdout + r.stderr  # Go's flag package writes its usage to stderr
    return set(parse_usage(text[text.index("Usage of ") :]))


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_lists_go_flags(name: str) -> None:
    go = flag_names([go_binary(GO_NAMES[name]), "-h"])
    ours = flag_names([sys.executable, "-m", *COMMANDS[name], "-h"])
    if not name.startswith("nsqpy-"):
        assert ours == go
    else:
        assert go - NOT_LISTED.get(name, set()) <= ours, sorted(go - ours)
