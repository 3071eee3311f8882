"""One V2 client connection: the asyncio.Protocol around protocol_v2's sans-IO rules.

Strategy: Connection is a protocol_v2.ClientState (the per-client state, counters and
channel.Consumer methods) that owns the socket: reading, the per-pass budget, backpressure,
the output buffer and its flush, the TLS and compression layers (stream_upgrade.StreamLayers),
the heartbeat timer, and the outside waits a command can suspend on (an auth-server query, a
large IDENTIFY decoded in a helper process, a large MPUB put one slice per loop pass).
Every command runs through
``ProtocolV2.execute``, whose action bits (CLOSE, UPGRADE, SUSPEND, TIMERS) say what to do
next. Why reading stops is one internal.readgate.ReadGate with reason bits (BUDGET,
BACKPRESSURE, SUSPENDED), as nsqd's blocked goroutines would.

Output: response and error frames are flushed at the end of each pass of commands (as nsqd
flushes replies); message frames are coalesced and flushed when the buffer reaches the client's
output_buffer_size or, at the latest, once the current event-loop pass ends (one call_soon per
flush, never a timer): under load that batches as nsqd's 250 ms output buffer does, when idle it
adds no latency. A client whose socket is full (pause_writing) has no room for messages until
resume_writing.

Fairness: one read may run at most READ_BUDGET_COMMANDS commands (READ_BUDGET_FINS FINs, which are
cheap) or READ_BUDGET_BYTES of input per event-loop pass; the rest waits in the parser with
reading paused and continues on the next pass, so a client pipelining thousands of PUBs cannot
hold the loop while others wait. A client that is not subscribed and does not read its replies
stops being read once the replies it has not read pass UNREAD_REPLIES_LIMIT bytes (the kernel's
send queue, SIOCOUTQ, measured once the bytes written since the last measure could have taken it
over that limit) or the transport's buffer passes its
high-water mark (pause_writing), as a Go nsqd's blocked write stops its read loop: nobody can
grow the daemon's memory by publishing without reading. A subscribed connection keeps being read
(its FINs free room) as nsqd's separate read loop does.

Upgrades (IDENTIFY's tls_v1, snappy, deflate) and suspensions take a separate, slower path that
the plain connection never enters: one flag (``_slow``) tested at the top of data_received and
in flush. On that path bytes read go through the layers (decrypt, decompress) before the
parser, and each output flush through them the other way. Compressed input is inflated in steps
(compression.INFLATE_STEP), one when the parser needs more bytes, each charged to the pass's
byte budget; while some input waits compressed the transport stays paused, so a stream that
inflates 1000x holds a step of memory, not 1000x its size. The bytes that follow IDENTIFY in the
same read are the first TLS/compressed bytes: they are taken from the parser and fed through the
new layers, never lost. A suspended command's later commands wait in the parser, and the command
finishes when the answer is in, so commands are never reordered."""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import struct
import termios
from collections.abc import Callable
from typing import Any, cast

from . import wire
from .admission import Admission
from .compression import INFLATE_STEP
from .internal.netaddr import join_host_port
from .internal.readgate import BACKPRESSURE, BUDGET, SUSPENDED, ReadGate
from .protocol_v2 import (
    CLOSE,
    STATE_SUBSCRIBED,
    SUSPEND,
    TIMERS,
    UPGRADE,
    WAIT_AUTH,
    WAIT_DECODE,
    WAIT_FUTURE,
    WAIT_STEPS,
    ClientState,
    ProtocolV2,
    decode_identify_aside,
)
from .stream_upgrade import StreamLayers

log = logging.getLogger("nsqpy")

#: The most commands, and input bytes, one connection's read may run per event-loop pass.
READ_BUDGET_COMMANDS = 256
READ_BUDGET_BYTES = 128 * 1024
#: FINs are cheap (no reply; the channel dispatches once for all of a pass): more per pass.
READ_BUDGET_FINS = 1024

#: Bytes of replies a publisher may leave unread (in the kernel's send queue) before it is no
#: longer read; reading resumes below half of it (checked every UNREAD_RECHECK_S seconds).
UNREAD_REPLIES_LIMIT = 256 * 1024
UNREAD_RECHECK_S = 0.02

_identify_pool: concurrent.futures.ProcessPoolExecutor | None = None


#: The helper's niceness increment: decoding a hostile body is background work. At the daemon's
#: own priority, on a busy machine, the helper decoding megabyte IDENTIFY arrays kept the event
#: loop's thread off the CPU for 60-170 ms at a time (it ran 3-15 ms in those gaps).
HELPER_NICE = 19


def identify_pool() -> concurrent.futures.ProcessPoolExecutor:
    """The one helper process that decodes large IDENTIFY bodies, started at first need (a
    legitimate IDENTIFY is a few hundred bytes and never starts it) at the lowest priority
    (HELPER_NICE); it exits with the daemon."""
    global _identify_pool
    if _identify_pool is None:
        import multiprocessing  # here: the daemon's start does not load it

        _identify_pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=os.nice,
            initargs=(HELPER_NICE,),
        )
    return _identify_pool


def _drop_identify_pool() -> None:
    global _identify_pool
    _identify_pool = None


def _decode_aside(loop: asyncio.AbstractEventLoop, body: bytes) -> asyncio.Future[Any] | None:
    """decode_identify_aside(body) in the helper process; None when it cannot start."""
    try:
        return loop.run_in_executor(identify_pool(), decode_identify_aside, body)
    except Exception as e:  # the helper cannot start or died
        log.error("IDENTIFY helper process failed (%s): decoding in the event loop", e)
        _drop_identify_pool()
        return None


def _unread_replies(fd: int) -> int:
    """Bytes written to the socket ``fd`` that the client has not read yet (SIOCOUTQ), 0 when
    the platform cannot tell."""
    if fd < 0:
        return 0
    try:
        queued: int = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))[0]
        return queued
    except OSError:
        return 0


def _run_step(conn: Connection, step: Callable[[], bool]) -> None:
    """One step of ``conn``'s WAIT_STEPS command; the next at the loop's next turn, the answer
    after the last. A closed connection's steps still run to the end (nothing is answered)."""
    try:
        done = step()
    except Exception as e:  # the command's failure: its answer
        if not conn.closed:
            conn._resume(e)
        return
    if not done:
        conn.loop.call_soon(_run_step, conn, step)
    elif not conn.closed:
        conn._resume(None)


def _take_magic(conn: Connection, data: bytes) -> bytes:
    """The first four bytes of a connection are its protocol magic (nsqd's tcp.go reads them
    before it picks the protocol): take them from ``data`` and return the rest (empty while the
    magic is incomplete, or when it is not "  V2": then E_BAD_PROTOCOL and the close)."""
    need = 4 - len(conn._magic)
    conn._magic += data[:need]
    data = data[need:]
    if len(conn._magic) < 4:
        return b""
    magic = conn._magic.decode("latin-1")
    log.info("CLIENT(%s): desired protocol magic %r", conn.remote_address, magic)
    if conn._magic != wire.MAGIC_V2:
        other = conn.core.protocols.get(bytes(conn._magic))
        if other is not None:
            conn.hand_over(other(), data)
            return b""
        log.error("client(%s) bad protocol magic %r", conn.remote_address, magic)
        conn.out += wire.encode_frame(wire.FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL")
        conn.close()
        return b""
    return data


class Connection(ClientState):
    """One V2 client connection (an asyncio.Protocol by its methods); see the module
    docstring. ``core`` is the daemon's ProtocolV2, whose clock is the event loop's."""

    __slots__ = (
        "_admission",
        "_flush_scheduled",
        "_gate",
        "_in_read",
        "_layers",
        "_magic",
        "_slow",
        "_sock_fd",
        "_suspended",
        "_timer",
        "_unread_bound",
        "_wait_job",
        "loop",
        "nsqd",
        "opts",
        "parser",
        "transport",
    )

    def __init__(self, core: ProtocolV2, admission: Admission | None = None) -> None:
        super().__init__(core)
        #: Until this connection's first read has been admitted (admission.py): the shared
        #: per-pass admission; None afterwards (and for connections made without one).
        self._admission = admission
        self.nsqd = core.nsqd
        opts = self.opts = core.opts
        self.loop = asyncio.get_event_loop()
        self.transport: asyncio.WriteTransport | None = None
        self.parser = wire.CommandParser(opts.max_msg_size, opts.max_body_size, self.precheck)
        self._magic = b""
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._slow = False
        self._layers: StreamLayers | None = None
        self._suspended = False
        self._in_read = False
        self._sock_fd = -1
        #: An upper bound of the bytes in the socket's send queue (SIOCOUTQ): the queue as last
        #: measured plus every byte written to the transport since. The queue is measured only
        #: when this bound passes UNREAD_REPLIES_LIMIT, so a polite producer costs no ioctl per
        #: pass, and a client that does not read is stopped exactly as before.
        self._unread_bound = 0
        self._gate = ReadGate()
        self._wait_job: asyncio.Future[Any] | None = None

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is a write transport without subclassing asyncio's.
        transport = cast(asyncio.WriteTransport, transport)
        self.transport = transport
        self._gate.attach(cast(asyncio.Transport, transport))
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            host, port = peer[0], peer[1]
            self.remote_address = join_host_port(host, port)
            self.client_name = self.hostname = self.remote_ip = host
        transport.set_write_buffer_limits(
            high=max(256 * 1024, 4 * self.opts.max_output_buffer_size)
        )
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._sock_fd = sock.fileno()
        self.last_read = self.core.clock()
        self.nsqd.add_client(self)
        log.info("TCP: new client(%s)", self.remote_address)
        self.core.start_heartbeat(self)
        self._arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timer()
        self._stop_layers()
        self._release()
        if exc is not None:
            log.error("client(%s) - %s", self.remote_address, exc)
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.remote_address)
        ch = self.channel
        if ch is not None:
            ch.remove_client(self)
        self.nsqd.remove_client(self)

    def hand_over(self, protocol: asyncio.Protocol, data: bytes) -> None:
        """Give the socket to ``protocol`` (another protocol's magic: ProtocolV2.attach_protocol)
        with the bytes read after the magic; this connection stops being a client of nsqd."""
        transport = self.transport
        self.closed = True
        self._stop_timer()
        self.nsqd.remove_client(self)
        self._release()
        self.transport = None
        if transport is None:
            return
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if data:
            protocol.data_received(data)

    def _release(self) -> None:
        """Drop what a closed connection holds (parser buffer, output, layers, a wait) now: its
        reference cycles (parser precheck, layers) wait for the rarely run cyclic collector."""
        self.parser = wire.CommandParser(self.opts.max_msg_size, self.opts.max_body_size)
        self.out = bytearray()
        self._layers = None
        self.wait = None
        self._gate.attach(None)

    def eof_received(self) -> None:
        """The client closed its side. As nsqd's read loop: between commands that is a silent
        close; inside a body command (its size or body cut short) nsqd's failed read is answered
        with its error frame first (wire.CommandParser.eof_error), then the connection closes."""
        if not self.closed and not self._suspended and len(self._magic) == 4:
            err = self.parser.eof_error()
            if err is not None:
                log.error("[%s] - %s", self.remote_address, err)
                self.out += wire.encode_error(err)
        self.close()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.state != STATE_SUBSCRIBED:
            self._gate.pause(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._gate.holds(BACKPRESSURE):
            self._recheck_unread()
        if self.channel is not None:
            self.channel.notify_ready(self)

    def _recheck_unread(self) -> None:
        if self.closed or not self._gate.holds(BACKPRESSURE):
            return
        if self.write_paused or self._measure_unread() > UNREAD_REPLIES_LIMIT // 2:
            self.loop.call_later(UNREAD_RECHECK_S, self._recheck_unread)
            return
        self._resume_read(BACKPRESSURE)

    def _resume_read(self, reason: int) -> None:
        """Lift one reason; when reading goes on, continue with what waits in the parser at
        the next pass (the budget's own continuation is already scheduled)."""
        gate = self._gate
        was = gate.bits
        now = gate.resume(reason)
        if not was or self.closed:
            return
        if not now:
            if reason != BUDGET and (
                self.parser.buffered() or (self._layers is not None and self._layers.pending)
            ):
                self.loop.call_soon(self._continue_commands)
        elif now == BUDGET and reason != BUDGET:
            self.loop.call_soon(self._continue_commands)  # its continuation was skipped

    # ------------------------------------------------------------ reading and commands

    def data_received(self, data: bytes) -> None:
        if self._slow:  # TLS, compression or a suspended command: see _decode_in
            data = self._decode_in(data)
            if not data:
                return
        if self.closed:
            return
        self.last_read = self.core.clock()
        if len(self._magic) < 4:
            data = _take_magic(self, data)
            if not data:
                return
        self.parser.feed(data)
        if self._gate.bits & BUDGET:
            return  # a continuation is scheduled; it takes these bytes in turn
        if self._admission is not None:
            admission = self._admission
            self._admission = None
            if not admission.admit(self._admitted):
                self._gate.pause(BUDGET)  # the first read waits for a later pass
                return
        self._run_commands()

    def _admitted(self) -> None:
        """The first read's turn has come (admission.py): run what waits in the parser."""
        if self._gate.bits & ~BUDGET or self.closed or self._suspended:
            self._resume_read(BUDGET)  # another reason holds reading; its end continues
            return
        self._run_commands()

    def _continue_commands(self) -> None:
        """The next pass's share of commands left in the parser by the budget."""
        if self.closed or self._suspended:
            return
        if self._gate.bits & ~BUDGET:
            return  # paused for another reason: resumed (and continued) by that reason's end
        self._run_commands()

    def _run_commands(self) -> None:
        """Run the parser's whole commands, up to the per-pass budget; then write the replies
        at once and let the channel dispatch once for all the FIN/REQ/RDY."""
        parser = self.parser
        core = self.core
        layers = self._layers
        budget_left = READ_BUDGET_COMMANDS
        fins_left = READ_BUDGET_FINS
        start = parser.buffered()
        inflated = 0  # bytes inflated into the parser during this pass
        over_budget = False
        self._in_read = True
        try:
            while not self.closed:
                if budget_left == 0 or start + inflated - parser.buffered() >= READ_BUDGET_BYTES:
                    over_budget = True
                    break
                try:
                    if self.state == STATE_SUBSCRIBED:
                        ids = parser.take_fins(fins_left)
                        if ids:  # the common consumer traffic, without a command object each
                            fins_left -= len(ids)
                            if fins_left <= 0:
                                budget_left = 0
                            core.finish_ids(self, ids)
                            continue
                    budget_left -= 1
                    cmd = parser.next_command()
                except wire.ClientError as e:
                    act = core.error(self, e)
                else:
                    if cmd is None:
                        if parser.more_work:  # a long MPUB split goes on at the next pass
                            over_budget = True
                            break
                        # compressed input: inflate the next step only now that the parser
                        # needs it, and charge it to this pass's byte budget
                        if layers is None or not layers.pending:
                            break
                        if inflated >= READ_BUDGET_BYTES:
                            over_budget = True
                            break
                        more = layers.inflate(INFLATE_STEP)
                        if not more:
                            break
                        budget_left += 1
                        inflated += len(more)
                        parser.feed(more)
                        continue
                    act = core.execute(self, cmd[0], cmd[1], cmd[2])
                if act:
                    if act & TIMERS:
                        self._arm_timer()
                    if act & CLOSE:
                        self._in_read = False
                        self.close()
                        return
                    if act & UPGRADE:
                        self._in_read = False
                        self.flush()
                        self._upgrade()
                        return
                    if act & SUSPEND:
                        self._suspend()
                        return
        finally:
            self._in_read = False
            if not self.closed:
                parser.compact()
                self.flush()
                if self.replied:
                    self.replied = False
                    if (
                        self.state != STATE_SUBSCRIBED
                        and self._unread_bound > UNREAD_REPLIES_LIMIT
                        and self._measure_unread() > UNREAD_REPLIES_LIMIT
                    ):
                        self._gate.pause(BACKPRESSURE)
                        self.loop.call_later(UNREAD_RECHECK_S, self._recheck_unread)
                # FIN/REQ/RDY only mark that this consumer may have room: one dispatch pass for
                # the whole batch of commands, not one per FIN.
                if self.room_changed:
                    self.room_changed = False
                    if self.channel is not None:
                        self.channel.notify_ready(self)
        if not over_budget and layers is not None and not self.closed and layers.pending:
            over_budget = True  # a step was left compressed (the inflate broke off): go on
        if over_budget and not self.closed:
            self._gate.pause(BUDGET)
            self.loop.call_soon(self._continue_commands)
        elif self._gate.bits & BUDGET:
            self._resume_read(BUDGET)

    # ------------------------------------------------------------ output

    def flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._scheduled_flush)

    def flush(self) -> None:
        """Write ``out`` now (a pass's replies, a full message buffer, the layers)."""
        out = self.out
        if out and self.transport is not None and not self.closed:
            if self._slow:
                self._flush_slow()
                return
            self.out = bytearray()
            self._unread_bound += len(out)
            self.transport.write(out)

    def _measure_unread(self) -> int:
        """The socket's send queue now (SIOCOUTQ), which also becomes the bound."""
        unread = self._unread_bound = _unread_replies(self._sock_fd)
        return unread

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def close(self) -> None:
        """Close after writing what is buffered (fatal error, channel deleted, shutdown)."""
        if self.closed:
            return
        self.flush()
        layers = self._layers
        if layers is not None and self.transport is not None:
            notify = layers.close_notify()
            if notify:
                self.transport.write(notify)
        self.closed = True
        self._stop_timer()
        self._stop_layers()
        if self.transport is not None:
            self.transport.close()

    def _stop_layers(self) -> None:
        if self._layers is not None:
            self._layers.stop()
        job = self._wait_job
        if job is not None:
            self._wait_job = None
            job.cancel()

    # ------------------------------------------------------------ the heartbeat timer

    def _arm_timer(self) -> None:
        """One timer per connection, at protocol_v2's next wakeup (heartbeat or deadline)."""
        self._stop_timer()
        when = self.core.next_wakeup(self)
        if when >= 0 and not self.closed:
            self._timer = self.loop.call_at(when, self._on_timer)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self.closed:
            return
        if self.core.tick(self) & CLOSE:
            self.close()
            return
        self.replied = False
        self.flush()
        self._arm_timer()

    # ------------------------------------------------------------ the slow path: TLS,
    # compression, suspension (never entered by a plain connection)

    def _decode_in(self, data: bytes) -> bytes:
        """Bytes read -> plaintext for the parser (b"" when there is none yet)."""
        if self.closed:
            return b""
        self.last_read = self.core.clock()
        layers = self._layers
        if layers is not None:
            data = layers.decode(data)
            if self.closed:
                return b""
        if self._suspended:
            if data:
                self.parser.feed(data)
            return b""
        return data

    def _flush_slow(self) -> None:
        transport = self.transport
        assert transport is not None
        layers = self._layers
        out = self.out
        data = out if layers is None else layers.encode(out)  # no layers: suspended, plain
        if data is None:
            return  # held until the TLS handshake is done
        self.out = bytearray()
        self._unread_bound += len(data)
        transport.write(data)

    def _upgrade(self) -> None:
        """IDENTIFY negotiated TLS and/or compression: its JSON reply is out (plain)."""
        up = self.upgrade
        assert up is not None
        self.upgrade = None
        old = self.parser
        rest = bytes(old._buf[old._pos :])  # the first bytes of the new layers
        self.parser = wire.CommandParser(
            self.opts.max_msg_size, self.opts.max_body_size, self.precheck
        )
        layers = self._layers = StreamLayers(self, self.loop, up, self.nsqd.tls_context)
        self._slow = True
        layers.start()
        if rest:
            self.data_received(rest)

    # stream_upgrade.UpgradeHost

    def raw_write(self, data: bytes) -> None:
        if self.transport is not None:
            self._unread_bound += len(data)
            self.transport.write(data)

    def write_reply(self, frame: bytes) -> None:
        self.out += frame
        if not self._in_read:
            self.flush()
        else:
            self.replied = True

    def tls_established(self) -> None:
        self.core.tls_established(self)

    def transport_info(self) -> tuple[bool, str, str, str]:
        layers = self._layers
        if layers is None:
            return False, "", "", ""
        tls_on = layers.tls_on
        version, cipher = layers.tls_info() if tls_on else ("", "")
        return tls_on, version, cipher, layers.codec_name

    # ------------------------------------------------------------ suspension (AUTH, IDENTIFY)

    def _suspend(self) -> None:
        """A command waits on ``self.wait``: the replies so far go out, reading stops, later
        commands wait in the parser; the wait runs and hands its answer to _resume."""
        wait = self.wait
        assert wait is not None and self.transport is not None
        self._suspended = True
        self._slow = True
        self._in_read = False
        self.flush()  # the replies of the commands before this one go out first
        self._gate.pause(SUSPENDED)
        if wait.kind == WAIT_AUTH:
            layers = self._layers
            tls_on = layers is not None and layers.tls_on
            common_name = layers.peer_common_name() if layers is not None else ""
            query = self.nsqd.auth.query(
                self.remote_ip, tls_on, common_name, wait.arg, self.core.clock
            )
            job: asyncio.Future[Any] | None = self.loop.create_task(query)
        elif wait.kind == WAIT_FUTURE:  # a future the core made (a replicated publish)
            job = wait.arg
        elif wait.kind == WAIT_STEPS:  # a large MPUB: one slice per loop pass
            self.loop.call_soon(_run_step, self, wait.arg)
            return
        else:
            job = _decode_aside(self.loop, wait.arg)
        if job is None:  # no helper process: decode here this time
            self.loop.call_soon(self._resume, decode_identify_aside(wait.arg))
            return
        self._wait_job = job
        job.add_done_callback(self._answered)

    def _answered(self, job: asyncio.Future[Any]) -> None:
        if job is not self._wait_job:
            if not job.cancelled():
                job.exception()  # retrieved, whatever became of the connection
            return
        self._wait_job = None
        if job.cancelled():
            self.close()
            return
        exc = job.exception()  # retrieved here, whatever happens to the connection
        wait = self.wait
        answer: Any
        if exc is None:
            answer = job.result()
        elif wait is not None and wait.kind == WAIT_DECODE:
            # the decoding helper died: decode here after all (a new one next time)
            _drop_identify_pool()
            answer = decode_identify_aside(wait.arg)
        else:
            answer = exc
        self._resume(answer)

    def _resume(self, answer: Any) -> None:
        """Finish the suspended command with ``answer`` (as a command: its errors answered),
        then run the commands that waited in the parser, in order."""
        if self.closed:
            return
        self._suspended = False
        self._slow = self._layers is not None or self._suspended
        act = self.core.resume(self, answer)
        if act & TIMERS:
            self._arm_timer()
        if act & CLOSE:
            self.close()
            return
        if act & SUSPEND:  # asked the auth server again
            self._suspend()
            return
        gate = self._gate
        if act & UPGRADE:  # IDENTIFY decoded aside negotiated TLS or compression
            gate.resume(SUSPENDED | BUDGET)
            self.flush()
            self._upgrade()
            return
        self.flush()
        if self.closed:
            return
        if self.room_changed and self.channel is not None:
            self.room_changed = False
            self.channel.notify_ready(self)
        # data_received below runs what waits in the parser with a fresh budget
        gate.resume(SUSPENDED | BUDGET)
        # the commands that came behind this one, in order
        self._slow = False
        try:
            self.data_received(b"")
        finally:
            self._slow = self._layers is not None or self._suspended
