"""Reading an experiment folder's results: ``DIR/results.jsonl`` (one line per finished cell, appended by
`cheems experiment run`) and ``DIR/experiment.json`` (the grid as read), checked once so that the tables
and the report can trust what they read.

Rules:

- every line of ``results.jsonl`` must be a JSON object with the keys of a finished cell (``cell``,
  ``dataset``, ``base_model``, ``data_size``, ``seed``, ``eval`` with its ``subsets``); a line that is not is
  one CheemsInputError naming ``results.jsonl:LINE`` and the field. No line is skipped silently;
- the one exception is a last line without its newline: a line still being written (or cut short by a
  kill) is a cell that has not finished. It is left out, with a note, and the file is left as it is (only
  `cheems experiment run` cuts such a line off, before it appends);
- a cell listed twice (run again) counts once: its last line wins, since lines are appended in the order
  cells finish, and a note names the cell and the lines;
- ``experiment.json`` is optional: without it the datasets and base models are taken in the order their
  lines come, with a note. Where it is present, its order is the order of the rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheems.experiments.folder import EXPERIMENT_FILE, RESULTS_FILE
from cheems.records import CheemsInputError, is_integer, is_number

__all__ = ["CellResult", "Experiment", "RESULTS_FILE", "GRID_FILE", "group_cells", "read_experiment",
           "read_results", "size_order"]

GRID_FILE = EXPERIMENT_FILE


@dataclass
class CellResult:
    """One finished cell: its settings, the number of training pairs it used and its evaluation report.

    ``model``: the base model's name (``base_model_name``, else ``base_model``); ``line``: its line in
    ``results.jsonl``; ``fingerprint``: the fingerprint of the settings it ran with (None if not recorded)."""

    cell: str
    dataset: str
    base_model: str
    model: str
    parameters: int | None
    variant: str | None
    data_size: int | str
    pairs: int | None
    seed: int
    eval: dict
    line: int
    fingerprint: str | None = None


@dataclass
class Experiment:
    """An experiment folder as read: its grid (``experiment.json``, ``{}`` without one), its finished cells
    (one per cell id, in the order of their last lines), and notes for the user."""

    folder: Path
    grid: dict
    cells: list[CellResult]
    notes: list[str] = field(default_factory=list)

    def datasets(self) -> list[str]:
        """The datasets with results, in the grid's order (then the order their lines come)."""
        named = [_entry_name(d) for d in _list(self.grid.get("datasets"))]
        return _ordered([c.dataset for c in self.cells], named)

    def models(self) -> list[str]:
        """The base models' names with results, in the grid's order (then the order their lines come)."""
        by_path = {c.base_model: c.model for c in self.cells}
        named = [by_path.get(_entry_name(m, "path"), _entry_name(m)) for m in _list(self.grid.get("base_models"))]
        return _ordered([c.model for c in self.cells], named)

    def sizes(self) -> list[int | str]:
        """The data sizes with results, smallest first, ``all`` last."""
        return sorted({c.data_size for c in self.cells}, key=size_order)

    def subsets(self) -> list[str]:
        """The benchmark subsets of the evaluations: CheemsBench's ``open`` and ``human`` first (the paper's
        order), then in the grid's benchmark order (file stems), then as they come."""
        stems = [Path(str(_entry_name(b, "path"))).name.split(".")[0] for b in _list(self.grid.get("benchmarks"))]
        seen = _ordered([name for c in self.cells for name in c.eval["subsets"]], stems)
        return [s for s in ("open", "human") if s in seen] + [s for s in seen if s not in ("open", "human")]


def size_order(size: int | str) -> tuple:
    """Sort key of a data size: numbers ascending, ``all`` after them."""
    return (1, 0) if size == "all" else (0, size)


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def _entry_name(entry: Any, key: str = "name") -> str | None:
    """A grid entry's name: the entry itself when it is a string, else its ``key`` (or ``name``/``path``)."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        for k in (key, "name", "path"):
            if isinstance(entry.get(k), str):
                return entry[k]
    return None


def _ordered(found: list[str], preferred: list[str | None]) -> list[str]:
    """The distinct items of ``found``: those in ``preferred`` in its order, then the rest as they come."""
    present = set(found)
    head = [p for p in dict.fromkeys(preferred) if p in present]
    return head + [f for f in dict.fromkeys(found) if f not in head]


def group_cells(cells: list[CellResult]) -> dict[tuple[str, str, int | str], list[CellResult]]:
    """The cells by (dataset, base model name, data size), each group's seeds in ascending order."""
    groups: dict[tuple[str, str, int | str], list[CellResult]] = {}
    for c in cells:
        groups.setdefault((c.dataset, c.model, c.data_size), []).append(c)
    return {key: sorted(group, key=lambda c: c.seed) for key, group in groups.items()}


# ----------------------------------------------------------------------------- checking one line

def _fail(path: Path, line: int, field_name: str, expected: str, value: Any) -> CheemsInputError:
    found = "missing" if value is None else f"{json.dumps(value, ensure_ascii=False)[:40]}"
    return CheemsInputError(f"expected {expected}, found {found}", file=str(path), line=line, field=field_name)


def _optional(record: dict, key: str, ok, expected: str, path: Path, line: int) -> Any:
    value = record.get(key)
    if value is not None and not ok(value):
        raise _fail(path, line, key, expected + " or null", value)
    return value


def _check_eval(report: Any, path: Path, line: int) -> dict:
    if not isinstance(report, dict):
        raise _fail(path, line, "eval", "the cell's evaluation report (an object)", report)
    subsets = report.get("subsets")
    if not isinstance(subsets, dict) or not subsets:
        raise _fail(path, line, "eval.subsets", "an object of benchmark subsets", subsets)
    for name, subset in subsets.items():
        if not isinstance(subset, dict):
            raise _fail(path, line, f"eval.subsets.{name}", "an object", subset)
        for metric in ("accuracy", "exact_match"):
            value = subset.get(metric)
            if value is not None and not is_number(value):
                raise _fail(path, line, f"eval.subsets.{name}.{metric}", "a number or null", value)
    overall = report.get("overall")
    if overall is not None and not is_number(overall):
        raise _fail(path, line, "eval.overall", "a number or null", overall)
    return report


def _cell_from(record: Any, path: Path, line: int) -> CellResult:
    """One line of ``results.jsonl`` checked and read; anything wrong is one error naming the line and field."""
    if not isinstance(record, dict):
        raise CheemsInputError(f"expected a JSON object (a finished cell), found a {type(record).__name__}",
                               file=str(path), line=line)
    for key in ("cell", "dataset", "base_model"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise _fail(path, line, key, "a non-empty string", record.get(key))
    size = record.get("data_size")
    if not (size == "all" or (is_integer(size) and size >= 1)):
        raise _fail(path, line, "data_size", "a positive integer or \"all\"", size)
    if not is_integer(record.get("seed")):
        raise _fail(path, line, "seed", "an integer", record.get("seed"))
    name = _optional(record, "base_model_name", lambda v: isinstance(v, str) and v, "a non-empty string", path, line)
    parameters = _optional(record, "parameters", lambda v: is_integer(v) and v >= 1, "a positive integer", path,
                           line)
    variant = _optional(record, "variant", lambda v: isinstance(v, str), "a string", path, line)
    pairs = _optional(record, "pairs", lambda v: is_integer(v) and v >= 0, "an integer", path, line)
    report = _check_eval(record.get("eval"), path, line)
    fingerprint = _optional(record, "fingerprint", lambda v: isinstance(v, str), "a string", path, line)
    return CellResult(record["cell"], record["dataset"], record["base_model"], name or record["base_model"],
                      parameters, variant, size, pairs, record["seed"], report, line, fingerprint)


# ----------------------------------------------------------------------------- the files

def read_results(path: str | Path, notes: list[str] | None = None) -> list[CellResult]:
    """The finished cells of a ``results.jsonl``: one per cell id (its last line), in the order of those
    lines. ``notes`` receives what the reader should know (a repeated cell, a last line still being written).

    A line that is not a JSON object with a finished cell's keys is one CheemsInputError naming the file,
    the line and the field (see the module's rules)."""
    path = Path(path)
    notes = notes if notes is not None else []
    if not path.exists():
        raise CheemsInputError("not found: no cell of this experiment has finished yet", file=str(path))
    lines = _read_bytes(path).split(b"\n")
    if lines[-1].strip():  # no newline after it: still being written, or cut short by a kill
        notes.append(f"{path}:{len(lines)}: the last line is incomplete (a cell still being written?); "
                     "it is left out")
    by_cell: dict[str, CellResult] = {}
    repeated: dict[str, list[int]] = {}
    for number, raw in enumerate(lines[:-1], 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise CheemsInputError("is not UTF-8 text", file=str(path), line=number) from None
        except json.JSONDecodeError as e:
            raise CheemsInputError(f"is not valid JSON: {e.msg} (column {e.colno})", file=str(path),
                                   line=number) from None
        cell = _cell_from(record, path, number)
        if cell.cell in by_cell:
            repeated.setdefault(cell.cell, [by_cell[cell.cell].line]).append(number)
            del by_cell[cell.cell]  # keep the order of last lines
        by_cell[cell.cell] = cell
    for cell_id, numbers in repeated.items():
        notes.append(f"{path}: cell {cell_id} is listed {len(numbers)} times (lines "
                     f"{', '.join(map(str, numbers))}); the last one counts")
    return list(by_cell.values())


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise CheemsInputError("is a folder, expected the results of an experiment (JSON lines)",
                               file=str(path)) from None
    except OSError as e:
        raise CheemsInputError(f"cannot read: {e.strerror or e}", file=str(path)) from None


def _read_grid(path: Path, notes: list[str]) -> dict:
    if not path.exists():
        notes.append(f"{path.parent}: no {GRID_FILE}; datasets and models are shown in the order their results "
                     "came")
        return {}
    try:
        grid = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise CheemsInputError(f"cannot read: {e}", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise CheemsInputError(f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
                               file=str(path)) from None
    if not isinstance(grid, dict):
        raise CheemsInputError(f"expected the experiment's grid (a JSON object), found a {type(grid).__name__}",
                               file=str(path))
    return grid


def read_experiment(folder: str | Path) -> Experiment:
    """The experiment folder ``folder`` (written by `cheems experiment run`): its grid and finished cells.

    A folder without ``results.jsonl``, or one whose results hold no finished cell, is one CheemsInputError
    naming it; so is a bad line (see `read_results`) or an ``experiment.json`` that is not a JSON object."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheemsInputError("is not a folder: expected an experiment folder (with results.jsonl)",
                               file=str(folder))
    notes: list[str] = []
    if not (folder / RESULTS_FILE).exists():
        raise CheemsInputError(f"has no {RESULTS_FILE}: no cell of this experiment has finished yet (run "
                               "`cheems experiment run`)", file=str(folder))
    grid = _read_grid(folder / GRID_FILE, notes)
    cells = read_results(folder / RESULTS_FILE, notes)
    if not cells:
        raise CheemsInputError("holds no finished cell yet", file=str(folder / RESULTS_FILE))
    experiment = Experiment(folder, grid, cells, notes)
    _note_missing_seeds(experiment)
    return experiment


def _note_missing_seeds(experiment: Experiment) -> None:
    """A note per group of cells with fewer seeds finished than the grid asks for."""
    seeds = [s for s in _list(experiment.grid.get("seeds")) if is_integer(s)]
    if not seeds:
        return
    for (dataset, model, size), group in group_cells(experiment.cells).items():
        done = {c.seed for c in group}
        missing = [s for s in seeds if s not in done]
        if missing:
            experiment.notes.append(f"{dataset}, {model}, {size}: {len(done)} of {len(seeds)} seeds finished "
                                    f"(not yet: {', '.join(map(str, missing))})")
