"""Every fenced code block of README.md and docs/**/*.md, checked against real daemons.

Each Markdown file gets its own nsqpy-lookupd and two nsqpy-d nodes registered with it, on
ephemeral loopback ports; the addresses the pages use (127.0.0.1 with 4150/4151 for the first
node, 4250/4251 for the second, 4160/4161 for the lookupd) are rewritten to those ports before a
block runs, so the check never needs the fixed ports free. Blocks run in page order, so a page
can publish in one block and consume in the next.

- ``python`` blocks run as a script (the nsqpy under test on PYTHONPATH), ``sh`` blocks under bash
  with ``set -e -o pipefail`` (the virtualenv's scripts on PATH, and ``.venv`` in the working
  directory pointing at it, so ``.venv/bin/nsqpy`` works as the pages write it). Either must
  exit 0 within BLOCK_TIMEOUT seconds.
- A ``text`` block right after a runnable block (nothing but blank lines between) is that
  block's expected output: each of its non-blank lines must appear, in order, as a whole line
  of the block's stdout; ``...`` inside a line stands for any text.
- A block whose first line is ``# not runnable: REASON``, or with ``<!-- not runnable: REASON
  -->`` on the line before its fence, is skipped and counted with its reason.
- Every block needs a language tag; other languages (``text``, ``json``, ``toml``, ...) are
  shown, not run.

The counts (run, shown, not runnable by reason) are printed per page and in total (``-s``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.daemons import ROOT

import nsqpy
from nsqpy.testing import Nsqd, Nsqlookupd

BLOCK_TIMEOUT = 90
#: Where the nsqpy this test imports lives (the checkout, or the installed compiled build), so
#: the examples and the console scripts they call run the same code.
NSQPY_HOME = Path(nsqpy.__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[^`\s]*)\s*$")
_MARK_CODE = re.compile(r"^\s*#\s*not runnable:\s*(?P<why>.+?)\s*$")
_MARK_HTML = re.compile(r"^\s*<!--\s*not runnable:\s*(?P<why>.+?)\s*-->\s*$")
_ADDR = re.compile(r"\b(?:127\.0\.0\.1|localhost):(?P<port>4150|4151|4160|4161|4250|4251)\b")


@dataclass
class Block:
    """One fenced block: where it starts (1-based line of its fence), its language, its code
    (dedented by the fence's indent), why it is not runnable (or None) and the expected output
    a following ``text`` block gives (or None)."""

    page: Path
    line: int
    lang: str
    code: str
    not_runnable: str | None = None
    output: str | None = None
    is_output: bool = False

    @property
    def kind(self) -> str | None:
        return RUNNABLE.get(self.lang.lower())

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse_blocks(page: Path, text: str) -> list[Block]:
    """The fenced blocks of one Markdown text, outputs attached to the blocks they follow."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    last_end = -10  # line index of the previous block's closing fence
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m["indent"], m["fence"], m["lang"]
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence) and set(lines[i].strip()) == {fence[0]}
        ):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        block = Block(page, start + 1, lang, "\n".join(body) + "\n")
        if (html := _MARK_HTML.match(prev)) is not None:
            block.not_runnable = html["why"]
        elif body and (mark := _MARK_CODE.match(body[0])) is not None:
            block.not_runnable = mark["why"]
        between = lines[last_end + 1 : start]
        if (
            lang == "text"
            and blocks
            and blocks[-1].kind is not None
            and all(not s.strip() for s in between)
        ):
            blocks[-1].output = block.code
            block.is_output = True
        blocks.append(block)
        last_end = i
        i += 1
    return blocks


def output_mismatch(expected: str, actual: str) -> str | None:
    """None when every non-blank expected line appears, in order, as a whole stdout line
    (``...`` matching any text); else the first expected line not found."""
    got = [line.strip() for line in actual.splitlines()]
    pos = 0
    for want in (w.strip() for w in expected.splitlines()):
        if not want:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")))
        while pos < len(got) and not pattern.fullmatch(got[pos]):
            pos += 1
        if pos == len(got):
            return want
        pos += 1
    return None


class Cluster:
    """A lookupd and two nodes registered with it, and the page addresses mapped onto them."""

    def __init__(self) -> None:
        self.lookupd = Nsqlookupd()
        reg = [f"--lookupd-tcp-address={self.lookupd.tcp_address}", "--broadcast-address=127.0.0.1"]
        self.nodes = [Nsqd(reg), Nsqd(reg)]
        one, two = self.nodes
        self.ports = {
            "4150": one.tcp_address,
            "4151": one.http_address,
            "4250": two.tcp_address,
            "4251": two.http_address,
            "4160": self.lookupd.tcp_address,
            "4161": self.lookupd.http_address,
        }

    def rewrite(self, code: str) -> str:
        return _ADDR.sub(lambda m: self.ports[m["port"]], code)

    def stop(self) -> None:
        for d in (*self.nodes, self.lookupd):
            d.stop()


def run_block(block: Block, cluster: Cluster, workdir: Path) -> str | None:
    """Run one block; None when it passed, else what went wrong."""
    code = cluster.rewrite(block.code)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(NSQPY_HOME) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    if block.kind == "python":
        script = workdir / "example.py"
        script.write_text(code)
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    # its own process group: whatever the block starts (a daemon in the background, say) ends
    # with it, and nothing outlives the test
    p = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = p.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return f"no exit within {BLOCK_TIMEOUT} s; stdout:\n{(out or '')[-2000:]}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    r = subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr)
    if r.returncode != 0:
        return f"exit {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-3000:]}"
    if block.output is not None and (missing := output_mismatch(block.output, r.stdout)):
        return f"expected output line not found: {missing!r}\nstdout:\n{r.stdout[-2000:]}"
    return None


TOTALS: Counter[str] = Counter()
REASONS: Counter[str] = Counter()


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nsqpy-docs-") as d:
        (Path(d) / ".venv").symlink_to(sys.prefix)
        yield Path(d)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples(page: Path, workdir: Path) -> None:
    blocks = parse_blocks(page, page.read_text())
    untagged = [b.where() for b in blocks if not b.lang]
    assert not untagged, f"fenced blocks without a language tag: {untagged}"
    runnable = [b for b in blocks if b.kind and not b.not_runnable]
    counts: Counter[str] = Counter(
        "output" if b.is_output else "shown" for b in blocks if b.kind is None
    )
    for b in blocks:
        if b.not_runnable:
            counts["not runnable"] += 1
            REASONS[b.not_runnable] += 1
    failures = []
    if runnable:
        cluster = Cluster()
        try:
            for b in runnable:
                error = run_block(b, cluster, workdir)
                counts["run"] += 1
                if error:
                    failures.append(f"{b.where()} ({b.lang}): {error}")
        finally:
            cluster.stop()
    TOTALS.update(counts)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no code blocks"
    print(f"\n{page.relative_to(ROOT)}: {summary}")
    assert not failures, "\n\n".join(failures)


def test_summary() -> None:
    """Runs after the pages (file order) and prints what they counted."""
    if not TOTALS:
        pytest.skip("no page was checked in this run")
    print("\nexamples: " + ", ".join(f"{k} {v}" for k, v in sorted(TOTALS.items())))
    for why, n in REASONS.most_common():
        print(f"  not runnable x{n}: {why}")


def test_parser_reads_markers_outputs_and_tags(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (
        "```sh\ncurl -s http://127.0.0.1:4151/ping\n```\n\n```text\nOK\n```\n\n"
        "<!-- not runnable: needs Spark -->\n```python\nspark.stop()\n```\n"
        "- in a list:\n\n  ```python\n  # not runnable: runs for ever\n  while True: pass\n  ```\n"
        "```\nno tag\n```\n"
    )
    blocks = parse_blocks(page, text)
    assert [b.lang for b in blocks] == ["sh", "text", "python", "python", ""]
    assert blocks[0].output == "OK\n" and blocks[1].is_output
    assert blocks[2].not_runnable == "needs Spark"
    assert blocks[3].not_runnable == "runs for ever" and blocks[3].code.startswith("# not")
    assert output_mismatch("OK\n", "OK\n") is None
    assert output_mismatch("a ... c\nd\n", "x\na b c\nd\n") is None
    assert output_mismatch("d\na\n", "a\nd\n") == "a"
