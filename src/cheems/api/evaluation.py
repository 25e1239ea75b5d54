"""The public calls that score responses and measure a scorer: evaluate, score, best_of_n.

The scorers (scores files, baselines, reward models, API judges, local judges, a running
``cheems serve``) load their packages only when used: a scores file is evaluated with the core
install alone."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from cheems.api.data_files import ROWS_READ, PathOrPaths, as_paths
from cheems.common_settings import OutputSettings, ReadSettings, ScorerSettings, StatisticsSettings
from cheems.formats import RepeatedRows, RewordedQuestions
from cheems.records import CheemsInputError, Notice, Setting
from cheems.settings import as_settings

if TYPE_CHECKING:  # annotations only: the settings modules stay unloaded until a call needs them
    from cheems.scoring.bench_judge import JudgeConfig
    from cheems.scoring.evaluate import Evaluation
    from cheems.scoring.local_judge import JudgeModelSettings
    from cheems.scoring.model_settings import ModelSettings
    from cheems.scoring.remote_scorer import RemoteScorer, RemoteScorerSettings

__all__ = ["Progress", "Notify", "Scoring", "best_of_n", "check_judge_backend", "evaluate", "remote_scorer", "score"]

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called as the work advances (a progress bar's update)."""
Notify = Callable[[str], None]
"""``notify(line)``: a line worth telling the user (loading a model, a fallback taken)."""


def evaluate(bench: PathOrPaths, *, scorer: ScorerSettings | Mapping | None = None,
             statistics: StatisticsSettings | Mapping | None = None, read: ReadSettings | Mapping | None = None,
             model_settings: ModelSettings | None = None, judge: JudgeConfig | None = None,
             generate: Callable | None = None, judge_settings: JudgeModelSettings | None = None,
             progress: Progress | None = None, notify: Notify | None = None) -> Evaluation:
    """Compute Accuracy, Exact Match and Overall of one scorer on benchmark files, per subset, with bootstrap CIs.

    Give exactly one scorer: ``scorer``'s ``scores``, ``scorer``, ``model`` or ``judge_model``,
    or ``judge``. Every row is an item, as the benchmarks' own evaluators count them (a row
    under an earlier row's id is keyed ``id#n``). The work is
    :func:`cheems.scoring.evaluate.evaluate_benchmark`.

    Args:
        bench: Benchmark files (rows with ``rank``); a file's stem names the subset of its rows without one.
        scorer: The scorer (a :class:`~cheems.common_settings.ScorerSettings`, or a mapping of its
            fields): ``scores``, a SCORES file (rows ``{prompt_id, response_id, score}``);
            ``scorer``, a baseline, ``length`` or ``random`` (seeded by ``statistics.seed``);
            ``model``, a reward model folder run as ``model_settings`` say; ``judge_model``, a
            local causal LM folder judging every pair by its verdict probabilities; ``name``, the
            scorer's name in the report (default: its source); ``judge_backend`` ``vllm`` says
            ``generate`` answers ``judge`` on a local vLLM.
        statistics: The statistics (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``bootstrap`` resamples for the 95% CIs (0: none); ``seed`` of
            the random baseline and of the bootstrap; ``ties``: ``official``, a tied pair is wrong
            for Accuracy but breaks Exact Match only when some pair is strictly reversed, or
            ``strict``, a tie is wrong in both.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``skip_invalid`` skips bad rows instead of raising at the first;
            ``format`` reads every row as this format instead of detecting it row by row;
            ``dedupe`` counts a row that repeats an earlier row exactly once.
        model_settings: How to run ``model`` or ``judge_model`` (back-end, device, dtype, lengths, batches).
        judge: An API judge (a :class:`~cheems.scoring.bench_judge.JudgeConfig`) judging every pair.
        generate: With ``judge``: answers its conversations offline instead of its endpoint.
        judge_settings: How ``judge_model`` judges (a :class:`~cheems.scoring.local_judge.JudgeModelSettings`).
        progress: ``progress(done, total)`` while scoring or judging.
        notify: Gets the lines worth telling the user (a model loading, a fallback).

    Returns:
        An :class:`~cheems.scoring.evaluate.Evaluation`: the ``report`` (what ``cheems eval --json``
        writes), the per-prompt ``items``, the rows skipped, and how rows were counted.

    Raises:
        CheemsInputError: No scorer or two, a bad setting, a file that cannot be read, a row without
            a rank, or a response without a score.

    Paper: §3.3 (Evaluation Metrics: Accuracy, Exact Match, Overall).
    """
    from cheems.scoring.evaluate import evaluate_benchmark

    pick = as_settings(ScorerSettings, scorer, "scorer")
    stats = as_settings(StatisticsSettings, statistics, "statistics")
    how = as_settings(ReadSettings, read, "read")
    if judge is not None:
        check_judge_backend(pick, generate)
    return evaluate_benchmark(as_paths(bench), scores=pick.scores, baseline=pick.scorer, model=pick.model,
                              model_settings=model_settings, judge=judge, generate=generate,
                              n_bootstrap=stats.bootstrap, seed=stats.seed, skip_invalid=how.skip_invalid,
                              ties=stats.ties, fmt=how.format, dedupe=how.dedupe, progress=progress, notify=notify,
                              name=pick.name, judge_model=pick.judge_model, judge_settings=judge_settings)


def check_judge_backend(pick: ScorerSettings, generate: Callable | None) -> None:
    """An API judge run on a local vLLM (``judge_backend`` ``vllm``) answers through ``generate``:
    refuse it without one (the library loads no vLLM of its own for an API judge)."""
    if pick.judge_backend == "vllm" and generate is None:
        raise CheemsInputError(Notice("a vllm judge answers through generate (a local vLLM's chat): give generate, "
                                      "or leave ", Setting("judge_backend"), " at api"))


@dataclass
class Scoring:
    """What :func:`score` wrote: responses scored now and found already in the file, and how
    the rows were read."""

    output: Path
    prompts: int
    scored: int
    resumed: int = 0  # responses whose score the file held already (a resumed run)
    layout: str | None = None  # the model's layout (None for a baseline)
    encoding: object = None  # cheems.models.sequences.EncodeStats of the model's run
    truncation: str | None = None  # the side long conversations were cut on
    replicas: int | None = None  # on Ray: the replicas that ran
    errors: list[CheemsInputError] = field(default_factory=list)  # the rows skipped
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)
    repeated: RepeatedRows = field(default_factory=RepeatedRows)  # rows under an earlier row's id (keyed id#n)
    identical: int = 0  # rows holding two responses of identical text


def score(bench: PathOrPaths, output: str | os.PathLike | OutputSettings | Mapping, *,
          scorer: ScorerSettings | Mapping | None = None, statistics: StatisticsSettings | Mapping | None = None,
          read: ReadSettings | Mapping | None = None, settings: ModelSettings | None = None, ray: bool = False,
          replicas: int | None = None, progress: Progress | None = None, notify: Notify | None = None) -> Scoring:
    """Score every response of the files with a reward model or a baseline, into a SCORES file.

    With a model, rows are appended batch by batch: a run started again with the same arguments
    resumes where the last one stopped (the file's ``.meta.json`` must match these settings).

    Args:
        bench: Files of prompts with responses (any supported format).
        output: The SCORES file (JSONL rows ``{prompt_id, response_id, score}``); not an input. A
            path, or an :class:`~cheems.common_settings.OutputSettings` (or a mapping of its
            fields) whose ``overwrite`` starts again instead of resuming it.
        scorer: The scorer (a :class:`~cheems.common_settings.ScorerSettings`, or a mapping of its
            fields), one of: ``model``, a reward model folder (a transformers checkpoint) run as
            ``settings`` say; ``scorer``, a baseline, ``length`` or ``random`` (seeded by
            ``statistics.seed``).
        statistics: The randomness (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``seed`` of the random baseline.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``skip_invalid`` skips bad rows instead of raising at the first;
            ``format`` reads every row as this format instead of detecting it row by row.
        settings: How to run the model (a :class:`~cheems.scoring.model_settings.ModelSettings`).
        ray: Score on a Ray cluster, one model replica per GPU.
        replicas: With ``ray``: how many replicas (default: one per GPU).
        progress: ``progress(done, total)`` over the responses.
        notify: Gets the lines worth telling the user (the model loading, a fallback).

    Returns:
        A :class:`Scoring`: responses scored, resumed, the model's layout and encoding counts, the
        rows skipped and how the rows were counted.

    Raises:
        CheemsInputError: Not exactly one of a model and a baseline, a setting this call does not
            use (a scores file, a judge, ``dedupe``, ...), an output that is an input, a broken
            model folder (checked before any reading), a file that cannot be read, or a scores
            file of other settings.
    """
    from cheems.benchmark import read_benchmark
    from cheems.io import check_outputs
    from cheems.records import identical_responses
    from cheems.scoring.model_settings import ModelSettings

    dest = OutputSettings(output) if isinstance(output, (str, os.PathLike)) else as_settings(OutputSettings, output,
                                                                                            "output")
    pick = as_settings(ScorerSettings, scorer, "scorer", uses=("model", "scorer"))
    seed = as_settings(StatisticsSettings, statistics, "statistics", uses=("seed",)).seed
    how = as_settings(ReadSettings, read, "read", uses=ROWS_READ)
    model, baseline, output = pick.model, pick.scorer, dest.output
    if (model is None) == (baseline is None):
        raise CheemsInputError(Notice("give exactly one scorer: a model folder (", Setting("model"),
                                      ") or a baseline (", Setting("scorer"), ": length or random)"))
    bench = as_paths(bench)
    check_outputs([output, Path(output).with_name(Path(output).name + ".meta.json")], bench)
    settings = settings or ModelSettings()
    if model is not None and settings.backend == "transformers":
        from cheems.models.checkpoints import detect_layout

        detect_layout(model)  # checks the folder (weights, tokenizer, one label) before reading anything else
    res, repeated = read_benchmark(bench, skip_invalid=how.skip_invalid, fmt=how.format)
    found = Scoring(Path(output), len(res.prompts), 0, errors=res.errors, reworded=res.reworded, repeated=repeated,
                    identical=sum(identical_responses(p) > 0 for p in res.prompts))
    if baseline is not None:
        found.scored = _score_with_baseline(res.prompts, baseline, seed, output)
        return found
    from cheems.scoring.run import score_with_model

    run = score_with_model(model, res.prompts, settings, output=output, overwrite=dest.overwrite, ray=ray,
                           replicas=replicas, progress=progress, notify=notify)
    found.scored, found.resumed, found.layout, found.encoding = run.scored, run.resumed, run.layout, run.encoding
    found.truncation, found.replicas = settings.truncation, run.replicas
    return found


def _score_with_baseline(prompts, baseline: str, seed: int, output: str | os.PathLike) -> int:
    """Write the scores of a baseline; returns how many."""
    from cheems.formats import score_rows
    from cheems.io import write_jsonl
    from cheems.scoring.baselines import BASELINES

    return write_jsonl(output, score_rows(BASELINES[baseline](prompts, seed=seed)))


def remote_scorer(settings: RemoteScorerSettings | None) -> RemoteScorer | None:
    """The client of the running ``cheems serve`` that ``settings`` name (None without a server);
    its bearer token read from ``settings.api_key_file``."""
    if settings is None or settings.server is None:
        return None
    from cheems.scoring.remote_scorer import RemoteScorer
    from cheems.serving.settings import read_api_key

    return RemoteScorer(settings.server, api_key=read_api_key(settings.api_key_file) if settings.api_key_file else None,
                        timeout=settings.server_timeout_s, batch_rows=settings.server_batch_rows)


def best_of_n(candidates: PathOrPaths, *, gold: str | os.PathLike | None = None, ns: Sequence[int] = (1, 2, 4, 8, 16, 32),
              scorer: ScorerSettings | Mapping | None = None, statistics: StatisticsSettings | Mapping | None = None,
              read: ReadSettings | Mapping | None = None, server: RemoteScorerSettings | None = None,
              model_settings: ModelSettings | None = None, judge: JudgeConfig | None = None,
              judge_settings: JudgeModelSettings | None = None, baseline: str | None = None,
              progress: Progress | None = None, notify: Notify | None = None) -> tuple[dict, list[CheemsInputError]]:
    """Compute the expected gold quality of a reward model's best-of-n pick, and/or its judged win rate.

    The curve is exact over all n-subsets of each prompt's N candidates, per category and overall
    with bootstrap CIs over prompts (:func:`cheems.report.bon.best_of_n_files`). Give one reward
    model: ``scorer.scores``, ``scorer.model`` or ``server``; and ``gold``, or a judge
    (``judge`` or ``scorer.judge_model``) with ``baseline``, or both.

    Args:
        candidates: Prompt rows with N candidate responses each.
        gold: A SCORES-shaped file: each response's true quality (a number, or +1/-1 against a baseline).
        ns: The n of best-of-n (positive integers).
        scorer: The reward model and the local judge (a :class:`~cheems.common_settings.ScorerSettings`,
            or a mapping of its fields): ``scores``, the reward model's SCORES file, or ``model``,
            a reward model folder to score with, run as ``model_settings`` say; ``judge_model``, a
            local causal LM folder judging the best-of-N pick by its verdict probabilities;
            ``name``, the model's name in the report (default: the scores file's stem or the
            model's name).
        statistics: The statistics (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``bootstrap`` resamples over prompts for the 95% CIs;
            ``seed`` of the bootstrap.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``skip_invalid`` skips bad rows instead of raising at the first;
            ``format`` reads every row as this format instead of detecting it row by row.
        server: Or a running ``cheems serve`` (a :class:`~cheems.scoring.remote_scorer.RemoteScorerSettings`).
        model_settings: How to run ``scorer.model`` or ``scorer.judge_model``.
        judge: An API judge of the best-of-N pick against ``baseline``, in both orders.
        judge_settings: How ``scorer.judge_model`` judges (a
            :class:`~cheems.scoring.local_judge.JudgeModelSettings`).
        baseline: With a judge: the id of the baseline response in every prompt (a response to
            play against, not a baseline scorer).
        progress: ``progress(done, total)`` while scoring or judging.
        notify: Gets the lines worth telling the user.

    Returns:
        ``(report, errors)``: the report (``curve`` and/or ``judged``; what ``cheems bon --json``
        writes) and the errors of the rows skipped.

    Raises:
        CheemsInputError: Not exactly one reward model, neither gold nor a judge, a judge without a
            baseline, a bad n, a setting this call does not use (a baseline scorer, ``ties``,
            ``dedupe``, ...), or a file that cannot be read.

    Paper: §6.2 (Downstream Correlation: best-of-32 sampling).
    """
    from cheems.metrics import check_seed
    from cheems.report.bon import best_of_n_files

    pick = as_settings(ScorerSettings, scorer, "scorer", uses=("scores", "model", "judge_model", "name"))
    stats = as_settings(StatisticsSettings, statistics, "statistics", uses=("bootstrap", "seed"))
    how = as_settings(ReadSettings, read, "read", uses=ROWS_READ)
    check_seed(stats.seed)
    scores, model = pick.scores, pick.model
    return best_of_n_files([str(c) for c in as_paths(candidates)], str(gold) if gold is not None else None, list(ns),
                           scores=str(scores) if scores is not None else None,
                           model=str(model) if model is not None else None, server=remote_scorer(server),
                           model_settings=model_settings, judge=judge, judge_model=pick.judge_model,
                           judge_settings=judge_settings, baseline=baseline, n_bootstrap=stats.bootstrap,
                           seed=stats.seed, fmt=how.format, skip_invalid=how.skip_invalid, progress=progress,
                           notify=notify, name=pick.name)
