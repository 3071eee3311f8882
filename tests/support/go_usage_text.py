"""Go's usage text (flag.PrintDefaults) read back, and how to run the nine commands that print
it: shared by tests/daemon/test_go_usage.py and tests/interop/test_usage_vs_go.py."""

from __future__ import annotations

import re
import subprocess
import sys

from support.daemons import DAEMON_CWD

#: command name -> the python -m arguments that run it
COMMANDS = {
    "nsq_tail": ["nsqpy.tools", "nsq_tail"],
    "nsq_stat": ["nsqpy.tools", "nsq_stat"],
    "nsq_to_file": ["nsqpy.tools", "nsq_to_file"],
    "nsq_to_http": ["nsqpy.tools", "nsq_to_http"],
    "nsq_to_nsq": ["nsqpy.tools", "nsq_to_nsq"],
    "to_nsq": ["nsqpy.tools", "to_nsq"],
    "nsqpy-d": ["nsqpy"],
    "nsqpy-lookupd": ["nsqpy.lookupd"],
    "nsqpy-admin": ["nsqpy.admin"],
}

#: one flag of PrintDefaults: "  -name[ type]" then the help, on the same line after a tab
#: (a one-letter flag without a type) or on the next line after four spaces and a tab
_FLAG = re.compile(r"  -([a-z0-9-]+)(?: (\S+))?(?:\t|\n    \t)(.*)\n")


def usage(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command ``name`` with ``args`` (a help spelling, maybe after other flags)."""
    return subprocess.run(
        [sys.executable, "-m", *COMMANDS[name], *args],
        cwd=DAEMON_CWD,
        capture_output=True,
        text=True,
        timeout=60,
    )


def parse_usage(text: str) -> dict[str, tuple[str | None, str]]:
    """The flags of a usage text: name -> (type name, help line); AssertionError when a part
    of the text is not in PrintDefaults' layout."""
    first, _, rest = text.partition("\n")
    assert re.fullmatch(r"Usage of \S+:", first), first
    flags: dict[str, tuple[str | None, str]] = {}
    pos = 0
    while pos < len(rest):
        m = _FLAG.match(rest, pos)
        assert m is not None, f"not a flag entry at {rest[pos : pos + 120]!r}"
        flags[m.group(1)] = (m.group(2), m.group(3))
        pos = m.end()
    return flags
