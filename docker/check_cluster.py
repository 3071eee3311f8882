#!/usr/bin/env python3
"""Run docker/compose.yaml with podman-compose and check the cluster end to end (docker/check.sh).

Standard library only: it runs on the host's python3 and drives `podman` and `podman-compose`;
what it reads inside the cluster it reads with `podman exec` (the containers' own Python, the
spark image's pyarrow), so no host port matters. Steps, each bounded in time:

1. `down -v` of an earlier run of the project, then `up -d` of everything but the publishers:
   two lookupds, three nodes, nsqpy-admin, Prometheus, a Spark master, two workers, the Spark
   job's driver.
2. Health: every container with a health check turns healthy. podman runs health checks from
   systemd timers; with no systemd (a container or CI machine) nothing would run them, so this
   script runs `podman healthcheck run` on each of them every few seconds for the whole run.
   podman-compose before podman 4.6 also ignores `condition: service_healthy` (it starts in
   dependency order only), so the job's retries and this wait stand in for it.
3. As soon as the nodes are healthy the topic and the job's channel are created on each (so the
   lookupds list the nodes when the job's source first asks, and no event is published before
   the channel exists); once the job is subscribed on every node, the publishers start (`up -d
   --no-deps`), and 15 s later lookupd1 is killed (`podman kill`, SIGKILL), then nsqd2 (its
   publisher paused for that moment, so that no MPUB is in flight: one stored and not answered
   would be sent again and counted twice); nsqd2 is restarted while lookupd1 is still down (the
   job finds it again through lookupd2 alone), then lookupd1 (`podman start`, unless the
   restart policy already did); the publisher dials nsqd2 again meanwhile.
4. The publishers' own totals (what nsqd answered OK), from their logs; once every node's
   channel is empty and nothing is in flight (all of it in the source's spool), one `_flush`
   event dated an hour ahead moves the job's watermark past every window, so the file sink
   writes them all.
5. The count: the sum of `events` over the Parquet files that the sink's `_spark_metadata` log
   lists, waited for until it stops changing; lost = published - counted when positive.
   nsqpy-admin lists the three nodes; Prometheus has its six targets up and the alert rules
   loaded; the Spark master lists two ALIVE workers and the job.

Prints one `figure` line per measurement and ends with PASS or FAIL (exit 0 / 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPOSE_FILE = HERE / "compose.yaml"
PUBLISHERS = ["publisher1", "publisher2", "publisher3"]
NODES = ["nsqd1", "nsqd2", "nsqd3"]
TOPIC, CHANNEL = "events", "spark-event-counts"
APP = "nsq-event-counts-events"
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def figure(name: str, value: object) -> None:
    print(f"figure {name}: {value}", flush=True)


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.podman = shlex.split(args.podman)
        self.compose = [*shlex.split(args.compose), "-p", args.project, "-f", str(COMPOSE_FILE)]
        self.project = args.project
        self.env = dict(os.environ)
        self.env.update(
            NSQPY_EVENTS=str(args.events),
            NSQPY_RATE=str(args.rate),
            NSQPY_PUBLISH_SECONDS=str(args.publish_seconds),
        )
        self.health: dict[str, str] = {}
        self._pump_stop = threading.Event()
        self._pump: threading.Thread | None = None

    # ------------------------------------------------------------------ commands
    def run(
        self, cmd: list[str], timeout: float, check: bool = True, merge: bool = False, **kw
    ) -> str:
        """``cmd``'s stdout (with its stderr when ``merge``); raises RuntimeError on a non-zero
        exit when ``check``, subprocess.TimeoutExpired after ``timeout`` s."""
        r = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            text=True,
            timeout=timeout,
            env=self.env,
            **kw,
        )
        if check and r.returncode != 0:
            err = (r.stderr or "")[-3000:]
            raise RuntimeError(f"{shlex.join(cmd)} -> {r.returncode}\n{r.stdout[-3000:]}\n{err}")
        return r.stdout

    def pm(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        return self.run([*self.podman, *args], timeout, check)

    def pc(self, *args: str, timeout: float = 300) -> str:
        return self.run([*self.compose, *args], timeout)

    def containers(self) -> dict[str, str]:
        """service -> container name, for this project's containers."""
        out = self.pm(
            "ps",
            "-a",
            "--filter",
            f"label=io.podman.compose.project={self.project}",
            "--format",
            "json",
        )
        found = {}
        for c in json.loads(out or "[]"):
            labels = c.get("Labels") or {}
            svc = labels.get("com.docker.compose.service")
            if svc:
                found[svc] = c["Names"][0]
        return found

    def inspect(self, name: str) -> dict:
        return json.loads(self.pm("inspect", name))[0]

    def exec_py(self, service: str, code: str, timeout: float = 60) -> str:
        return self.run(
            [*self.podman, "exec", "-i", self.containers()[service], "python", "-"],
            timeout,
            input=code,
        )

    def get_json(self, service: str, url: str) -> object:
        code = (
            "import json, sys, urllib.request as u\n"
            f"sys.stdout.write(u.urlopen({url!r}, timeout=5).read().decode())\n"
        )
        return json.loads(self.exec_py(service, code, timeout=30))

    # ------------------------------------------------------------------ health
    def with_healthcheck(self) -> list[str]:
        out = []
        for svc, name in self.containers().items():
            test = (self.inspect(name)["Config"].get("Healthcheck") or {}).get("Test") or []
            if test and test[0] != "NONE":  # NONE: disabled (the publishers)
                out.append(svc)
        return sorted(out)

    def pump_health(self) -> None:
        """Run every container's health check, one after the other, every 5 s (the systemd
        timer's job). A check that does not answer within 60 s counts as unhealthy."""

        def loop() -> None:
            while not self._pump_stop.is_set():
                try:
                    names = list(self.containers().items())
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
                    names = []
                for svc, name in names:
                    if svc in PUBLISHERS or self._pump_stop.is_set():
                        continue
                    try:
                        r = subprocess.run(
                            [*self.podman, "healthcheck", "run", name],
                            capture_output=True,
                            text=True,
                            timeout=60,
                        )
                    except subprocess.TimeoutExpired:
                        self.health[svc] = "unhealthy"
                        continue
                    if r.returncode == 0:
                        self.health[svc] = "healthy"
                    elif "no defined healthcheck" not in (r.stderr + r.stdout):
                        self.health[svc] = "unhealthy"
                self._pump_stop.wait(5)

        self._pump = threading.Thread(target=loop, daemon=True)
        self._pump.start()

    def wait_healthy(self, services: list[str], timeout: float) -> float:
        t = time.monotonic()
        for svc in services:
            self.health.pop(svc, None)
        while True:
            bad = [s for s in services if self.health.get(s) != "healthy"]
            if not bad:
                return time.monotonic() - t
            if time.monotonic() - t > timeout:
                raise RuntimeError(f"not healthy after {timeout:.0f}s: {bad}")
            time.sleep(0.5)

    # ------------------------------------------------------------------ kill and restart
    def kill(self, svc: str) -> tuple[str, str]:
        """SIGKILL the service's container; (name, its StartedAt before)."""
        name = self.containers()[svc]
        before = self.inspect(name)["State"]["StartedAt"]
        self.pm("kill", name)
        log(f"killed {svc} (podman kill: SIGKILL)")
        return name, before

    def restart(self, svc: str, name: str, before: str, grace: float = 3) -> None:
        """Start the killed container again, unless its restart policy did within ``grace``."""
        deadline = time.monotonic() + grace
        while True:
            st = self.inspect(name)["State"]
            if st["Status"] == "running" and st["StartedAt"] != before:
                log(f"{svc} was restarted by its restart policy")
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        self.pm("start", name)
        log(f"started {svc} again (podman start)")

    def down(self) -> None:
        """Remove the project's containers, networks and volumes: the named ones (`down -v`)
        and the anonymous ones the images' VOLUME made (podman-compose leaves those)."""
        anonymous = set()
        for name in self.containers().values():
            for m in self.inspect(name).get("Mounts", []):
                if m.get("Type") == "volume" and re.fullmatch(r"[0-9a-f]{64}", m.get("Name", "")):
                    anonymous.add(m["Name"])
        self.run([*self.compose, "down", "-v", "-t", "5"], timeout=180, check=False)
        if anonymous:
            self.pm("volume", "rm", "-f", *sorted(anonymous), timeout=60, check=False)


# ---------------------------------------------------------------------- inside the cluster

COUNT_PARQUET = r"""
import json, os, sys
import pyarrow.parquet as pq
out = "/data/event-counts"
meta = os.path.join(out, "_spark_metadata")
paths = set()
if os.path.isdir(meta):
    for f in sorted(os.listdir(meta)):
        if f.startswith("."):
            continue
        with open(os.path.join(meta, f)) as fh:
            for line in fh.read().splitlines()[1:]:
                if not line.strip():
                    continue
                e = json.loads(line)
                p = e["path"].removeprefix("file://")
                if e.get("action") == "delete":
                    paths.discard(p)
                else:
                    paths.add(p)
kinds = {}
rows = 0
for p in sorted(paths):
    t = pq.read_table(p, columns=["kind", "events"])
    rows += t.num_rows
    for k, n in zip(t.column("kind").to_pylist(), t.column("events").to_pylist()):
        kinds[k] = kinds.get(k, 0) + n
print(json.dumps({"files": len(paths), "rows": rows, "kinds": kinds}))
"""

CREATE = r"""
import urllib.request as u
base = "http://127.0.0.1:4151"
for path in (
    "/topic/create?topic=events",
    "/channel/create?topic=events&channel=spark-event-counts",
):
    u.urlopen(u.Request(base + path, method="POST"), timeout=5).read()
"""

FLUSH = r"""
import datetime as dt, json, urllib.request as u
ts = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(timespec="milliseconds")
body = json.dumps({"event_id": -1, "ts": ts, "user": "", "kind": "_flush", "value": 0.0})
r = u.urlopen(u.Request("http://127.0.0.1:4151/pub?topic=events", data=body.encode()), timeout=5)
print(r.read().decode())
"""


def channel_stats(c: Cluster, node: str) -> dict | None:
    stats = c.get_json(node, f"http://127.0.0.1:4151/stats?format=json&topic={TOPIC}")
    for t in stats.get("topics", []):
        for ch in t.get("channels", []):
            if ch["channel_name"] == CHANNEL:
                return ch
    return None


def wait_for(what: str, fn, timeout: float, every: float = 1.0):
    t = time.monotonic()
    last_err = None
    while time.monotonic() - t < timeout:
        try:
            v = fn()
            if v:
                return v
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
            last_err = e
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what} ({last_err})")


# ---------------------------------------------------------------------- the check


def check(c: Cluster, args: argparse.Namespace) -> list[str]:
    failures: list[str] = []
    c.down()
    t = time.monotonic()
    svcs = [
        "lookupd1",
        "lookupd2",
        *NODES,
        "nsqadmin",
        "prometheus",
        "spark-master",
        "spark-worker1",
        "spark-worker2",
        "spark",
    ]
    c.pc("up", "-d", "--no-build", *svcs, timeout=600)
    log(f"up: {', '.join(svcs)}")
    c.pump_health()
    # The topic and the job's channel on every node as soon as the nodes are up (as for any NSQ
    # consumer that must see every message), so the lookupds list the nodes by the time the
    # job's source first asks them, and it subscribes before any event is published.
    c.wait_healthy(NODES, args.health_timeout)
    for n in NODES:
        c.exec_py(n, CREATE)
    log("topic and channel created on the 3 nodes")
    hc = c.with_healthcheck()
    figure("containers with a health check", f"{len(hc)} ({', '.join(hc)})")
    took = c.wait_healthy(hc, args.health_timeout)
    figure("all healthy after", f"{time.monotonic() - t:.1f}s (the last {took:.1f}s after up)")

    # The job runs on the standalone cluster: two workers, an executor on each.
    master = c.get_json("spark-master", "http://127.0.0.1:8080/json/")
    alive = sorted(w["host"] for w in master["workers"] if w["state"] == "ALIVE")
    apps = [a for a in master["activeapps"] if a["name"] == APP]
    state = f"{apps[0]['state']} with {apps[0]['cores']} cores" if apps else "missing"
    figure("spark master", f"workers ALIVE {alive}, app {APP} {state}")
    if len(alive) != 2 or not apps or apps[0]["cores"] != 2:
        failures.append(f"spark cluster: workers {alive}, apps {master['activeapps']}")

    def subscribed() -> bool:
        return all((channel_stats(c, n) or {}).get("clients") for n in NODES)

    t = time.monotonic()
    wait_for("the job subscribed on every node", subscribed, args.health_timeout, 2)
    figure(
        "job subscribed on all 3 nodes (through the lookupds)",
        f"{time.monotonic() - t:.1f}s after the job was healthy",
    )

    # Publish, and kill a lookupd and a node while the job consumes.
    c.pc("up", "-d", "--no-deps", "--no-build", *PUBLISHERS)
    t_pub = time.monotonic()
    log(f"publishers started: {args.events} events each at {args.rate}/s")
    time.sleep(args.kill_after)

    lk = c.kill("lookupd1")
    time.sleep(2)
    # nsqd2's publisher is frozen for the moment of the kill so that no MPUB of it is in flight:
    # one that nsqd2 stored and died before answering would be sent again (publishing is
    # at-least-once) under a new message ID and counted twice, which would blur "lost 0".
    # Every answer nsqd2 sent before the kill is in the publisher's socket by then (1 s).
    pub2 = c.containers()["publisher2"]
    c.pm("pause", pub2)
    try:
        time.sleep(1)
        nd = c.kill("nsqd2")
    finally:
        c.pm("unpause", pub2)
    log("publisher2 was paused for the kill; it dials nsqd2 again meanwhile")
    time.sleep(2)
    c.restart("nsqd2", *nd)
    took = c.wait_healthy(["nsqd2"], 60)
    log(f"nsqd2 healthy again after {took:.1f}s")
    c.restart("lookupd1", *lk)
    took = c.wait_healthy(["lookupd1"], 60)
    log(f"lookupd1 healthy again after {took:.1f}s")
    kills_done = time.monotonic() - t_pub

    # The publishers' totals (answered OK) once they exit.
    names = c.containers()
    deadline = args.events / args.rate + 180
    for p in PUBLISHERS:
        code = c.pm("wait", names[p], timeout=deadline).strip()
        if code != "0":
            failures.append(f"{p} exited {code}: {c.pm('logs', names[p])[-2000:]}")
    published = 0
    reconnects = 0
    for p in PUBLISHERS:
        out = c.run([*c.podman, "logs", names[p]], 30, merge=True)
        m = re.search(r"published (\d+) events to \S+ in [\d.]+s \((\d+) reconnects\)", out)
        if not m:
            failures.append(f"{p}: no total in its log: {out[-1000:]}")
            continue
        published += int(m.group(1))
        reconnects += int(m.group(2))
    pub_secs = time.monotonic() - t_pub
    figure(
        "published (answered OK)",
        f"{published} by 3 publishers in {pub_secs:.1f}s, "
        f"{reconnects} reconnects; kills done {kills_done:.1f}s after publishing began",
    )

    # Everything delivered and in the spool, then the watermark-moving event.
    def drained() -> bool:
        for n in NODES:
            ch = channel_stats(c, n)
            if ch is None or ch["depth"] or ch["in_flight_count"] or ch["deferred_count"]:
                return False
        return True

    wait_for("every node's channel empty", drained, 240, 2)
    c.exec_py("nsqd1", FLUSH)
    log("published the _flush event")

    last: dict = {}
    stable_since = time.monotonic()

    def counted() -> dict | None:
        nonlocal last, stable_since
        now = json.loads(c.exec_py("spark", COUNT_PARQUET, timeout=60))
        total = sum(v for k, v in now["kinds"].items())
        if now != last:
            last, stable_since = now, time.monotonic()
        if total >= published and time.monotonic() - stable_since >= 10:
            return now
        return None

    try:
        result = wait_for(
            "the Parquet count to reach the published total", counted, args.count_timeout, 3
        )
    except RuntimeError as e:
        failures.append(str(e))
        result = last
    kinds = result.get("kinds", {})
    total = sum(kinds.values())
    lost = max(0, published - total)
    extra = max(0, total - published)
    figure(
        "counted by the Spark job",
        f"{total} events in {result.get('rows')} (window, kind) "
        f"rows from {result.get('files')} Parquet files; per kind {dict(sorted(kinds.items()))}",
    )
    figure("lost", lost)
    figure("counted twice", extra)
    if lost or extra or kinds.get("_invalid"):
        failures.append(
            f"published {published}, counted {total} (lost {lost}, extra {extra}, "
            f"invalid {kinds.get('_invalid', 0)})"
        )

    # nsqadmin over both lookupds shows the three nodes (after the restarts).
    def admin_nodes() -> list | None:
        nodes = c.get_json("nsqadmin", "http://127.0.0.1:4171/api/nodes")["nodes"]
        return nodes if len(nodes) == 3 else None

    try:
        nodes = wait_for("nsqadmin to list 3 nodes", admin_nodes, 60, 2)
        figure("nsqadmin nodes", sorted(n["broadcast_address"] for n in nodes))
    except RuntimeError as e:
        failures.append(str(e))

    # Prometheus scrapes every daemon again (after the restarts), the alert rules loaded.
    def prometheus_up() -> list | None:
        targets = c.get_json("prometheus", "http://127.0.0.1:9090/api/v1/targets")["data"]
        active = targets["activeTargets"]
        up = [f"{t['labels']['job']}/{t['labels']['instance']}" for t in active]
        return sorted(up) if len(active) == 6 and all(t["health"] == "up" for t in active) else None

    try:
        up = wait_for("Prometheus to scrape 6 targets up", prometheus_up, 120, 3)
        figure("prometheus targets up", up)
        groups = c.get_json("prometheus", "http://127.0.0.1:9090/api/v1/rules")["data"]["groups"]
        figure("prometheus alert rules loaded", sum(len(g["rules"]) for g in groups))
    except RuntimeError as e:
        failures.append(str(e))
    for lk in ["lookupd1", "lookupd2"]:
        producers = c.get_json(lk, f"http://127.0.0.1:4161/lookup?topic={TOPIC}")["producers"]
        figure(f"{lk} lookup?topic={TOPIC}", sorted(p["broadcast_address"] for p in producers))
        if len(producers) != 3:
            failures.append(f"{lk} lists {len(producers)} producers of {TOPIC}")
    try:
        c.wait_healthy(c.with_healthcheck(), 60)
        figure("healthy at the end", "all")
    except RuntimeError as e:
        failures.append(str(e))
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--podman", default=os.environ.get("PODMAN", "podman"))
    ap.add_argument("--compose", default=os.environ.get("PODMAN_COMPOSE", "podman-compose"))
    ap.add_argument("--project", default="nsqpy-check")
    ap.add_argument("--events", type=int, default=6000, help="per publisher")
    ap.add_argument("--rate", type=float, default=100, help="events/s per publisher")
    ap.add_argument("--publish-seconds", type=float, default=300)
    ap.add_argument("--kill-after", type=float, default=15, help="s after publishing began")
    ap.add_argument("--health-timeout", type=float, default=300)
    ap.add_argument("--count-timeout", type=float, default=240)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args()
    c = Cluster(args)
    failures: list[str]

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    try:
        failures = check(c, args)
    except BaseException as e:  # noqa: BLE001 - report, show the logs, clean up
        failures = [f"{type(e).__name__}: {e}"]
    try:
        if failures:
            for svc, name in sorted(c.containers().items()):
                out = c.run([*c.podman, "logs", "--tail", "25", name], 30, check=False, merge=True)
                print(f"----- {svc} (last lines)\n{out}", flush=True)
    except BaseException as e:  # noqa: BLE001 - the logs are a courtesy; clean up anyway
        print(f"(could not show the logs: {e})", flush=True)
    finally:
        c._pump_stop.set()
        if not args.keep:
            c.down()
    figure("check run time", f"{time.monotonic() - T0:.1f}s")
    for f in failures:
        print(f"FAIL: {f}", flush=True)
    print("FAIL" if failures else "PASS", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
