"""Option values of the `nsq` format (source and sink), checked the same way for both.

Strategy: Spark passes every option as a string. Integers are whole decimal numbers with a
lower bound; durations are Go durations ("60s", "1m30s", "250ms", parsed by nsqpy.internal.godur,
the one owner of Go's duration syntax) or a plain number of milliseconds (go-options' coercion, as
nsqd's config file takes them). Every error names the option. The connection options (TLS,
compression, AUTH) become an nsqpy.client Config in one place, `conn_config`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..client.config import Config
from ..internal.godur import parse_go_duration_ms


def int_option(options: Mapping[str, str], name: str, default: int | None, low: int = 1) -> Any:
    """``options[name]`` as an int >= ``low``, or ``default`` when absent or blank.

    Raises ValueError ("option NAME: ...") for anything else."""
    v = options.get(name)
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ValueError(f"option {name}: {v!r} is not an integer") from None
    if n < low:
        raise ValueError(f"option {name}: {n} is below {low}")
    return n


def parse_duration_ms(value: str | int | float, name: str) -> int:
    """A Go duration (``"60s"``, ``"1m30s"``, ``"250ms"``) or a plain number of milliseconds,
    as whole milliseconds (>= 0). Raises ValueError naming the option."""
    s = str(value).strip()
    try:
        ms = int(float(s))
    except ValueError:
        try:
            ms = parse_go_duration_ms(s)
        except ValueError:
            raise ValueError(
                f"option {name}: {value!r} is not a duration (e.g. 60s, 250ms, 1m30s)"
            ) from None
    if ms < 0:
        raise ValueError(f"option {name}: {value!r} is negative")
    return ms


_TRUE = frozenset(("true", "1", "yes", "on", "t"))
_FALSE = frozenset(("false", "0", "no", "off", "f"))


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    """``options[name]`` as a bool (true/false, 1/0, yes/no, on/off; any case), or ``default``
    when absent or blank. Raises ValueError naming the option."""
    v = options.get(name)
    if v is None or str(v).strip() == "":
        return default
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"option {name}: {v!r} is not true or false")


#: What the source and the sink take for their nsqd connections (see conn_config).
CONN_OPTIONS = (
    "tls",
    "tls_ca_file",
    "tls_cert",
    "tls_key",
    "tls_verify",
    "compression",
    "deflate_level",
    "auth_secret",
)


def conn_config(options: Mapping[str, str], client_id: str, check_files: bool = True) -> Config:
    """The nsqpy.client Config of the connector's nsqd connections, from the options (lower
    case keys):

    - ``tls`` (false): TLS on every connection (IDENTIFY tls_v1, then the upgrade); an nsqd
      run with ``--tls-required`` needs it. ``tls_ca_file``: PEM of the CAs that sign nsqd's
      certificate (default: the system's); ``tls_cert`` / ``tls_key``: a client certificate and
      its key (PEM; for nsqd's ``--tls-client-auth-policy``); ``tls_verify`` (true): check
      nsqd's certificate and its name (false: no check, as go-nsq's tls_insecure_skip_verify).
    - ``compression`` (none): ``snappy`` or ``deflate`` (nsqd's --snappy / --deflate must be
      on); ``deflate_level`` (6; 1..9).
    - ``auth_secret``: sent in AUTH when nsqd says auth_required (``--auth-http-address``).

    Raises ValueError naming the option: a bad value, a TLS file option without ``tls``, a
    ``tls_key`` without ``tls_cert``, a file that does not exist (when ``check_files``: the
    files are read where the connections are made, the driver for the source, the executors
    for the sink)."""
    cfg = Config(client_id=client_id, dial_timeout=5.0)
    cfg.tls_v1 = bool_option(options, "tls", False)
    for name, attr in (("tls_ca_file", "tls_root_ca_file"), ("tls_cert", "tls_cert")):
        path = str(options.get(name) or "").strip()
        if path and check_files and not os.path.isfile(path):
            raise ValueError(f"option {name}: no file {path!r}")
        setattr(cfg, attr, path)
    key = str(options.get("tls_key") or "").strip()
    if key and check_files and not os.path.isfile(key):
        raise ValueError(f"option tls_key: no file {key!r}")
    if key and not cfg.tls_cert:
        raise ValueError("option tls_key: set tls_cert too (the client certificate)")
    cfg.tls_key = key
    cfg.tls_insecure_skip_verify = not bool_option(options, "tls_verify", True)
    if not cfg.tls_v1:
        for name in ("tls_ca_file", "tls_cert", "tls_key"):
            if str(options.get(name) or "").strip():
                raise ValueError(f"option {name}: set tls=true to use TLS")
    comp = str(options.get("compression") or "none").strip().lower()
    if comp not in ("none", "snappy", "deflate"):
        raise ValueError(f"option compression: {comp!r} is not none, snappy or deflate")
    cfg.snappy = comp == "snappy"
    cfg.deflate = comp == "deflate"
    level = int_option(options, "deflate_level", 6)
    if level > 9:
        raise ValueError(f"option deflate_level: {level} is above 9")
    if level != 6 and not cfg.deflate:
        raise ValueError("option deflate_level: set compression=deflate to use it")
    cfg.deflate_level = level
    cfg.auth_secret = str(options.get("auth_secret") or "")
    return cfg
