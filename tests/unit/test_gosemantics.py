"""Go semantics in nsqpy.internal: durations (godur), strconv.ParseBool (gostrconv), the lg log
line (lg) and Go flag syntax (goflag)."""

from __future__ import annotations

import logging
import re

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.internal import godur, goflag, gostrconv, lg


@settings(max_examples=300, deadline=None, database=None)
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_ms_and_ns_formats_agree_and_parse_back(ms: int) -> None:
    text = godur.format_go_duration_ms(ms)
    assert text == godur.format_go_duration_ns(ms * 1_000_000)
    assert godur.parse_go_duration_ms(text) == ms
    assert godur.parse_go_duration_ns(text) == ms * 1_000_000


@pytest.mark.parametrize(
    "ns, text",
    [(1, "1ns"), (1_500, "1.5µs"), (1_500_000, "1.5ms"), (61_000_000_000, "1m1s")],
)
def test_format_ns_below_and_above_a_second(ns: int, text: str) -> None:
    assert godur.format_go_duration_ns(ns) == text
    assert godur.parse_go_duration_ns(text) == ns


def test_the_old_homes_use_godur() -> None:
    from nsqpy import options, stats

    assert options.parse_go_duration_ms is godur.parse_go_duration_ms
    assert stats.go_duration_ns is godur.format_go_duration_ns


@pytest.mark.parametrize("text", sorted(gostrconv.GO_TRUE))
def test_parse_bool_true(text: str) -> None:
    assert gostrconv.parse_bool(text) is True


@pytest.mark.parametrize("text", sorted(gostrconv.GO_FALSE))
def test_parse_bool_false(text: str) -> None:
    assert gostrconv.parse_bool(text) is False


@pytest.mark.parametrize("text", ["", "yes", "tRuE", " true", "2"])
def test_parse_bool_refuses_what_go_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid syntax"):
        gostrconv.parse_bool(text)


@pytest.mark.parametrize(
    "text, value",
    [("5", 5), ("+5", 5), ("-5", -5), ("007", 7), ("-0", 0),
     ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)),
     ("0" * 30 + "1", 1)],
)  # fmt: skip
def test_parse_int_as_go(text: str, value: int) -> None:
    assert gostrconv.parse_int(text) == value


@pytest.mark.parametrize(
    "text, why",
    [("", "syntax"), (" 5", "syntax"), ("5 ", "syntax"), ("1_0", "syntax"), ("+", "syntax"),
     ("--5", "syntax"), ("0x10", "syntax"), ("\u0665", "syntax"), ("9223372036854775808", "range"),
     ("-9223372036854775809", "range"), ("9" * 40, "range")],
)  # fmt: skip
def test_parse_int_refuses_what_go_refuses(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="invalid syntax" if why == "syntax" else "out of range"):
        gostrconv.parse_int(text)
    assert gostrconv.parse_int("127", bits=8) == 127
    with pytest.raises(ValueError, match="out of range"):
        gostrconv.parse_int("128", bits=8)


def test_goflag_booleans_follow_parse_bool() -> None:
    got = goflag.normalize_go_flags(["-a=T", "-b=0", "-c=1"], {"a", "b", "c"})
    assert got == ["--a", "--no-b", "--c"]
    with pytest.raises(click.UsageError, match='invalid boolean value "yes" for -a'):
        goflag.normalize_go_flags(["-a=yes"], {"a"})


def test_lg_line_shape() -> None:
    rec = logging.LogRecord("nsqpy", logging.CRITICAL, __file__, 1, "bye %d", (1,), None)
    line = lg.NsqLogFormatter("[nsqd] ").format(rec)
    assert re.fullmatch(r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} FATAL: bye 1", line)
    assert lg.LOG_LEVEL_NUMBERS["warn"] == 3 and lg.LOG_LEVELS["fatal"] == logging.CRITICAL
