"""bench/engine.py on a small workload: every message published is delivered and FIN'd through
the V2 protocol core, and both figures come out positive (the bench is loaded from its file, as
it is run, so the nsqpy under test is the one it measures)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_engine_bench_reads_everything_it_publishes() -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "engine.py"
    spec = importlib.util.spec_from_file_location("bench_engine", path)
    assert spec is not None and spec.loader is not None
    engine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine)
    # one_run raises SystemExit when fewer messages come back than were published
    pub_ns, sub_ns = engine.one_run(messages=3000, size=50, batch=200, rdy=700)
    assert pub_ns > 0 and sub_ns > 0
