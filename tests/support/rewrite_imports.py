"""Rewrites a test or bench file's imports of the helpers that used to sit loose in tests/ (and
of tests/conftest.py's non-fixture names) to the tests/support package. Run it on a file
written against the old layout; a file already on the new one is left as it is:

    python tests/support/rewrite_imports.py FILE... && ruff check --fix --select I FILE...

then rewrap what ruff reports as too long (a path in a docstring grows by "support/").

``from conftest import ROOT, RawClient, wait_for`` becomes one import per new home
(support.daemons, support.raw_client, nsqpy.testing); ``from gobin import require`` becomes
``from support.gobin import require``; ``import gobin`` becomes ``from support import gobin``;
a path written in a docstring or comment (``tests/support/gobin.py``) gets its new folder."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

#: The helper modules that moved from tests/ to tests/support/ with their names unchanged.
MOVED = (
    "admin_cluster",
    "client_http_checks",
    "go_usage_text",
    "listeners",
    "prometheus_server",
    "etcd_server",
    "gobin",
    "hypothesis_budget",
    "netlab",
    "nsq_connection",
    "replication_cluster",
    "unixsock",
)

#: tests/conftest.py's non-fixture names and the module each one lives in now.
CONFTEST_NAMES = {
    "ROOT": "support.daemons",
    "DAEMON_CWD": "support.daemons",
    "Daemon": "support.daemons",
    "Lookupd": "support.daemons",
    "RawClient": "support.raw_client",
    "pack_len": "support.raw_client",
    "wait_for": "nsqpy.testing",
}

_MODULES = "|".join(MOVED)
_FROM = re.compile(rf"^(\s*)from ({_MODULES}) import\b", re.M)
_IMPORT = re.compile(rf"^(\s*)import ({_MODULES})\b", re.M)
_PATH = re.compile(rf"\btests/({_MODULES})\.py\b")


def _conftest_imports(text: str) -> str:
    """Each ``from conftest import ...`` statement split into one import per new module; a
    comment on its lines is kept on the first import written."""
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module == "conftest" and node.level == 0:
            edits.append(node)
    for node in sorted(edits, key=lambda n: n.lineno, reverse=True):
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent = re.match(r"\s*", lines[first]).group(0)  # type: ignore[union-attr]
        comment = ""
        for line in lines[first : last + 1]:
            if "#" in line:
                comment = "  " + line[line.index("#") :].rstrip("\n")
                break
        by_module: dict[str, list[str]] = {}
        for alias in node.names:
            target = CONFTEST_NAMES.get(alias.name)
            if target is None:
                raise SystemExit(f"conftest.{alias.name} has no new home: add it to CONFTEST_NAMES")
            name = (
                alias.name
                if alias.asname in (None, alias.name)
                else f"{alias.name} as {alias.asname}"
            )
            by_module.setdefault(target, []).append(name)
        new = []
        for module, names in by_module.items():
            new.append(f"{indent}from {module} import {', '.join(names)}{comment}\n")
            comment = ""
        lines[first : last + 1] = new
    return "".join(lines)


def rewrite(text: str, python: bool = True) -> str:
    """The text with its imports and paths moved to the support package (only the paths when
    it is not ``python`` source)."""
    if python:
        text = _conftest_imports(text)
    text = _FROM.sub(r"\1from support.\2 import", text)
    text = _IMPORT.sub(r"\1from support import \2", text)
    return _PATH.sub(r"tests/support/\1.py", text)


def main(paths: list[str]) -> int:
    for p in paths:
        path = Path(p)
        old = path.read_text()
        new = rewrite(old, python=path.suffix == ".py")
        if new != old:
            path.write_text(new)
            print(f"rewritten: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
