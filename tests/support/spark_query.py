"""Starting a Spark structured-streaming query in a test, past Spark's fixed start-up limit.

When a query starts, Spark launches the Python runner of a Python data source (the ``nsq``
source's offsets and planning) as a plain worker process and gives it a fixed 10 s to connect
back (``PythonWorkerFactory.createSimpleWorker``; no configuration changes it). On a loaded
machine the interpreter's start can take longer, and the query then ends with "Python worker
failed to connect back" before it has read anything. A Spark user restarts such a query from its
checkpoint; ``start_query`` does the same, and only for that error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nsqpy.testing import wait_for

#: the message of Spark's start-up failure that a restart from the checkpoint cures
CONNECT_BACK = "Python worker failed to connect back"


def start_query(start: Callable[[], Any], attempts: int = 3, timeout: float = 180) -> Any:
    """Call ``start()`` (it returns a pyspark StreamingQuery: ``df.writeStream...start()``),
    wait until the query has initialised its sources (its status leaves "Initializing
    sources"), has ended, or has failed, and return it. A query that failed with
    :data:`CONNECT_BACK` is started again, up to ``attempts`` starts in all; any other outcome,
    failure included, is returned as it is for the test to judge. ``timeout``: seconds per
    start before an AssertionError."""
    for attempt in range(1, attempts + 1):
        q = start()

        def settled(q: Any = q) -> bool:
            if q.exception() is not None or not q.isActive:
                return True
            return q.status.get("message") != "Initializing sources"

        wait_for(settled, timeout, 0.2, "the streaming query initialised its sources")
        exc = q.exception()
        if exc is None or CONNECT_BACK not in str(exc) or attempt == attempts:
            return q
    raise AssertionError("unreachable")  # pragma: no cover
