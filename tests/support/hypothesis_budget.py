"""Hypothesis budget for tests/unit: quick when only the unit tests run, as written otherwise
(called from tests/conftest.py's pytest_collection_modifyitems).

Strategy: every property test in tests/unit states its example count for a thorough run
(``@settings(max_examples=...)``). ``pytest tests/unit`` (the quick loop while editing) runs
each with a fifth of that count, at least QUICK_MIN, so the folder runs in seconds; a session
that also collects tests outside tests/unit (``pytest``, as CI runs it) keeps the written
counts. ``NSQPY_HYPOTHESIS=quick`` or ``=full`` decides either way, whatever is collected.
Only ``max_examples`` changes: the strategies, the deadline and the health checks stay the
tests' own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

UNIT = Path(__file__).resolve().parents[1] / "unit"
QUICK_DIVISOR = 5
QUICK_MIN = 10


def _in_unit(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(UNIT)


def _quick(current: settings) -> settings:
    return settings(current, max_examples=max(QUICK_MIN, current.max_examples // QUICK_DIVISOR))


def scale_examples(items: list[pytest.Item]) -> None:
    """Scale the unit tests' hypothesis examples down for a unit-only session (see above)."""
    mode = os.environ.get("NSQPY_HYPOTHESIS", "")
    if mode not in ("quick", "full"):
        mode = "quick" if all(_in_unit(i) for i in items) else "full"
    if mode == "full":
        return
    done: set[int] = set()
    for item in items:
        if not _in_unit(item):
            continue
        cls = getattr(item, "cls", None)
        if cls is not None and isinstance(getattr(cls, "settings", None), settings):
            if id(cls) not in done:  # a stateful machine's TestCase
                cls.settings = _quick(cls.settings)
                done.add(id(cls))
            continue
        fn = getattr(item, "obj", None)
        fn = getattr(fn, "__func__", fn)
        current = getattr(fn, "_hypothesis_internal_use_settings", None)
        if isinstance(current, settings) and id(fn) not in done:
            fn._hypothesis_internal_use_settings = _quick(current)  # type: ignore[union-attr]
            done.add(id(fn))
