"""nsqlookupd's options (nsqlookupd/options.go), which are also nsqpy-lookupd's option table.

Strategy: as nsqpy.options for nsqd: one dataclass whose option fields are declared once, with
flag, default and help, in --help order (internal/optiontable.py generates the flags, --help
and the --config file keys from it); durations are whole milliseconds (suffix ``_ms``).
Imports stay light: the command line builds its flags from this module alone."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ..internal.optiontable import (
    OptionFields,
    Table,
    computed,
    duration,
    listen_address,
    log_format,
    log_level,
    log_prefix,
)


@dataclass(init=False, repr=False, eq=False)  # OptionFields': fast to declare
class LookupdOptions(OptionFields):
    """nsqlookupd's Options (options.go) with its defaults; durations in milliseconds."""

    log_level: str = log_level()
    log_prefix: str = log_prefix("[nsqlookupd] ")
    log_format: str = log_format()
    tcp_address: str = listen_address("TCP", "0.0.0.0:4160")
    http_address: str = listen_address("HTTP", "0.0.0.0:4161")
    broadcast_address: str = computed(
        "broadcast-address",
        str,
        socket.gethostname,
        "address of this lookupd node, (default to the OS hostname)",
    )
    inactive_producer_timeout_ms: int = duration(
        "inactive-producer-timeout",
        300_000,
        "duration of time a producer will remain in the active list since its last ping",
    )
    tombstone_lifetime_ms: int = duration(
        "tombstone-lifetime",
        45_000,
        "duration of time a producer will remain tombstoned if registration remains",
    )


#: nsqpy-lookupd's option table: its click options, Go booleans and config file keys.
TABLE = Table(LookupdOptions, program="nsqpy-lookupd", go_name="nsqlookupd")
