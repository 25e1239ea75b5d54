"""The public calls over study grids: run_experiment, experiment_status, experiment_tables.

Running cells trains models (the ``train`` extra; Ray for ``ray_address``); the status and the
tables read the experiment folder alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

__all__ = ["experiment_status", "experiment_tables", "run_experiment"]


def run_experiment(grid: str | os.PathLike, output: str | os.PathLike, *, ray_address: str | None = None,
                   progress: Callable | None = None, notify: Callable[[str], None] | None = None) -> dict:
    """Train and evaluate every cell of an experiment grid (datasets x base models x data sizes x seeds).

    Finished cells are skipped, an interrupted one resumes from its last checkpoint, and the
    cells of a grown grid are added (:func:`cheems.experiments.run_experiment`).

    Args:
        grid: The experiment YAML: benchmarks, base_models, datasets, data_sizes, seeds, train, eval.
        output: The experiment folder; a later run with the same folder resumes it.
        ray_address: Run every cell at once as a Ray task of its own: ``auto`` (the running
            cluster), an address, or ``local`` (a new local instance). None: one after another here.
        progress: ``progress(p)`` with a :class:`~cheems.experiments.CellProgress` as cells start,
            train and finish.
        notify: Gets the warnings of the cells' training.

    Returns:
        ``cells`` (all), ``ran`` (now), ``already`` (finished before) and ``results`` (the results file).

    Raises:
        CheemsInputError: A grid file that cannot be read or checked, a folder of another grid, or a
            cell whose data or model cannot be read.

    Paper: §6.1 (Table 3: datasets compared), §6.3 (Table 4: construction ablation), §6.4 (scaling).
    """
    from cheems.experiments import read_grid, run_experiment as run_cells

    return run_cells(read_grid(grid), output, ray_address=ray_address, progress=progress, notify=notify)


def experiment_status(folder: str | os.PathLike) -> dict:
    """Say where an experiment folder stands: cells done and left, checkpoints, each cell's Overall.

    Args:
        folder: The experiment folder (the ``output`` of :func:`run_experiment`).

    Returns:
        ``folder``, ``cells`` (per cell: ``cell``, ``state``, ``pairs``, ``overall``, ``checkpoint``),
        ``done``, ``left`` and ``notes``.

    Raises:
        CheemsInputError: A folder that is no experiment folder, or a file of it that cannot be read.
    """
    from cheems.experiments import experiment_status as status_of

    return status_of(folder)


def experiment_tables(folder: str | os.PathLike) -> tuple[dict, list[Path]]:
    """Tabulate an experiment in the shape of the paper's Tables 3 and 4, and write the tables beside it.

    One table per base model and data size, a row per dataset, Acc. and Exact. per benchmark
    subset and Overall (mean and 95% t-interval over seeds), the paper's figures beside matching
    datasets; written to ``FOLDER/tables/`` as ``table.md``, ``table.csv`` and ``table.json``.

    Args:
        folder: The experiment folder (the ``output`` of :func:`run_experiment`).

    Returns:
        ``(study, written)``: the tables as JSON (what ``table.json`` holds) and the paths written.

    Raises:
        CheemsInputError: A folder without finished cells, or a results line that cannot be read.

    Paper: §6.1 (Table 3: preference datasets compared) and §6.3 (Table 4: dataset construction ablation).
    """
    from cheems.experiments.results import read_experiment
    from cheems.experiments.table import study_tables, write_tables

    study = study_tables(read_experiment(folder))
    return study, write_tables(study, Path(folder) / "tables")
