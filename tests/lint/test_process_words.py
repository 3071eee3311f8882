"""The repository speaks of the project alone: no tracked text file refers to how the work on it
was organised (numbered sessions, issues or tickets of a tracker that is not in the repository,
section signs pointing into texts that are not in it, work periods).

Upstream references are fine and allowed by a short list: CPython's bug numbers, NSQ's GitHub
issues (``nsqio/nsq #510``) and TLS session tickets. The checker, `find_process_words`, takes
one file and returns its offending lines, so a planted file can show that it fires.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support.daemons import ROOT

#: What a process reference looks like (case-insensitive).
PATTERNS = [
    re.compile(r"\bsessions?\s+\d", re.I),
    re.compile(r"\bissues?\s+#?\d", re.I),
    re.compile("\u00a7"),
    re.compile(r"\btickets?\b", re.I),
    re.compile(r"\bwork\s+periods?\b", re.I),
]

#: A line matching one of these is an upstream reference, not a process one.
ALLOW = [
    re.compile(r"\bcpython\b|\bbpo-\d", re.I),
    re.compile(r"nsqio/|github\.com/nsqio", re.I),
    re.compile(r"\btls\b.*\btickets?\b|\bsession tickets?\b", re.I),
]

#: This file names the patterns it looks for.
SELF = Path(__file__).resolve()


def find_process_words(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of each line of ``path`` naming the way the work was organised.
    Files that are not UTF-8 text (images, archives) have none."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return []
    hits = []
    for no, line in enumerate(text.splitlines(), 1):
        if any(p.search(line) for p in PATTERNS) and not any(a.search(line) for a in ALLOW):
            hits.append((no, line.strip()))
    return hits


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in out.split("\0") if name]


def test_no_process_words_in_tracked_files() -> None:
    found = []
    for path in _tracked():
        if path.resolve() == SELF or not path.is_file():
            continue
        for no, line in find_process_words(path):
            found.append(f"{path.relative_to(ROOT)}:{no}: {line[:160]}")
    assert not found, "process references:\n" + "\n".join(found)


def test_checker_fires_on_a_planted_reference(tmp_path: Path) -> None:
    planted = tmp_path / "notes.md"
    words = ["Ses" + "sion 4 measured this", "see is" + "sue 12", "as in \u00a73", "tic" + "ket"]
    planted.write_text("a clean line\n" + "\n".join(words) + "\n")
    assert [no for no, _ in find_process_words(planted)] == [2, 3, 4, 5]


def test_checker_lets_upstream_references_through(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream.py"
    upstream.write_text(
        "# Python 3.11's wait_for can swallow a cancel (CPython issue 86296)\n"
        "# NSQ's answer to a lost node: nsqio/nsq issue 510\n"
        "# records produced while reading (TLS 1.3 tickets)\n"
    )
    assert find_process_words(upstream) == []
