"""The cluster-info reads and actions over HTTP that nsqpy-admin, nsq_stat and nsq_to_file
share (Go's internal/clusterinfo/data.go).

Strategy: one HTTPClient (http_client.py) shared by every request; each read asks all the
daemons concerned at once (asyncio.gather) and turns the answers into records through types.py
(pure). A daemon that fails becomes a message, never an exception: reads return ``(value,
errors)`` and raise types.UpstreamError ("failed to query any nsqd: ...") only when every
daemon asked failed, as Go's PartialErr / error split does; what a caller does with a partial
answer is its own choice (nsqpy-admin warns, nsq_stat exits as Go's does). Actions POST to
lookupds one after another and to nsqds in parallel, collecting errors. See
docs/architecture-clusterinfo.md."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import quote_plus

from . import types as ci
from .http_client import FetchError, HTTPClient
from .types import ProducerInfo, Stats

log = logging.getLogger("nsqpy")


def _q(value: str) -> str:
    return quote_plus(value, safe="")


class ClusterInfo:
    """The cluster one nsqpy-admin or tool sees: ``lookupd`` and ``nsqd`` are the configured
    HTTP addresses (lookupds are asked when any are given, else the nsqds), ``client`` the
    HTTP client every request goes through (its owner closes it)."""

    def __init__(self, client: HTTPClient, lookupd: list[str], nsqd: list[str]) -> None:
        self.client = client
        self.lookupd = list(lookupd)
        self.nsqd = list(nsqd)

    # ------------------------------------------------------------ fan-out

    async def _gather(self, urls: list[str]) -> list[tuple[Any, str | None]]:
        """GET every URL at once: ``(json, None)`` or ``(None, error text)`` per URL."""

        async def one(url: str) -> tuple[Any, str | None]:
            log.debug("CI: querying %s", url)
            try:
                return await self.client.get_json(url), None
            except FetchError as e:
                return None, str(e)

        return list(await asyncio.gather(*(one(u) for u in urls)))

    @staticmethod
    def _split(answers: list[tuple[Any, str | None]], kind: str) -> tuple[list[Any], list[str]]:
        ok = [a for a, err in answers if err is None]
        errors = [err for _, err in answers if err is not None]
        if answers and not ok:
            raise ci.all_failed(kind, errors)
        return ok, errors

    # ------------------------------------------------------------ reads

    async def lookupd_topics(self) -> tuple[list[str], list[str]]:
        """GetLookupdTopics: every lookupd's /topics, united and sorted."""
        answers = await self._gather([f"http://{a}/topics" for a in self.lookupd])
        ok, errors = self._split(answers, "nsqlookupd")
        return ci.union_sorted(b.get("topics") for b in ok), errors

    async def lookupd_topic_channels(self, topic: str) -> tuple[list[str], list[str]]:
        """GetLookupdTopicChannels: every lookupd's /channels?topic=, united and sorted."""
        answers = await self._gather(
            [f"http://{a}/channels?topic={_q(topic)}" for a in self.lookupd]
        )
        ok, errors = self._split(answers, "nsqlookupd")
        return ci.union_sorted(b.get("channels") for b in ok), errors

    async def nsqd_topics(self) -> tuple[list[str], list[str]]:
        """GetNSQDTopics: every configured nsqd's /stats topic names, united and sorted."""
        answers = await self._gather(
            [f"http://{a}/stats?format=json&include_clients=false" for a in self.nsqd]
        )
        ok, errors = self._split(answers, "nsqd")
        return ci.union_sorted([str(t.get("topic_name")) for t in _topics(b)] for b in ok), errors

    async def topics(self) -> tuple[list[str], list[str]]:
        """The topic list /api/topics answers: from the lookupds, else the nsqds."""
        return await (self.lookupd_topics() if self.lookupd else self.nsqd_topics())

    async def lookupd_producers(self) -> tuple[list[ProducerInfo], list[str]]:
        """GetLookupdProducers: every lookupd's /nodes merged (clusterinfo.merge_lookupd_nodes)."""
        answers = await self._gather([f"http://{a}/nodes" for a in self.lookupd])
        pairs = [(addr, body) for addr, (body, err) in zip(self.lookupd, answers) if err is None]
        _, errors = self._split(answers, "nsqlookupd")
        return ci.merge_lookupd_nodes(pairs), errors

    async def _nsqd_producer(self, addr: str, topic: str = "") -> ProducerInfo | None:
        """One configured nsqd as a ProducerInfo (None when ``topic`` is given and it lacks it);
        FetchError when it does not answer."""
        q = f"&topic={_q(topic)}" if topic else ""
        stats_url = f"http://{addr}/stats?format=json{q}&include_clients=false"
        if not topic:  # GetNSQDProducers: /info, then /stats
            info = await self.client.get_json(f"http://{addr}/info")
            names = [
                t.get("topic_name", "") for t in _topics(await self.client.get_json(stats_url))
            ]
            return ci.producer_from_nsqd(info, names, addr)
        # GetNSQDTopicProducers: /stats?topic=, then /info of the nodes that have it
        names = [t.get("topic_name", "") for t in _topics(await self.client.get_json(stats_url))]
        if topic not in names:
            return None
        info = await self.client.get_json(f"http://{addr}/info")
        return ci.producer_from_nsqd(info, names, addr)

    async def nsqd_producers(
        self, topic: str = "", addrs: list[str] | None = None
    ) -> tuple[list[ProducerInfo], list[str]]:
        """GetNSQDProducers (every configured nsqd, or ``addrs``) or, with ``topic``,
        GetNSQDTopicProducers (those that have it)."""

        async def one(addr: str) -> tuple[ProducerInfo | None, str | None]:
            try:
                return await self._nsqd_producer(addr, topic), None
            except FetchError as e:
                return None, str(e)

        targets = self.nsqd if addrs is None else addrs
        answers = list(await asyncio.gather(*(one(a) for a in targets)))
        _, errors = self._split(answers, "nsqd")
        return [p for p, err in answers if p is not None], errors

    async def producers(self) -> tuple[list[ProducerInfo], list[str]]:
        """GetProducers: the lookupds' nodes, else the configured nsqds."""
        return await (self.lookupd_producers() if self.lookupd else self.nsqd_producers())

    async def lookupd_topic_producers(self, topic: str) -> tuple[list[ProducerInfo], list[str]]:
        """GetLookupdTopicProducers: every lookupd's /lookup?topic= producers, one per HTTP
        address (a lookupd that does not know the topic answers 404: an error, as in Go)."""
        answers = await self._gather([f"http://{a}/lookup?topic={_q(topic)}" for a in self.lookupd])
        ok, errors = self._split(answers, "nsqlookupd")
        return ci.merge_topic_producers(ok), errors

    async def topic_producers(self, topic: str) -> tuple[list[ProducerInfo], list[str]]:
        """GetTopicProducers: from the lookupds, else the configured nsqds that have it."""
        if self.lookupd:
            return await self.lookupd_topic_producers(topic)
        return await self.nsqd_producers(topic)

    async def stats(
        self,
        producers: list[ProducerInfo],
        topic: str = "",
        channel: str = "",
        include_clients: bool = True,
        *,
        require_one: bool = False,
    ) -> tuple[list[Stats], dict[str, Stats], dict[str, str]]:
        """Each producer's /stats (filtered by topic and channel) as per-node TopicStats sorted
        by host, the cluster-wide channel map (clusterinfo.aggregate_channels) and the errors by
        node HTTP address. A node that failed is only in the errors; with ``require_one``
        (GetNSQDStats) UpstreamError is raised when every producer failed, and when there is
        none, as nsqadmin does."""
        urls = []
        for p in producers:
            url = f"http://{ci.http_address(p)}/stats?format=json"
            if topic:
                url += f"&topic={_q(topic)}"
                if channel:
                    url += f"&channel={_q(channel)}"
            if not include_clients:
                url += "&include_clients=false"
            urls.append(url)
        answers = await self._gather(urls)
        node_errors = {
            ci.http_address(p): err for p, (_, err) in zip(producers, answers) if err is not None
        }
        rows: list[Stats] = []
        for p, (body, err) in zip(producers, answers):
            if err is None:
                rows += ci.node_topic_stats(body, ci.http_address(p), p["hostname"], topic)
        if require_one and len(node_errors) == len(producers):
            raise ci.all_failed("nsqd", list(node_errors.values()))
        rows.sort(key=lambda t: (t["hostname"], t["node"]))
        return rows, ci.aggregate_channels(rows, topic), node_errors

    async def node_infos(self, producers: list[ProducerInfo]) -> dict[str, tuple[Any, str | None]]:
        """Each producer's /info (for start_time: uptime) by HTTP address: ``(info, error)``."""
        addrs = [ci.http_address(p) for p in producers]
        answers = await self._gather([f"http://{a}/info" for a in addrs])
        return dict(zip(addrs, answers))

    async def node_metrics(self, addr: str) -> dict[str, float] | None:
        """The node-wide samples (those without labels) of nsqpy-d's Prometheus ``/metrics``
        at ``addr``, by name; None when the node has no /metrics (Go's nsqd answers 404) or it
        cannot be read."""
        try:
            text = (await self.client.request("GET", f"http://{addr}/metrics")).decode()
        except (FetchError, UnicodeDecodeError):
            return None
        return ci.prometheus_plain_samples(text)

    # ------------------------------------------------------------ actions

    async def _lookupd_post(self, uri: str, qs: str) -> list[str]:
        """nsqlookupdPOST: POST to each lookupd in turn; the errors."""
        errors = []
        for addr in self.lookupd:
            try:
                await self.client.post(f"http://{addr}/{uri}?{qs}")
            except FetchError as e:
                errors.append(str(e))
        return errors

    async def _producers_post(self, producers: list[ProducerInfo], uri: str, qs: str) -> list[str]:
        """producersPOST: POST to every producer (at once); the errors."""

        async def one(p: ProducerInfo) -> str | None:
            try:
                await self.client.post(f"http://{ci.http_address(p)}/{uri}?{qs}")
            except FetchError as e:
                return str(e)
            return None

        return [e for e in await asyncio.gather(*(one(p) for p in producers)) if e]

    async def tombstone_node_for_topic(self, topic: str, node: str) -> list[str]:
        """TombstoneNodeForTopic: tombstone on every lookupd, then delete the topic on the
        node (asked directly at ``node``, its HTTP address)."""
        errors = await self._lookupd_post("topic/tombstone", f"topic={_q(topic)}&node={_q(node)}")
        producers, errs = await self.nsqd_producers(addrs=[node])  # UpstreamError: 502
        errors += errs
        errors += await self._producers_post(producers, "topic/delete", f"topic={_q(topic)}")
        return errors

    async def create_topic_channel(self, topic: str, channel: str) -> list[str]:
        """CreateTopicChannel: the topic (and channel) on every lookupd, and the channel on
        every nsqd that produces the topic."""
        errors = await self._lookupd_post("topic/create", f"topic={_q(topic)}")
        if channel:
            qs = f"topic={_q(topic)}&channel={_q(channel)}"
            errors += await self._lookupd_post("channel/create", qs)
            producers, errs = await self.lookupd_topic_producers(topic)
            errors += errs
            errors += await self._producers_post(producers, "channel/create", qs)
        return errors

    async def delete_topic(self, topic: str) -> list[str]:
        """DeleteTopic: find the producers first, then delete on the lookupds and the nsqds."""
        producers, errors = await self.topic_producers(topic)
        qs = f"topic={_q(topic)}"
        errors += await self._lookupd_post("topic/delete", qs)
        errors += await self._producers_post(producers, "topic/delete", qs)
        return errors

    async def delete_channel(self, topic: str, channel: str) -> list[str]:
        """DeleteChannel: on the lookupds and on every nsqd that produces the topic."""
        producers, errors = await self.topic_producers(topic)
        qs = f"topic={_q(topic)}&channel={_q(channel)}"
        errors += await self._lookupd_post("channel/delete", qs)
        errors += await self._producers_post(producers, "channel/delete", qs)
        return errors

    async def topic_channel_action(self, topic: str, channel: str, action: str) -> list[str]:
        """actionHelper: POST /topic/<action> or /channel/<action> (pause, unpause, empty) to
        every nsqd that produces the topic."""
        producers, errors = await self.topic_producers(topic)
        if channel:
            uri, qs = f"channel/{action}", f"topic={_q(topic)}&channel={_q(channel)}"
        else:
            uri, qs = f"topic/{action}", f"topic={_q(topic)}"
        errors += await self._producers_post(producers, uri, qs)
        return errors

    async def change_placement(
        self, topic: str, uri: str, qs: str
    ) -> tuple[dict[str, Any] | None, list[str]]:
        """nsqpy-d's placement changes of a replicated topic (docs/replication.md): POST
        /<uri>?topic=<topic>&<qs> (``topic/replicas`` or ``topic/reassign``) to the topic's
        producers one after another until one answers 200 (any node of the cluster takes
        it); (its answer: the topic's record, or None when none did; the errors). The wait
        for new nodes is bounded below this client's request timeout (``timeout_ms``)."""
        producers, errors = await self.topic_producers(topic)
        total = self.client.timeout.total or 5.0
        wait_ms = max(500, int(total * 1000) - 1000)
        for p in producers:
            url = f"http://{ci.http_address(p)}/{uri}?topic={_q(topic)}&{qs}&timeout_ms={wait_ms}"
            try:
                answer = json.loads(await self.client.request("POST", url))
            except FetchError as e:
                errors.append(str(e))
                continue
            except ValueError as e:
                errors.append(f'Post "{url}": invalid JSON answer: {e}')
                continue
            if isinstance(answer, dict):
                return answer, errors
            errors.append(f'Post "{url}": not a JSON object')
        return None, errors

    async def replay_dead_letters(self, topic: str, channel: str) -> tuple[int, list[str]]:
        """nsqpy-d's dead letters: POST /message/replay?topic=&channel= to every producer of
        the topic (at once); (messages replayed in all, errors). A Go nsqd has no such
        endpoint: its 404 is an error like any other."""
        producers, errors = await self.topic_producers(topic)
        qs = f"topic={_q(topic)}&channel={_q(channel)}"

        async def one(p: ProducerInfo) -> tuple[int, str | None]:
            url = f"http://{ci.http_address(p)}/message/replay?{qs}"
            try:
                answer = json.loads(await self.client.request("POST", url))
            except FetchError as e:
                return 0, str(e)
            except ValueError as e:
                return 0, f'Post "{url}": invalid JSON answer: {e}'
            n = answer.get("replayed") if isinstance(answer, dict) else None
            return (n, None) if isinstance(n, int) else (0, f'Post "{url}": no "replayed" count')

        answers = await asyncio.gather(*(one(p) for p in producers))
        errors += [e for _, e in answers if e]
        return sum(n for n, _ in answers), errors

    # ------------------------------------------------------------ where is message X?

    async def _message_get(self, url: str) -> tuple[int, Any, str]:
        """One GET /message: (status, decoded answer or None, error text)."""
        try:
            status, data = await self.client._once("GET", url, None)
        except FetchError as e:
            return 0, None, str(e)
        try:
            body = json.loads(data)
        except ValueError:
            return status, None, f"{url}: got {status} and no JSON"
        text = body.get("message", "") if isinstance(body, dict) else ""
        return status, body, "" if status == 200 else f"{status} {text}".strip()

    async def find_message(self, msg_id: str, topic: str = "", body: bool = False) -> MessageHunt:
        """Where message ``msg_id`` is (nsqpy's GET /message?id= on nsqpy-lookupd and nsqpy-d,
        README "Where is message X?"): with lookupds, each lookupd in turn until one answers
        200 (it routes by the ID's node id to the nsqpy-d that made it; a 404 NODE_NOT_FOUND
        sends the question to the next lookupd); with nsqds only, every nsqd at once. A 400
        (INVALID_ID, INVALID_TOPIC) ends the hunt. Never raises: errors are in the result."""
        q = (
            f"id={_q(msg_id)}"
            + (f"&topic={_q(topic)}" if topic else "")
            + ("&body=1" if body else "")
        )
        hunt = MessageHunt()
        if self.lookupd:
            for addr in self.lookupd:
                status, answer, err = await self._message_get(f"http://{addr}/message?{q}")
                if status == 200 and isinstance(answer, dict):
                    hunt.answers.append((addr, answer))
                    return hunt
                hunt.errors.append((addr, status, err))
                if status == 400:
                    return hunt
            return hunt
        answers = await asyncio.gather(
            *(self._message_get(f"http://{a}/message?{q}") for a in self.nsqd)
        )
        for addr, (status, answer, err) in zip(self.nsqd, answers):
            if status == 200 and isinstance(answer, dict):
                if answer.get("found") or answer.get("this_node"):
                    hunt.answers.append((addr, answer))
            else:
                hunt.errors.append((addr, status, err))
        return hunt


class MessageHunt:
    """What find_message learnt: ``answers`` [(daemon address, its 200 answer)] (a lookupd's
    answer carries "producer"; nsqds' are those that hold the message or made it), ``errors``
    [(daemon address, HTTP status or 0 when it did not answer, text)]."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.errors: list[tuple[str, int, str]] = []

    @property
    def found(self) -> bool:
        return any(a.get("found") for _, a in self.answers)

    @property
    def status(self) -> int:
        """The HTTP status the page answers: 200 unless a daemon refused the question (400)."""
        return 400 if any(s == 400 for _, s, _ in self.errors) else 200


def _topics(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict) and "topics" not in body and isinstance(body.get("data"), dict):
        body = body["data"]
    return (body.get("topics") if isinstance(body, dict) else None) or []
