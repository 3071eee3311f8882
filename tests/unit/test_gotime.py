"""nsqpy.internal.gotime: Go's time layouts (RFC 3339, http.TimeFormat) in three zones."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from nsqpy.internal.gotime import date_time, date_time_ms, http_date, rfc3339, rfc3339_ms

TS = 1_700_000_000  # 2023-11-14T22:13:20Z, a Tuesday


@pytest.fixture(params=["UTC", "Europe/Paris", "America/St_Johns"])
def zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


def test_rfc3339_in_the_local_zone(zone: str) -> None:
    want = {
        "UTC": "2023-11-14T22:13:20Z",
        "Europe/Paris": "2023-11-14T23:13:20+01:00",
        "America/St_Johns": "2023-11-14T18:43:20-03:30",
    }[zone]
    assert rfc3339(TS) == want
    assert rfc3339(TS + 0.999) == want  # Go's layout drops the fraction
    assert rfc3339(TS, utc=True) == "2023-11-14T22:13:20Z"
    assert rfc3339_ms(TS * 1000 + 7) == want.replace(":20", ":20.007", 1)
    assert rfc3339_ms(TS * 1000 + 999, utc=True) == "2023-11-14T22:13:20.999Z"


def test_date_time(zone: str) -> None:
    assert date_time(TS, utc=True) == "2023-11-14 22:13:20"
    assert date_time_ms(TS * 1000 + 45, utc=True) == "2023-11-14 22:13:20.045"
    assert date_time(TS) == rfc3339(TS)[:19].replace("T", " ")


def test_http_date_is_imf_fixdate() -> None:
    text = http_date()
    assert re.fullmatch(
        r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT", text
    )
    assert (
        abs(
            time.mktime(time.strptime(text, "%a, %d %b %Y %H:%M:%S GMT"))
            - time.mktime(time.gmtime())
        )
        <= 2
    )
