"""The broker's per-message code without sockets: CPU per message for NSQ's bench workloads.

Strategy: nsqpy-d's V2 protocol core (protocol_v2.ProtocolV2 over a real nsqd.NSQD, topics and
channels in memory) is driven in this process the way client_v2.Connection drives it, with no
event loop and no socket: the producer's MPUBs (NSQ's bench_writer: 200 bodies of 200 bytes)
go through wire.CommandParser and ProtocolV2.execute; one consumer (bench_reader: SUB, RDY
2500) gets its message frames in its output buffer when the channel dispatches, and its FINs
(one ``FIN <id>\\n`` line per message, all of one dispatch at once) go through
CommandParser.take_fins and ProtocolV2.finish_ids, then the channel dispatches again. Only the
broker's calls are timed, in CPU time of this process (time.process_time_ns), with the cyclic
collector off while a run lasts (the daemon paces it instead: internal.gcpacer), so the figure is
what the per-message code costs, not what the machine's scheduling or a client adds: use it to
compare two builds on a noisy machine, and NSQ's bench tools (bench.nsq_tools) for throughput.

Run it as a file, not as ``-m bench.engine``, so the nsqpy it measures is the one installed
beside the interpreter (a compiled build's venv), not a checkout in the working directory:

    .venv-mypyc/bin/python bench/engine.py --runs 5
    python bench/engine.py --messages 1000000 --size 200 --batch 200 --rdy 2500

Prints the build (nsqpy.build_info), then per run and as medians: PUB and SUB+FIN, CPU
nanoseconds per message.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import struct
import tempfile
import time
from typing import Any

from nsqpy import build_info, wire
from nsqpy.nsqd import NSQD
from nsqpy.options import Options
from nsqpy.protocol_v2 import STATE_SUBSCRIBED, ClientState, ProtocolV2

_FRAME_HEAD = 8  # 4-byte size, 4-byte frame type
_ID_AT = _FRAME_HEAD + 10  # a message frame's ID: after the timestamp and attempts


def _run_commands(core: ProtocolV2, state: ClientState, parser: wire.CommandParser) -> None:
    """client_v2.Connection._run_commands without the budgets: every whole command, a run of
    FINs at once while subscribed."""
    while True:
        if state.state == STATE_SUBSCRIBED:
            ids = parser.take_fins(1 << 30)
            if ids:
                core.finish_ids(state, ids)
                continue
        cmd = parser.next_command()
        if cmd is None:
            break
        core.execute(state, cmd[0], cmd[1], cmd[2])
    parser.compact()
    if state.room_changed and state.channel is not None:
        state.room_changed = False
        state.channel.notify_ready(state)


def one_run(messages: int, size: int, batch: int, rdy: int) -> tuple[float, float]:
    """(PUB, SUB+FIN) CPU ns per message of one fresh daemon core."""
    with tempfile.TemporaryDirectory() as data:
        opts = Options(data_path=data, mem_queue_size=messages * 2)
        core = ProtocolV2(NSQD(opts), time.monotonic)
        body = struct.pack(">I", batch) + (struct.pack(">I", size) + b"x" * size) * batch
        mpub = b"MPUB sub_bench\n" + struct.pack(">I", len(body)) + body
        prod = ClientState(core)
        p_parser = wire.CommandParser(opts.max_msg_size, opts.max_body_size, prod.precheck)
        cons = ClientState(core)
        c_parser = wire.CommandParser(opts.max_msg_size, opts.max_body_size, cons.precheck)
        c_parser.feed(b"SUB sub_bench ch\n")
        _run_commands(core, cons, c_parser)
        cons.out.clear()

        rounds = messages // batch
        spent = 0
        for _ in range(rounds):
            t = time.process_time_ns()
            p_parser.feed(mpub)
            _run_commands(core, prod, p_parser)
            spent += time.process_time_ns() - t
            prod.out.clear()
        pub_ns = spent / (rounds * batch)

        frame_len = _FRAME_HEAD + 26 + size
        done = 0
        spent = 0
        t = time.process_time_ns()
        c_parser.feed(b"RDY %d\n" % rdy)
        _run_commands(core, cons, c_parser)
        spent += time.process_time_ns() - t
        while True:
            out = bytes(cons.out)
            cons.out.clear()
            if not out:
                break
            fins = b"".join(
                [b"FIN " + out[i : i + 16] + b"\n" for i in range(_ID_AT, len(out), frame_len)]
            )
            done += len(out) // frame_len
            t = time.process_time_ns()
            c_parser.feed(fins)
            _run_commands(core, cons, c_parser)
            spent += time.process_time_ns() - t
        if done != rounds * batch:
            raise SystemExit(f"read {done} of {rounds * batch} messages")
        return pub_ns, spent / done


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200, help="body bytes (default 200)")
    ap.add_argument("--batch", type=int, default=200, help="bodies per MPUB (default 200)")
    ap.add_argument("--rdy", type=int, default=2500)
    a = ap.parse_args(argv)
    print(f"nsqpy {build_info.version_string()}")
    res: list[Any] = []
    for k in range(a.runs):
        gc.collect()
        gc.disable()
        try:
            pub, sub = one_run(a.messages, a.size, a.batch, a.rdy)
        finally:
            gc.enable()
        res.append((pub, sub))
        print(f"run {k + 1}: PUB {pub:7.1f} ns/msg   SUB+FIN {sub:7.1f} ns/msg", flush=True)
    pubs, subs = [r[0] for r in res], [r[1] for r in res]
    print(
        f"median of {a.runs}: PUB {statistics.median(pubs):.1f} ns/msg ({min(pubs):.1f}-"
        f"{max(pubs):.1f})   SUB+FIN {statistics.median(subs):.1f} ns/msg ({min(subs):.1f}-"
        f"{max(subs):.1f})"
    )


if __name__ == "__main__":
    main()
