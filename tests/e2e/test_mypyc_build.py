"""The optional compiled build (setup.py, NSQPY_MYPYC=1) keeps working as the code changes.

mypyc compiles plain typed Python but is stricter at run time than CPython (annotations are
checked on every call, fixed-shape tuples are unboxed, a dict subclass's overridden get() is
bypassed), so code that passes the pure suite can break compiled. This test builds the compiled
modules from a copy of the package in a temporary directory (never in the checkout: a .so next
to its .py would shadow it), checks they are the ones imported, and runs the wire, pqueue,
protocol and broker-core tests against them, daemons included (they inherit PYTHONPATH). Skips,
saying why, without a C compiler, the Python headers or mypyc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.daemons import DAEMON_CWD, ROOT

from nsqpy.build_info import (
    COMPILED_MODULES,
    build_name,
    compiled_modules,
    module_path,
    toolchain_missing,
)

# One worker builds once for the module's tests (pytest-xdist).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.xdist_group("mypyc_build"),
]

COMPILED = list(COMPILED_MODULES)
#: The build the whole run is on, when .ci/run says (its compiled run sets NSQPY_TEST_BUILD=mypyc
#: and installs the package, compiled, outside the checkout).
RUN_BUILD = os.environ.get("NSQPY_TEST_BUILD", "")


def _missing() -> str | None:
    why = toolchain_missing()
    if why:
        return why
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed (pip install mypy)"
    return None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    if RUN_BUILD == "mypyc":
        pytest.skip("this whole run is on the installed compiled build (NSQPY_TEST_BUILD=mypyc)")
    if os.environ.get("NSQPY_COMPILED_RUN_FOLLOWS"):
        # .ci/run installs the compiled build and runs these tests and more on it next
        pytest.skip("the compiled build's own run follows (NSQPY_COMPILED_RUN_FOLLOWS)")
    why = _missing()
    if why:
        pytest.skip(f"compiled build not possible here: {why}")
    root = tmp_path_factory.mktemp("mypyc")
    shutil.copytree(
        ROOT / "nsqpy", root / "nsqpy", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, root / name)
    env = dict(os.environ, NSQPY_MYPYC="1")
    env.pop("NSQPY_MYPYC_MODULES", None)
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


def test_compiled_modules_are_the_ones_imported(compiled):
    code = "import importlib; print(*(importlib.import_module('nsqpy.' + m).__file__ for m in %r))"
    out = subprocess.run(
        [sys.executable, "-c", code % COMPILED],
        cwd=compiled.parent,
        env=dict(os.environ, PYTHONPATH=str(compiled)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert len(out) == len(COMPILED)
    for m, path in zip(COMPILED, out):
        assert path.startswith(str(compiled / module_path(m)[: -len(".py")])), path
        assert path.endswith(".so"), path


def test_core_and_protocol_tests_pass_compiled(compiled):
    files = (
        "unit/test_wire.py",
        "unit/test_pqueue.py",
        "unit/test_protocol_v2.py",
        "daemon/test_protocol.py",
        "unit/test_core_units.py",
        "unit/test_msg_index.py",
        "daemon/test_message_lookup.py",
        "daemon/test_dead_letter.py",
    )
    tests = [str(ROOT / "tests" / f) for f in files]
    missing = [t for t in tests if not Path(t).exists()]
    assert not missing, f"test files moved: {missing}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        cwd=compiled.parent,
        # the daemons the tests start run from the compiled tree too (tests/support/daemons.py)
        env=dict(os.environ, PYTHONPATH=str(compiled), NSQPY_TEST_DAEMON_CWD=str(compiled)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_run_is_on_the_build_it_names():
    """CI's compiled run (NSQPY_TEST_BUILD=mypyc) really imports the compiled modules, in the
    tests and in the daemons they start; a run from the checkout is pure."""
    import nsqpy

    want = RUN_BUILD or ("pure" if Path(nsqpy.__file__).resolve().is_relative_to(ROOT) else "")
    if not want:
        pytest.skip("an installed nsqpy and no NSQPY_TEST_BUILD: nothing to compare with")
    assert build_name() == want, compiled_modules()
    out = subprocess.run(
        [sys.executable, "-m", "nsqpy", "--version"],
        cwd=DAEMON_CWD,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.rstrip().endswith("-mypyc)" if want == "mypyc" else "python" + _py() + ")"), out


def _py() -> str:
    return ".".join(str(x) for x in sys.version_info[:3])


def test_install_without_a_compiler_is_pure(tmp_path):
    """setup.py's default (NSQPY_MYPYC unset) falls back to the pure package, saying why, where
    no C compiler is found: the wheel is py3-none-any, with no extension in it."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "nsqpy", src / "nsqpy", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    env = dict(os.environ, CC=str(tmp_path / "no-such-cc"))
    env.pop("NSQPY_MYPYC", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no C compiler" in proc.stdout + proc.stderr
    wheels = [p.name for p in (tmp_path / "dist").iterdir()]
    assert len(wheels) == 1 and wheels[0].endswith("-py3-none-any.whl"), wheels
