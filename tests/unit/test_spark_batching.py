"""The nsq source's batch sizing (NSQStreamReader._fill): while a backlog drains, planning a
batch waits for min_batch_rows when the rows since the previous plan came fast enough to make
them within max_batch_delay; a slow stream's batch, a batch already big enough, and
min_batch_rows=0 are planned at once. The fetcher is a stand-in that records what the reader
asks of it (no connection, no spool); the previous plan's time is set by the test."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from nsqpy.spark.source import NSQStreamReader  # noqa: E402


class _Fetcher:
    """What _fill calls: wait_for_batch(end, seconds, gap) -> the durable end it answers."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.calls: list[tuple[int, float, float]] = []

    def wait_for_batch(self, end: int, seconds: float, gap: float) -> int:
        self.calls.append((end, seconds, gap))
        return self.answer


def _reader(**opts: str) -> NSQStreamReader:
    base = {"nsqd_tcp_addresses": "127.0.0.1:4150", "topic": "t", "channel": "c",
            "spool_dir": "/nonexistent/spool"}  # fmt: skip
    return NSQStreamReader({**base, **opts})


def _fill(r: NSQStreamReader, f: _Fetcher, pos: int, end: int, since: float, prev: int,
          limit: Any = None) -> int:  # fmt: skip
    # the previous plan `since` seconds ago ended at `prev`
    r._last_plan = (time.monotonic() - since, prev)
    return r._fill(f, pos, end, limit or ReadAllAvailable())  # type: ignore[arg-type]


def test_defaults() -> None:
    o = _reader().opts
    assert (o.min_batch_rows, o.max_batch_delay_ms) == (200_000, 500)
    o = _reader(min_batch_rows="0", max_batch_delay="2s").opts
    assert (o.min_batch_rows, o.max_batch_delay_ms) == (0, 2000)
    with pytest.raises(ValueError, match="min_batch_rows"):
        _reader(min_batch_rows="-1")
    with pytest.raises(ValueError, match="max_batch_delay"):
        _reader(max_batch_delay="soon")


def test_a_draining_backlog_waits_for_min_batch_rows() -> None:
    r, f = _reader(), _Fetcher(260_000)
    # 100,000 rows in 0.4 s since the last plan: 200,000 are 0.4 s away
    assert _fill(r, f, 60_000, 160_000, 0.4, 60_000) == 260_000
    assert f.calls == [(260_000, 0.5, pytest.approx(0.05))]


def test_a_slow_stream_is_planned_at_once() -> None:
    r, f = _reader(), _Fetcher(-1)
    # 1,000 rows in 1 s: 199,000 more would take minutes
    assert _fill(r, f, 0, 1_000, 1.0, 0) == 1_000
    assert f.calls == []


def test_enough_rows_nothing_new_or_off_is_planned_at_once() -> None:
    f = _Fetcher(-1)
    assert _fill(_reader(), f, 0, 300_000, 0.1, 0) == 300_000  # big enough already
    assert _fill(_reader(), f, 500, 500, 0.1, 0) == 500  # no rows: nothing to wait for
    assert _fill(_reader(min_batch_rows="0"), f, 0, 10, 0.1, 0) == 10
    r = _reader()
    r._last_plan = None  # no previous plan: no rate to go by
    assert r._fill(f, 0, 10, ReadAllAvailable()) == 10  # type: ignore[arg-type]
    assert f.calls == []


def test_max_messages_per_trigger_caps_the_wait() -> None:
    r, f = _reader(), _Fetcher(50_000)
    assert _fill(r, f, 0, 20_000, 0.1, 0, ReadMaxRows(50_000)) == 50_000
    assert f.calls[0][0] == 50_000
