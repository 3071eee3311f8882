"""Which build of nsqpy runs: the mypyc-compiled per-message modules, or pure Python.

Strategy: setup.py compiles the modules in COMPILED_MODULES where it can (see its docstring);
a compiled module is imported from an extension file (``.so``) instead of its ``.py``. This
module only looks for those files in nsqpy's own directories (the import system's extension
suffixes, which it tries before a module's source: no import, not even of the subpackage
holding a module, and not importlib's machinery either), so it is cheap and safe to call from
anywhere, at start-up or for ``--version``. It also holds the versions and the
daemons' version line, so that a daemon other than nsqd (nsqpy-lookupd) names them without
loading nsqd's option table."""

from __future__ import annotations

import os
import sys

#: The modules setup.py compiles, dotted names under nsqpy (it reads this list by path, so it is
#: the only one; module_path gives each one's file).
COMPILED_MODULES: tuple[str, ...] = (
    "wire",
    "pqueue",
    "message",
    "guid",
    "protocol_v2",
    "client_v2",
    "record_queue",
    "msg_index",
    "backed_queue",
    "backend_reads",
    "channel_store",
    "topic",
    "channel",
    "diskqueue_codec",
    "client.frames",
)


#: Version of NSQ that nsqpy speaks (reported in IDENTIFY, /info and /stats, as nsqd does).
NSQ_VERSION = "1.3.0"
#: nsqpy's own version.
NSQPY_VERSION = "0.2.0"


def version_string(app: str = "nsqd") -> str:
    """The daemon's version line in nsqd's shape (``--version``, the first log line and the first
    line of text /stats): "built w/" names nsqpy and Python where nsqd names its Go release,
    and ends in ``-mypyc`` when the per-message modules are compiled (build_name), e.g.
    ``nsqd v1.3.0 (built w/nsqpy-0.2.0-python3.11.7-mypyc)``."""
    py = ".".join(str(x) for x in sys.version_info[:3])
    build = build_name()
    tag = "" if build == "pure" else f"-{build}"
    return f"{app} v{NSQ_VERSION} (built w/nsqpy-{NSQPY_VERSION}-python{py}{tag})"


def version_asked(argv: list[str], program: str) -> bool:
    """True when ``argv`` (a daemon's arguments) is a lone ``--version`` or Go's ``-version``
    and no shell completion of ``program`` (click's ``_NSQPY_D_COMPLETE`` and the like) is
    asked for: the daemon then prints version_string's line, as its full command line parse
    would, without loading its option table (test harnesses run ``nsqd --version`` before each
    daemon they start). Any other spelling goes through the full parse."""
    if len(argv) != 1 or argv[0] not in ("--version", "-version"):
        return False
    return "_" + program.replace("-", "_").upper() + "_COMPLETE" not in os.environ


def module_path(name: str) -> str:
    """The source file of COMPILED_MODULES' ``name``, relative to the checkout
    (``"client.frames"`` -> ``"nsqpy/client/frames.py"``)."""
    return "nsqpy/" + name.replace(".", "/") + ".py"


def compiled_modules() -> list[str]:
    """The names (of COMPILED_MODULES) that import from a compiled extension here: those with
    an extension file (``wire.cpython-311-x86_64-linux-gnu.so``) beside their source."""
    import nsqpy

    try:
        from _imp import extension_suffixes  # what importlib.machinery.EXTENSION_SUFFIXES holds
    except ImportError:  # an interpreter without it
        from importlib.machinery import EXTENSION_SUFFIXES

        suffixes = list(EXTENSION_SUFFIXES)
    else:
        suffixes = extension_suffixes()
    listed: dict[str, set[str]] = {}
    out = []
    for name in COMPILED_MODULES:
        package, _, stem = name.rpartition(".")
        for d in nsqpy.__path__:
            where = os.path.join(d, *package.split("."))
            if where not in listed:
                try:
                    listed[where] = set(os.listdir(where))
                except OSError:
                    listed[where] = set()
            if any(stem + suffix in listed[where] for suffix in suffixes):
                out.append(name)
                break
    return out


def build_name() -> str:
    """``"mypyc"`` when every module of COMPILED_MODULES is compiled, ``"pure"`` when none is,
    ``"mypyc-partial"`` otherwise (a build made with NSQPY_MYPYC_MODULES)."""
    n = len(compiled_modules())
    if n == 0:
        return "pure"
    return "mypyc" if n == len(COMPILED_MODULES) else "mypyc-partial"


def toolchain_missing() -> str | None:
    """Why this machine cannot compile the extensions (None when it can): no C compiler (``CC``
    or Python's own), or no Python headers. setup.py and the build test both ask here."""
    import shutil
    import sysconfig
    from pathlib import Path

    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        return f"no Python headers ({include}/Python.h)"
    return None
