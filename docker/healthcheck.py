#!/usr/bin/env python3
"""Container health checks for the nsqpy images (installed as /usr/local/bin/nsqpy-healthcheck).

One small script, standard library only, so that every check costs one short Python start and
no curl or wget in the image. Exit 0 is healthy, 1 unhealthy (the reason on stderr), as Docker's
and podman's HEALTHCHECK read it. Each HTTP request has a 2 s timeout.

    nsqpy-healthcheck                         # GET $NSQPY_HEALTHCHECK_URL or nsqd's /ping
    nsqpy-healthcheck ping http://127.0.0.1:4161/ping
    nsqpy-healthcheck ready http://127.0.0.1:9090/-/ready   # any 200 answer (Prometheus)
    nsqpy-healthcheck spark-master            # this master answers /json/ with status ALIVE
    nsqpy-healthcheck spark-worker            # the master lists this worker (its hostname) ALIVE
    nsqpy-healthcheck spark-app NAME [PATH]   # the master runs an application NAME (and
                                              # PATH exists: a query's checkpoint metadata)

The Spark checks read the master's JSON status page ($SPARK_MASTER_WEBUI, default
http://spark-master:8080; a Spark standalone master's web UI serves /json/).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request

DEFAULT_URL = "http://127.0.0.1:4151/ping"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.read()


def master_state(url: str | None = None) -> dict:
    base = url or os.environ.get("SPARK_MASTER_WEBUI", "http://spark-master:8080")
    return json.loads(get(base.rstrip("/") + "/json/"))


def check(argv: list[str]) -> str | None:
    """None when healthy, else why not."""
    what = argv[0] if argv else "ping"
    if what == "ping":
        url = argv[1] if len(argv) > 1 else os.environ.get("NSQPY_HEALTHCHECK_URL", DEFAULT_URL)
        body = get(url)
        return None if body.strip() == b"OK" else f"{url} answered {body[:80]!r}"
    if what == "ready":
        get(argv[1])  # urlopen raises HTTPError for any answer but 2xx
        return None
    if what == "spark-master":
        state = master_state("http://127.0.0.1:8080")
        return None if state.get("status") == "ALIVE" else f"master status {state.get('status')}"
    if what == "spark-worker":
        me = {socket.gethostname(), os.environ.get("SPARK_LOCAL_HOSTNAME", "")} - {""}
        workers = master_state().get("workers", [])
        if any(w.get("host") in me and w.get("state") == "ALIVE" for w in workers):
            return None
        return (
            f"the master lists no ALIVE worker on {sorted(me)}: {[w.get('host') for w in workers]}"
        )
    if what == "spark-app":
        name = argv[1]
        apps = master_state().get("activeapps", [])
        if not any(a.get("name") == name and a.get("state") == "RUNNING" for a in apps):
            return f"no RUNNING application {name!r} on the master: {[a.get('name') for a in apps]}"
        for path in argv[2:]:
            if not os.path.exists(path):
                return f"{path} does not exist (yet)"
        return None
    return f"unknown check {what!r}"


def main() -> int:
    try:
        why = check(sys.argv[1:])
    except Exception as e:  # noqa: BLE001 - any failure to ask is "unhealthy"
        why = f"{type(e).__name__}: {e}"
    if why:
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
