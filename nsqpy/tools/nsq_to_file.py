"""`nsqpy nsq_to_file`: write topics to files, one line per message, rotated by time, size and
interval, optionally gzipped, as NSQ's apps/nsq_to_file (v1.3.0) does.

Strategy: per topic, a FileLogger (file_logger.py: names, rotation, gzip, the work dir) and an
nsqpy.client Consumer whose handler takes each message without answering it; a router task
per topic (file_logger.go's router) takes, one at a time, the messages, the
``--sync-interval`` ticks, SIGHUP and the stop. A message is written at once and finished
only after the next sync (fsync, or the end of a gzip member): on a tick, when max-in-flight
messages are held, or when the consumer is starved (at least 85% of its RDY held). Without
``--topic``, the topics come from the lookupds every ``--topic-refresh`` (the first look one
refresh after the start, as Go's ticker), filtered by ``--topic-pattern`` (a regular
expression searched in the name, as Go's regexp.MatchString). SIGINT/SIGTERM: sync, stop the
consumers, close the files (moving them out of the work dir)."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Sequence
from typing import Any

from ..internal.clusterinfo.data import ClusterInfo
from ..internal.clusterinfo.http_client import FetchError, HTTPClient
from ..internal.clusterinfo.types import UpstreamError, err_list
from . import flags
from .file_logger import FileLogger, FileOptions
from .flags import (
    BOOL,
    DURATION,
    INT,
    LIST,
    STR,
    VERSION,
    Flag,
    app_log,
    check_one_source,
    fail,
    parse,
    print_version,
    set_app_log,
)
from .runtime import Signals, make_config, run_main, start_consumer

FLAGS = (
    VERSION,
    Flag("log-level", STR, "info", "set log verbosity: debug, info, warn, error, or fatal"),
    Flag("log-prefix", STR, "[nsq_to_file] ", "log message prefix"),
    Flag("channel", STR, "nsq_to_file", "nsq channel"),
    flags.MAX_IN_FLIGHT,
    Flag("output-dir", STR, "/tmp", "directory to write output files to"),
    Flag("work-dir", STR, "", "directory for in-progress files before moving to output-dir"),
    Flag("datetime-format", STR, "%Y-%m-%d_%H", "strftime format for <DATETIME>"),
    Flag(
        "filename-format",
        STR,
        "<TOPIC>.<HOST><REV>.<DATETIME>.log",
        "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced)",
    ),
    Flag("host-identifier", STR, "", "value for <HOST> (<SHORT_HOST>, <HOSTNAME> replaced)"),
    Flag("gzip-level", INT, 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)"),
    Flag("gzip", BOOL, False, "gzip output files."),
    Flag("skip-empty-files", BOOL, False, "skip writing empty files"),
    Flag("topic-refresh", DURATION, 60.0, "how frequently the topic list should be refreshed"),
    Flag("topic-pattern", STR, "", "only log topics matching the following pattern"),
    Flag("rotate-size", INT, 0, "rotate the file when it grows bigger than `rotate-size` bytes"),
    Flag("rotate-interval", DURATION, 0.0, "rotate the file every duration"),
    Flag("sync-interval", DURATION, 30.0, "sync file to disk every duration"),
    flags.HTTP_CONNECT_TIMEOUT,
    Flag("http-client-request-timeout", DURATION, 5.0, "timeout for HTTP request"),
    flags.NSQD_TCP_ADDRESS,
    flags.LOOKUPD_HTTP_ADDRESS,
    Flag("topic", LIST, (), "nsq topic (may be given multiple times)"),
    flags.CONSUMER_OPT,
)

_MSG, _TICK, _HUP, _TERM, _STOPPED = "msg", "tick", "hup", "term", "stopped"


class TopicWriter:
    """One topic: its consumer, its file and the router that joins them."""

    def __init__(self, opts: dict, fopts: FileOptions, topic: str, cfg: Any) -> None:
        self.opts, self.topic, self.cfg = opts, topic, cfg
        self.file = FileLogger(fopts, topic)  # ValueError: bad --filename-format
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.consumer: Any = None
        self.held: list[Any] = []
        self.max_in_flight = opts["max_in_flight"]
        self.task: asyncio.Task[None] | None = None

    async def handle(self, msg: Any) -> None:
        msg.disable_auto_response()
        await self.events.put((_MSG, msg))

    async def start(self) -> None:
        self.consumer = await start_consumer(
            self.topic,
            self.opts["channel"],
            self.cfg,
            self.handle,
            1,
            self.opts["nsqd_tcp_address"],
            self.opts["lookupd_http_address"],
        )
        self.task = asyncio.ensure_future(self.router())

    def _starved(self) -> bool:
        return bool(self.held) and len(self.held) >= int(self.max_in_flight * 0.85)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.opts["sync_interval"])
            await self.events.put((_TICK, None))

    def _sync(self) -> None:
        if not self.held:
            return
        app_log(
            2, f"[{self.topic}/{self.opts['channel']}] syncing {len(self.held)} records to disk"
        )
        self.file.sync()
        for m in reversed(self.held):
            m.finish()
        self.held.clear()

    async def router(self) -> None:
        """file_logger.go's router: one event at a time until the consumer has stopped."""
        f = self.file
        ticker = asyncio.ensure_future(self._ticker())
        stopping = False
        try:
            while True:
                kind, value = await self.events.get()
                sync = close_file = exit_ = False
                if kind == _MSG:
                    if f.needs_rotation():
                        f.update_file()
                        sync = True
                    f.write(value.body + b"\n")
                    self.held.append(value)
                    if len(self.held) >= self.max_in_flight:
                        sync = True
                elif kind == _TICK:
                    if f.needs_rotation():
                        if self.opts["skip_empty_files"]:
                            close_file = True
                        else:
                            f.update_file()
                    sync = True
                elif kind == _HUP:
                    sync = close_file = True
                elif kind == _TERM:  # Go: consumer.Stop(), then exit once it has stopped
                    ticker.cancel()
                    stopping = True
                    stopper = asyncio.ensure_future(self.consumer.stop())
                    stopper.add_done_callback(lambda _: self.events.put_nowait((_STOPPED, None)))
                    sync = True
                elif kind == _STOPPED:
                    sync = close_file = exit_ = True
                if stopping:
                    sync = True  # the consumer waits for the messages in flight to be answered
                if sync or self._starved():
                    if self.held and f.fd is not None:
                        self._sync()
                if close_file:
                    f.close()
                if exit_:
                    return
        except OSError as e:
            fail(f"[{self.topic}/{self.opts['channel']}] writing to disk: {e}")
        finally:
            ticker.cancel()


async def discover(opts: dict, fopts: FileOptions) -> None:
    """topic_discoverer.go's run: the given topics, or the lookupds' topics every refresh."""
    cfg = make_config("nsq_to_file", opts["consumer_opt"], opts["max_in_flight"], strict=False)
    writers: dict[str, TopicWriter] = {}

    def hup() -> None:
        for w in writers.values():
            w.events.put_nowait((_HUP, None))

    signals = Signals(on_hup=hup)
    pattern = opts["topic_pattern"]

    async def update(topics: Sequence[str]) -> None:
        for topic in topics:
            if topic in writers:
                continue
            if pattern:
                try:
                    allowed = re.search(pattern, topic) is not None
                except re.error:
                    allowed = False
                if not allowed:
                    app_log(3, f"skipping topic {topic} (doesn't match pattern {pattern})")
                    continue
            try:
                w = TopicWriter(opts, fopts, topic, cfg)
            except ValueError as e:
                app_log(4, f"couldn't create logger for new topic {topic}: {e}")
                continue
            writers[topic] = w
            await w.start()

    await update(opts["topic"])
    if opts["topic"]:
        await signals.wait()
    else:
        async with HTTPClient(
            opts["http_client_connect_timeout"], opts["http_client_request_timeout"]
        ) as client:
            ci = ClusterInfo(client, opts["lookupd_http_address"], [])
            while not signals.stop.is_set():
                try:
                    await asyncio.wait_for(signals.stop.wait(), opts["topic_refresh"])
                    break
                except TimeoutError:
                    pass
                try:
                    topics, errs = await ci.lookupd_topics()
                    if errs:
                        raise UpstreamError(err_list(errs))
                except (TimeoutError, UpstreamError, FetchError, OSError) as e:
                    app_log(4, f"could not retrieve topic list: {e}")
                    continue
                await update(topics)
    for w in writers.values():
        w.events.put_nowait((_TERM, None))
    await asyncio.gather(*(w.task for w in writers.values() if w.task is not None))
    sys.stdout.flush()


def run(argv: Sequence[str]) -> None:
    """nsq_to_file's command line (``argv`` in Go flag syntax); exits as Go's tool does."""
    opts = parse("nsq_to_file", FLAGS, argv)
    if opts is None:
        return
    try:
        set_app_log(opts["log_prefix"], opts["log_level"])
    except ValueError:
        fail("--log-level is invalid")
    if opts["version"]:
        print_version("nsq_to_file")
        return
    if not opts["channel"]:
        fail("--channel is required")
    flags.require_positive(opts, "http_client_connect_timeout", "http_client_request_timeout")
    check_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"], "nsqd-tcp-address")
    if not 1 <= opts["gzip_level"] <= 9:
        fail(f"invalid --gzip-level value ({opts['gzip_level']}), should be 1-9")
    if not opts["topic"] and not opts["topic_pattern"]:
        fail("--topic or --topic-pattern required")
    if not opts["topic"] and not opts["lookupd_http_address"]:
        fail("--lookupd-http-address must be specified when no --topic specified")
    fopts = FileOptions(
        output_dir=opts["output_dir"],
        work_dir=opts["work_dir"],
        datetime_format=opts["datetime_format"],
        filename_format=opts["filename_format"],
        host_identifier=opts["host_identifier"],
        gzip=opts["gzip"],
        gzip_level=opts["gzip_level"],
        skip_empty_files=opts["skip_empty_files"],
        rotate_size=opts["rotate_size"],
        rotate_interval=opts["rotate_interval"],
        channel=opts["channel"],
    )
    run_main(discover(opts, fopts))
