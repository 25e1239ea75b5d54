"""The cells of a grid (dataset x base model x data size x seed), their ids, and the settings
fingerprint that says whether a cell already in the folder is the cell asked for.

A cell's settings are everything that changes its result: the dataset (name, curation, the
bytes of its files), the base model, the data size, the seed, the training settings (those a
resumed run may change aside, :data:`cheems.training.output_folder.RESUMABLE_CHANGES`), the
scoring settings and the benchmarks (names and bytes). Its fingerprint is a hash of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass

from cheems.experiments.grid import BaseModel, DatasetSpec, Grid, train_settings
from cheems.records import CheemsInputError
from cheems.training.output_folder import RESUMABLE_CHANGES

__all__ = ["Cell", "cell_id", "cell_settings", "changed_settings", "grid_cells", "settings_fingerprint",
           "shared_settings"]

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
    """The settings every cell shares: training (without the settings a resumed run may change),
    scoring, and the benchmarks (name -> fingerprint of its bytes)."""
    train = {k: v for k, v in train_settings(grid.train).items() if k not in RESUMABLE_CHANGES}
    shared = {"train": train, "eval": dataclasses.asdict(grid.model_settings()),
              "benchmarks": dict(benchmark_fingerprints)}
    if grid.launch is not None:  # the processes multiply the global batch; the config file may move
        shared["launch_processes"] = grid.launch.get("processes")
    return shared


def cell_settings(cell: Cell, shared: dict, data_fingerprint: str) -> dict:
    """Everything that changes ``cell``'s result (see the module docstring); ``data_fingerprint``
    is the fingerprint of its dataset's files."""
    return {"dataset": {"name": cell.dataset.name, "curate": list(cell.dataset.curate),
                        "files": data_fingerprint},
            "base_model": cell.model.path, "data_size": cell.size, "seed": cell.seed, **shared}


def settings_fingerprint(settings: dict) -> str:
    """A hash of ``settings`` (as canonical JSON)."""
    text = json.dumps(settings, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def changed_settings(old: dict, new: dict) -> list[str]:
    """What differs between two settings records, one phrase per setting
    (``train.learning_rate 0.001 -> 0.002``; a file's bytes: ``the benchmark X changed``)."""
    a, b = _flat(old), _flat(new)
    phrases = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        if key == "dataset.files":
            phrases.append("the dataset's files changed")
        elif key.startswith("benchmarks.") and key in a and key in b:
            phrases.append(f"the benchmark {key[len('benchmarks.'):]} changed")
        elif key not in a:
            phrases.append(f"{key} added")
        elif key not in b:
            phrases.append(f"{key} left out")
        else:
            phrases.append(f"{key} {a[key]!r} -> {b[key]!r}")
    return phrases
