"""`nsqpy`: small command-line tools around an NSQ deployment (beyond nsqd's own tools).

Strategy: a click group; each tool is a subcommand that imports only what it needs, so the
command starts fast. `nsqpy id <ID>` decodes a message ID (guid.py's layout)."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """nsqpy's tools."""


@main.command("id")
@click.argument("message_id")
def id_cmd(message_id: str) -> None:
    """Decode an nsqd message ID: node id, creation time (UTC, ms) and sequence.

    Exits 1 with the reason when MESSAGE_ID is not an nsqd ID.
    """
    from .guid import decode_id
    from .internal.gotime import rfc3339_ms

    try:
        d = decode_id(message_id)
    except ValueError as e:
        click.echo(f"nsqpy id: {e}", err=True)
        sys.exit(1)
    ms = d.time_ns // 1_000_000
    stamp = rfc3339_ms(ms, utc=True)
    click.echo(f"id:        {message_id.strip().lower()}")
    click.echo(f"node id:   {d.node_id}")
    click.echo(f"time:      {stamp}  (tick {d.tick}: time_ns >> 20)")
    click.echo(f"sequence:  {d.sequence}")


if __name__ == "__main__":
    main()
