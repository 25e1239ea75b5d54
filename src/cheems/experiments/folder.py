"""The experiment folder: what `cheems experiment run` writes and `experiment status`,
`experiment table` and `cheems report` read.

- ``experiment.json``: the grid as read (normalised), the settings every cell shares, and the
  ids of every cell any run of this folder planned, in order.
- ``cells/<cell-id>/``: ``data/train.jsonl``, ``model/`` (the `cheems train` output folder),
  ``eval.json`` and ``eval.items.jsonl``, ``cell.json`` (the cell's settings and fingerprint).
- ``.run.lock``: held (``flock``) by the one `experiment run` working on the folder, and holding
  its pid; the kernel lets go of it when that process ends, however it ends.
- ``results.jsonl``: one line per finished cell, appended and pushed to disk as each finishes;
  a cell is finished iff its line is there. :func:`cheems.experiments.results.read_results` is
  its one reader (for `experiment run`, `status`, `table` and `cheems report` alike).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

import orjson

from cheems.io import write_json
from cheems.records import CheemsInputError

__all__ = ["CELL_FILE", "CELLS_DIR", "DATA_FILE", "EVAL_FILE", "EVAL_ITEMS_FILE", "EXPERIMENT_FILE", "LOCK_FILE",
           "MODEL_DIR", "RESULTS_FILE", "append_result", "cell_folder", "cut_unfinished_line", "folder_lock",
           "read_cell_record", "read_experiment_record", "write_cell_record", "write_experiment_record"]

EXPERIMENT_FILE = "experiment.json"
RESULTS_FILE = "results.jsonl"
CELLS_DIR = "cells"
CELL_FILE = "cell.json"
DATA_FILE = "data/train.jsonl"
MODEL_DIR = "model"
EVAL_FILE = "eval.json"
EVAL_ITEMS_FILE = "eval.items.jsonl"
LOCK_FILE = ".run.lock"


def cell_folder(out_dir: str | os.PathLike, cell_id: str) -> Path:
    return Path(out_dir) / CELLS_DIR / cell_id


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, None when there is no file; a broken one is one error naming it."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheemsInputError(f"cannot read ({e}); use another -o folder", file=str(path)) from None
    if not isinstance(data, dict):
        raise CheemsInputError("not a JSON object; use another -o folder", file=str(path))
    return data


def read_experiment_record(out_dir: str | os.PathLike) -> dict | None:
    """``experiment.json`` of ``out_dir``, None before the first run."""
    return _read_json(Path(out_dir) / EXPERIMENT_FILE)


def write_experiment_record(out_dir: str | os.PathLike, record: dict) -> None:
    write_json(Path(out_dir) / EXPERIMENT_FILE, record)


def read_cell_record(out_dir: str | os.PathLike, cell_id: str) -> dict | None:
    """``cells/<id>/cell.json``, None when the cell was never started."""
    return _read_json(cell_folder(out_dir, cell_id) / CELL_FILE)


def write_cell_record(out_dir: str | os.PathLike, cell_id: str, record: dict) -> None:
    write_json(cell_folder(out_dir, cell_id) / CELL_FILE, record)


def cut_unfinished_line(out_dir: str | os.PathLike) -> bool:
    """Cut a last line of ``results.jsonl`` that has no newline (the line a killed run was
    writing: its cell is not finished) off the file; whether there was one. Only `experiment
    run` calls this, before it appends: readers leave such a line out and change nothing."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.is_file():
        return False
    try:
        with open(path, "r+b") as f:
            data = f.read()
            end = data.rfind(b"\n") + 1
            if end == len(data):
                return False
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise CheemsInputError(f"cannot repair: {e.strerror or e}", file=str(path)) from None
    return True


def append_result(out_dir: str | os.PathLike, row: dict) -> None:
    """Append one results line and push it to disk before returning."""
    path = Path(out_dir) / RESULTS_FILE
    with open(path, "ab") as f:
        f.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY))
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def folder_lock(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the experiment folder for one run: an exclusive ``flock`` on ``.run.lock`` (made
    with the folder where missing), which then holds this process's pid. A folder another
    process holds is one error naming that process. The lock goes with the process, so one a
    killed run (``kill -9``) held never blocks the next run."""
    import fcntl

    path = Path(out_dir) / LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise CheemsInputError(f"cannot make the run's lock file: {e.strerror or e}", file=str(path)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise CheemsInputError(f"another `cheems experiment run` (pid {holder}) is running on this folder; "
                                   "wait for it to end, or stop it", file=str(out_dir)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # lets go of the lock
