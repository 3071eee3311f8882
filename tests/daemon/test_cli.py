"""nsqpy-d's command line: nsqd's flag names, Go flag syntax, version line, start and stop."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest
from support.daemons import DAEMON_CWD, Daemon
from support.unixsock import start_on_unix_sockets, unix_http, unix_pub

from nsqpy.cli import normalize_go_flags


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nsqpy", *args],
        cwd=DAEMON_CWD,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_version_line_has_nsqd_shape():
    r = run_cli("--version")
    assert r.returncode == 0
    assert re.fullmatch(r"nsqd v1\.3\.0 \(built w/\S+\)\n", r.stdout), r.stdout
    assert run_cli("-version").stdout == r.stdout


@pytest.mark.parametrize("flag", ["-enable-experiment", "--enable-experiment=x"])
def test_unimplemented_nsqd_flag_is_refused_by_name(flag):
    r = run_cli(flag, "x")
    assert r.returncode == 2
    name = flag.lstrip("-").split("=")[0]
    assert f"--{name}" in r.stderr and "does not implement" in r.stderr


def test_unknown_flag_is_refused():
    r = run_cli("--no-such-flag=1")
    assert r.returncode == 2 and "no-such-flag" in r.stderr


def test_bad_duration_is_refused():
    r = run_cli("--msg-timeout=10", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    assert r.returncode == 2 and "msg-timeout" in r.stderr


def test_node_id_out_of_range_fails_at_start():
    r = run_cli("--node-id=1024", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    assert r.returncode == 1 and "--node-id must be [0,1024)" in r.stderr


@pytest.mark.parametrize(
    "flags, text",
    [
        (["--tcp-address=127.0.0.1:99999"], "listen tcp: address 99999: invalid port"),
        (["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:99999"], "invalid port"),
        (["--tcp-address=no-such-host.invalid:0"], "listen (no-such-host.invalid:0) failed"),
    ],
)
def test_failed_listen_is_fatal_and_writes_nothing(tmp_path, flags, text):
    """As nsqd (New() fails before metadata is loaded or persisted): FATAL, exit 1, and the
    data path untouched: no nsqd.dat, and an existing one (even a bad one) left as it was."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    r = run_cli(*flags, f"--data-path={fresh}")
    assert r.returncode == 1, r.stderr
    assert f"FATAL: failed to instantiate nsqd - {text}" in r.stderr or text in r.stderr
    assert "Traceback" not in r.stderr and "persisting" not in r.stderr
    assert list(fresh.iterdir()) == []
    kept = tmp_path / "kept"
    kept.mkdir()
    meta = b'{"topics":[{"name":"t","paused":false,"channels":null}],"version":"1.3.0"}'
    (kept / "nsqd.dat").write_bytes(meta)
    r = run_cli(*flags, f"--data-path={kept}")
    assert r.returncode == 1 and text in r.stderr
    assert sorted(p.name for p in kept.iterdir()) == ["nsqd.dat"]
    assert (kept / "nsqd.dat").read_bytes() == meta


def test_bad_metadata_is_fatal_and_left_as_it_was(tmp_path):
    (tmp_path / "nsqd.dat").write_bytes(b"{bad")
    r = run_cli(
        "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"
    )
    assert r.returncode == 1 and "failed to parse metadata" in r.stderr
    assert (tmp_path / "nsqd.dat").read_bytes() == b"{bad"


def test_go_flag_spellings_are_normalised():
    assert normalize_go_flags(
        ["-msg-timeout", "5s", "-snappy=false", "--deflate=true", "-tcp-address=1.2.3.4:5"]
    ) == ["--msg-timeout", "5s", "--no-snappy", "--deflate", "--tcp-address=1.2.3.4:5"]


def test_flags_take_effect_in_identify_and_info(daemon_factory):
    d = daemon_factory(
        "-msg-timeout",
        "1m30s",
        "--max-rdy-count=100",
        "-max-msg-timeout=20m",
        "--snappy=false",
        "-node-id=7",
    )
    c = d.raw()
    reply = c.identify(feature_negotiation=True)
    assert b'"max_rdy_count":100' in reply
    assert b'"msg_timeout":90000' in reply
    assert b'"max_msg_timeout":1200000' in reply
    c.cmd(b"PUB", b"t", body=b"x")
    c.expect_response()
    s = d.raw()
    s.sub("t", "c", rdy=1)
    guid = int(s.read_message()[2], 16)
    assert (guid >> 12) & 1023 == 7


def test_port_shorthands_and_log_lines(tmp_path):
    import socket

    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    tcp_port, http_port = (s.getsockname()[1] for s in socks)
    for s in socks:
        s.close()
    d = Daemon([f"--tcp-port={tcp_port}", "--http-port", str(http_port)], tmp_path / "d")
    try:
        assert (d.tcp_port, d.http_port) == (tcp_port, http_port)
        text = d.log_text()
        assert re.search(
            r"^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: "
            rf"TCP: listening on 127\.0\.0\.1:{tcp_port}$",
            text,
            re.MULTILINE,
        ), text
        assert f"HTTP: listening on 127.0.0.1:{http_port}" in text
        code, body, _ = d.http("GET", "/ping")
        assert (code, body) == (200, b"OK")
    finally:
        assert d.stop() == 0


def test_tcp_port_shorthand_keeps_an_ipv6_address(tmp_path):
    """--tcp-port sets the port of --tcp-address=[::1] (given with a port or without one,
    which once came out as "[::<port>"): the daemon listens on [::1]:<port>, speaks V2."""
    import socket

    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    port = probe.getsockname()[1]
    probe.close()
    d = Daemon(["--tcp-address=[::1]", f"--tcp-port={port}"], tmp_path / "d")
    try:
        assert d.tcp_port == port
        assert f"TCP: listening on [::1]:{port}" in d.log_text()
        with socket.create_connection(("::1", port), timeout=5) as s:
            s.sendall(b"  V2BOGUS\n")
            reply = b""
            while b"E_INVALID" not in reply:
                chunk = s.recv(256)
                assert chunk, reply
                reply += chunk
    finally:
        assert d.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_exit_on_signal_with_clients_connected(tmp_path, sig):
    d = Daemon([], tmp_path / "d")
    c = d.raw()
    c.sub("t", "c", rdy=1)
    t0 = time.monotonic()
    d.proc.send_signal(sig)
    assert d.proc.wait(10) == 0
    assert time.monotonic() - t0 < 5
    assert c.closed_by_server()


def test_starts_quickly(tmp_path):
    t0 = time.monotonic()
    d = Daemon([], tmp_path / "d")
    try:
        code, body, _ = d.http("GET", "/ping")
        elapsed = time.monotonic() - t0
        assert (code, body) == (200, b"OK")
        # Generous bound for a loaded 2-core CI machine; typically about 0.4 s.
        assert elapsed < 3, elapsed
    finally:
        d.stop()


def test_unix_socket_addresses_as_nsqd(tmp_path):
    """nsqd's --tcp-address/--http-address <path> form (util.TypeOfAddr: not host:port means a
    unix socket): both listeners on socket files, /info's ports -1, PUB over the socket, the
    files removed at exit; a path that exists already is FATAL, as Go's net.Listen("unix")."""
    p = start_on_unix_sockets([sys.executable, "-m", "nsqpy"], tmp_path)
    try:
        code, body = unix_http(f"{tmp_path}/http.sock", "GET", "/info")
        info = __import__("json").loads(body)
        assert code == 200 and info["tcp_port"] == -1 and info["http_port"] == -1
        assert unix_pub(f"{tmp_path}/tcp.sock", b"ux", b"hi") == b"\0\0\0\x06\0\0\0\0OK"
        assert unix_http(f"{tmp_path}/http.sock", "POST", "/pub?topic=ux", b"yo") == (200, b"OK")
        code, body = unix_http(f"{tmp_path}/http.sock", "GET", "/stats?format=json&topic=ux")
        assert __import__("json").loads(body)["topics"][0]["depth"] == 2
    finally:
        code = p.stop(15)
    err = p.log_text()
    assert code == 0, err
    assert f"TCP: listening on {tmp_path}/tcp.sock" in err
    assert f"HTTP: listening on {tmp_path}/http.sock" in err
    assert f"TCP: closing {tmp_path}/tcp.sock" in err
    assert not (tmp_path / "tcp.sock").exists() and not (tmp_path / "http.sock").exists()

    (tmp_path / "tcp.sock").write_text("")
    other = tmp_path / "data"
    other.mkdir()
    r = run_cli(
        f"--tcp-address={tmp_path}/tcp.sock", "--http-address=127.0.0.1:0", f"--data-path={other}"
    )
    assert r.returncode == 1 and "address already in use" in r.stderr
