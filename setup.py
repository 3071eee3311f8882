"""Build script: the hot modules compiled with mypyc where a C compiler is present, pure Python
otherwise (the way black and mypy ship).

Strategy: everything about the package lives in pyproject.toml; this file only adds C
extensions. The compiled modules are the same typed Python files (mypyc turns them into C
extensions; the .py files ship too), so a build that does not compile is the pure package,
identical in behaviour. NSQPY_MYPYC at build time picks the build:

- unset or ``auto`` (the default): compile a wheel (``pip install .``) when a C compiler, the
  Python headers and mypyc are there, and fall back to the pure package, saying why on stderr,
  when any of them is missing or compiling fails. mypy is a build requirement (setup_requires,
  which setuptools' PEP 517 backend reports to pip), so pip brings it into the build
  environment. An editable install (``pip install -e .``) is always pure: a .so next to its .py
  in the checkout would shadow it, and edits to the .py would no longer run.
- ``1``: compile or fail loudly (CI's compiled run uses it, so that a broken compiled build
  cannot pass as the pure one).
- ``0``: pure.

  pip install .                  # compiled where possible (about a minute more), else pure
  NSQPY_MYPYC=0 pip install .    # pure
  NSQPY_MYPYC=1 pip install .    # compiled, or the install fails

`python -m nsqpy --version` (and nsqpy-d's start-up log line) says which build runs."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

#: The modules on the per-message path (wire format, in-flight queues, message records, IDs, the
#: client protocol, and the broker core that queues and hands out messages), listed once in
#: nsqpy/build_info.py (read by path: the package's own imports are not in the build
#: environment). Each stays plain typed Python; mypyc also enforces its annotations at run time
#: (a ``bytes`` parameter refuses a bytearray), and the tests pass both ways.
_HERE = Path(__file__).resolve().parent
_BUILD_INFO = runpy.run_path(str(_HERE / "nsqpy" / "build_info.py"))
_module_path = _BUILD_INFO["module_path"]
COMPILED_MODULES = [_module_path(name) for name in _BUILD_INFO["COMPILED_MODULES"]]
_toolchain_missing = _BUILD_INFO["toolchain_missing"]

_MODE = os.environ.get("NSQPY_MYPYC", "auto").strip().lower() or "auto"
_REQUIRED = _MODE in ("1", "true", "yes")
_OFF = _MODE in ("0", "false", "no")
#: setuptools commands that build extensions; an editable install (editable_wheel, develop) and
#: the metadata/requirements passes (egg_info, dist_info) do not.
_BUILDS = {"bdist_wheel", "build", "build_ext", "install"}
_EDITABLE = {"editable_wheel", "develop"}


def _say(text: str) -> None:
    sys.stderr.write(f"nsqpy: {text}\n")


def _wanted() -> bool:
    if _OFF:
        return False
    if _REQUIRED:
        return True
    why = _toolchain_missing()
    if why:
        _say(f"{why}: pure build")
        return False
    return True


def _ext_modules() -> list:
    argv = set(sys.argv[1:])
    if not _WANTED or argv & _EDITABLE or not argv & _BUILDS:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        # setuptools' first pass (get_requires_for_build_wheel) runs this file before the
        # setup_requires below are installed; the build pass has them.
        if _REQUIRED:
            raise
        _say("mypyc is not importable: pure build")
        return []
    # NSQPY_MYPYC_MODULES="wire pqueue channel ..." replaces the list (experiments, benchmarks)
    names = os.environ.get("NSQPY_MYPYC_MODULES", "").split()
    modules = [_module_path(n) for n in names] if names else COMPILED_MODULES
    # mypyc type-checks in the build environment, where the runtime dependencies (click,
    # aiohttp, ...) are absent and so typed Any: the strict per-module checks of pyproject's
    # [tool.mypy] (run by the lint tests with everything installed) would refuse that. The
    # build checks with the base settings alone.
    config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "mypyc-mypy.ini")
    os.makedirs(os.path.dirname(config), exist_ok=True)
    with open(config, "w") as f:
        f.write("[mypy]\nignore_missing_imports = True\n")
    try:
        return mypycify(
            ["--config-file", config, *modules],
            opt_level=os.environ.get("NSQPY_MYPYC_OPT", "3"),
        )
    except BaseException as e:  # mypy reports type errors with SystemExit
        if _REQUIRED:
            raise
        _say(f"mypyc failed ({type(e).__name__}: {e}): pure build")
        return []


class OptionalBuildExt(build_ext):
    """build_ext that, unless NSQPY_MYPYC=1, leaves the package pure when compiling fails
    (removing any extension it did build, so that no half-compiled set is installed)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:
            if _REQUIRED:
                raise
            for path in self.get_outputs():
                Path(path).unlink(missing_ok=True)
            _say(f"compiling failed ({type(e).__name__}: {e}): pure build")


_WANTED = _wanted()

setup(
    ext_modules=_ext_modules(),
    cmdclass={"build_ext": OptionalBuildExt},
    setup_requires=["mypy>=1.10"] if _WANTED else [],
)
