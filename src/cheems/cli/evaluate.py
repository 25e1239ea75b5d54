"""`cheems eval` and `cheems score`: a scorer on benchmark files, as a report or a SCORES file."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import List, Optional

import typer

import cheems
from cheems.cli.app import app
from cheems.cli.console import (data_paths, err, judge_backend_for, out, print_reworded, print_skipped, progress,
                                reports_input_errors, say)
from cheems.cli.eval_tables import print_eval, print_judge, report_encoding
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import (ExtraOutputs, OutputSettings, ReadSettings, ScorerSettings, StatisticsSettings,
                                    TruncationSettings)
from cheems.formats import RepeatedRows
from cheems.records import CheemsInputError
from cheems.scoring.bench_judge import JudgeConfig
from cheems.scoring.local_judge import JudgeModelSettings
from cheems.scoring.model_settings import ModelSettings

__all__ = ["SCORER_HELPS", "eval_", "print_row_notes", "score"]

JUDGE_FLAGS = ("model", "api_base", "api_key", "concurrency", "timeout", "max_retries", "max_reply_bytes",
               "cache_path")
"""The JudgeConfig settings `eval --judge` takes as flags (the rest keep their defaults)."""


SCORER_HELPS = {"scorer": "A baseline scorer instead of a scores file", "model": "Score with this reward model folder"}


@app.command("eval")
@reports_input_errors
@settings_flags(JudgeConfig, into="judge_flags", only=JUDGE_FLAGS, when="--judge", plain=("model",),
                names={"model": "--judge", "cache_path": "--cache"})
@settings_flags(JudgeModelSettings, into="local_flags", only=("language", "ties"), when="--judge-model",
                names={"language": "--judge-language", "ties": "--judge-ties"})
@settings_flags(ModelSettings, into="model_flags", when="--model or --judge-model",
                plain=("backend", "trust_remote_code"), exclude=("truncation",))
@settings_flags(TruncationSettings, into="cut_flags")
@settings_flags(ScorerSettings, into="scorer_flags", helps=SCORER_HELPS)
@settings_flags(StatisticsSettings, into="stats_flags", helps={"seed": "Seed of the random scorer, of --one-order "
                                                                       "and of the bootstrap"})
@settings_flags(ReadSettings, into="read_flags")
@settings_flags(ExtraOutputs, into="extra_flags", only=("json",), helps={"json": "Write the full report as JSON"})
def eval_(
    bench: List[Path] = typer.Argument(..., help="Benchmark files (rows with rank); a file's stem "
                                       "names the subset of rows without a 'subset' field."),
    one_order: bool = typer.Option(False, "--one-order", help="With --judge or --judge-model: one random order per "
                                   "pair (seeded by --seed), as the official evaluator; default is both orders."),
    model_flags: dict = None, judge_flags: dict = None, local_flags: dict = None, cut_flags: dict = None,
    scorer_flags: dict = None, stats_flags: dict = None, read_flags: dict = None, extra_flags: dict = None,
):
    """Accuracy, Exact Match and Overall of a scorer on CheemsBench-style files (paper §3.3)."""
    stats, read = build_settings(StatisticsSettings, stats_flags), build_settings(ReadSettings, read_flags)
    pick, json_out = build_settings(ScorerSettings, scorer_flags), build_settings(ExtraOutputs, extra_flags).json
    bench, items_out = _checked_paths(bench, json_out, [pick.scores, judge_flags.get("cache_path")])
    local = _judge_model_settings(pick.judge_model, local_flags, one_order,
                                  [pick.model, pick.scores, pick.scorer, judge_flags])
    judge, generate = _judge_config(judge_flags, pick.judge_backend, one_order, stats.seed, model_flags)
    cut = build_settings(TruncationSettings, cut_flags).scoring_side()
    settings = build_settings(ModelSettings, {**model_flags, **cut})
    label = "judging" if judge or local else "scoring" if pick.model is not None else None
    with (progress(label) if label else contextlib.nullcontext(None)) as bar:
        result = cheems.evaluate(bench, scorer=pick, statistics=stats, read=read, model_settings=settings, judge=judge,
                                 generate=generate, judge_settings=local, progress=bar, notify=say)
    _print_evaluation(result, json_out, items_out, judge is not None or local is not None)


def _checked_paths(bench: list[Path], json_out: Path | None, inputs: list) -> tuple[list, Path | None]:
    """(benchmark files, items file beside --json) after checking that no output overwrites an input."""
    from cheems.io import check_outputs, sidecar

    bench, items_out = data_paths(bench), (sidecar(json_out, "items") if json_out else None)
    check_outputs([json_out, items_out], [*bench, *inputs])
    return bench, items_out


def _judge_model_settings(judge_model: Path | None, local_flags: dict, one_order: bool,
                          other_scorers: list) -> JudgeModelSettings | None:
    """The settings of `eval --judge-model` (None without it); refused beside another scorer."""
    settings = build_settings(JudgeModelSettings, {**local_flags, "both_orders": not one_order})
    if judge_model is None:
        if local_flags:
            raise CheemsInputError("--judge-language and --judge-ties go with --judge-model DIR")
        return None
    if any(other_scorers):
        raise CheemsInputError("--judge-model is the scorer itself; leave out --model, --judge, --scores and --scorer")
    return settings


def _judge_config(judge_flags: dict, judge_backend: str, one_order: bool, seed: int, model_flags: dict):
    """(JudgeConfig, generate) of `eval --judge` ((None, None) without --judge)."""
    if "model" not in judge_flags:
        return None, None
    api_base, generate = judge_backend_for(judge_backend, judge_flags["model"], judge_flags.get("api_base"),
                                           model_flags.get("trust_remote_code", False))
    given = {**judge_flags, "api_base": api_base, "both_orders": not one_order, "seed": seed}
    return build_settings(JudgeConfig, given), generate


def _print_evaluation(result, json_out: Path | None, items_out: Path | None, judged: bool) -> None:
    from cheems.io import outputs_together, write_json, write_jsonl

    if result.encoding is not None:
        report_encoding(result.encoding, result.truncation)
    if json_out:  # the report and its per-prompt items together, or neither
        with outputs_together(json_out, items_out) as (report_tmp, items_tmp):
            write_json(report_tmp, result.report)
            write_jsonl(items_tmp, result.items)
    print_skipped(result.errors)
    print_reworded(result.reworded)
    print_row_notes(result.repeated, result.identical, "evaluated")
    if result.repeated_scores:
        err.print(f"note: {result.repeated_scores} row(s) of the scores file repeat an earlier row's score; "
                  "each counts once")
    print_eval(result.report["model"], result.report)
    if judged:
        print_judge(result.report)


def print_row_notes(repeated: RepeatedRows, identical: int, what: str) -> None:
    """The notes on how the rows were counted (``what``: "evaluated" or "scored"): rows under an
    earlier row's id, each an item keyed ``id#n``, and rows holding responses of identical text."""
    if repeated.dropped:
        err.print(f"note: {repeated.dropped} row(s) repeat an earlier row exactly; each is counted once (--dedupe)",
                  soft_wrap=True)
    elif repeated.exact:
        hint = "; --dedupe counts them once" if what == "evaluated" else ""
        err.print(f"note: {repeated.exact} row(s) repeat an earlier row exactly; each is {what} as an item, "
                  f"keyed 'id#n' (its n-th row){hint}", soft_wrap=True)
    if repeated.differing:
        err.print(f"note: {repeated.differing} row(s) reuse an earlier row's prompt id with other content or "
                  f"other keys; each is {what} as an item, keyed 'id#n' (its n-th row)", soft_wrap=True)
    if identical:
        err.print(f"warning: {identical} row(s) hold two responses of identical text; a scorer gives them one "
                  "score, a tie under --ties", style="yellow", soft_wrap=True)


@app.command()
@reports_input_errors
@settings_flags(ModelSettings, into="model_flags", exclude=("truncation",))
@settings_flags(TruncationSettings, into="cut_flags")
@settings_flags(OutputSettings, into="out_flags", short={"output": "-o"}, required=("output",),
                helps={"output": "SCORES file to write (JSONL)", "overwrite": "Start again instead of resuming OUTPUT"})
@settings_flags(ScorerSettings, into="scorer_flags", only=("model", "scorer"),
                helps={"model": "Reward model folder (transformers checkpoint)",
                       "scorer": "A baseline scorer instead of a model"})
@settings_flags(StatisticsSettings, into="stats_flags", only=("seed",), helps={"seed": "Seed of the random scorer"})
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid", "format"))
def score(
    bench: List[Path] = typer.Argument(..., help="Files with prompts and responses."),
    ray: bool = typer.Option(False, "--ray", help="Score on a Ray cluster, one model replica per GPU "
                             "(RAY_ADDRESS or a cluster started with `ray start`; else a local instance)."),
    replicas: Optional[int] = typer.Option(None, help="With --ray: how many replicas (default: one per GPU)."),
    model_flags: dict = None, cut_flags: dict = None, out_flags: dict = None, scorer_flags: dict = None,
    stats_flags: dict = None, read_flags: dict = None,
):
    """Score every response and write rows {prompt_id, response_id, score}.

    With --model, rows are appended batch by batch: an interrupted run, started again with the
    same command, resumes where it stopped.
    """
    dest, pick = build_settings(OutputSettings, out_flags), build_settings(ScorerSettings, scorer_flags)
    stats, read = build_settings(StatisticsSettings, stats_flags), build_settings(ReadSettings, read_flags)
    model, scorer, output = pick.model, pick.scorer, dest.output
    if (model is None) == (scorer is None):
        raise CheemsInputError("give exactly one of --model DIR or --scorer length|random")
    cut = build_settings(TruncationSettings, cut_flags).scoring_side()
    settings = build_settings(ModelSettings, {**model_flags, **cut})
    with progress("scoring on Ray" if ray else "scoring") if model else contextlib.nullcontext(None) as bar:
        run = cheems.score(data_paths(bench), dest, scorer=pick, statistics=stats, read=read, settings=settings,
                           ray=ray, replicas=replicas, progress=bar, notify=say)
    _print_scored(run, scorer, model, output, ray)


def _print_scored(run, scorer: str | None, model, output, ray: bool) -> None:
    print_skipped(run.errors)
    print_reworded(run.reworded)
    print_row_notes(run.repeated, run.identical, "scored")
    if scorer is not None:
        out.print(f"scored {run.scored} responses of {run.prompts} prompts with {scorer} -> {output}")
        return
    if run.encoding is not None:
        report_encoding(run.encoding, run.truncation)
    resumed = f" ({run.resumed} already there)" if run.resumed else ""
    where = f"on {run.replicas} Ray replica(s)" if ray else f"[{run.layout}]"
    out.print(f"scored {run.scored} responses{resumed} of {run.prompts} prompts with {model} {where} -> {output}")
