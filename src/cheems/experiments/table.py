"""The tables of an experiment in the shape of the Cheems paper's Tables 3 and 4 (`study_tables`), written as
Markdown, CSV and JSON to ``DIR/tables/`` (`write_tables`).

One table per (base model, data size) present; its rows are the datasets in the grid's order, its columns
the benchmark subsets' Acc. and Exact., then Overall (each cell's ``eval.overall``). With several seeds each
figure is the mean over the seeds with the half-width of its 95% t-interval, ``t(0.975, n-1) * s / sqrt(n)``
(`t_interval`); with one seed, the figure alone.

When the subsets are CheemsBench's (``open`` and ``human``), their columns read "Open Prompt" and "Human
Instruction" as in the paper, and a dataset whose name is one of the paper's rows (`cheems.experiments.paper`)
is followed by a row of the paper's published figures, marked ``source: "paper"`` (and "(paper)" in text).

The JSON (`study_tables`) is what the report reads as well: every figure shown on its page points into it.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from cheems.experiments.paper import CHEEMS_SUBSETS, PAPER_BASE_MODEL, PaperResult, paper_result
from cheems.experiments.results import CellResult, Experiment, group_cells
from cheems.io import atomic_open, outputs_together

__all__ = ["CONFIDENCE", "METRICS", "TABLE_FILES", "column_header", "figure_text", "is_cheems_benchmark",
           "parameter_count", "stat", "study_tables", "t_interval", "table_caption", "table_csv", "table_header",
           "table_markdown", "table_rows", "write_tables"]

CONFIDENCE = 0.95
"""The level of the t-interval over seeds."""

METRICS = {"accuracy": "Acc.", "exact_match": "Exact."}
"""The metrics of each subset shown in the tables, with their column names (as in the paper)."""

TABLE_FILES = ("table.md", "table.csv", "table.json")
"""What `write_tables` writes into ``DIR/tables/``."""


def t_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """``(mean, half-width)`` of the Student t-interval of the mean of ``values`` (one per seed): the half-width
    is ``t.ppf((1 + confidence) / 2, n - 1) * stdev(values, ddof=1) / sqrt(n)``; None with fewer than two
    values (and the mean None with none)."""
    n = len(values)
    if n == 0:
        return None, None
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    from scipy.stats import t

    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n))


def stat(values: list[Any]) -> dict:
    """A figure over seeds: ``{"mean", "ci95_half_width", "n", "values"}`` of the numbers among ``values``
    (a null one, such as the accuracy of a subset without ranked pairs, is left out)."""
    kept = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)]
    mean, half = t_interval(kept)
    return {"mean": mean, "ci95_half_width": half, "n": len(kept), "values": kept}


def is_cheems_benchmark(subsets: list[str]) -> bool:
    """Whether the benchmark is CheemsBench's: both its subsets, ``open`` and ``human``, are there."""
    return all(name in subsets for name in CHEEMS_SUBSETS)


def column_header(subset: str | None, metric: str, cheems: bool) -> str:
    """A column's title: ``Open Prompt Acc.`` for CheemsBench's subsets, ``NAME Acc.`` for others, ``Overall``."""
    if subset is None:
        return "Overall"
    name = CHEEMS_SUBSETS.get(subset, subset) if cheems else subset
    return f"{name} {METRICS[metric]}"


def _run_row(dataset: str, cells: list[CellResult], subsets: list[str]) -> dict:
    pairs = stat([c.pairs for c in cells])
    known = pairs["values"]
    pairs.update(min=min(known) if known else None, max=max(known) if known else None)
    return {"dataset": dataset, "title": dataset, "source": "experiment", "n_seeds": len(cells),
            "seeds": [c.seed for c in cells],
            "cells": [c.cell for c in cells], "pairs": pairs,
            "subsets": {s: {m: stat([c.eval["subsets"].get(s, {}).get(m) for c in cells]) for m in METRICS}
                        for s in subsets},
            "overall": stat([c.eval.get("overall") for c in cells])}


def _paper_row(paper: PaperResult, subsets: list[str]) -> dict:
    return {"dataset": paper.name, "title": paper.title, "source": "paper", "paper_table": paper.table,
            "base_model": PAPER_BASE_MODEL, "n_seeds": 0, "seeds": [], "cells": [],
            "pairs": {**stat([]), "min": None, "max": None},
            "subsets": {s: {m: stat([paper.figure(s, m)]) for m in METRICS} for s in subsets},
            "overall": stat([paper.overall])}


def _model_facts(cells: list[CellResult], model: str) -> dict:
    """The base model's path, parameter count and variant: the first of its cells that gives each."""
    mine = [c for c in cells if c.model == model]
    return {"base_model_path": mine[0].base_model,
            "parameters": next((c.parameters for c in mine if c.parameters is not None), None),
            "variant": next((c.variant for c in mine if c.variant is not None), None)}


def study_tables(experiment: Experiment) -> dict:
    """The tables of ``experiment`` as JSON (what ``DIR/tables/table.json`` holds).

    ``{"kind": "experiment", "experiment", "subsets", "cheems_benchmark", "columns": [{"subset", "metric",
    "header"}], "paper": {"base_model", "note"} or null, "tables": [{"base_model", "base_model_path",
    "parameters", "variant", "data_size", "rows": [...]}], "categories", "notes"}``; a row is ``{"dataset",
    "title", "source": "experiment" | "paper", "n_seeds", "seeds", "cells", "pairs", "subsets": {subset:
    {metric: figure}}, "overall": figure}``; a figure is `stat`'s (``pairs`` with its ``min`` and ``max``)."""
    subsets = experiment.subsets()
    cheems = is_cheems_benchmark(subsets)
    columns = [{"subset": s, "metric": m, "header": column_header(s, m, cheems)} for s in subsets for m in METRICS]
    columns.append({"subset": None, "metric": "overall", "header": column_header(None, "overall", cheems)})
    groups = group_cells(experiment.cells)
    tables = []
    for model in experiment.models():
        for size in experiment.sizes():
            rows = []
            for dataset in (d for d in experiment.datasets() if (d, model, size) in groups):
                rows.append(_run_row(dataset, groups[dataset, model, size], subsets))
                paper = paper_result(dataset) if cheems else None
                if paper is not None:
                    rows.append(_paper_row(paper, subsets))
            if rows:
                tables.append({"base_model": model, **_model_facts(experiment.cells, model), "data_size": size,
                               "rows": rows})
    paper = {"base_model": PAPER_BASE_MODEL, "note": f"Rows marked (paper): the Cheems paper's Tables 3 and 4, "
             f"reward models trained from {PAPER_BASE_MODEL} on the whole dataset"} if cheems else None
    categories = [c for cell in experiment.cells for sub in cell.eval["subsets"].values()
                  if isinstance(sub.get("categories"), dict) for c in sub["categories"]]
    return {"kind": "experiment", "experiment": str(experiment.folder), "subsets": subsets,
            "cheems_benchmark": cheems, "confidence": CONFIDENCE, "columns": columns, "paper": paper,
            "tables": tables, "categories": list(dict.fromkeys(categories)), "notes": list(experiment.notes)}


# ----------------------------------------------------------------------------- text

def figure_text(figure: dict, digits: int = 3) -> str:
    """A figure as shown: ``0.704 ± 0.012`` over several seeds, ``0.704`` alone, ``–`` without a value."""
    if figure["mean"] is None:
        return "–"
    text = f"{figure['mean']:.{digits}f}"
    return text if figure["ci95_half_width"] is None else f"{text} ± {figure['ci95_half_width']:.{digits}f}"


def _pairs_text(row: dict) -> str:
    pairs = row["pairs"]
    if pairs["mean"] is None:
        return "–"
    if pairs["min"] == pairs["max"]:
        return str(int(pairs["min"]))
    return f"{int(pairs['min'])}–{int(pairs['max'])}"


def _size_text(size: int | str) -> str:
    return "all pairs" if size == "all" else f"{size} pairs"


def table_caption(table: dict) -> str:
    """A table's title: its base model (variant, parameters where known) and data size."""
    facts = [f for f in (table.get("variant"), _parameters_text(table.get("parameters"))) if f]
    model = table["base_model"] + (f" ({', '.join(facts)})" if facts else "")
    return f"Base model {model}, data size {_size_text(table['data_size'])}"


def parameter_count(parameters: int) -> str:
    """A parameter count as read aloud: ``494M``, ``1.54B``, ``0.41M`` (a tiny test model)."""
    if parameters >= 1e9:
        return f"{parameters / 1e9:.2f}B"
    return f"{parameters / 1e6:.0f}M" if parameters >= 1e7 else f"{parameters / 1e6:.2g}M"


def _parameters_text(parameters: int | None) -> str | None:
    return None if parameters is None else f"{parameter_count(parameters)} parameters"


def table_rows(study: dict, table: dict) -> list[list[str]]:
    """The rows of ``table`` as text, under `table_header`: dataset (``(paper)`` on the paper's rows), pairs,
    seeds, then every figure (`figure_text`)."""
    rows = []
    for row in table["rows"]:
        label = row["dataset"] + (" (paper)" if row["source"] == "paper" else "")
        seeds = str(len(row["seeds"])) if row["source"] == "experiment" else "–"
        figures = [row["overall"] if c["subset"] is None else row["subsets"][c["subset"]][c["metric"]]
                   for c in study["columns"]]
        rows.append([label, _pairs_text(row), seeds, *(figure_text(f) for f in figures)])
    return rows


def table_header(study: dict) -> list[str]:
    """The column titles of every table of ``study``."""
    return ["Dataset", "Pairs", "Seeds", *(c["header"] for c in study["columns"])]


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def table_markdown(study: dict) -> str:
    """The tables as Markdown: a heading per (base model, data size), a note on the figures, the notes."""
    out = [f"# Experiment: {Path(study['experiment']).name}", "",
           f"Figures: mean ± half-width of the {study['confidence']:.0%} t-interval over seeds (the figure alone "
           "with one seed). Overall: the mean over the subsets of (Acc. + Exact.) / 2.", ""]
    if study["paper"]:
        out += [study["paper"]["note"] + ".", ""]
    for table in study["tables"]:
        header = table_header(study)
        out += [f"## {table_caption(table)}", "", "| " + " | ".join(map(_md_cell, header)) + " |",
                "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(header))) + "|"]
        out += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in table_rows(study, table)]
        out.append("")
    if study["notes"]:
        out += ["## Notes", "", *(f"- {_md_cell(n)}" for n in study["notes"]), ""]
    return "\n".join(out)


def table_csv(study: dict) -> str:
    """The tables as CSV: one line per row of every table, its base model and data size in the first columns;
    each figure's mean and the half-width of its interval (empty with one seed) in columns of their own."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    figure_columns = [h for c in study["columns"] for h in (c["header"], f"{c['header']} ±{study['confidence']:.0%}")]
    writer.writerow(["base_model", "data_size", "dataset", "source", "seeds", "pairs", *figure_columns])

    def number(x: float | None) -> str:
        return "" if x is None else repr(x)

    for table in study["tables"]:
        for row in table["rows"]:
            figures = [row["overall"] if c["subset"] is None else row["subsets"][c["subset"]][c["metric"]]
                       for c in study["columns"]]
            writer.writerow([table["base_model"], table["data_size"], row["dataset"], row["source"],
                             len(row["seeds"]), number(row["pairs"]["mean"]),
                             *(number(f[k]) for f in figures for k in ("mean", "ci95_half_width"))])
    return buffer.getvalue()


def write_tables(study: dict, folder: str | Path) -> list[Path]:
    """Write ``table.md``, ``table.csv`` and ``table.json`` of ``study`` (from `study_tables`) into ``folder``
    (``DIR/tables``); the three appear together, each whole, or none does. Returns their paths."""
    paths = [Path(folder) / name for name in TABLE_FILES]
    texts = [table_markdown(study), table_csv(study), json.dumps(study, ensure_ascii=False, indent=2) + "\n"]
    with outputs_together(*paths) as temps:
        for tmp, text in zip(temps, texts):
            with atomic_open(tmp) as f:
                f.write(text.encode("utf-8"))
    return paths
