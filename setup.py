"""Build script: pure Python by default, the hot modules compiled with mypyc on request.

Strategy: everything about the package lives in pyproject.toml; this file only adds C
extensions when NSQPY_MYPYC=1 is set at build time. The compiled modules are the same typed
Python files (mypyc turns them into C extensions; the .py files ship too), so a build without
the variable, without a C compiler or without mypy is the pure package, identical in behaviour.
With NSQPY_MYPYC=1 the build asks for mypy as a build requirement (setup_requires, which
setuptools' PEP 517 backend reports to pip), and fails loudly when it cannot compile rather than
silently installing the pure modules. Never build the compiled variant in place (an editable
install or `build_ext --inplace` in the checkout): a .so next to its .py shadows it, and edits
to the .py would no longer run.

  pip install .                  # pure
  NSQPY_MYPYC=1 pip install .    # compiled (needs a C compiler and the Python headers)"""

from __future__ import annotations

import os
import sys

from setuptools import setup

#: The modules on the per-message path (wire format, in-flight queues, message records, IDs, the
#: client protocol, and the broker core that queues and hands out messages). Each stays plain
#: typed Python; mypyc also enforces its annotations at run time (a ``bytes`` parameter refuses a
#: bytearray), and the tests pass both ways.
COMPILED_MODULES = [
    "nsqpy/wire.py",
    "nsqpy/pqueue.py",
    "nsqpy/message.py",
    "nsqpy/guid.py",
    "nsqpy/protocol_v2.py",
    "nsqpy/client_v2.py",
    "nsqpy/msg_index.py",
    "nsqpy/backed_queue.py",
    "nsqpy/backend_reads.py",
    "nsqpy/channel_store.py",
    "nsqpy/topic.py",
    "nsqpy/channel.py",
]


def _ext_modules() -> list:
    if os.environ.get("NSQPY_MYPYC", "") not in ("1", "true", "yes"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        # setuptools' first pass (get_requires_for_build_wheel) runs this file before the
        # setup_requires below are installed; the build pass has them.
        sys.stderr.write("nsqpy: NSQPY_MYPYC set but mypyc is not importable: pure build\n")
        return []
    # NSQPY_MYPYC_MODULES="wire pqueue channel ..." replaces the list (experiments, benchmarks)
    names = os.environ.get("NSQPY_MYPYC_MODULES", "").split()
    modules = [f"nsqpy/{n}.py" for n in names] if names else COMPILED_MODULES
    return mypycify(modules, opt_level=os.environ.get("NSQPY_MYPYC_OPT", "3"))


_wanted = os.environ.get("NSQPY_MYPYC", "") in ("1", "true", "yes")

setup(
    ext_modules=_ext_modules(),
    setup_requires=["mypy>=1.10"] if _wanted else [],
)
