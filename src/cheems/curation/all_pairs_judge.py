"""All-pair LLM annotation of sampled responses (paper §4.2).

For a prompt with N responses the judge compares all C(N, 2) pairs, in one random order per
pair (seeded; the paper randomises the order against position bias) or in both orders. Each
verdict becomes a comparison whose ``a`` is the response shown first (回答A) and ``b`` the one
shown second: ``A`` gives label ``g``, ``B`` gives ``b`` and ``C`` (no clear difference)
gives the tie ``s``. Its provenance stays with it: the judge, the order, the parsed verdict
and the raw reply. A reply without a verdict (or with contradicting ones, see
:func:`cheems.scoring.judge_prompt.parse_verdict`), or a request that failed after its
retries, gives no comparison; it is recorded in the row's ``failed_judgements`` with the
reason, so every planned judgement is accounted for. A reply that is no chat completion with
text is a failed request: its error quotes the raw reply, and it is never cached. Replies are
cached (see :mod:`cheems.llm.cache`), so a rerun after a crash sends only what is missing.

A local judge (:func:`judge_all_pairs_locally`, a causal LM read by
:mod:`cheems.scoring.local_judge`) samples nothing: each pair's comparison comes from its
verdict probabilities, by default averaged over both orders, and carries them.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable, Iterable, Sequence

import numpy as np

from cheems.records import Comparison, Prompt
from cheems.scoring.bench_judge import ORDERS, Generate, JudgeConfig, Judgement, first_position_rate, run_judgements

__all__ = ["LOCAL_CHUNK_PROMPTS", "VERDICT_LABELS", "JudgeResult", "all_pairs_plan", "judge_all_pairs",
           "judge_all_pairs_locally", "pair_verdict", "plan_all_pairs"]

VERDICT_LABELS = {"A": "g", "B": "b", "C": "s"}


def plan_all_pairs(prompts: list[Prompt], config: JudgeConfig) -> list[Judgement]:
    """:func:`all_pairs_plan` as ``config`` says (its ``both_orders`` and ``seed``)."""
    return all_pairs_plan(prompts, both_orders=config.both_orders, seed=config.seed)


def all_pairs_plan(prompts: Sequence[Prompt], *, both_orders: bool, seed: int) -> list[Judgement]:
    """Every pair of responses of every prompt, in response-list order (``combinations``),
    each in both orders or in one drawn by ``random.Random(seed)``, one draw per pair in that
    sequence. O(sum of N^2)."""
    rng = random.Random(seed)
    plan = []
    for i, p in enumerate(prompts):
        for first, second in combinations([r.id for r in p.responses], 2):
            orders = ORDERS if both_orders else (rng.choice(ORDERS),)
            plan.extend(Judgement(i, first, second, None, order) for order in orders)
    return plan


@dataclass
class JudgeResult:
    prompts: list[Prompt]
    stats: dict = field(default_factory=dict)

    def report(self) -> dict:
        return dict(self.stats)


def judge_all_pairs(prompts: list[Prompt], config: JudgeConfig,
                    progress: Callable[[int, int], None] | None = None, *,
                    generate: Generate | None = None) -> JudgeResult:
    """Judge all pairs of every prompt and return the prompts with the judge's comparisons
    appended (comparisons already present are kept before them).

    The report: ``prompts``, ``prompts_without_pairs`` (fewer than two responses),
    ``pairs``, ``judgements`` (planned), ``comparisons`` (by label), ``unparseable``,
    ``failed`` (requests that failed for good), ``truncated`` (replies cut off by
    ``max_tokens``), ``first_position_rate`` (share of A/B verdicts for 回答A),
    ``requests`` sent and ``cached``. ``judgements == comparisons + unparseable + failed``.
    """
    plan = plan_all_pairs(prompts, config)
    stats = asyncio.run(run_judgements(prompts, plan, config, progress, generate=generate))
    by_prompt: dict[int, list[Judgement]] = {}
    for j in plan:
        by_prompt.setdefault(j.prompt_index, []).append(j)
    out = []
    labels = {"g": 0, "b": 0, "s": 0}
    unparseable = failed = 0
    for i, p in enumerate(prompts):
        comparisons = list(p.comparisons)
        failures = list(p.extra.get("failed_judgements", []))
        for j in by_prompt.get(i, []):
            a, b = j.shown
            provenance = {"order": j.order, "verdict": j.verdict, "reply": j.text}
            if j.finish_reason is not None:
                provenance["finish_reason"] = j.finish_reason
            if j.error is not None:
                failed += 1
                failures.append({"a": a, "b": b, "judge": config.model, "order": j.order, "error": j.error})
            elif j.verdict is None:
                unparseable += 1
                failures.append({"a": a, "b": b, "judge": config.model, "order": j.order,
                                 "error": "no verdict in the reply", "reply": j.text})
            else:
                label = VERDICT_LABELS[j.verdict]
                labels[label] += 1
                comparisons.append(Comparison(a, b, label, annotator=config.model, source="judge",
                                              extra=provenance))
        extra = dict(p.extra)
        if failures:
            extra["failed_judgements"] = failures
        out.append(Prompt(p.id, p.prompt, p.responses, p.rank, comparisons, p.category, p.subset, extra))
    report = {
        "judge": config.model, "orders": "both" if config.both_orders else "random", "seed": config.seed,
        "prompts": len(prompts), "prompts_without_pairs": sum(len(p.responses) < 2 for p in prompts),
        "pairs": len({j.pair for j in plan}), "judgements": len(plan), "comparisons": sum(labels.values()),
        "labels": labels, "unparseable": unparseable, "failed": failed,
        "truncated": sum(j.finish_reason == "length" for j in plan),
        "first_position_rate": first_position_rate(plan),
        "requests": stats["requests"], "cached": stats["cached"],
    }
    return JudgeResult(out, report)


# ----------------------------------------------------------------------------- a local judge

LOCAL_CHUNK_PROMPTS = 64
"""Prompts a local judge runs between two appends to the resumable verdicts file."""


def pair_verdict(orders: dict[str, Sequence[float]]) -> tuple[str, str, list[float]]:
    """(label, verdict, probabilities) of one pair (first, second) from the verdict
    probabilities of the orders it was shown in (``{"ab": [P(A), P(B)(, P(C))], "ba": ...}``):
    with both orders the probabilities are :func:`cheems.scoring.local_judge.averaged_verdicts`
    of the two, (p(first better), p(second better)(, p(tie))), and the comparison reads
    (first, second); with one order they are that order's, and the comparison reads as the
    pair was shown. The verdict is their argmax (A, B, or C), the label g, b or s."""
    from cheems.scoring.local_judge import averaged_verdicts

    if len(orders) == 2:
        p = averaged_verdicts(np.asarray([orders["ab"]]), np.asarray([orders["ba"]]))[0]
    else:
        (p,) = (np.asarray(v, np.float64) for v in orders.values())
    verdict = "ABC"[int(np.argmax(p))]
    return VERDICT_LABELS[verdict], verdict, [float(x) for x in p]


def judge_all_pairs_locally(prompts: list[Prompt], judge, *, name: str, ties: bool = False, both_orders: bool = True,
                            seed: int = 0, token_budget: int | None = None, batch_size: int = 64,
                            done: Iterable[dict] = (), record: Callable[[list[dict]], None] | None = None,
                            progress: Callable[[int, int], None] | None = None) -> JudgeResult:
    """Judge all pairs of every prompt with a local judge (a
    :class:`~cheems.scoring.local_judge.VerdictScorer` named ``name``, its model folder's name)
    and return the prompts with one comparison per pair appended (:func:`pair_verdict`: label
    g, b, or s for a tie verdict with ``ties``). Each comparison's ``annotator`` is ``name``
    and its extra fields hold ``judge_model`` (``name``), ``verdict``, ``orders``
    ("both averaged", or the order shown) and ``probabilities`` {"a", "b"(, "tie")}.

    Resumable: ``done`` holds verdict rows of an earlier run (``{"prompt_id", "first",
    "second", "orders": {order: probabilities}}``), whose pairs are not run again; the new rows
    go to ``record`` every :data:`LOCAL_CHUNK_PROMPTS` prompts. ``progress(done, total)``
    counts prompts. O(sum of N^2) forward sequences (two per pair with both orders)."""
    plan = all_pairs_plan(prompts, both_orders=both_orders, seed=seed)
    rows = {(r["prompt_id"], r["first"], r["second"]): r for r in done}
    resumed = sum((prompts[j.prompt_index].id, j.first, j.second) in rows for j in plan)
    todo = [j for j in plan if (prompts[j.prompt_index].id, j.first, j.second) not in rows]
    for start in range(0, len(prompts), LOCAL_CHUNK_PROMPTS):
        chunk = [j for j in todo if start <= j.prompt_index < start + LOCAL_CHUNK_PROMPTS]
        new = _verdict_rows(prompts, chunk, judge, ties, token_budget, batch_size)
        rows.update(((r["prompt_id"], r["first"], r["second"]), r) for r in new)
        if record is not None and new:
            record(new)
        if progress is not None:
            progress(min(start + LOCAL_CHUNK_PROMPTS, len(prompts)), len(prompts))
    out, labels, sided = [], {"g": 0, "b": 0, "s": 0}, []
    for p in prompts:
        comparisons = list(p.comparisons)
        for first, second in combinations([r.id for r in p.responses], 2):
            row = rows[(p.id, first, second)]
            label, verdict, probs = pair_verdict(row["orders"])
            shown = (first, second) if len(row["orders"]) == 2 or "ab" in row["orders"] else (second, first)
            labels[label] += 1
            sided += [int(np.argmax(v)) for v in row["orders"].values() if int(np.argmax(v)) < 2]
            extra = {"judge_model": name, "verdict": verdict,
                     "orders": "both averaged" if len(row["orders"]) == 2 else next(iter(row["orders"])),
                     "probabilities": dict(zip(("a", "b", "tie"), probs))}
            comparisons.append(Comparison(*shown, label, annotator=name, source="judge", extra=extra))
        out.append(Prompt(p.id, p.prompt, p.responses, p.rank, comparisons, p.category, p.subset, dict(p.extra)))
    consistent = [_consistent(r["orders"]) for r in rows.values() if len(r["orders"]) == 2]
    report = {"judge": name, "orders": "both averaged" if both_orders else "random", "seed": seed, "ties": ties,
              "prompts": len(prompts), "prompts_without_pairs": sum(len(p.responses) < 2 for p in prompts),
              "pairs": len({j.pair for j in plan}), "judgements": len(plan), "comparisons": sum(labels.values()),
              "labels": labels, "unparseable": 0, "failed": 0, "resumed_judgements": resumed,
              "first_position_rate": sided.count(0) / len(sided) if sided else None,
              "position_consistency": sum(consistent) / len(consistent) if consistent else None}
    return JudgeResult(out, report)


def _consistent(orders: dict[str, Sequence[float]]) -> bool:
    """Whether a pair's two orders, each read by its own argmax, pick the same response (or both a tie)."""
    ab, ba = int(np.argmax(orders["ab"])), int(np.argmax(orders["ba"]))
    return ab == (ba if ba == 2 else 1 - ba)


def _verdict_rows(prompts: list[Prompt], plan: list[Judgement], judge, ties: bool, token_budget: int | None,
                  batch_size: int) -> list[dict]:
    """The verdict probabilities of every judgement of ``plan``, one row per pair."""
    items = []
    for j in plan:
        p = prompts[j.prompt_index]
        content = {r.id: r.content for r in p.responses}
        items.append((p.prompt, *(content[r] for r in j.shown)))
    if not items:
        return []
    probs = judge.verdict_probabilities(items, ties, token_budget=token_budget, batch_size=batch_size)
    rows: dict[tuple, dict] = {}
    for j, pr in zip(plan, probs):
        row = rows.setdefault(j.pair, {"prompt_id": prompts[j.prompt_index].id, "first": j.first,
                                       "second": j.second, "orders": {}})
        row["orders"][j.order] = [float(x) for x in pr]
    return list(rows.values())
