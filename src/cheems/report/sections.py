"""The report page's sections: from the checked inputs of a `Report`, the paragraphs, tables (every number a `Num`
with its source) and figures of each part of the page, in page order (`page_sections`).

- the inputs; a study (an experiment folder: the paper's Tables 3 and 4, Figures 6 and 7; `cheems.report.study`);
- evaluation: the leaderboards in the shape of the paper's Table 2 (one of discriminative reward models, one of
  generative judges, API and local; Acc./Exact per subset, Overall with its CI, best first), subsets in detail,
  accuracy by category (Figure 4), judge position consistency and ties, and the length diagnostic;
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
from cheems.report.page_content import (DASH, Block, Cell, Figure, Report, Section, Source, Table,
                                        bootstrap_p_format)
from cheems.report.page_inputs import compare_side
from cheems.report.study import study_section

__all__ = ["COEFFICIENTS", "LOSS_KEYS", "MAX_CURATE_ROWS", "page_sections"]

MAX_CURATE_ROWS = 500
"""Most rows of one table of a curate stage report (the file has them all)."""


def page_sections(report: Report) -> list[Section]:
    """The sections of the page of ``report``'s sources, in page order; those with nothing to show left out."""
    builders = (_sources_section, study_section, _leaderboard_section, _subset_section, _category_section,
                _judge_section, _length_section, _compare_section, _bon_section, _correlate_section, _bias_section,
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
    from cheems.report.wording import KIND_NAMES, LANGUAGES

    lang = LANGUAGES.index(report.lang)
    rows = [[str(s.index + 1), s.path.name, KIND_NAMES[s.kind][lang], s.label] for s in report.sources]
    return Section("inputs", report.say("inputs"), [report.say("inputs.note"),
                                                    Table(report.say("inputs.header").split("|"), rows)])


def _scorer_type(s: Source) -> str:
    scorer = s.data.get("scorer")
    if scorer in ("discriminative", "generative"):
        return scorer
    return "generative" if "position_consistency" in s.data else "discriminative"


def _leaderboard_section(report: Report) -> Section | None:
    """The paper's Table 2: one table of discriminative reward models and one of generative judges (API judges
    and local judge models), each with Acc. and Exact per subset of its own models, Overall and its CI, best
    Overall first."""
    evals = report.of_kind("eval")
    if not evals:
        return None
    say = report.say
    blocks: list[Block] = [say("leaderboard.note")]
    for scorer in ("discriminative", "generative"):
        group = sorted((s for s in evals if _scorer_type(s) == scorer), key=_overall_first)
        if not group:
            continue
        subsets = _union(s.data["subsets"] for s in group)
        header = [say("model")] + [f"{name} {say(metric)}" for name in subsets for metric in ("acc", "exact")] + \
            [say("overall"), say("with_ci", what=say("overall"))]
        rows = []
        for s in group:
            cells: list[Cell] = [s.label]
            for name in subsets:
                cells += [s.num("subsets", name, "accuracy"), s.num("subsets", name, "exact_match")]
            rows.append(cells + [s.num("overall"), s.interval("overall_ci")])
        if scorer == "generative":
            blocks.append(say("leaderboard.generative_note"))
        blocks.append(Table(header, rows, caption=say(scorer), sortable=True))
    return Section("leaderboard", say("leaderboard"), blocks)


def _overall_first(s: Source) -> tuple:
    """Sort key: the highest Overall first, reports without one last, ties in input order."""
    overall = s.data.get("overall")
    return (0, -overall, s.index) if is_number(overall) and math.isfinite(overall) else (1, 0, s.index)


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
    say = report.say
    header = [say("model"), say("subset"), say("prompts"), say("pairs"), say("tied"), say("acc"),
              say("with_ci", what=say("acc")), say("exact"), say("with_ci", what=say("exact")), say("score"), "ECE",
              "Kendall τb"]
    return Section("subsets", say("subsets"), [say("subsets.note"), Table(header, rows, sortable=True)])


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
        say = report.say
        columns = [say(k) for k in (("acc", "ci95", "pairs") if with_ci else ("acc", "pairs"))]
        header = [say("category")] + [f"{s.label} {h}" for s in having for h in columns]
        title = say("categories.of", subset=subset)
        blocks.append(Figure(f"categories_{_slug(subset)}", title,
                             draw_category_bars(title, categories, series, say("acc")),
                             texts=[*categories, *series, title]))
        blocks.append(Table(header, rows, caption=say("subset.caption", subset=subset), sortable=True))
    return Section("categories", report.say("categories"), blocks) if blocks else None


def _judge_section(report: Report) -> Section | None:
    judges = [s for s in report.of_kind("eval") if "position_consistency" in s.data or "first_position_rate"
              in s.data]
    if not judges:
        return None
    say = report.say
    rows = [[s.label, _judged_by(report, s), s.num("judgements", fmt="d"), s.num("position_consistency"),
             s.num("first_position_rate"), s.num("tie_verdicts", fmt="d")] for s in judges]
    header = [say("judge"), say("judged_by"), say("judgements"), say("position_consistency"),
              say("first_position_rate"), say("tie_verdicts")]
    return Section("judges", say("judges"), [say("judges.note"), Table(header, rows, sortable=True)])


def _judged_by(report: Report, s: Source) -> str:
    """How a judge report's verdicts were reached: an API's replies, or a local model's verdict probabilities."""
    backend = s.data.get("judge_backend")
    return report.say("local_judge", backend=backend) if isinstance(backend, str) else report.say("api_judge")


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
    say = report.say
    header = [say(k) for k in ("model", "subset", "longer_pairs", "longer_acc", "shorter_pairs", "shorter_acc")]
    return Section("length", say("length"), [say("length.note"), Table(header, rows, sortable=True)])


# ----------------------------------------------------------------------------- comparisons

def _compare_section(report: Report) -> Section | None:
    compares = report.of_kind("compare")
    if not compares:
        return None
    blocks: list[Block] = [_significance_matrix(report, compares)]
    for s in compares:
        blocks += _compare_tables(report, s)
    return Section("compare", report.say("compare"), [report.say("compare.note"), *blocks])


def _p_format(s: Source) -> str:
    """The format of a compare report's bootstrap p-values (``< 1/(n+1)`` below its resolution)."""
    return bootstrap_p_format(s.data.get("n_bootstrap"))


def _significance_matrix(report: Report, compares: list[Source]) -> Table:
    """Every ordered pair of models: the Overall difference row − column (a compare "A vs B" holds B − A: the
    cell of row B, column A shows it, the cell of row A, column B its negative) and its p-value."""
    models = _union([compare_side(s, "a"), compare_side(s, "b")] for s in compares)
    cells: dict[tuple[str, str], Cell] = {}
    for s in compares:
        a, b = compare_side(s, "a"), compare_side(s, "b")
        p = s.num("overall", "p_value", fmt=_p_format(s))
        cells.setdefault((b, a), (s.num("overall", "difference", fmt="f4"), " (p ", p, ")"))
        cells.setdefault((a, b), (s.num("overall", "difference", fmt="f4", negate=True), " (p ", p, ")"))
    rows = [[m] + [DASH if m == o else cells.get((m, o), "") for o in models] for m in models]
    return Table([report.say("matrix.corner")] + models, rows, caption=report.say("matrix.caption"))


def _compare_tables(report: Report, s: Source) -> list[Table]:
    say = report.say
    a, b = compare_side(s, "a"), compare_side(s, "b")
    p_fmt = _p_format(s)

    def row(name: str, *at) -> list[Cell]:
        return [name, s.num(*at, "a"), s.num(*at, "b"), s.num(*at, "difference", fmt="f4"),
                s.interval(*at, "ci", fmt="f4"), s.num(*at, "p_value", fmt=p_fmt)]

    rows = [row(say("overall"), "overall")]
    for name, metrics in _dict(s.data.get("subsets")).items():
        for metric in _dict(metrics):
            words = say(_METRIC_WORDS[metric]) if metric in _METRIC_WORDS else metric
            rows.append(row(f"{name} {words}", "subsets", name, metric))
    header = [say("metric"), say("side_a", name=a), say("side_b", name=b), say("b_minus_a"), say("b_minus_a_ci"),
              say("p")]
    tables = [Table(header, rows, caption=say("vs", a=a, b=b))]
    if _dict(s.data.get("mcnemar")):
        tables.append(Table([say("only_a"), say("only_b"), say("mcnemar_p")],
                            [[s.num("mcnemar", "only_a", fmt="d"), s.num("mcnemar", "only_b", fmt="d"),
                              s.num("mcnemar", "p_value", fmt="p")]], caption=say("mcnemar.caption", a=a, b=b)))
    categories = _dict(s.data.get("categories"))
    if categories:
        tables.append(Table([say("category"), say("only_a"), say("only_b"), say("p"), say("holm_p")],
                            [[cat, s.num("categories", cat, "only_a", fmt="d"),
                              s.num("categories", cat, "only_b", fmt="d"),
                              s.num("categories", cat, "p_value", fmt="p"),
                              s.num("categories", cat, "p_holm", fmt="p")] for cat in categories],
                            caption=say("by_category.caption", a=a, b=b), sortable=True))
    return tables


_METRIC_WORDS = {"accuracy": "acc", "exact_match": "exact", "score": "score"}


def _bon_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_bon_curves

    bons = report.of_kind("bon")
    if not bons:
        return None
    say = report.say
    curves = {s.label: [p for p in s.data["curve"] if isinstance(p, dict)] for s in bons}
    axes = (say("bon"), say("n_axis"), say("gold_axis"))
    blocks: list[Block] = [Figure("best_of_n", say("bon"), draw_bon_curves(curves, *axes),
                                  texts=[*curves, *axes])]
    rows = []
    for s in bons:
        for i, _ in enumerate(s.data["curve"]):
            rows.append([s.label, s.num("curve", i, "n", fmt="d"), s.num("curve", i, "prompts", fmt="d"),
                         s.num("curve", i, "left_out", fmt="d"), s.num("curve", i, "expected_gold"),
                         s.interval("curve", i, "ci"), s.num("curve", i, "win_rate")])
    blocks.append(Table([say("model"), "n", say("prompts"), say("left_out"), say("expected_gold"), say("ci95"),
                         say("win_rate")], rows, sortable=True))
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
        blocks.append(Table([say("category")] + [f"n={n}" for n in ns], table_rows,
                            caption=say("bon.category.caption", model=s.label), sortable=True))
    return Section("best-of-n", say("bon"), [say("bon.note"), *blocks])


COEFFICIENTS = ("pearson", "spearman", "kendall")
"""The correlation coefficients of a correlate report (each also the key of its column title)."""


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
                for key in COEFFICIENTS:
                    row += [s.num(*at, key, "r", fmt="f2"), s.interval(*at, key, "ci", fmt="f2")]
                rows.append(row)
        if not rows:
            continue
        grid = [[s.value("correlations", b, d, "pearson", "r") for d in down] for b in bench]
        title = f"{report.say('pearson')}: {s.label}"
        blocks.append(Figure(f"correlation_{s.index}", title, draw_correlation_heatmap(title, bench, down, grid),
                             texts=[*bench, *down, title]))
        say = report.say
        header = [say("benchmark_metric"), say("downstream_metric"), say("models")] + \
            [h for key in COEFFICIENTS for h in (say(key), say("with_ci", what=say(key)))]
        models = ", ".join(map(str, _list(s.data.get("models"))))
        caption = say("models.caption", label=s.label, models=models) if models else s.label
        blocks.append(Table(header, rows, caption=caption, sortable=True))
    if not blocks:
        return None
    return Section("correlation", report.say("correlation"), [report.say("correlation.note"), *blocks])


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
    say = report.say
    labels = (say("bias.figure"), say("bias.x"), say("bias.y"))
    group, ci, p = say("group"), say("ci95"), say("p")
    blocks: list[Block] = [
        say("bias.note"),
        Figure("bias_length", labels[0], draw_bias_length(bins, curves, *labels), texts=[*curves, *labels]),
        Table([group, say("length_difference"), say("comparisons"), "P(A)", say("with_ci", what="P(A)"), "P(B)",
               "P(tie)"], length_rows),
        Table([group, say("comparisons"), "P(A)", "P(B)", "P(tie)", say("p_a_strict"), ci, p], position_rows,
              caption=say("position.caption")),
        Table([group, say("unequal_pairs"), say("longer_won"), say("share"), ci, p], longer_rows,
              caption=say("longer.caption")),
    ]
    if len(position_rows) < len(groups):
        blocks.append(say("bias.no_position"))
    return Section("bias", say("bias"), blocks)


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


def _count_cell(report: Report, s: Source, path: tuple, value: Any) -> Cell:
    if is_number(value):
        return s.num(*path, fmt="d" if is_integer(value) else "f3")
    if isinstance(value, bool):
        return report.say("yes" if value else "no")
    return DASH if value is None else str(value)


def _is_breakdown(value: Any) -> bool:
    """A mapping of names to objects (``by_category``, ``by_model``): shown as a table of its own."""
    return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())


def _curate_tables(report: Report, s: Source) -> list[Table]:
    """A stage report's counts: its single values in one table, and each breakdown (a mapping of names to
    objects, such as ``by_category``) as a table with one row per name."""
    rows: list[list[Cell]] = []
    tables = []
    for key, value in s.data.items():
        if key == "stage":
            continue
        if not _is_breakdown(value):
            rows += [[".".join(map(str, path)), _count_cell(report, s, path, v)]
                     for path, v in _flat_counts(value, (key,))]
            continue
        columns = _union([".".join(map(str, p)) for p, _ in _flat_counts(inner)] for inner in value.values())
        table_rows = []
        for name, inner in value.items():
            cells = {".".join(map(str, p)): _count_cell(report, s, (key, name, *p), v)
                     for p, v in _flat_counts(inner)}
            table_rows.append([name] + [cells.get(c, "") for c in columns])
        tables.append(Table([key] + columns, table_rows[:MAX_CURATE_ROWS], sortable=True,
                            caption=report.say("stage.part", stage=s.data["stage"], part=key)))
    main = Table([report.say("count"), report.say("value")], rows[:MAX_CURATE_ROWS],
                 caption=report.say("stage.caption", stage=s.data["stage"], file=s.path.name))
    return [main, *tables]


def _curate_section(report: Report) -> Section | None:
    blocks: list[Block] = [t for s in report.of_kind("curate") for t in _curate_tables(report, s)]
    return Section("curation", report.say("curation"), blocks) if blocks else None


LOSS_KEYS = ("loss", "pair_loss", "reg")
"""The loss columns of a training log drawn as loss curves."""


def _training_section(report: Report) -> Section | None:
    from cheems.report.plots import draw_training_curves

    say = report.say
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
        title = say("training.of", label=s.label)
        axes = (say("step"), say("loss"), say("evaluation"))
        blocks.append(Figure(f"training_{s.index}", title, draw_training_curves(title, losses, evals, *axes),
                             texts=[title, *evals, *axes], size=(11.0, 4.4) if evals else (8.0, 4.4)))
        last = len(records) - 1
        keys = [k for k, v in records[last].items() if is_number(v) and not k.startswith("eval/")]
        blocks.append(Table([say("metric"), say("value")], [[k, s.num(last, k, fmt="auto")] for k in keys],
                            caption=say("last_step.caption", label=s.label, steps=len(records))))
        if eval_rows:
            blocks.append(Table([say("step")] + eval_keys, [[s.num(i, "step", fmt="d")] + [s.num(i, k, fmt="auto")
                                                                                      for k in eval_keys]
                                                       for i in eval_rows],
                                caption=say("evaluations.caption", label=s.label), sortable=True))
    return Section("training", say("training"), blocks) if blocks else None
