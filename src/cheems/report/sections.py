"""The report page's sections: from the checked inputs of a `Report`, the paragraphs, tables (every number a `Num`
with its source) and figures of each part of the page, in page order (`page_sections`).

- evaluation: the inputs, the leaderboard in the shape of the paper's Table 2 (discriminative and generative reward
  models, Acc./Exact per subset, Overall with its CI), subsets in detail, accuracy by category (Figure 4), judge
  position consistency and the length diagnostic;
- comparisons: the pairwise significance matrix and the compare details, best-of-n curves and correlation heat maps
  (Figure 5);
- data and training: annotator bias (Figure 15), curation stage counts and training curves.

A section with nothing to show is left out. Figures are not drawn here: each holds the function that draws it
(`cheems.report.plots`), called by the renderers.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from cheems.records import is_integer, is_number
from cheems.report.page_content import DASH, Block, Cell, Figure, Report, Section, Source, Table
from cheems.report.page_inputs import compare_side

__all__ = ["COEFFICIENTS", "LOSS_KEYS", "MAX_CURATE_ROWS", "page_sections"]

MAX_CURATE_ROWS = 500
"""Most rows of one table of a curate stage report (the file has them all)."""


def page_sections(report: Report) -> list[Section]:
    """The sections of the page of ``report``'s sources, in page order; those with nothing to show left out."""
    builders = (_sources_section, _leaderboard_section, _subset_section, _category_section, _judge_section,
                _length_section, _compare_section, _bon_section, _correlate_section, _bias_section,
                _curate_section, _training_section)
    sections = []
    for build in builders:
        section = build(report)
        if section is not None and section.blocks:
            sections.append(section)
    return sections


def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def _union(lists: Iterable[Iterable[str]]) -> list[str]:
    """The distinct items of ``lists`` in the order first seen."""
    return list(dict.fromkeys(k for items in lists for k in items))


def _pair(x: Any) -> list | None:
    return x if isinstance(x, list) and len(x) == 2 and all(is_number(v) for v in x) else None


def _slug(text: str) -> str:
    """A file-name-safe stem (ASCII letters, digits, ``_``; other characters as their code point)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"u{ord(c):x}" for c in str(text))[:60]


# ----------------------------------------------------------------------------- evaluation

def _sources_section(report: Report) -> Section:
    rows = [[str(s.index), s.path.name, s.kind, s.label] for s in report.sources]
    return Section("inputs", "Inputs", [
        "Every number below links to its input: its data-src is the # of this table, its data-path the place "
        "in that file.", Table(["#", "file", "kind", "label"], rows)])


def _scorer_type(s: Source) -> str:
    scorer = s.data.get("scorer")
    if scorer in ("discriminative", "generative"):
        return scorer
    return "generative" if "position_consistency" in s.data else "discriminative"


def _leaderboard_section(report: Report) -> Section | None:
    evals = report.of_kind("eval")
    if not evals:
        return None
    subsets = _union(s.data["subsets"] for s in evals)
    header = ["Model"] + [f"{name} {metric}" for name in subsets for metric in ("Acc.", "Exact")] + \
        ["Overall", "Overall 95% CI"]
    blocks: list[Block] = ["Acc.: share of ranked pairs the better response wins (scores strictly higher); "
                           "Exact: share of prompts with no pair reversed (under the report's tie rule); "
                           "Overall: their mean over the subsets (paper Table 2). Click a header to sort."]
    for scorer in ("discriminative", "generative"):
        rows = []
        for s in (s for s in evals if _scorer_type(s) == scorer):
            cells: list[Cell] = [s.label]
            for name in subsets:
                cells += [s.num("subsets", name, "accuracy"), s.num("subsets", name, "exact_match")]
            rows.append(cells + [s.num("overall"), s.interval("overall_ci")])
        if rows:
            blocks.append(Table(header, rows, caption=f"{scorer.capitalize()} reward models", sortable=True))
    return Section("leaderboard", "Leaderboard", blocks)


def _subset_section(report: Report) -> Section | None:
    rows = []
    for s in report.of_kind("eval"):
        for name in s.data["subsets"]:
            at = ("subsets", name)
            rows.append([s.label, name, s.num(*at, "n_prompts", fmt="d"), s.num(*at, "n_comparisons", fmt="d"),
                         s.num(*at, "n_tied", fmt="d"), s.num(*at, "accuracy"), s.interval(*at, "ci", "accuracy"),
                         s.num(*at, "exact_match"), s.interval(*at, "ci", "exact_match"), s.num(*at, "score"),
                         s.num(*at, "ece"), s.num(*at, "kendall_tau_b")])
    if not rows:
        return None
    header = ["Model", "Subset", "Prompts", "Pairs", "Tied", "Acc.", "Acc. 95% CI", "Exact", "Exact 95% CI",
              "Score", "ECE", "Kendall τb"]
    return Section("subsets", "Subsets in detail", [
        "Pairs: ranked pairs compared; Tied: pairs the model scored equal; ECE: expected calibration error; "
        "Kendall τb: rank correlation of scores and the gold ranking.", Table(header, rows, sortable=True)])


def _category_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_category_bars

    evals = [s for s in report.of_kind("eval") if any(_dict(sub).get("categories")
                                                       for sub in s.data["subsets"].values())]
    blocks: list[Block] = []
    for subset in _union(s.data["subsets"] for s in evals):
        having = [s for s in evals if _dict(s.value("subsets", subset, "categories"))]
        categories = _union(s.value("subsets", subset, "categories") for s in having)
        if not categories:
            continue
        series = {s.label: [(s.value("subsets", subset, "categories", c, "accuracy"),
                             _pair(s.value("subsets", subset, "categories", c, "ci", "accuracy")))
                            for c in categories] for s in having}
        with_ci = any(ci for values in series.values() for _, ci in values)
        rows = []
        for cat in categories:
            row: list[Cell] = [cat]
            for s in having:
                at = ("subsets", subset, "categories", cat)
                row += [s.num(*at, "accuracy"), *([s.interval(*at, "ci", "accuracy")] if with_ci else []),
                        s.num(*at, "n_comparisons", fmt="d")]
            rows.append(row)
        columns = ("Acc.", "95% CI", "Pairs") if with_ci else ("Acc.", "Pairs")
        header = ["Category"] + [f"{s.label} {h}" for s in having for h in columns]
        blocks.append(Figure(f"categories_{_slug(subset)}", f"Accuracy by category: {subset}",
                             draw_category_bars(f"Accuracy by category: {subset}", categories, series),
                             texts=[*categories, *series, subset]))
        blocks.append(Table(header, rows, caption=f"subset {subset}", sortable=True))
    return Section("categories", "Accuracy by category", blocks) if blocks else None


def _judge_section(report: Report) -> Section | None:
    judges = [s for s in report.of_kind("eval") if "position_consistency" in s.data or "first_position_rate"
              in s.data]
    if not judges:
        return None
    rows = [[s.label, s.num("position_consistency"), s.num("first_position_rate")] for s in judges]
    return Section("judges", "Judges: position bias", [
        "Position consistency: share of pairs judged the same way with the responses swapped; first-position "
        "rate: share of verdicts for the response shown first (0.5 is unbiased).",
        Table(["Judge", "Position consistency", "First-position rate"], rows, sortable=True)])


def _length_section(report: Report) -> Section | None:
    rows = []
    for s in report.of_kind("eval"):
        for name in s.data["subsets"]:
            at = ("subsets", name, "length")
            if not _dict(s.value(*at)):
                continue
            rows.append([s.label, name, s.num(*at, "better_longer", "pairs", fmt="d"),
                         s.num(*at, "better_longer", "accuracy"), s.num(*at, "better_shorter", "pairs", fmt="d"),
                         s.num(*at, "better_shorter", "accuracy")])
    if not rows:
        return None
    header = ["Model", "Subset", "Better longer: pairs", "Better longer: Acc.", "Better shorter: pairs",
              "Better shorter: Acc."]
    return Section("length", "Length diagnostic", [
        "Accuracy on the pairs whose better response is the longer one, and on those whose better response is the "
        "shorter one: a reward model that just likes long answers does well on the first and badly on the second.",
        Table(header, rows, sortable=True)])


# ----------------------------------------------------------------------------- comparisons

def _compare_section(report: Report) -> Section | None:
    compares = report.of_kind("compare")
    if not compares:
        return None
    blocks: list[Block] = [_significance_matrix(compares)]
    for s in compares:
        blocks += _compare_tables(s)
    return Section("compare", "Paired comparisons", [
        "Difference = a − b with its paired bootstrap 95% CI and p-value; the matrix shows the Overall difference "
        "of the row's model over the column's (and its p-value).", *blocks])


def _significance_matrix(compares: list[Source]) -> Table:
    models = _union([compare_side(s, "a"), compare_side(s, "b")] for s in compares)
    cells: dict[tuple[str, str], Cell] = {}
    for s in compares:
        a, b = compare_side(s, "a"), compare_side(s, "b")
        difference, p = s.num("overall", "difference"), s.num("overall", "p_value", fmt="p")
        cells[a, b] = (difference, " (p ", p, ")")
        cells.setdefault((b, a), ("see row ", a, " (p ", p, ")"))
    rows = [[m] + [DASH if m == o else cells.get((m, o), "") for o in models] for m in models]
    return Table(["a \\ b"] + models, rows, caption="Overall: a − b (p-value)")


def _compare_tables(s: Source) -> list[Table]:
    a, b = compare_side(s, "a"), compare_side(s, "b")

    def row(name: str, *at) -> list[Cell]:
        return [name, s.num(*at, "a"), s.num(*at, "b"), s.num(*at, "difference"), s.interval(*at, "ci"),
                s.num(*at, "p_value", fmt="p")]

    rows = [row("Overall", "overall")]
    for name, metrics in _dict(s.data.get("subsets")).items():
        for metric in _dict(metrics):
            rows.append(row(f"{name} {metric}", "subsets", name, metric))
    tables = [Table(["Metric", f"a: {a}", f"b: {b}", "Difference", "95% CI", "p"], rows, caption=f"{a} vs {b}")]
    if _dict(s.data.get("mcnemar")):
        tables.append(Table(["Pairs only a got right", "Pairs only b got right", "McNemar p"],
                            [[s.num("mcnemar", "only_a", fmt="d"), s.num("mcnemar", "only_b", fmt="d"),
                              s.num("mcnemar", "p_value", fmt="p")]], caption=f"{a} vs {b}: McNemar test"))
    categories = _dict(s.data.get("categories"))
    if categories:
        tables.append(Table(["Category", "Only a right", "Only b right", "p", "p (Holm)"],
                            [[cat, s.num("categories", cat, "only_a", fmt="d"),
                              s.num("categories", cat, "only_b", fmt="d"),
                              s.num("categories", cat, "p_value", fmt="p"),
                              s.num("categories", cat, "p_holm", fmt="p")] for cat in categories],
                            caption=f"{a} vs {b}: by category (McNemar, Holm-corrected)", sortable=True))
    return tables


def _bon_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_bon_curves

    bons = report.of_kind("bon")
    if not bons:
        return None
    curves = {s.label: [p for p in s.data["curve"] if isinstance(p, dict)] for s in bons}
    blocks: list[Block] = [Figure("best_of_n", "Best-of-n", draw_bon_curves(curves), texts=list(curves))]
    rows = []
    for s in bons:
        for i, _ in enumerate(s.data["curve"]):
            rows.append([s.label, s.num("curve", i, "n", fmt="d"), s.num("curve", i, "prompts", fmt="d"),
                         s.num("curve", i, "left_out", fmt="d"), s.num("curve", i, "expected_gold"),
                         s.interval("curve", i, "ci"), s.num("curve", i, "win_rate")])
    blocks.append(Table(["Model", "n", "Prompts", "Left out", "Expected gold", "95% CI", "Win rate"], rows,
                        sortable=True))
    for s in bons:
        categories = {c: _list(points) for c, points in _dict(s.data.get("categories")).items()}
        ns = _union([str(p.get("n")) for p in points if isinstance(p, dict)] for points in categories.values())
        if not categories:
            continue
        table_rows = []
        for cat, points in categories.items():
            where = {str(p.get("n")): i for i, p in enumerate(points) if isinstance(p, dict)}
            table_rows.append([cat] + [s.num("categories", cat, where[n], "expected_gold") if n in where else DASH
                                       for n in ns])
        blocks.append(Table(["Category"] + [f"n={n}" for n in ns], table_rows,
                            caption=f"{s.label}: expected gold by category", sortable=True))
    return Section("best-of-n", "Best-of-n", [
        "Expected gold quality of the response each reward model picks among n (exact over all n-subsets), with "
        "bootstrap 95% CIs.", *blocks])


COEFFICIENTS = (("pearson", "Pearson r"), ("spearman", "Spearman ρ"), ("kendall", "Kendall τ"))
"""The correlation coefficients of a correlate report: key and column title."""


def _correlate_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_correlation_heatmap

    blocks: list[Block] = []
    for s in report.of_kind("correlate"):
        table = _dict(s.data["correlations"])
        listed = [b for b in _list(s.data.get("benchmark_metrics")) if isinstance(b, str) and b in table]
        bench = _union([listed, list(table)])
        down = _union(_dict(table[b]) for b in bench)
        rows = []
        for b in bench:
            for d in _dict(table[b]):
                at = ("correlations", b, d)
                row: list[Cell] = [b, d, s.num(*at, "n", fmt="d")]
                for key, _ in COEFFICIENTS:
                    row += [s.num(*at, key, "r", fmt="f2"), s.interval(*at, key, "ci", fmt="f2")]
                rows.append(row)
        if not rows:
            continue
        grid = [[s.value("correlations", b, d, "pearson", "r") for d in down] for b in bench]
        title = f"Pearson r: {s.label}"
        blocks.append(Figure(f"correlation_{s.index}", title, draw_correlation_heatmap(title, bench, down, grid),
                             texts=[*bench, *down, title]))
        header = ["Benchmark metric", "Downstream metric", "Models"] + \
            [h for _, name in COEFFICIENTS for h in (name, f"{name} 95% CI")]
        models = ", ".join(map(str, _list(s.data.get("models"))))
        blocks.append(Table(header, rows, caption=f"{s.label}" + (f" (models: {models})" if models else ""),
                            sortable=True))
    if not blocks:
        return None
    return Section("correlation", "Correlation with downstream results", [
        "How well each benchmark metric ranks the reward models the way downstream results do (paper Figure 5).",
        *blocks])


# ----------------------------------------------------------------------------- data and training

def _bias_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_bias_length

    biases = report.of_kind("bias")
    if not biases:
        return None
    groups = [(s, name, f"{name} ({s.path.name})" if len(biases) > 1 else name) for s in biases for name in s.data]
    bins = _union([str(r.get("bin")) for r in s.data[name]["by_length"]] for s, name, _ in groups)
    curves = {}
    length_rows = []
    for s, name, label in groups:
        where = {str(r.get("bin")): i for i, r in enumerate(s.data[name]["by_length"])}
        curves[label] = [(s.value(name, "by_length", where[b], "p_a"), _pair(s.value(name, "by_length", where[b],
                                                                                     "p_a_ci")))
                         if b in where else (None, None) for b in bins]
        for b in bins:
            if b in where:
                at = (name, "by_length", where[b])
                length_rows.append([label, b, s.num(*at, "n", fmt="d"), s.num(*at, "p_a"), s.interval(*at, "p_a_ci"),
                                    s.num(*at, "p_b"), s.num(*at, "p_tie")])
    position_rows = [[label, s.num(name, "by_position", "n", fmt="d"), s.num(name, "by_position", "p_a"),
                      s.num(name, "by_position", "p_b"), s.num(name, "by_position", "p_tie"),
                      s.num(name, "by_position", "p_a_strict"), s.interval(name, "by_position", "p_a_strict_ci"),
                      s.num(name, "by_position", "p_value", fmt="p")]
                     for s, name, label in groups if _dict(s.value(name, "position")).get("available", True)]
    longer_rows = [[label, s.num(name, "longer_won", "n", fmt="d"), s.num(name, "longer_won", "longer", fmt="d"),
                    s.num(name, "longer_won", "share"), s.interval(name, "longer_won", "share_ci"),
                    s.num(name, "longer_won", "p_value", fmt="p")] for s, name, label in groups]
    blocks: list[Block] = [
        "P(A chosen) by the length difference len(A) − len(B) in characters, with 95% Wilson intervals (paper "
        "Figure 15): a flat line at 0.5 is an annotator blind to length and position.",
        Figure("bias_length", "Annotator length bias", draw_bias_length(bins, curves), texts=list(curves)),
        Table(["Group", "Length difference", "Comparisons", "P(A)", "P(A) 95% CI", "P(B)", "P(tie)"], length_rows),
        Table(["Group", "Comparisons", "P(A)", "P(B)", "P(tie)", "P(A | strict)", "95% CI", "p"], position_rows,
              caption="Position: binomial test of P(A | strict) = 0.5"),
        Table(["Group", "Strict pairs of unequal length", "Longer won", "Share", "95% CI", "p"], longer_rows,
              caption="How often the longer response won"),
    ]
    if len(position_rows) < len(groups):
        blocks.append("Groups of ranked pairs carry no presentation order: they have no position row.")
    return Section("bias", "Annotator bias", blocks)


def _flat_counts(node: Any, path: tuple = ()) -> Iterable[tuple[tuple, Any]]:
    """Every scalar leaf of a stage report with its path, nested objects and lists walked in order."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _flat_counts(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _flat_counts(v, (*path, i))
    else:
        yield path, node


def _count_cell(s: Source, path: tuple, value: Any) -> Cell:
    if is_number(value):
        return s.num(*path, fmt="d" if is_integer(value) else "f3")
    if isinstance(value, bool):
        return "yes" if value else "no"
    return DASH if value is None else str(value)


def _is_breakdown(value: Any) -> bool:
    """A mapping of names to objects (``by_category``, ``by_model``): shown as a table of its own."""
    return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())


def _curate_tables(s: Source) -> list[Table]:
    """A stage report's counts: its single values in one table, and each breakdown (a mapping of names to
    objects, such as ``by_category``) as a table with one row per name."""
    rows: list[list[Cell]] = []
    tables = []
    for key, value in s.data.items():
        if key == "stage":
            continue
        if not _is_breakdown(value):
            rows += [[".".join(map(str, path)), _count_cell(s, path, v)] for path, v in _flat_counts(value, (key,))]
            continue
        columns = _union([".".join(map(str, p)) for p, _ in _flat_counts(inner)] for inner in value.values())
        table_rows = []
        for name, inner in value.items():
            cells = {".".join(map(str, p)): _count_cell(s, (key, name, *p), v) for p, v in _flat_counts(inner)}
            table_rows.append([name] + [cells.get(c, "") for c in columns])
        tables.append(Table([key] + columns, table_rows[:MAX_CURATE_ROWS], sortable=True,
                            caption=f"stage {s.data['stage']}: {key}"))
    main = Table(["Count", "Value"], rows[:MAX_CURATE_ROWS], caption=f"stage {s.data['stage']} ({s.path.name})")
    return [main, *tables]


def _curate_section(report: Report) -> Section | None:
    blocks: list[Block] = [t for s in report.of_kind("curate") for t in _curate_tables(s)]
    return Section("curation", "Curation stages", blocks) if blocks else None


LOSS_KEYS = ("loss", "pair_loss", "reg")
"""The loss columns of a training log drawn as loss curves."""


def _training_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_training_curves

    blocks: list[Block] = []
    for s in report.of_kind("train_log"):
        records = s.data
        steps = [r["step"] for r in records]

        def line(key: str, rows: list[int]) -> tuple[list, list]:
            kept = [i for i in rows if is_number(records[i].get(key)) and math.isfinite(records[i][key])]
            return [steps[i] for i in kept], [records[i][key] for i in kept]

        everything = range(len(records))
        losses = {k: line(k, everything) for k in LOSS_KEYS if any(k in r for r in records)}
        eval_keys = _union([k for k, v in r.items() if k.startswith("eval/") and is_number(v)] for r in records)
        eval_rows = [i for i, r in enumerate(records) if any(k in r for k in eval_keys)]
        evals = {k: line(k, eval_rows) for k in eval_keys}
        title = f"Training: {s.label}"
        blocks.append(Figure(f"training_{s.index}", title, draw_training_curves(title, losses, evals),
                             texts=[title, *evals]))
        last = len(records) - 1
        keys = [k for k, v in records[last].items() if is_number(v) and not k.startswith("eval/")]
        blocks.append(Table(["Metric", "Value"], [[k, s.num(last, k, fmt="auto")] for k in keys],
                            caption=f"{s.label}: last step ({len(records)} steps logged)"))
        if eval_rows:
            blocks.append(Table(["Step"] + eval_keys, [[s.num(i, "step", fmt="d")] + [s.num(i, k, fmt="auto")
                                                                                      for k in eval_keys]
                                                       for i in eval_rows],
                                caption=f"{s.label}: evaluations", sortable=True))
    return Section("training", "Training", blocks) if blocks else None
