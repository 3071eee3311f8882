"""nsqpy: a drop-in NSQ daemon (nsqd) in Python on asyncio + uvloop.

The version constants are nsqpy.build_info's, loaded on first use, so that importing a part
of the package that does not need them (the Spark connector's executor-side reader, the
client) loads nothing more."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a --version needs none)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NSQPY_VERSION", "NSQ_VERSION"]


def __getattr__(name: str) -> Any:
    if name in ("NSQ_VERSION", "NSQPY_VERSION", "__version__"):
        from . import build_info

        return build_info.NSQPY_VERSION if name == "__version__" else getattr(build_info, name)
    raise AttributeError(f"module 'nsqpy' has no attribute {name!r}")
