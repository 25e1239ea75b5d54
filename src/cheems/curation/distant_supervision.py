"""Distant supervision (paper §4.2, Figure 3): a reward model filters an LLM judge's labels.

The judge compares every pair of a prompt's responses, sometimes in both orders. Its labels
contradict each other now and then (a > b > c > a, a > b in one order and b > a in the
other, a tie joined to a strict path), which shows up as cycles in the prompt's preference
graph. A reward model (RM) trained on the human-annotated subset has scored every response;
where the judge's graph is inconsistent, only the labels the RM agrees with are kept, so
that each prompt ends with a consistent partial order. The paper does not spell out the
filtering rule; the one below lets the RM decide only where the judge contradicts itself,
leaves every consistent part of the judge's graph alone, and always ends consistent.

The preference graph is the one of `cheems.graph`: an edge from the better to the worse
response of a ``g``/``b`` comparison, edges both ways for a tie ``s``. A strongly connected
component (SCC) is *conflicting* when a strict comparison has both of its responses inside
it; that is exactly when `cheems.graph.resolve_conflicts` cannot reproduce some comparison.
Components held together by ties alone are consistent (their responses simply share a
rank) and are left as they are, as is every comparison between two different components.

Inside a conflicting component:

* a strict comparison is kept when the RM agrees, i.e. scores the chosen response strictly
  higher than the rejected one (equal scores do not agree);
* a tie is kept only when the RM scores both responses exactly equal, i.e. the RM agrees
  with the tie as well; any other tie inside a conflict is part of the inconsistency and is
  dropped.

Why this cannot leave a conflict: removing edges only splits components, so every new SCC,
and every cycle, lies inside an old component. Tie-only components are unchanged. Inside an
old conflicting component every remaining edge goes from a response to one the RM scores
no higher, and every remaining strict edge to one the RM scores strictly lower; around a
cycle the scores come back to where they started, so no cycle passes through a strict
edge, and no strict comparison ends up inside an SCC. Keeping
ties whose RM scores differ by any tolerance would break this (two near-ties plus a small
strict step close a cycle), so the tie rule is exact equality. With float scores such ties
are rare; with a discrete RM (integer grades, low-precision scores) they are common.

``scope="all"`` filters more aggressively first: every strict comparison that the RM
contradicts by more than ``margin`` and every tie whose RM scores differ by more than
``margin`` is dropped, then the rule above is applied to the conflicts that remain (SCCs
recomputed on the surviving comparisons), so the result is always consistent.

Everything runs on flat arrays for all prompts at once (`cheems.graph.comparison_arrays`,
SCCs from `cheems.graph.strong_components` on the block-diagonal graph of all prompts, as
`cheems.graph.resolve_arrays` finds them): O(V + E) per SCC pass, two passes (three with
``scope="all"``) counting the check of the result; only building the output prompts
loops over Python objects, once per prompt. :func:`supervise_arrays` is the rule on those
arrays alone, and :func:`filtered_comparison_rows` its output as rows' comparison dicts, for
callers that read rows straight into arrays (``cheems curate resolve``, no Prompt made).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import Mapping

import numpy as np

from cheems.io import gc_paused
from cheems.graph import comparison_arrays, strong_components
from cheems.records import CheemsInputError, Comparison, Prompt, check_comparisons

__all__ = ["REASONS", "SCOPES", "DistantSupervision", "check_scope", "distant_supervision", "filtered_comparison_rows",
           "supervise_arrays", "supervision_report"]

SCOPES = ("cycles", "all")

REASONS = ("rm_disagrees_in_cycle", "tie_in_cycle", "rm_contradicts_margin")
"""Why a comparison was dropped, as written in ``extra["dropped_comparisons"][k]["dropped"]``:
a strict label inside a conflict that the RM does not agree with; a tie inside a conflict
whose RM scores differ; a label the RM contradicts by more than ``margin`` (``scope="all"``)."""

_KEPT, _DISAGREES, _TIE, _MARGIN = 0, 1, 2, 3  # codes of the per-comparison reason array


@dataclass
class DistantSupervision:
    """Result of :func:`distant_supervision`.

    ``prompts`` are the filtered prompts, one per input prompt in the same order. The arrays
    describe the input comparisons, flattened in prompt order: ``reason`` (0 = kept, k =
    ``REASONS[k - 1]``), ``owner`` (prompt index), ``strict`` (label g or b) and
    ``rm_agrees`` (the RM scores the judge's chosen response strictly higher); per prompt,
    ``conflicted_before`` / ``conflicted_after`` say whether its graph had a conflict
    before and after filtering, and ``categories`` holds its main category.
    """

    prompts: list[Prompt]
    scope: str
    margin: float
    reason: np.ndarray
    owner: np.ndarray
    strict: np.ndarray
    rm_agrees: np.ndarray
    conflicted_before: np.ndarray
    conflicted_after: np.ndarray
    categories: list[str]

    def report(self) -> dict:
        """Counts in total and per main category.

        ``{"scope", "margin", "total": stats, "by_category": {category: stats}}`` where each
        ``stats`` holds ``prompts``, ``comparisons`` (in), ``kept``, ``dropped``,
        ``dropped_by_reason``, ``prompts_with_conflicts_before`` / ``_after``,
        ``prompts_changed`` (prompts that lost a comparison), ``strict_comparisons`` and
        ``judge_rm_agreement``: the share of the judge's strict comparisons (before any
        filtering) whose order the RM's scores reproduce, None when there are none.
        """
        return supervision_report(self.scope, self.margin, self.categories, self.reason, self.owner, self.strict,
                                  self.rm_agrees, self.conflicted_before, self.conflicted_after)


def supervision_report(scope: str, margin: float, categories: list[str], reason: np.ndarray, owner: np.ndarray,
                       strict: np.ndarray, rm_agrees: np.ndarray, conflicted_before: np.ndarray,
                       conflicted_after: np.ndarray) -> dict:
    """:meth:`DistantSupervision.report` of the arrays it describes (``categories``: each
    prompt's main category, one per prompt)."""
    names = sorted(set(categories))
    code = {name: k for k, name in enumerate(names)}
    prompt_cat = np.fromiter(map(code.__getitem__, categories), np.int64, len(categories))
    comp_cat = prompt_cat[owner]
    n_cat = len(names)
    n_prompts = len(categories)
    by_reason = np.zeros((n_cat, len(REASONS) + 1), np.int64)
    np.add.at(by_reason, (comp_cat, reason), 1)
    n_strict = np.bincount(comp_cat[strict], minlength=n_cat)
    agree = np.bincount(comp_cat[strict & rm_agrees], minlength=n_cat)
    changed = np.bincount(owner[reason != _KEPT], minlength=n_prompts) > 0
    per_prompt = np.stack([np.ones(n_prompts, np.int64), conflicted_before,
                           conflicted_after, changed], axis=1).astype(np.int64)
    prompt_counts = np.zeros((n_cat, 4), np.int64)
    np.add.at(prompt_counts, prompt_cat, per_prompt)

    def stats(reasons: np.ndarray, n_strict: int, n_agree: int, counts: np.ndarray) -> dict:
        total = int(reasons.sum())
        return {
            "prompts": int(counts[0]),
            "comparisons": total,
            "kept": int(reasons[_KEPT]),
            "dropped": total - int(reasons[_KEPT]),
            "dropped_by_reason": {r: int(reasons[k + 1]) for k, r in enumerate(REASONS)},
            "prompts_with_conflicts_before": int(counts[1]),
            "prompts_with_conflicts_after": int(counts[2]),
            "prompts_changed": int(counts[3]),
            "strict_comparisons": int(n_strict),
            "judge_rm_agreement": n_agree / n_strict if n_strict else None,
        }

    return {
        "scope": scope,
        "margin": margin,
        "total": stats(by_reason.sum(axis=0), int(n_strict.sum()), int(agree.sum()), prompt_counts.sum(axis=0)),
        "by_category": {name: stats(by_reason[k], int(n_strict[k]), int(agree[k]), prompt_counts[k])
                        for k, name in enumerate(names)},
    }


def distant_supervision(prompts: list[Prompt], scores: Mapping[tuple[str, str], float], *,
                        scope: str = "cycles", margin: float = 0.0) -> DistantSupervision:
    """Keep the judge comparisons that make each prompt's graph consistent, using RM scores.

    ``scores`` maps ``(prompt id, response id)`` to the RM's score (as
    `cheems.formats.read_scores` returns it); every response named by a comparison needs
    one. ``scope="cycles"`` filters only inside conflicting components (see the module
    docstring for the rule and why it always ends consistent); ``scope="all"`` first drops
    every label the RM contradicts by more than ``margin`` (strict: score(rejected) -
    score(chosen) > margin; tie: |score difference| > margin), then applies the same rule.

    Returns new prompts (same ids, responses, rank, category, subset) whose ``comparisons``
    are the kept ones in their input order (the Comparison objects themselves, with their
    provenance); each dropped comparison is appended to ``extra["dropped_comparisons"]`` as
    its ``to_dict()`` plus ``"dropped": reason``. No prompt is removed. A ``rank`` carried
    by the input is left as it was: run `cheems.graph.resolve_conflicts` on the result for
    ranks that follow the filtered comparisons.

    Raises CheemsInputError for an unknown ``scope``, a negative ``margin``, a malformed
    comparison or a response without a score (naming the prompt and the response).
    """
    margin = check_scope(scope, margin)
    with gc_paused():
        return _distant_supervision(prompts, scores, scope, margin)


def check_scope(scope: str, margin: float) -> float:
    """The margin as a float; CheemsInputError for an unknown ``scope`` or a ``margin`` that
    is not a number >= 0."""
    if scope not in SCOPES:
        raise CheemsInputError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}", field="scope")
    if isinstance(margin, bool) or not isinstance(margin, Real) or math.isnan(margin) or margin < 0:
        raise CheemsInputError(f"margin must be a number >= 0, got {margin!r}", field="margin")
    return float(margin)


def _distant_supervision(prompts: list[Prompt], scores: Mapping[tuple[str, str], float],
                         scope: str, margin: float) -> DistantSupervision:
    try:
        offsets, a, b, lab, owner, ids = comparison_arrays(prompts)
    except ValueError:
        for p in prompts:
            check_comparisons(p)
        raise
    score = _node_scores(prompts, scores, offsets, ids, a, b)
    reason, strict, rm_agrees, conflicted_before, conflicted_after = supervise_arrays(
        offsets, a, b, lab, owner, score, scope=scope, margin=margin)
    out = _filtered_prompts(prompts, owner, reason)
    categories = [p.main_category for p in prompts]
    return DistantSupervision(out, scope, margin, reason, owner, strict, rm_agrees,
                              conflicted_before, conflicted_after, categories)


def supervise_arrays(offsets: np.ndarray, a: np.ndarray, b: np.ndarray, lab: np.ndarray, owner: np.ndarray,
                     score: np.ndarray, *, scope: str, margin: float) -> tuple[np.ndarray, ...]:
    """The rule of the module on comparison arrays as :func:`cheems.graph.comparison_arrays`
    gives them, ``score`` the RM score of every response (NaN only where no comparison names
    it); ``scope`` and ``margin`` as :func:`check_scope` accepts them.

    Returns ``(reason, strict, rm_agrees, conflicted_before, conflicted_after)``, the arrays
    :class:`DistantSupervision` describes. O(V + E) per SCC pass, two or three passes."""
    strict = lab != 2
    better = np.where(lab == 1, b, a)  # for a tie: a, with the reverse edge added below
    worse = np.where(lab == 1, a, b)
    gap = score[better] - score[worse]  # > 0: the RM agrees with a strict label
    rm_agrees = strict & (gap > 0)

    reason = np.zeros(len(lab), np.int8)
    everything = np.ones(len(lab), bool)
    in_conflict, conflicted_before = _conflicts(offsets, owner, better, worse, strict, everything)
    if scope == "all":
        contradicted = np.where(strict, -gap > margin, np.abs(gap) > margin)
        reason[contradicted] = _MARGIN
        in_conflict, _ = _conflicts(offsets, owner, better, worse, strict, ~contradicted)
    reason[in_conflict & strict & ~(gap > 0)] = _DISAGREES
    reason[in_conflict & ~strict & (gap != 0)] = _TIE
    kept = reason == _KEPT
    _, conflicted_after = _conflicts(offsets, owner, better, worse, strict, kept)
    return reason, strict, rm_agrees, conflicted_before, conflicted_after


def _node_scores(prompts: list[Prompt], scores: Mapping[tuple[str, str], float], offsets: np.ndarray,
                 ids: list[str], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RM score of every response (global node order); NaN where none is given.

    Raises CheemsInputError for the first response that a comparison names but that has no
    score (or a NaN one)."""
    node_pid = np.repeat(np.array([p.id for p in prompts], dtype=object), np.diff(offsets))
    keys = zip(node_pid.tolist(), ids)
    score = np.fromiter(map(scores.get, keys, repeat(math.nan)), np.float64, len(ids))
    needed = np.zeros(len(ids), bool)
    needed[a] = True
    needed[b] = True
    missing = np.flatnonzero(needed & np.isnan(score))
    if len(missing):
        k = int(missing[0])
        more = f" ({len(missing) - 1} more response(s) lack one too)" if len(missing) > 1 else ""
        raise CheemsInputError(f"prompt {node_pid[k]!r}: response {ids[k]!r} has no RM score{more}; "
                               "the reward model must score every compared response", field="score")
    return score


def _conflicts(offsets: np.ndarray, owner: np.ndarray, better: np.ndarray, worse: np.ndarray,
               strict: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Conflicting components of the graph made of the ``alive`` comparisons.

    Builds the graph as `cheems.graph` does (better -> worse, ties both ways). Returns, per
    comparison, whether it is alive with both responses in one conflicting SCC (one that
    holds a strict comparison), and per prompt whether it has such a component.
    """
    n_nodes, n_prompts = int(offsets[-1]), len(offsets) - 1
    if n_nodes == 0:
        return np.zeros(len(strict), bool), np.zeros(n_prompts, bool)
    tie = alive & ~strict
    src = np.concatenate([better[alive], worse[tie]])
    dst = np.concatenate([worse[alive], better[tie]])
    comp = strong_components(n_nodes, src, dst, offsets)
    inside = alive & (comp[better] == comp[worse])
    cyclic = np.zeros(int(comp.max()) + 1, bool)
    cyclic[comp[better[inside & strict]]] = True
    in_conflict = inside & cyclic[comp[better]]
    conflicted = np.bincount(owner[inside & strict], minlength=n_prompts) > 0
    return in_conflict, conflicted


def _filtered_prompts(prompts: list[Prompt], owner: np.ndarray, reason: np.ndarray) -> list[Prompt]:
    """New prompts holding the kept comparisons; dropped ones go to extra with their reason.

    Kept and dropped comparisons are picked from one flat list with numpy masks and cut back
    into prompts by counts, so the Python loop runs once per prompt, not per comparison."""
    n = len(prompts)
    flat = list(chain.from_iterable(map(attrgetter("comparisons"), prompts)))
    kept_mask = reason == _KEPT
    kept_flat = list(compress(flat, kept_mask.tolist()))
    gone = np.flatnonzero(~kept_mask)
    dropped_flat = list(map(Comparison.to_dict, map(flat.__getitem__, gone.tolist())))
    for d, why in zip(dropped_flat, np.array(REASONS, dtype=object)[reason[gone] - 1].tolist()):
        d["dropped"] = why
    kept_ends = np.cumsum(np.bincount(owner[kept_mask], minlength=n)).tolist()
    dropped_ends = np.cumsum(np.bincount(owner[gone], minlength=n)).tolist()
    out = []
    k_lo = d_lo = 0
    for p, k_hi, d_hi in zip(prompts, kept_ends, dropped_ends):
        extra = dict(p.extra)
        if d_hi > d_lo:
            previous = extra.get("dropped_comparisons", [])
            if not isinstance(previous, list):
                raise CheemsInputError(f"prompt {p.id!r}: extra 'dropped_comparisons' must be a list",
                                       field="dropped_comparisons")
            extra["dropped_comparisons"] = previous + dropped_flat[d_lo:d_hi]
        rank = None if p.rank is None else dict(p.rank)
        out.append(Prompt(p.id, p.prompt, list(p.responses), rank, kept_flat[k_lo:k_hi], list(p.category),
                          p.subset, extra))
        k_lo, d_lo = k_hi, d_hi
    return out


def filtered_comparison_rows(ids: list[str], comparisons: list[list[dict]], extras: list[dict | None],
                             owner: np.ndarray, reason: np.ndarray) -> tuple[list[list[dict]], list[dict | None]]:
    """:func:`distant_supervision`'s output prompts as rows' parts: per row (prompt id ``ids[i]``),
    its kept comparison dicts (as ``Comparison.to_dict`` writes them, in input order) and its
    extra keys (None: none) with each dropped comparison appended to ``dropped_comparisons``
    with its reason. ``comparisons`` are the rows' input comparisons, ``owner`` and ``reason``
    as :func:`supervise_arrays` gives them; the inputs are not modified. The same error as
    :func:`distant_supervision` for a row's ``dropped_comparisons`` that is not a list.
    O(rows + comparisons), one Python step per row."""
    n = len(comparisons)
    flat = list(chain.from_iterable(comparisons))
    kept_mask = reason == _KEPT
    kept_flat = list(compress(flat, kept_mask.tolist()))
    gone = np.flatnonzero(~kept_mask)
    whys = np.array(REASONS, dtype=object)[reason[gone] - 1].tolist()
    dropped_flat = [{**flat[k], "dropped": why} for k, why in zip(gone.tolist(), whys)]
    kept_ends = np.cumsum(np.bincount(owner[kept_mask], minlength=n)).tolist()
    dropped_ends = np.cumsum(np.bincount(owner[gone], minlength=n)).tolist()
    kept_rows, extra_rows = [], []
    k_lo = d_lo = 0
    for rid, extra, k_hi, d_hi in zip(ids, extras, kept_ends, dropped_ends):
        if d_hi > d_lo:
            extra = dict(extra or {})
            previous = extra.get("dropped_comparisons", [])
            if not isinstance(previous, list):
                raise CheemsInputError(f"prompt {rid!r}: extra 'dropped_comparisons' must be a list",
                                       field="dropped_comparisons")
            extra["dropped_comparisons"] = previous + dropped_flat[d_lo:d_hi]
        kept_rows.append(kept_flat[k_lo:k_hi])
        extra_rows.append(extra)
        k_lo, d_lo = k_hi, d_hi
    return kept_rows, extra_rows
