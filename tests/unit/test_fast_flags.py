"""The daemons' command line without click (optiontable.Table.fast_flags): for every command
line it takes, the flags it finds are exactly those click parses (values, types, defaults of
every flag not given); every command line it leaves to click is one click must see (help,
--version, --config, errors), so what a user sees is click's either way."""

from __future__ import annotations

from typing import Any

import pytest

from nsqpy import cli
from nsqpy.internal.optiontable import Table
from nsqpy.lookupd import cli as lookupd_cli
from nsqpy.lookupd.options import TABLE as LOOKUPD
from nsqpy.options import TABLE as NSQD

COMMANDS = {
    "nsqd": (NSQD, cli.command),
    "nsqlookupd": (LOOKUPD, lambda: lookupd_cli.DAEMON.command),
}

#: Command lines the fast path takes, for either daemon (lookupd's flags are a subset).
TAKEN = [
    [],
    ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
    ["-tcp-address", "127.0.0.1:0", "-http-address", "127.0.0.1:0"],
    ["--log-level=debug", "-log-level", "WARN", "--log-prefix="],
    ["--log-format=JSON"],
    ["--verbose"],
    ["-verbose=false"],
]

#: nsqlookupd only.
TAKEN_LOOKUPD = [["--inactive-producer-timeout=1m30s", "--tombstone-lifetime", "250ms"]]

#: nsqd only.
TAKEN_NSQD = [
    ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--data-path=/tmp/x"],
    ["-mem-queue-size=0", "-msg-timeout=10s", "--msg-timeout", "2m", "--max-msg-size=1_000"],
    ["--lookupd-tcp-address=a:1", "--lookupd-tcp-address", "b:2"],
    ["-tls-required"],
    ["--tls-required=false"],
    ["-tls-required=tcp-https"],
    ["--e2e-processing-latency-percentile=0.99,0.5", "-e2e-processing-latency-percentile=1"],
    ["--node-id=12", "--sync-timeout=-1s", "--broadcast-address="],
    ["-snappy=true", "--no-deflate", "--statsd-mem-stats=0"],
    ["--tcp-port=5", "--http-port", "6"],
    ["--etcd-endpoints=", "--replicas=1"],
]

#: Left to click (for both daemons).
LEFT = [
    ["-h"],
    ["--help"],
    ["-help"],
    ["--version"],
    ["-version"],
    ["--config=/nonexistent.toml"],
    ["--config", "x.toml"],
    ["positional"],
    ["--no-such-flag=1"],
    ["--tcp-address"],
    ["--tcp-address", "-x"],
    ["--log-format=yaml"],
    ["--log-level=loud"],
    ["--verbose=maybe"],
    ["--tcp-address=a", "--", "b"],
]

LEFT_NSQD = [["--node-id", "0x1"], ["--msg-timeout=5"], ["--max-msg-size=big"]]


def _click(table: Table, command: Any, argv: list[str]) -> dict[str, Any]:
    return dict(command().make_context(table.program, table.normalize(argv)).params)


@pytest.mark.parametrize("daemon", sorted(COMMANDS))
@pytest.mark.parametrize("argv", TAKEN + TAKEN_NSQD + TAKEN_LOOKUPD)
def test_fast_flags_are_clicks(daemon: str, argv: list[str]) -> None:
    table, command = COMMANDS[daemon]
    other = TAKEN_LOOKUPD if daemon == "nsqd" else TAKEN_NSQD
    if argv in other:
        assert table.fast_flags(argv) is None  # the other daemon's flags: click refuses them
        return
    fast = table.fast_flags(argv)
    assert fast is not None
    clicks = _click(table, command, argv)
    assert {k: (type(v), v) for k, v in fast.items()} == {
        k: (type(v), v) for k, v in clicks.items()
    }


@pytest.mark.parametrize("daemon", sorted(COMMANDS))
@pytest.mark.parametrize("argv", LEFT + LEFT_NSQD)
def test_fast_flags_leave_the_rest_to_click(daemon: str, argv: list[str]) -> None:
    table, _ = COMMANDS[daemon]
    assert table.fast_flags(argv) is None


def test_a_value_the_table_refuses_gets_clicks_message_and_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The fast path takes the command line, the table refuses the value: click parses it
    again and reports it as it always has (usage, the error, exit status 2)."""
    argv = ["--e2e-processing-latency-percentile=x"]
    assert NSQD.fast_flags(argv) is not None
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Could not parse: x" in err and "Usage:" in err
