"""Length debiasing of preference data (paper §4.2, "length-debias").

Annotators, human or LLM, tend to prefer the longer of two responses when the difference is
moderate. Left alone, a reward model trained on such pairs learns "longer is better". The
paper's remedy is a post-hoc filter: split the strict preference pairs into those whose
chosen response is longer than the rejected one and those whose chosen response is shorter,
then downsample the larger group at random until both are the same size. After it, the
length of a response says nothing about whether it was chosen.

Length is :func:`cheems.curation.filters.text_length`: characters as a Chinese reader counts
them (its non-whitespace characters).

:func:`length_debias` works on prompts; :func:`length_kinds`, :func:`debias_arrays`,
:func:`ranked_comparison_rows` and :func:`debiased_rows` are its steps on arrays and on rows'
comparison dicts, for callers that read rows straight into arrays (``cheems curate debias``,
no Prompt made), with the same results.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from cheems.curation.filters import text_length
from cheems.io import gc_paused
from cheems.records import CheemsInputError, Comparison, Prompt, check_comparisons, check_rank, rank_comparisons
from cheems.settings import is_integer

__all__ = ["DROPPED_KEY", "KINDS", "LABEL_SIGN", "SET_ASIDE_KEY", "check_debias_settings", "debias_arrays",
           "debiased_rows", "length_debias", "length_kinds", "ranked_comparison_rows"]

KINDS = ("chosen_longer", "chosen_shorter", "similar", "ties")
"""How a comparison relates to length: the chosen response is longer (by more than the
tolerance), shorter, about as long (``similar``), or the comparison is a tie (label ``s``)."""

DROPPED_KEY = "dropped_comparisons"
"""``Prompt.extra`` key that keeps the comparisons this filter removed."""

SET_ASIDE_KEY = "comparisons_before_rank"
"""``Prompt.extra`` key that keeps the comparisons of a ranked prompt (see `length_debias`)."""


def length_debias(prompts: list[Prompt], *, seed: int, tolerance: int = 0) -> tuple[list[Prompt], dict]:
    """Balance chosen-longer against chosen-shorter preference pairs (paper §4.2).

    The pairs of a prompt are the pairs a reward model would train on:

    - a prompt without ``rank``: its strict comparisons (``g``: ``a`` is chosen, ``b``: ``b``
      is chosen). Ties (``s``) are kept untouched and counted as ``ties``.
    - a prompt with a ``rank``: the trainer reads the ranking and ignores comparisons, so the
      ranking's pairs are the pairs. A ranking cannot lose a single pair, so such a prompt
      is converted (`cheems.records.rank_comparisons`): each ranked pair becomes
      ``Comparison(better, worse, "g", source="rank")`` and each pair of tied responses
      ``Comparison(x, y, "s", source="rank")``, and its ``rank`` is cleared. Any comparisons
      it carried besides its ranking (the annotations the ranking was resolved from) would
      otherwise be trained on once the ranking is gone, so they are moved, unchanged, to
      ``extra["comparisons_before_rank"]``.

    With ``d = text_length(chosen) - text_length(rejected)`` a pair is *chosen-longer* when
    ``d > tolerance``, *chosen-shorter* when ``d < -tolerance`` and *similar* otherwise;
    similar pairs are kept. Of the chosen-longer and chosen-shorter groups (pooled over all
    prompts, not per category), the larger one is downsampled uniformly at random, without
    replacement, to the size of the smaller, so both end up the same size. The draw uses
    ``numpy.random.default_rng(seed)`` over the pairs in input order: the same input and seed
    give the same output.

    Nothing is silently lost: each dropped comparison is appended to its prompt's
    ``extra["dropped_comparisons"]`` as ``Comparison.to_dict()`` plus
    ``"dropped": "length_debias"``, and every prompt is returned, in input order, even when
    all its pairs were dropped. The inputs are not modified.

    Returns ``(prompts, report)``; the report holds ``before`` and ``after`` counts of each
    kind in `KINDS` with ``chosen_longer_share`` = longer / (longer + shorter) (None without
    any), ``dropped``, ``downsampled`` (the group that was cut, or None), ``ranked_prompts``
    (prompts converted from a ranking), ``prompts_without_pairs`` (prompts left with no
    strict pair after the filter) and ``by_category`` (the same counts per main category).
    For every kind, before = after + dropped.

    Runs in O(total responses + comparisons) plus the ranked pairs, O(k^2) for a prompt
    with k ranked responses: the output holds every one of them as a comparison. The kinds
    and the draw are array operations; the rest is one pass over the comparisons.
    """
    check_debias_settings(seed, tolerance)
    with gc_paused():  # a ranking of k responses becomes k (k - 1) / 2 small objects, no cycles
        staged, kind, starts, ranked = _classify(prompts, tolerance)
        drop, report = debias_arrays(kind, starts, [q.main_category for q in staged], seed=seed,
                                     tolerance=tolerance, ranked=ranked)
        out = _drop(staged, drop)
    return out, report


def check_debias_settings(seed: int, tolerance: int) -> None:
    """CheemsInputError for a ``seed`` or ``tolerance`` that is not a non-negative integer."""
    if not is_integer(seed) or seed < 0:
        raise CheemsInputError(f"seed must be a non-negative integer, got {seed!r}", field="seed")
    if not is_integer(tolerance) or tolerance < 0:
        raise CheemsInputError(f"tolerance must be a non-negative integer, got {tolerance!r}",
                               field="tolerance")


def length_kinds(len_a: np.ndarray, len_b: np.ndarray, sign: np.ndarray, tolerance: int) -> np.ndarray:
    """The kind of every comparison (an index into `KINDS`) from the lengths of its ``a`` and
    ``b`` responses and ``sign``: 1 when ``a`` is chosen, -1 when ``b`` is, 0 for a tie."""
    s = np.asarray(sign, np.int64)
    d = s * (np.asarray(len_a, np.int64) - np.asarray(len_b, np.int64))
    longer, shorter, similar, ties = range(len(KINDS))
    return np.where(s == 0, ties, np.where(d > tolerance, longer, np.where(d < -tolerance, shorter, similar)))


def debias_arrays(kind: np.ndarray, starts: np.ndarray, categories: list[str], *, seed: int, tolerance: int,
                  ranked: int) -> tuple[dict[int, set[int]], dict]:
    """The draw of :func:`length_debias` and its report, from the kind of every comparison
    (:func:`length_kinds`, prompts in input order), where each prompt's comparisons start
    among them (one more than there are prompts), each prompt's main category and how many
    prompts were converted from a ranking. Returns the comparisons to drop, ``{prompt:
    {comparison, ...}}``, and the report. O(comparisons)."""
    n = len(categories)
    owner = np.repeat(np.arange(n), np.diff(starts))
    pairs = np.bincount(owner[kind != KINDS.index("ties")], minlength=n)  # strict pairs per prompt
    cut, drop = _draw(_where(kind, starts), seed)
    dropped: Counter = Counter()
    for i, gone in drop.items():
        dropped[categories[i]] += len(gone)
        pairs[i] -= len(gone)
    report = _report(_count_kinds(categories, kind, starts), dropped, cut, tolerance=tolerance, seed=seed)
    report["prompts"] = n
    report["ranked_prompts"] = ranked
    report["prompts_without_pairs"] = int((pairs == 0).sum())
    return drop, report


def _classify(prompts: list[Prompt], tolerance: int) -> tuple[list[Prompt], np.ndarray, np.ndarray, int]:
    """Each prompt as comparisons (:func:`_as_comparisons`, checked), the kind of every
    comparison of all prompts in input order (an index into `KINDS`), where each prompt's
    comparisons start among them (``starts``, one more than there are prompts), and how many
    prompts were converted from a ranking.

    One pass reads the lengths and labels; the kinds are array operations over all prompts at
    once. The comparisons made from a ranking are valid by construction once the ranking
    passed `cheems.records.check_rank`, so only given comparisons are checked one by one.
    """
    staged: list[Prompt] = []
    a: list[int] = []
    b: list[int] = []
    sign: list[int] = []  # chosen minus rejected is sign * (len(a) - len(b)); 0: a tie
    starts = [0]
    ranked = 0
    for p in prompts:
        _existing_list(p, DROPPED_KEY)  # check its shape before any work
        q = _as_comparisons(p)
        if p.rank is None:
            check_comparisons(q)
        else:
            ranked += 1
        lengths = {r.id: text_length(r.content) for r in q.responses}
        a.extend([lengths[c.a] for c in q.comparisons])
        b.extend([lengths[c.b] for c in q.comparisons])
        sign.extend([LABEL_SIGN[c.label] for c in q.comparisons])
        staged.append(q)
        starts.append(len(a))
    return staged, length_kinds(a, b, sign, tolerance), np.array(starts), ranked


LABEL_SIGN = {"g": 1, "b": -1, "s": 0}
"""Chosen minus rejected length is ``LABEL_SIGN[label] * (len(a) - len(b))``; 0: a tie."""


def _where(kind: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    """Where the chosen-longer and the chosen-shorter comparisons are: for each, an array of
    ``(prompt, comparison)`` rows in input order."""
    out = {}
    for name in ("chosen_longer", "chosen_shorter"):
        at = np.flatnonzero(kind == KINDS.index(name))
        prompt = np.searchsorted(starts, at, side="right") - 1
        out[name] = np.stack([prompt, at - starts[prompt]], axis=1)
    return out


def _count_kinds(cats: list[str], kind: np.ndarray, starts: np.ndarray) -> dict[str, Counter]:
    """The kinds counted per main category (every category present, even without comparisons)."""
    index = {c: i for i, c in enumerate(dict.fromkeys(cats))}
    of = np.repeat(np.array([index[c] for c in cats], np.int64), np.diff(starts))
    table = np.bincount(of * len(KINDS) + kind, minlength=len(index) * len(KINDS)).reshape(-1, len(KINDS))
    return {c: Counter({k: int(n) for k, n in zip(KINDS, table[i]) if n}) for c, i in index.items()}


def _draw(where: dict[str, np.ndarray], seed: int) -> tuple[str | None, dict[int, set[int]]]:
    """The larger of the two groups (None when they are equal) and the comparisons drawn from
    it to drop, uniformly without replacement: ``{prompt: {comparison, ...}}``."""
    n_longer, n_shorter = len(where["chosen_longer"]), len(where["chosen_shorter"])
    cut = "chosen_longer" if n_longer > n_shorter else "chosen_shorter" if n_shorter > n_longer else None
    drop: dict[int, set[int]] = {}
    if cut is not None:
        pool = where[cut]
        rng = np.random.default_rng(seed)
        for i, j in pool[rng.choice(len(pool), size=abs(n_longer - n_shorter), replace=False)].tolist():
            drop.setdefault(i, set()).add(j)
    return cut, drop


def _drop(staged: list[Prompt], drop: dict[int, set[int]]) -> list[Prompt]:
    """The prompts without the drawn comparisons (each recorded under DROPPED_KEY)."""
    out: list[Prompt] = []
    for i, q in enumerate(staged):
        gone = drop.get(i)
        if gone:
            kept = [c for j, c in enumerate(q.comparisons) if j not in gone]
            record = []
            for j in sorted(gone):
                d = q.comparisons[j].to_dict()
                d["dropped"] = "length_debias"
                record.append(d)
            extra = dict(q.extra)
            extra[DROPPED_KEY] = _existing_list(q, DROPPED_KEY) + record
            q = replace(q, comparisons=kept, extra=extra)
        out.append(q)
    return out


def ranked_comparison_rows(pid: str, rank: dict[str, int], comparisons: list[dict],
                           extra: dict | None) -> tuple[list[dict], dict | None]:
    """A ranked row as :func:`length_debias` converts it: its ranking's pairs as comparison
    dicts (``Comparison.to_dict``) and its extra keys (None: none), its own comparisons (dicts
    as ``to_dict`` writes them) appended to ``comparisons_before_rank``. The same error as
    :func:`length_debias` for such a key that is not a list."""
    if comparisons:
        extra = dict(extra or {})
        extra[SET_ASIDE_KEY] = _existing_value(pid, extra, SET_ASIDE_KEY) + comparisons
    return list(map(Comparison.to_dict, rank_comparisons(rank))), extra


def debiased_rows(ids: list[str], comparisons: list[list[dict]], extras: list[dict | None],
                  drop: dict[int, set[int]]) -> tuple[list[list[dict]], list[dict | None]]:
    """Per row, its comparison dicts and extra keys (None: none) as :func:`length_debias`
    leaves them once ``drop`` (:func:`debias_arrays`) is drawn: each dropped comparison moved
    to ``dropped_comparisons`` with ``"dropped": "length_debias"``. The inputs are not
    modified; the same error as :func:`length_debias` for a ``dropped_comparisons`` that is
    not a list. O(rows + dropped comparisons)."""
    for i, pid in enumerate(ids):
        _existing_value(pid, extras[i] or {}, DROPPED_KEY)  # checked on every row, as length_debias does
    comparisons, extras = list(comparisons), list(extras)
    for i, gone in drop.items():
        comps, extra = comparisons[i], dict(extras[i] or {})
        comparisons[i] = [c for j, c in enumerate(comps) if j not in gone]
        extra[DROPPED_KEY] = _existing_value(ids[i], extra, DROPPED_KEY) + \
            [{**comps[j], "dropped": "length_debias"} for j in sorted(gone)]
        extras[i] = extra
    return comparisons, extras


def _as_comparisons(p: Prompt) -> Prompt:
    """A copy of ``p`` whose pairs are all comparisons: a ranking becomes comparisons."""
    if p.rank is None:
        return replace(p, comparisons=list(p.comparisons), extra=dict(p.extra))
    check_rank(p.rank, {r.id for r in p.responses}, lead=f"prompt {p.id!r}: ")
    extra = dict(p.extra)
    if p.comparisons:
        extra[SET_ASIDE_KEY] = _existing_list(p, SET_ASIDE_KEY) + [c.to_dict() for c in p.comparisons]
    return replace(p, rank=None, comparisons=rank_comparisons(p.rank), extra=extra)


def _existing_list(p: Prompt, key: str) -> list:
    return _existing_value(p.id, p.extra, key)


def _existing_value(pid: str, extra: dict, key: str) -> list:
    """A copy of the list under ``key`` of a prompt's extra keys ([] without one)."""
    old = extra.get(key, [])
    if not isinstance(old, list):
        raise CheemsInputError(f"prompt {pid!r}: {key} must be a list, got {type(old).__name__}",
                               field=key)
    return list(old)


def _counts(c: Counter) -> dict:
    d = {k: int(c.get(k, 0)) for k in KINDS}
    strict = d["chosen_longer"] + d["chosen_shorter"]
    d["chosen_longer_share"] = d["chosen_longer"] / strict if strict else None
    return d


def _report(before: dict[str, Counter], dropped: Counter, cut: str | None, *, tolerance: int,
            seed: int) -> dict:
    by_category = {}
    total_before, total_after = Counter(), Counter()
    for cat in sorted(before):
        b = before[cat]
        a = Counter(b)
        if cut is not None:
            a[cut] -= dropped[cat]
        total_before.update(b)
        total_after.update(a)
        by_category[cat] = {"before": _counts(b), "after": _counts(a), "dropped": int(dropped[cat])}
    return {
        "before": _counts(total_before),
        "after": _counts(total_after),
        "dropped": int(sum(dropped.values())),
        "downsampled": cut,
        "tolerance": tolerance,
        "seed": seed,
        "by_category": by_category,
    }
