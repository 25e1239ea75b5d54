"""The `cheems` commands: each parses its flags, calls the library, prints or writes."""

from __future__ import annotations

import contextlib
import os
import re
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from cheems.formats import FORMAT_NAMES
from cheems.cli.console import (err, flag, fmt, given, judge_backend_for, out, print_skipped, progress,
                                reports_input_errors)
from cheems.records import CheemsInputError
from cheems.scoring.bench_judge import JudgeConfig
from cheems.scoring.evaluate import ModelSettings
from cheems.training.config import TrainConfig

__all__ = ["app"]

FORMAT_HELP = f"Read every row as this format instead of detecting it row by row: {', '.join(FORMAT_NAMES)}."

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Build and evaluate Chinese reward models (Cheems).")
# ----------------------------------------------------------------------------- tasks

class Design(str, Enum):
    circular = "circular"
    cover = "cover"


@app.command()
@reports_input_errors
def tasks(
    file: Path = typer.Argument(..., help="Prompts with responses (any cheems format)."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the tasks (JSONL)."),
    design: Design = typer.Option(Design.circular, help="circular: the paper's adjacent triples; "
                                  "cover: add triples until every pair is covered."),
    seed: Optional[int] = typer.Option(None, help="Shuffle each prompt's responses with this seed "
                                       "before forming tasks (default: keep file order)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
):
    """Write the triple-wise annotation tasks of every prompt (paper §3.2)."""
    from cheems.formats import read_prompts
    from cheems.io import write_jsonl
    from cheems.graph import annotation_tasks
    from cheems.io import check_outputs

    check_outputs([output], [file])
    res = read_prompts(file, skip_invalid=skip_invalid, fmt=fmt)
    rows, coverage = annotation_tasks(res.prompts, design.value, seed=seed)
    write_jsonl(output, rows)
    print_skipped(res.errors)
    full = sum(c == 1.0 for c in coverage)
    mean = sum(coverage) / len(coverage) if coverage else 0.0
    out.print(f"{len(rows)} tasks for {len(res.prompts)} prompts -> {output}")
    out.print(f"pair coverage: mean {mean:.1%}, {full}/{len(coverage)} prompts fully covered")


# ----------------------------------------------------------------------------- rank

@app.command()
@reports_input_errors
def rank(
    annotations: List[Path] = typer.Argument(..., help="Annotation files: rows with comparisons and/or triples."),
    output: Path = typer.Option(..., "-o", "--output", help="Benchmark file to write (JSONL, rows with rank)."),
    keep_comparisons: bool = typer.Option(False, help="Keep the input comparisons in the output rows."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write the conflict report as JSON."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
):
    """Resolve annotation conflicts into partial rankings (paper Algorithm 1)."""
    from cheems.benchmark import rank_annotations

    ranked = rank_annotations(annotations, output, report=report, keep_comparisons=keep_comparisons,
                              skip_invalid=skip_invalid, fmt=fmt)
    print_skipped(ranked.errors)
    if not ranked.prompts:
        raise CheemsInputError("no valid prompts to rank; nothing written")
    _print_conflicts(ranked.report)
    out.print(f"wrote {len(ranked.prompts)} ranked prompts -> {output}")


def _print_conflicts(stats: dict) -> None:
    table = Table(title="Conflict resolution")
    for col in ("subset", "prompts", "comparisons", "conflicts", "conflict ratio", "merged cycles",
                "prompts with cycles", "tie groups"):
        table.add_column(col, justify="left" if col == "subset" else "right")
    for name, s in stats.items():
        table.add_row(name, str(s["prompts"]), str(s["comparisons"]), str(s["conflicts"]),
                      f"{s['conflict_ratio']:.4f}", str(s["merged_cycles"]), str(s["prompts_with_cycles"]),
                      str(s["tie_groups"]))
    out.print(table)
    uncompared = stats["total"]["uncompared_responses"]
    if uncompared:
        err.print(f"warning: {uncompared} response(s) appear in no comparison; they are ranked 0 (nothing is "
                  "known to beat them), so check the annotations cover every response", style="yellow")


# ----------------------------------------------------------------------------- eval

class Baseline(str, Enum):
    length = "length"
    random = "random"


class Ties(str, Enum):
    official = "official"
    strict = "strict"


class Backend(str, Enum):
    transformers = "transformers"
    vllm = "vllm"


@app.command("eval")
@reports_input_errors
def eval_(
    bench: List[Path] = typer.Argument(..., help="Benchmark files (rows with rank); a file's stem "
                                       "names the subset of rows without a 'subset' field."),
    scores: Optional[Path] = typer.Option(None, "--scores", help="SCORES file: rows {prompt_id, response_id, score}."),
    scorer: Optional[Baseline] = typer.Option(None, "--scorer", help="A baseline scorer instead of a scores file."),
    model: Optional[Path] = typer.Option(None, "--model", help="Score with this reward model folder."),
    backend: Optional[Backend] = typer.Option(None, help=flag(ModelSettings, "backend")),
    device: Optional[str] = typer.Option(None, help=flag(ModelSettings, "device", "--model")),
    dtype: Optional[str] = typer.Option(None, help=flag(ModelSettings, "dtype", "--model")),
    max_length: Optional[int] = typer.Option(None, help=flag(ModelSettings, "max_length", "--model")),
    batch_size: Optional[int] = typer.Option(None, help=flag(ModelSettings, "batch_size", "--model")),
    token_budget: Optional[int] = typer.Option(None, help=flag(ModelSettings, "token_budget", "--model")),
    truncation: Optional[str] = typer.Option(None, help=flag(ModelSettings, "truncation", "--model")),
    packing: Optional[bool] = typer.Option(None, "--packing/--no-packing",
                                           help=flag(ModelSettings, "packing", "--model")),
    share_prefix: Optional[bool] = typer.Option(None, "--share-prefix/--no-share-prefix",
                                                help=flag(ModelSettings, "share_prefix", "--model")),
    liger_kernels: bool = typer.Option(False, "--liger-kernels", help=flag(ModelSettings, "liger_kernels", "--model")),
    check: bool = typer.Option(False, "--check", help=flag(ModelSettings, "check", "--model")),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code",
                                           help=flag(ModelSettings, "trust_remote_code")),
    judge: Optional[str] = typer.Option(None, "--judge", help=flag(JudgeConfig, "model")),
    api_base: Optional[str] = typer.Option(None, "--api-base", help=flag(JudgeConfig, "api_base", "--judge")),
    api_key: Optional[str] = typer.Option(None, "--api-key", help=flag(JudgeConfig, "api_key", "--judge")),
    concurrency: Optional[int] = typer.Option(None, help=flag(JudgeConfig, "concurrency", "--judge")),
    timeout: Optional[float] = typer.Option(None, help=flag(JudgeConfig, "timeout", "--judge")),
    max_retries: Optional[int] = typer.Option(None, help=flag(JudgeConfig, "max_retries", "--judge")),
    cache: Optional[Path] = typer.Option(None, "--cache", help=flag(JudgeConfig, "cache_path", "--judge")),
    judge_backend: str = typer.Option("api", help="With --judge: api (an endpoint at --api-base) or vllm "
                                      "(--judge is a local model folder, run offline on the GPU)."),
    one_order: bool = typer.Option(False, "--one-order", help="With --judge: one random order per pair "
                                   "(seeded by --seed), as the official evaluator; default is both orders."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the full report as JSON."),
    ties: Ties = typer.Option(Ties.official, help="official: a tied pair counts wrong for Accuracy but breaks "
                              "Exact Match only when some pair is strictly reversed (the official evaluator); "
                              "strict: a tie is wrong in both. Judges: a C verdict is wrong in both."),
    seed: int = typer.Option(0, help="Seed of the random scorer and of the bootstrap."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the 95% CI (0 = none)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
):
    """Accuracy, Exact Match and Overall of a scorer on CheemsBench-style files (paper §3.3)."""
    from cheems.io import check_outputs, outputs_together, sidecar, write_json, write_jsonl
    from cheems.scoring.evaluate import evaluate_benchmark

    items_out = sidecar(json_out, "items") if json_out else None
    check_outputs([json_out, items_out], [*bench, scores, cache])
    judge_config, generate = None, None
    if judge is not None:
        api_base, generate = judge_backend_for(judge_backend, judge, api_base, trust_remote_code)
        judge_config = JudgeConfig(model=judge, api_base=api_base, api_key=api_key, both_orders=not one_order,
                                   seed=seed, cache_path=cache,
                                   **given(concurrency=concurrency, timeout=timeout, max_retries=max_retries))
    settings = ModelSettings(**given(backend=backend.value if backend else None, device=device, dtype=dtype,
                                     max_length=max_length, batch_size=batch_size, token_budget=token_budget,
                                     truncation=truncation, check=check, trust_remote_code=trust_remote_code,
                                     packing=packing, share_prefix=share_prefix, liger_kernels=liger_kernels))
    label = "judging" if judge is not None else "scoring" if model is not None else None
    with (progress(label) if label else contextlib.nullcontext(None)) as bar:
        result = evaluate_benchmark(bench, scores=scores, baseline=scorer.value if scorer else None, model=model,
                                    model_settings=settings, judge=judge_config, generate=generate,
                                    n_bootstrap=bootstrap, seed=seed, skip_invalid=skip_invalid, progress=bar,
                                    notify=err.print, ties=ties.value, fmt=fmt)
    if result.encoding is not None:
        _report_encoding(result.encoding, result.truncation)
    if json_out:  # the report and its per-prompt items together, or neither
        with outputs_together(json_out, items_out) as (report_tmp, items_tmp):
            write_json(report_tmp, result.report)
            write_jsonl(items_tmp, result.items)
    print_skipped(result.errors)
    if result.repeated_rows:
        err.print(f"note: {result.repeated_rows} row(s) repeat an earlier row exactly (same prompt, responses "
                  "and ranking); each is counted once")
    _print_eval(result.report["model"], result.report)
    if judge is not None:
        _print_judge(result.report)


def _print_judge(report: dict) -> None:
    orders = report["orders"]
    if len(orders) > 1:
        table = Table(title="Per presentation order")
        table.add_column("order")
        for s in report["subsets"]:
            table.add_column(f"{s} Acc.", justify="right")
            table.add_column(f"{s} Exact.", justify="right")
        table.add_column("Overall", justify="right")
        for name, r in orders.items():
            row = [name]
            for s in r["subsets"].values():
                row += [fmt(s["accuracy"]), fmt(s["exact_match"])]
            table.add_row(*row, fmt(r["overall"]))
        out.print(table)
    pc = report.get("position_consistency")
    fp = report.get("first_position_rate")
    out.print(f"judgements {report['judgements']}: {report['requests']} requests sent, {report['cached']} from cache; "
              f"unparseable {report['unparseable']}, failed {report['errors']}, cut by max tokens "
              f"{report.get('truncated', 0)} (all count as wrong)")
    out.print(f"position consistency: {fmt(pc)} over {report['consistency_pairs']} pairs judged in both orders; "
              f"share of verdicts for the first answer: {fmt(fp)}")


SUBSETS_AS_COLUMNS = 3
"""Up to this many subsets are columns of the CheemsBench table (as the paper's Table 2); more are rows."""


def _print_eval(name: str, report: dict) -> None:
    subsets = report["subsets"]
    table = Table(title="CheemsBench")
    if len(subsets) > SUBSETS_AS_COLUMNS:
        table.title = f"CheemsBench: {name}, Overall {fmt(report['overall'])}"
        for col in ("subset", "prompts", "Acc.", "Exact.", "(Acc.+Exact.)/2"):
            table.add_column(col, justify="left" if col == "subset" else "right")
        for sname, s in subsets.items():
            table.add_row(sname, str(s["n_prompts"]), fmt(s["accuracy"]), fmt(s["exact_match"]), fmt(s["score"]))
        out.print(table)
    else:
        table.add_column("model")
        for s in subsets:
            table.add_column(f"{s} Acc.", justify="right")
            table.add_column(f"{s} Exact.", justify="right")
        table.add_column("Overall", justify="right")
        row = [name]
        for s in subsets.values():
            row += [fmt(s["accuracy"]), fmt(s["exact_match"])]
        row.append(fmt(report["overall"]))
        table.add_row(*row)
        out.print(table)
    if report.get("overall_ci"):
        lo, hi = report["overall_ci"]
        out.print(f"Overall 95% CI: [{lo:.4f}, {hi:.4f}]")
    tied = sum(s.get("n_tied", 0) for s in subsets.values())
    if tied:
        rule = ("wrong for Accuracy; Exact Match breaks only beside a reversed pair (--ties official)"
                if report.get("ties") == "official" else "wrong for Accuracy and Exact Match (--ties strict)")
        out.print(f"note: {tied} pair(s) tied: {rule}", soft_wrap=True)
    ci_table = Table(title="95% bootstrap CI (prompts resampled)")
    for col in ("subset", "prompts", "comparisons", "Acc. CI", "Exact. CI", "(Acc.+Exact.)/2 CI"):
        ci_table.add_column(col, justify="left" if col == "subset" else "right")
    detail = Table(title="By main category")
    for col in ("subset", "category", "prompts", "comparisons", "Acc.", "Exact."):
        detail.add_column(col, justify="left" if col in ("subset", "category") else "right")
    for sname, s in subsets.items():
        ci = s.get("ci") or {}
        if ci:
                ci_table.add_row(sname, str(s["n_prompts"]), str(s["n_comparisons"]),
                             *(f"[{ci[k][0]:.4f}, {ci[k][1]:.4f}]" for k in ("accuracy", "exact_match", "score")))
        cats = list(s["categories"].items())
        for k, (cname, c) in enumerate(cats):
            detail.add_row(sname, cname, str(c["n_prompts"]), str(c["n_comparisons"]),
                           fmt(c["accuracy"]), fmt(c["exact_match"]), end_section=k == len(cats) - 1)
        if s["n_skipped"]:
            err.print(f"{sname}: {s['n_skipped']} prompt(s) with all responses tied were left out")
    if ci_table.row_count:
        out.print(ci_table)
    out.print(detail)
    _print_calibration(subsets)


def _print_calibration(subsets: dict) -> None:
    table = Table(title="Calibration and ranking agreement")
    for col in ("subset", "ECE (5 bins of |diff|)", "Kendall tau-b", "Acc. better longer", "Acc. better shorter"):
        table.add_column(col, justify="left" if col == "subset" else "right")
    for sname, s in subsets.items():
        if "ece" in s:
            length = s.get("length") or {}
            table.add_row(sname, fmt(s["ece"]), fmt(s.get("kendall_tau_b")),
                          *(fmt((length.get(k) or {}).get("accuracy")) for k in ("better_longer", "better_shorter")))
    if table.row_count:
        out.print(table)


@app.command()
@reports_input_errors
def score(
    bench: List[Path] = typer.Argument(..., help="Files with prompts and responses."),
    output: Path = typer.Option(..., "-o", "--output", help="SCORES file to write (JSONL)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Reward model folder (transformers checkpoint)."),
    scorer: Optional[Baseline] = typer.Option(None, "--scorer", help="A baseline scorer instead of a model."),
    backend: Optional[Backend] = typer.Option(None, help=flag(ModelSettings, "backend")),
    batch_size: Optional[int] = typer.Option(None, help=flag(ModelSettings, "batch_size")),
    token_budget: Optional[int] = typer.Option(None, help=flag(ModelSettings, "token_budget")),
    device: Optional[str] = typer.Option(None, help=flag(ModelSettings, "device")),
    packing: Optional[bool] = typer.Option(None, "--packing/--no-packing", help=flag(ModelSettings, "packing")),
    share_prefix: Optional[bool] = typer.Option(None, "--share-prefix/--no-share-prefix",
                                                help=flag(ModelSettings, "share_prefix")),
    liger_kernels: bool = typer.Option(False, "--liger-kernels", help=flag(ModelSettings, "liger_kernels")),
    dtype: Optional[str] = typer.Option(None, help=flag(ModelSettings, "dtype")),
    max_length: Optional[int] = typer.Option(None, help=flag(ModelSettings, "max_length")),
    truncation: Optional[str] = typer.Option(None, help=flag(ModelSettings, "truncation")),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code",
                                           help=flag(ModelSettings, "trust_remote_code")),
    check: bool = typer.Option(False, "--check", help=flag(ModelSettings, "check")),
    ray: bool = typer.Option(False, "--ray", help="Score on a Ray cluster, one model replica per GPU "
                             "(RAY_ADDRESS or a cluster started with `ray start`; else a local instance)."),
    replicas: Optional[int] = typer.Option(None, help="With --ray: how many replicas (default: one per GPU)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start again instead of resuming OUTPUT."),
    seed: int = typer.Option(0, help="Seed of the random scorer."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
):
    """Score every response and write rows {prompt_id, response_id, score}.

    With --model, rows are appended batch by batch: an interrupted run, started again with the
    same command, resumes where it stopped.
    """
    from cheems.formats import check_unique_ids, drop_repeated_rows, read_many, score_rows
    from cheems.io import check_outputs, write_jsonl

    if (model is None) == (scorer is None):
        raise CheemsInputError("give exactly one of --model DIR or --scorer length|random")
    check_outputs([output, output.with_name(output.name + ".meta.json")], bench)
    layout = None
    if model is not None and (backend is None or backend == Backend.transformers):
        from cheems.models.checkpoints import detect_layout

        layout = detect_layout(model)  # checks the folder before reading anything else
    res = read_many(bench, skip_invalid=skip_invalid, fmt=fmt)
    repeated = drop_repeated_rows(res)
    check_unique_ids(res.prompts, res.locations())
    print_skipped(res.errors)
    if repeated:
        err.print(f"note: {repeated} row(s) repeat an earlier row exactly; each is scored once")
    if scorer is not None:
        from cheems.scoring.baselines import BASELINES

        n = write_jsonl(output, score_rows(BASELINES[scorer.value](res.prompts, seed=seed)))
        out.print(f"scored {n} responses of {len(res.prompts)} prompts with {scorer.value} -> {output}")
        return
    settings = ModelSettings(**given(backend=backend.value if backend else None, device=device, dtype=dtype,
                                     max_length=max_length, truncation=truncation, batch_size=batch_size,
                                     token_budget=token_budget, trust_remote_code=trust_remote_code, check=check,
                                     packing=packing, share_prefix=share_prefix, liger_kernels=liger_kernels))
    if ray:
        _score_with_ray(res.prompts, model, output, settings, replicas, overwrite)
        return
    from cheems.io import ResumableJsonl
    from cheems.models.checkpoints import detect_layout
    from cheems.scoring.evaluate import load_scorer
    from cheems.scoring.run import score_to_file, scores_meta

    meta = scores_meta(res.prompts, model, max_length=settings.max_length, truncation=settings.truncation,
                       dtype=settings.dtype, layout=layout or detect_layout(model), backend=settings.backend)
    ResumableJsonl.check(output, meta, overwrite=overwrite)  # before the model loads
    rm = load_scorer(model, settings, res.prompts, notify=err.print)
    with progress("scoring") as bar:
        summary = score_to_file(rm, res.prompts, output, meta=meta, token_budget=settings.token_budget,
                                batch_size=settings.batch_size, overwrite=overwrite, progress=bar)
    _report_encoding(rm.stats, rm.truncation)
    resumed = f" ({summary['resumed']} already there)" if summary["resumed"] else ""
    out.print(f"scored {summary['scored']} responses{resumed} of {len(res.prompts)} prompts "
              f"with {model} [{rm.layout}] -> {output}")


def _score_with_ray(prompts, model, output, settings: ModelSettings, replicas, overwrite) -> None:
    from cheems.models.checkpoints import detect_layout
    from cheems.scoring.ray_scoring import score_with_ray
    from cheems.scoring.run import scores_meta

    s = settings
    if s.backend != Backend.transformers.value:
        raise CheemsInputError("--ray runs the transformers backend; leave out --backend vllm")
    meta = scores_meta(prompts, model, max_length=s.max_length, truncation=s.truncation, dtype=s.dtype,
                       layout=detect_layout(model), backend=s.backend)
    load_kwargs = dict(dtype=s.dtype, max_length=s.max_length, truncation=s.truncation,
                       trust_remote_code=s.trust_remote_code, packing=s.packing, share_prefix=s.share_prefix,
                       liger_kernels=s.liger_kernels)
    with progress("scoring on Ray") as bar:
        summary = score_with_ray(prompts, model, output, meta=meta, load_kwargs=load_kwargs,
                                 token_budget=s.token_budget, batch_size=s.batch_size, replicas=replicas,
                                 overwrite=overwrite, progress=bar)
    if summary.get("stats") is not None:
        _report_encoding(summary["stats"], s.truncation)
    resumed = f" ({summary['resumed']} already there)" if summary["resumed"] else ""
    out.print(f"scored {summary['scored']} responses{resumed} of {len(prompts)} prompts with {model} "
              f"on {summary['replicas']} Ray replica(s) -> {output}")


def _report_encoding(s, truncation: str) -> None:
    """Warnings about how the conversations were encoded (see cheems.models.sequences.EncodeStats)."""
    if s.doubled_bos:
        err.print(f"warning: {s.doubled_bos} sequence(s) had a doubled BOS token (chat template and tokenizer "
                  "both add one); one was removed", style="yellow")
    if s.truncated:
        err.print(f"warning: {s.truncated} of {s.sequences} sequence(s) exceeded --max-length and were "
                  f"truncated ({truncation})", style="yellow")
    if s.no_chat_template:
        err.print("warning: the tokenizer has no chat template; a plain 'role: text' layout was used",
                  style="yellow")


# ----------------------------------------------------------------------------- validate / stats

@app.command()
@reports_input_errors
def validate(files: List[Path] = typer.Argument(..., help="Files to check (any cheems format)."),
             show_all: bool = typer.Option(False, "--all", help="Print every bad row, not the first few of each "
                                           "kind of error."),
             fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP)):
    """Check files row by row; print counts and the errors grouped by kind. Exit 1 if any row is bad."""
    from cheems.formats import read_prompts

    bad = 0
    for f in files:
        res = read_prompts(f, skip_invalid=True, fmt=fmt)
        ranked = sum(p.rank is not None for p in res.prompts)
        compared = sum(bool(p.comparisons) for p in res.prompts)
        n_resp = sum(len(p.responses) for p in res.prompts)
        ids = [p.id for p in res.prompts]
        dup = len(ids) - len(set(ids))
        status = "ok" if not res.errors else f"{len(res.errors)} invalid row(s)"
        out.print(f"{f}: {len(res.prompts)} valid row(s), {n_resp} responses, {ranked} ranked, "
                  f"{compared} with comparisons; ", end="")
        out.print(status, style="green" if not res.errors else "red")
        if dup:
            out.print(f"  note: {dup} row(s) repeat a prompt id seen earlier", style="yellow")
        _print_errors(res.errors, show_all)
        bad += len(res.errors)
    if bad:
        raise typer.Exit(1)


ERRORS_SHOWN_PER_KIND = 3


def error_kind(e: CheemsInputError) -> tuple[str, str]:
    """What makes two row errors the same mistake: the field without its indices and the
    message without the values it quotes."""
    field = re.sub(r"\[\d+\]", "[]", e.field or "")
    message = re.sub(r"'[^']*'|\"[^\"]*\"|\b\d+\b", "…", e.message)
    return field, message


def _print_errors(errors: list[CheemsInputError], show_all: bool) -> None:
    """Every error with ``show_all``; else the errors grouped by kind, most frequent first,
    each with its count and its first few rows."""
    if show_all:
        for e in errors:
            out.print(f"  {e}", soft_wrap=True)
        return
    groups: dict[tuple[str, str], list[CheemsInputError]] = {}
    for e in errors:
        groups.setdefault(error_kind(e), []).append(e)
    for kind_errors in sorted(groups.values(), key=len, reverse=True):
        if len(kind_errors) > 1:
            out.print(f"  {len(kind_errors)} row(s) with this error:", soft_wrap=True)
        for e in kind_errors[:ERRORS_SHOWN_PER_KIND]:
            out.print(f"  {e}", soft_wrap=True)
        if len(kind_errors) > ERRORS_SHOWN_PER_KIND:
            out.print(f"  ... and {len(kind_errors) - ERRORS_SHOWN_PER_KIND} more like these (--all prints them)")


@app.command()
@reports_input_errors
def stats(
    files: List[Path] = typer.Argument(..., help="Datasets (any cheems format)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip bad rows instead of failing."),
    fmt: Optional[str] = typer.Option(None, "--format", help=FORMAT_HELP),
):
    """The paper's Table 1 statistics: prompts, responses, comparisons, average lengths."""
    from cheems.formats import read_prompts
    from cheems.metrics import dataset_stats

    table = Table(title="Dataset statistics")
    table.add_column("file", overflow="fold")
    for col in ("prompts", "responses/prompt", "comparisons", "prompt chars", "chosen chars", "rejected chars"):
        table.add_column(col, justify="right")
    everything = []
    for f in files:
        res = read_prompts(f, skip_invalid=skip_invalid, fmt=fmt)
        print_skipped(res.errors)
        everything.extend(res.prompts)
        _stats_row(table, str(f), dataset_stats(res.prompts))
    if len(files) > 1:
        _stats_row(table, "total", dataset_stats(everything))
    out.print(table)


def _stats_row(table: Table, name: str, s: dict) -> None:
    table.add_row(name, f"{s['prompts']:,}", f"{s['responses_per_prompt']:.2f}", f"{s['comparisons']:,}",
                  f"{s['prompt_chars']:.1f}", f"{s['chosen_chars']:.1f}", f"{s['rejected_chars']:.1f}")


@app.command("init-model")
@reports_input_errors
def init_model_cmd(
    output: Path = typer.Option(..., "-o", "--output", help="Folder to write the model and tokenizer to."),
    tokenizer_from: List[Path] = typer.Option(..., "--tokenizer-from", help="Texts to train the tokenizer on: "
                                              ".txt files (one text per line) or any cheems data file."),
    size: str = typer.Option("tiny", help="tiny (2 layers, 64 wide) or small (4 layers, 256 wide)."),
    vocab_size: int = typer.Option(3000, help="Tokenizer vocabulary size."),
    seed: int = typer.Option(0, help="Seed of the random weights."),
):
    """Build a small randomly initialised reward model and a tokenizer trained on your texts."""
    from cheems.formats import read_prompts
    from cheems.io import check_output_folder
    from cheems.training.init_model import SIZES, init_model

    check_output_folder(output, tokenizer_from)
    if size not in SIZES:
        raise CheemsInputError(f"unknown size {size!r}; choose from {', '.join(SIZES)}", field="size")
    texts: list[str] = []
    for f in tokenizer_from:
        if f.suffix == ".txt":
            if not f.is_file():
                raise CheemsInputError("no such file", file=str(f))
            try:
                lines = f.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as e:
                raise CheemsInputError(f"not valid UTF-8 (byte {e.start}); save the file as UTF-8",
                                       file=str(f)) from None
            texts.extend(line for line in lines if line.strip())
        else:
            for p in read_prompts(f).prompts:
                texts.append(p.prompt_text)
                texts.extend(r.content for r in p.responses)
    if not texts:
        raise CheemsInputError("no text to train the tokenizer on", field="--tokenizer-from")
    init_model(output, texts, size=size, seed=seed, vocab_size=vocab_size)
    out.print(f"wrote a {size} reward model (random weights) and a tokenizer trained on {len(texts)} texts "
              f"-> {output}")


@app.command()
@reports_input_errors
def convert(
    source: Path = typer.Argument(..., help="An official Cheems checkpoint: causal LM + v_head."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for the *ForSequenceClassification checkpoint."),
    dtype: Optional[str] = typer.Option(None, help="float32, bfloat16 or float16 (default: keep the source's)."),
):
    """Turn a causal LM + v_head checkpoint into a standard one-label sequence-classification
    checkpoint that transformers, vLLM and `cheems score` load."""
    import json

    from cheems.models.convert import BIAS_CONFIG_KEY, convert_v_head_checkpoint

    dst = convert_v_head_checkpoint(source, output, dtype=dtype)
    bias = json.loads((dst / "config.json").read_text(encoding="utf-8")).get(BIAS_CONFIG_KEY)
    if bias is not None:
        err.print(f"note: the v_head bias {bias:+.6g} was dropped (the score head has none): every score "
                  "shifts by the same constant, no comparison changes")
    out.print(f"wrote a sequence-classification checkpoint -> {dst}")


@app.command()
@reports_input_errors
def train(
    model: Optional[Path] = typer.Option(None, "--model", help=flag(TrainConfig, "model")),
    train_files: Optional[List[Path]] = typer.Option(None, "--train", help=flag(TrainConfig, "train")),
    eval_files: Optional[List[Path]] = typer.Option(None, "--eval", help=flag(TrainConfig, "eval")),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help=flag(TrainConfig, "output")),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file whose keys are these flags' names; "
                                          "flags given on the command line win."),
    epochs: Optional[int] = typer.Option(None, help=flag(TrainConfig, "epochs")),
    learning_rate: Optional[float] = typer.Option(None, help=flag(TrainConfig, "learning_rate")),
    max_length: Optional[int] = typer.Option(None, help=flag(TrainConfig, "max_length")),
    micro_batch_size: Optional[int] = typer.Option(None, help=flag(TrainConfig, "micro_batch_size")),
    gradient_accumulation: Optional[int] = typer.Option(None, help=flag(TrainConfig, "gradient_accumulation")),
    reg_coef: Optional[float] = typer.Option(None, help=flag(TrainConfig, "reg_coef")),
    warmup_ratio: Optional[float] = typer.Option(None, help=flag(TrainConfig, "warmup_ratio")),
    seed: Optional[int] = typer.Option(None, help=flag(TrainConfig, "seed")),
    eval_every: Optional[int] = typer.Option(None, help=flag(TrainConfig, "eval_every")),
    save_every: Optional[int] = typer.Option(None, help=flag(TrainConfig, "save_every")),
    resume: bool = typer.Option(False, "--resume", help=flag(TrainConfig, "resume")),
    truncate: bool = typer.Option(False, "--truncate", help=flag(TrainConfig, "truncate")),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing",
                                                help=flag(TrainConfig, "gradient_checkpointing")),
    bf16: bool = typer.Option(False, "--bf16", help=flag(TrainConfig, "bf16")),
    packing: Optional[bool] = typer.Option(None, "--packing/--no-packing", help=flag(TrainConfig, "packing")),
    liger_kernels: bool = typer.Option(False, "--liger-kernels", help=flag(TrainConfig, "liger_kernels")),
    compile_layers: bool = typer.Option(False, "--compile", help=flag(TrainConfig, "compile")),
    token_budget: Optional[int] = typer.Option(None, help=flag(TrainConfig, "token_budget")),
    lora_r: Optional[int] = typer.Option(None, help=flag(TrainConfig, "lora_r")),
    lora_alpha: Optional[int] = typer.Option(None, help=flag(TrainConfig, "lora_alpha")),
    lora_dropout: Optional[float] = typer.Option(None, help=flag(TrainConfig, "lora_dropout")),
    lora_target: Optional[str] = typer.Option(None, help=flag(TrainConfig, "lora_target")),
):
    """Train a reward model on ranked or compared responses (Bradley-Terry over every ranked
    pair, prompt-grouped batches, r^2 regulariser; paper §5)."""
    from cheems.training.trainer import train as run_training

    given = {"model": model, "train": train_files, "eval": eval_files, "output": output, "epochs": epochs,
             "learning_rate": learning_rate, "max_length": max_length, "micro_batch_size": micro_batch_size,
             "gradient_accumulation": gradient_accumulation, "reg_coef": reg_coef, "warmup_ratio": warmup_ratio,
             "seed": seed, "eval_every": eval_every, "save_every": save_every, "token_budget": token_budget,
             "lora_r": lora_r, "lora_alpha": lora_alpha, "lora_dropout": lora_dropout, "lora_target": lora_target,
             "packing": packing}
    flags = {"resume": resume, "truncate": truncate, "gradient_checkpointing": gradient_checkpointing,
             "bf16": bf16, "liger_kernels": liger_kernels, "compile": compile_layers}
    values = {k: (list(map(str, v)) if isinstance(v, list) else str(v) if isinstance(v, Path) else v)
              for k, v in given.items() if v is not None}
    values.update({k: True for k, v in flags.items() if v})
    if config is not None:
        cfg = TrainConfig.from_yaml(config, overrides=values)
    else:
        missing = [f"--{k.replace('_', '-')}" for k in ("model", "train", "output") if k not in values]
        if missing:
            raise CheemsInputError(f"missing {', '.join(missing)} (or give them in --config)")
        cfg = TrainConfig(**values)
    # under `accelerate launch` every process runs this command: the first one speaks
    main_process = os.environ.get("RANK", "0") == "0"
    with (progress("training") if main_process else contextlib.nullcontext(None)) as bar:
        warn = (lambda line: err.print(line, style="yellow", soft_wrap=True)) if main_process else None
        summary = run_training(cfg, progress=_training_progress(bar) if main_process else None, notify=warn)
    if not main_process:
        return
    if summary.get("already_finished"):
        out.print(f"the run in {summary['output']} already finished ({summary['steps']} steps); nothing to train")
        return
    out.print(f"trained {summary['steps']} steps over {summary['pairs']} pairs "
              f"(pair coverage {summary['pair_coverage']:.1%}, padding {summary['padding_share']:.1%}, "
              f"{summary['tokens_per_s']:.0f} tokens/s) -> {summary['output']}")
    if summary.get("dropped_sequences") or summary.get("truncated_sequences"):
        err.print(f"note: {summary.get('dropped_sequences', 0)} sequence(s) over max length dropped, "
                  f"{summary.get('truncated_sequences', 0)} truncated")
    if summary.get("eval"):
        out.print(f"final eval: Overall {fmt(summary['eval']['overall'])}, accuracy "
                  f"{fmt(summary['eval']['accuracy'])}, exact match {fmt(summary['eval']['exact_match'])}")


def _training_progress(bar):
    """The trainer's progress callback: the bar on a terminal; in a pipe or a CI log (where a
    bar shows nothing), a plain line at each evaluation and at the end of each epoch."""
    def report(step: int, total: int, stats: dict) -> None:
        bar(step, total)
        if out.is_terminal:
            return
        epoch_end = abs(stats["epoch"] - round(stats["epoch"])) < 1e-9
        if not epoch_end and not stats.get("eval"):
            return
        line = (f"step {step}/{total}, epoch {stats['epoch']:.2f}: loss {stats['loss']:.4f}, "
                f"accuracy {fmt(stats['accuracy'])}")
        if stats.get("eval"):
            line += f"; eval Overall {fmt(stats['eval']['overall'])}"
        out.print(line)

    return report


# ----------------------------------------------------------------------------- example data

@app.command("example-data")
def example_data(output: Path = typer.Option(Path("cheems-sample"), "-o", "--output",
                                             help="Folder to copy the bundled sample data into.")):
    """Copy the bundled Chinese sample annotations (subsets open and human) into a folder."""
    _copy_example_data(output)


@reports_input_errors
def _copy_example_data(output: Path) -> None:
    from cheems.io import atomic_open, check_output_folder

    src = resources.files("cheems") / "data" / "sample" / "annotations"
    dst = output / "annotations"
    check_output_folder(dst)
    items = {item.name: item.read_bytes() for item in src.iterdir() if item.name.endswith(".jsonl")}
    for name, data in items.items():  # a file of the user's is never replaced by ours
        if (dst / name).exists() and (dst / name).read_bytes() != data:
            raise CheemsInputError("already exists and differs from the sample; choose another folder",
                                   file=str(dst / name))
    for name, data in sorted(items.items()):
        with atomic_open(dst / name) as f:
            f.write(data)
    out.print(f"copied {', '.join(sorted(items))} -> {dst}")


@app.command("sample", hidden=True)
def sample_alias(output: Path = typer.Option(Path("cheems-sample"), "-o", "--output",
                                             help="Folder to copy the bundled sample data into.")):
    """The old name of `cheems example-data`."""
    err.print("note: `cheems sample` is now `cheems example-data` (`cheems curate sample` samples responses)")
    _copy_example_data(output)
