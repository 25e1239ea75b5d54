"""The report page's inputs: reading each result file, telling its kind (one of `KINDS`) from its content,
checking once that it carries what the sections read, and labelling it.

A folder is an experiment folder (``experiment``: it holds the ``results.jsonl`` of `cheems experiment run`),
read and tabled by `cheems.report.study.read_study`.

A file is one JSON document or JSON Lines (a training log; a last line cut short by a kill is dropped). Its kind
is its ``"kind"`` key, or else its shape (`classify`); `REQUIRED` lists the keys each kind must carry. A file that
cannot be read, is not JSON, is no known result or lacks a required key is one CheemsInputError naming it (and
the field), so the sections can trust what they read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cheems.io import json_value_problem, read_text_file
from cheems.records import CheemsInputError, is_integer, is_number
from cheems.report.page_content import Source

__all__ = ["KINDS", "NUMBER_OR_NULL", "REQUIRED", "classify", "compare_side", "data_texts", "label_sources",
           "read_result"]

KINDS = ("eval", "bon", "compare", "correlate", "curate", "bias", "train_log", "experiment")
"""The kinds of input the report reads."""


def _load_json(path: Path) -> Any:
    """The file's JSON document, or its JSON Lines as a list of values (a last line cut short is dropped);
    a lone surrogate or nesting past MAX_JSON_DEPTH in it is a CheemsInputError naming the field."""
    text = read_text_file(path, expected="a JSON result file").lstrip("\ufeff")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        first = text.lstrip().split("\n", 1)[0]
        if not _is_json_object(first):
            raise CheemsInputError(f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
                                   file=str(path)) from None
        data = _load_jsonl(text, path)
    problem = json_value_problem(data)
    if problem is not None:
        raise CheemsInputError(problem[1], file=str(path), field=problem[0] or None)
    return data


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
    "eval": [(("subsets",), "an object"), (("overall",), NUMBER_OR_NULL)],
    "bon": [(("curve",), "a list")],
    "compare": [(("a",), "a string or null"), (("b",), "a string or null"), (("overall",), "an object"),
                *((("overall", key), NUMBER_OR_NULL) for key in ("a", "b", "difference", "p_value")),
                (("n_bootstrap",), "an integer or null")],
    "correlate": [(("correlations",), "an object")],
    "curate": [(("stage",), "a string")],
    "bias": [],
    "train_log": [],
    "experiment": [],  # checked line by line by cheems.experiments.results
}
"""What a kind must carry (path, expected type) for the page to be drawn; the rest is optional."""

_TYPE_CHECKS = {
    "an object": lambda v: isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a string": lambda v: isinstance(v, str),
    "a string or null": lambda v: v is None or isinstance(v, str),
    "an integer": is_integer,
    "an integer or null": lambda v: v is None or is_integer(v),
    NUMBER_OR_NULL: lambda v: v is None or is_number(v),
}


def _require(data: Any, path: tuple, expected: str, file: Path, at: str = "") -> None:
    node = data
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if not _TYPE_CHECKS[expected](node):
        where = at + ".".join(map(str, path))
        found = "missing" if node is None else f"a {type(node).__name__}"
        raise CheemsInputError(f"expected {expected}, found {found}", file=str(file), field=where)


def _is_count_key(key: Any) -> bool:
    """A key that names a count in eval and curate reports: ``pairs``, ``n_prompts``, ``n_tied``, ..."""
    return isinstance(key, str) and (key == "pairs" or key.startswith("n_"))


def _check_counts(node: Any, path: Path, at: tuple = ()) -> None:
    """Every count (:func:`_is_count_key`) anywhere in ``node`` is an integer or null (a judge's
    report also lists its judged ``pairs``): a count of ``"x"`` is one error naming it, not a
    dash on the page."""
    if isinstance(node, dict):
        for key, value in node.items():
            listed = key == "pairs" and isinstance(value, list)
            if _is_count_key(key) and not (value is None or is_integer(value) or listed):
                found = f"{value!r}" if isinstance(value, (str, float)) else f"a {type(value).__name__}"
                raise CheemsInputError(f"expected an integer or null (a count), found {found}", file=str(path),
                                       field=".".join(map(str, (*at, key))))
            _check_counts(value, path, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_counts(value, path, (*at, i))


def _check_shape(kind: str, data: Any, path: Path) -> None:
    """The keys each section reads, checked once here: a file missing them is one error naming it."""
    for where, expected in REQUIRED[kind]:
        _require(data, where, expected, path)
    if kind in ("eval", "curate"):
        _check_counts(data, path)
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
            _require(point, ("expected_gold",), NUMBER_OR_NULL, path, at=f"curve.{i}.")
    elif kind == "bias":
        for name, table in data.items():
            _require(data, (name, "by_length"), "a list", path)
            if not all(isinstance(r, dict) for r in table["by_length"]):
                raise CheemsInputError("expected a list of bins", file=str(path), field=f"{name}.by_length")


def read_result(path: str | Path, index: int = 0) -> Source:
    """Read one result file and tell its kind; a file that cannot be read, is not JSON / JSON Lines or is
    not a known result is one CheemsInputError naming it."""
    path = Path(path)
    if path.is_dir():
        return _read_experiment_folder(path, index)
    data = _load_json(path)
    kind = classify(data, path)
    _check_shape(kind, data, path)
    return Source(index, path, kind, data)


def _read_experiment_folder(path: Path, index: int) -> Source:
    from cheems.report.study import read_study

    if not (path / "results.jsonl").exists():
        raise CheemsInputError("is a folder without results.jsonl: expected a JSON result file or an experiment "
                               "folder (cheems experiment run -o DIR)", file=str(path))
    return Source(index, path, "experiment", read_study(path))


def label_sources(sources: list[Source]) -> None:
    """Each source's label: the model (eval, bon), ``a vs b`` (compare), the stage (curate), else the file's
    stem; labels that repeat get the file name added, then the input's number."""
    for s in sources:
        d = s.data
        name = d.get("model") if isinstance(d, dict) else None
        if s.kind == "compare":
            name = f"{compare_side(s, 'a')} vs {compare_side(s, 'b')}"
        elif s.kind == "curate":
            name = f"{d['stage']}: {s.path.name}"
        elif s.kind == "experiment":
            name = s.path.resolve().name
        s.label = str(name) if isinstance(name, str) and name else s.path.stem
    for attempt in (lambda s: f"{s.label} ({s.path.name})", lambda s: f"{s.label} #{s.index + 1}"):
        counts: dict[tuple[str, str], int] = {}
        for s in sources:
            counts[s.kind, s.label] = counts.get((s.kind, s.label), 0) + 1
        for s in sources:
            if counts[s.kind, s.label] > 1:
                s.label = attempt(s)


def data_texts(sources: list[Source]) -> list[str]:
    """The data's own text, which tells the language of its readers: the inputs' labels (model names, ``a vs b``,
    stages, experiment folders), subsets and categories (of evaluations, best-of-n curves, comparisons, curation
    stages and experiments), annotator groups, downstream metrics and the experiments' datasets. (The results
    hold no prompts: those stay in the benchmark.)"""
    texts: list = [s.label for s in sources]
    for s in sources:
        d = s.data if isinstance(s.data, dict) else {}
        if s.kind == "eval":
            texts += list(d["subsets"])
            texts += [c for sub in d["subsets"].values() if isinstance(sub, dict)
                      for c in (sub.get("categories") or {})]
        elif s.kind in ("bon", "compare"):
            texts += list(d.get("categories") or {})
        elif s.kind == "curate":
            texts += list(d.get("by_category") or {})
        elif s.kind == "bias":
            texts += list(d)
        elif s.kind == "correlate":
            texts += [m for m in [*(d.get("models") or []), *(d.get("downstream_metrics") or [])] if isinstance(m, str)]
        elif s.kind == "experiment":
            texts += [*d["subsets"], *d["categories"], *(row["dataset"] for t in d["tables"] for row in t["rows"])]
    return [str(x) for x in texts]


def compare_side(s: Source, side: str) -> str:
    """The name of model ``a`` or ``b`` of a compare report (``a`` / ``b`` when the report has none)."""
    name = s.data.get(side)
    return name if isinstance(name, str) and name else side
