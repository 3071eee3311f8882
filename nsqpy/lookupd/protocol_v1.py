"""nsqlookupd's TCP protocol ("  V1"), one asyncio.Protocol per nsqd connection.

Strategy: glue around the registration DB. The connection is a small state machine fed from
one bytearray: the 4-byte magic, then newline-terminated command lines, with IDENTIFY's
4-byte big-endian size and JSON body read right after its line (as nsqlookupd reads them from
the same bufio.Reader). Every reply is nsqlookupd's SendResponse: a 4-byte big-endian size and
the data, no frame type. Every error nsqlookupd 1.3 sends is fatal: "<E_CODE> <text>", then
close. Limits are checked before anything is buffered (a line over MAX_LINE_LENGTH, an
IDENTIFY size that is negative or over MAX_IDENTIFY_BODY: error and close), and a client that
does not read its replies stops being read (pause_writing -> pause_reading, through an
internal.readgate.ReadGate shared with the command budget's pause). When the
connection goes, its producer leaves every registration at once.

Cost: a cluster registering sends the same REGISTER lines from every nsqd (200 nodes x 1,500
lines each), so a line that parsed as a valid REGISTER or UNREGISTER is remembered, raw bytes
-> (verb, topic, channel) in a bounded table (_PARSED, up to MAX_PARSED_LINES, cleared when
full): an identified peer's run of such lines is answered back to back (_remembered), without
the split and the name checks, read from one copy of the bytes ahead; each remembered line
carries the registrations it adds, and a run's REGISTERs are made in one registration-DB call
(add_producer_all). Their INFO lines (one per registration made or left, as Go logs them) go
out together through loglines.InfoLines.many.

Source of truth: nsqlookupd/tcp.go, lookup_protocol_v1.go, internal/protocol (NSQ 1.3)."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import TYPE_CHECKING, Any

from ..internal.gojson import GoJSONError, GoStruct
from ..internal.netaddr import dial_address, join_host_port
from ..internal.readgate import BACKPRESSURE, BUDGET, ReadGate
from ..wire import MAX_LINE_LENGTH, is_valid_name
from .loglines import InfoLines
from .registration_db import PeerInfo, Registration, RegistrationDB

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

log = logging.getLogger("nsqpy")
info_line = InfoLines(log)

MAGIC_V1 = b"  V1"
OK = b"OK"
#: The commands /metrics counts (lookupd/metrics.py), by name.
_COUNTED = frozenset((b"PING", b"IDENTIFY", b"REGISTER", b"UNREGISTER"))

#: Largest IDENTIFY body accepted (nsqd sends about 200 bytes; Go has no limit).
MAX_IDENTIFY_BODY = 1024 * 1024

#: Commands handled per event-loop turn for one connection before the others get a turn.
COMMANDS_PER_TURN = 256

_SIZE = struct.Struct(">i")
_OK_FRAME = _SIZE.pack(len(OK)) + OK

#: Most raw command lines remembered as parsed (see the module docstring).
MAX_PARSED_LINES = 1 << 16
#: Bytes a run of remembered lines looks at in one go (a whole line of MAX_LINE_LENGTH fits).
_RUN_WINDOW = 64 * 1024
#: raw line -> (is REGISTER, topic, channel, the registrations a REGISTER adds its peer to) of
#: lines that parsed cleanly
_PARSED: dict[bytes, tuple[bool, str, str, tuple[Registration, ...]]] = {}

# Go's unicode.IsSpace, which strings.TrimSpace strips.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
_GO_SPACE += "\u2028\u2029\u202f\u205f\u3000"
_ASCII_SPACE = b" \t\n\v\f\r"

_ST_MAGIC, _ST_LINE, _ST_SIZE, _ST_BODY, _ST_CLOSED = range(5)


class FatalClientError(Exception):
    """An error nsqlookupd answers with ``<code> <desc>`` and then closes the connection."""

    def __init__(self, code: str, desc: bytes | str) -> None:
        self.data = code.encode() + b" " + (desc if isinstance(desc, bytes) else desc.encode())
        super().__init__(self.data.decode("utf-8", "replace"))


def encode_response(data: bytes) -> bytes:
    """SendResponse: ``[4-byte big-endian len(data)][data]``."""
    return _SIZE.pack(len(data)) + data


def trim_space(line: bytes) -> bytes:
    """Go's strings.TrimSpace on raw bytes (ASCII fast path, Unicode spaces when needed)."""
    line = line.strip(_ASCII_SPACE)
    if line and (line[0] >= 0x80 or line[-1] >= 0x80):
        text = line.decode("utf-8", "surrogateescape").strip(_GO_SPACE)
        line = text.encode("utf-8", "surrogateescape")
    return line


#: PeerInfo's JSON fields in nsqlookupd v1.3.0 (the topology ones came after it), and nsqpy-d's
#: node id beyond them (Go would ignore it).
_PEER_INFO = GoStruct(
    {
        "remote_address": "string",
        "hostname": "string",
        "broadcast_address": "string",
        "tcp_port": "int",
        "http_port": "int",
        "version": "string",
        "node_id": "any",
    },
    name="PeerInfo",
    type_name="nsqlookupd.PeerInfo",
)


def decode_identify(body: bytes, peer: PeerInfo) -> None:
    """Fill ``peer`` from IDENTIFY's JSON as json.Unmarshal into nsqlookupd's PeerInfo does
    (gojson.GoStruct: keys matched case-insensitively, later keys win, null leaves a field
    alone, unknown keys are ignored); ``node_id`` is kept when it is an integer in [0, 1024).
    Raises GoJSONError (a ValueError, Go's text) for bad JSON, a non-object, or a value of
    the wrong type."""
    found = _PEER_INFO.unmarshal(body)
    node_id = found.pop("node_id", None)
    if type(node_id) is int and 0 <= node_id < 1024:
        peer.node_id = node_id
    for name, value in found.items():
        setattr(peer, name, value)


def _addr(peername: Any) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return join_host_port(peername[0], peername[1])
    return str(peername)


def get_topic_chan(command: str, params: list[bytes]) -> tuple[str, str]:
    """lookup_protocol_v1.go getTopicChan: (topic, channel or ""), FatalClientError else."""
    if not params:
        raise FatalClientError("E_INVALID", f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else b""
    if not is_valid_name(topic):
        raise FatalClientError(
            "E_BAD_TOPIC", command.encode() + b" topic name '" + topic + b"' is not valid"
        )
    if channel and not is_valid_name(channel):
        raise FatalClientError(
            "E_BAD_CHANNEL", command.encode() + b" channel name '" + channel + b"' is not valid"
        )
    return topic.decode("ascii"), channel.decode("ascii")


class LookupProtocolV1(asyncio.Protocol):
    """One nsqd's TCP connection to nsqlookupd."""

    __slots__ = (
        "lookupd",
        "transport",
        "buf",
        "out",
        "state",
        "body_size",
        "peer",
        "addr",
        "gate",
    )

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        # Replies of the current pass, written with one transport.write at its end (a producer
        # pipelines its REGISTERs: one write per reply cost a fifth of a registration burst).
        self.out = bytearray()
        self.state = _ST_MAGIC
        self.body_size = 0
        self.peer: PeerInfo | None = None
        self.addr = ""
        # Why reading stops: BACKPRESSURE (the client does not read its replies), BUDGET (a
        # turn's command budget is spent: the rest runs next turn).
        self.gate = ReadGate()

    def __str__(self) -> str:
        return self.addr

    # ------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self.gate.attach(self.transport)
        self.addr = _addr(transport.get_extra_info("peername"))
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.lookupd.clients.add(self)
        log.info("TCP: new client(%s)", self.addr)

    def data_received(self, data: bytes) -> None:
        if self.state == _ST_CLOSED:
            return
        self.buf += data
        if not self.gate.bits:
            self._process()

    def eof_received(self) -> bool:
        if self.buf and self.state != _ST_CLOSED:
            # Commands sent before the half-close still get their answers, as in Go.
            # the stream ends: forget the budget's pause without reading again
            self.gate.bits &= ~BUDGET
            self._process(budget=len(self.buf) + 1)
        if self.state == _ST_SIZE:
            self._fatal(FatalClientError("E_BAD_BODY", "IDENTIFY failed to read body size"))
        elif self.state == _ST_BODY:
            self._fatal(FatalClientError("E_BAD_BODY", "IDENTIFY failed to read body"))
        elif self.state == _ST_MAGIC:
            log.error("failed to read protocol version - EOF")
        self._finish()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()
        self.lookupd.clients.discard(self)

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its commands until it does.
        self.gate.pause(BACKPRESSURE)

    def resume_writing(self) -> None:
        if self.gate.resume(BACKPRESSURE):
            return  # still held by the budget: _next_turn resumes
        if self.transport is not None and not self.transport.is_closing():
            self._process()

    def _next_turn(self) -> None:
        if self.gate.resume(BUDGET) or self.state == _ST_CLOSED:
            return
        if self.transport is not None and not self.transport.is_closing():
            self._process()

    # ------------------------------------------------------------ the state machine

    def _process(self, budget: int = COMMANDS_PER_TURN) -> None:
        buf = self.buf
        pos = 0
        try:
            while not self.gate.holds(BACKPRESSURE) and self.state != _ST_CLOSED:
                if self.state == _ST_LINE:
                    if self.peer is not None and budget > 0:
                        done, pos = self._remembered(buf, pos, budget)
                        if done:
                            budget -= done
                            continue
                    budget -= 1
                    if budget < 0:
                        # Let other connections run: stop reading, go on in the next turn.
                        self.gate.pause(BUDGET)
                        asyncio.get_running_loop().call_soon(self._next_turn)
                        break
                    nl = buf.find(b"\n", pos)
                    if nl < 0:
                        if len(buf) - pos > MAX_LINE_LENGTH:
                            raise FatalClientError(
                                "E_INVALID", f"command line longer than {MAX_LINE_LENGTH} bytes"
                            )
                        break
                    if nl - pos > MAX_LINE_LENGTH:
                        raise FatalClientError(
                            "E_INVALID", f"command line longer than {MAX_LINE_LENGTH} bytes"
                        )
                    line = bytes(buf[pos:nl])
                    pos = nl + 1
                    self._exec(trim_space(line).split(b" "), line)
                elif self.state == _ST_SIZE:
                    if len(buf) - pos < 4:
                        break
                    (size,) = _SIZE.unpack_from(buf, pos)
                    pos += 4
                    if size < 0 or size > MAX_IDENTIFY_BODY:
                        raise FatalClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
                    self.body_size = size
                    self.state = _ST_BODY
                elif self.state == _ST_BODY:
                    if len(buf) - pos < self.body_size:
                        break
                    body = bytes(buf[pos : pos + self.body_size])
                    pos += self.body_size
                    self.state = _ST_LINE
                    self._reply(self._identify_body(body))
                else:  # _ST_MAGIC
                    if len(buf) - pos < 4:
                        break
                    magic = bytes(buf[pos : pos + 4])
                    pos += 4
                    log.info("CLIENT(%s): desired protocol magic '%s'", self.addr, _text(magic))
                    if magic != MAGIC_V1:
                        self._write(b"E_BAD_PROTOCOL")
                        log.error("client(%s) bad protocol magic '%s'", self.addr, _text(magic))
                        self._close()
                        break
                    self.state = _ST_LINE
        except FatalClientError as e:
            self._fatal(e)
        except Exception:  # a bug must cost one connection, never the daemon
            log.exception("client(%s) - internal error, closing", self.addr)
            self._close()
        self._flush()
        if self.state == _ST_CLOSED:
            buf.clear()
        elif pos:
            del buf[:pos]

    def _remembered(self, buf: bytearray, pos: int, budget: int) -> tuple[int, int]:
        """Run the remembered REGISTER/UNREGISTER lines (_PARSED) from ``pos`` back to
        back, at most ``budget`` of them, for an identified peer: (how many, the position after
        them). Stops at the first other line, which the generic path takes."""
        peer = self.peer
        assert peer is not None
        # one copy of the bytes ahead (the table's keys are bytes), not one per line
        data = bytes(buf[pos : pos + _RUN_WINDOW])
        find = data.find
        at = 0
        parsed_lines = _PARSED
        keys: list[Registration] = []  # what the run's REGISTERs add, made together
        done = unregistered = 0
        while done < budget:
            nl = find(b"\n", at)
            if nl < 0 or nl - at > MAX_LINE_LENGTH:
                break
            parsed = parsed_lines.get(data[at:nl])
            if parsed is None:
                break
            at = nl + 1
            done += 1
            if parsed[0]:
                keys += parsed[3]
                continue
            if keys:  # the REGISTERs before it come first
                self._register_all(peer, keys)
                keys = []
            self._do_unregister(parsed[1], parsed[2])
            unregistered += 1
        if keys:
            self._register_all(peer, keys)
        if done:
            self.out += _OK_FRAME * done
            count = self.lookupd.metrics.commands.inc
            if done > unregistered:
                count(("REGISTER",), done - unregistered)
            if unregistered:
                count(("UNREGISTER",), unregistered)
        return done, pos + at

    def _register_all(self, peer: PeerInfo, keys: list[Registration]) -> None:
        """Add ``peer`` to each of ``keys`` (REGISTERs' registrations, in order), logging one
        line per registration it was newly added to."""
        added = self.lookupd.db.add_producer_all(peer, keys)
        if added and info_line.enabled():
            head = f"DB: client({self.addr}) REGISTER category:"
            info_line.many([f"{head}{r.category} key:{r.key} subkey:{r.subkey}" for r in added])

    def _exec(self, params: list[bytes], line: bytes = b"") -> None:
        """Run one command; ``line`` is its raw line (remembered once it parsed)."""
        cmd = params[0]
        if cmd in _COUNTED:
            self.lookupd.metrics.commands.inc((cmd.decode(),))
        if cmd == b"PING":
            self._reply(self._ping())
        elif cmd == b"IDENTIFY":
            if self.peer is not None:
                raise FatalClientError("E_INVALID", "cannot IDENTIFY again")
            self.state = _ST_SIZE
        elif cmd == b"REGISTER":
            self._reply(self._registration(True, params[1:], line))
        elif cmd == b"UNREGISTER":
            self._reply(self._registration(False, params[1:], line))
        else:
            raise FatalClientError("E_INVALID", b"invalid command " + cmd)

    # ------------------------------------------------------------ commands

    def _ping(self) -> bytes:
        if self.peer is not None:
            since = self.lookupd.db.ping(self.peer)
            log.info("CLIENT(%s): pinged (last ping %.6fs)", self.peer.id, since / 1e9)
        return OK

    def _identify_body(self, body: bytes) -> bytes:
        peer = PeerInfo(id=self.addr)
        try:
            decode_identify(body, peer)
        except GoJSONError as e:
            log.error("[%s] - E_BAD_BODY IDENTIFY failed to decode JSON body - %s", self, e)
            raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
        peer.remote_address = self.addr
        if not (peer.broadcast_address and peer.tcp_port and peer.http_port and peer.version):
            raise FatalClientError("E_BAD_BODY", "IDENTIFY missing fields")
        log.info(
            "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
            self,
            peer.broadcast_address,
            peer.tcp_port,
            peer.http_port,
            peer.version,
        )
        self.peer = peer
        if self.lookupd.db.identify(peer):
            log.info("DB: client(%s) REGISTER category:client key: subkey:", self)
        if peer.node_id >= 0:
            self._check_node_id(peer)
        return self.lookupd.identify_response()

    def _check_node_id(self, peer: PeerInfo) -> None:
        """Node ids must be unique in a cluster (message IDs carry them): say so loudly."""
        others = {
            dial_address(p.broadcast_address, p.http_port)
            for p in self.lookupd.db.peers_with_node_id(
                peer.node_id, self.lookupd.inactive_producer_timeout_ns
            )
            if (p.broadcast_address, p.http_port) != (peer.broadcast_address, peer.http_port)
        }
        if others:
            log.error(
                "CLIENT(%s): configuration error: node id %d of %s is also the node id of %s",
                self,
                peer.node_id,
                dial_address(peer.broadcast_address, peer.http_port),
                ", ".join(sorted(others)),
            )

    def _registration(self, register: bool, params: list[bytes], line: bytes = b"") -> bytes:
        """REGISTER (``register``) or UNREGISTER ``topic [channel]`` from an identified peer:
        OK. FatalClientError E_INVALID before IDENTIFY, or for a bad name (get_topic_chan)."""
        if self.peer is None:
            raise FatalClientError("E_INVALID", "client must IDENTIFY")
        topic, channel = get_topic_chan("REGISTER" if register else "UNREGISTER", params)
        _remember(line, register, topic, channel)
        if register:
            self._do_register(topic, channel)
        else:
            self._do_unregister(topic, channel)
        return OK

    def _do_register(self, topic: str, channel: str) -> None:
        assert self.peer is not None
        self._register_all(self.peer, list(RegistrationDB.register_keys(topic, channel)))

    def _do_unregister(self, topic: str, channel: str) -> None:
        assert self.peer is not None
        removed, unexpected = self.lookupd.db.unregister(self.peer.id, topic, channel)
        for r in unexpected:
            log.warning(
                "client(%s) unexpected UNREGISTER category:channel key:%s subkey:%s",
                self,
                topic,
                r.subkey,
            )
        if removed and info_line.enabled():
            head = f"DB: client({self.addr}) UNREGISTER category:"
            info_line.many([f"{head}{r.category} key:{r.key} subkey:{r.subkey}" for r in removed])

    # ------------------------------------------------------------ output and teardown

    def _write(self, data: bytes) -> None:
        """Queue one response frame; _flush sends the pass's frames together."""
        self.out += encode_response(data)

    def _flush(self) -> None:
        out = self.out
        if out:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(bytes(out))
            out.clear()

    def _reply(self, data: bytes) -> None:
        self._write(data)

    def _fatal(self, e: FatalClientError) -> None:
        log.error("[%s] - %s", self, e)
        self._write(e.data)
        self._close()

    def close(self) -> None:
        """Drop the connection (the daemon's stop)."""
        self._close()

    def _close(self) -> None:
        self._flush()
        self.state = _ST_CLOSED
        self._finish()
        if self.transport is not None:
            self.transport.close()

    def _finish(self) -> None:
        """The connection is done: its producer leaves every registration (once)."""
        self.state = _ST_CLOSED
        peer, self.peer = self.peer, None
        if peer is None:
            return
        log.info("PROTOCOL(V1): [%s] exiting ioloop", self)
        regs = self.lookupd.db.remove_peer(peer.id)
        if regs and info_line.enabled():
            head = f"DB: client({self.addr}) UNREGISTER category:"
            info_line.many([f"{head}{r.category} key:{r.key} subkey:{r.subkey}" for r in regs])


def _remember(line: bytes, register: bool, topic: str, channel: str) -> None:
    """Keep ``line``'s parse for the next peer that sends it (see the module docstring)."""
    if line:
        if len(_PARSED) >= MAX_PARSED_LINES:
            _PARSED.clear()
        keys = RegistrationDB.register_keys(topic, channel) if register else ()
        _PARSED[line] = (register, topic, channel, keys)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")
