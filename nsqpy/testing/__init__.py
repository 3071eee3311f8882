"""A real NSQ in any test suite: nsqpy's daemons as child processes (process.py) and a pytest
plugin with fixtures (plugin.py, registered through the ``pytest11`` entry point, so a plain
``pip install nsqpy`` makes ``nsqd``, ``nsqd_session``, ``nsqlookupd`` and ``nsq_cluster``
available to any pytest run). Beside them, imported by name: virtual_time.py (an event loop on
a virtual clock) and wire_client.py (a blocking V2 client that sends and reads exact frames).
The repository's own test helpers live in its tests/support/, not here."""

from __future__ import annotations

from .process import (
    DaemonProcess,
    Listening,
    NsqAdmin,
    Nsqd,
    Nsqlookupd,
    parse_listening,
    terminate,
    wait_for,
)

__all__ = [
    "DaemonProcess",
    "Listening",
    "NsqAdmin",
    "Nsqd",
    "Nsqlookupd",
    "parse_listening",
    "terminate",
    "wait_for",
]
