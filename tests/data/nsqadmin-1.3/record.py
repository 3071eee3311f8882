"""Record Go nsqadmin 1.3's JSON API answers for tests/test_admin_compat.py.

Runs the Go binaries already on this machine (nsqlookupd, two nsqd, nsqadmin v1.3.x, found as
tests/support/gobin.py finds them: $NSQ_GO_BIN, /opt/nsq-go/bin, the PATH; nothing is fetched or
built) on loopback with ephemeral ports, builds the cluster state of
test_admin_compat.build_state, asks every request of test_admin_compat and writes each answer
to <name>.json next to this file, and the run's addresses (to normalise them) to cluster.json.

    .venv/bin/python tests/data/nsqadmin-1.3/record.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/

import test_admin_compat as compat  # noqa: E402
from support import gobin  # noqa: E402


def main() -> int:
    paths = {}
    for name in ("nsqd", "nsqlookupd", "nsqadmin"):
        path, why = gobin.find(name)
        if path is None:
            print(f"Go {name} v1.3.x not found: {why}", file=sys.stderr)
            return 1
        paths[name] = path
    s = compat.start_stack([paths["nsqd"]], [paths["nsqlookupd"]], [paths["nsqadmin"]])
    try:
        answers = compat.run_scenario(s)
        for old in HERE.glob("*.json"):
            old.unlink()
        for name, answer in answers.items():
            (HERE / f"{name}.json").write_text(json.dumps(answer, indent=1) + "\n")
        cluster = {
            "versions": {n: gobin.find(n)[1] for n in paths},
            "roles": s.roles(),
            "ports": {str(k): v for k, v in s.ports().items()},
        }
        (HERE / "cluster.json").write_text(json.dumps(cluster, indent=1) + "\n")
    finally:
        s.stop()
    print(f"{len(answers)} answers written to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
