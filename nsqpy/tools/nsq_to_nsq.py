"""`nsqpy nsq_to_nsq`: copy topics from nsqd to other nsqds, optionally filtering JSON
messages, as NSQ's apps/nsq_to_nsq/nsq_to_nsq.go (v1.3.0) does.

Strategy: one nsqpy.client Consumer per ``--topic`` and one Producer per
``--destination-nsqd-tcp-address``; each message is published to one destination, chosen by
``--mode``: ``hostpool`` (the default) or ``epsilon-greedy`` through hostpool.py, anything
else round robin (Go's zero mode), by a counter from 1, so the second address comes first, as
in Go. A message is finished once its PUB is acknowledged and
requeued when the PUB fails. JSON filters (``--require-json-field``, ``--require-json-value``,
``--whitelist-json-field``) parse the body as Go's encoding/json into a map; a body that is
not a JSON object is dropped (finished, logged), a missing required field drops the message
(or, with a required value, requeues it with backoff); a whitelist rewrites the body as Go
marshals a map: keys sorted, integral numbers without a fraction, <, >, & escaped."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ..internal.gojson import encode as go_encode_string
from ..wire import is_valid_name
from . import flags
from .flags import LIST, STR, VERSION, Flag, check_one_source, fail, log, parse_tool_flags
from .hostpool import HostPool
from .runtime import Signals, make_config, run_main, start_consumer, stop_all

FLAGS = (
    VERSION,
    Flag("channel", STR, "nsq_to_nsq", "nsq channel"),
    Flag("destination-topic", STR, "", "use this destination topic for all consumed topics"),
    flags.MAX_IN_FLIGHT,
    flags.STATUS_EVERY,
    flags.UPSTREAM_MODE,
    flags.NSQD_TCP_ADDRESS,
    Flag("destination-nsqd-tcp-address", LIST, (), "destination nsqd TCP address (repeatable)"),
    flags.LOOKUPD_HTTP_ADDRESS,
    Flag("topic", LIST, (), "nsq topic (may be given multiple times)"),
    Flag("whitelist-json-field", LIST, (), "for JSON messages: pass this field (repeatable)"),
    Flag("require-json-field", STR, "", "for JSON messages: only pass messages with this field"),
    Flag("require-json-value", STR, "", "for JSON messages: ... in which it has this value"),
    flags.CONSUMER_OPT,
    flags.PRODUCER_OPT,
)


class Backoff(Exception):
    """The message goes back with backoff (Go's handler returning an error)."""


def go_float(f: float) -> str:
    """Go's encoding/json text of a float64: shortest form, exponent outside [1e-6, 1e21)."""
    if math.isinf(f) or math.isnan(f):
        raise ValueError(f"json: unsupported value: {f}")
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        text = repr(f)
        if "e" not in text:
            text = f"{f:e}"
        mant, _, exp = text.partition("e")
        sign = "-" if exp.startswith("-") else "+"
        digits = exp.lstrip("+-").lstrip("0").rjust(2, "0")
        return f"{mant}e{sign}{digits}"
    text = repr(f)
    if "e" in text:  # Python writes 1e+16 where Go writes 10000000000000000
        text = f"{f:f}".rstrip("0").rstrip(".")
    return text[:-2] if text.endswith(".0") else text


def go_marshal(v: Any) -> str:
    """``v`` (decoded with every number a float, as Go's interface{}) as Go marshals it."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{go_marshal(k)}:{go_marshal(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(go_marshal(x) for x in v) + "]"
    if isinstance(v, str):
        return go_encode_string(v).decode("utf-8", "surrogateescape")
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):  # filterMessage's int64 of an integral float64
        return str(v)
    return go_float(float(v))


class JsonFilter:
    """nsq_to_nsq's shouldPassMessage and filterMessage."""

    def __init__(self, field: str, value: str, whitelist: Sequence[str]) -> None:
        self.field, self.value, self.whitelist = field, value, list(whitelist)
        self.value_number: float | None = None
        if value:
            try:
                self.value_number = float(value)
            except ValueError:
                self.value_number = None

    @property
    def active(self) -> bool:
        return bool(self.field or self.whitelist)

    def apply(self, body: bytes) -> bytes | None:
        """The body to publish, None to drop the message; raises Backoff."""
        try:
            js = json.loads(body, parse_int=float)
        except (ValueError, UnicodeDecodeError):
            js = None
        if not isinstance(js, dict):
            log(f"ERROR: Unable to decode json: {body.decode('utf-8', 'replace')}")
            return None
        if not self.passes(js):
            return None
        if not self.whitelist:
            return body
        out: dict[str, Any] = {}
        for key in self.whitelist:
            if key in js:
                value = js[key]
                if isinstance(value, float) and -(2.0**63) <= value < 2.0**63:
                    if value == int(value):  # Go: int64(f) when it converts back to f
                        value = int(value)
                out[key] = value
        return go_marshal(out).encode("utf-8", "surrogateescape")

    def passes(self, js: dict) -> bool:
        if not self.field:
            return True
        if self.field not in js:
            if self.value:
                log("ERROR: missing field to check required value")
                raise Backoff("backoff")
            return False
        if not self.value:
            return True
        v = js[self.field]
        if isinstance(v, str):
            return v == self.value
        if self.value_number is not None:
            return isinstance(v, float) and v == self.value_number
        return False


async def copy(opts: dict) -> None:
    from ..client import Producer

    dests = opts["destination_nsqd_tcp_address"]
    ccfg = make_config("nsq_to_nsq", opts["consumer_opt"], opts["max_in_flight"])
    pcfg = make_config("nsq_to_nsq", opts["producer_opt"], flag="producer-opt")
    producers = {}
    for addr in dests:
        try:
            producers[addr] = Producer(addr, pcfg)
        except ValueError as e:
            fail(f"failed creating producer {e}")
    mode = opts["mode"]
    pool = HostPool(dests)
    counter = 0
    filt = JsonFilter(
        opts["require_json_field"], opts["require_json_value"], opts["whitelist_json_field"]
    )

    def handler_for(dest_topic: str) -> Any:
        async def handle(msg: Any) -> None:
            nonlocal counter
            body = msg.body
            if filt.active:
                out = filt.apply(body)  # Backoff propagates: REQ with backoff
                if out is None:
                    return  # FIN: dropped
                body = out
            if mode == "hostpool" or mode == "epsilon-greedy":
                addr = pool.get()
            else:
                counter += 1
                addr = dests[counter % len(dests)]
            msg.disable_auto_response()
            try:
                await producers[addr].publish(dest_topic, body)
            except Exception:  # noqa: BLE001 - any failed PUB: the message goes back
                pool.mark(addr, False)
                msg.requeue(None)
                return
            pool.mark(addr, True)
            msg.finish()

        return handle

    signals = Signals()
    consumers = []
    for topic in opts["topic"]:
        dest_topic = opts["destination_topic"] or topic
        consumers.append(
            await start_consumer(
                topic,
                opts["channel"],
                ccfg,
                handler_for(dest_topic),
                max(len(dests), opts["max_in_flight"]),
                opts["nsqd_tcp_address"],
                opts["lookupd_http_address"],
            )
        )
    await signals.wait()
    await stop_all(consumers)
    for p in producers.values():
        await p.stop()


def run(argv: Sequence[str]) -> None:
    """nsq_to_nsq's command line (``argv`` in Go flag syntax); exits as Go's tool does."""
    opts = parse_tool_flags("nsq_to_nsq", FLAGS, argv)
    if opts is None:
        return
    flags.require_topic_and_channel(opts)
    if not all(is_valid_name(t) for t in opts["topic"]):
        fail("--topic is invalid")
    if opts["destination_topic"] and not is_valid_name(opts["destination_topic"]):
        fail("--destination-topic is invalid")
    if not is_valid_name(opts["channel"]):
        fail("--channel is invalid")
    check_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"], "nsqd-tcp-address")
    if not opts["destination_nsqd_tcp_address"]:
        fail("--destination-nsqd-tcp-address required")
    run_main(copy(opts))
