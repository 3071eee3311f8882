"""`nsqpy <tool>` next to Go's own tool (NSQ v1.3.0, tests/support/gobin.py finds them): the same
flags and the same input, against one nsqpy-d (registered with one nsqpy-lookupd), give the
same output: nsq_tail's lines, to_nsq's published messages, nsq_stat's columns, nsq_to_file's
file names and contents (gzip, rotation, work dir, topic pattern), nsq_to_nsq's copies and
nsq_to_http's requests as a loopback aiohttp server sees them.

Each pair runs at once, on separate channels of the same topic (created before the messages
are published, so each gets every message), bounded by ``-n``, ``--count`` or a wait for the
expected output followed by SIGTERM, and a timeout. Normalised, and why: nsq_stat's ingress and
egress columns (rates over each tool's own polling instants); nsq_to_file's <PID> (the two
processes); gzip files are compared decompressed (Go's deflate and zlib choose different
bytes, and the number of members follows the sync timing). Differences on purpose
(docs/compatibility.md): to_nsq publishes a last line that has no delimiter whole (Go drops
its last byte), and nsq_tail -n N finishes the N-th message (Go's exit sends it back) -- both
checked here too."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemons import ROOT
from support.gobin import require
from support.raw_client import RawClient

from nsqpy.testing import Nsqd, Nsqlookupd, wait_for

TIMEOUT = 20


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Nsqd, Nsqlookupd]]:
    lk = Nsqlookupd(cwd=ROOT)
    nsqd = Nsqd(
        [f"--lookupd-tcp-address={lk.tcp_address}", "--broadcast-address=127.0.0.1"], cwd=ROOT
    )
    yield nsqd, lk
    nsqd.stop()
    lk.stop()


def go_tool(tool: str) -> str:
    """Go's ``tool``; to_nsq has no -version for gobin's v1.3.x check, so it is taken from the
    directory of a checked nsq_tail (skipping, saying why, when it is not there)."""
    if tool != "to_nsq":
        return require(tool)
    path = Path(require("nsq_tail")).parent / "to_nsq"
    if not os.access(path, os.X_OK):
        pytest.skip(f"Go to_nsq not found next to Go nsq_tail ({path})")
    return str(path)


def command(which: str, tool: str, *args: str) -> list[str]:
    if which == "go":
        return [go_tool(tool), *args]
    return [sys.executable, "-m", "nsqpy.tools", tool, *args]


def spawn(which: str, tool: str, *args: str, stdin: int | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        command(which, tool, *args),
        cwd=ROOT,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def both(tool: str, args_for: dict[str, list[str]], stdin: bytes | None = None) -> dict:
    """Run Go's and nsqpy's ``tool`` at once; {which: (rc, stdout, stderr)}."""
    procs = {
        w: spawn(w, tool, *a, stdin=subprocess.PIPE if stdin is not None else None)
        for w, a in args_for.items()
    }
    out = {}
    for w, p in procs.items():
        try:
            so, se = p.communicate(stdin, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            raise AssertionError(f"{w} {tool} did not end: {se.decode()[-2000:]}") from None
        out[w] = (p.returncode, so, se)
    return out


def stop(procs: dict[str, subprocess.Popen]) -> dict[str, bytes]:
    """SIGTERM each, wait for its exit (which must be clean); {which: stderr}."""
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    errs = {}
    for w, p in procs.items():
        try:
            _, se = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            _, se = p.communicate()
            raise AssertionError(f"{w} did not stop: {se.decode()[-2000:]}") from None
        assert p.returncode == 0, (w, p.returncode, se.decode()[-2000:])
        errs[w] = se
    return errs


def channels(nsqd: Nsqd, topic: str, *names: str) -> None:
    nsqd.post("/topic/create", topic=topic)
    for name in names:
        nsqd.post("/channel/create", topic=topic, channel=name)


def done(nsqd: Nsqd, topic: str, channel: str, n: int) -> bool:
    """True once ``channel`` has had ``n`` messages and holds none (all finished)."""
    for t in nsqd.stats(topic=topic).get("topics") or []:
        for c in t.get("channels") or []:
            if c["channel_name"] == channel:
                return c["message_count"] == n and not c["depth"] and not c["in_flight_count"]
    return False


def drain(nsqd: Nsqd, topic: str, n: int, channel: str = "check") -> list[bytes]:
    """The first ``n`` messages of ``topic`` on ``channel`` (finished), in order."""
    c = RawClient(nsqd.tcp_port)
    c.sub(topic, channel, rdy=n)
    bodies = []
    for _ in range(n):
        _, _, msg_id, body = c.read_message(timeout=10)
        c.cmd(b"FIN", msg_id)
        bodies.append(body)
    c.close()
    return bodies


# ---------------------------------------------------------------------------- nsq_tail


@pytest.mark.parametrize("source", ["nsqd", "lookupd"])
def test_nsq_tail_prints_the_same_lines_as_go(cluster, source: str) -> None:
    nsqd, lk = cluster
    topic = f"tail_{source}"
    channels(nsqd, topic, "go", "py")
    bodies = [b"one", b"two words", "\u00e9t\u00e9".encode(), b" ", b"x" * 3000, b"last"]
    nsqd.mpub(topic, bodies)
    if source == "lookupd":
        wait_for(lambda: lk.producers(topic), what="the topic at the lookupd")
        addr = f"--lookupd-http-address={lk.http_address}"
    else:
        addr = f"--nsqd-tcp-address={nsqd.tcp_address}"
    common = [f"--topic={topic}", addr, "-n", "6"]
    out = both(
        "nsq_tail",
        {w: [*common, f"--channel={w}", "-print-topic"] for w in ("go", "py")},
    )
    assert out["go"][0] == out["py"][0] == 0
    assert out["py"][1] == out["go"][1]
    assert out["py"][1] == b"".join(topic.encode() + b" | " + b + b"\n" for b in bodies)
    # the difference on purpose: Go exits inside the N-th message's handler, so that message
    # goes back to its channel; nsqpy finishes every message it printed. (Go's exit can also
    # beat the FINs its write loop had not sent yet, so more than one may come back there.)
    wait_for(lambda: _settled(nsqd, topic, "go") >= 1, what="Go's last message back in its channel")
    assert wait_for(lambda: _settled(nsqd, topic, "py") + 1, what="nsqpy's channel settled") == 1


def _settled(nsqd: Nsqd, topic: str, channel: str) -> int:
    """The channel's depth once none of its messages are in flight; -1 before that."""
    for t in nsqd.stats(topic=topic).get("topics") or []:
        for c in t.get("channels") or []:
            if c["channel_name"] == channel and not c["in_flight_count"]:
                return int(c["depth"])
    return -1


# ---------------------------------------------------------------------------- to_nsq


@pytest.mark.parametrize(
    "stdin,delimiter",
    [(b"a\nbb\n\nc c\n\xff\xfe\n", "\n"), (b"x,y,,z,", ",")],
    ids=["newline", "comma"],
)
def test_to_nsq_publishes_the_same_messages_as_go(cluster, stdin: bytes, delimiter: str) -> None:
    nsqd, _ = cluster
    topic = {"\n": "to_nl", ",": "to_comma"}[delimiter]
    args = {
        w: [
            f"--topic={topic}_{w}",
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"-delimiter={delimiter}",
            "-rate=200",
        ]
        for w in ("go", "py")
    }
    out = both("to_nsq", args, stdin=stdin)
    assert out["go"][0] == out["py"][0] == 0, out
    want = [p for p in stdin.split(delimiter.encode()) if p]
    assert drain(nsqd, f"{topic}_go", len(want)) == drain(nsqd, f"{topic}_py", len(want)) == want


def test_to_nsq_keeps_an_unterminated_last_line_whole(cluster) -> None:
    """The one difference on purpose: Go trims the last byte of a last line that has no
    delimiter (its readAndPublish drops one byte from whatever ReadBytes returned)."""
    nsqd, _ = cluster
    stdin = b"first\nsecond"
    out = both(
        "to_nsq",
        {
            w: [f"--topic=to_last_{w}", f"--nsqd-tcp-address={nsqd.tcp_address}"]
            for w in ("go", "py")
        },
        stdin=stdin,
    )
    assert out["go"][0] == out["py"][0] == 0
    assert drain(nsqd, "to_last_py", 2) == [b"first", b"second"]
    assert drain(nsqd, "to_last_go", 2) == [b"first", b"secon"]


# ---------------------------------------------------------------------------- nsq_stat


def _rates_blanked(text: bytes) -> list[str]:
    """nsq_stat's lines with the two rate columns (ingress, egress) blanked: each tool computes
    them over its own polling instants."""
    lines = text.decode().splitlines()
    return [
        ln if "|" not in ln or ln.startswith(("-", "ingress")) else "x x" + ln[15:] for ln in lines
    ]


@pytest.mark.parametrize("source", ["nsqd", "lookupd"])
def test_nsq_stat_prints_the_same_columns_as_go(cluster, source: str) -> None:
    nsqd, lk = cluster
    topic = f"stat_{source}"
    channels(nsqd, topic, "c1")
    nsqd.mpub(topic, [b"m"] * 7)
    c = RawClient(nsqd.tcp_port)
    c.sub(topic, "c1", rdy=2)  # two in flight, one client
    c.read_message()
    c.read_message()
    addr = (
        f"--nsqd-http-address={nsqd.http_address}"
        if source == "nsqd"
        else f"--lookupd-http-address={lk.http_address}"
    )
    if source == "lookupd":
        wait_for(lambda: lk.producers(topic), what="the topic at the lookupd")
    args = [f"--topic={topic}", "--channel=c1", addr, "--count=3", "-interval", "100ms"]
    out = both("nsq_stat", {"go": args, "py": args})
    c.close()
    assert out["go"][0] == out["py"][0] == 0, out
    go, py = _rates_blanked(out["go"][1]), _rates_blanked(out["py"][1])
    assert py == go
    assert len(py) == 5 and py[2].split() == "x x | 5 5 0 2 0 | 0 0 7 1".split()


def test_nsq_stat_refuses_a_missing_channel_as_go(cluster) -> None:
    nsqd, _ = cluster
    channels(nsqd, "stat_t")
    args = ["--topic=stat_t", "--channel=nope", f"--nsqd-http-address={nsqd.http_address}"]
    out = both("nsq_stat", {"go": args, "py": args})
    for w in ("go", "py"):
        rc, so, se = out[w]
        assert rc == 1 and b"failed to find channel(nope)" in se, (w, se)
        assert so == b""


# ---------------------------------------------------------------------------- nsq_to_file


def _files(root: Path, pid: int = 0) -> dict[str, bytes]:
    """{path under root, the tool's ``pid`` written PID: contents (gzip decompressed)}."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name.endswith(".gz"):
                data = gzip.decompress(data)
            name = str(p.relative_to(root))
            out[name.replace(str(pid), "PID") if pid else name] = data
    return out


def _lines(root: Path) -> int:
    return sum(data.count(b"\n") for data in _files(root).values())


def _to_file_pair(
    tmp_path: Path, nsqd: Nsqd, topic: str, bodies: list[bytes], *flags: str
) -> dict[str, dict[str, bytes]]:
    channels(nsqd, topic, "go", "py")
    nsqd.mpub(topic, bodies)
    procs = {}
    for w in ("go", "py"):
        (tmp_path / w / "out").mkdir(parents=True)
        procs[w] = spawn(
            w,
            "nsq_to_file",
            f"--topic={topic}",
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--channel={w}",
            f"--output-dir={tmp_path / w / 'out'}",
            "--sync-interval=100ms",
            *[f.replace("{work}", str(tmp_path / w / "work")) for f in flags],
        )
    wait_for(
        lambda: all(done(nsqd, topic, w, len(bodies)) for w in ("go", "py")),
        TIMEOUT,
        what="every message written and finished (synced) by both",
    )
    stop(procs)
    return {w: _files(tmp_path / w / "out", procs[w].pid) for w in ("go", "py")}


def test_nsq_to_file_writes_the_same_files_as_go(cluster, tmp_path: Path) -> None:
    nsqd, _ = cluster
    bodies = [f"line {i}".encode() for i in range(12)]
    files = _to_file_pair(
        tmp_path,
        nsqd,
        "file_plain",
        bodies,
        "--datetime-format=%Y%m%d-%H.v1",
        "--filename-format=<TOPIC>/<HOST>.<DATETIME>.<PID>.log",
    )
    assert files["py"].keys() == files["go"].keys() and len(files["py"]) == 1
    (name,) = files["py"]
    assert name.startswith("file_plain/") and name.endswith(".PID.log") and ".v" in name
    assert files["py"] == files["go"]
    assert files["py"][name] == b"".join(b + b"\n" for b in bodies)


def test_nsq_to_file_gzip_rotation_work_dir_as_go(cluster, tmp_path: Path) -> None:
    nsqd, _ = cluster
    bodies = [f"record-{i:03d}".encode() for i in range(25)]  # 11 bytes a line
    files = _to_file_pair(
        tmp_path,
        nsqd,
        "file_gz",
        bodies,
        "-gzip",
        "--gzip-level=9",
        "--rotate-size=60",
        "--work-dir={work}",
    )
    go, py = files["go"], files["py"]
    assert sorted(py) == sorted(go) and len(py) == 5, (sorted(py), sorted(go))
    assert py == go
    assert b"".join(py[k] for k in sorted(py)) == b"".join(b + b"\n" for b in bodies)
    assert not [p for w in ("go", "py") for p in (tmp_path / w / "work").rglob("*") if p.is_file()]


def test_nsq_to_file_topic_pattern_from_the_lookupd_as_go(cluster, tmp_path: Path) -> None:
    nsqd, lk = cluster
    for topic in ("pat_a", "other_b"):
        channels(nsqd, topic, "go", "py")
        nsqd.mpub(topic, [f"{topic} {i}".encode() for i in range(3)])
    wait_for(lambda: lk.producers("pat_a") and lk.producers("other_b"), what="lookupd topics")
    procs = {}
    for w in ("go", "py"):
        procs[w] = spawn(
            w,
            "nsq_to_file",
            f"--lookupd-http-address={lk.http_address}",
            f"--channel={w}",
            f"--output-dir={tmp_path / w}",
            "--topic-pattern=^pat_",
            "--topic-refresh=100ms",
            "--sync-interval=100ms",
            "--consumer-opt=lookupd_poll_interval,100ms",
        )
    wait_for(
        lambda: all(done(nsqd, "pat_a", w, 3) for w in ("go", "py")), TIMEOUT, what="pat_a done"
    )
    wait_for(
        lambda: all(_lines(tmp_path / w) == 3 for w in ("go", "py")),
        TIMEOUT,
        what="three lines written by each",
    )
    stop(procs)
    go, py = _files(tmp_path / "go"), _files(tmp_path / "py")
    assert py == go and len(py) == 1
    assert next(iter(py)).startswith("pat_a.")
    assert nsqd.depth("other_b", "py") == 3


# ---------------------------------------------------------------------------- nsq_to_nsq


def test_nsq_to_nsq_copies_as_go(cluster) -> None:
    nsqd, _ = cluster
    bodies = [
        b'{"a":1,"b":"x<y","c":2.5,"z":true}',
        b'{"b":"q","a":[1,2.0,{"k":3e0}]}',
        b"not json",
        b'{"a":1e21,"b":"y","c":0.000001}',
        b'{"c":5}',
        b'{"b":7,"a":"s"}',
    ]
    channels(nsqd, "n2n_src", "go", "py")
    nsqd.mpub("n2n_src", bodies)
    procs = {
        w: spawn(
            w,
            "nsq_to_nsq",
            "--topic=n2n_src",
            f"--channel={w}",
            f"--nsqd-tcp-address={nsqd.tcp_address}",
            f"--destination-nsqd-tcp-address={nsqd.tcp_address}",
            f"--destination-topic=n2n_dst_{w}",
            "--mode=round-robin",
            "--whitelist-json-field=a",
            "--whitelist-json-field=b",
            "--whitelist-json-field=c",
            "--require-json-field=b",
        )
        for w in ("go", "py")
    }
    wait_for(
        lambda: all(done(nsqd, "n2n_src", w, len(bodies)) for w in ("go", "py")),
        TIMEOUT,
        what="source copied",
    )
    got = {w: drain(nsqd, f"n2n_dst_{w}", 4) for w in ("go", "py")}
    stop(procs)
    assert got["py"] == got["go"]
    assert got["py"][0] == b'{"a":1,"b":"x\\u003cy","c":2.5}'


# ---------------------------------------------------------------------------- nsq_to_http


class Recorder:
    """An aiohttp server on loopback (its own thread and loop) recording every request:
    (method, path with query, selected headers, body); answers 200."""

    HEADERS = ("Content-Type", "User-Agent", "X-Trace")

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, tuple, bytes]] = []
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            hdrs = tuple(request.headers.get(h, "") for h in self.HEADERS)
            self.seen.append((request.method, request.path_qs, hdrs, body))
            return web.Response(text="ok")

        async def start() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def of(self, who: str) -> list[tuple[str, str, tuple, bytes]]:
        prefix = f"/{who}/"
        return sorted(
            (m, p.replace(prefix, "/", 1), h, b) for m, p, h, b in self.seen if p.startswith(prefix)
        )


@pytest.mark.parametrize(
    "method,mode", [("post", "round-robin"), ("get", "hostpool"), ("post", "every")]
)
def test_nsq_to_http_sends_the_same_requests_as_go(cluster, method: str, mode: str) -> None:
    """--mode: round-robin, hostpool (the default), and an unknown mode, which Go's code
    reads as its zero mode: every address gets every message."""
    nsqd, _ = cluster
    topic = f"http_{method}_{mode.replace('-', '_')}"
    bodies = [b"plain", b"sp ace&amp=1/?", "\u00fc".encode(), b'{"j":1}']
    channels(nsqd, topic, "go", "py")
    nsqd.mpub(topic, bodies)
    per_address = len(bodies) if mode == "every" else len(bodies) // 2
    rec = Recorder()
    try:
        base = f"http://127.0.0.1:{rec.port}"

        def target(w: str, name: str) -> str:
            if method == "post":
                return f"--post={base}/{w}/{name}"
            return f"--get={base}/{w}/{name}?msg=%s&x=1"

        extra = ["--content-type=application/json"] if method == "post" else []
        if mode != "hostpool":
            extra.append(f"--mode={mode}")
        procs = {
            w: spawn(
                w,
                "nsq_to_http",
                f"--topic={topic}",
                f"--channel={w}",
                f"--nsqd-tcp-address={nsqd.tcp_address}",
                target(w, "a"),
                target(w, "b"),
                "-n",
                "1",
                "--header=X-Trace: t1",
                *extra,
            )
            for w in ("go", "py")
        }
        wait_for(
            lambda: len(rec.of("go")) == len(rec.of("py")) == 2 * per_address,
            TIMEOUT,
            what="every request at the server",
        )
        stop(procs)
        go, py = rec.of("go"), rec.of("py")
    finally:
        rec.close()
    assert py == go
    paths = [p for _, p, _, _ in py]
    assert sum(p.startswith("/a") for p in paths) == per_address
    assert sum(p.startswith("/b") for p in paths) == per_address
    assert all(h[1] == "nsq_to_http v1.3.0" and h[2] == "t1" for _, _, h, _ in py)
