"""The report's study section: what `cheems report DIR` shows of an experiment folder (``DIR/results.jsonl``,
written by `cheems experiment run`).

- the tables of the paper's Tables 3 and 4 (one per base model and data size: a row per dataset, Acc. and
  Exact. per benchmark subset, Overall; mean ± 95% t-interval over seeds), the paper's published rows beside
  matching datasets when the benchmark is CheemsBench's;
- Figure 6: accuracy against the number of training pairs (log x), one line per benchmark subset, one plot
  per dataset and base model that ran at two data sizes or more;
- Figure 7: accuracy against the base model's parameters (log x), one line per subset (and per variant,
  pretrained or instruct, told apart by marker and dash when both are there), one plot per dataset and data
  size that ran on two base models or more. Where a model has no parameter count, that plot's models stand on
  an evenly spaced axis instead (counted ones by size, then the others by name), and a note says so.

The folder is read by `cheems.experiments.results` and tabled by `cheems.experiments.table` (`read_study`):
its JSON is the source's data, the same document ``cheems experiment table`` writes to
``DIR/tables/table.json``, so each number on the page points into it (``data-path``).
"""

from __future__ import annotations

from pathlib import Path

from cheems.report.page_content import DASH, Block, Cell, Figure, Report, Section, Source, Table

__all__ = ["read_study", "study_section"]


def read_study(folder: str | Path) -> dict:
    """The tables of the experiment folder ``folder`` (`cheems.experiments.table.study_tables`); a folder
    without results, or with a bad results line, is one CheemsInputError naming it (and the line)."""
    from cheems.experiments.results import read_experiment
    from cheems.experiments.table import study_tables

    return study_tables(read_experiment(folder))


def study_section(report: Report) -> Section | None:
    """The study section of every experiment folder among the report's inputs; None without one."""
    experiments = report.of_kind("experiment")
    if not experiments:
        return None
    blocks: list[Block] = []
    for s in experiments:
        blocks += _experiment_blocks(report, s, prefix=f"{s.label}: " if len(experiments) > 1 else "")
    return Section("study", report.say("study"), blocks)


def _experiment_blocks(report: Report, s: Source, prefix: str) -> list[Block]:
    say, study = report.say, s.data
    blocks: list[Block] = [say("study.note", label=s.label)]
    if study.get("paper"):
        blocks.append(say("study.paper_note", model=study["paper"]["base_model"]))
    if study.get("notes"):
        blocks.append(say("study.notes", notes="; ".join(study["notes"])))
    blocks += [_table(report, s, k, prefix) for k in range(len(study["tables"]))]
    blocks += _data_scaling_figures(report, s, prefix)
    blocks += _model_scaling_figures(report, s, prefix)
    return blocks


# ----------------------------------------------------------------------------- words

def _subset_name(report: Report, study: dict, subset: str) -> str:
    if study["cheems_benchmark"] and subset in ("open", "human"):
        return report.say(f"study.{subset}")
    return subset


def _size_text(report: Report, size: int | str) -> str:
    return report.say("study.all") if size == "all" else report.say("study.size", n=size)


def _model_text(report: Report, table: dict) -> str:
    from cheems.experiments.table import parameter_count

    facts = [_variant_text(report, table["variant"])] if table.get("variant") else []
    if table.get("parameters"):
        facts.append(parameter_count(table["parameters"]))
    return report.say("study.model", model=table["base_model"], facts=report.say("study.and").join(facts)) \
        if facts else table["base_model"]


def _variant_text(report: Report, variant: str | None) -> str:
    if variant in ("pretrained", "instruct"):
        return report.say(f"study.{variant}")
    return variant or DASH


def _slug(text: str) -> str:
    """A file-name-safe stem: ASCII letters, digits, ``-`` and ``_`` kept, ``.`` written ``_``, other characters
    as their code point (``hh-rlhf-cn``, ``0_5B``)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" if c == "." else f"u{ord(c):x}"
                   for c in str(text))[:60]


# ----------------------------------------------------------------------------- tables

def _figure_cell(s: Source, *at) -> Cell:
    """``mean ± half-width`` of the figure at ``at`` (each number with its source), the mean alone with one
    seed, `DASH` without one."""
    mean = s.num(*at, "mean")
    if mean == DASH or s.value(*at, "ci95_half_width") is None:
        return mean
    return (mean, " ± ", s.num(*at, "ci95_half_width"))


def _pairs_cell(s: Source, *at) -> Cell:
    low, high = s.value(*at, "min"), s.value(*at, "max")
    if low is None or low == high:
        return s.num(*at, "min", fmt="d")
    return (s.num(*at, "min", fmt="d"), "–", s.num(*at, "max", fmt="d"))


def _table(report: Report, s: Source, k: int, prefix: str) -> Table:
    say, study = report.say, s.data
    table = study["tables"][k]
    header = [say("study.dataset"), say("study.pairs"), say("study.seeds")]
    for column in study["columns"]:
        subset, metric = column["subset"], "acc" if column["metric"] == "accuracy" else "exact"
        header.append(say("overall") if subset is None else f"{_subset_name(report, study, subset)} {say(metric)}")
    rows = []
    for r, row in enumerate(table["rows"]):
        at = ("tables", k, "rows", r)
        paper = row["source"] == "paper"
        cells: list[Cell] = [say("study.paper_row", name=row["dataset"]) if paper else row["dataset"],
                             _pairs_cell(s, *at, "pairs"), DASH if paper else s.num(*at, "n_seeds", fmt="d")]
        for column in study["columns"]:
            where = ("overall",) if column["subset"] is None else ("subsets", column["subset"], column["metric"])
            cells.append(_figure_cell(s, *at, *where))
        rows.append(cells)
    caption = prefix + say("study.table", model=_model_text(report, table),
                           size=_size_text(report, table["data_size"]))
    return Table(header, rows, caption=caption)


# ----------------------------------------------------------------------------- figures

def _accuracy_point(x: float | None, row: dict, subset: str) -> tuple:
    figure = row["subsets"][subset]["accuracy"]
    return (x, figure["mean"], figure["ci95_half_width"])


def _data_scaling_figures(report: Report, s: Source, prefix: str) -> list[Block]:
    """Figure 6: per dataset and base model with two data sizes or more, accuracy against training pairs."""
    from cheems.report.plots import ScalingLine, draw_scaling

    say, study = report.say, s.data
    runs: dict[tuple[str, str], list[dict]] = {}
    for table in study["tables"]:
        for row in table["rows"]:
            if row["source"] == "experiment" and row["pairs"]["mean"] is not None:
                runs.setdefault((row["dataset"], table["base_model"]), []).append(row)
    blocks: list[Block] = []
    for (dataset, model), rows in runs.items():
        if len({row["pairs"]["mean"] for row in rows}) < 2:
            continue
        lines = [ScalingLine(_subset_name(report, study, subset),
                             [_accuracy_point(row["pairs"]["mean"], row, subset) for row in rows], colour=k)
                 for k, subset in enumerate(study["subsets"])]
        ticks = [(x, str(round(x))) for x in sorted({row["pairs"]["mean"] for row in rows})]
        title = prefix + say("study.data_scaling", dataset=dataset, model=model)
        axes = (say("study.pairs_axis"), say("acc"))
        blocks.append(Figure(f"fig6_{_slug(dataset)}_{_slug(model)}", title,
                             draw_scaling(title, lines, *axes, ticks=ticks),
                             texts=[title, *axes, *(line.label for line in lines), *(t for _, t in ticks)]))
    return blocks


def _model_positions(tables: list[dict]) -> tuple[dict[str, float], list[tuple[float, str]], list[str]]:
    """Where each base model stands on Figure 7's x axis: its parameter count when every model has one; else
    evenly spaced, counted models by size then the others by name. Returns the positions by model, the
    ticks, and the models without a count."""
    from cheems.experiments.table import parameter_count

    models = {t["base_model"]: t.get("parameters") for t in tables}
    unplaced = sorted(m for m, n in models.items() if not n)
    if not unplaced:
        ticks = [(float(n), parameter_count(n)) for n in sorted(set(models.values()))]
        return {m: float(n) for m, n in models.items()}, ticks, []
    order = sorted((m for m in models if models[m]), key=lambda m: (models[m], m)) + unplaced
    return {m: float(i) for i, m in enumerate(order)}, [(float(i), m) for i, m in enumerate(order)], unplaced


def _model_scaling_lines(report: Report, study: dict, members: list[tuple[dict, dict]],
                         place: dict[str, float]) -> list:
    from cheems.report.plots import ScalingLine

    variants = list(dict.fromkeys(t.get("variant") for t, _ in members))
    lines = []
    for k, subset in enumerate(study["subsets"]):
        for variant in variants:
            label = _subset_name(report, study, subset)
            if len(variants) > 1:
                label = report.say("study.line", subset=label, variant=_variant_text(report, variant))
            points = [_accuracy_point(place[t["base_model"]], row, subset) for t, row in members
                      if t.get("variant") == variant]
            lines.append(ScalingLine(label, points, colour=k, marker={"instruct": "s", None: "^"}.get(variant, "o"),
                                     dashed=variant == "instruct"))
    return lines


def _model_scaling_figures(report: Report, s: Source, prefix: str) -> list[Block]:
    """Figure 7: per dataset and data size with two base models or more, accuracy against model size."""
    from cheems.report.plots import draw_scaling

    say, study = report.say, s.data
    groups: dict[tuple[str, int | str], list[tuple[dict, dict]]] = {}
    for table in study["tables"]:
        for row in table["rows"]:
            if row["source"] == "experiment":
                groups.setdefault((row["dataset"], table["data_size"]), []).append((table, row))
    blocks: list[Block] = []
    for (dataset, size), members in groups.items():
        if len({t["base_model"] for t, _ in members}) < 2:
            continue
        place, ticks, unplaced = _model_positions([t for t, _ in members])
        lines = _model_scaling_lines(report, study, members, place)
        title = prefix + say("study.model_scaling", dataset=dataset, size=_size_text(report, size))
        axes = (say("study.models_axis") if unplaced else say("study.params_axis"), say("acc"))
        blocks.append(Figure(f"fig7_{_slug(dataset)}_{_slug(size)}", title,
                             draw_scaling(title, lines, *axes, log_x=not unplaced, ticks=ticks),
                             texts=[title, *axes, *(line.label for line in lines), *(t for _, t in ticks)]))
        if unplaced:
            blocks.append(say("study.unplaced", models=", ".join(unplaced)))
    return blocks
