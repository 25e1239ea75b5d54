"""Evaluate a benchmark with any scorer, as one call: what ``cheems eval`` does.

The scorer is one of: a scores file (rows ``{prompt_id, response_id, score}``), a baseline
(``length`` or ``random``), a reward model folder (transformers or vLLM, see
:class:`ModelSettings`), an LLM judge (:class:`~cheems.scoring.bench_judge.JudgeConfig`), or a
local causal LM read as a judge (:mod:`cheems.scoring.local_judge`).
The result is the CheemsBench report of :func:`cheems.metrics.evaluate` (the judge's report
adds per-order results and position consistency, see
:func:`cheems.scoring.bench_judge.judge_report`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from cheems.benchmark import read_benchmark
from cheems.formats import RepeatedRows, RewordedQuestions, read_scores
from cheems.metrics import benchmark_fingerprint, check_bootstrap, check_ties, evaluate_scores
from cheems.records import CheemsInputError, Notice, Setting, identical_responses
from cheems.scoring.baselines import BASELINES, check_seed
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.run import load_scorer, model_scores

__all__ = ["Evaluation", "ModelSettings", "evaluate_benchmark", "load_scorer", "model_scores"]

Progress = Callable[[int, int], None]
Notify = Callable[[str], None]


@dataclass
class Evaluation:
    """The report of :func:`evaluate_benchmark`, the rows skipped with their errors, and the
    encoding counts of a reward model (None for other scorers)."""

    report: dict
    errors: list[CheemsInputError] = field(default_factory=list)
    encoding: object = None  # cheems.models.sequences.EncodeStats of the model's run
    truncation: str | None = None
    repeated: RepeatedRows = field(default_factory=RepeatedRows)  # rows under an earlier row's id (keyed id#n)
    identical: int = 0  # rows holding two or more responses of identical text (scored, a tie between them)
    repeated_scores: int = 0  # rows of the SCORES file that repeat an earlier row's score, counted once
    items: list[dict] = field(default_factory=list)  # per prompt, its pairs' outcomes (cheems.metrics.prompt_items)
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)  # questions joined across wordings


def evaluate_benchmark(bench: Sequence[str | os.PathLike], *, scores: str | os.PathLike | None = None,
                       baseline: str | None = None, model: str | os.PathLike | None = None,
                       model_settings: ModelSettings | None = None, judge=None, generate=None,
                       n_bootstrap: int = 1000, seed: int = 0, skip_invalid: bool = False, ties: str = "official",
                       fmt: str | None = None, dedupe: bool = False, progress: Progress | None = None,
                       notify: Notify | None = None, name: str | None = None,
                       judge_model: str | os.PathLike | None = None, judge_settings=None) -> Evaluation:
    """Accuracy, Exact Match and Overall (paper §3.3) of one scorer on benchmark files.

    Give exactly one of ``scores``, ``baseline`` (``length``/``random``, seeded by ``seed``),
    ``model`` (with ``model_settings``), ``judge`` (a JudgeConfig; ``generate`` answers
    offline instead of its endpoint) or ``judge_model`` (a causal LM folder judging pairs by
    its verdict probabilities, run as ``model_settings`` say, judging as ``judge_settings``
    (a :class:`~cheems.scoring.local_judge.JudgeModelSettings`) say). A file's stem names the subset of its rows without one.
    ``fmt`` forces a row format (see :data:`cheems.formats.FORMAT_NAMES`; default: detected per
    row). Every row is an item, as the benchmarks' own evaluators count them; rows under an
    earlier row's id are keyed ``id#n`` (``repeated``, :func:`cheems.benchmark.read_benchmark`),
    and ``dedupe`` counts a row that repeats an earlier one exactly once. Two responses of
    identical text in one row are scored (``identical`` counts such rows); a scorer that gives
    equal text equal scores ties them, and ``ties`` decides what the tie costs.
    ``progress(done, total)`` follows scoring or judging. The report's ``model`` names the scorer:
    ``name``, or else the judge model, the scores file's stem, the model folder's name or the baseline.
    ``ties`` is the Exact Match tie rule of :func:`cheems.metrics.evaluate` (``"official"`` or
    ``"strict"``), recorded as the report's ``ties``. A judge's numbers do not depend on it: its
    tie (C) verdicts, unparseable replies and failed requests are wrong under both rules.
    """
    check_ties(ties)
    check_seed(seed)
    if name is not None and not name.strip():
        raise CheemsInputError("must not be empty", field="name")
    check_bootstrap(n_bootstrap)
    if sum(x is not None for x in (scores, baseline, model, judge, judge_model)) != 1:
        raise CheemsInputError(Notice(
            "give exactly one scorer: a scores file (", Setting("scores"), "), a baseline (", Setting("scorer"),
            ": length or random), a reward model folder (", Setting("model"), "), an API judge model (",
            Setting("judge"), ", with its endpoint) or a judge model folder (", Setting("judge_model"), ")"))
    _check_folder(model, judge_model, model_settings or ModelSettings())  # before reading the benchmark
    res, repeated = read_benchmark(bench, skip_invalid=skip_invalid, require_rank=True, fmt=fmt,
                                   empty="no valid prompts to evaluate", dedupe=dedupe)
    evaluation = Evaluation({}, res.errors, repeated=repeated,
                            identical=sum(identical_responses(p) > 0 for p in res.prompts), reworded=res.reworded)
    stats = dict(n_bootstrap=n_bootstrap, seed=seed, ties=ties)
    if judge is not None:
        from cheems.scoring.bench_judge import judge_bench, judge_items

        report = judge_bench(res.prompts, judge, progress, n_bootstrap=n_bootstrap, generate=generate)
        evaluation.items = judge_items(res.prompts, report)
        default_name = judge.model
    elif judge_model is not None:
        report, evaluation.items, evaluation.encoding = _judge_locally(
            res.prompts, judge_model, model_settings or ModelSettings(), judge_settings, name, n_bootstrap, seed,
            progress, notify)
        evaluation.truncation = "left"
        default_name = Path(judge_model).name
    elif scores is not None:
        try:
            score_map = read_scores(scores)
            evaluation.repeated_scores = score_map.repeated
            report, evaluation.items = evaluate_scores(res.prompts, score_map, **stats)
        except CheemsInputError as e:
            raise e.located(file=str(scores)) from None
        default_name = Path(scores).stem
    elif model is not None:
        settings = model_settings or ModelSettings()
        score_map, evaluation.encoding = model_scores(model, settings, res.prompts, progress, notify)
        evaluation.truncation = settings.truncation
        report, evaluation.items = evaluate_scores(res.prompts, score_map, **stats)
        default_name = Path(model).name
    else:
        report, evaluation.items = evaluate_scores(res.prompts, BASELINES[baseline](res.prompts, seed=seed), **stats)
        default_name = baseline
    report["kind"] = "eval"
    report["scorer"] = "generative" if judge is not None or judge_model is not None else "discriminative"
    report["benchmark"] = benchmark_fingerprint(res.prompts)
    report["model"] = name or default_name
    report["ties"] = ties
    report["rows"] = {"items": len(res.prompts), "repeated": repeated.exact + repeated.differing,
                      "exact_repeats": repeated.exact, "deduped": repeated.dropped}
    evaluation.report = report
    return evaluation


def _check_folder(model, judge_model, settings: ModelSettings) -> None:
    """The reward model folder, or the judge's causal LM folder, checked whole before any work."""
    if model is not None and settings.backend == "transformers":
        from cheems.models.checkpoints import check_model_folder

        check_model_folder(model)
    if judge_model is not None:
        from cheems.scoring.local_judge import check_causal_lm_folder

        check_causal_lm_folder(judge_model)


def _judge_locally(prompts, path, settings: ModelSettings, judge_settings, name: str | None, n_bootstrap: int,
                   seed: int, progress: Progress | None, notify: Notify | None) -> tuple[dict, list[dict], object]:
    """(report, items, encoding counts) of a local causal LM judging every ranked pair."""
    from cheems.scoring.local_judge import (JudgeModelSettings, check_judge_batch_invariance, judge_bench_locally,
                                            load_judge_model)

    js, say = judge_settings or JudgeModelSettings(), notify or (lambda line: None)
    if settings.truncation != "left":
        raise CheemsInputError("a judge prompt keeps its end (the verdict question)", field="truncation",
                               remedy=("truncation", "leave out {} right"))
    say(f"loading {path} ...")
    judge = load_judge_model(path, settings, language=js.language)
    if judge.template.ties and not js.ties:  # a model trained with the tie verdict judges with it
        js = replace(js, ties=True)
    if settings.check:
        exact = settings.backend == "transformers" and str(judge.model.dtype) == "torch.float32"
        check = check_judge_batch_invariance(judge, prompts, ties=js.ties, batch_size=settings.batch_size,
                                             tolerance=1e-5 if exact else 1e-2)
        line = (f"batch invariance: {check['n']} judge prompts alone vs in batches, max |diff| of the verdict "
                f"probabilities {check['max_abs_diff']:.2e} (tolerance {check['tolerance']:.0e})")
        if not check["ok"]:
            raise CheemsInputError(line + ": verdicts depend on batching")
        say(line + ": ok")
    report, items = judge_bench_locally(prompts, judge, ties=js.ties, both_orders=js.both_orders, seed=seed,
                                        batch_size=settings.batch_size, n_bootstrap=n_bootstrap,
                                        name=name or Path(path).name, progress=progress)
    return report, items, judge.stats
