"""TLS for nsqd: the server context built from the --tls-* flags (nsqd.go buildTLSConfig) and the
in-connection upgrade IDENTIFY's tls_v1 asks for.

Strategy: the upgrade happens in the middle of a plain TCP stream whose next bytes (the
ClientHello, maybe more) can already sit in the protocol's read buffer, so TLS runs on memory
BIOs (ssl.SSLObject) inside the connection's own protocol object: bytes read go in, plaintext
comes out; plaintext written goes in, records come out. Nothing read is ever lost and no
transport swap is needed. The plain (non-TLS) connection never touches this module."""

from __future__ import annotations

import ssl
from typing import Any, Protocol

from .internal.gostrconv import parse_bool

# nsqd's --tls-required values.
TLS_NOT_REQUIRED = 0
TLS_REQUIRED_EXCEPT_HTTP = 1
TLS_REQUIRED = 2

TLS_MIN_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


class TLSOptions(Protocol):
    """The --tls-* options build_server_context reads (options.Options has them)."""

    tls_cert: str
    tls_key: str
    tls_root_ca_file: str
    tls_client_auth_policy: str
    tls_min_version: str


def parse_tls_required(value: str) -> int:
    """nsqd's tlsRequiredOption.Set: "tcp-https", or a Go boolean."""
    s = value.lower()
    if s == "tcp-https":
        return TLS_REQUIRED_EXCEPT_HTTP
    try:
        return TLS_REQUIRED if parse_bool(s) else TLS_NOT_REQUIRED
    except ValueError:
        pass
    raise ValueError(f'invalid value "{value}" for flag -tls-required: parse error')


def parse_tls_min_version(value: str) -> str:
    s = value.lower()
    if s == "":
        return "tls1.0"
    if s not in TLS_MIN_VERSIONS:
        raise ValueError(f'unknown tlsVersionOption "{value}"')
    return s


def build_server_context(opts: TLSOptions) -> ssl.SSLContext | None:
    """The server context, or None when no certificate is configured (nsqd: no TLS).

    Client certificates: no policy -> none asked for; "require-verify" -> required and verified
    against --tls-root-ca-file; "require" -> required. Deviation: Go's "require" accepts any
    certificate unverified (RequireAnyClientCert); OpenSSL via Python's ssl module cannot
    request a certificate without verifying it, so "require" verifies it too (against
    --tls-root-ca-file, or the system CAs without one).
    """
    if not opts.tls_cert and not opts.tls_key:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_MIN_VERSIONS[opts.tls_min_version]
    if ctx.minimum_version < ssl.TLSVersion.TLSv1_2:
        # let OpenSSL's security level allow what Go's tls.Config allows with this MinVersion
        try:
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        except ssl.SSLError:
            pass
    ctx.load_cert_chain(opts.tls_cert, opts.tls_key or None)
    policy = opts.tls_client_auth_policy
    if policy in ("require", "require-verify"):
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not opts.tls_root_ca_file:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if opts.tls_root_ca_file:
        try:
            ctx.load_verify_locations(cafile=opts.tls_root_ca_file)
        except ssl.SSLError:
            raise ValueError("failed to append certificate to pool") from None
    return ctx


# Go's prettyConnectionState.GetCipherSuite names these; the rest print as "Unknown <id>".
_CIPHER_NAMES = {
    "AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
    "DES-CBC3-SHA": "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "ECDHE-ECDSA-AES128-SHA": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "ECDHE-ECDSA-AES256-SHA": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-DES-CBC3-SHA": "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_AES_128_GCM_SHA256": "Unknown 4865",
    "TLS_AES_256_GCM_SHA384": "Unknown 4866",
    "TLS_CHACHA20_POLY1305_SHA256": "Unknown 4867",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "Unknown 49196",
    "ECDHE-RSA-AES256-GCM-SHA384": "Unknown 49200",
    "ECDHE-RSA-CHACHA20-POLY1305": "Unknown 52392",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "Unknown 52393",
}
_VERSION_NAMES = {
    "TLSv1": "TLS1.0",
    "TLSv1.1": "TLS1.1",
    "TLSv1.2": "TLS1.2",
    "TLSv1.3": "TLS1.3",
}


class TLSSession:
    """Server-side TLS over memory BIOs for one connection."""

    __slots__ = ("_in", "_out", "handshake_done", "obj", "peer_closed")

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self._in, self._out, server_side=True)
        self.handshake_done = False
        #: The peer sent close_notify (its clean end of the TLS stream).
        self.peer_closed = False

    def handshake(self, data: bytes) -> bytes:
        """Feed handshake bytes; returns records to send. Sets handshake_done when complete.
        Raises ssl.SSLError when the handshake fails."""
        if data:
            self._in.write(data)
        try:
            self.obj.do_handshake()
            self.handshake_done = True
        except ssl.SSLWantReadError:
            pass
        return self._out.read()

    def decrypt(self, data: bytes) -> bytes:
        """Feed records; returns the plaintext now available (what came before a close_notify
        too). Raises ssl.SSLError on bad records. Sets ``peer_closed`` when the peer sent
        close_notify: SSLObject.read then returns b"" (CPython's _ssl on SSL_ERROR_ZERO_RETURN)."""
        if data:
            self._in.write(data)
        chunks = []
        read = self.obj.read
        while True:
            try:
                chunk = read(65536)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.peer_closed = True
                break
            if not chunk:
                self.peer_closed = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def pending_out(self) -> bytes:
        """Records produced while reading (TLS 1.3 tickets, key updates, alerts)."""
        return self._out.read() if self._out.pending else b""

    def encrypt(self, data: bytes | bytearray) -> bytes:
        self.obj.write(data)
        return self._out.read()

    def close_notify(self) -> bytes:
        try:
            self.obj.unwrap()
        except ssl.SSLError:
            pass
        return self._out.read()

    # ------------------------------------------------------------ /stats and auth

    def version(self) -> str:
        v = self.obj.version() or ""
        return _VERSION_NAMES.get(v, f"Unknown {v}")

    def cipher_suite(self) -> str:
        c = self.obj.cipher()
        if c is None:
            return ""
        return _CIPHER_NAMES.get(c[0], c[0])

    def peer_common_name(self) -> str:
        cert: Any = self.obj.getpeercert()
        if not cert:
            return ""
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return ""
