"""Local generative judges: a causal language model read as a pairwise judge, without sampling.

The judge is shown a verdict-first prompt (:mod:`cheems.llm.verdict_template`: the template a
cheems generative model keeps beside its weights, else the built-in one in the language asked
for) and its verdict is read from the next-token distribution after the generation prompt.
With verdict letters v_1..v_K (A, B, and C for a tie) and z the model's logits there,

    P(v_k) = exp(z[v_k]) / sum_j exp(z[v_j])                           (:func:`verdict_softmax`)

Judges prefer a position, so by default each pair (x, y) is shown in both orders and the two
are averaged (:func:`averaged_verdicts`):

    p(x better) = (P_xy(A) + P_yx(B)) / 2,   p(y better) = (P_xy(B) + P_yx(A)) / 2,
    p(tie) = (P_xy(C) + P_yx(C)) / 2

The verdict of a pair is the argmax of these; a tie (C) counts wrong on a ranked pair, as an
API judge's C does. With one order (``both_orders=False``) the order of each pair is drawn as
the API judges draw it (:func:`cheems.scoring.bench_judge.order_plan`).

Batching is the reward models': sequences are planned under a token budget and packed into one
row with the packed attention where the architecture supports it (each prompt's judge
sequences a group whose common token prefix is laid down once), else right-padded with the
attention mask (:func:`cheems.scoring.batching.scored_batches`). Only the hidden state
of each sequence's last token meets the LM head, and only the verdict tokens' rows of it, so
the probabilities do not depend on batch size or order. The vLLM back-end
(:class:`VllmJudge`, the ``[vllm]`` extra) reads the same probabilities from vLLM's
log-probabilities of the verdict tokens, each request allowed only those tokens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from cheems.llm.verdict_template import TEMPLATE_FILE, VerdictTemplate, load_verdict_template, verdict_template
from cheems.models.checkpoints import (CAUSAL_LM_ARCHITECTURES, best_attention, check_model_folder, load_tokenizer,
                                       quiet_transformers, require_torch, resolve_dtype, weights_that_fit)
from cheems.models.judge_sequences import encode_judge_prompts, verdict_token_ids
from cheems.models.packing import pack_sequences, packed_backend, padded_attention, use_packed_attention
from cheems.models.sequences import EncodeStats, default_token_budget, pad_right
from cheems.models.threads import use_available_cores
from cheems.records import CheemsInputError, Prompt, PromptText, prompt_key
from cheems.scoring.batching import resolve_token_budget, scored_batches
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.scorer import ScorerDefaults
from cheems.settings import check_settings, setting

__all__ = ["JUDGE_LANGUAGES", "JudgeModelSettings", "LocalJudge", "VerdictScorer", "VllmJudge", "averaged_verdicts",
           "check_causal_lm_folder", "check_judge_batch_invariance", "judge_bench_locally", "judge_template_of",
           "load_judge_model", "load_local_judge", "load_vllm_judge", "verdict_logits", "verdict_softmax"]

JUDGE_LANGUAGES = ("zh", "en")
VERDICT_CODES = ("A", "B", "C")  # what a Judgement's verdict holds, whatever letters the template shows
Progress = Callable[[int, int], None]


@dataclass
class JudgeModelSettings:
    """How a local causal LM judges (the running of the model is :class:`ModelSettings`')."""

    language: str | None = setting(None, choices=JUDGE_LANGUAGES, choice_name="judge language",
                                   default_text="the model's judge_template.json, else zh",
                                   help="Language of the built-in judge template (zh or en)")
    ties: bool = setting(False, default_text="on for a model trained with ties (its judge_template.json says)",
                         help="Offer a tie verdict (C); on a ranked pair it counts wrong")
    both_orders: bool = setting(True, help="Judge each pair in both orders and average the verdict probabilities "
                                "(False: one seeded random order per pair, as the API judges)")

    def __post_init__(self) -> None:
        check_settings(self)


# ----------------------------------------------------------------------------- formulas

def verdict_softmax(logits: np.ndarray, k: int) -> np.ndarray:
    """P(v_j) = exp(z_j) / sum_{i<k} exp(z_i) over the first ``k`` verdict logits of each row
    ((n, >= k) in, (n, k) out), in float64 with the row maximum subtracted first."""
    z = np.asarray(logits, np.float64)[:, :k]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def averaged_verdicts(p_xy: np.ndarray, p_yx: np.ndarray) -> np.ndarray:
    """Both presentation orders averaged: rows (p(x better), p(y better)[, p(tie)]) with
    p(x better) = (P_xy(A) + P_yx(B)) / 2, p(y better) = (P_xy(B) + P_yx(A)) / 2 and
    p(tie) = (P_xy(C) + P_yx(C)) / 2, from (n, K) verdict probabilities of the pairs shown as
    (x, y) and as (y, x)."""
    swapped = np.array(p_yx, np.float64, copy=True)
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    return (np.asarray(p_xy, np.float64) + swapped) / 2


def verdict_logits(model, hidden, token_ids: Sequence[int]):
    """The logits of ``token_ids`` from hidden states (n, h) of a causal LM: only those rows
    of its LM head, in float32, with the model's own final scaling where it has one (Gemma's
    soft-capping ``final_logit_softcapping``, Cohere's ``logit_scale``, Granite's
    ``logits_scaling``). Returns (n, len(token_ids))."""
    torch = require_torch()
    head = model.get_output_embeddings()
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=hidden.device)
    weight = getattr(head, "weight", None)
    if isinstance(head, torch.nn.Linear) and weight is not None:
        bias = head.bias.index_select(0, ids).float() if head.bias is not None else None
        logits = torch.nn.functional.linear(hidden.float(), weight.index_select(0, ids).float(), bias)
    else:
        logits = head(hidden).index_select(1, ids).float()
    config = model.config
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    if getattr(config, "logit_scale", None):
        logits = logits * config.logit_scale
    if getattr(config, "logits_scaling", None):
        logits = logits / config.logits_scaling
    return logits


# ----------------------------------------------------------------------------- models

@dataclass
class VerdictScorer(ScorerDefaults):
    """What every local judge back-end shares: the template, the tokenizer, the verdict tokens
    and how judge prompts become verdict probabilities. A back-end adds ``score_ids`` (and
    ``score_packed``, ``max_batch``: a :class:`~cheems.scoring.scorer.SequenceScorer`) returning
    each sequence's logits (or log-probabilities) of the verdict tokens, in the template's
    verdict order; its ``token_budget`` is resolved when it loads."""

    tokenizer: object
    template: VerdictTemplate
    verdict_ids: list[int]
    max_length: int = 2048
    stats: EncodeStats = field(default_factory=EncodeStats)
    packing: bool = True
    share_prefix: bool = True
    token_budget: int | None = None  # most tokens of a forward batch, resolved at load
    token_budget_auto: bool = False
    name: str = ""  # the model folder's name

    def encode_judgements(self, items: Sequence[tuple[PromptText, str, str]], ties: bool) -> list[list[int]]:
        """Token ids of the judge prompt of each (prompt, response A, response B), up to and
        including the generation prompt (the longest keep their end, counted in ``stats``)."""
        conversations = [self.template.messages(p, a, b, ties=ties) for p, a, b in items]
        return encode_judge_prompts(self.tokenizer, conversations, max_length=self.max_length, stats=self.stats)

    def verdict_probabilities(self, items: Sequence[tuple[PromptText, str, str]], ties: bool, *,
                              token_budget: int | None = None, batch_size: int = 64,
                              progress: Progress | None = None) -> np.ndarray:
        """(n, K) probabilities of the verdicts (A, B, and C with ``ties``) of each (prompt,
        response A, response B), :func:`verdict_softmax` of the next-token logits. Each distinct
        item is run once; a prompt's judge sequences share their common prefix in packed rows
        of ``token_budget`` tokens (None: the judge's own). ``progress(done, total)`` counts
        the distinct sequences."""
        index: dict[tuple, int] = {}
        first = [index.setdefault((prompt_key(p), a, b), i) for i, (p, a, b) in enumerate(items)]
        distinct = sorted(index.values())
        encoded = self.encode_judgements([items[i] for i in distinct], ties)
        groups: dict[tuple, int] = {}
        prompt_of = [groups.setdefault(prompt_key(items[i][0]), len(groups)) for i in distinct]
        logits = np.zeros((len(distinct), len(self.verdict_ids)))
        done = 0
        for batch, values in scored_batches(self, encoded, prompt_of, token_budget=token_budget,
                                            batch_size=batch_size):
            logits[batch] = np.asarray(values, np.float64).reshape(len(batch), -1)
            done += len(batch)
            if progress is not None:
                progress(done, len(distinct))
        probs = verdict_softmax(logits, len(self.template.letters(ties)))
        row = {i: k for k, i in enumerate(distinct)}
        return probs[[row[j] for j in first]]


@dataclass
class LocalJudge(VerdictScorer):
    """A causal LM through transformers as a judge (see the module docs)."""

    model: object = None
    device: str = "cpu"

    def _base(self):
        base = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
        return base if base is not None and self.model.get_output_embeddings() is not None else None

    def score_ids(self, batch: Sequence[Sequence[int]]) -> list[list[float]]:
        """Verdict logits of already-encoded sequences, as one right-padded batch."""
        torch = require_torch()
        input_ids, mask = pad_right(batch, self.tokenizer.pad_token_id, self.device)
        last = mask.sum(dim=1) - 1  # right padding: each row's last real token
        rows = torch.arange(len(batch), device=input_ids.device)
        with torch.inference_mode(), padded_attention(self.model):
            base = self._base()
            if base is None:  # an unfamiliar architecture: its own forward, whole logits
                full = self.model(input_ids=input_ids, attention_mask=mask).logits[rows, last]
                logits = full[:, self.verdict_ids].float()
            else:
                hidden = base(input_ids=input_ids, attention_mask=mask).last_hidden_state
                logits = verdict_logits(self.model, hidden[rows, last], self.verdict_ids)
        return logits.cpu().tolist()

    def score_packed(self, seqs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]] | None = None):
        """Verdict logits of already-encoded sequences packed into one row; each group of
        ``groups`` lays its common prefix down once (:mod:`cheems.models.packing`)."""
        torch = require_torch()
        batch = pack_sequences(seqs, self.device, groups=groups, backend=packed_backend(self.device))
        with torch.inference_mode():
            hidden = self._base()(**batch.forward_kwargs()).last_hidden_state
            logits = verdict_logits(self.model, hidden[0, batch.last], self.verdict_ids)
        return logits.cpu().tolist()


def check_causal_lm_folder(path: str | os.PathLike) -> dict:
    """The ``config.json`` of a model folder a judge can run: checked whole
    (:func:`cheems.models.checkpoints.check_model_folder`) and a causal language model (a
    ``*ForCausalLM`` or ``*ForConditionalGeneration`` architecture, or none named); a reward
    model folder is refused, saying what it is."""
    config = check_model_folder(path)
    archs = [str(a) for a in config.get("architectures") or []]
    generative = [a for a in archs if a.endswith(CAUSAL_LM_ARCHITECTURES)]
    if archs and not generative:
        hint = " (a reward model: evaluate it as the reward model, not as a judge)" if any(
            a.endswith("ForSequenceClassification") for a in archs) else ""
        raise CheemsInputError(f"is not a causal language model (architectures {archs}){hint}; a judge model "
                               "needs an LM head to read verdict tokens from", file=str(path))
    return config


def judge_template_of(path: str | os.PathLike, language: str | None) -> VerdictTemplate:
    """The folder's ``judge_template.json`` (what a cheems generative model was trained on),
    else the built-in template in ``language`` (zh by default)."""
    if (Path(path) / TEMPLATE_FILE).exists():
        return load_verdict_template(path)
    return verdict_template(language or "zh")


def _verdict_ids(tokenizer, template: VerdictTemplate, path) -> list[int]:
    try:
        return verdict_token_ids(tokenizer, template.verdicts, template.messages("?", "?", "?", ties=True))
    except CheemsInputError as e:
        raise e.located(file=str(path)) from None


def load_local_judge(path: str | os.PathLike, settings: ModelSettings | None = None, *,
                     language: str | None = None) -> LocalJudge:
    """A causal LM folder loaded as a judge on ``settings.device`` in ``settings.dtype`` (auto:
    bfloat16 on CUDA, float32 on CPU), packed where the architecture allows it
    (``settings.packing``, ``settings.share_prefix``); its template as :func:`judge_template_of`."""
    torch = require_torch()
    from transformers import AutoModelForCausalLM

    s = settings or ModelSettings()
    if s.device.startswith("cuda") and not torch.cuda.is_available():
        raise CheemsInputError(f"{s.device} asked for, but no CUDA device is available", field="device",
                               remedy=("device", "{} cpu runs without one"))
    check_causal_lm_folder(path)
    template = judge_template_of(path, language)
    if s.device.startswith("cpu"):
        use_available_cores()
    kwargs = {"dtype": resolve_dtype(s.dtype, s.device), "trust_remote_code": s.trust_remote_code}
    if s.device.startswith("cuda"):
        kwargs["attn_implementation"] = best_attention()
    with quiet_transformers():
        tokenizer = load_tokenizer(path, trust_remote_code=s.trust_remote_code)
    tokenizer.padding_side = "right"
    with quiet_transformers(), weights_that_fit(path):
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model = model.to(s.device).eval()
    if s.liger_kernels:
        from cheems.models.kernels import use_liger_kernels

        use_liger_kernels(model)
    budget, auto = resolve_token_budget(s.token_budget, default_token_budget(s.device))
    judge = LocalJudge(tokenizer, template, _verdict_ids(tokenizer, template, path), s.max_length,
                       share_prefix=s.share_prefix, token_budget=budget, token_budget_auto=auto,
                       name=Path(path).resolve().name, model=model, device=s.device)
    judge.packing = s.packing and judge._base() is not None and use_packed_attention(model)
    return judge


# ----------------------------------------------------------------------------- vLLM

@dataclass
class VllmJudge(VerdictScorer):
    """A causal LM in vLLM as a judge: one token per judge prompt, allowed only the verdict
    tokens, whose log-probabilities (after that restriction: the engine runs with
    ``logprobs_mode="processed_logprobs"``) give :func:`verdict_softmax` the same
    probabilities as the logits do. A prompt's judge sequences go to vLLM together, so its
    prefix cache computes their common prefix once."""

    llm: object = None

    def score_ids(self, batch: Sequence[Sequence[int]]) -> list[list[float]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=len(self.verdict_ids),
                                allowed_token_ids=list(self.verdict_ids))
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in batch], params,
                                    use_tqdm=False)
        rows = []
        for out in outputs:
            logprobs = out.outputs[0].logprobs[0]
            missing = [t for t in self.verdict_ids if t not in logprobs]
            if missing:
                raise CheemsInputError("vLLM returned no log-probability for some verdict tokens; a vLLM with "
                                       "logprobs_mode (0.10.2 or later) is needed")
            rows.append([float(getattr(logprobs[t], "logprob", logprobs[t])) for t in self.verdict_ids])
        return rows

    def score_packed(self, seqs: Sequence[Sequence[int]], layout: Sequence[Sequence[int]]) -> list[list[float]]:
        """``seqs`` in this order: a prompt's judge sequences adjacent, for vLLM's prefix cache."""
        return self.score_ids(seqs)

    def max_batch(self, asked: int) -> int:
        return max(asked, 1 << 16)


def load_vllm_judge(path: str | os.PathLike, settings: ModelSettings | None = None, *,
                    language: str | None = None, tensor_parallel_size: int = 1,
                    gpu_memory_utilization: float = 0.9) -> VllmJudge:
    """A causal LM folder in vLLM (the ``[vllm]`` extra, GPU) as a judge; prefix caching as
    ``settings.share_prefix`` says."""
    s = settings or ModelSettings(backend="vllm")
    from cheems.scoring.vllm_backend import VLLM_TOKEN_BUDGET

    check_causal_lm_folder(path)
    template = judge_template_of(path, language)
    try:
        import vllm
    except ImportError:
        raise CheemsInputError("the vLLM backend needs a GPU machine with the vllm extra: "
                               "pip install 'cheems[vllm]'") from None
    llm = vllm.LLM(model=str(path), dtype=s.dtype, max_model_len=s.max_length + 1,
                   tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
                   trust_remote_code=s.trust_remote_code, enable_prefix_caching=s.share_prefix,
                   logprobs_mode="processed_logprobs")
    tokenizer = llm.get_tokenizer()
    budget, auto = resolve_token_budget(s.token_budget, VLLM_TOKEN_BUDGET)
    return VllmJudge(tokenizer, template, _verdict_ids(tokenizer, template, path), s.max_length,
                     share_prefix=s.share_prefix, token_budget=budget, token_budget_auto=auto,
                     name=Path(path).resolve().name, llm=llm)


def load_judge_model(path: str | os.PathLike, settings: ModelSettings | None = None, *,
                     language: str | None = None) -> VerdictScorer:
    """The judge on the back-end ``settings.backend`` names (transformers or vllm)."""
    s = settings or ModelSettings()
    loader = load_vllm_judge if s.backend == "vllm" else load_local_judge
    return loader(path, s, language=language)


# ----------------------------------------------------------------------------- a benchmark

def check_judge_batch_invariance(judge: VerdictScorer, prompts: list[Prompt], *, ties: bool = False, n: int = 16,
                                 batch_size: int = 64, tolerance: float = 1e-5) -> dict:
    """The verdict probabilities of up to ``n`` judge prompts (the first pairs, both orders)
    one at a time against the same prompts in batches of ``batch_size``. Returns ``{"n",
    "max_abs_diff", "tolerance", "ok"}``; a difference above the tolerance means padding or
    positions leak into the verdicts."""
    from cheems.scoring.bench_judge import order_plan

    items = []
    for j in order_plan(prompts, both_orders=True, seed=0)[:n]:
        content = {r.id: r.content for r in prompts[j.prompt_index].responses}
        items.append((prompts[j.prompt_index].prompt, *(content[r] for r in j.shown)))
    if not items:
        raise CheemsInputError("nothing to check: no ranked pairs")
    saved, judge.stats = judge.stats, EncodeStats()  # the check's encodings are not the run's
    alone = np.vstack([judge.verdict_probabilities([it], ties, batch_size=1) for it in items])
    together = judge.verdict_probabilities(items, ties, batch_size=batch_size)
    judge.stats = saved
    diff = float(np.abs(alone - together).max())
    return {"n": len(items), "max_abs_diff": diff, "tolerance": tolerance, "ok": diff <= tolerance}


def judge_bench_locally(prompts: list[Prompt], judge: VerdictScorer, *, ties: bool = False, both_orders: bool = True,
                        seed: int = 0, batch_size: int = 64, n_bootstrap: int = 1000, name: str = "judge",
                        progress: Progress | None = None) -> tuple[dict, list[dict]]:
    """Judge every ranked pair of ``prompts`` with a local judge: (report, items).

    The report has the API judge's fields (:func:`cheems.scoring.bench_judge.judgement_report`:
    per-order results, position consistency, first-position rate, tie verdicts; each order's
    verdict the argmax of its probabilities) and its headline numbers are those of each pair's
    final verdict: the argmax of :func:`averaged_verdicts` with both orders, else of the one
    order's probabilities. Each pair of ``report["pairs"]`` adds ``probabilities`` ("first",
    "second", and "tie" with ``ties`` -> probability), ``choice`` and ``correct``; each item adds ``probabilities``,
    per pair [p(better), p(worse)(, p(tie))]. O(pairs) forward sequences (two per pair with
    both orders)."""
    from cheems.metrics import Outcomes, evaluate_outcomes
    from cheems.scoring.bench_judge import judgement_report, order_plan

    plan = order_plan(prompts, both_orders=both_orders, seed=seed)
    items = []
    for j in plan:
        content = {r.id: r.content for r in prompts[j.prompt_index].responses}
        a, b = j.shown
        items.append((prompts[j.prompt_index].prompt, content[a], content[b]))
    probs = judge.verdict_probabilities(items, ties, batch_size=batch_size, progress=progress)
    for j, p in zip(plan, probs):
        j.verdict = VERDICT_CODES[int(np.argmax(p))]
    stats = {"requests": len({(prompt_key(p), a, b) for p, a, b in items}), "cached": 0}
    report = judgement_report(prompts, plan, model=name, template=judge.template.version, both_orders=both_orders,
                              seed=seed, stats=stats, n_bootstrap=n_bootstrap)
    n_comp = np.zeros(len(prompts), np.int64)
    n_right = np.zeros(len(prompts), np.int64)
    # the report lists pairs in plan order, as _pair_probabilities does
    for rec, ((index, _, _), p) in zip(report["pairs"], _pair_probabilities(plan, probs).items()):
        choice = [rec["first"], rec["second"], "tie"][int(np.argmax(p))]
        rec.update(probabilities=dict(zip(("first", "second", "tie"), map(float, p))), choice=choice,
                   correct=choice == rec["better"])
        n_comp[index] += 1
        n_right[index] += rec["correct"]
    if both_orders:
        final = evaluate_outcomes(prompts, Outcomes(n_comp, n_right), n_bootstrap=n_bootstrap, seed=seed)
        report.update(overall=final["overall"], overall_ci=final["overall_ci"], subsets=final["subsets"])
    report.update(judge_ties=ties, verdict="averaged over both orders" if both_orders else "one order per pair",
                  judge_backend="vllm" if isinstance(judge, VllmJudge) else "transformers")
    return report, _items(prompts, report)


def _pair_probabilities(plan, probs: np.ndarray) -> dict[tuple, np.ndarray]:
    """Per pair (in plan order), (p(first better), p(second better)[, p(tie)]): both orders
    averaged (:func:`averaged_verdicts`), or the one order's probabilities, A and B read as
    the responses that order showed."""
    by_pair: dict[tuple, dict[str, np.ndarray]] = {}
    for j, p in zip(plan, probs):
        by_pair.setdefault(j.pair, {})[j.order] = np.asarray(p, np.float64)
    out = {}
    for pair, orders in by_pair.items():
        if len(orders) == 2:
            out[pair] = averaged_verdicts(orders["ab"][None], orders["ba"][None])[0]
        else:
            ((order, p),) = orders.items()
            out[pair] = p if order == "ab" else p[[1, 0, *range(2, len(p))]]
    return out


def _items(prompts: list[Prompt], report: dict) -> list[dict]:
    """Per prompt, its pairs as [better, worse, "right"|"wrong"] by the final verdict (the shape
    of :func:`cheems.scoring.bench_judge.judge_items`) and their [p(better), p(worse)(, p(tie))]."""
    rows = {p.id: {"prompt_id": p.id, "subset": p.subset or "default", "category": p.main_category, "pairs": [],
                   "probabilities": [], "right": 0, "wrong": 0} for p in prompts}
    for rec in report["pairs"]:
        worse = rec["second"] if rec["better"] == rec["first"] else rec["first"]
        outcome = "right" if rec["correct"] else "wrong"
        row = rows[rec["prompt_id"]]
        row["pairs"].append([rec["better"], worse, outcome])
        keys = ["first", "second"] if rec["better"] == rec["first"] else ["second", "first"]
        keys += ["tie"] if "tie" in rec["probabilities"] else []
        row["probabilities"].append([rec["probabilities"][k] for k in keys])
        row[outcome] += 1
    return list(rows.values())
