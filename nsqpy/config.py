"""nsqd's config file (--config FILE, TOML) and its option names (GET/PUT /config/<opt>).

Strategy: as apps/nsqd with go-options. Each option has a "cfg name": its flag name with dashes
turned into underscores (`mem_queue_size`, `tcp_address`, `msg_timeout`), except where nsqd's
Options struct says otherwise (`id`, `nsqlookupd_tcp_addresses`,
`e2e_processing_latency_percentiles`, `auth_http_addresses`). The file is read with tomllib;
a value from the file is used only for a flag not given on the command line (the command line
wins). Durations take Go's syntax ("30s") or an integer of milliseconds (go-options' coercion);
keys nsqd does not know are ignored, as nsqd does; keys whose feature nsqpy-d does not have
yet are refused by name, as the flags are."""

from __future__ import annotations

import tomllib
from typing import Any

from .quantile import go_float

#: cfg names that are not simply the flag name with dashes -> underscores: cfg -> flag.
CFG_TO_FLAG = {
    "id": "node-id",
    "nsqlookupd_tcp_addresses": "lookupd-tcp-address",
    "auth_http_addresses": "auth-http-address",
    "e2e_processing_latency_percentiles": "e2e-processing-latency-percentile",
}

#: nsqd 1.3's options that have a flag (nsqd/options.go), by cfg name: what /config/<opt> and
#: the config file know.
NSQD_CFG_NAMES = (
    "id",
    "log_level",
    "log_prefix",
    "tcp_address",
    "http_address",
    "https_address",
    "broadcast_address",
    "broadcast_tcp_port",
    "broadcast_http_port",
    "nsqlookupd_tcp_addresses",
    "auth_http_addresses",
    "auth_http_request_method",
    "http_client_connect_timeout",
    "http_client_request_timeout",
    "data_path",
    "mem_queue_size",
    "max_bytes_per_file",
    "sync_every",
    "sync_timeout",
    "queue_scan_selection_count",
    "queue_scan_worker_pool_max",
    "msg_timeout",
    "max_msg_timeout",
    "max_msg_size",
    "max_body_size",
    "max_req_timeout",
    "max_heartbeat_interval",
    "max_rdy_count",
    "max_output_buffer_size",
    "max_output_buffer_timeout",
    "min_output_buffer_timeout",
    "output_buffer_timeout",
    "max_channel_consumers",
    "statsd_address",
    "statsd_prefix",
    "statsd_interval",
    "statsd_mem_stats",
    "statsd_udp_packet_size",
    "statsd_exclude_ephemeral",
    "e2e_processing_latency_window_time",
    "e2e_processing_latency_percentiles",
    "tls_cert",
    "tls_key",
    "tls_client_auth_policy",
    "tls_root_ca_file",
    "tls_required",
    "tls_min_version",
    "deflate",
    "max_deflate_level",
    "snappy",
)

#: nsqd's lg.LogLevel values (Go encodes the level as this integer).
LOG_LEVEL_NUMBERS = {"debug": 1, "info": 2, "warn": 3, "warning": 3, "error": 4, "fatal": 5}


class ConfigError(ValueError):
    """A config file that cannot be used (unreadable, bad TOML, bad value)."""


def flag_name(cfg_name: str) -> str:
    """The flag of a cfg name: ``mem_queue_size`` -> ``mem-queue-size``, ``id`` -> ``node-id``."""
    return CFG_TO_FLAG.get(cfg_name, cfg_name.replace("_", "-"))


def load(path: str) -> dict[str, Any]:
    """The TOML file's keys and values (ConfigError with the reason when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"open {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(e)) from None


#: nsqpy-d's own options beyond nsqd's (also in the config file and /config/<opt>).
NSQPY_CFG_NAMES = ("max_attempts", "dead_letter_suffix", "metrics_exclude_ephemeral")


def option_value(opts: Any, cfg_name: str) -> tuple[Any, bool]:
    """nsqd's getOptByCfgName: the option's value as nsqd's JSON has it (durations in integer
    nanoseconds, the log level as nsqd's number), and whether the name is known."""
    if cfg_name not in NSQD_CFG_NAMES and cfg_name not in NSQPY_CFG_NAMES:
        return None, False
    if cfg_name == "id":
        return opts.node_id, True
    if cfg_name == "log_level":
        return LOG_LEVEL_NUMBERS.get(str(opts.log_level).lower(), 2), True
    if cfg_name in ("deflate", "snappy") and hasattr(opts, cfg_name):
        return bool(getattr(opts, cfg_name)), True
    if hasattr(opts, cfg_name + "_ms"):
        return int(getattr(opts, cfg_name + "_ms")) * 1_000_000, True
    if hasattr(opts, cfg_name):
        value = getattr(opts, cfg_name)
        if isinstance(value, list):  # Go's JSON writes 1.0 as 1
            return [go_float(v) if isinstance(v, float) else v for v in value], True
        return value, True
    return None, False


def parse_percentiles(values: Any) -> list[float]:
    """--e2e-processing-latency-percentile values (each may be comma separated), highest first
    as nsqd's FloatArray keeps them. Raises click.UsageError on a value that is not a float."""
    import click

    out: list[float] = []
    for v in values or ():
        for part in str(v).split(","):
            try:
                out.append(float(part))
            except ValueError:
                raise click.UsageError(f"Could not parse: {part}") from None
    return sorted(out, reverse=True)


def apply_file(
    ctx: Any,
    kw: dict[str, Any],
    refused: frozenset[str],
    cfg_to_flag: dict[str, str] | None = None,
) -> None:
    """Fill ``kw`` (click's parsed flags) from the file named by --config, for every flag not
    given on the command line (go-options' Resolve: command line, then config, then default).
    ``cfg_to_flag`` names a daemon's own cfg names that are not its flag names (nsqadmin's
    ``admin_users`` -> ``admin-user``); nsqd's (CFG_TO_FLAG) apply otherwise."""
    import click
    from click.core import ParameterSource

    path = kw.get("config") or ""
    if not path:
        return
    params = {p.name: p for p in ctx.command.params}
    for key, value in load(path).items():
        flag = (cfg_to_flag or {}).get(key) or flag_name(key)
        if flag in refused:
            raise ConfigError(
                f"option {key} (--{flag}) is an nsqd option that nsqpy-d does not implement yet"
            )
        name = flag.replace("-", "_")
        param = params.get(name)
        if param is None or name in ("config", "version"):
            continue  # nsqd ignores keys it has no option for
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
            continue
        if getattr(param, "multiple", False) and not isinstance(value, list):
            value = [value]
        if isinstance(value, list) and not getattr(param, "multiple", False):
            raise ConfigError(f"invalid value {value!r} for {key}: not a list option")
        try:
            kw[name] = param.type_cast_value(ctx, value)
        except click.BadParameter as e:
            raise ConfigError(f"invalid value {value!r} for {key}: {e.message}") from None
