"""Where an experiment folder stands: which cells are finished, which started (and at which
checkpoint), which wait; read from ``experiment.json``, ``results.jsonl`` and the cell folders,
never by running anything, and never writing: a results line still being written is left out
(with a note), the file is left as it is."""

from __future__ import annotations

import os
from pathlib import Path

from cheems.experiments.folder import (DATA_FILE, EXPERIMENT_FILE, MODEL_DIR, RESULTS_FILE, cell_folder,
                                       read_cell_record, read_experiment_record)
from cheems.experiments.results import read_results
from cheems.records import CheemsInputError

__all__ = ["STATES", "experiment_status"]

STATES = ("done", "evaluating", "training", "prepared", "waiting")
"""A cell's state: finished (its results line is there); trained, not yet recorded; started
training (a checkpoint or a log exists); its data prepared; nothing yet."""


def experiment_status(out_dir: str | os.PathLike) -> dict:
    """``{"folder", "cells": [per cell: cell, state, pairs, overall, checkpoint], "done", "left",
    "notes"}`` for the experiment in ``out_dir``, cells in the order runs planned them. ``checkpoint`` is
    the step of a started cell's last checkpoint (None without one); ``pairs`` the training pairs
    (used, for finished cells; sampled, for prepared ones); ``overall`` a finished cell's
    Overall; ``notes`` what the reader of results.jsonl noted (a line still being written). A
    results line that is not one is one CheemsInputError naming ``results.jsonl:LINE``."""
    from cheems.training.output_folder import LOG_FILE, SUMMARY_FILE, list_checkpoints

    out = Path(out_dir)
    if not out.is_dir():
        raise CheemsInputError("no such experiment folder", file=str(out))
    record = read_experiment_record(out)
    if record is None:
        raise CheemsInputError(f"not an experiment folder (no {EXPERIMENT_FILE}); "
                               "`cheems experiment run EXP.yaml -o DIR` makes one", file=str(out))
    notes: list[str] = []
    path = out / RESULTS_FILE
    results = {c.cell: c for c in read_results(path, notes)} if path.exists() else {}
    ids = list(record.get("cells") or []) + [c for c in results if c not in (record.get("cells") or [])]
    cells = []
    for cid in ids:
        folder, row = cell_folder(out, cid), results.get(cid)
        model = folder / MODEL_DIR
        found = list_checkpoints(model) if model.is_dir() else []
        cell_record = read_cell_record(out, cid) or {}
        if row is not None:
            state = "done"
        elif (model / SUMMARY_FILE).exists():
            state = "evaluating"
        elif found or (model / LOG_FILE).exists():
            state = "training"
        elif (folder / DATA_FILE).exists():
            state = "prepared"
        else:
            state = "waiting"
        cells.append({"cell": cid, "state": state,
                      "pairs": row.pairs if row else cell_record.get("sampled_pairs"),
                      "overall": row.eval.get("overall") if row else None,
                      "checkpoint": found[-1][0] if found else None})
    done = sum(c["state"] == "done" for c in cells)
    return {"folder": str(out), "cells": cells, "done": done, "left": len(cells) - done, "notes": notes}
