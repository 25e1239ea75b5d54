"""Is one reward model really better than another on the same benchmark?

From two `cheems eval --json` reports and their per-prompt items (``OUT.items.jsonl``):

- the difference B - A ("A vs B": positive when B, the second report, scores higher; the result's
  ``"difference"`` key says ``"b - a"``) in Accuracy, Exact Match and their mean per subset and in Overall,
  with a *paired* bootstrap over prompts: each resample draws the same prompts for both models
  (within each subset, as `cheems eval` does), so what the two share cancels; a two-sided
  p-value is twice the smaller tail share of resampled differences on either side of 0;
- McNemar's exact test on per-pair correctness (pairs right for one model and wrong for the
  other; the binomial test of those discordant pairs at 1/2), overall and per main category,
  with Holm's correction across categories.

Reports of different benchmarks (another fingerprint) are refused. Any two scorers pair up, a
discriminative reward model with a generative judge included: both items files list each prompt's
ranked pairs as [better, worse, outcome] (a judge's tie verdict is "wrong", counted as reversed),
and ``scorers`` records which kind each side is.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from cheems.metrics import Outcomes, exact_matches, quantile_interval
from cheems.records import CheemsInputError

__all__ = ["compare_reports", "holm", "mcnemar_exact", "paired_bootstrap"]


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of ``only_a`` successes in
    ``only_a + only_b`` discordant pairs at p = 1/2 (1.0 without discordant pairs)."""
    from scipy.stats import binomtest

    n = only_a + only_b
    return 1.0 if n == 0 else float(binomtest(only_a, n, 0.5).pvalue)


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (same keys; each capped at 1)."""
    order = sorted(p_values, key=p_values.get)
    m = len(order)
    out, running = {}, 0.0
    for k, key in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[key]))
        out[key] = running
    return out


def _subset_scores(items: list[dict], weights: np.ndarray, ties: str) -> np.ndarray:
    """Per bootstrap weighting (rows of ``weights``): [accuracy, exact match] of one model on one
    subset, macro over main categories as `cheems.metrics.evaluate` computes them."""
    cats = sorted({it["category"] for it in items})
    cat = np.array([cats.index(it["category"]) for it in items])
    n_comp = np.array([len(it["pairs"]) for it in items], float)
    right = np.array([it["right"] for it in items], float)
    reversed_ = np.array([it.get("reversed", it.get("wrong", 0)) for it in items], float)
    exact = exact_matches(Outcomes(n_comp.astype(np.int64), right.astype(np.int64), reversed_.astype(np.int64),
                                   (n_comp - right - reversed_).astype(np.int64)), ties).astype(float)
    onehot = np.eye(len(cats))[cat]
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = (weights @ (onehot * right[:, None])) / (weights @ (onehot * n_comp[:, None]))
        em = (weights @ (onehot * exact[:, None])) / (weights @ onehot)
    return np.stack([np.nanmean(acc, axis=1), np.nanmean(em, axis=1)], axis=1)


def paired_bootstrap(items_a: list[dict], items_b: list[dict], *, ties: str = "official", n_bootstrap: int = 2000,
                     seed: int = 0, confidence: float = 0.95) -> dict:
    """Differences B - A with a paired bootstrap over prompts (the same resample for both)."""
    rng = np.random.default_rng(seed)
    by_subset_a, by_subset_b = defaultdict(list), defaultdict(list)
    for a, b in zip(items_a, items_b):
        if a["pairs"]:
            by_subset_a[a["subset"]].append(a)
            by_subset_b[a["subset"]].append(b)
    subsets, overall_a, overall_b = {}, [], []
    for name in sorted(by_subset_a):
        n = len(by_subset_a[name])
        w = np.vstack([np.ones(n), rng.multinomial(n, np.full(n, 1 / n), size=n_bootstrap)])  # row 0: the data
        sa = _subset_scores(by_subset_a[name], w, ties)
        sb = _subset_scores(by_subset_b[name], w, ties)
        entry = {}
        for k, metric in enumerate(("accuracy", "exact_match")):
            entry[metric] = _difference(sa[:, k], sb[:, k], confidence)
        entry["score"] = _difference(sa.mean(axis=1), sb.mean(axis=1), confidence)
        subsets[name] = entry
        overall_a.append(sa.mean(axis=1))
        overall_b.append(sb.mean(axis=1))
    overall = _difference(np.mean(overall_a, axis=0), np.mean(overall_b, axis=0), confidence) if subsets else None
    return {"subsets": subsets, "overall": overall, "n_bootstrap": n_bootstrap, "seed": seed, "confidence": confidence}


def _difference(a: np.ndarray, b: np.ndarray, confidence: float) -> dict:
    """Row 0 is the point estimate, the rest resamples."""
    diff = b[1:] - a[1:]
    p = float(min(1.0, 2 * min((diff <= 0).mean(), (diff >= 0).mean()))) if len(diff) else None
    return {"a": float(a[0]), "b": float(b[0]), "difference": float(b[0] - a[0]),
            "ci": quantile_interval(diff, confidence) if len(diff) else None,
            "p_value": p}


def _pair_outcomes(items: list[dict]) -> dict:
    return {(it["prompt_id"], b, w): (outcome == "right", it["category"])
            for it in items for b, w, outcome in it["pairs"]}


def compare_reports(report_a: dict, items_a: list[dict], report_b: dict, items_b: list[dict], *,
                    n_bootstrap: int = 2000, seed: int = 0) -> dict:
    """The comparison of two eval reports of one benchmark (see the module docstring)."""
    fa, fb = report_a.get("benchmark"), report_b.get("benchmark")
    if not fa or not fb:
        raise CheemsInputError("a report without a benchmark fingerprint: make both again with a current "
                               "cheems evaluation")
    if fa != fb:
        raise CheemsInputError(f"the reports are of different benchmarks ({fa['prompts']} prompts, "
                               f"{fa['fingerprint'][:12]}… vs {fb['prompts']} prompts, {fb['fingerprint'][:12]}…)")
    order = {it["prompt_id"]: k for k, it in enumerate(items_a)}
    if sorted(order) != sorted(it["prompt_id"] for it in items_b):
        raise CheemsInputError("the two items files hold different prompts")
    items_b = sorted(items_b, key=lambda it: order[it["prompt_id"]])
    ties = report_a.get("ties", "official")
    result = {"kind": "compare", "a": report_a.get("model"), "b": report_b.get("model"), "difference": "b - a",
              "ties": ties, "benchmark": fa,
              "scorers": {"a": report_a.get("scorer"), "b": report_b.get("scorer")}}
    result.update(paired_bootstrap(items_a, items_b, ties=ties, n_bootstrap=n_bootstrap, seed=seed))
    pa, pb = _pair_outcomes(items_a), _pair_outcomes(items_b)
    if pa.keys() != pb.keys():
        raise CheemsInputError("the two items files hold different pairs")
    counts: dict = defaultdict(lambda: [0, 0])
    for key, (right_a, cat) in pa.items():
        right_b = pb[key][0]
        if right_a != right_b:
            counts[cat][0 if right_a else 1] += 1
    only_a, only_b = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
    result["mcnemar"] = {"only_a": only_a, "only_b": only_b, "p_value": mcnemar_exact(only_a, only_b)}
    cats = sorted({cat for _, cat in pa.values()})
    raw = {c: mcnemar_exact(*counts[c]) for c in cats}
    adjusted = holm(raw)
    result["categories"] = {c: {"only_a": counts[c][0], "only_b": counts[c][1], "p_value": raw[c],
                                "p_holm": adjusted[c]} for c in cats}
    return result
