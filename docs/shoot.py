"""Screenshots of the documentation site: docs/screenshots/site-front.png (the home page) and
docs/screenshots/site-replication.png (Replicated topics).

Builds the site with ``mkdocs build`` into a temporary directory, serves it from a local HTTP
server on 127.0.0.1 (a free port), and photographs the pages in headless Chromium through
Playwright (Debian's ``chromium``, or ``NSQPY_CHROMIUM``), as tests/e2e/test_admin_browser.py
launches it. Run from the repository root: ``python docs/shoot.py``.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "screenshots"
PAGES = {"site-front.png": "", "site-replication.png": "replication/"}
CHROMIUM = os.environ.get("NSQPY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nsqpy-site-") as site:
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", site],
            cwd=ROOT,
            check=True,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        )
        handler = functools.partial(_Quiet, directory=site)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=30_000)
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                SHOTS.mkdir(parents=True, exist_ok=True)
                for name, path in PAGES.items():
                    page.goto(base + path, wait_until="networkidle")
                    page.screenshot(path=str(SHOTS / name), full_page=False)
                    print(SHOTS / name)
                browser.close()
        finally:
            server.shutdown()


if __name__ == "__main__":
    main()
