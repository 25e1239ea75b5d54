"""The public calls over the reports of evaluations: compare, correlate, write_report.

``compare`` and ``correlate`` need numpy/scipy alone; ``write_report`` draws its plots with
matplotlib (the ``plot`` extra)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

from cheems.api.data_files import PathOrPaths, as_paths
from cheems.common_settings import StatisticsSettings
from cheems.records import CheemsInputError
from cheems.settings import as_settings

__all__ = ["compare", "correlate", "read_eval_report", "read_items", "read_json", "write_report"]


def read_json(path: str | os.PathLike) -> object:
    """The JSON value of the file ``path``. A file that is missing, a folder, not UTF-8, not JSON
    (named with its line), or holds a lone surrogate or nests too deep is one error naming it."""
    from cheems.io import check_input_file, json_value_problem, read_text_file

    check_input_file(path)
    text = read_text_file(path, expected="a JSON file")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheemsInputError(f"not a JSON file: {e.msg} (column {e.colno})", file=str(path), line=e.lineno) from None
    except RecursionError:
        raise CheemsInputError("nests too deep to read (lists and objects within each other)", file=str(path)) from None
    problem = json_value_problem(value)
    if problem is not None:
        raise CheemsInputError(problem[1], file=str(path), field=problem[0] or None)
    return value


def read_eval_report(path: str | os.PathLike) -> dict:
    """The evaluation report (``cheems eval --json``, :func:`cheems.evaluate`'s ``report``) in ``path``."""
    from cheems.metrics import check_ties

    report = read_json(path)
    if not isinstance(report, dict) or "subsets" not in report:
        raise CheemsInputError("not an evaluation report (the report cheems.evaluate makes, which `cheems eval` "
                               "writes as JSON)", file=str(path))
    try:
        check_ties(report.get("ties", "official"))
    except CheemsInputError as e:
        raise e.located(file=str(path)) from None
    return report


def read_items(report_path: str | os.PathLike) -> list[dict]:
    """The per-prompt items written beside an evaluation report (``NAME.items.jsonl``)."""
    from cheems.io import sidecar

    path = sidecar(report_path, "items")
    if not path.exists():
        raise CheemsInputError(f"no per-prompt items beside it ({path.name}): write the report with its items (as "
                               "cheems.evaluate's report and a current `cheems eval` do)", file=str(report_path))
    rows = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise CheemsInputError(f"invalid JSON: {e}", file=str(path), line=k) from None
    return rows


def compare(a: str | os.PathLike, b: str | os.PathLike, *,
            statistics: StatisticsSettings | Mapping | None = None) -> dict:
    """Test whether reward model B is really better than A on the same benchmark.

    Differences of every metric with a paired bootstrap over prompts (CI, p-value), McNemar's
    exact test on per-pair correctness, Holm's correction across categories
    (:func:`cheems.report.compare.compare_reports`).

    Args:
        a: The evaluation report of model A (``cheems eval --json``), its items file beside it.
        b: The report of model B on the same benchmark.
        statistics: The statistics (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``bootstrap``, paired bootstrap resamples over prompts (at
            least 1; default 2000); ``seed`` of the paired bootstrap. Each report keeps its own
            ``ties``.

    Returns:
        The comparison: ``a``, ``b``, per subset and metric and ``overall`` the values, their
        difference, its CI and p-value; ``mcnemar``; ``categories`` with Holm-adjusted p-values.

    Raises:
        CheemsInputError: A bad ``statistics`` setting (``bootstrap`` below 1, ``ties``), a file
            that is not an evaluation report or lacks its items, or two reports of different
            benchmarks.
    """
    from cheems.metrics import check_bootstrap, check_seed
    from cheems.records import Setting
    from cheems.report.compare import compare_reports

    stats = as_settings(StatisticsSettings, statistics, "statistics", default=StatisticsSettings(bootstrap=2000),
                        uses=("bootstrap", "seed"))
    check_bootstrap(stats.bootstrap, minimum=1, field=Setting("bootstrap"))
    check_seed(stats.seed)
    report_a, report_b = read_eval_report(a), read_eval_report(b)
    return compare_reports(report_a, read_items(a), report_b, read_items(b), n_bootstrap=stats.bootstrap,
                           seed=stats.seed)


def _model_reports(paths: list) -> dict[str, list[dict]]:
    """The eval / bon reports by model name; a report without a model or with a metric that is
    not a number is one error naming the file and the field."""
    from cheems.report.correlate import benchmark_metrics

    reports: dict[str, list[dict]] = {}
    for path in paths:
        r = read_json(path)
        if not isinstance(r, dict) or not r.get("model"):
            raise CheemsInputError("not an eval or bon report with a \"model\"", file=str(path))
        try:
            benchmark_metrics(r)
        except CheemsInputError as e:
            raise e.located(file=str(path)) from None
        reports.setdefault(str(r["model"]), []).append(r)
    return reports


def correlate(results: PathOrPaths, downstream: str | os.PathLike, *,
              statistics: StatisticsSettings | Mapping | None = None) -> dict:
    """Correlate every benchmark metric with every downstream metric across reward models.

    Pearson, Spearman and Kendall with bootstrap CIs over models
    (:func:`cheems.report.correlate.correlate`).

    Args:
        results: Evaluation or best-of-n reports, one model each (their ``model`` names it).
        downstream: A JSON file ``{model: {metric: value}}``.
        statistics: The statistics (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``bootstrap`` resamples over models; ``seed`` of the bootstrap.

    Returns:
        ``models``, ``downstream_metrics``, ``correlations`` (benchmark metric -> downstream metric ->
        ``pearson`` / ``spearman`` / ``kendall``, each ``r`` and its CI) and ``left_out`` (models
        missing a report or downstream results).

    Raises:
        CheemsInputError: A bad ``statistics`` setting (``ties`` included), a file that is not
            such a report, a downstream file of another shape, or a metric that is not a number.

    Paper: §6.2 and Figure 5 (correlation between RM benchmarks and downstream tasks).
    """
    from cheems.metrics import check_seed
    from cheems.report.correlate import correlate as correlations

    stats = as_settings(StatisticsSettings, statistics, "statistics", uses=("bootstrap", "seed"))
    check_seed(stats.seed)
    reports = _model_reports(as_paths(results))
    down = read_json(downstream)
    if not isinstance(down, dict) or not all(isinstance(v, dict) for v in down.values()):
        raise CheemsInputError("must be a JSON object {model: {metric: value}}", file=str(downstream))
    try:
        return correlations(reports, down, n_bootstrap=stats.bootstrap, seed=stats.seed)
    except CheemsInputError as e:
        raise e.located(file=str(downstream)) from None


def write_report(results: PathOrPaths, output: str | os.PathLike, *, markdown: str | os.PathLike | None = None,
                 lang: str | None = None, title: str | None = None) -> list[Path]:
    """Write one static HTML page (plots inline, readable offline) from the reports of a study.

    Args:
        results: Any mix of eval, judge-eval, best-of-n, correlate, compare, curate and
            annotator-bias reports, and training logs (``train_log.jsonl``).
        output: The HTML page to write.
        markdown: Also write the page as Markdown (PNG plots beside it) here.
        lang: The page's language, ``zh`` or ``en`` (default: Chinese when the data's names or
            categories hold Chinese, else English).
        title: The page's title.

    Returns:
        The paths written (the page, and the Markdown with its plots).

    Raises:
        CheemsInputError: A file that cannot be read or is no report cheems knows, an unknown
            language, or an output that is an input.
    """
    from cheems.report.page import build_report, write_report as write_page

    built = build_report([str(r) for r in as_paths(results)], lang=lang, title=title)
    return write_page(built, output, markdown)
