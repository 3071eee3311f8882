"""internal/daemon.exit_after_stop in a child interpreter: the exit code, atexit's handlers and
buffered standard streams come out as with sys.exit, and a non-daemon thread still running is
waited for (the ordinary exit) instead of being cut off."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = "from nsqpy.internal.daemon import exit_after_stop\n" + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_code_exit_handlers_and_buffered_output() -> None:
    r = _run(
        """
        import atexit, logging, sys
        logging.basicConfig(stream=sys.stderr, format="%(message)s")
        atexit.register(lambda: sys.stdout.write("from atexit"))
        sys.stdout.write("buffered, no newline ")
        logging.getLogger("x").warning("logged")
        exit_after_stop(3)
        sys.stdout.write("never")
        """
    )
    assert r.returncode == 3
    assert r.stdout == "buffered, no newline from atexit"
    assert r.stderr == "logged\n"


def test_waits_for_a_running_non_daemon_thread() -> None:
    r = _run(
        """
        import sys, threading, time
        def late():
            time.sleep(1)  # still running when exit begins (os._exit would cut it off)
            sys.stdout.write("thread finished")
        threading.Thread(target=late).start()
        exit_after_stop(0)
        """
    )
    assert r.returncode == 0
    assert r.stdout == "thread finished"
