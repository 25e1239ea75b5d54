"""An experiment grid (paper §6: Table 3 / Table 4 rows, Fig. 6 data sizes, Fig. 7 model sizes),
read from its YAML file and checked once.

The file names the benchmarks every cell is evaluated on, the base models, the datasets (each a
catalogue name, an ``hf:ID`` or files, with an optional curation recipe applied first), the
data sizes (training pairs, or ``all``), the seeds, and the ``train`` / ``eval`` settings shared
by every cell. Every problem is one CheemsInputError naming ``file`` and the key
(``datasets[1].curate[0]``, ``train.learning_rate``). Relative paths are resolved against the
YAML file's folder.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheems.io import read_yaml_mapping
from cheems.records import CheemsInputError, is_integer, is_number
from cheems.scoring.model_settings import ModelSettings
from cheems.settings import check_settings, settings_from_mapping
from cheems.training.config import TrainConfig

__all__ = ["ALL", "BaseModel", "CURATION_STEPS", "DatasetSpec", "Grid", "GRID_KEYS", "MAX_SEED", "SET_BY_EXPERIMENT",
           "VARIANTS", "read_grid", "train_settings"]

ALL = "all"
"""The data size that keeps every training pair of a dataset."""

CURATION_STEPS = ("debias", "filter")
"""Curation steps a dataset may name, applied in the order given: ``debias`` is
:func:`cheems.curation.debias.length_debias` (seeded by the cell's seed), ``filter`` the rule
filters of :func:`cheems.curation.filters.filter_prompts` with their default settings."""

VARIANTS = ("pretrained", "instruct")
MAX_SEED = 2**63 - 1
"""The largest seed: a signed 64-bit integer, which torch, numpy and the JSON records all take."""
GRID_KEYS = ("benchmarks", "base_models", "datasets", "data_sizes", "seeds", "train", "eval", "gpus_per_cell", "launch")
SET_BY_EXPERIMENT = ("model", "train", "output", "eval", "resume", "seed")
"""TrainConfig fields the experiment sets for each cell (``seed`` is the cell's seed, from ``seeds:``);
a ``train:`` section may not."""

_MODEL_KEYS = ("path", "name", "variant", "parameters")
_DATASET_KEYS = ("name", "path", "curate")


@dataclass(frozen=True)
class BaseModel:
    """A base model of the grid: a local folder (absolute) or a hub id, its short ``name`` (in
    cell ids), its ``variant`` and its parameter count when given."""

    path: str
    name: str
    variant: str | None = None
    parameters: int | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset of the grid: ``name`` (in cell ids; a catalogue name or ``hf:ID`` when ``files``
    is empty), its ``files`` (absolute) and its curation steps."""

    name: str
    files: tuple[str, ...] = ()
    curate: tuple[str, ...] = ()


@dataclass
class Grid:
    """An experiment grid as read and checked by :func:`read_grid`. ``benchmarks`` hold absolute
    paths of files or catalogue specs; ``train`` / ``eval`` the sections as given (checked)."""

    file: str
    benchmarks: list[str]
    base_models: list[BaseModel]
    datasets: list[DatasetSpec]
    data_sizes: list[int | str] = field(default_factory=lambda: [ALL])
    seeds: list[int] = field(default_factory=lambda: [0])
    train: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    gpus_per_cell: float | None = None
    launch: dict | None = None  # {"config": accelerate config file (absolute), "processes": int | None}

    def to_dict(self) -> dict:
        """The grid normalised: every model and dataset a mapping, paths absolute."""
        return {"benchmarks": list(self.benchmarks),
                "base_models": [dataclasses.asdict(m) for m in self.base_models],
                "datasets": [{"name": d.name, "path": list(d.files), "curate": list(d.curate)} for d in self.datasets],
                "data_sizes": list(self.data_sizes), "seeds": list(self.seeds), "train": dict(self.train),
                "eval": dict(self.eval), "gpus_per_cell": self.gpus_per_cell,
                "launch": dict(self.launch) if self.launch else None}


def train_settings(section: dict) -> dict:
    """Every TrainConfig setting a cell trains with (the section over the defaults), without the
    fields the experiment sets per cell."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)
                if f.default is not dataclasses.MISSING and f.name not in SET_BY_EXPERIMENT}
    return {**defaults, **section}


def read_grid(path: str | os.PathLike) -> Grid:
    """The grid of the YAML file ``path``, checked (see the module docstring)."""
    data = read_yaml_mapping(path, what="an experiment file")
    file, base = str(path), Path(path).resolve().parent
    for key in data:
        if key not in GRID_KEYS:
            raise CheemsInputError(f"unknown key {key!r} (known: {', '.join(GRID_KEYS)})", file=file, field=key)
    for key in ("benchmarks", "base_models", "datasets"):
        if key not in data:
            raise CheemsInputError("missing", file=file, field=key)
    return Grid(file=file,
                benchmarks=[_benchmark(b, base, file, f"benchmarks[{i}]") for i, b in
                            enumerate(_nonempty_list(data, "benchmarks", file))],
                base_models=_unique([_base_model(m, base, file, f"base_models[{i}]") for i, m in
                                     enumerate(_nonempty_list(data, "base_models", file))], file, "base_models"),
                datasets=_unique([_dataset(d, base, file, f"datasets[{i}]") for i, d in
                                  enumerate(_nonempty_list(data, "datasets", file))], file, "datasets"),
                data_sizes=_data_sizes(data.get("data_sizes", [ALL]), file),
                seeds=_seeds(data.get("seeds", [0]), file),
                train=_train_section(data.get("train") or {}, file),
                eval=_eval_section(data.get("eval") or {}, file),
                gpus_per_cell=_gpus(data.get("gpus_per_cell"), file),
                launch=_launch(data.get("launch"), base, file))


# ----------------------------------------------------------------------------- the parts

def _nonempty_list(data: dict, key: str, file: str) -> list:
    value = data[key]
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise CheemsInputError("must be a non-empty list", file=file, field=key)
    return value


def _path(text: str, base: Path) -> str:
    return str((base / Path(text).expanduser()).resolve())


def _benchmark(value: Any, base: Path, file: str, where: str) -> str:
    """A benchmark file (absolute path) or the catalogue spec it names."""
    if not isinstance(value, str) or not value.strip():
        raise CheemsInputError("must be a file or a catalogue name", file=file, field=where)
    if (base / value).exists():
        return _path(value, base)
    if _catalogue_spec(value, file, where):
        return value
    raise CheemsInputError(f"no such file ({_path(value, base)}) and no catalogue name", file=file, field=where)


def _catalogue_spec(text: str, file: str, where: str) -> bool:
    from cheems.catalog.get import parse_spec

    try:
        return parse_spec(text) is not None
    except CheemsInputError as e:
        raise CheemsInputError(e.message, file=file, field=where, remedy=e.remedy) from None


def _base_model(value: Any, base: Path, file: str, where: str) -> BaseModel:
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict):
        raise CheemsInputError("must be a model folder, a hub id or a mapping {path, name, variant, parameters}",
                               file=file, field=where)
    _known_keys(value, _MODEL_KEYS, file, where)
    text = value.get("path")
    if not isinstance(text, str) or not text.strip():
        raise CheemsInputError("must be a model folder or a hub id", file=file, field=f"{where}.path")
    local = (base / text).exists() or text.startswith((".", "/", "~"))
    path = _path(text, base) if local else text
    name = value.get("name", Path(path).name if local else text.rstrip("/").rsplit("/", 1)[-1])
    if not isinstance(name, str) or not name.strip():
        raise CheemsInputError("must be a non-empty name", file=file, field=f"{where}.name")
    variant = value.get("variant")
    if variant is not None and variant not in VARIANTS:
        raise CheemsInputError(f"must be one of {', '.join(VARIANTS)}, got {variant!r}", file=file,
                               field=f"{where}.variant")
    parameters = value.get("parameters")
    if parameters is not None and (not is_integer(parameters) or parameters <= 0):
        raise CheemsInputError(f"must be a positive integer, got {parameters!r}", file=file,
                               field=f"{where}.parameters")
    return BaseModel(path, name.strip(), variant, parameters)


def _dataset(value: Any, base: Path, file: str, where: str) -> DatasetSpec:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise CheemsInputError("must be a mapping {name, path, curate}", file=file, field=where)
    _known_keys(value, _DATASET_KEYS, file, where)
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CheemsInputError("must be a non-empty name", file=file, field=f"{where}.name")
    raw = value.get("path")
    if raw is None and not _catalogue_spec(name, file, f"{where}.name"):
        raise CheemsInputError(f"{name!r} is no catalogue name or hf:ID; give the files as path:", file=file,
                               field=f"{where}.name")
    files = [] if raw is None else [raw] if isinstance(raw, str) else raw
    if raw is not None and (not isinstance(files, list) or not files
                            or not all(isinstance(f, str) and f.strip() for f in files)):
        raise CheemsInputError("must be a file or a non-empty list of files", file=file, field=f"{where}.path")
    for k, f in enumerate(files):
        if not (base / f).is_file():
            raise CheemsInputError(f"no such file: {_path(f, base)}", file=file, field=f"{where}.path[{k}]")
    steps = value.get("curate") or []
    steps = [steps] if isinstance(steps, str) else steps
    if not isinstance(steps, list):
        raise CheemsInputError(f"must be a list of steps ({', '.join(CURATION_STEPS)})", file=file,
                               field=f"{where}.curate")
    for k, step in enumerate(steps):
        if step not in CURATION_STEPS:
            raise CheemsInputError(f"unknown curation step {step!r} (known: {', '.join(CURATION_STEPS)})",
                                   file=file, field=f"{where}.curate[{k}]")
    return DatasetSpec(name.strip(), tuple(_path(f, base) for f in files), tuple(steps))


def _known_keys(value: dict, known: tuple[str, ...], file: str, where: str) -> None:
    for key in value:
        if key not in known:
            raise CheemsInputError(f"unknown key {key!r} (known: {', '.join(known)})", file=file,
                                   field=f"{where}.{key}")


def _unique(items: list, file: str, key: str) -> list:
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.name in seen:
            raise CheemsInputError(f"the name {item.name!r} is also {key}[{seen[item.name]}]'s; give each a "
                                   "name of its own (name:)", file=file, field=f"{key}[{i}]")
        seen[item.name] = i
    return items


def _data_sizes(value: Any, file: str) -> list[int | str]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise CheemsInputError("must be a non-empty list", file=file, field="data_sizes")
    for i, v in enumerate(values):
        if v != ALL and not (is_integer(v) and v > 0):
            raise CheemsInputError(f"must be a positive number of pairs or {ALL!r}, got {v!r}", file=file,
                                   field=f"data_sizes[{i}]")
        if v in values[:i]:
            raise CheemsInputError(f"{v!r} is given twice", file=file, field=f"data_sizes[{i}]")
    return list(values)


def _seeds(value: Any, file: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise CheemsInputError("must be a non-empty list", file=file, field="seeds")
    for i, v in enumerate(values):
        if not (is_integer(v) and v >= 0):
            raise CheemsInputError(f"must be an integer >= 0, got {v!r}", file=file, field=f"seeds[{i}]")
        if v > MAX_SEED:
            raise CheemsInputError(f"must be at most 2**63 - 1 ({MAX_SEED}), got {v}", file=file, field=f"seeds[{i}]")
        if v in values[:i]:
            raise CheemsInputError(f"{v!r} is given twice", file=file, field=f"seeds[{i}]")
    return list(values)


def _train_section(section: Any, file: str) -> dict:
    """The ``train:`` section, each key checked as the TrainConfig field of that name."""
    if not isinstance(section, dict):
        raise CheemsInputError("must be a mapping of `cheems train` setting: value", file=file, field="train")
    for key in section:
        if key in SET_BY_EXPERIMENT:
            hint = " (the grid's seeds: set it)" if key == "seed" else ""
            raise CheemsInputError(f"{key!r} is set by the experiment for each cell{hint}; leave it out",
                                   file=file, field=f"train.{key}")
    placeholders = {"model": ".", "train": ["."], "output": "."}
    config = settings_from_mapping(TrainConfig, section, file=file, prefix="train.", overrides=placeholders)
    try:
        check_settings(config)
    except CheemsInputError as e:
        raise CheemsInputError(e.message, file=file, field=f"train.{e.field}", remedy=e.remedy) from None
    return {k: getattr(config, k) for k in section}


def _eval_section(section: Any, file: str) -> dict:
    """The ``eval:`` section, each key checked as the ModelSettings field of that name."""
    settings = settings_from_mapping(ModelSettings, section, file=file, prefix="eval.")
    return {k: getattr(settings, k) for k in section}


def _gpus(value: Any, file: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not is_number(value) or value < 0):
        raise CheemsInputError(f"must be a number >= 0, got {value!r}", file=file, field="gpus_per_cell")
    return value


_LAUNCH_KEYS = ("config", "processes")


def _launch(value: Any, base: Path, file: str) -> dict | None:
    """``launch: {config: ACCELERATE_CONFIG, processes: N}``: each cell trains under
    ``accelerate launch`` (several GPUs, DeepSpeed, FSDP) instead of in this process."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CheemsInputError("must be a mapping {config: FILE, processes: N}", file=file, field="launch")
    _known_keys(value, _LAUNCH_KEYS, file, "launch")
    config = value.get("config")
    if not isinstance(config, str) or not config.strip():
        raise CheemsInputError("must name an accelerate config file (configs/accelerate/)", file=file,
                               field="launch.config")
    path = _path(config, base)
    if not Path(path).is_file():
        raise CheemsInputError(f"no such file: {path}", file=file, field="launch.config")
    processes = value.get("processes")
    if processes is not None and (not is_integer(processes) or processes < 1):
        raise CheemsInputError(f"must be an integer >= 1, got {processes!r}", file=file, field="launch.processes")
    return {"config": path, "processes": processes}
