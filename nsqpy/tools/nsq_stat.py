"""`nsqpy nsq_stat`: poll a channel's /stats on every nsqd of its topic and print one line per
interval, as NSQ's apps/nsq_stat/nsq_stat.go (v1.3.0) does.

Strategy: a loop on asyncio and the cluster-info layer (nsqpy.internal.clusterinfo, as Go's
nsq_stat uses internal/clusterinfo): find the topic's producers (lookupd /lookup or each nsqd's
/stats), sum the channel over them (ChannelStats.Add), print the header at every 25th report (the
first report only primes the rates and prints no line), then sleep ``--interval``. Rates are
the message count's change (ingress) and the change not left in depth (egress) over the
interval, truncated toward zero. ``--count N`` stops after N lines; errors, a partial answer
too, are fatal, as in Go (log.Fatalf, exit 1)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from ..internal.clusterinfo.data import ClusterInfo
from ..internal.clusterinfo.http_client import FetchError, HTTPClient
from ..internal.clusterinfo.types import Stats, UpstreamError, err_list
from . import flags
from .flags import DURATION, INT, LIST, STR, VERSION, Flag, fail, parse_tool_flags

FLAGS = (
    VERSION,
    Flag("topic", STR, "", "NSQ topic"),
    Flag("channel", STR, "", "NSQ channel"),
    Flag("interval", DURATION, 2.0, "duration of time between polling/printing output"),
    flags.HTTP_CONNECT_TIMEOUT,
    Flag("http-client-request-timeout", DURATION, 5.0, "timeout for HTTP request"),
    Flag("count", INT, None, "number of reports"),
    Flag("nsqd-http-address", LIST, (), "nsqd HTTP address (may be given multiple times)"),
    flags.LOOKUPD_HTTP_ADDRESS,
)

HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}\n".format(
        "ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients"
    )
)
#: A header every this many reports (the first report, which primes the rates, counts).
HEADER_EVERY = 25


def format_line(c: Stats, o: Stats, interval_s: float) -> str:
    """One report line from the channel's stats now (``c``) and at the last report (``o``),
    both cluster-wide channel stats records: rates per second over ``interval_s`` then the
    current counters."""
    ingress = int((c["message_count"] - o["message_count"]) / interval_s)
    egress = int((c["message_count"] - o["message_count"] - (c["depth"] - o["depth"])) / interval_s)
    return (
        f"{ingress:7d} {egress:7d} | {c['depth']:7d} {c['memory_depth']:7d} "
        f"{c['backend_depth']:7d} {c['in_flight_count']:5d} {c['deferred_count']:5d} | "
        f"{c['requeue_count']:7d} {c['timeout_count']:7d} {c['message_count']:12d} "
        f"{c['client_count']:7d}\n"
    )


async def stat_loop(opts: dict) -> None:
    topic, channel = opts["topic"], opts["channel"]
    interval = opts["interval"]
    count = opts["count"]
    lookupds, nsqds = opts["lookupd_http_address"], opts["nsqd_http_address"]
    prev: Stats | None = None
    async with HTTPClient(
        opts["http_client_connect_timeout"], opts["http_client_request_timeout"]
    ) as client:
        ci = ClusterInfo(client, lookupds, nsqds)
        i = 0
        while count is None or count >= i:
            try:
                producers, errs = await ci.topic_producers(topic)
                if errs:  # Go's PartialErr is an error too
                    raise UpstreamError(err_list(errs))
            except (UpstreamError, FetchError, OSError) as e:
                fail(f"ERROR: failed to get topic producers - {e}")
            try:
                _, stats, node_errs = await ci.stats(
                    producers, topic, channel, include_clients=False, require_one=True
                )
                if node_errs:
                    raise UpstreamError(err_list(node_errs.values()))
            except (UpstreamError, FetchError, OSError) as e:
                fail(f"ERROR: failed to get nsqd stats - {e}")
            cur = stats.get(channel)
            if cur is None:
                fail(
                    f"ERROR: failed to find channel({channel}) in stats metadata for topic({topic})"
                )
            out = sys.stdout
            if i % HEADER_EVERY == 0:
                out.write(HEADER)
            if prev is not None:
                out.write(format_line(cur, prev, interval))
            out.flush()
            prev = cur
            i += 1
            await asyncio.sleep(interval)


def run(argv: Sequence[str]) -> None:
    """nsq_stat's command line (``argv`` in Go flag syntax); exits as Go's tool does."""
    opts = parse_tool_flags("nsq_stat", FLAGS, argv)
    if opts is None:
        return
    flags.require_topic_and_channel(opts)
    flags.require_positive(
        opts, "interval", "http_client_connect_timeout", "http_client_request_timeout", "count"
    )
    nsqds, lookupds = opts["nsqd_http_address"], opts["lookupd_http_address"]
    flags.check_one_source(nsqds, lookupds, "nsqd-http-address")
    for flag, addrs in (("nsqd-http-address", nsqds), ("lookupd-http-address", lookupds)):
        if any(a.startswith("http") for a in addrs):
            fail(f"--{flag} error - address should not contain scheme")
    try:
        asyncio.run(stat_loop(opts))
    except KeyboardInterrupt:
        pass
