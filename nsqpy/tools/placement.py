"""`nsqpy topic-replicas`, `nsqpy topic-reassign`, `nsqpy node-replace`: a replicated topic's
placement changes, asked of any nsqpy-d node of the cluster over its HTTP API
(``POST /topic/replicas``, ``/topic/reassign``, ``/node/replace``; docs/replication.md,
"Changing the placement").

Strategy: one blocking HTTP request per command (the node answers once the change is done:
new nodes in the ISR, the final placement written), its JSON answer printed one topic a line;
the node's error text (e.g. ``NOT_IN_SYNC``, ``INVALID_NODES``) on stderr and exit status 1.
"""

from __future__ import annotations

import http.client
import json
import sys
import urllib.parse
from typing import Any

#: Seconds the HTTP request may take beyond the wait asked of the node.
SLACK = 10.0


def request(address: str, path: str, params: dict[str, str], wait: float) -> tuple[int, Any]:
    """POST ``path?params`` (plus ``timeout_ms`` from ``wait`` seconds) to the nsqd HTTP
    ``address`` ("host:port"): (status, decoded JSON or the body's text). OSError when it
    cannot be reached."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise OSError(f"bad address {address!r} (want host:port)")
    q = urllib.parse.urlencode({**params, "timeout_ms": str(max(1, int(wait * 1000)))})
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=wait + SLACK)
    try:
        conn.request("POST", f"{path}?{q}", body=b"", headers={"Accept": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw.decode(errors="replace").strip()


def describe(rec: dict[str, Any]) -> str:
    """One line for a topic record as a placement change answers it."""
    return (
        f"topic {rec.get('topic')}: placement {','.join(rec.get('placement') or [])} "
        f"(R={rec.get('replicas')}), leader {rec.get('leader') or '-'}, "
        f"isr {','.join(rec.get('isr') or [])}, epoch {rec.get('epoch')}"
    )


def run(address: str, path: str, params: dict[str, str], wait: float) -> int:
    """Ask, print, and return the exit status (0 done, 1 refused or unreachable)."""
    try:
        status, answer = request(address, path, params, wait)
    except OSError as e:
        print(f"nsqpy: {address}{path}: {e}", file=sys.stderr)
        return 1
    if status != 200:
        text = answer.get("message", answer) if isinstance(answer, dict) else answer
        print(f"nsqpy: {path}: {status} {text}", file=sys.stderr)
        return 1
    records = answer.get("topics") if isinstance(answer, dict) and "topics" in answer else [answer]
    for rec in records or []:
        print(describe(rec))
    if not records:
        print("no topic placed on that node")
    return 0
