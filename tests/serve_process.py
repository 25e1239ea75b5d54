"""`cheems serve` in a real process for the serving tests: started on a free loopback port,
returned once its ready line names the URL. The process is forked from a parent that imported
torch and transformers once (tests/warm_cheems.py); it is signalled, killed and waited for as a
``subprocess.Popen`` would be."""

from __future__ import annotations

import atexit
import os
import re
import tempfile
import time
from pathlib import Path

from tests.conftest import HANG_TIMEOUT_S, REPO_ROOT
from tests.tiny_models import ONE_THREAD_ENV
from tests.warm_cheems import WarmParent, WarmProcess

READY = re.compile(r"^cheems serve: ready at (http://127\.0\.0\.1:\d+)/ \(model (\S+), ")


_parent: list[WarmParent] = []


def warm_parent() -> WarmParent:
    """This test process's forking parent of `cheems` commands (tests/warm_cheems.py), started on
    first use and stopped when the process exits."""
    if not _parent or _parent[0].proc.poll() is not None:
        _parent[:] = [WarmParent.start(Path(tempfile.mkdtemp(prefix="cheems-warm-")), {**os.environ, **ONE_THREAD_ENV})]
        atexit.register(_parent[0].stop)
    return _parent[0]


def launch_serve(model: Path, log: Path, *args: str) -> tuple[WarmProcess, str, str]:
    """`cheems serve MODEL --port 0 ARGS` in a subprocess (its output in ``log``, one torch thread):
    ``(process, url, model name)`` once the ready line is printed; fails the test if it exits first."""
    with open(log, "w") as out:
        proc = warm_parent().process(["serve", str(model), "--port", "0", *args], stdout=out, cwd=REPO_ROOT,
                                     env={**os.environ, **ONE_THREAD_ENV})
    deadline = time.monotonic() + HANG_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if found := READY.match(line):
                return proc, found.group(1), found.group(2)
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"no ready line within {HANG_TIMEOUT_S}s:\n{log.read_text()}")
