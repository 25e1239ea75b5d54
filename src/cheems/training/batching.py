"""Forward batches for Bradley-Terry reward-model training on partially ranked prompts (§5).

CheemsPreference gives several responses per prompt, ranked with ties. Training uses every
ranked pair of a prompt (different ranks; ties give no pair), forwards each response once per
epoch, and scores the two responses of a pair in the same forward batch, since the pair's
loss ``-log sigmoid(r_better - r_worse)`` needs both rewards at once. A batch sampler therefore
decides how many training pairs an epoch actually trains on.

Items are ``(prompt_index, response_index, length)`` tuples; a batcher returns batches as
lists of positions in ``items``. Limits are ``batch_size`` (most sequences in a batch) and/or
``token_budget``: the most padded tokens (the longest sequence in the batch times its size),
or with ``packed`` the most tokens of the packed row (the sum of the lengths, see
:mod:`cheems.models.packing`); a single sequence over the budget stands alone.
``pairs_by_prompt`` maps a prompt index to its training pairs as ``(better, worse)`` response
indices (see `cheems.records.ranked_pairs`).

- `greedy_prompt_batches`: ours; keeps each prompt's responses in one batch, length-grouped.
- `official_greedy_batches`: the official trainer's sampler (prompts split at batch ends).
- `pairwise_duplication_batches`: every pair forwarded as its own two sequences.
- `batch_stats`: forwards, pair coverage, padding, duplicates of any of the three.
- `synthetic_preference_items`: random data with CheemsPreference's statistics.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Mapping, Sequence

import numpy as np

from cheems.records import CheemsInputError
from cheems.settings import is_integer, is_number

__all__ = ["BUCKET_WINDOWS", "WINDOW_BATCHES", "Item", "Pair", "batch_stats", "greedy_prompt_batches",
           "official_greedy_batches", "pairwise_duplication_batches", "synthetic_preference_items"]

Item = tuple[int, int, int]  # (prompt_index, response_index, length in tokens)
Pair = tuple[int, int]  # (better response_index, worse response_index)

WINDOW_BATCHES = 32
"""Batches' worth of length-sorted prompts packed together by `greedy_prompt_batches`."""
BUCKET_WINDOWS = 8
"""Windows per shuffled bucket that is sorted by length before being cut into windows."""


# ---------------------------------------------------------------------------- validation

def _check_limits(batch_size: int | None, token_budget: int | None) -> tuple[float, float]:
    if batch_size is None and token_budget is None:
        raise CheemsInputError("give batch_size, token_budget or both", field="batch_size")
    for name, v in (("batch_size", batch_size), ("token_budget", token_budget)):
        if v is not None and (not (is_integer(v) or isinstance(v, np.integer)) or v < 1):
            raise CheemsInputError(f"{name} must be a positive integer, got {v!r}", field=name)
    return (math.inf if batch_size is None else int(batch_size),
            math.inf if token_budget is None else int(token_budget))


def _group_by_prompt(items: Sequence[Item]) -> dict[int, list[int]]:
    """Positions of each prompt's items, prompts in order of first appearance; validates items."""
    groups: dict[int, list[int]] = {}
    seen: set[tuple[int, int]] = set()
    for i, it in enumerate(items):
        if len(it) != 3:
            raise CheemsInputError(f"an item is (prompt_index, response_index, length), got {it!r}",
                                   field=f"items[{i}]")
        p, r, n = it
        if not (is_integer(n) or isinstance(n, np.integer)) or n < 1:
            raise CheemsInputError(f"length must be a positive integer, got {n!r}", field=f"items[{i}]")
        if (p, r) in seen:
            raise CheemsInputError(f"response {r!r} of prompt {p!r} appears twice", field=f"items[{i}]")
        seen.add((p, r))
        groups.setdefault(p, []).append(i)
    return groups


def _prompt_order(groups: dict[int, list[int]], seed: int, shuffle: bool) -> list[int]:
    order = list(groups)
    if shuffle:
        perm = np.random.default_rng(seed).permutation(len(order))
        order = [order[j] for j in perm]
    return order


# ---------------------------------------------------------------------------- ours

def _fit(length: float, size_limit: float, token_budget: float) -> float:
    """Sequences of ``length`` tokens that fit in an empty batch (inf: no limit)."""
    by_tokens = math.inf if token_budget == math.inf else token_budget // length
    return min(size_limit, by_tokens)


class _Batch:
    __slots__ = ("members", "longest", "tokens", "packed")

    def __init__(self, packed: bool = False) -> None:
        self.members: list[int] = []
        self.longest = 0
        self.tokens = 0  # real tokens
        self.packed = packed

    def room(self, length: int, size_limit: float, token_budget: float) -> int:
        """How many more sequences of at most ``length`` tokens fit."""
        if self.packed:
            by_tokens = math.inf if token_budget == math.inf else (token_budget - self.tokens) // length
            free = min(size_limit - len(self.members), by_tokens)
        else:
            free = _fit(max(self.longest, length), size_limit, token_budget) - len(self.members)
        if not self.members and free < 1:
            return 1  # a sequence over the budget stands alone
        return int(max(0, free))

    def add(self, positions: list[int], lengths: Sequence[int]) -> None:
        self.members.extend(positions)
        self.longest = max([self.longest] + [lengths[i] for i in positions])
        self.tokens += sum(lengths[i] for i in positions)


def _cut_part(members: list[int], size: int, edges: set[frozenset]) -> list[int]:
    """``size`` of ``members`` to move away so that few training pairs are cut.

    The smaller side is grown greedily: each step takes the response with the fewest pairs to
    the side that stays minus its pairs to the side already taken. O(k^2) pair look-ups.
    """
    if size >= len(members):
        return list(members)
    small = min(size, len(members) - size)
    taken: list[int] = []
    rest = list(members)
    for _ in range(small):
        def cost(x: int) -> int:
            return (sum(frozenset((x, y)) in edges for y in rest if y != x)
                    - sum(frozenset((x, y)) in edges for y in taken))
        best = min(rest, key=cost)
        rest.remove(best)
        taken.append(best)
    if small == size:
        return taken
    return rest  # the complement of a small cut-off part


def _pack_window(prompts: list[list[int]], lengths: Sequence[int], n_allowed: int,
                 size_limit: float, token_budget: float, edges_of, packed: bool) -> list[_Batch]:
    """First-fit-decreasing of whole prompts into at most ``n_allowed`` batches; prompts that
    no longer fit whole are split over the roomiest batches, which the decreasing order makes
    the smallest (cheapest) prompts."""
    batches: list[_Batch] = []
    order = sorted(prompts, key=lambda m: (-len(m), -max(lengths[i] for i in m)))
    for members in order:
        remaining = list(members)
        edges = edges_of(members)
        while remaining:
            longest = max(lengths[i] for i in remaining)
            k = len(remaining)
            cap = _Batch(packed).room(longest, size_limit, token_budget)
            if k > cap:  # bigger than an empty batch: full batches of it first
                part = _cut_part(remaining, cap, edges)
                b = _Batch(packed)
                b.add(part, lengths)
                batches.append(b)
                remaining = [i for i in remaining if i not in set(part)]
                continue
            fitting = [(b.room(longest, size_limit, token_budget), j) for j, b in enumerate(batches)]
            whole = [(r, j) for r, j in fitting if r >= k]
            if whole:  # best fit: the tightest batch it fills
                batches[min(whole)[1]].add(remaining, lengths)
                break
            if len(batches) < n_allowed:
                b = _Batch(packed)
                b.add(remaining, lengths)
                batches.append(b)
                break
            room, j = max(fitting) if fitting else (0, -1)
            if room == 0:  # every allowed batch is full: open one more
                b = _Batch(packed)
                b.add(remaining, lengths)
                batches.append(b)
                break
            part = _cut_part(remaining, room, edges)
            batches[j].add(part, lengths)
            taken = set(part)
            remaining = [i for i in remaining if i not in taken]
    return batches


def _length_windows(order: list[int], groups: dict[int, list[int]], longest: dict[int, int],
                    window_items: float) -> list[list[int]]:
    """Prompts of ``order`` in windows of about ``window_items`` sequences and similar length:
    consecutive buckets of ``BUCKET_WINDOWS`` windows' worth of prompts, each sorted by its
    prompts' ``longest`` response, cut into windows. O(n log n) for n prompts."""
    windows: list[list[int]] = []
    start = 0
    while start < len(order):
        end, count = start, 0
        while end < len(order) and count < window_items * BUCKET_WINDOWS:
            count += len(groups[order[end]])
            end += 1
        bucket = sorted(order[start:end], key=lambda p: longest[p])
        current, count = [], 0
        for p in bucket:
            current.append(p)
            count += len(groups[p])
            if count >= window_items:
                windows.append(current)
                current, count = [], 0
        if current:
            windows.append(current)
        start = end
    return windows


def _pair_edges(items: Sequence[Item], groups: dict[int, list[int]],
                pairs_by_prompt: Mapping[int, Sequence[Pair]] | None) -> Callable[[list[int]], set[frozenset]]:
    """``edges_of(members)``: the training pairs among ``members`` (positions in ``items`` of
    one prompt's responses) as edges ``{x, y}``; every two members when ``pairs_by_prompt``
    is None, else the prompt's pairs whose two responses are both items."""
    def edges_of(members: list[int]) -> set[frozenset]:
        if pairs_by_prompt is None:
            return {frozenset((x, y)) for x in members for y in members if x != y}
        p = items[members[0]][0]
        at = {items[i][1]: i for i in groups[p]}
        return {frozenset((at[a], at[b])) for a, b in pairs_by_prompt.get(p, ()) if a in at and b in at}

    return edges_of


def greedy_prompt_batches(items: Sequence[Item], *, batch_size: int | None = None,
                          token_budget: int | None = None, seed: int = 0, shuffle: bool = True,
                          slack: float = 0.05, pairs_by_prompt: Mapping[int, Sequence[Pair]] | None = None,
                          packed: bool = False) -> list[list[int]]:
    """Forward batches that keep each prompt's responses together, with little padding (§5).

    Every item appears in exactly one batch; every batch keeps to ``batch_size`` sequences
    and ``token_budget`` padded tokens (longest x size; a sequence over the budget alone), or
    with ``packed`` ``token_budget`` tokens in its packed row (the sum of the lengths).

    Prompts are shuffled (``shuffle``, ``seed``) into buckets of ``BUCKET_WINDOWS`` windows,
    each bucket is sorted by the prompts' longest response and cut into windows of about
    ``WINDOW_BATCHES`` batches' worth of sequences, so a window holds prompts of similar
    length. Each window is packed first-fit-decreasing by number of responses (best fit) into
    at most its share of ``(1 + slack) x`` the ideal number of batches (all responses / a full
    batch, counted over the windows so far). A prompt that fits no allowed batch whole is
    split over the batches with the most room, largest part first: a prompt of k responses
    cut into parts of sizes a_i loses (k^2 - sum a_i^2) / 2 pairs, so few large parts cut the
    fewest, and the decreasing order leaves the splitting to the smallest prompts, which cut
    fewest pairs. A prompt bigger than an empty batch first fills whole batches. Which
    responses make up a part is chosen greedily to cut few training pairs: with
    ``pairs_by_prompt`` tied responses are put on opposite sides, since a tie is no pair.

    ``slack`` trades pairs for batches: 0 packs into (about) the ideal number of batches and
    splits the prompts it must; a large slack splits only prompts bigger than a batch. The
    batches come back in random order when ``shuffle``, else in window order.

    Complexity: O(n log n + n w) for n items and w = ``WINDOW_BATCHES`` batches per window,
    plus O(k^2) per split prompt of k responses.
    """
    size_limit, budget = _check_limits(batch_size, token_budget)
    if not (is_number(slack) and slack >= 0):
        raise CheemsInputError(f"slack must be a number >= 0, got {slack!r}", field="slack")
    groups = _group_by_prompt(items)
    lengths = [it[2] for it in items]
    rng = np.random.default_rng(seed)
    order = list(groups)
    if shuffle:
        order = [order[j] for j in rng.permutation(len(order))]

    longest = {p: max(lengths[i] for i in groups[p]) for p in order}
    n_items = len(items)
    typical = float(np.median(lengths)) if n_items else 1.0
    full = max(1.0, _fit(typical, size_limit, budget))  # sequences in a full batch, typically
    # shuffled buckets, each sorted by length, cut into windows of similar length
    windows = _length_windows(order, groups, longest, window_items=max(1.0, WINDOW_BATCHES * full))
    edges_of = _pair_edges(items, groups, pairs_by_prompt)

    batches: list[_Batch] = []
    ideal = 0.0
    for window in windows:
        n_seq = sum(len(groups[p]) for p in window)
        wl = (sum(lengths[i] for p in window for i in groups[p]) / n_seq if packed
              else max(longest[p] for p in window))  # a packed row holds the mean, a padded one pays the longest
        cap = max(1.0, _fit(wl, size_limit, budget))
        ideal += n_seq / cap
        allowed = max(1, math.floor((1 + slack) * ideal + 1e-9) - len(batches))
        batches.extend(_pack_window([groups[p] for p in window], lengths, allowed,
                                    size_limit, budget, edges_of, packed))
    out = [b.members for b in batches]
    if shuffle:
        out = [out[j] for j in rng.permutation(len(out))]
    return out


# ---------------------------------------------------------------------------- baselines

def official_greedy_batches(items: Sequence[Item], *, batch_size: int | None = None,
                            token_budget: int | None = None, seed: int = 0,
                            shuffle: bool = True, packed: bool = False) -> list[list[int]]:
    """The official trainer's greedy sampler, re-implemented from its description.

    Walks the prompts in order (shuffled with ``seed`` when ``shuffle``) and adds a prompt's
    responses to the current batch while they fit; the excess responses go on to the next
    batch(es) as they come, so a prompt that meets the end of a batch is split there and loses
    the pairs across the cut. Same limits as `greedy_prompt_batches`. O(n).
    """
    from cheems.models.sequences import pack_in_order

    size_limit, budget = _check_limits(batch_size, token_budget)
    groups = _group_by_prompt(items)
    order = [i for p in _prompt_order(groups, seed, shuffle) for i in groups[p]]
    return pack_in_order(order, [it[2] for it in items], token_budget=budget, max_batch_size=size_limit,
                         packed=packed)


def pairwise_duplication_batches(items: Sequence[Item], pairs_by_prompt: Mapping[int, Sequence[Pair]], *,
                                 batch_size: int | None = None, token_budget: int | None = None,
                                 seed: int = 0, shuffle: bool = True) -> list[list[int]]:
    """The plain approach: every training pair forwarded as its own two sequences.

    Pairs (shuffled when ``shuffle``) fill batches two sequences at a time within the limits
    (a pair always stays together, even over the limits); a response is forwarded once per
    pair it is in, so a prompt of k fully ranked responses costs k(k-1) forwards instead of k.
    `batch_stats` counts the forwards. O(number of pairs).
    """
    size_limit, budget = _check_limits(batch_size, token_budget)
    groups = _group_by_prompt(items)
    where = {(items[i][0], items[i][1]): i for members in groups.values() for i in members}
    pairs: list[tuple[int, int]] = []
    for p, plist in pairs_by_prompt.items():
        for a, b in plist:
            if (p, a) not in where or (p, b) not in where:
                raise CheemsInputError(f"pair ({a!r}, {b!r}) of prompt {p!r} names a response not in items",
                                       field="pairs_by_prompt")
            pairs.append((where[(p, a)], where[(p, b)]))
    if shuffle:
        pairs = [pairs[j] for j in np.random.default_rng(seed).permutation(len(pairs))]
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for a, b in pairs:
        wider = max(longest, items[a][2], items[b][2])
        if current and (len(current) + 2 > size_limit or wider * (len(current) + 2) > budget):
            batches.append(current)
            current, wider = [], max(items[a][2], items[b][2])
        current += [a, b]
        longest = wider
    if current:
        batches.append(current)
    return batches


# ---------------------------------------------------------------------------- measuring

def batch_stats(batches: Sequence[Sequence[int]], items: Sequence[Item],
                pairs_by_prompt: Mapping[int, Sequence[Pair]], *, packed: bool = False) -> dict:
    """What an epoch over ``batches`` costs and trains on.

    Returns ``forward_sequences``, ``forward_batches``, ``pairs``, ``covered_pairs`` and
    ``pair_coverage`` (share of training pairs whose two responses meet in one batch),
    ``real_tokens``, ``padded_tokens`` (sum of longest x size; with ``packed``, the rows'
    tokens: the real ones) and ``padding_share`` (padded tokens that are not real / padded
    tokens; 0 when packed), ``forwarded_more_than_once`` and
    ``never_forwarded`` (responses). O(forwards + pairs x batches per response).
    """
    where = {(p, r): i for i, (p, r, _) in enumerate(items)}
    batches_of: dict[int, set[int]] = defaultdict(set)
    times = np.zeros(len(items), dtype=np.int64)
    real = padded = 0
    for j, batch in enumerate(batches):
        if not batch:
            continue
        ls = [items[i][2] for i in batch]
        real += sum(ls)
        padded += sum(ls) if packed else max(ls) * len(ls)
        for i in batch:
            batches_of[i].add(j)
            times[i] += 1
    n_pairs = covered = 0
    for p, plist in pairs_by_prompt.items():
        for a, b in plist:
            n_pairs += 1
            ia, ib = where.get((p, a)), where.get((p, b))
            if ia is not None and ib is not None and batches_of[ia] & batches_of[ib]:
                covered += 1
    return {
        "forward_sequences": int(times.sum()),
        "forward_batches": sum(1 for b in batches if b),
        "pairs": n_pairs,
        "covered_pairs": covered,
        "pair_coverage": covered / n_pairs if n_pairs else 1.0,
        "real_tokens": int(real),
        "padded_tokens": int(padded),
        "padding_share": 1 - real / padded if padded else 0.0,
        "forwarded_more_than_once": int((times > 1).sum()),
        "never_forwarded": int((times == 0).sum()),
    }


# ---------------------------------------------------------------------------- synthetic data

def _responses_distribution(mean_responses: float, mean_comparisons: float) -> tuple[int, float]:
    """(trials, p) of 2 + Binomial(trials, p) responses: the mean asked, and the largest
    spread that a fully ranked prompt set with ``mean_comparisons`` pairs allows, since
    E[k(k-1)/2] = (var + mean^2 - mean) / 2 and ties only remove pairs."""
    m = mean_responses - 2
    var = max(0.0, 2 * mean_comparisons + mean_responses - mean_responses ** 2)
    var = min(var, 0.9 * m)  # a binomial's variance is below its mean
    trials = max(1, round(m * m / (m - var))) if m > 0 else 1
    return trials, min(1.0, max(0.0, m / trials))


def synthetic_preference_items(n_prompts: int, *, seed: int = 0, mean_responses: float = 5.3,
                               mean_comparisons: float = 12) -> tuple[list[Item], dict[int, dict[int, int]]]:
    """Random training data with CheemsPreference's statistics: ``(items, ranks)``.

    Each prompt has 2 + Binomial responses (mean ``mean_responses``, 2 to about 7 at the
    defaults); ranks are a random order with adjacent responses tied with the probability
    that brings the mean number of ranked pairs to ``mean_comparisons`` (no ties when the
    sizes alone give fewer). A response's length is its prompt's length (lognormal, median
    60 tokens) plus its own (lognormal, median 250), so lengths spread widely around 300 and
    a prompt's responses share a part. ``ranks[prompt_index]`` maps response_index -> rank.
    """
    if n_prompts < 0 or mean_responses < 2:
        raise CheemsInputError("need n_prompts >= 0 and mean_responses >= 2", field="mean_responses")
    rng = np.random.default_rng(seed)
    trials, p = _responses_distribution(mean_responses, mean_comparisons)
    pmf = {2 + j: math.comb(trials, j) * p ** j * (1 - p) ** (trials - j) for j in range(trials + 1)}

    def tied_pairs(q: float) -> float:  # expected tied pairs: positions d apart share a level w.p. q^d
        return sum(w * sum((k - d) * q ** d for d in range(1, k)) for k, w in pmf.items())

    excess = sum(w * k * (k - 1) / 2 for k, w in pmf.items()) - mean_comparisons
    lo, hi = 0.0, 1.0
    if excess > 0:
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if tied_pairs(mid) < excess else (lo, mid)
    q = lo
    sizes = 2 + rng.binomial(trials, p, size=n_prompts)
    items: list[Item] = []
    ranks: dict[int, dict[int, int]] = {}
    for pi, k in enumerate(sizes):
        k = int(k)
        levels = np.cumsum(np.concatenate([[0], rng.random(k - 1) >= q])).astype(int)
        ranks[pi] = {r: int(lv) for r, lv in enumerate(rng.permutation(levels))}
        base = rng.lognormal(math.log(60), 0.8)
        own = rng.lognormal(math.log(250), 0.6, size=k)
        for r in range(k):
            items.append((pi, r, int(min(8192, max(1, round(base + own[r]))))))
    return items, ranks
