"""`cheems curate STAGE` and `cheems analyze bias`: thin commands over cheems.curation.stages."""

from __future__ import annotations

import contextlib

from pathlib import Path
from typing import List, Optional

import typer

import cheems
from cheems.cli.app import SERVER_CLIENT_HELPS, app
from cheems.cli.console import (data_paths, err, fmt, judge_backend_for, out, print_skipped, progress, refuse_no_rows,
                                reports_input_errors, say)
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import (ConfigFile, ExtraOutputs, OutputSettings, ReadSettings, ScorerSettings,
                                    StatisticsSettings, TruncationSettings)
from cheems.curation.filters import FilterConfig
from cheems.curation.sample import SampleConfig
from cheems.curation.stages import ResolveSettings
from cheems.records import CheemsInputError
from cheems.scoring.bench_judge import JudgeConfig
from cheems.scoring.local_judge import JudgeModelSettings
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.remote_scorer import RemoteScorerSettings

__all__ = ["analyze_app", "curate_app"]

curate_app = typer.Typer(no_args_is_help=True, help="Build preference data the Cheems way (paper §4): "
                         "sample -> filter -> judge -> resolve -> debias -> merge.")
analyze_app = typer.Typer(no_args_is_help=True, help="Look at annotations: annotator bias.")

CONFIG_HELP = "Pipeline YAML (examples/curation/pipeline.yaml); this stage reads its own section. Flags win."


def _done(report: dict, what: str) -> None:
    from cheems.io import sidecar

    out.print(f"{what} -> {report['output']} (report: {sidecar(report['output'], 'report', '.json')})")
    if report.get("balanced") is False:  # a bug, not bad input: say so loudly
        err.print("warning: the stage's counts do not add up; see the report", style="bold red")


@curate_app.command("sample")
@reports_input_errors
@settings_flags(SampleConfig, into="sample_flags", only=("concurrency", "seed", "max_reply_bytes", "cache_path"),
                names={"cache_path": "--cache"},
                helps={"concurrency": "Requests in flight at once, over all models",
                       "cache_path": "SQLite cache of replies (default samples.sqlite beside the judge cache)"})
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Prompts with their sampled responses (JSONL)"})
@settings_flags(ConfigFile, into="config_flags",
                helps={"config": CONFIG_HELP + " The 'sample' section lists the models (required)"})
def sample(
    prompts: List[Path] = typer.Argument(..., help="Prompt rows (JSONL with 'prompt'; responses are ignored)."),
    sample_flags: dict = None, out_flags: dict = None, config_flags: dict = None,
):
    """Collect k responses per prompt from every model of the config; each response records its
    model. Prompts whose every request failed go to OUT.failed.jsonl."""
    output, config = build_settings(OutputSettings, out_flags).output, config_flags.get("config")
    if config is None:
        raise CheemsInputError("missing --config (the pipeline YAML whose 'sample' section lists the models)")
    prompts = data_paths(prompts)
    from cheems.curation.stages import stage_settings

    cfg = build_settings(SampleConfig, sample_flags, config=config, section=stage_settings(config, "sample"))
    with progress("sampling") as bar:
        report = cheems.curate_sample(prompts, output, cfg, bar)
    req = report["requests"]
    out.print(f"{report['output_rows']} prompts with responses ({fmt(report['responses_per_prompt'], 1)} each), "
              f"{report['failed_rows']} failed; requests: {req['total']} ({req['failed']} failed), "
              f"{req['sent']} sent, {req['cached']} from cache")
    _done(report, "sampled")


@curate_app.command("filter")
@reports_input_errors
@settings_flags(FilterConfig, into="filter_flags", only=("rules", "max_chars", "max_non_chinese_ratio",
                                                         "near_duplicate_threshold", "min_responses"))
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Prompts with the responses that pass"})
@settings_flags(ConfigFile, into="config_flags", helps={"config": CONFIG_HELP})
def filter_(
    inputs: List[Path] = typer.Argument(..., help="Prompts with responses."),
    filter_flags: dict = None, out_flags: dict = None, config_flags: dict = None,
):
    """Rule filters of §4.1 (high recall): empty, garbled, repeated, non-Chinese, truncated, too
    long, length outliers, duplicates. Removed responses go to OUT.removed.jsonl with the rule."""
    output, config = build_settings(OutputSettings, out_flags).output, config_flags.get("config")
    inputs = data_paths(inputs)
    from cheems.curation.stages import stage_settings

    cfg = build_settings(FilterConfig, filter_flags, config=config, section=stage_settings(config, "filter"),
                         prefix="filter.")
    with progress("filtering") as bar:
        report = cheems.curate_filter(inputs, output, cfg, bar)
    rules_hit = ", ".join(f"{k} {v}" for k, v in report["removed_by_rule"].items() if v) or "none"
    out.print(f"kept {report['kept_responses']} of {report['input_responses']} responses in "
              f"{report['kept_prompts']} of {report['input_prompts']} prompts; removed by rule: {rules_hit}")
    _done(report, "filtered")


LOCAL_JUDGE_RUN = ("backend", "device", "dtype", "max_length", "batch_size", "token_budget", "packing", "share_prefix")
"""The ModelSettings `curate judge --judge-model` takes as flags."""


@curate_app.command("judge")
@reports_input_errors
@settings_flags(JudgeConfig, into="judge_flags", names={"model": "--judge", "cache_path": "--cache"},
                only=("model", "api_base", "api_key", "concurrency", "timeout", "max_retries", "max_reply_bytes",
                      "seed", "cache_path"))
@settings_flags(JudgeModelSettings, into="local_flags", only=("language", "ties"), when="--judge-model",
                names={"language": "--judge-language", "ties": "--judge-ties"})
@settings_flags(ModelSettings, into="model_flags", only=LOCAL_JUDGE_RUN, when="--judge-model")
@settings_flags(ModelSettings, into="code_flags", only=("trust_remote_code",))
@settings_flags(ScorerSettings, into="scorer_flags", only=("judge_model", "judge_backend"),
                helps={"judge_model": "Judge with this local causal LM folder instead of an API: each pair by its "
                       "verdict probabilities, averaged over both orders (resumable from OUT.verdicts.jsonl)",
                       "judge_backend": "api or vllm (GPU, offline)"})
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "The same prompts with the judge's comparisons"})
@settings_flags(ConfigFile, into="config_flags", helps={"config": CONFIG_HELP})
def judge(
    inputs: List[Path] = typer.Argument(..., help="Prompts with responses (e.g. the filter stage's output)."),
    both_orders: bool = typer.Option(False, "--both-orders", help="Judge every pair in both orders "
                                     "(default: one random order per pair, as the paper)."),
    judge_flags: dict = None, local_flags: dict = None, model_flags: dict = None, code_flags: dict = None,
    scorer_flags: dict = None, out_flags: dict = None, config_flags: dict = None,
):
    """Compare all C(N,2) response pairs of every prompt with an LLM judge (§4.2), with the
    category's criteria. A is better -> label g, B -> b, C -> tie s; provenance kept."""
    output, config = build_settings(OutputSettings, out_flags).output, config_flags.get("config")
    pick, inputs = build_settings(ScorerSettings, scorer_flags), data_paths(inputs)
    from cheems.curation.stages import stage_settings

    section = stage_settings(config, "judge")
    local = build_settings(JudgeModelSettings, local_flags)  # a bad value is named under its flag first
    trust_remote_code = code_flags.get("trust_remote_code", False)
    settings = build_settings(ModelSettings, {**model_flags, **code_flags})
    if pick.judge_model is not None:
        _refuse_api_judge(judge_flags, section, pick.judge_backend)
        _judge_locally(inputs, output, pick, local, settings, judge_flags.get("seed", 0))
    elif local_flags or model_flags:
        raise CheemsInputError("--judge-language, --judge-ties and the model run flags go with --judge-model DIR")
    else:
        _judge_by_api(inputs, output, config, section, both_orders, pick, trust_remote_code, judge_flags)


def _refuse_api_judge(judge_flags: dict, section: dict, judge_backend: str) -> None:
    """`curate judge --judge-model` takes no API judge: no API flag, no model or endpoint in the
    config's judge section."""
    given = [k for k in judge_flags if k != "seed"] + [k for k in ("model", "api_base") if section.get(k)]
    if given or judge_backend != "api":
        raise CheemsInputError("--judge-model is the judge itself: leave out the API judge (--judge, --api-base and "
                               "its other flags, --judge-backend, and model/api_base in the config's judge section)")


def _judge_by_api(inputs: list, output: Path, config: Optional[Path], section: dict, both_orders: bool,
                  pick: ScorerSettings, trust_remote_code: bool, judge_flags: dict) -> None:
    name = judge_flags.get("model") or section.get("model")
    if not name:
        raise CheemsInputError("give the judge model: --judge NAME (or 'model' in the judge section), "
                               "or a local one: --judge-model DIR")
    base, generate = judge_backend_for(pick.judge_backend, name,
                                       judge_flags.get("api_base") or section.get("api_base"), trust_remote_code)
    given = {**judge_flags, "model": name, "api_base": base,
             "both_orders": True if both_orders else section.get("both_orders", False)}
    cfg = build_settings(JudgeConfig, given, config=config, section=section, prefix="judge.")
    with progress("judging pairs") as bar:
        report = cheems.curate_judge(inputs, output, cfg, scorer=pick, generate=generate, progress=bar)
    labels = report["labels"]
    out.print(f"{report['judgements']} judgements of {report['pairs']} pairs: {labels['g']} A, {labels['b']} B, "
              f"{labels['s']} ties; {report['unparseable']} without a verdict, {report['failed']} failed; "
              f"{report['requests']} requests sent, {report['cached']} from cache; "
              f"first-position rate {fmt(report['first_position_rate'], 3)}")
    _done(report, "judged")


def _judge_locally(inputs: list, output: Path, pick: ScorerSettings, judge_settings: JudgeModelSettings,
                   settings: ModelSettings, seed: int) -> None:
    with progress("judging pairs") as bar:
        report = cheems.curate_judge(inputs, output, scorer=pick, judge_settings=judge_settings,
                                     model_settings=settings, seed=seed, progress=bar, notify=say)
    labels = report["labels"]
    resumed = report["resumed_judgements"]
    resumed = f" ({resumed} read from {report['verdicts']})" if resumed else ""
    out.print(f"{report['pairs']} pairs judged by {report['judge']} from {report['judgements']} verdict "
              f"distributions{resumed}: {labels['g']} A, {labels['b']} B, {labels['s']} ties; position consistency "
              f"{fmt(report['position_consistency'], 3)}, first-position rate {fmt(report['first_position_rate'], 3)}")
    _done(report, "judged")


@curate_app.command("resolve")
@reports_input_errors
@settings_flags(ModelSettings, into="model_flags", when="--rm", plain=("backend", "trust_remote_code"),
                exclude=("truncation",))
@settings_flags(TruncationSettings, into="cut_flags")
@settings_flags(ResolveSettings, into="resolve_flags")
@settings_flags(RemoteScorerSettings, into="server_flags", when="--server", plain=("server",),
                helps=SERVER_CLIENT_HELPS)
@settings_flags(ScorerSettings, into="scorer_flags", only=("model", "scores"), names={"model": "--rm"},
                helps={"model": "Reward model trained on the human subset (`cheems train`); scores go to "
                       "OUT.scores.jsonl, resumable", "scores": "Or: a scores file of that model"})
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Prompts whose comparisons form no cycle"})
@settings_flags(ConfigFile, into="config_flags", helps={"config": CONFIG_HELP})
def resolve(
    inputs: List[Path] = typer.Argument(..., help="Judged prompts (the judge stage's output)."),
    resolve_flags: dict = None, model_flags: dict = None, server_flags: dict = None, scorer_flags: dict = None,
    out_flags: dict = None, config_flags: dict = None, cut_flags: dict = None,
):
    """Distant supervision (§4.2): where the judge's comparisons form cycles keep only those the
    reward model agrees with; report kept/dropped and judge-RM agreement per category."""
    output, config = build_settings(OutputSettings, out_flags).output, config_flags.get("config")
    pick, inputs = build_settings(ScorerSettings, scorer_flags), data_paths(inputs)
    refuse_no_rows(pick.scores)
    from cheems.cli.report import server_settings
    from cheems.curation.stages import stage_settings

    cfg = build_settings(ResolveSettings, resolve_flags, config=config, section=stage_settings(config, "resolve"),
                         prefix="resolve.")
    cut = build_settings(TruncationSettings, cut_flags).scoring_side()
    settings, server = build_settings(ModelSettings, {**model_flags, **cut}), server_settings(server_flags)
    computed = pick.model is not None or server is not None  # with --scores there is nothing to score: no bar
    scoring = progress("scoring") if computed else contextlib.nullcontext()
    with scoring as bar:
        report = cheems.curate_resolve(inputs, output, scorer=pick, server=server, settings=cfg,
                                       model_settings=settings, progress=bar, notify=say)
    t = report["total"]
    out.print(f"kept {t['kept']} of {t['comparisons']} comparisons, dropped {t['dropped']} "
              f"({', '.join(f'{k} {v}' for k, v in t['dropped_by_reason'].items() if v) or 'none'}); "
              f"prompts with conflicts {t['prompts_with_conflicts_before']} -> {t['prompts_with_conflicts_after']}; "
              f"judge-RM agreement {fmt(t['judge_rm_agreement'], 3)}")
    _done(report, "resolved")


@curate_app.command("debias")
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Prompts with chosen-longer and chosen-shorter pairs balanced"})
@settings_flags(StatisticsSettings, into="stats_flags", only=("seed",), defaults={"seed": None},
                helps={"seed": "Seed of the downsampling (required)"})
def debias(
    inputs: List[Path] = typer.Argument(..., help="Prompts with comparisons (the resolve stage's output)."),
    tolerance: int = typer.Option(0, help="Length differences up to this many characters count as similar."),
    out_flags: dict = None, stats_flags: dict = None,
):
    """Length debiasing (§4.2): downsample whichever of chosen-longer / chosen-shorter pairs is
    larger to the size of the other. Dropped pairs stay in their rows."""
    output, stats = build_settings(OutputSettings, out_flags).output, build_settings(StatisticsSettings, stats_flags)
    if stats.seed is None:
        raise CheemsInputError("missing --seed (the downsampling's seed)")
    report = cheems.curate_debias(data_paths(inputs), output, statistics=stats, tolerance=tolerance)
    b, a = report["before"], report["after"]
    out.print(f"chosen-longer {b['chosen_longer']} -> {a['chosen_longer']}, chosen-shorter {b['chosen_shorter']} -> "
              f"{a['chosen_shorter']} (share longer {fmt(b['chosen_longer_share'], 3)} -> "
              f"{fmt(a['chosen_longer_share'], 3)}); {report['dropped']} pairs dropped")
    _done(report, "debiased")


@curate_app.command("merge")
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "The final dataset (JSONL, with 'source')"})
def merge(
    human: List[Path] = typer.Option(..., "--human", help="Human-annotated prompts."),
    judged: List[Path] = typer.Option(..., "--judge", help="Processed judge-annotated prompts."),
    out_flags: dict = None,
    keep_human_annotations: bool = typer.Option(False, "--keep-human-annotations", help="Do not rank human "
                                                "annotations by conflict resolution first."),
):
    """Human subset + processed judge subset -> the final training set, each row with its
    source. `cheems stats OUT` prints its Table-1 statistics."""
    output = build_settings(OutputSettings, out_flags).output
    report = cheems.curate_merge(data_paths(human), data_paths(judged), output,
                                 resolve_human=not keep_human_annotations)
    out.print(f"{report['output_rows']} rows: {report['human_rows']} human, {report['judge_rows']} judge "
              f"({report['human_ranked_by_resolution']} human rows ranked by conflict resolution)")
    _done(report, "merged")


@analyze_app.command("bias")
@reports_input_errors
@settings_flags(ExtraOutputs, into="extra_flags", only=("plots", "json"), helps={"json": "Write the tables as JSON"})
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid",))
def bias(
    files: List[Path] = typer.Argument(..., help="Annotated prompts; each file is one group (e.g. human, judge)."),
    bins: Optional[str] = typer.Option(None, help="Comma-separated positive edges of the length-difference "
                                       "bins (default 50,200,500: symmetric bins around 0)."),
    extra_flags: dict = None, read_flags: dict = None,
):
    """Annotator bias (Appendix D.3): P(response A chosen) by length difference and by position,
    per file, with Wilson intervals and a binomial test."""
    extra, read = build_settings(ExtraOutputs, extra_flags), build_settings(ReadSettings, read_flags)
    files, json_out, plots = data_paths(files), extra.json, extra.plots
    from cheems.curation.bias import format_bias_table
    from cheems.io import check_outputs, write_json

    try:
        edges = [float(x) for x in bins.split(",")] if bins else None
    except ValueError:
        raise CheemsInputError(f"bins must be comma-separated numbers, got {bins!r}", field="--bins") from None
    check_outputs([json_out], files)
    result = cheems.analyze_bias(files, bins=edges, plots=plots, read=read)
    print_skipped(result["skipped"])
    if result["identical"]:
        err.print(f"note: {result['identical']} row(s) hold two responses of identical text; a choice between them "
                  "is analysed like any other (it shows position bias alone)", soft_wrap=True)
    out.print(format_bias_table(result["tables"]))
    if json_out:
        write_json(json_out, result["tables"])
    for p in result["plots"]:
        out.print(f"plot -> {p}")


app.add_typer(curate_app, name="curate")
app.add_typer(analyze_app, name="analyze")
