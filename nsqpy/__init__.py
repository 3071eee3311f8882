"""nsqpy: a drop-in NSQ daemon (nsqd) in Python on asyncio + uvloop."""

from .options import NSQ_VERSION, NSQPY_VERSION

__all__ = ["NSQPY_VERSION", "NSQ_VERSION"]
__version__ = NSQPY_VERSION
