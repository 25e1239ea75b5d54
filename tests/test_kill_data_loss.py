"""`kill -9` at a drawn point loses no data: `cheems data get` and `cheems experiment run` as real
processes, SIGKILLed at a point hypothesis draws, then checked and run again.

The kill points are counted in what the process leaves on disk (bytes of its output's folder,
files of its experiment folder), never in seconds: each drawn point only decides *where* the
kill lands, and no assertion depends on when it landed (a run that ended first is a point too).

- `data get`: the source folder stays byte-identical; the output is absent, the file that was
  there before, or the whole file an uninterrupted run writes; the rerun writes that file and
  leaves nothing else in the folder. An output that is the source file is refused, killed or not.
- `experiment run`: results.jsonl holds whole JSON lines, each cell at most once, each equal to
  the uninterrupted run's; the rerun (the killed run's lock is stale) finishes every cell once,
  with the uninterrupted run's results (floats within 1e-6). A second run while the first lives
  is refused in one line naming the first's pid.

Commands are forked from a warm parent (tests/warm_cheems.py) that imported torch, transformers
and datasets once; each is a process of its own, killed as a fresh one would be.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests import warm_cheems
from tests.conftest import HANG_TIMEOUT_S, run_cli_in
from tests.tiny_models import ONE_THREAD_ENV, copy_checkpoint, require_models_extra
from tests.warm_cheems import WarmParent, WarmProcess

pytest.importorskip("datasets")
require_models_extra()

# Few kill points per property, each a real run and a rerun; KILL_EXAMPLES=40 searches longer.
KILLS = settings(max_examples=int(os.environ.get("KILL_EXAMPLES", "5")), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- processes

class Commands:
    """``cheems ARGS`` forked from one warm parent, each in a folder of its own under ``root``."""

    def __init__(self, parent: WarmParent, root: Path, env: dict[str, str]):
        self.parent, self.root, self.env = parent, root, env
        self._numbers = itertools.count()

    def folder(self, name: str) -> Path:
        folder = self.root / f"{name}-{next(self._numbers)}"
        folder.mkdir()
        return folder

    def start(self, cwd: Path, *args: str | Path, log: Path) -> WarmProcess:
        """``cheems ARGS`` in ``cwd``; its stdout in ``log``, its stderr in ``log`` + ``.err``."""
        with open(log, "w") as out, open(f"{log}.err", "w") as err:
            return self.parent.process([str(a) for a in args], cwd=cwd, env=self.env, stdout=out, stderr=err)

    def run(self, cwd: Path, *args: str | Path, log: Path) -> tuple[int, str, str]:
        """``(exit status, stdout, stderr)`` of ``cheems ARGS`` run to its end."""
        status = self.start(cwd, *args, log=log).wait(HANG_TIMEOUT_S)
        return status, log.read_text(encoding="utf-8"), Path(f"{log}.err").read_text(encoding="utf-8")


def kill_once(proc: WarmProcess, reached: Callable[[], bool]) -> bool:
    """SIGKILL ``proc`` as soon as ``reached()`` holds and wait for it; False when it ended first."""
    deadline = time.monotonic() + HANG_TIMEOUT_S  # a safety net for a hung run, not a measure
    while not reached() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    ended_first = proc.poll() is not None
    proc.kill()
    proc.wait(HANG_TIMEOUT_S)
    return not ended_first


@pytest.fixture(scope="module")
def commands(tmp_path_factory) -> Commands:
    """A warm parent of this module's commands, datasets imported too, one torch thread; the
    datasets cache in a folder of this module."""
    root = tmp_path_factory.mktemp("kill")
    env = {**os.environ, **ONE_THREAD_ENV, "HF_DATASETS_CACHE": str(root / "datasets-cache")}
    with pytest.MonkeyPatch.context() as patch:  # `data get`'s slow import, done once as well
        patch.setattr(warm_cheems, "SERVER", "import datasets\n" + warm_cheems.SERVER)
        parent = WarmParent.start(root / "warm", env)
    yield Commands(parent, root, env)
    parent.stop()


def files_under(folder: Path) -> int:
    """How many files are under ``folder`` now (a folder that goes while it is walked counts as empty)."""
    return sum(len(files) for _, _, files in os.walk(folder))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (by relative path) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- data get

HUOZI_ROWS = 6000
HUOZI_FILE = "huozi_rlhf_data.json"


@pytest.fixture(scope="module")
def huozi(commands) -> Path:
    """A folder laid out like Skepsun/huozi_rlhf_data_json (one JSON array, its card), with enough
    rows that converting them takes many writes."""
    folder = commands.folder("huozi-source")
    shutil.copy(Path(__file__).parent / "fixtures" / "catalog" / "huozi" / "README.md", folder / "README.md")
    rows = [{"prompt": f"第{i}题：请解释“{'天地人'[i % 3]}”的道理。", "chosen": "这是一个详细的回答。" * (1 + i % 17),
             "reject": "不好。" * (1 + i % 5)} for i in range(HUOZI_ROWS)]
    (folder / HUOZI_FILE).write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def converted(commands, huozi) -> Path:
    """The file an uninterrupted `data get huozi` writes (checked by `cheems validate`)."""
    folder = commands.folder("get-reference")
    status, _, stderr = commands.run(folder, "data", "get", "huozi", "--source", huozi, "-o", "huozi.jsonl",
                                     log=folder.parent / "get-reference.log")
    assert status == 0, stderr
    check = run_cli_in(folder, "validate", "huozi.jsonl")
    assert check.returncode == 0 and f"{HUOZI_ROWS} valid row(s)" in check.stdout, check.stdout + check.stderr
    return folder / "huozi.jsonl"


@KILLS
@given(at=st.floats(0, 1), existing=st.booleans())
def test_data_get_killed_anywhere_changes_no_source_and_leaves_no_partial_output(commands, huozi, converted, at,
                                                                                 existing):
    """Killed once the output's folder holds ``at`` of the converted file's bytes (0: as it starts),
    writing a new file or over a file of the user's."""
    source, whole = snapshot(huozi), converted.read_bytes()
    folder = commands.folder("get")
    out = folder / "huozi.jsonl"
    before = b'{"mine": true}\n' if existing else None
    if existing:
        out.write_bytes(before)
    args = ("data", "get", "huozi", "--source", huozi, "-o", out)
    threshold = at * len(whole) + (len(before) if existing else 0)
    proc = commands.start(folder, *args, log=folder.parent / f"{folder.name}.log")
    killed = kill_once(proc, lambda: sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) >= threshold)

    assert snapshot(huozi) == source
    found = "absent" if not out.exists() else {before: "the file before", whole: "converted"}.get(
        out.read_bytes(), f"{out.stat().st_size} bytes, neither the file before nor the converted one")
    assert found in ("absent", "the file before", "converted"), found
    leftovers = {p.name for p in folder.iterdir()} - {out.name}
    event("ended before the kill" if not killed else "killed with its temp file there" if leftovers else
          f"killed with the output {found}")
    assert all(name.startswith(f".{out.name}.") for name in leftovers), leftovers  # only the dead run's temp file
    status, _, stderr = commands.run(folder, *args, log=folder.parent / f"{folder.name}.rerun.log")
    assert status == 0, stderr
    assert out.read_bytes() == whole
    assert [p.name for p in folder.iterdir()] == [out.name]  # the rerun took the temp file away
    assert snapshot(huozi) == source


@settings(KILLS, max_examples=3)
@given(wait=st.integers(0, 200))
def test_data_get_over_its_source_file_is_refused_and_the_source_kept_killed_or_not(commands, huozi, wait):
    """Killed after ``wait`` ms (where the kill lands, whatever the machine's speed) or at its end."""
    source = snapshot(huozi)
    folder = commands.folder("over-source")
    args = ("data", "get", "huozi", "--source", huozi, "-o", huozi / HUOZI_FILE)
    proc = commands.start(folder, *args, log=folder / "killed.log")
    time.sleep(wait / 1000)
    proc.kill()
    proc.wait(HANG_TIMEOUT_S)
    assert snapshot(huozi) == source
    status, stdout, stderr = commands.run(folder, *args, log=folder / "rerun.log")
    assert status == 2 and stdout == "" and len(stderr.strip().splitlines()) == 1, stderr
    assert "is also an input" in stderr and "Traceback" not in stderr
    assert snapshot(huozi) == source


# ----------------------------------------------------------------------------- experiment run

GRID = ("benchmarks: [open.jsonl]\n"
        "base_models: [tiny]\n"
        "datasets:\n"
        "  - {name: open-train, path: open.jsonl}\n"
        "data_sizes: [10, 20]\n"
        "seeds: [0]\n"
        "train: {epochs: 1, learning_rate: 1.0e-3, micro_batch_size: 4, gradient_accumulation: 1, save_every: 1}\n"
        "eval: {batch_size: 16}\n")
CELLS = ["open-train__tiny__10__s0", "open-train__tiny__20__s0"]


@pytest.fixture(scope="module")
def study(commands, sample_annotations, cli_tiny_model) -> Path:
    """The sample's open.jsonl ranked, the tiny model and grid.yaml: 2 cells of 2 and 3 steps."""
    folder = commands.folder("study")
    r = run_cli_in(folder, "rank", sample_annotations / "open.jsonl", "-o", "open.jsonl")
    assert r.returncode == 0, r.stderr
    copy_checkpoint(cli_tiny_model, folder / "tiny")
    (folder / "grid.yaml").write_text(GRID, encoding="utf-8")
    return folder


def results(out: Path) -> dict[str, dict]:
    """results.jsonl by cell, each line whole JSON and each cell once; paths into ``out`` and the
    time a cell finished left out (they differ between folders and runs)."""
    path = out / "results.jsonl"
    if not path.exists():
        return {}
    data = path.read_text(encoding="utf-8")
    assert data == "" or data.endswith("\n"), f"an unfinished last line: {data[-200:]!r}"
    rows = [json.loads(line.replace(str(out.resolve()), "OUT")) for line in data.splitlines()]
    cells = [row["cell"] for row in rows]
    assert len(cells) == len(set(cells)), f"a cell recorded twice: {cells}"
    return {row["cell"]: {k: v for k, v in row.items() if k != "finished_at"} for row in rows}


def assert_close(got, want, where: str = "") -> None:
    """``got`` equals ``want``, floats within 1e-6 (scored in other processes)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            assert_close(a, b, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-6), where
    else:
        assert got == want, where


def last_checkpoint(out: Path, cell: str) -> int | None:
    """The step of the cell's last whole checkpoint (its state file written), when its training had
    not finished; None when it has none or its final model is there."""
    model = out / "cells" / cell / "model"
    if (model / "train_summary.json").exists():
        return None
    steps = [int(d.name.removeprefix("checkpoint-")) for d in model.glob("checkpoint-*")
             if d.name.removeprefix("checkpoint-").isdigit() and (d / "trainer_state.json").is_file()]
    return max(steps, default=None)


@pytest.fixture(scope="module")
def finished(commands, study) -> tuple[dict[str, dict], int]:
    """The results of an uninterrupted run, and how many files its folder ends with."""
    status, stdout, stderr = commands.run(study, "experiment", "run", "grid.yaml", "-o", "reference",
                                          log=study / "reference.log")
    assert status == 0, stderr
    rows = results(study / "reference")
    assert list(rows) == CELLS, stdout
    return rows, files_under(study / "reference")


@KILLS
@given(at=st.floats(0, 1))
def test_experiment_run_killed_anywhere_resumes_to_the_uninterrupted_results(commands, study, finished, at):
    """Killed once its folder holds ``at`` of the files an uninterrupted run ends with (0: as it
    starts): in preparing, training, saving a checkpoint, evaluating or recording a cell."""
    reference, files = finished
    out = commands.folder("out")
    name = out.relative_to(study.parent)
    args = ("experiment", "run", "grid.yaml", "-o", f"../{name}")
    proc = commands.start(study, *args, log=out.parent / f"{name}.log")
    threshold = round(at * files)
    killed = kill_once(proc, lambda: files_under(out) >= threshold)

    recorded = results(out)
    for cell, row in recorded.items():  # what was recorded before the kill is whole and right
        assert_close(row, reference[cell], cell)
    checkpointed = {cell: step for cell in CELLS if cell not in recorded and (step := last_checkpoint(out, cell))}
    event(f"{'killed' if killed else 'ended'} with {len(recorded)} cell(s) recorded"
          + (", one mid-training" if checkpointed else ""))
    status, stdout, stderr = commands.run(study, *args, log=out.parent / f"{name}.rerun.log")
    assert status == 0, stderr
    rows = results(out)
    assert sorted(rows) == sorted(CELLS), stdout
    for cell in CELLS:
        assert_close(rows[cell], reference[cell], cell)
    for cell, step in checkpointed.items():  # the steps trained before the kill were not lost
        summary = json.loads((out / "cells" / cell / "model" / "train_summary.json").read_text(encoding="utf-8"))
        assert summary["resumed_from"] == step, (cell, summary)


def test_a_second_run_while_the_first_lives_is_refused_naming_its_pid(commands, study, finished):
    reference, _ = finished
    out = commands.folder("locked")
    name = out.relative_to(study.parent)
    args = ("experiment", "run", "grid.yaml", "-o", f"../{name}")
    log = out.parent / f"{name}.first.log"
    first = commands.start(study, *args, log=log)
    try:
        deadline = time.monotonic() + HANG_TIMEOUT_S  # a safety net, not a measure
        while f"cell 1/2 {CELLS[0]}: started" not in log.read_text(encoding="utf-8"):
            assert first.poll() is None and time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)  # holds its lock, and cannot finish while the second tries
        before = snapshot(out)
        status, stdout, stderr = commands.run(study, *args, log=out.parent / f"{name}.second.log")
        assert snapshot(out) == before  # the refused run wrote nothing
        first.send_signal(signal.SIGCONT)
        assert status == 2 and stdout == "" and len(stderr.strip().splitlines()) == 1, stderr
        assert f"another `cheems experiment run` (pid {first.pid}) is running on this folder" in stderr
        assert first.wait(HANG_TIMEOUT_S) == 0, Path(f"{log}.err").read_text(encoding="utf-8")
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait(HANG_TIMEOUT_S)
    rows = results(out)
    assert sorted(rows) == sorted(CELLS)
    for cell in CELLS:
        assert_close(rows[cell], reference[cell], cell)
