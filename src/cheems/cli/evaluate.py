"""`cheems eval` and `cheems score`: a scorer on benchmark files, as a report or a SCORES file."""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

import cheems
from cheems.cli.app import FORMAT_HELP, app
from cheems.cli.console import (data_paths, err, judge_backend_for, out, print_reworded, print_skipped, progress,
                                reports_input_errors)
from cheems.cli.eval_tables import print_eval, print_judge, report_encoding
from cheems.cli.flags import build_settings, settings_flags
from cheems.formats import RepeatedRows
from cheems.records import CheemsInputError
from cheems.scoring.bench_judge import JudgeConfig
from cheems.scoring.local_judge import JudgeModelSettings
from cheems.scoring.model_settings import ModelSettings

__all__ = ["Baseline", "Ties", "eval_", "print_row_notes", "score"]

JUDGE_FLAGS = ("model", "api_base", "api_key", "concurrency", "timeout", "max_retries", "max_reply_bytes",
               "cache_path")
"""The JudgeConfig settings `eval --judge` takes as flags (the rest keep their defaults)."""


class Baseline(str, Enum):
    length = "length"
    random = "random"


class Ties(str, Enum):
    official = "official"
    strict = "strict"


@app.command("eval")
@reports_input_errors
@settings_flags(JudgeConfig, into="judge_flags", only=JUDGE_FLAGS, when="--judge", plain=("model",),
                names={"model": "--judge", "cache_path": "--cache"})
@settings_flags(JudgeModelSettings, into="local_flags", only=("language", "ties"), when="--judge-model",
                names={"language": "--judge-language", "ties": "--judge-ties"})
@settings_flags(ModelSettings, into="model_flags", when="--model or --judge-model",
                plain=("backend", "trust_remote_code"))
def eval_(
    bench: List[Path] = typer.Argument(..., help="Benchmark files (rows with rank); a file's stem "
                                       "names the subset of rows without a 'subset' field."),
    scores: Optional[Path] = typer.Option(None, "--scores", help="SCORES file: rows {prompt_id, response_id, score}."),
    scorer: Optional[Baseline] = typer.Option(None, "--scorer", help="A baseline scorer instead of a scores file."),
    model: Optional[Path] = typer.Option(None, "--model", help="Score with this reward model folder."),
    judge_model: Optional[Path] = typer.Option(None, "--judge-model", help="Judge every pair with this local causal "
                                               "LM folder, by its next-token verdict probabilities (no sampling)."),
    judge_backend: str = typer.Option("api", help="With --judge: api (an endpoint at --api-base) or vllm "
                                      "(--judge is a local model folder, run offline on the GPU)."),
    one_order: bool = typer.Option(False, "--one-order", help="With --judge or --judge-model: one random order per "
                                   "pair (seeded by --seed), as the official evaluator; default is both orders."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the full report as JSON."),
    ties: Ties = typer.Option(Ties.official, help="official: a tied pair counts wrong for Accuracy but breaks "
                              "Exact Match only when some pair is strictly reversed (the official evaluator); "
                              "strict: a tie is wrong in both. Judges: a C verdict is wrong in both."),
    seed: int = typer.Option(0, help="Seed of the random scorer and of the bootstrap."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the 95% CI (0 = none)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    dedupe: bool = typer.Option(False, "--dedupe", help="Count a row that repeats an earlier row exactly once "
                                "(default: every row is an item, as the benchmarks' own evaluators count)."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
    name: Optional[str] = typer.Option(None, "--name", help="The model's name in the report (default: its source)."),
    model_flags: dict = None, judge_flags: dict = None, local_flags: dict = None,
):
    """Accuracy, Exact Match and Overall of a scorer on CheemsBench-style files (paper §3.3)."""
    bench, items_out = _checked_paths(bench, json_out, bootstrap, [scores, judge_flags.get("cache_path")])
    local = _judge_model_settings(judge_model, local_flags, one_order, [model, scores, scorer, judge_flags])
    judge, generate = _judge_config(judge_flags, judge_backend, one_order, seed, model_flags)
    settings = build_settings(ModelSettings, model_flags)
    label = "judging" if judge or local else "scoring" if model is not None else None
    with (progress(label) if label else contextlib.nullcontext(None)) as bar:
        result = cheems.evaluate(bench, scores=scores, baseline=scorer.value if scorer else None, model=model,
                                 model_settings=settings, judge=judge, generate=generate, judge_model=judge_model,
                                 judge_settings=local, n_bootstrap=bootstrap, seed=seed, skip_invalid=skip_invalid,
                                 progress=bar, notify=err.print, ties=ties.value, fmt=fmt, dedupe=dedupe, name=name)
    _print_evaluation(result, json_out, items_out, judge is not None or local is not None)


def _checked_paths(bench: list[Path], json_out: Path | None, bootstrap: int, inputs: list) -> tuple[list, Path | None]:
    """(benchmark files, items file beside --json) after checking --bootstrap and that no
    output overwrites an input."""
    from cheems.io import check_outputs, sidecar
    from cheems.metrics import check_bootstrap

    check_bootstrap(bootstrap, field="--bootstrap")
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
@settings_flags(ModelSettings, into="model_flags")
def score(
    bench: List[Path] = typer.Argument(..., help="Files with prompts and responses."),
    output: Path = typer.Option(..., "-o", "--output", help="SCORES file to write (JSONL)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Reward model folder (transformers checkpoint)."),
    scorer: Optional[Baseline] = typer.Option(None, "--scorer", help="A baseline scorer instead of a model."),
    ray: bool = typer.Option(False, "--ray", help="Score on a Ray cluster, one model replica per GPU "
                             "(RAY_ADDRESS or a cluster started with `ray start`; else a local instance)."),
    replicas: Optional[int] = typer.Option(None, help="With --ray: how many replicas (default: one per GPU)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start again instead of resuming OUTPUT."),
    seed: int = typer.Option(0, help="Seed of the random scorer."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
    model_flags: dict = None,
):
    """Score every response and write rows {prompt_id, response_id, score}.

    With --model, rows are appended batch by batch: an interrupted run, started again with the
    same command, resumes where it stopped.
    """
    if (model is None) == (scorer is None):
        raise CheemsInputError("give exactly one of --model DIR or --scorer length|random")
    settings = build_settings(ModelSettings, model_flags)
    with progress("scoring on Ray" if ray else "scoring") if model else contextlib.nullcontext(None) as bar:
        run = cheems.score(data_paths(bench), output, model=model, baseline=scorer.value if scorer else None,
                           settings=settings, ray=ray, replicas=replicas, overwrite=overwrite, seed=seed,
                           skip_invalid=skip_invalid, fmt=fmt, progress=bar, notify=err.print)
    print_skipped(run.errors)
    print_reworded(run.reworded)
    print_row_notes(run.repeated, run.identical, "scored")
    if scorer is not None:
        out.print(f"scored {run.scored} responses of {run.prompts} prompts with {scorer.value} -> {output}")
        return
    if run.encoding is not None:
        report_encoding(run.encoding, run.truncation)
    resumed = f" ({run.resumed} already there)" if run.resumed else ""
    where = f"on {run.replicas} Ray replica(s)" if ray else f"[{run.layout}]"
    out.print(f"scored {run.scored} responses{resumed} of {run.prompts} prompts with {model} {where} -> {output}")
