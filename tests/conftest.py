"""Shared fixtures: writing test files, running the CLI as a user would, the bundled sample."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

import pytest

CLI_TIMEOUT_S = 60
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def write_jsonl_rows(path: Path, rows: Iterable) -> Path:
    """Write rows as UTF-8 JSONL; a ``str`` row is written as-is (for broken lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def write_rows(tmp_path: Path) -> Callable[..., Path]:
    """``write_rows(rows, name="data.jsonl")`` -> path of a JSONL file in tmp_path."""

    def write(rows: Iterable, name: str = "data.jsonl") -> Path:
        return write_jsonl_rows(tmp_path / name, rows)

    return write


def kill_when(proc: subprocess.Popen, reached: Callable[[], bool], timeout: float = 30.0) -> None:
    """SIGKILL ``proc`` as soon as ``reached()`` holds; fail if it ended on its own first."""
    try:
        deadline = time.monotonic() + timeout
        while not reached() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def run_cli_in(cwd: Path | None, *args: str | Path) -> subprocess.CompletedProcess:
    """Run ``python -m cheems.cli ARGS`` in a fresh process and capture its text output."""
    return subprocess.run([sys.executable, "-m", "cheems.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, encoding="utf-8",
                          timeout=CLI_TIMEOUT_S)


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``run_cli(*args)`` runs the cheems CLI with tmp_path as working directory."""

    def run(*args: str | Path) -> subprocess.CompletedProcess:
        return run_cli_in(tmp_path, *args)

    return run


@pytest.fixture(scope="session")
def sample_annotations() -> Path:
    """Folder of the bundled sample annotations (open.jsonl and human.jsonl)."""
    folder = resources.files("cheems") / "data" / "sample" / "annotations"
    path = Path(str(folder))
    for name in ("open.jsonl", "human.jsonl"):
        assert (path / name).is_file(), f"bundled sample file missing: {path / name}"
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The optional folder of real public preference data next to the repository."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"optional data folder {SHARED_DATA} is absent")
    return SHARED_DATA
