"""Publishers that pipeline PUBs and never read a reply (a misbehaving client), for fairness tests.

Each of --conns connections (one thread each) says the V2 magic and then sends batches of
--batch PUB commands of --size-byte bodies, as fast as the socket takes them, for --runfor
seconds; it never reads. Every --every seconds a line of JSON goes to stdout with the messages
each connection has handed to the kernel so far. A connection whose sends stop progressing has
been pushed back by the daemon.

    python tests/clients/flood.py --tcp 127.0.0.1:4150 --conns 4 --runfor 10
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcp", required=True)
    ap.add_argument("--topic", default="flood")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--runfor", type=float, default=10)
    ap.add_argument("--every", type=float, default=0.25)
    ap.add_argument(
        "--rcvbuf",
        type=int,
        default=0,
        help="SO_RCVBUF of each connection (small: the daemon's replies fill it sooner)",
    )
    args = ap.parse_args()
    host, port = args.tcp.rsplit(":", 1)
    body = b"x" * args.size
    one = b"PUB %s\n" % args.topic.encode() + len(body).to_bytes(4, "big") + body
    chunk = one * args.batch
    sent = [0] * args.conns
    stop = time.monotonic() + args.runfor
    socks = []

    def flood(i: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if args.rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
        s.settimeout(5)
        s.connect((host, int(port)))
        socks.append(s)
        s.sendall(b"  V2")
        s.settimeout(0.2)
        view = memoryview(chunk)
        pos = 0
        while time.monotonic() < stop:
            try:
                n = s.send(view[pos:])
            except TimeoutError:
                continue  # pushed back: the kernel buffers are full
            except OSError:
                return
            pos += n
            sent[i] += n // len(one)
            if pos >= len(chunk):
                pos = 0

    threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(args.conns)]
    for t in threads:
        t.start()
    while time.monotonic() < stop:
        time.sleep(args.every)
        print(json.dumps({"t": round(args.runfor - (stop - time.monotonic()), 2), "sent": sent}))
    for t in threads:
        t.join(2)
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
