"""The report page: one static HTML file (and the same content as Markdown with PNG plots) from any mix
of result files of the statistics commands.

Inputs are told apart by their content (their ``"kind"`` key, or their shape):

- ``eval``: ``cheems eval --json``; a judge eval (scorer ``generative``) may add ``position_consistency``
  and ``first_position_rate``;
- ``bon``: ``cheems bon --json``; ``compare``: ``cheems compare --json``; ``correlate``: ``cheems correlate --json``;
- ``curate``: the ``OUT.report.json`` of a ``cheems curate`` stage (a ``"stage"`` key);
- ``bias``: ``cheems analyze bias --json`` (group name -> `cheems.curation.bias.bias_table`);
- ``train_log``: a training run's ``train_log.jsonl`` (one JSON object with an integer ``step`` per line).

The page shows a leaderboard in the shape of the paper's Table 2 (discriminative and generative reward models,
Acc./Exact per subset, Overall with its CI; sortable by clicking a header), per-category accuracy (Figure 4),
judge position consistency, the length diagnostic, a pairwise significance matrix and the compare details,
best-of-n curves, correlation heat maps (Figure 5), annotator bias (Figure 15), curation counts and training
curves.

Every number shown carries its source: ``<span class="num" data-src="I" data-path="subsets/open/accuracy"
data-value="0.7296705534401701" data-fmt="f3">0.730</span>``: ``data-src`` indexes the list of inputs (shown at
the top of the page, `Report.sources`), ``data-path`` is the value's place in that file as JSON-pointer segments
joined by ``/`` (``~`` written ``~0`` and ``/`` written ``~1`` inside a key; a list position is its index; in a
training log the first segment is the record's position among the log's records), ``data-value`` the value as
JSON and ``data-fmt`` how it is written (see `format_number`). Missing values show as ``–``.

The HTML needs nothing outside itself: plots are inline SVG with text drawn as paths, the sorting script and
styles are inline, and a Content-Security-Policy forbids every fetch.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, Union
from urllib.parse import quote

from cheems.io import atomic_open, check_output_folder, check_outputs, outputs_together
from cheems.records import CheemsInputError, is_integer, is_number

__all__ = ["DASH", "FORMATS", "KINDS", "Figure", "Num", "Report", "Section", "Source", "Table", "build_report",
           "auto_format", "classify", "format_number", "read_result", "render_html", "render_markdown", "write_report"]

KINDS = ("eval", "bon", "compare", "correlate", "curate", "bias", "train_log")
"""The kinds of input the report reads."""

FORMATS = {"f2": "fixed, 2 decimals", "f3": "fixed, 3 decimals", "f4": "fixed, 4 decimals",
           "e3": "scientific, 3 decimals, exponent unpadded (1.000e-5)", "d": "integer",
           "p": "p-value: fixed, 3 decimals; below 0.001 written <0.001"}
"""How a number is written (``data-fmt``). Decimals round half away from zero on the exact binary value, as
JavaScript's ``toFixed`` / ``toExponential`` do, so a browser can check every number."""

DASH = "–"
"""Shown for a value that is missing (null, absent, not finite)."""

MAX_CURATE_ROWS = 500
"""Most rows of one table of a curate stage report (the file has them all)."""


# ----------------------------------------------------------------------------- the page's content

def format_number(value: int | float, fmt: str) -> str:
    """``value`` written as `FORMATS` ``fmt`` says (``format_number(0.72967, "f3") == "0.730"``)."""
    if fmt == "d":
        return str(int(value))
    if fmt == "p" and value < 0.001:
        return "<0.001"
    with localcontext() as context:
        context.rounding = ROUND_HALF_UP
        if fmt == "e3":
            return "0.000e+0" if value == 0 else format(Decimal(value), ".3e")
        digits = 3 if fmt == "p" else int(fmt[1:])
        exact = Decimal(abs(value)).quantize(Decimal(1).scaleb(-digits))
    return ("-" if value < 0 else "") + f"{exact:f}"


def auto_format(value: int | float) -> str:
    """The format of a value whose size is not known in advance (a training log's): ``d`` for an integer,
    ``f4`` from 0.001 to 10,000, else ``e3``."""
    if is_integer(value):
        return "d"
    return "f4" if value == 0 or 1e-3 <= abs(value) < 1e4 else "e3"


def _escape_segment(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Num:
    """A number shown on the page, with its source: input ``src``, place ``path`` in it, format ``fmt``."""

    src: int
    path: tuple
    value: int | float
    fmt: str

    @property
    def text(self) -> str:
        return format_number(self.value, self.fmt)

    @property
    def data_path(self) -> str:
        return "/".join(_escape_segment(k) for k in self.path)

    @property
    def data_value(self) -> str:
        return json.dumps(self.value)


Cell = Union[str, Num, tuple]
"""A table cell: text, a number, or a tuple of texts and numbers shown one after another."""


@dataclass
class Table:
    """A table; ``sortable`` ones re-sort by a column when its header is clicked."""

    header: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    sortable: bool = False


@dataclass
class Figure:
    """A plot: ``draw`` fills a matplotlib Figure (see `cheems.report.plots`); ``name`` is its PNG's stem and
    ``texts`` the labels it shows (a CJK font is picked when one is Chinese)."""

    name: str
    title: str
    draw: Callable
    texts: list[str] = field(default_factory=list)
    size: tuple[float, float] = (8.0, 4.4)


Block = Union[str, Table, Figure]


@dataclass
class Section:
    """A part of the page: a title and its paragraphs (str), tables and figures, in order."""

    anchor: str
    title: str
    blocks: list[Block]


@dataclass
class Source:
    """One input file: its position on the page (``index``, the ``data-src`` of its numbers), its kind, its
    parsed content and the label it goes by (a model name, a stage, a file name)."""

    index: int
    path: Path
    kind: str
    data: Any
    label: str = ""

    def value(self, *path) -> Any:
        """The value at ``path`` in the file, or None where the path leads nowhere."""
        node = self.data
        for key in path:
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                node = node[key]
            else:
                return None
        return node

    def num(self, *path, fmt: str = "f3") -> Num | str:
        """The number at ``path`` as a `Num` (with its source), or `DASH` where there is none; ``fmt``: one of
        `FORMATS`, or ``auto`` for `auto_format`."""
        v = self.value(*path)
        if not is_number(v) or not math.isfinite(v):
            return DASH
        if fmt == "auto":
            fmt = auto_format(v)
        if fmt == "d" and not float(v).is_integer():
            fmt = "f3"
        return Num(self.index, tuple(path), v, fmt)

    def interval(self, *path, fmt: str = "f3") -> Cell:
        """``[lo, hi]`` of the two-number list at ``path``, each number with its source; `DASH` without one."""
        ci = self.value(*path)
        if not isinstance(ci, list) or len(ci) != 2 or not all(is_number(x) for x in ci):
            return DASH
        return ("[", self.num(*path, 0, fmt=fmt), ", ", self.num(*path, 1, fmt=fmt), "]")


@dataclass
class Report:
    """What `build_report` read (``sources``, in the order given) and the page's ``sections``."""

    sources: list[Source]
    sections: list[Section]
    title: str = "cheems report"

    def of_kind(self, kind: str) -> list[Source]:
        return [s for s in self.sources if s.kind == kind]


# ----------------------------------------------------------------------------- reading the inputs

def _load_json(path: Path) -> Any:
    """The file's JSON document, or its JSON Lines as a list of values (a last line cut short is dropped)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except IsADirectoryError:
        raise CheemsInputError("is a folder, expected a JSON result file", file=str(path)) from None
    except OSError as e:
        raise CheemsInputError(f"cannot read: {e.strerror or e}", file=str(path)) from None
    except UnicodeDecodeError:
        raise CheemsInputError("is not UTF-8 text: expected a JSON result file", file=str(path)) from None
    text = text.lstrip("\ufeff")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        first = text.lstrip().split("\n", 1)[0]
        if not _is_json_object(first):
            raise CheemsInputError(f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
                                   file=str(path)) from None
    return _load_jsonl(text, path)


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _load_jsonl(text: str, path: Path) -> list:
    rows = []
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == len(lines) and not text.endswith("\n"):
                break  # the last line of a log cut short by a kill
            raise CheemsInputError(f"is not valid JSON Lines: {e.msg} (column {e.colno})", file=str(path),
                                   line=number) from None
    return rows


def classify(data: Any, path: str | Path) -> str:
    """The kind (one of `KINDS`) of a parsed result file, by its ``"kind"`` key or its shape; anything else
    is a CheemsInputError naming ``path``."""
    if isinstance(data, list):
        if data and all(isinstance(r, dict) and is_integer(r.get("step")) for r in data):
            return "train_log"
        raise CheemsInputError("is a list, not a result report (a training log has one JSON object with an "
                               "integer 'step' per line)", file=str(path))
    if not isinstance(data, dict):
        raise CheemsInputError(f"holds a JSON {type(data).__name__}, expected a result report (a JSON object)",
                               file=str(path))
    kind = data.get("kind")
    if kind is not None:
        if kind in ("eval", "bon", "compare", "correlate"):
            return kind
        raise CheemsInputError(f"unknown report kind {kind!r}: the report reads eval, bon, compare and correlate "
                               "results, curate stage reports, bias tables and training logs", file=str(path))
    shapes = (("stage", "curate"), ("curve", "bon"), ("mcnemar", "compare"), ("correlations", "correlate"))
    for key, found in shapes:
        if key in data:
            return found
    if "subsets" in data and "overall" in data:
        return "eval"
    if data and all(isinstance(t, dict) and "by_length" in t for t in data.values()):
        return "bias"
    raise CheemsInputError("is not a result the report knows: expected the JSON of cheems eval, bon, compare or "
                           "correlate, a curate stage report, a bias table or a train_log.jsonl", file=str(path))


NUMBER_OR_NULL = "a number or null"
REQUIRED: dict[str, list[tuple[tuple, str]]] = {
    "eval": [(("subsets",), "an object")],
    "bon": [(("curve",), "a list")],
    "compare": [(("a",), "a string or null"), (("b",), "a string or null"), (("overall",), "an object")],
    "correlate": [(("correlations",), "an object")],
    "curate": [(("stage",), "a string")],
    "bias": [],
    "train_log": [],
}
"""What a kind must carry (path, expected type) for the page to be drawn; the rest is optional."""

_TYPE_CHECKS = {
    "an object": lambda v: isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a string": lambda v: isinstance(v, str),
    "a string or null": lambda v: v is None or isinstance(v, str),
    "an integer": is_integer,
    NUMBER_OR_NULL: lambda v: v is None or is_number(v),
}


def _require(data: Any, path: tuple, expected: str, file: Path) -> None:
    node = data
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if not _TYPE_CHECKS[expected](node):
        where = ".".join(map(str, path))
        found = "missing" if node is None else f"a {type(node).__name__}"
        raise CheemsInputError(f"expected {expected}, found {found}", file=str(file), field=where)


def _check_shape(kind: str, data: Any, path: Path) -> None:
    """The keys each section reads, checked once here: a file missing them is one error naming it."""
    for where, expected in REQUIRED[kind]:
        _require(data, where, expected, path)
    if kind == "eval":
        for name, subset in data["subsets"].items():
            _require(data, ("subsets", name), "an object", path)
            for metric in ("accuracy", "exact_match", "score"):
                if metric in subset:
                    _require(data, ("subsets", name, metric), NUMBER_OR_NULL, path)
    elif kind == "bon":
        for i, point in enumerate(data["curve"]):
            if not isinstance(point, dict) or not is_integer(point.get("n")):
                raise CheemsInputError("expected a point with an integer 'n'", file=str(path), field=f"curve.{i}")
    elif kind == "bias":
        for name, table in data.items():
            _require(data, (name, "by_length"), "a list", path)
            if not all(isinstance(r, dict) for r in table["by_length"]):
                raise CheemsInputError("expected a list of bins", file=str(path), field=f"{name}.by_length")


def read_result(path: str | Path, index: int = 0) -> Source:
    """Read one result file and tell its kind; a file that cannot be read, is not JSON / JSON Lines or is
    not a known result is one CheemsInputError naming it."""
    path = Path(path)
    data = _load_json(path)
    kind = classify(data, path)
    _check_shape(kind, data, path)
    return Source(index, path, kind, data)


def _label_sources(sources: list[Source]) -> None:
    """Each source's label: the model (eval, bon), ``a vs b`` (compare), the stage (curate), else the file's
    stem; labels that repeat get the file name added, then the input's number."""
    for s in sources:
        d = s.data
        name = d.get("model") if isinstance(d, dict) else None
        if s.kind == "compare":
            name = f"{_side(s, 'a')} vs {_side(s, 'b')}"
        elif s.kind == "curate":
            name = f"{d['stage']}: {s.path.name}"
        s.label = str(name) if isinstance(name, str) and name else s.path.stem
    for attempt in (lambda s: f"{s.label} ({s.path.name})", lambda s: f"{s.label} #{s.index + 1}"):
        counts: dict[tuple[str, str], int] = {}
        for s in sources:
            counts[s.kind, s.label] = counts.get((s.kind, s.label), 0) + 1
        for s in sources:
            if counts[s.kind, s.label] > 1:
                s.label = attempt(s)


def _side(s: Source, side: str) -> str:
    """The name of model ``a`` or ``b`` of a compare report (``a`` / ``b`` when the report has none)."""
    name = s.data.get(side)
    return name if isinstance(name, str) and name else side


def build_report(paths: Sequence[str | Path], *, title: str = "cheems report") -> Report:
    """Read every result file of ``paths`` (any mix of `KINDS`, told apart by content) and lay out the page.

    A file that cannot be read, is not JSON, or is no known result is one CheemsInputError naming the file.
    Nothing is drawn yet: the plots are made by `render_html` / `render_markdown` (and `write_report`)."""
    if not paths:
        raise CheemsInputError("no result files given: the report needs at least one")
    sources = [read_result(p, i) for i, p in enumerate(paths)]
    _label_sources(sources)
    report = Report(sources, [], title)
    builders = (_sources_section, _leaderboard_section, _subset_section, _category_section, _judge_section,
                _length_section, _compare_section, _bon_section, _correlate_section, _bias_section,
                _curate_section, _training_section)
    for build in builders:
        section = build(report)
        if section is not None and section.blocks:
            report.sections.append(section)
    return report


# ----------------------------------------------------------------------------- sections: evaluation

def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def _union(lists: Iterable[Iterable[str]]) -> list[str]:
    """The distinct items of ``lists`` in the order first seen."""
    return list(dict.fromkeys(k for items in lists for k in items))


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


def _pair(x: Any) -> list | None:
    return x if isinstance(x, list) and len(x) == 2 and all(is_number(v) for v in x) else None


def _slug(text: str) -> str:
    """A file-name-safe stem (ASCII letters, digits, ``_``; other characters as their code point)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"u{ord(c):x}" for c in str(text))[:60]


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


# ----------------------------------------------------------------------------- sections: comparisons

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
    models = _union([_side(s, "a"), _side(s, "b")] for s in compares)
    cells: dict[tuple[str, str], Cell] = {}
    for s in compares:
        a, b = _side(s, "a"), _side(s, "b")
        difference, p = s.num("overall", "difference"), s.num("overall", "p_value", fmt="p")
        cells[a, b] = (difference, " (p ", p, ")")
        cells.setdefault((b, a), ("see row ", a, " (p ", p, ")"))
    rows = [[m] + [DASH if m == o else cells.get((m, o), "") for o in models] for m in models]
    return Table(["a \\ b"] + models, rows, caption="Overall: a − b (p-value)")


def _compare_tables(s: Source) -> list[Table]:
    a, b = _side(s, "a"), _side(s, "b")

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


# ----------------------------------------------------------------------------- sections: data and training

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


# ----------------------------------------------------------------------------- HTML

STYLE = """
body{font-family:"Noto Sans CJK SC","Source Han Sans SC","PingFang SC","Microsoft YaHei","WenQuanYi Micro Hei",
 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222;line-height:1.45}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
nav a{margin-right:1em} table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;white-space:nowrap}
td.n{text-align:right} th{background:#f4f4f4}
table.sortable th{cursor:pointer;user-select:none} table.sortable th:hover{background:#e8e8f4}
th[aria-sort=ascending]::after{content:" ▲"} th[aria-sort=descending]::after{content:" ▼"}
caption{text-align:left;font-weight:bold;padding:4px 0;white-space:nowrap} .num{font-variant-numeric:tabular-nums}
figure{margin:1em 0} figure svg{max-width:100%;height:auto} figcaption{color:#555;font-size:13px}
.wide{overflow-x:auto}
"""

SORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var descending = th.getAttribute('aria-sort') === 'ascending';
      table.querySelectorAll('thead th').forEach(function (o) { o.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[col], v = cell ? cell.getAttribute('data-sort') : null;
        return v === null || v === '' ? null : (isNaN(Number(v)) ? v : Number(v));
      }
      rows.sort(function (x, y) {
        var a = key(x), b = key(y);
        if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
        var order = (typeof a === 'number' && typeof b === 'number') ? a - b : String(a).localeCompare(String(b));
        return descending ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def _cell_parts(cell: Cell) -> tuple:
    return cell if isinstance(cell, tuple) else (cell,)


def _cell_html(cell: Cell) -> str:
    out = []
    for part in _cell_parts(cell):
        if isinstance(part, Num):
            out.append(f'<span class="num" data-src="{part.src}" data-path="{html.escape(part.data_path)}" '
                       f'data-value="{html.escape(part.data_value)}" data-fmt="{part.fmt}">{part.text}</span>')
        else:
            out.append(html.escape(str(part)))
    return "".join(out)


def _sort_key(cell: Cell) -> str:
    """What a sortable column sorts a cell by: its first number's value, else its text."""
    parts = _cell_parts(cell)
    first = next((p for p in parts if isinstance(p, Num)), None)
    if first is not None:
        return first.data_value
    text = _cell_text(cell)
    return "" if text == DASH else text


def _numeric_class(cell: Cell) -> str:
    return ' class="n"' if cell == DASH or any(isinstance(p, Num) for p in _cell_parts(cell)) else ""


def _table_html(table: Table) -> str:
    out = ['<div class="wide"><table' + (' class="sortable"' if table.sortable else "") + ">"]
    if table.caption:
        out.append(f"<caption>{html.escape(table.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in table.header) + "</tr></thead><tbody>")
    for row in table.rows:
        cells = "".join(f'<td{_numeric_class(c)} data-sort="{html.escape(_sort_key(c))}">{_cell_html(c)}</td>'
                        for c in row)
        out.append(f"<tr>{cells}</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _figure_html(figure: Figure) -> str:
    from cheems.report.plots import figure_svg

    svg = figure_svg(figure.draw, figure.texts, figure.size)
    return (f'<figure id="fig-{html.escape(figure.name)}">{svg}<figcaption>{html.escape(figure.title)}'
            "</figcaption></figure>")


def _block_html(block: Block) -> str:
    if isinstance(block, Table):
        return _table_html(block)
    if isinstance(block, Figure):
        return _figure_html(block)
    return f"<p>{html.escape(block)}</p>"


def render_html(report: Report) -> str:
    """The whole page as one HTML document (plots drawn now, as inline SVG)."""
    title = html.escape(report.title)
    nav = " ".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in report.sections)
    body = []
    for section in report.sections:
        body.append(f'<section id="{section.anchor}"><h2>{html.escape(section.title)}</h2>')
        body.extend(_block_html(b) for b in section.blocks)
        body.append("</section>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="zh-CN"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title><style>{STYLE}</style></head><body>",
        f"<h1>{title}</h1><nav>{nav}</nav>", *body, f"<script>{SORT_SCRIPT}</script>", "</body></html>", ""])


# ----------------------------------------------------------------------------- Markdown

def _cell_text(cell: Cell) -> str:
    return "".join(p.text if isinstance(p, Num) else str(p) for p in _cell_parts(cell))


def _md_cell(text: str) -> str:
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def _table_markdown(table: Table) -> str:
    out = [f"**{_md_cell(table.caption)}**", ""] if table.caption else []
    out.append("| " + " | ".join(_md_cell(h) for h in table.header) + " |")
    out.append("|" + "|".join(":---" if i == 0 else "---:" for i in range(len(table.header))) + "|")
    out.extend("| " + " | ".join(_md_cell(_cell_text(c)) for c in row) + " |" for row in table.rows)
    return "\n".join(out)


def render_markdown(report: Report, files_dir: str) -> tuple[str, dict[str, bytes]]:
    """The page as Markdown and its plots as PNG: ``(markdown, {file name: PNG bytes})``; the Markdown links each
    plot as ``files_dir/NAME.png`` (``files_dir``: the folder's path relative to the Markdown file)."""
    from cheems.report.plots import figure_png

    out = [f"# {report.title}", "", " · ".join(f"[{s.title}](#{s.anchor})" for s in report.sections), ""]
    images: dict[str, bytes] = {}
    for section in report.sections:
        out += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                out.append(_table_markdown(block))
            elif isinstance(block, Figure):
                name = f"{block.name}.png"
                images[name] = figure_png(block.draw, block.texts, block.size)
                out.append(f"![{block.title}]({files_dir}/{name})")
            else:
                out.append(block)
            out.append("")
    return "\n".join(out), images


# ----------------------------------------------------------------------------- writing

def _unique_figure_names(report: Report) -> None:
    seen: set[str] = set()
    for section in report.sections:
        for block in section.blocks:
            if isinstance(block, Figure):
                base, k = block.name, 2
                while block.name in seen:
                    block.name = f"{base}_{k}"
                    k += 1
                seen.add(block.name)


def write_report(report: Report, html_path: str | Path, markdown_path: str | Path | None = None) -> list[Path]:
    """Write the page of ``report`` (from `build_report`) to ``html_path``, and with ``markdown_path`` the same
    content as Markdown, its plots as PNG files in the folder ``<markdown stem>_files`` beside it.

    Outputs are checked first (`cheems.io.check_outputs`): one that is an input, a folder, or cannot be written
    is one CheemsInputError naming it, and nothing is written. The PNGs are written one by one, each
    atomically; the HTML and the Markdown appear together at the end or not at all. Returns the paths written,
    the HTML first."""
    html_path = Path(html_path)
    markdown_path = Path(markdown_path) if markdown_path is not None else None
    inputs = [s.path for s in report.sources]
    check_outputs([html_path, markdown_path], inputs)
    files_dir = markdown_path.with_name(markdown_path.stem + "_files") if markdown_path else None
    if files_dir is not None:
        check_output_folder(files_dir, inputs)
    _unique_figure_names(report)
    page = render_html(report).encode("utf-8")
    written: list[Path] = []
    markdown = b""
    if files_dir is not None:
        text, images = render_markdown(report, quote(files_dir.name))
        markdown = text.encode("utf-8")
        for name, data in images.items():
            with atomic_open(files_dir / name) as f:
                f.write(data)
            written.append(files_dir / name)
    with outputs_together(html_path, markdown_path) as (html_tmp, md_tmp):
        with atomic_open(html_tmp) as f:
            f.write(page)
        if md_tmp is not None:
            with atomic_open(md_tmp) as f:
                f.write(markdown)
    return [html_path, *([markdown_path] if markdown_path else []), *written]
