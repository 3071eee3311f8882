"""nsqd's config file (--config FILE, TOML) and its option names (GET/PUT /config/<opt>).

Strategy: as apps/nsqd with go-options. Each option has a "cfg name": its flag name with dashes
turned into underscores (`mem_queue_size`, `tcp_address`, `msg_timeout`), except where nsqd's
Options struct says otherwise (`id`, `nsqlookupd_tcp_addresses`,
`e2e_processing_latency_percentiles`, `auth_http_addresses`). The names, like the flags, are
generated from nsqpy-d's option table (options.Options, through internal/optiontable.py); this
module gives them nsqd's names. A value from the file is used only for a flag not given on the
command line (the command line wins); durations take Go's syntax ("30s") or an integer of
milliseconds (go-options' coercion); keys nsqd does not know are ignored, as nsqd does; keys
whose feature nsqpy-d does not have yet are refused by name, as the flags are."""

from __future__ import annotations

from typing import Any

from .internal.optiontable import ConfigError, load
from .options import TABLE, parse_percentiles

__all__ = [
    "CFG_NAMES",
    "CFG_TO_FLAG",
    "ConfigError",
    "flag_name",
    "load",
    "option_value",
    "parse_percentiles",
]

#: Every cfg name /config/<opt> and the config file know (nsqd 1.3's options that have a flag,
#: and nsqpy-d's own), in --help order.
CFG_NAMES: tuple[str, ...] = TABLE.cfg_names

#: cfg names that are not simply the flag name with dashes -> underscores: cfg -> flag.
CFG_TO_FLAG: dict[str, str] = {
    cfg: f for cfg, f in TABLE.cfg_to_flag.items() if f != cfg.replace("_", "-")
}


def flag_name(cfg_name: str) -> str:
    """The flag of a cfg name: ``mem_queue_size`` -> ``mem-queue-size``, ``id`` -> ``node-id``."""
    return TABLE.flag_of_cfg(cfg_name)


def option_value(opts: Any, cfg_name: str) -> tuple[Any, bool]:
    """nsqd's getOptByCfgName: the option's value as nsqd's JSON has it (durations in integer
    nanoseconds, the log level as nsqd's number), and whether the name is known."""
    return TABLE.value_of_cfg(opts, cfg_name)
