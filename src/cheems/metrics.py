"""CheemsBench metrics (paper §3.3): Accuracy, Exact Match, Overall, bootstrap CIs.

Per prompt, every pair of responses with different ranks is one comparison. A comparison is
right when the better response scores strictly higher, *reversed* when it scores strictly
lower, and *tied* when the two scores are equal. Accuracy counts only right comparisons, so
a tie is wrong. Exact Match has two tie rules (``ties``):

- ``"official"`` (the default, the official CheemsRM evaluator's rule): a prompt keeps its
  Exact Match unless some comparison is reversed, so ties do not break it;
- ``"strict"``: a prompt's Exact Match needs every comparison right, so a tie breaks it.

Within a subset, Accuracy is pooled over the comparisons of each main category and Exact
Match is the share of a category's prompts that keep it; both are then averaged over main
categories (macro). Overall is the mean over subsets of (Accuracy + Exact Match) / 2, the
"Overall" of the paper's Table 2. Prompts whose responses are all tied have no comparison
and are left out (counted as ``n_skipped``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

import numpy as np

from cheems.records import CheemsInputError, Prompt, is_integer, preference_pairs, ranked_pairs
from cheems.settings import LARGEST_INTEGER

__all__ = ["TIES", "Outcomes", "PairScores", "StatsSums", "benchmark_fingerprint", "calibration_error",
           "check_bootstrap", "check_seed", "check_ties",
           "dataset_stats", "evaluate", "evaluate_outcomes", "evaluate_scores", "exact_matches", "kendall_tau_b",
           "kendall_taus", "length_diagnostic",
           "pair_scores", "prompt_items", "quantile_interval",
           "prompt_outcomes"]

TIES = ("official", "strict")  # the Exact Match tie rules, the default first


@dataclass
class Outcomes:
    """Per-prompt comparison counts: ``n_comparisons[i]`` ranked pairs, of which ``n_correct[i]``
    are right (better response scores strictly higher), ``n_reversed[i]`` reversed (strictly
    lower) and ``n_tied[i]`` tied (equal scores).

    Built from two counts (a judge's verdicts, where a tie, an unparseable reply or a failed
    request is wrong), every wrong comparison counts as reversed and none as tied, so both
    tie rules give the same numbers.
    """

    n_comparisons: np.ndarray
    n_correct: np.ndarray
    n_reversed: np.ndarray | None = None
    n_tied: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.n_comparisons = np.asarray(self.n_comparisons, np.int64)
        self.n_correct = np.asarray(self.n_correct, np.int64)
        if self.n_reversed is None:
            self.n_reversed = self.n_comparisons - self.n_correct
        if self.n_tied is None:
            self.n_tied = np.zeros_like(self.n_comparisons)
        self.n_reversed = np.asarray(self.n_reversed, np.int64)
        self.n_tied = np.asarray(self.n_tied, np.int64)


def check_ties(ties: str) -> None:
    """Raise CheemsInputError unless ``ties`` is one of :data:`TIES`."""
    if ties not in TIES:
        raise CheemsInputError(f"unknown tie rule {ties!r}: use " + " or ".join(TIES), field="ties")


def check_seed(seed, field: str = "seed") -> None:
    """A seed is an integer >= 0 (numpy's generators refuse negative ones) of at most 64 bits."""
    if not is_integer(seed) or seed < 0:
        raise CheemsInputError(f"must be an integer >= 0, got {seed!r}", field=field)
    if seed > LARGEST_INTEGER:
        raise CheemsInputError(f"must be at most 2**63 - 1 ({LARGEST_INTEGER}), got {seed}", field=field)


MAX_BOOTSTRAP = 1_000_000
"""The most bootstrap resamples a CI takes: far past what a 95% interval needs (1000 to 10000),
and each resample is a row of numbers per prompt."""


def check_bootstrap(n_bootstrap, minimum: int = 0, field: str = "n_bootstrap") -> None:
    """A number of bootstrap resamples: an integer in [``minimum``, :data:`MAX_BOOTSTRAP`] (0: no CI)."""
    if not is_integer(n_bootstrap) or not minimum <= n_bootstrap <= MAX_BOOTSTRAP:
        none = " (0: no bootstrap)" if minimum == 0 else ""
        raise CheemsInputError(f"must be an integer in [{minimum}, {MAX_BOOTSTRAP}]{none}, got {n_bootstrap!r}",
                               field=field)


def exact_matches(out: Outcomes, ties: str = "official") -> np.ndarray:
    """Per prompt, whether it keeps its Exact Match: no reversed comparison (``"official"``)
    or every comparison right (``"strict"``). O(prompts)."""
    check_ties(ties)
    if ties == "official":
        return out.n_reversed == 0
    return out.n_correct == out.n_comparisons


@dataclass
class PairScores:
    """Every ranked pair of every prompt with its two scores, in prompt order: pair k belongs to
    prompt ``owner[k]``, its better response is ``better_ids[k]`` scoring ``better[k]``."""

    owner: np.ndarray
    better: np.ndarray
    worse: np.ndarray
    better_ids: list[str]
    worse_ids: list[str]
    n_prompts: int
    better_len: np.ndarray | None = None  # characters of each pair's responses (pair_scores(figures=True))
    worse_len: np.ndarray | None = None
    taus: list[float | None] | None = None  # per prompt, Kendall's tau-b (pair_scores(figures=True))

    def outcomes(self) -> Outcomes:
        def per_prompt(flags: np.ndarray) -> np.ndarray:
            return np.bincount(self.owner, weights=flags, minlength=self.n_prompts).astype(np.int64)

        counts = np.bincount(self.owner, minlength=self.n_prompts).astype(np.int64)
        return Outcomes(counts, per_prompt(self.better > self.worse), per_prompt(self.better < self.worse),
                        per_prompt(self.better == self.worse))


def pair_scores(prompts: list[Prompt], scores: Mapping[tuple[str, str], float], *,
                figures: bool = False) -> PairScores:
    """Gather each prompt's ranked pairs and their scores into flat arrays. O(total pairs).

    The one pass over the prompts that an evaluation needs: with ``figures``, the same loop also
    records each pair's response lengths (for :func:`length_diagnostic`) and each prompt's
    Kendall tau-b (:func:`kendall_tau_b`). Raises CheemsInputError naming the first
    (prompt id, response id) without a score.
    """
    better: list[float] = []
    worse: list[float] = []
    better_ids: list[str] = []
    worse_ids: list[str] = []
    lengths: list[tuple[int, int]] = []
    taus: list[float | None] = []
    counts = np.zeros(len(prompts), np.int64)
    missing = 0
    first_missing = None
    for i, p in enumerate(prompts):
        if p.rank is None:
            raise CheemsInputError(f"prompt {p.id!r} has no rank (run `cheems rank` first)", field="rank")
        s = {}
        for r in p.responses:
            v = scores.get((p.id, r.id))
            if v is None:
                missing += 1
                first_missing = first_missing or (p.id, r.id)
            s[r.id] = v
        if missing:
            continue
        pairs = ranked_pairs(p.rank)
        counts[i] = len(pairs)
        for w, l in pairs:
            better.append(s[w])
            worse.append(s[l])
            better_ids.append(w)
            worse_ids.append(l)
        if figures:
            chars = {r.id: len(r.content) for r in p.responses}
            lengths.extend((chars[w], chars[l]) for w, l in pairs)
            ids = [r.id for r in p.responses if r.id in p.rank]
            taus.append(kendall_tau_b([-p.rank[k] for k in ids], [s[k] for k in ids]))
    if missing:
        raise CheemsInputError(f"{missing} response(s) have no score, the first is prompt "
                               f"{first_missing[0]!r} response {first_missing[1]!r}", field="score")
    owner = np.repeat(np.arange(len(prompts)), counts)  # pair -> its prompt
    out = PairScores(owner, np.asarray(better, float), np.asarray(worse, float), better_ids, worse_ids,
                     len(prompts))
    if figures:
        chars = np.asarray(lengths, np.int64).reshape(-1, 2)
        out.better_len, out.worse_len, out.taus = chars[:, 0], chars[:, 1], taus
    return out


def prompt_outcomes(prompts: list[Prompt], scores: Mapping[tuple[str, str], float]) -> Outcomes:
    """Count each prompt's ranked pairs and how many of them the scores order right, reversed
    and tied. O(total pairs), one vectorised pass after gathering the pairs' scores.

    Raises CheemsInputError naming the first (prompt id, response id) without a score.
    """
    return pair_scores(prompts, scores).outcomes()


def calibration_error(better: np.ndarray, worse: np.ndarray, n_bins: int = 5) -> float | None:
    """The expected calibration error of the official CheemsRM evaluator, over ranked pairs.

    With d = score(better) - score(worse), the pairs are put into ``n_bins`` equal-width bins of
    |d| over [0, max |d|) (a bin holds lo <= |d| < hi, so the pairs at exactly max |d| fall in no
    bin, as in the official code); a pair counts as right when d >= 0 (a tie counts right here).
    ECE = sum over non-empty bins of |accuracy - sigmoid(mean |d|)| weighted by the bin's share of
    the binned pairs. None when no pair lands in a bin (no pairs, or every |d| equal)."""
    d = np.asarray(better, float) - np.asarray(worse, float)
    diffs = np.abs(d)
    if not len(d):
        return None
    step = diffs.max() / n_bins
    total, weighted = 0, 0.0
    for i in range(n_bins):
        in_bin = (diffs >= i * step) & (diffs < (i + 1) * step)
        n = int(in_bin.sum())
        if n:
            acc = float((d[in_bin] >= 0).mean())
            confidence = 1 / (1 + np.exp(-diffs[in_bin].mean()))
            weighted += abs(acc - confidence) * n
            total += n
    return float(weighted / total) if total else None


def kendall_tau_b(human: list[float], model: list[float]) -> float | None:
    """Kendall's tau-b between a human ranking (higher = better) and model scores; None where it
    is undefined (all scores, or all ranks, equal)."""
    from scipy.stats import kendalltau

    if len(set(human)) < 2 or len(set(model)) < 2:
        return None
    return float(kendalltau(human, model, variant="b").statistic)


def kendall_taus(prompts: list[Prompt], scores: Mapping[tuple[str, str], float]) -> list[float | None]:
    """Per prompt, Kendall's tau-b between its responses' scores and the human ranking (rank 0 is
    best, so the ranking enters negated); None where it is undefined (all scores, or all ranks, equal)."""
    out: list[float | None] = []
    for p in prompts:
        ids = [r.id for r in p.responses if r.id in p.rank]
        out.append(kendall_tau_b([-p.rank[i] for i in ids], [scores[(p.id, i)] for i in ids]))
    return out


def length_diagnostic(prompts: list[Prompt], pairs: PairScores) -> dict:
    """Accuracy on the ranked pairs whose better response is the longer one and on those where it
    is the shorter one (characters; pairs of equal length are in neither): a scorer that just
    prefers length does well on the first and badly on the second."""
    if pairs.better_len is not None:
        lb, lw = pairs.better_len, pairs.worse_len
    else:
        lengths = [{r.id: len(r.content) for r in p.responses} for p in prompts]
        lb = np.array([lengths[o][b] for o, b in zip(pairs.owner.tolist(), pairs.better_ids)], np.int64)
        lw = np.array([lengths[o][w] for o, w in zip(pairs.owner.tolist(), pairs.worse_ids)], np.int64)
    right = pairs.better > pairs.worse
    out = {}
    for name, mask in (("better_longer", lb > lw), ("better_shorter", lb < lw)):
        n = int(mask.sum())
        out[name] = {"pairs": n, "accuracy": float(right[mask].mean()) if n else None}
    return out


def benchmark_fingerprint(prompts: list[Prompt]) -> dict:
    """What two reports must share to be compared: a SHA-256 over every prompt's id and its
    ranking (in id order), and the prompt count."""
    import hashlib
    import json

    h = hashlib.sha256()
    for p in sorted(prompts, key=lambda q: q.id):
        h.update(json.dumps([p.id, sorted((p.rank or {}).items())], ensure_ascii=False).encode())
        h.update(b"\n")
    return {"fingerprint": h.hexdigest(), "prompts": len(prompts)}


def prompt_items(prompts: list[Prompt], pairs: PairScores) -> list[dict]:
    """One row per prompt for pairing two reports: its ranked pairs as [better, worse, outcome]
    (right, tied or reversed) and the counts."""
    rows = [{"prompt_id": p.id, "subset": p.subset or "default", "category": p.main_category, "pairs": [],
             "right": 0, "tied": 0, "reversed": 0} for p in prompts]
    for o, b, w, sb, sw in zip(pairs.owner.tolist(), pairs.better_ids, pairs.worse_ids, pairs.better.tolist(),
                               pairs.worse.tolist()):
        outcome = "right" if sb > sw else "reversed" if sb < sw else "tied"
        rows[o]["pairs"].append([b, w, outcome])
        rows[o][outcome] += 1
    return rows


def _macro(n_comp: np.ndarray, n_correct: np.ndarray, exact: np.ndarray, cat: np.ndarray, n_cat: int,
           weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-category accuracy and exact match, for one weighting or a batch of them.

    ``exact`` is each prompt's Exact Match (bool, under the tie rule in use). ``weights`` is
    (B, M) prompt multiplicities (bootstrap) or None (each prompt once).
    Returns (acc_macro[B], em_macro[B], acc_cat[B, C], em_cat[B, C]); categories without a
    prompt in a resample are nan and left out of the macro mean.
    """
    onehot = np.zeros((len(cat), n_cat))
    onehot[np.arange(len(cat)), cat] = 1.0
    w = np.ones((1, len(cat))) if weights is None else weights
    comp_c = w @ (onehot * n_comp[:, None])
    corr_c = w @ (onehot * n_correct[:, None])
    prom_c = w @ onehot
    em_c = w @ (onehot * exact.astype(float)[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_cat = np.where(comp_c > 0, corr_c / comp_c, np.nan)
        em_cat = np.where(prom_c > 0, em_c / prom_c, np.nan)
    return np.nanmean(acc_cat, axis=1), np.nanmean(em_cat, axis=1), acc_cat, em_cat


def evaluate(prompts: list[Prompt], scores: Mapping[tuple[str, str], float], *,
             n_bootstrap: int = 1000, seed: int = 0, confidence: float = 0.95, ties: str = "official") -> dict:
    """Accuracy, Exact Match and Overall of a scorer, per subset, with CIs and categories.

    Returns ``{"ties", "subsets": {name: {"accuracy", "exact_match", "score", "n_prompts",
    "n_skipped", "n_comparisons", "n_tied", "ci": {...}, "categories": {...}, "ece",
    "kendall_tau_b", "length"}}, "overall", "overall_ci"}``. ``ties`` is the Exact Match tie rule
    (see the module docstring). The CI resamples prompts with replacement within each subset
    (seeded); Overall's CI combines the subsets' resamples. O(total pairs + n_bootstrap *
    prompts * categories).
    """
    return evaluate_scores(prompts, scores, n_bootstrap=n_bootstrap, seed=seed, confidence=confidence,
                           ties=ties)[0]


def evaluate_scores(prompts: list[Prompt], scores: Mapping[tuple[str, str], float], *, n_bootstrap: int = 1000,
                    seed: int = 0, confidence: float = 0.95, ties: str = "official") -> tuple[dict, list[dict]]:
    """The report of :func:`evaluate` and the per-prompt rows of :func:`prompt_items`, from one
    pass over the prompts (:func:`pair_scores` with ``figures``)."""
    pairs = pair_scores(prompts, scores, figures=True)
    report = evaluate_outcomes(prompts, pairs.outcomes(), n_bootstrap=n_bootstrap, seed=seed, confidence=confidence,
                               ties=ties)
    subset_of = np.array([p.subset or "default" for p in prompts], dtype=object)
    for name, entry in report["subsets"].items():
        members = np.flatnonzero(subset_of == name)
        in_subset = np.isin(pairs.owner, members)
        entry["ece"] = calibration_error(pairs.better[in_subset], pairs.worse[in_subset])
        defined = [pairs.taus[i] for i in members if pairs.taus[i] is not None]
        entry["kendall_tau_b"] = float(np.mean(defined)) if defined else None
        sub = PairScores(pairs.owner[in_subset], pairs.better[in_subset], pairs.worse[in_subset],
                         [b for b, m in zip(pairs.better_ids, in_subset) if m],
                         [w for w, m in zip(pairs.worse_ids, in_subset) if m], pairs.n_prompts,
                         pairs.better_len[in_subset], pairs.worse_len[in_subset])
        entry["length"] = length_diagnostic(prompts, sub)
    return report, prompt_items(prompts, pairs)


def evaluate_outcomes(prompts: list[Prompt], out: Outcomes, *, n_bootstrap: int = 1000, seed: int = 0,
                      confidence: float = 0.95, ties: str = "official") -> dict:
    """The report of :func:`evaluate` from per-prompt counts of right comparisons.

    Any judge of comparisons (a scorer, an LLM judge in one presentation order) can be
    evaluated this way: ``out.n_comparisons[i]`` ranked pairs of prompt i, ``out.n_correct[i]``
    of them judged right (and, for scorers, ``n_reversed``/``n_tied``; see :class:`Outcomes`).
    The point estimates and the bootstrap use the same tie rule ``ties``.
    """
    exact = exact_matches(out, ties)
    rng = np.random.default_rng(seed)
    subsets: dict[str, list[int]] = {}
    skipped: dict[str, int] = {}
    for i, p in enumerate(prompts):
        key = p.subset or "default"
        if out.n_comparisons[i] > 0:
            subsets.setdefault(key, []).append(i)
        else:
            skipped[key] = skipped.get(key, 0) + 1
    report: dict = {"ties": ties, "subsets": {}}
    boot_scores = []
    for name in sorted(set(subsets) | set(skipped)):
        idx = np.array(subsets.get(name, []), np.int64)
        entry, bscore = _subset_report(prompts, out, exact, idx, skipped.get(name, 0), rng, n_bootstrap, seed,
                                       confidence)
        report["subsets"][name] = entry
        if bscore is not None:
            boot_scores.append(bscore)
    scored = [e["score"] for e in report["subsets"].values() if e["score"] is not None]
    report["overall"] = float(np.mean(scored)) if scored else None
    if boot_scores:
        overall_b = np.mean(np.vstack(boot_scores), axis=0)
        report["overall_ci"] = quantile_interval(overall_b, confidence)
    else:
        report["overall_ci"] = None
    return report


def quantile_interval(values, confidence: float = 0.95) -> list[float]:
    """The central ``confidence`` quantile interval of bootstrap values."""
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    return [float(np.quantile(values, lo_q)), float(np.quantile(values, hi_q))]


def _subset_report(prompts: list[Prompt], out: Outcomes, exact: np.ndarray, idx: np.ndarray, n_skipped: int,
                   rng: np.random.Generator, n_bootstrap: int, seed: int,
                   confidence: float) -> tuple[dict, np.ndarray | None]:
    """One subset's entry of the report from its prompts ``idx`` (those with comparisons),
    and its bootstrap scores (None without a bootstrap)."""
    entry: dict = {"n_prompts": int(len(idx)), "n_skipped": n_skipped,
                   "n_comparisons": int(out.n_comparisons[idx].sum()), "n_tied": int(out.n_tied[idx].sum())}
    if not len(idx):
        entry.update(accuracy=None, exact_match=None, score=None, ci=None, categories={})
        return entry, None
    cats = sorted({prompts[i].main_category for i in idx})
    cat_index = {c: k for k, c in enumerate(cats)}
    cat = np.array([cat_index[prompts[i].main_category] for i in idx])
    nc, nk, ex = out.n_comparisons[idx], out.n_correct[idx], exact[idx]
    acc, em, acc_cat, em_cat = _macro(nc, nk, ex, cat, len(cats))
    entry.update(accuracy=float(acc[0]), exact_match=float(em[0]), score=float((acc[0] + em[0]) / 2))
    bscore = None
    entry["ci"] = None
    if n_bootstrap > 0:
        w = rng.multinomial(len(idx), np.full(len(idx), 1 / len(idx)), size=n_bootstrap)
        bacc, bem, _, _ = _macro(nc, nk, ex, cat, len(cats), w.astype(float))
        bscore = (bacc + bem) / 2
        entry["ci"] = {"confidence": confidence, "n_bootstrap": n_bootstrap, "seed": seed,
                       "accuracy": quantile_interval(bacc, confidence),
                       "exact_match": quantile_interval(bem, confidence),
                       "score": quantile_interval(bscore, confidence)}
    nt = out.n_tied[idx]
    entry["categories"] = {
        c: {"accuracy": float(acc_cat[0, k]), "exact_match": float(em_cat[0, k]),
            "n_prompts": int((cat == k).sum()), "n_comparisons": int(nc[cat == k].sum()),
            "n_tied": int(nt[cat == k].sum())}
        for c, k in cat_index.items()}
    return entry, bscore


def dataset_stats(prompts: list[Prompt]) -> dict:
    """The paper's Table 1 statistics of a dataset.

    Comparisons exclude ties: for ranked prompts, every pair with different ranks; for
    prompts with only pairwise comparisons, every ``g``/``b`` comparison, repeats included
    (:func:`cheems.records.preference_pairs` with ``distinct=False``). Average lengths
    are in characters; chosen/rejected lengths are averaged over comparisons.
    """
    return StatsSums.of(prompts).stats()


@dataclass
class StatsSums:
    """The sums behind :func:`dataset_stats`: prompts, responses, preference pairs, and the
    characters of prompts, chosen and rejected responses (one per pair). Sums of several
    files, or of several parts of one, add up (``+``)."""

    prompts: int = 0
    responses: int = 0
    comparisons: int = 0
    prompt_chars: int = 0
    chosen_chars: int = 0
    rejected_chars: int = 0

    @classmethod
    def of(cls, prompts: list[Prompt]) -> "StatsSums":
        """The sums over ``prompts``. O(responses + pairs)."""
        sums = cls(prompts=len(prompts))
        for p in prompts:
            sums.responses += len(p.responses)
            sums.prompt_chars += len(p.prompt_text)
            length = {r.id: len(r.content) for r in p.responses}
            pairs = preference_pairs(p, distinct=False)
            sums.comparisons += len(pairs)
            for w, l in pairs:
                sums.chosen_chars += length[w]
                sums.rejected_chars += length[l]
        return sums

    def __add__(self, other: "StatsSums") -> "StatsSums":
        return StatsSums(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def stats(self) -> dict:
        """The statistics :func:`dataset_stats` returns: averages of the sums."""
        n, n_comp = self.prompts, self.comparisons
        return {
            "prompts": n,
            "responses_per_prompt": self.responses / n if n else 0.0,
            "comparisons": n_comp,
            "prompt_chars": self.prompt_chars / n if n else 0.0,
            "chosen_chars": self.chosen_chars / n_comp if n_comp else 0.0,
            "rejected_chars": self.rejected_chars / n_comp if n_comp else 0.0,
        }
