"""Run an experiment grid: every unfinished cell prepared, trained, evaluated and recorded.

Each cell is the recipe of :mod:`cheems.experiments.cell_recipe` (prepare, train, evaluate).
Without Ray the cells run in this process, in the grid's order, one after another; with Ray
every unfinished cell is a task of its own, all submitted at once
(:mod:`cheems.experiments.ray_cells`). A cell's results line is appended to results.jsonl and
pushed to disk as it finishes (with Ray: in the order the cells finish): then the cell is
finished. A last line a killed run left without its newline is cut off first.

A run of a folder that already holds cells plans the grid again: finished cells (a results line)
are skipped, an interrupted one resumes, new cells of a grown grid are added. A cell that
exists with other settings, or settings shared by every cell that changed, are refused naming
what changed: the new grid belongs in another folder. Settings are compared knowing cheems'
defaults (:func:`cheems.experiments.cells.changed_settings`): a folder recorded with every
default, or before a setting existed, matches a grid that leaves them out; its cells' records
then take the fingerprints of this version.

One run at a time works on a folder (:func:`cheems.experiments.folder.folder_lock`): a second is
refused naming the first's pid, as two would run and record the same cells.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cheems.experiments.cells import (base_model_fingerprint, cell_settings, changed_settings, grid_cells,
                                      setting_defaults, settings_fingerprint, shared_settings)
from cheems.experiments.cell_recipe import CellPlan, run_cell
from cheems.experiments.folder import (RESULTS_FILE, append_result, cell_folder, cut_unfinished_line,
                                       folder_lock, read_cell_record, read_experiment_record, write_cell_record,
                                       write_experiment_record)
from cheems.experiments.results import CellResult, read_results
from cheems.experiments.grid import Grid
from cheems.experiments.prepare import benchmark_files, benchmark_names, dataset_files
from cheems.io import check_output_folder, files_fingerprint
from cheems.records import CheemsInputError

__all__ = ["CellProgress", "plan_cells", "run_experiment"]

Notify = Callable[[str], None]


@dataclass
class CellProgress:
    """Where a run stands: cell ``index`` (0-based, in the grid) of ``cells``, ``done`` cells
    finished, the cell's ``stage`` (prepare, train, evaluate, done; with Ray: queued, done;
    skipped for a cell finished by an earlier run) and
    its training ``step`` of ``steps`` (0 of 0 outside training, or when the cell runs where
    steps cannot be followed)."""

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
    models = {m.path: base_model_fingerprint(m.path) for m in grid.base_models}
    plans = []
    for c in grid_cells(grid):
        settings = cell_settings(c, shared, fingerprints[c.dataset.name], models[c.model.path])
        plans.append(CellPlan(c.id, str(cell_folder(out_dir, c.id)), c.dataset.name,
                              [str(f) for f in files[c.dataset.name]], c.dataset.curate, c.model.path, c.model.name,
                              c.model.variant, c.model.parameters, c.size, c.seed, dict(grid.train), dict(grid.eval),
                              [str(b) for b in benchmarks], settings, settings_fingerprint(settings), grid.launch))
    return plans, shared


def _refuse(what: str, changes: list[str]) -> CheemsInputError:
    return CheemsInputError(f"{what} ({'; '.join(changes)}); run the new grid with another -o folder")


def _check_cells(out_dir: Path, plans: list[CellPlan], results: dict[str, CellResult], defaults: dict) -> list:
    """The cell records to bring to this version's fingerprint (their settings match the plan's;
    the fingerprints they had are kept, which their results lines may carry); refuses cells that
    exist, or finished, with other settings."""
    updates = []
    for plan in plans:
        old = read_cell_record(out_dir, plan.cell) or {}
        earlier = [f for f in old.get("earlier_fingerprints") or [] if isinstance(f, str)]
        accepted = {plan.fingerprint, *earlier}
        if old and old.get("fingerprint") != plan.fingerprint:
            recorded = old.get("settings")
            changes = changed_settings(recorded, plan.settings, defaults) if isinstance(recorded, dict) \
                else ["its settings are not recorded"]
            if changes:
                raise _refuse(f"cell {plan.cell} exists with other settings", changes)
            accepted.add(old.get("fingerprint"))
            updates.append((plan.cell, {**old, "fingerprint": plan.fingerprint, "settings": plan.settings,
                                        "earlier_fingerprints": [*earlier, old.get("fingerprint")]}))
        finished = results.get(plan.cell)
        if finished is not None and finished.fingerprint not in accepted:
            raise _refuse(f"cell {plan.cell} finished with other settings", ["its fingerprint changed"])
    return updates


def _check_folder(out_dir: Path, grid: Grid, plans: list[CellPlan], shared: dict,
                  results: dict[str, CellResult]) -> dict:
    """The experiment record of the folder after this run's plan joined it; refuses settings every
    cell shares that changed, and cells that exist with other settings."""
    defaults = setting_defaults()
    record = read_experiment_record(out_dir)
    if record is not None and isinstance(record.get("settings"), dict):
        changes = changed_settings(record["settings"], shared, defaults)
        if changes:
            raise _refuse(f"{out_dir} holds an experiment run with other settings", changes)
    for cell, cell_record in _check_cells(out_dir, plans, results, defaults):
        write_cell_record(out_dir, cell, cell_record)
    cells = list((record or {}).get("cells") or [])
    cells += [p.cell for p in plans if p.cell not in cells]
    return {**grid.to_dict(), "file": grid.file, "settings": shared, "cells": cells}


def _finished_cells(out: Path, notify: Notify | None) -> dict[str, CellResult]:
    """The finished cells of the folder by id, after a last line a killed run left unfinished
    was cut off (its cell runs again)."""
    path = out / RESULTS_FILE
    if cut_unfinished_line(out) and notify is not None:
        notify(f"{path}: cut off an unfinished last line (a cell a stopped run was recording); it runs again")
    notes: list[str] = []
    cells = {c.cell: c for c in read_results(path, notes)} if path.exists() else {}
    for note in notes:
        if notify is not None:
            notify(note)
    return cells


def run_experiment(grid: Grid, out_dir: str | os.PathLike, *, ray_address: str | None = None,
                   progress: Progress | None = None, notify: Notify | None = None) -> dict:
    """Run every unfinished cell of ``grid`` into ``out_dir`` (see the module docstring): one
    after another in the grid's order; with ``ray_address`` ("auto", an address, or "local" for
    a local instance) every cell at once as a Ray task with ``grid.gpus_per_cell`` GPUs.

    ``progress(CellProgress)`` follows the cells (and, without Ray, the current cell's training
    steps); ``notify(line)`` receives warnings. Returns ``cells`` (ids of this grid), ``ran``
    (cells run now), ``already`` (cells finished before), ``results`` (the results file) and
    ``seconds``.
    """
    started = time.perf_counter()
    out = Path(out_dir).resolve()
    check_output_folder(out, [grid.file])
    if ray_address:
        from cheems.scoring.ray_scoring import check_ray_address

        check_ray_address(ray_address, field="ray_address")  # before Ray, which retries a dead address for minutes
    plans, shared = plan_cells(grid, out, notify)
    with folder_lock(out):  # one run at a time on a folder: two would record each cell twice
        return _run_locked(grid, out, plans, shared, started, ray_address=ray_address, progress=progress,
                           notify=notify)


def _run_locked(grid: Grid, out: Path, plans: list[CellPlan], shared: dict, started: float, *,
                ray_address: str | None, progress: Progress | None, notify: Notify | None) -> dict:
    """:func:`run_experiment` once it holds the folder."""
    results = _finished_cells(out, notify)
    write_experiment_record(out, _check_folder(out, grid, plans, shared, results))
    todo = [p for p in plans if p.cell not in results]
    counter = _Counter(plans, len(plans) - len(todo), progress)
    for plan in plans:
        if plan.cell in results:
            counter.reporter(plan)("skipped")  # finished before: one line each

    def finished(plan: CellPlan, row: dict) -> None:
        append_result(out, row)
        counter.finished(plan)

    if ray_address:
        _run_on_ray(ray_address, grid.gpus_per_cell, todo, counter, finished, notify)
    else:
        for plan in todo:
            finished(plan, run_cell(plan, counter.reporter(plan), notify))
    return {"cells": [p.cell for p in plans], "ran": [p.cell for p in todo],
            "already": [p.cell for p in plans if p not in todo], "results": str(out / RESULTS_FILE),
            "seconds": time.perf_counter() - started}


class _Counter:
    """The cells finished so far, sent to ``progress`` as each cell moves on."""

    def __init__(self, plans: list[CellPlan], done: int, progress: Progress | None):
        self.index = {p.cell: i for i, p in enumerate(plans)}
        self.cells, self.done, self.progress = len(plans), done, progress

    def reporter(self, plan: CellPlan):
        """``report(stage, step=0, steps=0)`` for one cell."""
        def report(stage: str, step: int = 0, steps: int = 0) -> None:
            if self.progress is not None:
                self.progress(CellProgress(plan.cell, self.index[plan.cell], self.cells, self.done, stage, step,
                                           steps))

        return report

    def finished(self, plan: CellPlan) -> None:
        self.done += 1
        self.reporter(plan)("done")


def _run_on_ray(address: str, gpus: float | None, todo: list[CellPlan], counter: _Counter, finished,
                notify: Notify | None) -> None:
    from cheems.experiments.ray_cells import RayCellRunner

    if not todo:
        return
    runner = RayCellRunner(address, gpus)
    try:
        for plan in todo:
            counter.reporter(plan)("queued")
        runner.run(todo, finished, notify)
    finally:
        runner.close()
