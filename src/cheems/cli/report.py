"""`cheems bon`, `cheems compare`, `cheems correlate` and `cheems report`: what a team reads after
evaluating (paper §6.2)."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

import cheems
from cheems.cli.app import SERVER_CLIENT_HELPS, app
from cheems.cli.console import err, fmt, out, print_skipped, progress, refuse_no_rows, reports_input_errors, say
from cheems.cli.flags import build_settings, flag_name, settings_flags
from cheems.common_settings import (ExtraOutputs, OutputSettings, ReadSettings, ScorerSettings, StatisticsSettings,
                                    TruncationSettings)
from cheems.records import CheemsInputError
from cheems.scoring.bench_judge import JudgeConfig
from cheems.scoring.local_judge import JudgeModelSettings
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.remote_scorer import RemoteScorerSettings
from cheems.settings import LARGEST_INTEGER

__all__ = ["bon", "compare", "correlate", "report"]


def _ns(text: str) -> list[int]:
    try:
        ns = [int(x) for x in text.replace("，", ",").split(",") if x.strip()]
    except ValueError:
        raise CheemsInputError(f"must be comma-separated positive integers, got {text!r}", field="-n") from None
    if not ns or min(ns) < 1 or max(ns) > LARGEST_INTEGER:
        raise CheemsInputError(f"must be comma-separated positive integers of at most 64 bits, got {text!r}",
                               field="-n")
    return ns


@reports_input_errors
@settings_flags(JudgeConfig, into="judge_flags", only=("model", "api_base", "api_key", "concurrency", "max_reply_bytes",
                                                      "cache_path"),
                when="--judge", plain=("model",), names={"model": "--judge", "cache_path": "--cache"})
@settings_flags(JudgeModelSettings, into="local_flags", only=("language", "ties"), when="--judge-model",
                names={"language": "--judge-language", "ties": "--judge-ties"})
@settings_flags(ModelSettings, into="model_flags", when="--model or --judge-model",
                plain=("backend", "trust_remote_code"), exclude=("truncation",))
@settings_flags(TruncationSettings, into="cut_flags")
@settings_flags(RemoteScorerSettings, into="server_flags", when="--server", plain=("server",),
                helps=SERVER_CLIENT_HELPS)
@settings_flags(ScorerSettings, into="scorer_flags", only=("scores", "model", "judge_model", "name"),
                helps={"scores": "The reward model's SCORES file", "model": "Or: a reward model folder to score with",
                       "judge_model": "Judge the pick against --baseline with this local causal LM folder, by its "
                       "verdict probabilities",
                       "name": "The model's name in the report (default: the scores file's stem or the model "
                       "folder's name)"})
@settings_flags(StatisticsSettings, into="stats_flags", only=("bootstrap", "seed"),
                helps={"bootstrap": "Bootstrap resamples over prompts for the 95% CI", "seed": "Seed of the bootstrap"})
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid",))
@settings_flags(ExtraOutputs, into="extra_flags", only=("json",), helps={"json": "Write the curve as JSON"})
def bon(candidates: List[Path] = typer.Argument(..., help="Prompt rows with N candidate responses each."),
        gold: Optional[Path] = typer.Option(None, "--gold", help="SCORES-shaped rows {prompt_id, response_id, "
                                            "score}: each response's true quality (a number, or +1/-1 win/loss "
                                            "against a baseline)."),
        n: str = typer.Option("1,2,4,8,16,32", "-n", help="Comma-separated n of best-of-n."),
        baseline: Optional[str] = typer.Option(None, "--baseline", help="With --judge or --judge-model: the id of "
                                               "the baseline response in every prompt."),
        judge_flags: dict = None, model_flags: dict = None, local_flags: dict = None, server_flags: dict = None,
        cut_flags: dict = None, scorer_flags: dict = None, stats_flags: dict = None, read_flags: dict = None,
        extra_flags: dict = None):
    """Best-of-n (paper §6.2): the expected gold quality of the reward model's pick among n of the
    N candidates, exact over all n-subsets, per category and overall with bootstrap CIs; and/or
    the judged win rate of its best-of-N pick against a baseline response."""
    from cheems.io import check_outputs, write_json

    pick, stats = build_settings(ScorerSettings, scorer_flags), build_settings(StatisticsSettings, stats_flags)
    json_out, read = build_settings(ExtraOutputs, extra_flags).json, build_settings(ReadSettings, read_flags)
    check_outputs([json_out], [*candidates, gold, pick.scores, judge_flags.get("cache_path")])
    for path in (*candidates, gold, pick.scores):
        refuse_no_rows(path)
    server, ns = server_settings(server_flags), _ns(n)
    judge, local = _bon_judges(judge_flags, local_flags, pick.judge_model, stats.seed)
    cut = build_settings(TruncationSettings, cut_flags).scoring_side()
    scoring = pick.model or server or judge or local
    with progress("scoring / judging") if scoring else contextlib.nullcontext(None) as bar:
        report, errors = cheems.best_of_n(candidates, gold=gold, ns=ns, scorer=pick, statistics=stats, read=read,
                                          server=server, model_settings=build_settings(ModelSettings,
                                                                                       {**model_flags, **cut}),
                                          judge=judge, judge_settings=local, baseline=baseline, progress=bar,
                                          notify=say)
    print_skipped(errors)
    if json_out:
        write_json(json_out, report)
    _print_bon(report)


def server_settings(server_flags: dict) -> RemoteScorerSettings | None:
    """The settings of ``--server URL`` and its flags (None without it)."""
    s = build_settings(RemoteScorerSettings, server_flags)
    if s.server is None:
        if server_flags:
            given = [flag_name(k) for k in sorted(server_flags)]
            raise CheemsInputError(f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} with --server URL")
        return None
    return s


def _bon_judges(judge_flags: dict, local_flags: dict, judge_model: Path | None,
                seed: int) -> tuple[JudgeConfig | None, JudgeModelSettings | None]:
    """(the API judge's config, the local judge's settings) of `bon`: each None when not asked for."""
    local = build_settings(JudgeModelSettings, local_flags)  # a bad value is named under its flag first
    if local_flags and judge_model is None:
        raise CheemsInputError("--judge-language and --judge-ties go with --judge-model DIR")
    judge = build_settings(JudgeConfig, {**judge_flags, "seed": seed}) if "model" in judge_flags else None
    return judge, local if judge_model is not None else None


def _print_bon(report: dict) -> None:
    if report.get("repeated_score_rows"):
        err.print(f"note: {report['repeated_score_rows']} row(s) of the scores file repeat an earlier row's score; "
                  "each counts once")
    if "curve" in report:
        _print_curve(report)
    if "judged" in report:
        j = report["judged"]
        ci = f" [{j['ci'][0]:.4f}, {j['ci'][1]:.4f}]" if j["ci"] else ""
        how = "verdict probabilities averaged over both orders" if "judge_backend" in j else "both orders"
        out.print(f"best-of-N pick vs {j['baseline']}, judged by {j['judge']} in {how}: win rate "
                  f"{fmt(j['win_rate'])}{ci} over {j['scored_prompts']} prompts; position consistency "
                  f"{fmt(j['position_consistency'])}, first-position rate {fmt(j['first_position_rate'])}")


def _print_curve(report: dict) -> None:
    table = Table(title=f"Best-of-n: {report['model']} ({report['prompts']} prompts)")
    for col in ("n", "prompts", "expected gold", "95% CI") + (("win rate",) if report["gold_is_win_loss"] else ()):
        table.add_column(col, justify="right")
    for p in report["curve"]:
        ci = f"[{p['ci'][0]:.4f}, {p['ci'][1]:.4f}]" if p["ci"] else "-"
        row = [str(p["n"]), str(p["prompts"]), fmt(p["expected_gold"]), ci]
        if report["gold_is_win_loss"]:
            row.append(fmt(p.get("win_rate")))
        table.add_row(*row)
    out.print(table)
    for p in report["curve"]:
        if p["left_out"]:
            err.print(f"n={p['n']}: {p['left_out']} prompt(s) have fewer than {p['n']} candidates and are left out")


@reports_input_errors
@settings_flags(StatisticsSettings, into="stats_flags", only=("bootstrap", "seed"), defaults={"bootstrap": 2000},
                helps={"bootstrap": "Paired bootstrap resamples over prompts", "seed": "Seed of the paired bootstrap"})
@settings_flags(ExtraOutputs, into="extra_flags", only=("json",), helps={"json": "Write the comparison as JSON"})
def compare(a: Path = typer.Argument(..., help="`cheems eval --json` report of model A."),
            b: Path = typer.Argument(..., help="Report of model B on the same benchmark."),
            stats_flags: dict = None, extra_flags: dict = None):
    """Is B really better than A? Differences with a paired bootstrap (CI, p-value), McNemar's exact
    test on per-pair correctness, Holm's correction across categories."""
    from cheems.io import check_outputs, sidecar, write_json

    stats, json_out = build_settings(StatisticsSettings, stats_flags), build_settings(ExtraOutputs, extra_flags).json
    check_outputs([json_out], [a, b, sidecar(a, "items"), sidecar(b, "items")])
    result = cheems.compare(a, b, statistics=stats)
    if json_out:
        write_json(json_out, result)
    _print_compare(result)


def _print_compare(result: dict) -> None:
    from cheems.report.page_content import p_value_text

    scorers = result.get("scorers") or {}
    kinds = {side: f" ({kind})" for side, kind in scorers.items() if kind and len(set(scorers.values())) > 1}
    table = Table(title=f"A = {result['a']}{kinds.get('a', '')} vs B = {result['b']}{kinds.get('b', '')}: difference "
                  f"B − A (paired bootstrap over prompts, {result['n_bootstrap']} resamples)")
    for col in ("", "A", "B", "B − A", "95% CI of B − A", "p"):
        table.add_column(col, justify="left" if not col else "right")
    rows = [(f"{name} {metric}", d) for name, s in result["subsets"].items() for metric, d in s.items()]
    for label, d in rows + [("Overall", result["overall"])]:
        table.add_row(label, fmt(d["a"]), fmt(d["b"]), f"{d['difference']:+.4f}",
                      f"[{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}]", p_value_text(d["p_value"], result["n_bootstrap"]))
    out.print(table)
    m = result["mcnemar"]
    out.print(f"McNemar (exact, per pair): right only for A {m['only_a']}, only for B {m['only_b']}, "
              f"p = {m['p_value']:.4g}")
    worst = sorted(result["categories"].items(), key=lambda kv: kv[1]["p_holm"])[:5]
    for cat, c in worst:
        out.print(f"  {cat}: only A {c['only_a']}, only B {c['only_b']}, p = {c['p_value']:.4g}, "
                  f"Holm-adjusted {c['p_holm']:.4g}")


@reports_input_errors
@settings_flags(StatisticsSettings, into="stats_flags", only=("bootstrap", "seed"),
                helps={"bootstrap": "Bootstrap resamples over models", "seed": "Seed of the bootstrap"})
@settings_flags(ExtraOutputs, into="extra_flags", only=("json",), helps={"json": "Write the correlations as JSON"})
def correlate(results: List[Path] = typer.Argument(..., help="eval / bon reports, one model each (its "
                                                   "\"model\" names it)."),
              downstream: Path = typer.Option(..., "--downstream", help="JSON {model: {metric: value}}."),
              stats_flags: dict = None, extra_flags: dict = None):
    """Pearson, Spearman and Kendall between every benchmark metric and every downstream metric
    across reward models (paper Fig. 5), with bootstrap CIs over models."""
    from cheems.io import check_outputs, write_json

    stats, json_out = build_settings(StatisticsSettings, stats_flags), build_settings(ExtraOutputs, extra_flags).json
    check_outputs([json_out], [*results, downstream])
    result = cheems.correlate(results, downstream, statistics=stats)
    if json_out:
        write_json(json_out, result)
    table = Table(title=f"Correlation across {len(result['models'])} reward models (Pearson / Spearman / Kendall)")
    table.add_column("benchmark metric")
    for d in result["downstream_metrics"]:
        table.add_column(d, justify="right")
    for bname, row in result["correlations"].items():
        table.add_row(bname, *(" / ".join(fmt(row[d][m]["r"], 2) for m in ("pearson", "spearman", "kendall"))
                               for d in result["downstream_metrics"]))
    out.print(table)
    if result["left_out"]:
        err.print(f"left out (a report or downstream results missing): {', '.join(result['left_out'])}")


@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "The HTML report (one file, readable offline)"})
@settings_flags(ExtraOutputs, into="extra_flags", only=("markdown",))
def report(results: List[Path] = typer.Argument(..., help="Any mix of eval, judge-eval, bon, correlate, compare, "
                                                "curate and analyze-bias reports, and train_log.jsonl files."),
           lang: Optional[str] = typer.Option(None, "--lang", help="The page's language: zh or en (default: Chinese "
                                              "when the data's names or categories hold Chinese, else English)."),
           title: Optional[str] = typer.Option(None, "--title", help="The page's title."),
           out_flags: dict = None, extra_flags: dict = None):
    """One static HTML page (plots inline, no network) from the reports of a study."""
    output, markdown = build_settings(OutputSettings, out_flags).output, extra_flags.get("markdown")
    with _font_warning_in_one_line():
        cheems.write_report(results, output, markdown=markdown, lang=lang, title=title)
    out.print(f"report -> {output}" + (f" (and {markdown})" if markdown else ""))


@contextlib.contextmanager
def _font_warning_in_one_line():
    """The plots' `MissingFontWarning` printed as one ``warning:`` line; other warnings shown as Python shows them."""
    from cheems.report.plots import MissingFontWarning

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield
    finally:
        for w in caught:
            if issubclass(w.category, MissingFontWarning):
                err.print(f"warning: {w.message}", style="yellow", soft_wrap=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno, line=w.line)


for _name, _fn in (("bon", bon), ("compare", compare), ("correlate", correlate), ("report", report)):
    app.command(_name)(_fn)
