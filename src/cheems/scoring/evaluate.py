"""Evaluate a benchmark with any scorer, as one call: what ``cheems eval`` does.

The scorer is one of: a scores file (rows ``{prompt_id, response_id, score}``), a baseline
(``length`` or ``random``), a reward model folder (transformers or vLLM, see
:class:`ModelSettings`), or an LLM judge (:class:`~cheems.scoring.bench_judge.JudgeConfig`).
The result is the CheemsBench report of :func:`cheems.metrics.evaluate` (the judge's report
adds per-order results and position consistency, see
:func:`cheems.scoring.bench_judge.judge_report`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from cheems.formats import check_unique_ids, drop_repeated_rows, read_many, read_scores
from cheems.metrics import benchmark_fingerprint, check_ties, evaluate, pair_scores, prompt_items
from cheems.records import CheemsInputError, Prompt
from cheems.scoring.baselines import BASELINES, check_seed
from cheems.settings import setting

__all__ = ["Evaluation", "ModelSettings", "evaluate_benchmark", "load_scorer", "model_scores"]

Progress = Callable[[int, int], None]
Notify = Callable[[str], None]


@dataclass
class ModelSettings:
    """How to load and run a reward model folder; the fields are the flags of ``cheems eval
    --model`` and ``cheems score --model``. Values are checked where the model is loaded."""

    backend: str = setting("transformers", help="How to run --model: transformers, or vllm (GPU)")
    device: str = setting("cpu", help="cpu, cuda or cuda:N")
    dtype: str = setting("auto", help="auto (bfloat16 on CUDA, float32 on CPU), bfloat16, float16, float32")
    max_length: int = setting(2048, help="Longer conversations are truncated (and counted)")
    truncation: str = setting("left", help="left keeps the end of the response, right keeps the start")
    batch_size: int = setting(64, help="Most sequences in one forward batch (vLLM forms its own)")
    token_budget: int | None = setting(None, default_text="1024 on CPU, 16384 on CUDA",
                                       help="Most tokens in one forward batch (packed row, or padded)")
    packing: bool = setting(True, help="Pack a batch's sequences into one row instead of padding them")
    share_prefix: bool = setting(True, help="With packing: lay each prompt's common prefix down once "
                                               "(vllm: its prefix caching)")
    liger_kernels: bool = setting(False, help="Liger's fused RMSNorm, SwiGLU and RoPE kernels (CUDA; the gpu extra)")
    trust_remote_code: bool = setting(False, help="Allow the checkpoint's own code")
    check: bool = setting(False, help="First verify scores do not depend on batching")


@dataclass
class Evaluation:
    """The report of :func:`evaluate_benchmark`, the rows skipped with their errors, and the
    encoding counts of a reward model (None for other scorers)."""

    report: dict
    errors: list[CheemsInputError] = field(default_factory=list)
    encoding: object = None  # cheems.models.sequences.EncodeStats of the model's run
    truncation: str | None = None
    repeated_rows: int = 0  # rows that repeated an earlier row exactly, counted once
    items: list[dict] = field(default_factory=list)  # per prompt, its pairs' outcomes (cheems.metrics.prompt_items)


def load_scorer(path: str | os.PathLike, settings: ModelSettings, prompts: Sequence[Prompt],
                notify: Notify | None = None):
    """A loaded reward model (transformers or vLLM, as ``settings.backend`` says); with
    ``settings.check``, its scores are first checked not to depend on batching (an error
    otherwise). ``notify`` receives the status lines ("loading ...", the check's result)."""
    from cheems.scoring.transformers_rm import check_batch_invariance, load_reward_model

    say = notify or (lambda line: None)
    s = settings
    say(f"loading {path} ...")
    if s.backend == "vllm":
        from cheems.scoring.vllm_backend import load_vllm_reward_model

        rm = load_vllm_reward_model(str(path), max_length=s.max_length, truncation=s.truncation, dtype=s.dtype,
                                    trust_remote_code=s.trust_remote_code, prefix_caching=s.share_prefix)
    else:
        rm = load_reward_model(path, device=s.device, dtype=s.dtype, max_length=s.max_length,
                               truncation=s.truncation, trust_remote_code=s.trust_remote_code, packing=s.packing,
                               share_prefix=s.share_prefix, liger_kernels=s.liger_kernels)
    if s.check:
        exact = s.backend == "transformers" and str(rm.model.dtype) == "torch.float32"
        tolerance = 1e-3 if exact else 5e-2  # bf16/fp16 kernels round more
        result = check_batch_invariance(rm, prompts, token_budget=s.token_budget, batch_size=s.batch_size,
                                        tolerance=tolerance)
        line = (f"batch invariance: {result['n']} responses alone vs in batches, max |diff| "
                f"{result['max_abs_diff']:.2e} (relative above 1; tolerance {result['tolerance']:.0e})")
        if not result["ok"]:
            raise CheemsInputError(line + ": scores depend on batching; check padding side and position ids")
        say(line + ": ok")
    return rm


def evaluate_benchmark(bench: Sequence[str | os.PathLike], *, scores: str | os.PathLike | None = None,
                       baseline: str | None = None, model: str | os.PathLike | None = None,
                       model_settings: ModelSettings | None = None, judge=None, generate=None,
                       n_bootstrap: int = 1000, seed: int = 0, skip_invalid: bool = False, ties: str = "official",
                       fmt: str | None = None, progress: Progress | None = None,
                       notify: Notify | None = None) -> Evaluation:
    """Accuracy, Exact Match and Overall (paper §3.3) of one scorer on benchmark files.

    Give exactly one of ``scores``, ``baseline`` (``length``/``random``, seeded by ``seed``),
    ``model`` (with ``model_settings``) or ``judge`` (a JudgeConfig; ``generate`` answers
    offline instead of its endpoint). A file's stem names the subset of its rows without one.
    ``fmt`` forces a row format (see :data:`cheems.formats.FORMAT_NAMES`; default: detected per
    row); rows that repeat an earlier row exactly are counted once (``repeated_rows``).
    ``progress(done, total)`` follows scoring or judging. The report's ``model`` names the scorer.
    ``ties`` is the Exact Match tie rule of :func:`cheems.metrics.evaluate` (``"official"`` or
    ``"strict"``), recorded as the report's ``ties``. A judge's numbers do not depend on it: its
    tie (C) verdicts, unparseable replies and failed requests are wrong under both rules.
    """
    check_ties(ties)
    check_seed(seed)
    if sum(x is not None for x in (scores, baseline, model, judge)) != 1:
        raise CheemsInputError("give exactly one of --scores FILE, --scorer length|random, --model DIR "
                               "or --judge MODEL --api-base URL")
    if model is not None and (model_settings or ModelSettings()).backend == "transformers":
        from cheems.models.checkpoints import check_model_folder

        check_model_folder(model)  # before reading the benchmark
    res = read_many(bench, skip_invalid=skip_invalid, require_rank=True, fmt=fmt)
    if not res.prompts:
        raise CheemsInputError("no valid prompts to evaluate")
    repeated = drop_repeated_rows(res)
    check_unique_ids(res.prompts, res.locations())
    evaluation = Evaluation({}, res.errors, repeated_rows=repeated)
    score_map = None
    if scores is not None:
        try:
            score_map = read_scores(scores)
            report = evaluate(res.prompts, score_map, n_bootstrap=n_bootstrap, seed=seed, ties=ties)
        except CheemsInputError as e:
            raise e.located(file=str(scores)) from None
        name = Path(scores).stem
    elif judge is not None:
        from cheems.scoring.bench_judge import judge_bench, judge_items

        report = judge_bench(res.prompts, judge, progress, n_bootstrap=n_bootstrap, generate=generate)
        evaluation.items = judge_items(res.prompts, report)
        name = judge.model
    elif model is not None:
        settings = model_settings or ModelSettings()
        score_map, evaluation.encoding = model_scores(model, settings, res.prompts, progress, notify)
        evaluation.truncation = settings.truncation
        report = evaluate(res.prompts, score_map, n_bootstrap=n_bootstrap, seed=seed, ties=ties)
        name = Path(model).name
    else:
        score_map = BASELINES[baseline](res.prompts, seed=seed)
        report = evaluate(res.prompts, score_map, n_bootstrap=n_bootstrap, seed=seed, ties=ties)
        name = baseline
    if score_map is not None:
        evaluation.items = prompt_items(res.prompts, pair_scores(res.prompts, score_map))
    report["kind"] = "eval"
    report["scorer"] = "generative" if judge is not None else "discriminative"
    report["benchmark"] = benchmark_fingerprint(res.prompts)
    report["model"] = name
    report["ties"] = ties
    evaluation.report = report
    return evaluation


def model_scores(model, settings: ModelSettings, prompts: list[Prompt], progress: Progress | None,
                  notify: Notify | None) -> tuple[dict, object]:
    """Every response's score by the reward model, and the model's encoding counts."""
    from cheems.scoring.transformers_rm import score_prompts

    rm = load_scorer(model, settings, prompts, notify)
    score_map = {}
    for batch in score_prompts(rm, prompts, token_budget=settings.token_budget, batch_size=settings.batch_size,
                               progress=progress):
        score_map.update(((pid, rid), v) for pid, rid, v in batch)
    return score_map, rm.stats
