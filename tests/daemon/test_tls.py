"""TLS as nsqd 1.3 does it: IDENTIFY's tls_v1 upgrade on the same socket, --tls-required,
client certificate policies, --tls-min-version, the HTTPS listener, /stats TLS fields, and the
real pynsq and gnsq clients over tls_v1+snappy and tls_v1+deflate.

Certificates are made per test session with trustme; everything listens on loopback.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import trustme
from support.daemons import DAEMON_CWD

from nsqpy import wire
from nsqpy.testing import wait_for

OK_FRAME = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


class Certs:
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        client = self.ca.issue_cert("client.example", common_name="nsq-client")
        stranger = self.other_ca.issue_cert("stranger.example", common_name="stranger")
        self.ca_file = str(root / "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.cert = str(root / "server.pem")
        self.key = str(root / "server.key")
        server.cert_chain_pems[0].write_to_path(self.cert)
        server.private_key_pem.write_to_path(self.key)
        self.client_cert = str(root / "client.pem")
        self.client_key = str(root / "client.key")
        client.cert_chain_pems[0].write_to_path(self.client_cert)
        client.private_key_pem.write_to_path(self.client_key)
        self.stranger_cert = str(root / "stranger.pem")
        self.stranger_key = str(root / "stranger.key")
        stranger.cert_chain_pems[0].write_to_path(self.stranger_cert)
        stranger.private_key_pem.write_to_path(self.stranger_key)

    def flags(self) -> list[str]:
        return [f"--tls-cert={self.cert}", f"--tls-key={self.key}"]

    def client_context(self, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if cert:
            ctx.load_cert_chain(cert, key)
        return ctx


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


def read_frame(sock, reader: wire.FrameReader, pending: list, timeout: float = 5):
    deadline = time.monotonic() + timeout
    while not pending:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed by server")
        pending.extend(reader.feed(data))
    return pending.pop(0)


class TLSClient:
    """Raw V2 client that performs the tls_v1 upgrade step by step."""

    def __init__(self, port: int, ctx: ssl.SSLContext | None, **identify: object) -> None:
        self.raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.raw.sendall(wire.MAGIC_V2)
        body = {"feature_negotiation": True, "tls_v1": True, **identify}
        self.raw.sendall(wire.encode_command(b"IDENTIFY", body=json.dumps(body).encode()))
        self.reader = wire.FrameReader()
        self.pending: list = []
        ftype, data = read_frame(self.raw, self.reader, self.pending)
        assert ftype == wire.FRAME_TYPE_RESPONSE, data
        self.identify = json.loads(data)
        assert not self.pending
        self.sock: socket.socket = self.raw
        if ctx is not None:
            self.sock = ctx.wrap_socket(self.raw, server_hostname="127.0.0.1")

    def frame(self, timeout: float = 5):
        return read_frame(self.sock, self.reader, self.pending, timeout)

    def cmd(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.sock.sendall(wire.encode_command(name, *params, body=body))

    def close(self) -> None:
        self.sock.close()


def https_port(d) -> int:
    """The HTTPS port its log announced (nsqpy.testing reads every "listening on" line)."""
    return int(wait_for(lambda: d.https_port, what="HTTPS line"))


def client_stats(d) -> list[dict]:
    st = d.stats(include_clients="true")
    return st["producers"] + [
        c for t in st["topics"] for ch in t["channels"] for c in ch["clients"] or []
    ]


# ------------------------------------------------------------------ the upgrade, byte by byte


def test_tls_upgrade_sequence(daemon_factory, certs):
    d = daemon_factory(*certs.flags())
    c = TLSClient(d.tcp_port, certs.client_context())
    assert c.identify["tls_v1"] is True
    assert c.identify["auth_required"] is False
    # the first bytes over TLS: exactly one OK response frame
    assert c.sock.recv(64) == OK_FRAME
    c.cmd(b"PUB", b"tls_topic", body=b"secret")
    assert c.sock.recv(64) == OK_FRAME
    (st,) = wait_for(lambda: client_stats(d), what="client in stats")
    assert st["tls"] is True
    assert st["tls_version"] == "TLS1.3"
    assert st["tls_cipher_suite"].startswith("Unknown 486")  # Go has no name for TLS 1.3 suites
    assert st["snappy"] is False and st["deflate"] is False
    wait_for(lambda: "upgrading connection to TLS" in d.log_text(), what="log")
    c.close()


def test_client_close_notify_closes_the_connection_at_once(daemon_factory, certs):
    """A client that ends its TLS stream (close_notify) sees the connection close at once, as
    Go nsqd's read loop ends at EOF; nsqpy-d answers with its own close_notify (Go drops the TCP
    connection without one), so a client's unwrap() returns rather than waiting for its
    timeout."""
    d = daemon_factory(*certs.flags())
    c = TLSClient(d.tcp_port, certs.client_context())
    assert c.sock.recv(64) == OK_FRAME
    c.sock.settimeout(10)
    c.cmd(b"PUB", b"tls_close", body=b"last")
    assert c.sock.recv(64) == OK_FRAME
    raw = c.sock.unwrap()  # sends close_notify, returns once the daemon's comes back
    assert raw.recv(64) == b""  # and the TCP connection is closed behind it
    raw.close()
    wait_for(lambda: d.get_json("/stats?format=json&topic=tls_close")["topics"], what="topic")
    (t,) = d.get_json("/stats?format=json&topic=tls_close")["topics"]
    assert t["message_count"] == 1


def test_tls12_cipher_suite_name(daemon_factory, certs):
    d = daemon_factory(*certs.flags())
    ctx = certs.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")  # trustme keys are ECDSA
    c = TLSClient(d.tcp_port, ctx)
    assert c.sock.recv(64) == OK_FRAME
    c.cmd(b"PUB", b"t", body=b"x")
    assert c.sock.recv(64) == OK_FRAME
    (st,) = client_stats(d)
    assert st["tls_version"] == "TLS1.2"
    assert st["tls_cipher_suite"] == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    c.close()


def test_client_hello_in_same_write_as_identify(daemon_factory, certs):
    """The ClientHello sent right behind IDENTIFY (one write) must not be lost."""
    d = daemon_factory(*certs.flags())
    ctx = certs.client_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = out.read()
    ident = json.dumps({"feature_negotiation": True, "tls_v1": True}).encode()
    s = socket.create_connection(("127.0.0.1", d.tcp_port), timeout=5)
    s.sendall(wire.MAGIC_V2 + wire.encode_command(b"IDENTIFY", body=ident) + hello)
    # the IDENTIFY reply comes in plain text, then the TLS records
    buf = b""
    while len(buf) < 8:
        buf += s.recv(65536)
    size = int.from_bytes(buf[:4], "big")
    while len(buf) < 4 + size:
        buf += s.recv(65536)
    assert json.loads(buf[8 : 4 + size])["tls_v1"] is True
    inc.write(buf[4 + size :])
    plain = b""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            if out.pending:
                s.sendall(out.read())
            inc.write(s.recv(65536))
    if out.pending:
        s.sendall(out.read())
    while len(plain) < len(OK_FRAME):
        try:
            plain += obj.read(65536)
        except ssl.SSLWantReadError:
            inc.write(s.recv(65536))
    assert plain == OK_FRAME
    s.close()


def test_tls_not_offered_without_cert(nsqd):
    c = TLSClient(nsqd.tcp_port, None)
    assert c.identify["tls_v1"] is False
    c.cmd(b"PUB", b"t", body=b"x")
    assert c.frame() == (wire.FRAME_TYPE_RESPONSE, b"OK")
    c.close()


def test_bad_handshake_gets_identify_failed(daemon_factory, certs):
    d = daemon_factory(*certs.flags())
    c = TLSClient(d.tcp_port, None)
    c.raw.sendall(b"this is not a ClientHello at all\n" * 4)
    ftype, data = c.frame()
    assert ftype == wire.FRAME_TYPE_ERROR
    assert data.startswith(b"E_IDENTIFY_FAILED IDENTIFY failed")
    assert c.raw.recv(10) == b""
    c.close()


# ------------------------------------------------------------------ policies and flags


@pytest.mark.parametrize("mode", ["true", "tcp-https", ""])
def test_tls_required(daemon_factory, certs, mode):
    flag = "--tls-required" if mode == "" else f"--tls-required={mode}"
    d = daemon_factory(*certs.flags(), flag)
    for cmd, params, body in [
        (b"PUB", [b"t"], b"x"),
        (b"NOP", [], None),
        (b"SUB", [b"t", b"c"], None),
        (b"BOGUS", [], None),  # enforceTLSPolicy runs before the command lookup
    ]:
        r = d.raw()
        r.cmd(cmd, *params, body=body)
        text = f"E_INVALID cannot {cmd.decode()} in current state (TLS required)".encode()
        assert r.read_frame() == (wire.FRAME_TYPE_ERROR, text)
        assert r.closed_by_server()
    c = TLSClient(d.tcp_port, certs.client_context())
    assert c.frame() == (wire.FRAME_TYPE_RESPONSE, b"OK")
    c.cmd(b"PUB", b"t", body=b"x")
    assert c.frame() == (wire.FRAME_TYPE_RESPONSE, b"OK")
    c.close()


def test_tls_required_without_cert_refuses_to_start(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "nsqpy", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
         f"--data-path={tmp_path}", "--tls-required=true"],
        capture_output=True, text=True, timeout=20, cwd=DAEMON_CWD,
    )  # fmt: skip
    assert p.returncode == 1
    assert "cannot require TLS client connections without TLS key and cert" in p.stderr


def handshake_result(port: int, ctx: ssl.SSLContext) -> str:
    """ "ok" when the upgrade completes and a PUB is answered, else "refused"."""
    try:
        c = TLSClient(port, ctx)
        c.cmd(b"PUB", b"t", body=b"x")
        frames = [c.frame(), c.frame()]
        c.close()
        return "ok" if frames == [(0, b"OK"), (0, b"OK")] else f"frames {frames}"
    except (ssl.SSLError, ConnectionError, OSError):
        return "refused"


@pytest.mark.parametrize("policy", ["require-verify", "require"])
def test_client_cert_policies(daemon_factory, certs, policy):
    d = daemon_factory(
        *certs.flags(), f"--tls-client-auth-policy={policy}", f"--tls-root-ca-file={certs.ca_file}"
    )
    # a policy implies --tls-required
    r = d.raw()
    r.cmd(b"NOP")
    assert r.read_frame()[1].endswith(b"(TLS required)")
    assert handshake_result(d.tcp_port, certs.client_context()) == "refused"
    ctx = certs.client_context(certs.client_cert, certs.client_key)
    assert handshake_result(d.tcp_port, ctx) == "ok"
    ctx = certs.client_context(certs.stranger_cert, certs.stranger_key)
    assert handshake_result(d.tcp_port, ctx) == "refused"


def test_no_policy_ignores_client_cert(daemon_factory, certs):
    d = daemon_factory(*certs.flags())
    ctx = certs.client_context(certs.stranger_cert, certs.stranger_key)
    assert handshake_result(d.tcp_port, ctx) == "ok"


def test_tls_min_version(daemon_factory, certs):
    d = daemon_factory(*certs.flags(), "--tls-min-version=tls1.3")
    ctx = certs.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake_result(d.tcp_port, ctx) == "refused"
    assert handshake_result(d.tcp_port, certs.client_context()) == "ok"


def test_bad_tls_min_version_flag(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "nsqpy", f"--data-path={tmp_path}", "--tls-min-version=ssl2"],
        capture_output=True, text=True, timeout=20, cwd=DAEMON_CWD,
    )  # fmt: skip
    assert p.returncode != 0
    assert "unknown tlsVersionOption" in p.stderr


def test_https_listener(daemon_factory, certs):
    d = daemon_factory(*certs.flags(), "--https-address=127.0.0.1:0")
    port = https_port(d)
    ctx = certs.client_context()
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/ping", context=ctx, timeout=5) as r:
        assert r.status == 200 and r.read() == b"OK"


@pytest.mark.parametrize("mode,code", [("true", 403), ("tcp-https", 200)])
def test_plain_http_with_tls_required(daemon_factory, certs, mode, code):
    """nsqd's ServeHTTP: --tls-required=true turns the plain HTTP listener away with 403
    TLS_REQUIRED and the HTTPS port; tcp-https leaves it open."""
    d = daemon_factory(*certs.flags(), f"--tls-required={mode}")
    status, body, headers = d.http("GET", "/ping")
    assert status == code
    if code == 403:
        assert json.loads(body) == {"message": "TLS_REQUIRED", "https_port": https_port(d)}
    ctx = certs.client_context()
    url = f"https://127.0.0.1:{https_port(d)}/ping"
    with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
        assert r.status == 200 and r.read() == b"OK"


def test_no_https_without_cert(daemon_factory):
    d = daemon_factory("--https-address=127.0.0.1:0")
    # HTTPS would be bound (and logged) before HTTP, whose line the fixture waited for
    assert "HTTPS" not in d.log_text()


# ------------------------------------------------------------------ real clients

PYNSQ_SCRIPT = r"""
import json, sys, ssl, logging
import nsq, tornado.ioloop
logging.basicConfig(level=logging.WARNING)
tcp, conf, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
opts = dict(tls_v1=True, tls_options={"ca_certs": conf["ca"], "cert_reqs": ssl.CERT_REQUIRED},
            **conf["codec"])
loop = tornado.ioloop.IOLoop.current()
got, errors, state = [], [], {"sent": 0}
def handler(msg):
    got.append(bytes(msg.body))
    if len(got) >= count:
        loop.call_later(0.3, loop.stop)
    return True
reader = nsq.Reader(topic="tt", channel="c", message_handler=handler,
                    nsqd_tcp_addresses=[tcp], max_in_flight=50, **opts)
writer = nsq.Writer([tcp], **opts)
def pub(conn=None, data=None):
    if isinstance(data, nsq.Error):
        errors.append(str(data))
    if not writer.conns:
        loop.call_later(0.05, pub); return
    i = state["sent"]
    if i >= count:
        return
    if i % 3 == 0:
        state["sent"] = i + 1
        writer.pub("tt", b"m-%d-" % i + b"x" * (i * 97 % 5000), callback=pub)
    else:
        n = min(count, i + 20)
        state["sent"] = n
        writer.mpub("tt", [b"m-%d-" % j + b"y" * (j * 31 % 3000) for j in range(i, n)],
                    callback=pub)
loop.call_later(0.3, pub)
loop.call_later(40, loop.stop)
loop.start()
ids = sorted(int(b.split(b"-")[1]) for b in got)
print(json.dumps({"received": len(got), "distinct": len(set(ids)), "errors": errors[:5]}))
sys.exit(0 if ids == list(range(count)) and not errors else 1)
"""

GNSQ_SCRIPT = r"""
from gevent import monkey
monkey.patch_all()
import json, sys, ssl, signal, logging
import gevent, gevent.event, gnsq
logging.basicConfig(level=logging.WARNING)
signal.alarm(60)
tcp, conf, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
opts = dict(tls_v1=True, tls_options={"ca_certs": conf["ca"], "cert_reqs": ssl.CERT_REQUIRED},
            **conf["codec"])
got, errors = [], []
done = gevent.event.Event()
def handle(consumer, message):
    got.append(bytes(message.body))
    if len(got) >= count:
        done.set()
consumer = gnsq.Consumer("tg", "c", [tcp], message_handler=handle, max_in_flight=50, **opts)
consumer.on_error.connect(lambda s, error: errors.append(repr(error)), weak=False)
# gnsq's Producer cannot negotiate TLS or compression with any nsqd (its response handler
# runs before its response queue exists: KeyError), so publish with gnsq's connection class.
host, port = tcp.split(":")
producer = gnsq.NsqdTCPClient(host, int(port), **opts)
producer.connect()
producer.identify()
def ok():
    while True:
        frame, data = producer.read_response()
        if data != b"_heartbeat_":
            assert (frame, data) == (0, b"OK"), (frame, data)
            return
consumer.start(block=False)
i = 0
while i < count:
    if i % 3 == 0:
        producer.publish("tg", b"m-%d-" % i + b"x" * (i * 97 % 5000))
        i += 1
    else:
        n = min(count, i + 20)
        producer.multipublish("tg", [b"m-%d-" % j + b"y" * (j * 31 % 3000)
                                     for j in range(i, n)])
        i = n
    ok()
done.wait(timeout=40)
gevent.sleep(0.3)
consumer.close(); producer.close_stream()
ids = sorted(int(b.split(b"-")[1]) for b in got)
print(json.dumps({"received": len(got), "distinct": len(set(ids)), "errors": errors[:5]}))
sys.exit(0 if ids == list(range(count)) else 1)
"""


def run_client(script: str, tmp_path: Path, tcp: str, conf: dict, count: int) -> dict:
    path = tmp_path / "client.py"
    path.write_text(textwrap.dedent(script))
    p = subprocess.run(
        [sys.executable, str(path), tcp, json.dumps(conf), str(count)],
        capture_output=True, text=True, timeout=90, cwd=DAEMON_CWD,
    )  # fmt: skip
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


CODECS = {
    "snappy": {"snappy": True},
    "deflate": {"deflate": True, "deflate_level": 6},
}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_pynsq_over_tls_and_compression(daemon_factory, certs, tmp_path, codec):
    d = daemon_factory(*certs.flags())
    conf = {"ca": certs.ca_file, "codec": CODECS[codec]}
    report = run_client(PYNSQ_SCRIPT, tmp_path, d.tcp_address, conf, 600)
    assert report["received"] == 600 and report["distinct"] == 600
    wait_for(lambda: "upgrading connection to TLS" in d.log_text(), what="log")
    wait_for(lambda: f"upgrading connection to {codec}" in d.log_text(), what="log")


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_gnsq_over_tls_and_compression(daemon_factory, certs, tmp_path, codec):
    d = daemon_factory(*certs.flags())
    conf = {"ca": certs.ca_file, "codec": CODECS[codec]}
    report = run_client(GNSQ_SCRIPT, tmp_path, d.tcp_address, conf, 600)
    assert report["received"] == 600 and report["distinct"] == 600
    wait_for(lambda: "upgrading connection to TLS" in d.log_text(), what="log")
    wait_for(lambda: f"upgrading connection to {codec}" in d.log_text(), what="log")
