"""AUTH against a real auth server, as nsqd 1.3 with --auth-http-address: IDENTIFY's
auth_required, the AUTH reply, E_AUTH_FIRST / E_AUTH_FAILED / E_UNAUTHORIZED with nsqd's texts,
the allow/deny matrix for PUB, MPUB, DPUB and SUB, re-authorisation once the TTL expired, GET and
POST queries, and the /stats auth fields.

The auth server is a small http.server process on 127.0.0.1 started by the test; it answers
from a JSON file the test rewrites (keyed by secret) and logs every request it gets.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.daemons import DAEMON_CWD

from nsqpy import wire
from nsqpy.testing import wait_for

AUTH_SERVER = r"""
import json, sys, time, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
conf_path, log_path = sys.argv[1], sys.argv[2]

class H(BaseHTTPRequestHandler):
    def answer(self, params, body):
        with open(log_path, "a") as f:
            f.write(json.dumps({"t": time.monotonic(),
                                "method": self.command, "path": self.path.split("?")[0],
                                "params": params, "body": body,
                                "accept": self.headers.get("Accept")}) + "\n")
        conf = json.load(open(conf_path))
        entry = conf.get(params.get("secret", ""), {"status": 403, "body": {"message": "no"}})
        data = json.dumps(entry["body"]).encode()
        self.send_response(entry.get("status", 200))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        q = urllib.parse.urlsplit(self.path).query
        params = {k: v[0] for k, v in urllib.parse.parse_qs(q, keep_blank_values=True).items()}
        self.answer(params, None)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw)
        self.answer({k: v[0] for k, v in body.items()}, body)

    def log_message(self, *a):
        pass

srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


class AuthServer:
    def __init__(self, root: Path) -> None:
        self.conf = root / "auth.json"
        self.log = root / "auth.log"
        self.conf.write_text("{}")
        self.log.write_text("")
        script = root / "authd.py"
        script.write_text(AUTH_SERVER)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(self.conf), str(self.log)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, conf: dict) -> None:
        tmp = self.conf.with_suffix(".tmp")
        tmp.write_text(json.dumps(conf))
        tmp.replace(self.conf)

    def requests(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(5)


@pytest.fixture
def authd(tmp_path):
    root = tmp_path / "authd"
    root.mkdir()
    s = AuthServer(root)
    yield s
    s.stop()


def grant(topic: str, channels: list[str], perms: list[str]) -> dict:
    return {"topic": topic, "channels": channels, "permissions": perms}


def ok_body(auths: list[dict], ttl: int = 3600, identity: str = "alice") -> dict:
    return {
        "status": 200,
        "body": {
            "ttl": ttl,
            "identity": identity,
            "identity_url": f"https://example.test/{identity}",
            "authorizations": auths,
        },
    }


STANDARD = {
    "pubsub": ok_body([grant("^orders$", [".*"], ["subscribe", "publish"])]),
    "pubonly": ok_body([grant("^orders$", [".*"], ["publish"])], identity="bob"),
    "subonly": ok_body([grant("^orders$", ["^billing$"], ["subscribe"])], identity="carol"),
    "nothing": ok_body([], identity="dave"),
    "broken": {"status": 200, "body": {"ttl": 0, "authorizations": []}},
}


def authed(d, secret: str):
    r = d.raw()
    ident = json.loads(r.identify(feature_negotiation=True))
    assert ident["auth_required"] is True
    r.cmd(b"AUTH", body=secret.encode())
    return r


def test_auth_reply_and_request(daemon_factory, authd):
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    r = authed(d, "pubsub")
    ftype, data = r.read_non_heartbeat()
    assert ftype == wire.FRAME_TYPE_RESPONSE
    assert json.loads(data) == {
        "identity": "alice",
        "identity_url": "https://example.test/alice",
        "permission_count": 1,
    }
    (req,) = authd.requests()
    assert req["method"] == "GET" and req["path"] == "/auth"
    assert req["params"] == {
        "remote_ip": "127.0.0.1",
        "tls": "false",
        "secret": "pubsub",
        "common_name": "",
    }
    assert req["accept"] == "application/vnd.nsq; version=1.0"
    r.pub("orders", b"x")
    st = d.stats(include_clients="true")
    (p,) = st["producers"]
    assert p["authed"] is True
    assert p["auth_identity"] == "alice"
    assert p["auth_identity_url"] == "https://example.test/alice"
    # AUTH twice
    r.cmd(b"AUTH", body=b"pubsub")
    assert r.read_non_heartbeat() == (1, b"E_INVALID AUTH already set")


def test_post_method(daemon_factory, authd):
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}", "--auth-http-request-method=post")
    r = authed(d, "pubsub")
    assert r.read_non_heartbeat()[0] == wire.FRAME_TYPE_RESPONSE
    (req,) = authd.requests()
    assert req["method"] == "POST"
    assert req["body"] == {
        "common_name": [""],
        "remote_ip": ["127.0.0.1"],
        "secret": ["pubsub"],
        "tls": ["false"],
    }


def test_bad_request_method_refused(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "nsqpy", f"--data-path={tmp_path}",
         "--auth-http-address=127.0.0.1:1", "--auth-http-request-method=put"],
        capture_output=True, text=True, timeout=20, cwd=DAEMON_CWD,
    )  # fmt: skip
    assert p.returncode == 1
    assert "--auth-http-request-method must be post or get" in p.stderr


@pytest.mark.parametrize(
    "secret,error",
    [
        ("unknown", b"E_AUTH_FAILED AUTH failed"),  # the auth server answers 403
        ("broken", b"E_AUTH_FAILED AUTH failed"),  # ttl 0: invalid
        ("nothing", b"E_UNAUTHORIZED AUTH no authorizations found"),
    ],
)
def test_auth_refused(daemon_factory, authd, secret, error):
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    r = authed(d, secret)
    assert r.read_non_heartbeat() == (wire.FRAME_TYPE_ERROR, error)
    assert r.closed_by_server()


def test_auth_server_down(daemon_factory, authd):
    port = authd.port
    authd.stop()
    d = daemon_factory(f"--auth-http-address=127.0.0.1:{port}")
    r = authed(d, "pubsub")
    assert r.read_non_heartbeat() == (wire.FRAME_TYPE_ERROR, b"E_AUTH_FAILED AUTH failed")
    wait_for(lambda: "AUTH failed failed to auth against" in d.log_text(), what="log")


def test_several_auth_servers_one_down(daemon_factory, authd):
    authd.set(STANDARD)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    d = daemon_factory(
        f"--auth-http-address=127.0.0.1:{dead}",
        f"--auth-http-address=http://{authd.address}/auth",
    )
    for _ in range(3):
        r = authed(d, "pubsub")
        assert r.read_non_heartbeat()[0] == wire.FRAME_TYPE_RESPONSE
        r.close()


@pytest.mark.parametrize("cmd", ["PUB", "MPUB", "DPUB", "SUB"])
def test_auth_first(daemon_factory, authd, cmd):
    d = daemon_factory(f"--auth-http-address={authd.address}")
    r = d.raw()
    if cmd == "SUB":
        r.cmd(b"SUB", b"orders", b"billing")
    elif cmd == "MPUB":
        r.send(wire.encode_mpub(b"orders", [b"a"]))
    elif cmd == "DPUB":
        r.cmd(b"DPUB", b"orders", b"10", body=b"a")
    else:
        r.cmd(b"PUB", b"orders", body=b"a")
    assert r.read_frame() == (1, f"E_AUTH_FIRST AUTH required before {cmd}".encode())
    assert r.closed_by_server()
    assert authd.requests() == []


def attempt(d, secret: str, cmd: str, topic: str, channel: str = "billing") -> bytes:
    r = authed(d, secret)
    assert r.read_non_heartbeat()[0] == wire.FRAME_TYPE_RESPONSE
    if cmd == "SUB":
        r.cmd(b"SUB", topic.encode(), channel.encode())
    elif cmd == "MPUB":
        r.send(wire.encode_mpub(topic.encode(), [b"a", b"b"]))
    elif cmd == "DPUB":
        r.cmd(b"DPUB", topic.encode(), b"10", body=b"a")
    else:
        r.cmd(b"PUB", topic.encode(), body=b"a")
    ftype, data = r.read_non_heartbeat()
    if ftype == wire.FRAME_TYPE_ERROR:
        assert r.closed_by_server()
    r.close()
    return data


MATRIX = [
    # secret, command, topic, channel, allowed
    ("pubsub", "PUB", "orders", "", True),
    ("pubsub", "MPUB", "orders", "", True),
    ("pubsub", "DPUB", "orders", "", True),
    ("pubsub", "SUB", "orders", "billing", True),
    ("pubsub", "PUB", "orders2", "", False),  # ^orders$ is anchored by the pattern
    ("pubsub", "SUB", "other", "billing", False),
    ("pubonly", "PUB", "orders", "", True),
    ("pubonly", "SUB", "orders", "billing", False),
    ("subonly", "SUB", "orders", "billing", True),
    ("subonly", "SUB", "orders", "shipping", False),
    ("subonly", "PUB", "orders", "", False),
    ("subonly", "MPUB", "orders", "", False),
]


@pytest.mark.parametrize("secret,cmd,topic,channel,allowed", MATRIX)
def test_allow_deny_matrix(daemon_factory, authd, secret, cmd, topic, channel, allowed):
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    data = attempt(d, secret, cmd, topic, channel)
    if allowed:
        assert data == b"OK"
    else:
        assert data == (f'E_UNAUTHORIZED AUTH failed for {cmd} on "{topic}" "{channel}"'.encode())


def test_sub_allowed_receives_and_denied_refused(daemon_factory, authd):
    """The must-show: a SUB the auth server does not allow gets E_UNAUTHORIZED; one it allows
    works and receives messages."""
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    assert attempt(d, "subonly", "SUB", "orders", "shipping") == (
        b'E_UNAUTHORIZED AUTH failed for SUB on "orders" "shipping"'
    )
    c = authed(d, "subonly")
    assert c.read_non_heartbeat()[0] == 0
    c.sub("orders", "billing", rdy=5)
    p = authed(d, "pubonly")
    assert p.read_non_heartbeat()[0] == 0
    p.pub("orders", b"for billing")
    _, _, mid, body = c.read_message()
    assert body == b"for billing"
    c.cmd(b"FIN", mid)


def test_commands_pipelined_behind_auth_keep_order(daemon_factory, authd):
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    r = d.raw()
    r.send(
        wire.encode_command(b"AUTH", body=b"pubsub")
        + wire.encode_command(b"PUB", b"orders", body=b"1")
        + wire.encode_command(b"PUB", b"orders", body=b"2")
        + wire.encode_command(b"NOP")
    )
    ftype, data = r.read_non_heartbeat()
    assert ftype == 0 and json.loads(data)["identity"] == "alice"
    assert r.read_non_heartbeat() == (0, b"OK")
    assert r.read_non_heartbeat() == (0, b"OK")
    st = d.stats(topic="orders")
    assert st["topics"][0]["depth"] == 2


# Expiry itself (cached within the TTL, asked again past it, revoked, auth server gone, MPUB's
# body) is tests/unit/test_auth_expiry.py's, on an injected clock. This one test checks the
# wiring: the daemon stamps the answer with its connection's clock and asks the real auth server
# again once the (shortest possible) TTL passed. The event loop's clock is CLOCK_MONOTONIC, as
# time.monotonic() here, but uvloop's counts whole milliseconds: a PUB sent just past "the reply
# came back + TTL" can still fall inside the TTL by the daemon's clock, so the test waits a
# margin beyond it.
TTL = 1  # seconds: Go's State.TTL is whole seconds, > 0


def test_ttl_expiry_requeries(daemon_factory, authd):
    authd.set({"s": ok_body([grant("^orders$", [".*"], ["publish"])], ttl=TTL)})
    d = daemon_factory(f"--auth-http-address={authd.address}")
    r = authed(d, "s")
    assert r.read_non_heartbeat()[0] == 0
    expires_by = time.monotonic() + TTL + 0.1
    # the server revokes the grant; once the TTL passed the next PUB asks again and is refused
    authd.set({"s": ok_body([grant("^other$", [".*"], ["publish"])], ttl=TTL)})
    wait_for(
        lambda: time.monotonic() > expires_by,
        timeout=TTL + 5,
        interval=0.01,
        what="the auth answer's TTL to pass",
    )
    assert len(authd.requests()) == 1
    r.cmd(b"PUB", b"orders", body=b"revoked")
    assert r.read_non_heartbeat() == (
        1,
        b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""',
    )
    assert len(authd.requests()) == 2
    assert r.closed_by_server()


def test_auth_disabled_without_flag(nsqd):
    r = nsqd.raw()
    assert json.loads(r.identify(feature_negotiation=True))["auth_required"] is False
    r.cmd(b"AUTH", body=b"x")
    assert r.read_frame() == (1, b"E_AUTH_DISABLED AUTH disabled")


def test_auth_over_tls_sends_common_name(daemon_factory, authd, tmp_path):
    from test_tls import Certs, TLSClient

    certs = Certs(tmp_path / "certs")
    authd.set(STANDARD)
    d = daemon_factory(
        *certs.flags(),
        f"--auth-http-address={authd.address}",
        f"--tls-root-ca-file={certs.ca_file}",
        "--tls-client-auth-policy=require-verify",
    )
    c = TLSClient(d.tcp_port, certs.client_context(certs.client_cert, certs.client_key))
    assert c.identify["auth_required"] is True
    assert c.frame() == (0, b"OK")
    c.cmd(b"AUTH", body=b"pubsub")
    assert json.loads(c.frame()[1])["identity"] == "alice"
    (req,) = authd.requests()
    assert req["params"]["tls"] == "true"
    assert req["params"]["common_name"] == "nsq-client"
    c.close()


def test_mpub_checked_before_its_body(daemon_factory, authd):
    """nsqd checks MPUB's authorisation before reading the body (PUB and DPUB after)."""
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    r = authed(d, "subonly")
    assert r.read_non_heartbeat()[0] == 0
    r.send(b"MPUB orders\n")  # no body sent at all
    assert r.read_non_heartbeat() == (
        1,
        b'E_UNAUTHORIZED AUTH failed for MPUB on "orders" ""',
    )
    r2 = d.raw()
    r2.send(b"MPUB orders\n")
    assert r2.read_frame() == (1, b"E_AUTH_FIRST AUTH required before MPUB")


PYNSQ_AUTH = r"""
import json, sys, logging
import nsq, tornado.ioloop
logging.basicConfig(level=logging.WARNING)
tcp, count = sys.argv[1], int(sys.argv[2])
loop = tornado.ioloop.IOLoop.current()
got = []
def handler(msg):
    got.append(bytes(msg.body))
    if len(got) >= count:
        loop.call_later(0.3, loop.stop)
    return True
reader = nsq.Reader(topic="orders", channel="billing", message_handler=handler,
                    nsqd_tcp_addresses=[tcp], max_in_flight=20, auth_secret="subonly")
writer = nsq.Writer([tcp], auth_secret="pubonly")
def pub():
    if not writer.conns:
        loop.call_later(0.05, pub); return
    writer.mpub("orders", [b"%d" % i for i in range(count)])
loop.call_later(0.3, pub)
loop.call_later(30, loop.stop)
loop.start()
print(json.dumps({"received": len(got)}))
sys.exit(0 if sorted(int(b) for b in got) == list(range(count)) else 1)
"""


def test_pynsq_with_auth_secret(daemon_factory, authd, tmp_path):
    authd.set(STANDARD)
    d = daemon_factory(f"--auth-http-address={authd.address}")
    script = tmp_path / "pynsq_auth.py"
    script.write_text(PYNSQ_AUTH)
    p = subprocess.run(
        [sys.executable, str(script), d.tcp_address, "200"],
        capture_output=True, text=True, timeout=60, cwd=DAEMON_CWD,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    secrets = sorted(r["params"]["secret"] for r in authd.requests())
    assert secrets == ["pubonly", "subonly"]
