"""What the real-browser tests share: Debian's Chromium (Playwright cannot download browsers
here, so it is driven through ``executable_path``) and a skip that says what is missing."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = shutil.which("chromium") or next((p for p in ("/usr/bin/chromium",) if Path(p).exists()), None)


def require_browser() -> None:
    """Skip, saying why, unless both the chromium binary and Playwright are installed."""
    reason = None
    if CHROMIUM is None:
        reason = "no chromium binary (Debian: apt-get install chromium)"
    elif importlib.util.find_spec("playwright") is None:
        reason = "playwright is not installed (pip install playwright)"
    if reason:
        print(f"skipping the browser test: {reason}")
        pytest.skip(reason)


@contextlib.contextmanager
def offline_page(html_path: Path, *, init_script: str | None = None) -> Iterator[tuple]:
    """``(page, tried, errors)``: headless Chromium showing the file ``html_path``, every URL other
    than file: and data: refused and recorded in ``tried``, script errors in ``errors`` (both
    lists stay readable after the block). ``init_script`` runs before the page's own."""
    from playwright.sync_api import sync_playwright

    tried: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "data:"))
                       else (tried.append(route.request.url), route.abort()))
            if init_script:
                page.add_init_script(init_script)
            page.goto(html_path.as_uri())
            page.wait_for_load_state("load")
            yield page, tried, errors
        finally:
            browser.close()
