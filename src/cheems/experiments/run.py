"""Run an experiment grid: every unfinished cell prepared, trained, evaluated and recorded.

Each cell is the recipe of :mod:`cheems.experiments.cell_recipe` (prepare, train, evaluate),
run in this process or as a Ray task (:mod:`cheems.experiments.ray_cells`); its results line is
appended to results.jsonl and pushed to disk as it finishes: then the cell is finished.

A run of a folder that already holds cells plans the grid again: finished cells (a results line)
are skipped, an interrupted one resumes, new cells of a grown grid are added. A cell that
exists with other settings (another fingerprint), or settings shared by every cell that changed,
are refused naming what changed: the new grid belongs in another folder.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cheems.experiments.cells import (cell_settings, changed_settings, grid_cells, settings_fingerprint,
                                      shared_settings)
from cheems.experiments.cell_recipe import CellPlan, run_cell
from cheems.experiments.folder import (RESULTS_FILE, append_result, cell_folder, read_cell_record,
                                       read_experiment_record, read_results, write_experiment_record)
from cheems.experiments.grid import Grid
from cheems.experiments.prepare import benchmark_files, benchmark_names, dataset_files
from cheems.io import check_output_folder, files_fingerprint
from cheems.records import CheemsInputError

__all__ = ["CellProgress", "plan_cells", "run_experiment"]

Notify = Callable[[str], None]


@dataclass
class CellProgress:
    """Where a run stands: cell ``index`` (0-based) of ``cells``, ``done`` cells finished, the
    current cell's ``stage`` (prepare, train, evaluate, done) and its training ``step`` of
    ``steps`` (0 of 0 outside training, or when the cell runs where steps cannot be followed)."""

    cell: str
    index: int
    cells: int
    done: int
    stage: str
    step: int = 0
    steps: int = 0


Progress = Callable[[CellProgress], None]


def plan_cells(grid: Grid, out_dir: str | os.PathLike, notify: Notify | None = None) -> tuple[list[CellPlan], dict]:
    """``(the plan of every cell of grid, the settings every cell shares)``: catalogue names
    resolved to files, the files fingerprinted once."""
    out_dir = Path(out_dir).resolve()
    benchmarks = benchmark_files(grid, notify)
    shared = shared_settings(grid, benchmark_names(grid, benchmarks))
    files = {d.name: dataset_files(d, notify) for d in grid.datasets}
    fingerprints = {name: files_fingerprint(f) for name, f in files.items()}
    plans = []
    for c in grid_cells(grid):
        settings = cell_settings(c, shared, fingerprints[c.dataset.name])
        plans.append(CellPlan(c.id, str(cell_folder(out_dir, c.id)), c.dataset.name,
                              [str(f) for f in files[c.dataset.name]], c.dataset.curate, c.model.path, c.model.name,
                              c.model.variant, c.model.parameters, c.size, c.seed, dict(grid.train), dict(grid.eval),
                              [str(b) for b in benchmarks], settings, settings_fingerprint(settings), grid.launch))
    return plans, shared


def _refuse(what: str, changes: list[str]) -> CheemsInputError:
    return CheemsInputError(f"{what} ({'; '.join(changes)}); run the new grid with another -o folder")


def _check_folder(out_dir: Path, grid: Grid, plans: list[CellPlan], shared: dict, results: dict) -> dict:
    """The experiment record of the folder after this run's plan joined it; refuses settings every
    cell shares that changed, and cells that exist with another fingerprint."""
    record = read_experiment_record(out_dir)
    if record is not None and isinstance(record.get("settings"), dict):
        changes = changed_settings(record["settings"], shared)
        if changes:
            raise _refuse(f"{out_dir} holds an experiment run with other settings", changes)
    for plan in plans:
        old = read_cell_record(out_dir, plan.cell)
        finished = results.get(plan.cell)
        if old is not None and old.get("fingerprint") != plan.fingerprint:
            changes = changed_settings(old.get("settings") or {}, plan.settings) or ["its settings changed"]
            raise _refuse(f"cell {plan.cell} exists with other settings", changes)
        if finished is not None and finished.get("fingerprint") != plan.fingerprint:
            raise _refuse(f"cell {plan.cell} finished with other settings", ["its fingerprint changed"])
    cells = list((record or {}).get("cells") or [])
    cells += [p.cell for p in plans if p.cell not in cells]
    return {**grid.to_dict(), "file": grid.file, "settings": shared, "cells": cells}


def run_experiment(grid: Grid, out_dir: str | os.PathLike, *, ray_address: str | None = None,
                   progress: Progress | None = None, notify: Notify | None = None) -> dict:
    """Run every unfinished cell of ``grid`` into ``out_dir`` (see the module docstring), one
    after another; with ``ray_address`` ("auto", an address, or "local" for a local instance)
    each cell runs as a Ray task with ``grid.gpus_per_cell`` GPUs.

    ``progress(CellProgress)`` follows the cells and the current cell's training steps;
    ``notify(line)`` receives warnings. Returns ``cells`` (ids of this grid), ``ran`` (cells run
    now), ``already`` (cells finished before), ``results`` (the results file) and ``seconds``.
    """
    started = time.perf_counter()
    out = Path(out_dir).resolve()
    check_output_folder(out, [grid.file])
    plans, shared = plan_cells(grid, out, notify)
    results = read_results(out)
    write_experiment_record(out, _check_folder(out, grid, plans, shared, results))
    todo = [p for p in plans if p.cell not in results]
    done = len(plans) - len(todo)
    runner = _ray_runner(ray_address, grid.gpus_per_cell) if ray_address else None
    try:
        for plan in todo:
            index = plans.index(plan)
            report = _reporter(progress, plan.cell, index, len(plans), done)
            row = runner(plan, report, notify) if runner else run_cell(plan, report, notify)
            append_result(out, row)
            done += 1
            report("done")
    finally:
        if runner is not None:
            runner.close()
    return {"cells": [p.cell for p in plans], "ran": [p.cell for p in todo],
            "already": [p.cell for p in plans if p not in todo], "results": str(out / RESULTS_FILE),
            "seconds": time.perf_counter() - started}


def _reporter(progress: Progress | None, cell: str, index: int, cells: int, done: int):
    """``report(stage, step=0, steps=0)`` for one cell, sent to ``progress``."""
    def report(stage: str, step: int = 0, steps: int = 0) -> None:
        if progress is not None:
            progress(CellProgress(cell, index, cells, done + (stage == "done"), stage, step, steps))

    return report


def _ray_runner(address: str, gpus: float | None):
    from cheems.experiments.ray_cells import RayCellRunner

    return RayCellRunner(address, gpus)
