"""One cell of an experiment, start to end: a recipe of four steps, each resumable.

    prepare   cells/<id>/data/train.jsonl (skipped when cell.json says it was made with these settings)
    train     cheems.training.trainer.train into cells/<id>/model (resume: from its last checkpoint)
    evaluate  the final model on every benchmark -> eval.json + eval.items.jsonl (written together),
              on the GPU when the grid's eval: names no device and torch sees one
    record    the results line (the caller appends it to results.jsonl: then the cell is finished)

`CellPlan` holds everything a cell needs in plain values, so that it can run in this process or
travel to a Ray worker (:mod:`cheems.experiments.ray_cells`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cheems.experiments.folder import (DATA_FILE, EVAL_FILE, EVAL_ITEMS_FILE, MODEL_DIR, read_cell_record,
                                       write_cell_record)
from cheems.experiments.prepare import prepare_cell_data
from cheems.io import files_fingerprint

__all__ = ["CellPlan", "LAUNCH_LOG", "LAUNCH_TRAIN_CONFIG", "cell_model_settings", "count_parameters", "run_cell"]

Notify = Callable[[str], None]

LAUNCH_TRAIN_CONFIG = "train.yaml"
"""The cell's `cheems train --config` file when it trains under ``accelerate launch``."""
LAUNCH_LOG = "train.log"
"""What the launched training printed, appended run after run."""


@dataclass(frozen=True)
class CellPlan:
    """Everything one cell needs to run, in plain values (it travels to a Ray worker)."""

    cell: str
    folder: str  # absolute
    dataset: str
    files: list[str]
    curate: tuple[str, ...]
    base_model: str
    base_model_name: str
    variant: str | None
    parameters: int | None
    size: int | str
    seed: int
    train: dict  # the grid's train section
    eval: dict  # the grid's eval section
    benchmarks: list[str]
    settings: dict = field(repr=False)
    fingerprint: str = ""
    launch: dict | None = None  # train under `accelerate launch` (the grid's launch section)


def run_cell(plan: CellPlan, report: Callable[..., None] | None = None, notify: Notify | None = None) -> dict:
    """Prepare, train and evaluate one cell (each step resumable); return its results line.
    ``report(stage, step, steps)`` follows it."""
    report = report or (lambda *a, **k: None)
    folder = Path(plan.folder)
    report("prepare")
    pairs = _prepared(plan, folder, notify)
    report("train")
    summary = _train(plan, folder, report, notify)
    report("evaluate")
    evaluation = _evaluate(plan, folder)
    return {"cell": plan.cell, "folder": f"cells/{plan.cell}", "dataset": plan.dataset,
            "base_model": plan.base_model, "base_model_name": plan.base_model_name,
            "parameters": plan.parameters or count_parameters(folder / MODEL_DIR), "variant": plan.variant,
            "data_size": plan.size, "pairs": summary.get("pairs", pairs), "seed": plan.seed,
            "fingerprint": plan.fingerprint, "eval": evaluation,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _prepared(plan: CellPlan, folder: Path, notify: Notify | None) -> int:
    """The cell's training pairs, its data prepared unless cell.json says it already was."""
    record = read_cell_record(folder.parent.parent, plan.cell)
    data = folder / DATA_FILE
    if record is not None and record.get("fingerprint") == plan.fingerprint and data.is_file() \
            and isinstance(record.get("sampled_pairs"), int):
        if notify is not None:
            notify(f"note: cell {plan.cell}: its training data was prepared by an earlier run with these settings; "
                   "reused")
        return record["sampled_pairs"]
    pairs = prepare_cell_data([Path(f) for f in plan.files], plan.curate, plan.size, plan.seed, data,
                              skip_invalid=bool(plan.train.get("skip_invalid")), notify=notify)
    write_cell_record(folder.parent.parent, plan.cell,
                      {"cell": plan.cell, "dataset": plan.dataset, "base_model": plan.base_model,
                       "base_model_name": plan.base_model_name, "data_size": plan.size, "seed": plan.seed,
                       "sampled_pairs": pairs, "data_fingerprint": files_fingerprint([data]),
                       "fingerprint": plan.fingerprint, "settings": plan.settings})
    return pairs


def _train(plan: CellPlan, folder: Path, report: Callable[..., None], notify: Notify | None) -> dict:
    from cheems.training.config import TrainConfig
    from cheems.training.output_folder import SUMMARY_FILE, list_checkpoints
    from cheems.training.trainer import train

    output = folder / MODEL_DIR
    checkpoints = list_checkpoints(output) if output.is_dir() else []
    resume = bool(checkpoints) or (output / SUMMARY_FILE).exists()
    if resume and notify is not None:
        where = "its finished model" if (output / SUMMARY_FILE).exists() else checkpoints[-1][1].name
        notify(f"note: cell {plan.cell}: training resumes from {where} (an earlier run stopped before recording "
               "the cell)")
    fields = dict(model=plan.base_model, train=[str(folder / DATA_FILE)], output=str(output), eval=[],
                  resume=resume, seed=plan.seed, **plan.train)
    if plan.launch is not None:
        return _train_launched(plan, folder, fields)
    config = TrainConfig(**fields)
    return train(config, progress=lambda step, total, stats: report("train", step, total), notify=notify)


def _train_launched(plan: CellPlan, folder: Path, fields: dict) -> dict:
    """The cell's training as ``accelerate launch --config_file C [--num_processes N] -m
    cheems.cli train --config cells/<id>/train.yaml``, its output appended to
    ``cells/<id>/train.log``; the trainer's summary file is its result."""
    import json
    import subprocess
    import sys

    import yaml

    from cheems.io import atomic_open
    from cheems.records import CheemsInputError
    from cheems.training.output_folder import SUMMARY_FILE

    config_file, log_file = folder / LAUNCH_TRAIN_CONFIG, folder / LAUNCH_LOG
    with atomic_open(config_file) as f:
        f.write(yaml.safe_dump(fields, allow_unicode=True, sort_keys=True).encode("utf-8"))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", plan.launch["config"]]
    if plan.launch.get("processes"):
        command += ["--num_processes", str(plan.launch["processes"])]
    command += ["-m", "cheems.cli", "train", "--config", str(config_file)]
    with open(log_file, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder).returncode
    if code != 0:
        lines = [line for line in log_file.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if line.startswith("error:")), lines[-1] if lines else "")
        raise CheemsInputError(f"cell {plan.cell}: training under accelerate launch exited {code}: {last.strip()} "
                               f"(the whole output: {log_file})")
    return json.loads((Path(fields["output"]) / SUMMARY_FILE).read_text(encoding="utf-8"))


def _evaluate(plan: CellPlan, folder: Path) -> dict:
    """The eval report of the cell's final model on every benchmark, written with its items."""
    from cheems.io import outputs_together, write_json, write_jsonl
    from cheems.scoring.evaluate import evaluate_benchmark

    result = evaluate_benchmark(plan.benchmarks, model=str(folder / MODEL_DIR),
                                model_settings=cell_model_settings(plan.eval), n_bootstrap=1000, seed=plan.seed)
    with outputs_together(folder / EVAL_FILE, folder / EVAL_ITEMS_FILE) as (report_tmp, items_tmp):
        write_json(report_tmp, result.report)
        write_jsonl(items_tmp, result.items)
    return result.report


def cell_model_settings(section: dict):
    """The scoring settings of a cell: the grid's ``eval:`` section, and where it names no
    ``device``, "cuda" when torch sees a GPU here (where the cell runs: on a Ray worker, the
    worker's GPUs), else "cpu"."""
    from cheems.scoring.model_settings import ModelSettings

    settings = dict(section)
    if "device" not in settings:
        import torch

        settings["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    return ModelSettings(**settings)


def count_parameters(model_dir: str | os.PathLike) -> int | None:
    """The parameters of the model saved in ``model_dir``, counted from its safetensors headers
    (no weights read); None when it holds no safetensors file."""
    import json
    import struct

    total, found = 0, False
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))  # the header's length, then the JSON header
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                size = 1
                for d in info["shape"]:
                    size *= d
                total += size
        found = True
    return total if found else None

