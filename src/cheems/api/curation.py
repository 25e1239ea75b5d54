"""The public calls of the curation pipeline: curate_sample -> curate_filter -> curate_judge ->
curate_resolve -> curate_debias -> curate_merge, and analyze_bias.

Each stage reads prompt rows, writes its output atomically with ``OUT.report.json`` beside it,
and returns that report (:mod:`cheems.curation.stages`). The settings objects are the
sections of a pipeline config (``examples/curation/pipeline.yaml``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from cheems.api.data_files import PathOrPaths, as_paths
from cheems.common_settings import ReadSettings, ScorerSettings, StatisticsSettings
from cheems.records import CheemsInputError
from cheems.settings import as_settings

if TYPE_CHECKING:  # annotations only: each settings module loads with the stage that needs it
    from cheems.curation.filters import FilterConfig
    from cheems.curation.sample import SampleConfig
    from cheems.curation.stages import ResolveSettings
    from cheems.scoring.bench_judge import JudgeConfig
    from cheems.scoring.local_judge import JudgeModelSettings
    from cheems.scoring.model_settings import ModelSettings
    from cheems.scoring.remote_scorer import RemoteScorerSettings

__all__ = ["analyze_bias", "curate_debias", "curate_filter", "curate_judge", "curate_merge", "curate_resolve",
           "curate_sample"]

Progress = Callable[[int, int], None]


def curate_sample(prompts: PathOrPaths, output: str | os.PathLike, config: SampleConfig,
                  progress: Progress | None = None) -> dict:
    """Collect k responses per prompt from every model of the config; each response records its model.

    Prompts whose every request failed go to ``OUT.failed.jsonl`` with the reasons; replies are
    cached, so a rerun asks only for what is missing.

    Args:
        prompts: Prompt rows (JSONL with ``prompt``; responses are ignored).
        output: The prompts with their sampled responses (JSONL).
        config: The models and how to ask them (a :class:`~cheems.curation.sample.SampleConfig`).
        progress: ``progress(done, total)`` over the requests.

    Returns:
        The stage's report (what ``OUT.report.json`` holds): rows in and out, ``responses_per_prompt``,
        ``failed_rows``, ``requests`` (total, failed, sent, cached), ``output``.

    Raises:
        CheemsInputError: An output that is an input, a prompt file that cannot be read, or a bad setting.

    Paper: §4.1 (Data Construction: response collection from many models).
    """
    from cheems.curation.stages import run_sample

    return run_sample(as_paths(prompts), output, config, progress)


def curate_filter(inputs: PathOrPaths, output: str | os.PathLike, config: FilterConfig | None = None,
                  progress: Progress | None = None) -> dict:
    """Filter responses by rules of high recall (empty, garbled, repeated, non-Chinese, truncated, duplicate, ...).

    The rules: empty, garbled, repeated, non-Chinese, truncated, too long, length outliers,
    duplicates and near duplicates. Removed responses (and prompts left with too few) go to ``OUT.removed.jsonl`` with the rule.

    Args:
        inputs: Prompts with responses.
        output: The prompts with the responses that pass.
        config: Which rules and their thresholds (a :class:`~cheems.curation.filters.FilterConfig`;
            default: every rule at its default).
        progress: ``progress(done, total)`` over the prompts.

    Returns:
        The stage's report: responses and prompts in and kept, ``removed_by_rule``, ``output``.

    Raises:
        CheemsInputError: An output that is an input, a file that cannot be read, or a prompt id twice.

    Paper: §4.1 (Data Construction: rule-based filtering).
    """
    from cheems.curation.filters import FilterConfig
    from cheems.curation.stages import run_filter

    return run_filter(as_paths(inputs), output, config or FilterConfig(), progress)


def curate_judge(inputs: PathOrPaths, output: str | os.PathLike, config: JudgeConfig | None = None, *,
                 scorer: ScorerSettings | Mapping | None = None, generate: Callable | None = None,
                 judge_settings: JudgeModelSettings | None = None, model_settings: ModelSettings | None = None,
                 seed: int = 0, progress: Progress | None = None, notify: Callable[[str], None] | None = None) -> dict:
    """Compare all C(N,2) response pairs of every prompt with an LLM judge, with its category's criteria.

    A is better -> label ``g``, B -> ``b``, a tie -> ``s``; every comparison keeps its provenance.
    Give one judge: ``config`` (an API, or ``generate``) or ``scorer.judge_model`` (a local causal
    LM whose verdict probabilities, averaged over both orders, go to ``OUT.verdicts.jsonl`` as
    they come).

    Args:
        inputs: Prompts with responses (e.g. :func:`curate_filter`'s output).
        output: The same prompts with the judge's comparisons.
        config: An API judge (a :class:`~cheems.scoring.bench_judge.JudgeConfig`).
        scorer: The local judge (a :class:`~cheems.common_settings.ScorerSettings`, or a mapping of
            its fields): ``judge_model``, a local causal LM folder instead of ``config``;
            ``judge_backend`` ``vllm`` says ``generate`` answers ``config`` on a local vLLM.
        generate: With ``config``: answers its conversations offline instead of its endpoint.
        judge_settings: How ``scorer.judge_model`` judges (a
            :class:`~cheems.scoring.local_judge.JudgeModelSettings`).
        model_settings: How to run ``scorer.judge_model``.
        seed: With ``scorer.judge_model``: the seed of the order drawn for each pair when not both
            (the API judge's is ``config.seed``).
        progress: ``progress(done, total)`` over the pairs.
        notify: Gets the lines of the model loading and of verdicts judged again.

    Returns:
        The stage's report: ``pairs``, ``judgements``, ``labels`` (g / b / s), ``unparseable``,
        ``failed``, ``first_position_rate``, ``output``, ...

    Raises:
        CheemsInputError: No judge or two, a ``scorer`` setting this call does not use, an output
            that is an input, a file that cannot be read, or a judge model folder that is no
            causal LM.

    Paper: §4.2 (Distant Supervision: GPT annotation of every pair) and Figures 11-14 (the judge prompt).
    """
    from cheems.api.evaluation import check_judge_backend
    from cheems.curation.stages import run_judge

    pick = as_settings(ScorerSettings, scorer, "scorer", uses=("judge_model", "judge_backend"))
    if config is not None:
        check_judge_backend(pick, generate)
    return run_judge(as_paths(inputs), output, config, progress, generate=generate, judge_model=pick.judge_model,
                     judge_settings=judge_settings, model_settings=model_settings, seed=seed, notify=notify)


def curate_resolve(inputs: PathOrPaths, output: str | os.PathLike, *, scorer: ScorerSettings | Mapping | None = None,
                   server: RemoteScorerSettings | None = None, settings: ResolveSettings | None = None,
                   model_settings: ModelSettings | None = None, progress: Progress | None = None,
                   notify: Callable[[str], None] | None = None) -> dict:
    """Drop the judge's comparisons that a reward model trained on human data contradicts, inside cycles.

    Give the reward model's scores one way: ``scorer.scores``, ``scorer.model`` (scored into
    ``OUT.scores.jsonl``, resumable) or ``server``.

    Args:
        inputs: Judged prompts (:func:`curate_judge`'s output).
        output: The prompts whose comparisons form no cycle.
        scorer: The reward model (a :class:`~cheems.common_settings.ScorerSettings`, or a mapping
            of its fields): ``scores``, a SCORES file of it, or ``model``, its folder (trained on
            the human subset), run as ``model_settings`` say.
        server: Or a running ``cheems serve`` of it (a :class:`~cheems.scoring.remote_scorer.RemoteScorerSettings`).
        settings: Which comparisons may be dropped (a :class:`~cheems.curation.stages.ResolveSettings`:
            ``scope`` cycles or all, ``margin``).
        model_settings: How to run ``scorer.model``.
        progress: ``progress(done, total)`` while scoring.
        notify: Gets the lines of the model loading.

    Returns:
        The stage's report: per category and ``total``, comparisons kept and dropped (by reason),
        prompts with conflicts before and after, and judge-RM agreement.

    Raises:
        CheemsInputError: Not exactly one source of scores, a ``scorer`` setting this call does not
            use, an output that is an input, a file that cannot be read, or a response without a score.

    Paper: §4.2 (Distant Supervision) and Figure 3.
    """
    from cheems.api.evaluation import remote_scorer
    from cheems.curation.stages import ResolveSettings, run_resolve

    pick = as_settings(ScorerSettings, scorer, "scorer", uses=("scores", "model"))
    s = settings or ResolveSettings()
    return run_resolve(as_paths(inputs), output, scores=pick.scores, rm=pick.model, server=remote_scorer(server),
                       scope=s.scope, margin=s.margin, model_settings=model_settings, progress=progress,
                       notify=notify)


def curate_debias(inputs: PathOrPaths, output: str | os.PathLike, *, statistics: StatisticsSettings | Mapping,
                  tolerance: int = 0) -> dict:
    """Balance chosen-longer and chosen-shorter pairs by downsampling the larger side (length debiasing).

    Dropped pairs stay in their rows, marked (:func:`cheems.curation.debias.length_debias`).

    Args:
        inputs: Prompts with comparisons (:func:`curate_resolve`'s output).
        output: The prompts with both kinds of pairs balanced.
        statistics: The randomness (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``seed`` of the downsampling (required).
        tolerance: Length differences up to this many characters count as similar.

    Returns:
        The stage's report: ``before`` and ``after`` (chosen_longer, chosen_shorter, their share),
        ``dropped`` pairs, ``output``.

    Raises:
        CheemsInputError: No seed, a bad ``statistics`` setting or tolerance, an output that is an
            input, or a file that cannot be read.

    Paper: §4.2 (Distant Supervision: length debiasing).
    """
    from cheems.curation.stages import run_debias

    seed = as_settings(StatisticsSettings, statistics, "statistics", default=StatisticsSettings(seed=None),
                       uses=("seed",)).seed
    if seed is None:
        raise CheemsInputError("missing: the downsampling needs a seed", field="statistics.seed")
    return run_debias(as_paths(inputs), output, seed=seed, tolerance=tolerance)


def curate_merge(human: PathOrPaths, judged: PathOrPaths, output: str | os.PathLike, *,
                 resolve_human: bool = True) -> dict:
    """Merge the human subset and the processed judge subset into the final training set.

    Each row gets its ``source`` (human or judge); human rows with annotations but no ranking
    are ranked by conflict resolution first.

    Args:
        human: Human-annotated prompts.
        judged: Processed judge-annotated prompts (:func:`curate_debias`'s output).
        output: The final dataset (JSONL).
        resolve_human: Rank the human annotations by conflict resolution first.

    Returns:
        The stage's report: ``output_rows``, ``human_rows``, ``judge_rows``, ``human_ranked_by_resolution``.

    Raises:
        CheemsInputError: A prompt id in both parts, an output that is an input, or a file that cannot be read.

    Paper: §4.2 (CheemsPreference: the processed GPT subset with the human subset) and Table 4.
    """
    from cheems.curation.stages import run_merge

    return run_merge(as_paths(human), as_paths(judged), output, resolve_human=resolve_human)


def analyze_bias(files: PathOrPaths | Mapping[str, PathOrPaths], *, bins: Sequence[float] | None = None,
                 plots: str | os.PathLike | None = None, read: ReadSettings | Mapping | None = None) -> dict:
    """Measure annotator bias: P(response A chosen) by length difference and by position, per group.

    Wilson intervals and a binomial test per bin (:func:`cheems.curation.bias.analyze_bias`).

    Args:
        files: Annotated prompts: files, each its own group named after it (``human.jsonl`` ->
            human), or a mapping ``{group: files}``.
        bins: Positive edges of the length-difference bins (default 50, 200, 500: symmetric around 0).
        plots: A folder for PNG plots (new, or empty).
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``skip_invalid`` skips bad rows instead of raising at the first.

    Returns:
        ``tables`` (per group), ``plots`` (the files written), ``skipped`` (errors of the rows skipped)
        and ``identical`` (rows holding two responses of identical text).

    Raises:
        CheemsInputError: A bad ``read`` setting (only ``skip_invalid`` is used), a file that
            cannot be read, a plots folder that holds files or is an input, or bad bins.

    Paper: Appendix D.3 (Annotation Bias).
    """
    from cheems.curation.stages import run_analyze_bias
    from cheems.io import check_output_folder

    skip_invalid = as_settings(ReadSettings, read, "read", uses=("skip_invalid",)).skip_invalid
    if isinstance(files, Mapping):
        groups = {name: as_paths(paths) for name, paths in files.items()}
    else:
        groups = {}
        for f in map(Path, as_paths(files)):
            groups.setdefault(f.name[:-len(".jsonl")] if f.name.endswith(".jsonl") else f.stem, []).append(f)
    if plots is not None:
        check_output_folder(plots, [p for paths in groups.values() for p in paths])
    return run_analyze_bias(groups, bins=bins, plots=plots, skip_invalid=skip_invalid)
