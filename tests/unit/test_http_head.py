"""nsqpy.internal.http.head: request heads read in slices, with net/http's limit.

Checked against h11 (which read whole heads before): the same heads are accepted and refused,
with the same method, target, version and headers, however the bytes are split and whatever
the budget; a head that bodiless_keep_alive() frames without h11 is one h11 reads as a request
without a body, keeping the connection as h11 would; a head over the limit is refused with 431
before its end arrives; a budget spent
part way says MORE and the next step goes on. Also request.py's one-pass URL unescaping, the
same as its byte-at-a-time form (which names a bad escape).
"""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.internal.http import request
from nsqpy.internal.http.head import (
    DONE,
    MAX_HEADER_BYTES,
    MORE,
    NEED_DATA,
    HeadError,
    HeadReader,
)


def _read(raw: bytes, cuts: list[int], budget: int) -> HeadReader | None:
    """Feed ``raw`` in pieces cut at ``cuts``; the reader once DONE, None when refused."""
    r = HeadReader()
    edges = sorted({0, len(raw), *(c for c in cuts if 0 < c < len(raw))})
    try:
        for a, b in zip(edges, edges[1:], strict=False):
            r.feed(raw[a:b])
            while (state := r.step(budget)) == MORE:
                pass
            if state == DONE:
                r.rest += raw[b:]  # what the connection hands on to h11 as it comes
                return r
    except HeadError:
        return None
    raise AssertionError("head never done")


def _h11(raw: bytes) -> h11.Request | None:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(raw)
    try:
        ev = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    assert isinstance(ev, h11.Request), ev
    return ev


LINES = [
    b"Host: x",
    b"host:x",
    b"X-A:   spaced value \t",
    b"X-B: a\x01b",
    b"X-C: \x80\xff",
    b"Content-Length: 3",
    b" folded",
    b"\tfolded too",
    b"X-D:",
    b"Bad Name: v",
    b"NoColon",
    b"X-E: a\x0bb",
    b"X-F: a\x00b",
    b"X-G: a\rb",
    b"Connection: keep-alive, Close",
    b"Connection: keep-alive",
    b"Expect: 100-continue",
    b"Transfer-Encoding: chunked",
]
REQUEST_LINES = [
    b"GET /ping HTTP/1.1",
    b"POST /pub?topic=a HTTP/1.0",
    b"G@T / HTTP/1.1",
    b"GET  / HTTP/1.1",
    b"GET / HTTP/11",
    b"GET /\x7f HTTP/1.1",
    b"GET /ping HTTP/1.0",
    b"GET /ping HTTP/2.0",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(REQUEST_LINES),
    st.lists(st.sampled_from(LINES), max_size=6),
    st.sampled_from([b"\r\n", b"\n"]),
    st.lists(st.integers(0, 200), max_size=5),
    st.integers(1, 64),
)
def test_same_heads_as_h11(
    request_line: bytes, lines: list[bytes], eol: bytes, cuts: list[int], budget: int
) -> None:
    raw = eol.join([request_line, *lines]) + eol + eol + b"rest"
    want = _h11(raw)
    got = _read(raw, cuts, budget)
    # h11 then reads the framing (Host, Content-Length, ...) as it read the whole head
    framed = _h11(got.framing() + got.rest) if got is not None else None
    assert (framed is not None) == (want is not None)
    if got is None or want is None:
        return
    assert (got.method, got.target, got.version) == (want.method, want.target, want.http_version)
    assert got.headers == list(want.headers)  # as h11 lower-cases them
    assert got.rest == b"rest"
    keep_alive = got.bodiless_keep_alive()
    if keep_alive is not None:  # h11 would see a request without a body, and nothing more
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(got.framing() + got.rest)
        ev = conn.next_event()
        assert isinstance(ev, h11.Request)
        assert type(conn.next_event()) is h11.EndOfMessage
        assert not conn.they_are_waiting_for_100_continue
        h11_keep_alive = ev.http_version == b"1.1" and not any(
            n == b"connection" for n, _ in ev.headers
        )
        assert keep_alive == h11_keep_alive
        assert conn.their_state is (h11.DONE if keep_alive else h11.MUST_CLOSE)
        assert conn.trailing_data == (b"rest", False)


def test_over_the_limit_refused_before_the_end() -> None:
    r = HeadReader(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEADER_BYTES)
    with pytest.raises(HeadError) as e:
        r.step(1 << 30)
    assert e.value.status == 431


def test_at_the_limit_accepted() -> None:
    head = b"GET / HTTP/1.1\r\nX: \r\n\r\n"
    raw = head[:-4] + b"a" * (MAX_HEADER_BYTES - len(head)) + b"\r\n\r\n"
    assert len(raw) == MAX_HEADER_BYTES
    r = HeadReader(raw)
    while (state := r.step(1 << 16)) == MORE:
        pass
    assert state == DONE and len(r.headers[0][1]) == MAX_HEADER_BYTES - len(head)
    with pytest.raises(HeadError):
        HeadReader(raw[:-4] + b"a\r\n\r\n").step(1 << 30)


def test_budget_slices_many_lines() -> None:
    raw = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(10_000)) + b"\r\n"
    r = HeadReader(raw)
    steps = 1
    while (state := r.step(4096)) == MORE:
        steps += 1
    assert state == DONE and len(r.headers) == 10_000
    assert steps >= len(raw) // 4096


def test_need_data_and_bad_first_byte() -> None:
    r = HeadReader(b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert r.step(100) == NEED_DATA
    with pytest.raises(HeadError):
        HeadReader(b" GET").step(100)


def test_framing_keeps_what_frames_the_body() -> None:
    raw = (
        b"POST /pub HTTP/1.1\r\nHost: " + b"h" * 5000 + b"\r\nContent-Length: 2\r\n"
        b"Connection: keep-alive, Close\r\nExpect: 100-continue\r\nX-Other: y\r\n\r\nab"
    )
    r = HeadReader(raw)
    assert r.step(1 << 20) == DONE
    framing = r.framing()
    assert framing == (
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n"
        b"connection: close\r\nexpect: 100-continue\r\n\r\n"
    )
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(framing + r.rest)
    assert isinstance(conn.next_event(), h11.Request)
    assert conn.they_are_waiting_for_100_continue


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab=+%_ \t.\r\n41fFzZ/\x00\x7f\u00e9", max_size=16), st.booleans())
def test_unescape_as_bytewise(s: str, plus_is_space: bool) -> None:
    def run(f):  # type: ignore[no-untyped-def]
        try:
            return f(s, plus_is_space)
        except ValueError as e:
            return ("error", str(e))

    assert run(request._unescape) == run(request._unescape_bytewise)


def test_unescape_a_megabyte_of_escapes() -> None:
    assert request._path_unescape("/" + "a%41" * (256 * 1024)) == "/" + "aA" * (256 * 1024)
