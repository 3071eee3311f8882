"""`nsqpy nsq_to_http`: turn each message of a topic into an HTTP request, as NSQ's
apps/nsq_to_http (v1.3.0) does.

Strategy: one nsqpy.client Consumer with ``-n`` concurrent handlers (default 100) sharing one
aiohttp session. ``--post URL``: the body is POSTed with ``--content-type`` (2xx is success);
``--get URL`` (one ``%s``): the body, query-escaped as Go's url.QueryEscape, replaces the
``%s`` and the URL is fetched (200 is success). Which address gets a message: ``--mode
hostpool`` (default, and ``epsilon-greedy``) through hostpool.py, ``round-robin`` by a counter
from 1 (the second address first, as in Go), and any other mode every address in turn (Go's
zero mode, ModeAll). A failed request requeues the message with backoff. ``--header k:v``
adds headers, ``--sample`` passes that fraction of messages (the rest are finished unsent).
Timeouts: ``--http-client-connect-timeout`` and ``--http-client-request-timeout``."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote_plus

import aiohttp
from yarl import URL

from . import flags
from .flags import (
    DURATION,
    FLOAT,
    INT,
    LIST,
    NSQ_TOOLS_VERSION,
    STR,
    VERSION,
    Flag,
    check_one_source,
    fail,
    parse_tool_flags,
)
from .hostpool import HostPool
from .runtime import Signals, make_config, run_main, start_consumer, stop_all

DEFAULT_CONTENT_TYPE = "application/octet-stream"

FLAGS = (
    VERSION,
    Flag("topic", STR, "", "nsq topic"),
    Flag("channel", STR, "nsq_to_http", "nsq channel"),
    flags.MAX_IN_FLIGHT,
    Flag("n", INT, 100, "number of concurrent publishers"),
    flags.UPSTREAM_MODE,
    Flag("sample", FLOAT, 1.0, "% of messages to publish (float b/w 0 -> 1)"),
    flags.HTTP_CONNECT_TIMEOUT,
    Flag("http-client-request-timeout", DURATION, 20.0, "timeout for HTTP request"),
    flags.STATUS_EVERY,
    Flag("content-type", STR, DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests"),
    Flag("post", LIST, (), "HTTP address to make a POST request to (repeatable)"),
    Flag("header", LIST, (), "Custom header for HTTP requests (repeatable)"),
    Flag("get", LIST, (), "HTTP address to make a GET request to; '%s' is the data (repeatable)"),
    flags.NSQD_TCP_ADDRESS,
    flags.LOOKUPD_HTTP_ADDRESS,
    flags.CONSUMER_OPT,
)


def parse_headers(items: Sequence[str]) -> dict[str, str]:
    """``key: value`` items (parseCustomHeaders); ValueError for one without both parts."""
    out: dict[str, str] = {}
    for s in items:
        key, colon, val = s.partition(":")
        key, val = key.strip(), val.strip()
        if not colon or not key or not val:
            raise ValueError(f"invalid header: {s!r}")
        out[key] = val
    return out


def get_url(template: str, body: bytes) -> str:
    """fmt.Sprintf(template, url.QueryEscape(body)) for a template with one ``%s`` (``%%`` is
    a percent sign, as in Go)."""
    escaped = quote_plus(body, safe="")
    out: list[str] = []
    i = 0
    while i < len(template):
        if template.startswith("%s", i):
            out.append(escaped)
            i += 2
        elif template.startswith("%%", i):
            out.append("%")
            i += 2
        else:
            out.append(template[i])
            i += 1
    return "".join(out)


class RequestError(Exception):
    """A request that did not succeed: the message goes back with backoff."""


async def forward(opts: dict) -> None:
    posting = bool(opts["post"])
    addresses: list[str] = opts["post"] or opts["get"]
    headers = {"User-Agent": f"nsq_to_http v{NSQ_TOOLS_VERSION}"}
    headers.update(opts["headers_parsed"])
    content_type = opts["content_type"]
    timeout = aiohttp.ClientTimeout(
        total=opts["http_client_request_timeout"], connect=opts["http_client_connect_timeout"]
    )
    session = aiohttp.ClientSession(timeout=timeout)
    mode = opts["mode"]
    pool = HostPool(addresses)
    counter = 0
    sample = opts["sample"]

    async def send(addr: str, body: bytes) -> None:
        try:
            if posting:
                h = {**headers, "Content-Type": content_type}
                async with session.post(addr, data=body, headers=h) as resp:
                    await resp.read()
                    if not 200 <= resp.status < 300:
                        raise RequestError(f"got status code {resp.status}")
            else:
                url = URL(get_url(addr, body), encoded=True)
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RequestError(f"got status code {resp.status}")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise RequestError(str(e)) from e

    async def handle(msg: Any) -> None:
        nonlocal counter
        if sample < 1.0 and random.random() > sample:
            return
        if mode == "round-robin":
            counter += 1
            await send(addresses[counter % len(addresses)], msg.body)
        elif mode in ("hostpool", "epsilon-greedy"):
            addr = pool.get()
            try:
                await send(addr, msg.body)
            except RequestError:
                pool.mark(addr, False)
                raise
            pool.mark(addr, True)
        else:
            for addr in addresses:
                await send(addr, msg.body)

    cfg = make_config("nsq_to_http", opts["consumer_opt"], opts["max_in_flight"])
    signals = Signals()
    try:
        consumer = await start_consumer(
            opts["topic"],
            opts["channel"],
            cfg,
            handle,
            max(1, opts["n"]),
            opts["nsqd_tcp_address"],
            opts["lookupd_http_address"],
        )
        await signals.wait()
        await stop_all([consumer])
    finally:
        await session.close()


def run(argv: Sequence[str]) -> None:
    """nsq_to_http's command line (``argv`` in Go flag syntax); exits as Go's tool does."""
    opts = parse_tool_flags("nsq_to_http", FLAGS, argv)
    if opts is None:
        return
    opts["headers_parsed"] = {}
    if opts["header"]:
        try:
            opts["headers_parsed"] = parse_headers(opts["header"])
        except ValueError:
            fail("--header value format should be 'key=value'")
    flags.require_topic_and_channel(opts)
    if opts["content_type"] != DEFAULT_CONTENT_TYPE:
        if not opts["post"]:
            fail("--content-type only used with --post")
        if not opts["content_type"]:
            fail("--content-type requires a value when used")
    check_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"], "nsqd-tcp-address")
    if not opts["get"] and not opts["post"]:
        fail("--get or --post required")
    if opts["get"] and opts["post"]:
        fail("use --get or --post not both")
    if any(g.count("%s") != 1 for g in opts["get"]):
        fail("invalid GET address - must be a printf string")
    if not 0.0 <= opts["sample"] <= 1.0:
        fail("ERROR: --sample must be between 0.0 and 1.0")
    run_main(forward(opts))
