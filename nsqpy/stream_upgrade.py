"""The layers IDENTIFY can stack on a V2 connection: TLS, then snappy or deflate.

Strategy: one object per upgraded connection (a plain connection has none and never pays for
it) that turns bytes read into plaintext for the parser and an output flush into bytes for the
socket: decrypt then decompress on the way in, compress once then encrypt once on the way out,
as nsqd stacks its tls.Conn, then snappy/flate reader/writer (nsqd/client_v2.go UpgradeTLS,
UpgradeSnappy, UpgradeDeflate). The order of a TLS + compression upgrade is nsqd's: IDENTIFY's
JSON goes out plain, the TLS handshake runs (bounded by TLS_HANDSHAKE_TIMEOUT), its OK frame
goes out encrypted, and only then is the codec installed, its own OK going out through it. The
connection (``UpgradeHost``) keeps its parser and command loop; this module only owns bytes,
the handshake timer and the upgrade's log lines and errors.
Decompression is bounded: ``decode`` inflates at most one step (compression.INFLATE_STEP) of
what was read and keeps the rest compressed; the connection asks for the next step with
``inflate`` when its parser needs more bytes and its read budget has room (``pending`` says
whether any is left), and keeps its transport paused meanwhile."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Protocol

from . import wire
from .compression import INFLATE_STEP, Codec, CompressionError, DeflateCodec, SnappyCodec
from .tls import TLSSession
from .wire import FatalClientError

log = logging.getLogger("nsqpy")

TLS_HANDSHAKE_TIMEOUT = 5.0  # nsqd's UpgradeTLS deadline, seconds

_OK_FRAME = wire.encode_response(wire.OK)


class Upgrade:
    """What IDENTIFY negotiated (protocol_v2 returns UPGRADE with one in ``client.upgrade``):
    TLS or not, and the codec (None: none). The bytes after IDENTIFY go through the new
    layers."""

    __slots__ = ("codec", "tls")

    def __init__(self, tls: bool, codec: Codec | None) -> None:
        self.tls = tls
        self.codec = codec


def negotiated_codec(snappy: bool, deflate: bool, deflate_level: int) -> Codec | None:
    """The codec IDENTIFY agreed on (snappy and deflate are exclusive: checked by IDENTIFY)."""
    if snappy:
        return SnappyCodec()
    if deflate:
        return DeflateCodec(deflate_level)
    return None


class UpgradeHost(Protocol):
    """What the layers need of their connection (client_v2.Connection)."""

    remote_address: str
    out: bytearray

    @property
    def closed(self) -> bool: ...

    def raw_write(self, data: bytes) -> None:
        """Write to the socket as is (handshake records, the failed-upgrade error frame)."""

    def write_reply(self, frame: bytes) -> None:
        """Queue a response frame and flush it through the current layers."""

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def tls_established(self) -> None:
        """The handshake is done (--tls-required: every command is allowed from now on)."""


class StreamLayers:
    """TLS and/or compression of one connection: ``decode`` what was read, ``encode`` what is
    written. ``decode`` returns b"" while there is no plaintext yet (a handshake in progress) or
    after a failure (the connection is then closed, as nsqd's read loop ends)."""

    __slots__ = ("_codec", "_hs_handle", "_host", "_loop", "_pending_codec", "_tls")

    def __init__(
        self,
        host: UpgradeHost,
        loop: asyncio.AbstractEventLoop,
        up: Upgrade,
        tls_context: ssl.SSLContext | None,
    ) -> None:
        self._host = host
        self._loop = loop
        self._tls: TLSSession | None = None
        self._codec: Codec | None = None
        self._pending_codec: Codec | None = None
        self._hs_handle: asyncio.TimerHandle | None = None
        if up.tls:
            assert tls_context is not None
            self._tls = TLSSession(tls_context)
        self._pending_codec = up.codec

    def start(self) -> None:
        """Begin: the TLS handshake (the codec waits for its end), or the codec at once (its OK
        goes out compressed). Called once the host routes its I/O through these layers."""
        host = self._host
        if self._tls is not None:
            log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", host.remote_address)
            self._hs_handle = self._loop.call_later(TLS_HANDSHAKE_TIMEOUT, self._on_hs_timeout)
        else:
            codec = self._pending_codec
            self._pending_codec = None
            self._install_codec(codec)

    # ------------------------------------------------------------ bytes in, bytes out

    def decode(self, data: bytes) -> bytes:
        """Bytes read -> plaintext for the parser (b"" when there is none yet): at most about
        INFLATE_STEP bytes inflated; the rest waits for ``inflate`` (see ``pending``)."""
        host = self._host
        tls = self._tls
        try:
            if tls is not None:
                if not tls.handshake_done:
                    out = tls.handshake(data)
                    if out:
                        host.raw_write(out)
                    if not tls.handshake_done:
                        return b""
                    self._tls_established()
                    data = tls.decrypt(b"")
                else:
                    data = tls.decrypt(data)
                pending = tls.pending_out()
                if pending:
                    host.raw_write(pending)
                if tls.peer_closed:
                    # the client's close_notify: as nsqd's read loop at EOF, run the commands
                    # that came before it, then close (answering with our close_notify)
                    if not data:
                        raise ssl.SSLZeroReturnError
                    self._loop.call_soon(host.close)
            codec = self._codec
            if codec is not None and data:
                codec.feed(data)
                data = codec.take(INFLATE_STEP)
        except ssl.SSLZeroReturnError:
            host.close()
            return b""
        except ssl.SSLError as e:
            if tls is not None and not tls.handshake_done:
                # as nsqd: the upgrade failed, the error frame goes out on the raw socket
                err = FatalClientError("E_IDENTIFY_FAILED", f"IDENTIFY failed {e}")
                log.error("[%s] - %s", host.remote_address, err)
                self.stop()
                host.out.clear()
                host.raw_write(wire.encode_error(err))
            else:
                log.error("client(%s) - failed to read command - %s", host.remote_address, e)
            host.close()
            return b""
        except CompressionError as e:
            log.error("client(%s) - failed to read command - %s", host.remote_address, e)
            host.close()
            return b""
        return data

    @property
    def pending(self) -> bool:
        """Whether compressed input waits to be inflated (``inflate`` has more)."""
        codec = self._codec
        return codec is not None and codec.pending

    def inflate(self, limit: int) -> bytes:
        """The next plaintext from compressed input already read: at most ``limit`` bytes
        (snappy: whole chunks, up to 64 KiB past it); b"" when none waits, or after a corrupt
        stream (logged; the connection is then closed)."""
        codec = self._codec
        if codec is None:
            return b""
        try:
            return codec.take(limit)
        except CompressionError as e:
            host = self._host
            log.error("client(%s) - failed to read command - %s", host.remote_address, e)
            host.close()
            return b""

    def encode(self, data: bytes | bytearray) -> bytes | None:
        """An output flush -> bytes for the socket; None while the TLS handshake runs (the
        caller keeps its output until then)."""
        tls = self._tls
        if tls is not None and not tls.handshake_done:
            return None
        codec = self._codec
        if codec is not None:
            data = codec.compress(data)
        if tls is not None:
            return tls.encrypt(data)
        return bytes(data)

    def close_notify(self) -> bytes:
        """TLS's close_notify alert once the handshake is done (b"" otherwise)."""
        tls = self._tls
        if tls is not None and tls.handshake_done:
            return tls.close_notify()
        return b""

    def stop(self) -> None:
        """Cancel the handshake timer (connection closing)."""
        if self._hs_handle is not None:
            self._hs_handle.cancel()
            self._hs_handle = None

    # ------------------------------------------------------------ what /stats and AUTH read

    @property
    def tls_on(self) -> bool:
        tls = self._tls
        return tls is not None and tls.handshake_done

    @property
    def codec_name(self) -> str:
        codec = self._codec
        return codec.name if codec is not None else ""

    def tls_info(self) -> tuple[str, str]:
        """(tls_version, tls_cipher_suite) for /stats, in Go's spelling ("", "" without TLS)."""
        tls = self._tls
        if tls is None or not tls.handshake_done:
            return "", ""
        return tls.version(), tls.cipher_suite()

    def peer_common_name(self) -> str:
        """The client certificate's common name ("" without TLS or certificate)."""
        tls = self._tls
        if tls is None or not tls.handshake_done:
            return ""
        return tls.peer_common_name()

    # ------------------------------------------------------------ upgrade steps

    def _install_codec(self, codec: Codec | None) -> None:
        if codec is None:
            return
        host = self._host
        if isinstance(codec, DeflateCodec):
            log.info(
                "PROTOCOL(V2): [%s] upgrading connection to deflate (level %d)",
                host.remote_address,
                codec.level,
            )
        else:
            log.info("PROTOCOL(V2): [%s] upgrading connection to snappy", host.remote_address)
        self._codec = codec
        host.write_reply(_OK_FRAME)

    def _tls_established(self) -> None:
        self.stop()
        host = self._host
        host.tls_established()
        # the OK goes first, before anything held during the handshake (a heartbeat)
        host.out[:0] = _OK_FRAME
        host.flush()
        codec = self._pending_codec
        self._pending_codec = None
        self._install_codec(codec)

    def _on_hs_timeout(self) -> None:
        self._hs_handle = None
        host = self._host
        if host.closed:
            return
        log.error(
            "[%s] - E_IDENTIFY_FAILED IDENTIFY failed TLS handshake timeout", host.remote_address
        )
        host.close()
