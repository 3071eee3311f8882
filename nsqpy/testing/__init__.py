"""A real NSQ in any test suite: nsqpy's daemons as child processes (process.py) and a pytest
plugin with fixtures (plugin.py, registered through the ``pytest11`` entry point, so a plain
``pip install nsqpy`` makes ``nsqd``, ``nsqd_session``, ``nsqlookupd`` and ``nsq_cluster``
available to any pytest run)."""

from __future__ import annotations

from .process import DaemonProcess, Nsqd, Nsqlookupd, wait_for

__all__ = ["DaemonProcess", "Nsqd", "Nsqlookupd", "wait_for"]
