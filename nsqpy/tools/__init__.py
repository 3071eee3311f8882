"""`nsqpy`: command-line tools around an NSQ deployment: NSQ's own Go tools and nsqpy's extras.

Strategy: a click group; each tool is a subcommand that imports only what it needs, so the
command starts fast. `nsqpy id <ID>` decodes a message ID (guid.py's layout). NSQ's Go tools
come under their Go names (`nsqpy nsq_tail`, `to_nsq`, `nsq_stat`, `nsq_to_file`,
`nsq_to_nsq`, `nsq_to_http`), one module each; they take their raw arguments and read them
with Go's flag syntax (flags.py), so click sees none of their flags. `nsqpy topic-replicas`,
`topic-reassign` and `node-replace` change a replicated topic's placement through any nsqpy-d
node (placement.py)."""

from __future__ import annotations

import sys
from typing import Any

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
    from ..guid import decode_id
    from ..internal.gotime import rfc3339_ms

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


def _go_tool(name: str, module: str, doc: str) -> None:
    """Register NSQ's Go tool ``name`` (its ``run(argv)`` in ``module``) as a subcommand that
    passes its arguments through untouched."""

    @main.command(
        name,
        help=doc,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def _cmd(args: tuple[str, ...]) -> None:
        import importlib

        importlib.import_module(f"{__name__}.{module}").run(list(args))


_go_tool("nsq_tail", "nsq_tail", "Print the messages of topics to stdout (Go's nsq_tail).")
_go_tool("to_nsq", "to_nsq", "Publish stdin's lines to a topic (Go's to_nsq).")
_go_tool("nsq_stat", "nsq_stat", "Poll /stats of a topic's channel and print it (Go's nsq_stat).")
_go_tool("nsq_to_file", "nsq_to_file", "Write topics to rotated files (Go's nsq_to_file).")
_go_tool("nsq_to_nsq", "nsq_to_nsq", "Copy topics to other nsqds (Go's nsq_to_nsq).")
_go_tool("nsq_to_http", "nsq_to_http", "Send messages as HTTP requests (Go's nsq_to_http).")


def _placement_options(fn: Any) -> Any:
    fn = click.option(
        "--timeout",
        default=60.0,
        show_default=True,
        help="Seconds the node may wait for new nodes to join the in-sync replicas.",
    )(fn)
    return click.option(
        "--nsqd-http-address",
        "address",
        required=True,
        help="host:port of any nsqpy-d node of the cluster.",
    )(fn)


@main.command("topic-replicas")
@_placement_options
@click.option("--topic", required=True, help="The replicated topic.")
@click.option("--replicas", required=True, type=click.IntRange(min=1), help="The new R.")
def topic_replicas(address: str, timeout: float, topic: str, replicas: int) -> None:
    """Raise or lower a replicated topic's replication factor (POST /topic/replicas)."""
    from .placement import run

    sys.exit(run(address, "/topic/replicas", {"topic": topic, "replicas": str(replicas)}, timeout))


@main.command("topic-reassign")
@_placement_options
@click.option("--topic", required=True, help="The replicated topic.")
@click.option("--nodes", required=True, help="The new placement: node ids, comma-separated.")
def topic_reassign(address: str, timeout: float, topic: str, nodes: str) -> None:
    """Place a replicated topic on the given nodes (POST /topic/reassign)."""
    from .placement import run

    sys.exit(run(address, "/topic/reassign", {"topic": topic, "nodes": nodes}, timeout))


@main.command("node-replace")
@_placement_options
@click.option("--old", required=True, help="The node id to take off every placement.")
@click.option("--new", "new", required=True, help="The node id to put in its place.")
def node_replace(address: str, timeout: float, old: str, new: str) -> None:
    """Put node NEW in node OLD's place on every topic placed on OLD (POST /node/replace)."""
    from .placement import run

    sys.exit(run(address, "/node/replace", {"old": old, "new": new}, timeout))
