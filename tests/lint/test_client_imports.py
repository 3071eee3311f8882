"""The client stays light: ``import nsqpy.client`` in a fresh interpreter loads none of the
daemons' modules nor their third-party dependencies, and nsqpy/client/ imports (at any level,
lazily too) only the pure modules it shares with the daemons.

So an application that only publishes or consumes pays for neither uvloop, aiohttp, jinja2,
prometheus_client, h11, click nor msgpack at import, and installs and imports the same where
uvloop does not exist (Windows, PyPy)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from support.daemons import ROOT

#: Modules of the daemons (prefixes) and third-party packages the client must not load.
DENY = (
    "nsqpy.nsqd",
    "nsqpy.protocol_v2",
    "nsqpy.client_v2",
    "nsqpy.topic",
    "nsqpy.channel",
    "nsqpy.diskqueue",
    "nsqpy.http_api",
    "nsqpy.lookupd",
    "nsqpy.admin",
    "nsqpy.replication",
    "nsqpy.options",
    "nsqpy.server",
    "nsqpy.cli",
    "nsqpy.stats",
    "nsqpy.metrics",
    "nsqpy.tools",
    "nsqpy.spark",
    "uvloop",
    "aiohttp",
    "jinja2",
    "prometheus_client",
    "h11",
    "click",
    "msgpack",
    "yaml",
)

#: What nsqpy/client/ may import from the rest of nsqpy: the pure layers.
ALLOWED = ("nsqpy.client", "nsqpy.wire", "nsqpy.message", "nsqpy.frames", "nsqpy.compression")
ALLOWED_PREFIXES = ("nsqpy.internal.names", "nsqpy.internal.godur")


def _denied(name: str) -> bool:
    return any(name == d or name.startswith(d + ".") for d in DENY)


def test_import_nsqpy_client_loads_no_daemon_module() -> None:
    code = (
        "import json, sys; import nsqpy.client; "
        "from nsqpy.client import Consumer, Producer, BlockingProducer, Config; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)
    assert "nsqpy.client" in loaded
    assert [m for m in loaded if _denied(m)] == []


def test_client_sources_import_only_pure_modules() -> None:
    """Read with ast, imports inside functions included (a lazy import of a daemon module is
    still a dependency)."""
    wrong: list[str] = []
    for path in sorted((ROOT / "nsqpy" / "client").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = "nsqpy.client" if node.level == 1 else "nsqpy"
                names = [f"{base}.{node.module}" if node.module else base]
                if node.module is None:
                    names = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                if not n.startswith("nsqpy"):
                    continue
                ok = n in ALLOWED or n.startswith("nsqpy.client.") or n.startswith(ALLOWED_PREFIXES)
                if not ok:
                    wrong.append(f"{path.name}: {n}")
    assert wrong == []
