"""nsqpy: a drop-in NSQ daemon (nsqd) in Python on asyncio + uvloop.

The version constants load nsqpy.options (the daemon's option table) on first use, so that
importing a part of the package that does not need them (the Spark connector's executor-side
reader, the client) does not load the daemon's modules."""

from __future__ import annotations

from typing import Any

__all__ = ["NSQPY_VERSION", "NSQ_VERSION"]


def __getattr__(name: str) -> Any:
    if name in ("NSQ_VERSION", "NSQPY_VERSION", "__version__"):
        from . import options

        return options.NSQPY_VERSION if name == "__version__" else getattr(options, name)
    raise AttributeError(f"module 'nsqpy' has no attribute {name!r}")
