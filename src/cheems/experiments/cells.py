"""The cells of a grid (dataset x base model x data size x seed), their ids, and the settings
fingerprint that says whether a cell already in the folder is the cell asked for.

A cell's settings are everything that changes its result: the dataset (name, curation, the
bytes of its files), the base model (its path and, for a local folder, the bytes of its files),
the data size, the seed, the training settings (those a resumed run may change aside,
:data:`cheems.training.output_folder.RESUMABLE_CHANGES`), the scoring settings, the benchmarks
(names and bytes) and, with ``launch:``, the accelerate config (its bytes) and the processes.
Its fingerprint is a hash of them.

The training and scoring settings are recorded as the grid gives them (its explicit keys), not
merged with cheems' defaults: a later cheems with one more setting plans the same fingerprints.
:func:`changed_settings` compares two records knowing the defaults, so that a record written
with every default (or without a setting that did not exist yet) still matches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from cheems.experiments.grid import BaseModel, DatasetSpec, Grid, train_settings
from cheems.io import files_fingerprint
from cheems.records import CheemsInputError
from cheems.scoring.model_settings import ModelSettings
from cheems.training.output_folder import RESUMABLE_CHANGES

__all__ = ["Cell", "base_model_fingerprint", "cell_id", "cell_settings", "changed_settings", "grid_cells",
           "setting_defaults", "settings_fingerprint", "shared_settings"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Cell:
    """One training run of the grid and its evaluation."""

    dataset: DatasetSpec
    model: BaseModel
    size: int | str
    seed: int

    @property
    def id(self) -> str:
        return cell_id(self.dataset.name, self.model.name, self.size, self.seed)


def _safe(part: str) -> str:
    return _UNSAFE.sub("-", str(part)).strip("-.") or "x"


def cell_id(dataset: str, model: str, size: int | str, seed: int) -> str:
    """``<dataset>__<model name>__<size>__s<seed>``, each part made filesystem-safe (letters,
    digits, ``.-_``; any other run of characters becomes ``-``)."""
    return f"{_safe(dataset)}__{_safe(model)}__{_safe(size)}__s{seed}"


def grid_cells(grid: Grid) -> list[Cell]:
    """Every cell of ``grid``: datasets, then base models, then sizes, then seeds (the last
    varies fastest). Two cells whose ids come out the same are one error."""
    cells = [Cell(d, m, size, seed) for d in grid.datasets for m in grid.base_models for size in grid.data_sizes
             for seed in grid.seeds]
    seen: dict[str, Cell] = {}
    for c in cells:
        if c.id in seen:
            other = seen[c.id]
            raise CheemsInputError(f"the cells of dataset {other.dataset.name!r} / model {other.model.name!r} and "
                                   f"dataset {c.dataset.name!r} / model {c.model.name!r} get one id ({c.id}); "
                                   "rename one (name:)", file=grid.file)
        seen[c.id] = c
    return cells


def shared_settings(grid: Grid, benchmark_fingerprints: dict[str, str]) -> dict:
    """The settings every cell shares: training as the grid gives it (without the settings a
    resumed run may change), scoring as the grid gives it, the benchmarks (name -> fingerprint of
    its bytes) and, with ``launch:``, the accelerate config's fingerprint and the processes (they
    decide the parallelism, the precision, the ZeRO stage; the config file's path may move)."""
    shared = {"train": {k: v for k, v in grid.train.items() if k not in RESUMABLE_CHANGES},
              "eval": dict(grid.eval), "benchmarks": dict(benchmark_fingerprints)}
    if grid.launch is not None:
        shared["launch"] = {"config": files_fingerprint([grid.launch["config"]]),
                            "processes": grid.launch.get("processes")}
    return shared


def _plain(value):
    """``value`` as JSON gives it back (tuples become lists, paths strings)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def setting_defaults() -> dict:
    """cheems' defaults of the training and scoring settings, by their key in a settings record
    (``train.learning_rate``, ``eval.batch_size``)."""
    out = {f"train.{k}": v for k, v in train_settings({}).items()}
    for f in dataclasses.fields(ModelSettings):
        if f.default is not dataclasses.MISSING:
            out[f"eval.{f.name}"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f"eval.{f.name}"] = f.default_factory()
    return _plain(out)


def base_model_fingerprint(path: str) -> str | None:
    """The fingerprint of the files of the base model folder ``path`` that affect a model
    trained from it (weights, config, tokenizer: :func:`cheems.models.checkpoints.model_fingerprint`,
    whose digests are cached by each file's size, times and inode, so an unchanged folder is
    read once); None for a hub id (no local folder)."""
    if not Path(path).is_dir():
        return None
    from cheems.models.checkpoints import model_fingerprint

    return model_fingerprint(path)


def cell_settings(cell: Cell, shared: dict, data_fingerprint: str, model_fingerprint: str | None = None) -> dict:
    """Everything that changes ``cell``'s result (see the module docstring); ``data_fingerprint``
    is the fingerprint of its dataset's files, ``model_fingerprint`` that of its base model's
    (:func:`base_model_fingerprint`)."""
    settings = {"dataset": {"name": cell.dataset.name, "curate": list(cell.dataset.curate),
                            "files": data_fingerprint},
                "base_model": cell.model.path, "data_size": cell.size, "seed": cell.seed, **shared}
    if model_fingerprint is not None:
        settings["base_model_files"] = model_fingerprint
    return settings


def settings_fingerprint(settings: dict) -> str:
    """A hash of ``settings`` (as canonical JSON)."""
    text = json.dumps(settings, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):  # an empty section holds no setting
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def changed_settings(old: dict, new: dict, defaults: dict | None = None) -> list[str]:
    """What differs between two settings records, one phrase per setting
    (``train.learning_rate 0.001 -> 0.002``; a file's bytes: ``the benchmark X changed``).

    ``defaults`` (by flat key, :func:`setting_defaults`): a setting on one side only stands for
    its default there, so it counts as changed only when the other side's value is not it."""
    a, b, defaults = _flat(_plain(old)), _flat(_plain(new)), defaults or {}
    phrases = []
    for key in sorted(set(a) | set(b)):
        if key in defaults and (key not in a or key not in b):
            before, after = a.get(key, defaults[key]), b.get(key, defaults[key])
            if before != after:
                phrases.append(f"{key} {before!r} -> {after!r} (the default is {defaults[key]!r})")
        elif a.get(key) == b.get(key) and (key in a) == (key in b):
            continue
        elif key == "dataset.files":
            phrases.append("the dataset's files changed")
        elif key == "base_model_files" and key not in a:
            continue  # recorded before the base model's files were part of a cell's settings
        elif key == "base_model_files" and key in b:
            phrases.append("the base model's files changed (its weights, config or tokenizer)")
        elif key == "launch.config" and key in a and key in b:
            phrases.append("launch.config: the accelerate config file's contents changed")
        elif key.startswith("benchmarks.") and key in a and key in b:
            phrases.append(f"the benchmark {key[len('benchmarks.'):]} changed")
        elif key not in a:
            phrases.append(f"{key} added")
        elif key not in b:
            phrases.append(f"{key} left out")
        else:
            phrases.append(f"{key} {a[key]!r} -> {b[key]!r}")
    return phrases
