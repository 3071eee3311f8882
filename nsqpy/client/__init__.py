"""nsqpy.client: an NSQ client (asyncio, with blocking wrappers for threads).

Example (an nsqd on 127.0.0.1:4150)::

    import asyncio
    from nsqpy.client import Config, Consumer, Producer

    async def main():
        async with Producer("127.0.0.1:4150") as p:
            await p.publish("events", b"hello")  # bytes: a str is refused (TypeError)
        async with Consumer("events", "archive", Config(max_in_flight=100)) as c:
            # return None/True: FIN; return False or raise: REQ with backoff
            c.add_handler(lambda msg: print(msg.body))
            await c.connect_to_nsqd("127.0.0.1:4150")  # or connect_to_lookupd("...:4161")
            await asyncio.sleep(1)

    asyncio.run(main())

A handler that blocks goes in threads: ``add_handler(fn, concurrency=8)``. docs/client/ has
the handler contract and a guide for pynsq, gnsq and go-nsq users.

Strategy: one module per concept, as go-nsq: config (go-nsq's options, durations in seconds),
conn (one nsqd connection: IDENTIFY, TLS, snappy/deflate, AUTH, heartbeats, frames), message,
producer (Producer, ProducerPool), consumer (RDY spread, backoff, lookupd discovery),
handlers (the handler contract, threads, giving_up), checks (what is refused before
writing), lookup (GET /lookup), blocking (BlockingProducer, BlockingConsumer: a loop in a
daemon thread), http (NsqdHTTPClient, LookupdClient: the daemons' HTTP admin APIs, with
blocking wrappers; imported on first use) and stats (nsqd's /stats as typed records).
Importing this package loads none of the daemons' modules."""

from typing import TYPE_CHECKING, Any

from .blocking import BlockingConsumer, BlockingProducer
from .checks import InvalidNameError, MessageTooBigError
from .config import Config
from .conn import Conn, NSQError
from .consumer import Consumer, ConsumerStats
from .message import Message
from .producer import Producer, ProducerPool

if TYPE_CHECKING:
    from .http import (
        BlockingLookupdClient,
        BlockingNsqdHTTPClient,
        LookupdClient,
        NsqdHTTPClient,
        NSQHTTPError,
    )

#: names imported from .http on first use (PEP 562): a process that only publishes or consumes
#: over TCP never builds the HTTP clients and their /stats records
_HTTP_NAMES = frozenset(
    {
        "BlockingLookupdClient",
        "BlockingNsqdHTTPClient",
        "LookupdClient",
        "NSQHTTPError",
        "NsqdHTTPClient",
    }
)


def __getattr__(name: str) -> Any:
    if name in _HTTP_NAMES:
        from . import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _HTTP_NAMES)


__all__ = [
    "BlockingConsumer",
    "BlockingLookupdClient",
    "BlockingNsqdHTTPClient",
    "BlockingProducer",
    "Config",
    "Conn",
    "Consumer",
    "ConsumerStats",
    "InvalidNameError",
    "LookupdClient",
    "Message",
    "MessageTooBigError",
    "NSQError",
    "NSQHTTPError",
    "NsqdHTTPClient",
    "Producer",
    "ProducerPool",
]
