"""What the real-browser tests share: Debian's Chromium (Playwright cannot download browsers
here, so it is driven through ``executable_path``) and a skip that says what is missing."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

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
