"""Near-duplicate texts: character shingles, Jaccard similarity and the exact similarity join that
finds, for each text, the first earlier kept text it copies (the ``duplicate`` and
``near_duplicate`` rules of `cheems.curation.filters`).

Two texts are near duplicates when the Jaccard similarity of their sets of ``k``-character
shingles (:func:`shingles`, :func:`jaccard`) is at least a threshold ``t``. :func:`later_copies`
gives the same answer as comparing every text with every earlier kept one, without comparing
them: it uses the prefix filter of exact set-similarity joins (Chaudhuri, Ganti and Kaushik 2006,
"A primitive operator for similarity joins in data cleaning"; Bayardo, Ma and Srikant 2007,
"Scaling up all pairs similarity search"). Put all shingles in one order, rarest first. If
J(x, y) >= t then |x & y| >= a = ceil(t * max(|x|, |y|)), and two sets that share a elements share
one among the first |x| - a + 1 of x and the first |y| - a + 1 of y. So a text is compared only
with the kept texts whose prefix shares a shingle with its own prefix (an inverted index from
shingle to kept texts), and every candidate is confirmed on the exact sets: the result is exactly
the all-pairs result. Shingles are exact ids (no hashing): :func:`window_ids` numbers them with a
few numpy sorts, O(N log N) for N characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cheems.curation.text_measures import code_points

__all__ = ["ShingleSets", "jaccard", "later_copies", "mix_columns", "shingle_sets", "shingles", "window_ids"]


def shingles(text: str, k: int = 5) -> set[str]:
    """The set of ``k``-character substrings of ``text`` (``{text}`` when it is shorter)."""
    if len(text) <= k:
        return {text}
    return {text[i:i + k] for i in range(len(text) - k + 1)}


def jaccard(a: set, b: set) -> float:
    """``|a & b| / |a | b|`` (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def window_ids(texts: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Text index and shingle id of every ``k``-character window lying inside one text (in no
    particular order); two windows get the same id exactly when they are the same string.

    Code points are renumbered densely and packed ``64 // bits`` to a 64-bit column. One
    column is its own exact key; several are sorted by a 64-bit mix of the columns
    (:func:`mix_columns`) and the runs of equal hashes checked column by column, falling back
    to a lexsort should two different windows ever share a hash. One argsort: O(N log N) for N
    characters.
    """
    none = np.zeros(0, np.int64)
    cp, lens = code_points(texts)
    w = len(cp) - k + 1
    if w <= 0:
        return none, none
    present = np.zeros(int(cp.max()) + 1, np.int64)
    present[cp] = 1
    dense = (np.cumsum(present) - 1)[cp].astype(np.uint64)  # the alphabet, numbered in order
    bits = max(1, int(dense.max()).bit_length())
    per = 64 // bits  # characters per column
    tid = np.repeat(np.arange(len(texts)), lens)[:w]
    inside = np.flatnonzero(np.arange(w) + k <= np.cumsum(lens)[tid])
    if not len(inside):
        return none, none
    columns = []
    for first in range(0, k, per):
        col = np.zeros(w, np.uint64)
        for m in range(first, min(first + per, k)):
            col <<= np.uint64(bits)
            col |= dense[m:m + w]
        columns.append(col[inside])
    key = columns[0] if len(columns) == 1 else mix_columns(columns)
    order = np.argsort(key)
    new = np.zeros(len(order), bool)
    new[0] = True
    for c in columns:
        s = c[order]
        new[1:] |= s[1:] != s[:-1]
    if len(columns) > 1:
        hashed = key[order]
        if (new[1:] & (hashed[1:] == hashed[:-1])).any():  # a collision: sort the columns
            order = np.lexsort(columns)
            new[1:] = False
            for c in columns:
                s = c[order]
                new[1:] |= s[1:] != s[:-1]
    return tid[inside[order]], np.cumsum(new) - 1


def mix_columns(columns: list[np.ndarray]) -> np.ndarray:
    """A 64-bit hash of each row of ``columns`` (the splitmix64 finalizer after each one)."""
    h = np.zeros(len(columns[0]), np.uint64)
    for c in columns:
        h ^= c
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


@dataclass
class ShingleSets:
    """The distinct ``k``-character shingles of each of a list of texts (texts shorter than
    ``k`` have none), as ids numbered rarest first, and each text's prefix for the threshold."""

    members: np.ndarray       # every text's shingle ids, text by text, rarest first
    starts: np.ndarray        # text i: members[starts[i]:starts[i + 1]]
    prefixes: list[list[int]]  # text i: its first |x| - a + 1 shingles (a: see the module docstring)
    cache: dict[int, set[int]] = field(default_factory=dict)

    def set_of(self, i: int) -> set[int]:
        """The shingle ids of text ``i`` as a set (made once, then kept)."""
        if i not in self.cache:
            self.cache[i] = set(self.members[self.starts[i]:self.starts[i + 1]].tolist())
        return self.cache[i]


def shingle_sets(texts: list[str], k: int, threshold: float) -> ShingleSets:
    """:class:`ShingleSets` of ``texts``: a few sorts, O(N log N) for N characters.

    The order is the number of texts holding a shingle (ties by id); any one order is exact,
    and rare shingles first keep the index lists short. A prefix keeps ``|x| - a + 1``
    shingles with ``a = max(ceil(t |x|) - 1, 1)``, one shingle more than the bound needs, so
    that rounding in ``t * |x|`` never loses a candidate.
    """
    tid, sid = window_ids(texts, k)
    u = int(sid.max()) + 1 if len(sid) else 1
    pairs = np.sort(tid * u + sid)
    first = np.ones(len(pairs), bool)
    first[1:] = pairs[1:] != pairs[:-1]
    pairs = pairs[first]  # each shingle once per text
    text_of, shingle = pairs // u, pairs % u
    sizes = np.bincount(text_of, minlength=len(texts))
    starts = np.concatenate(([0], np.cumsum(sizes)))
    texts_holding = np.bincount(shingle, minlength=u)
    rank = np.empty(u, np.int64)  # rarest first, ties by id: a sort of (count, id) keys
    rank[np.sort(texts_holding * u + np.arange(u)) % u] = np.arange(u)
    members = np.sort(text_of * u + rank[shingle]) - text_of * u  # text_of stays in order
    need = np.maximum(np.ceil(threshold * sizes).astype(np.int64) - 1, 1)
    length = np.clip(sizes - need + 1, 0, sizes)
    in_prefix = np.arange(len(members)) - starts[text_of] < length[text_of]
    flat = members[in_prefix].tolist()
    cuts = np.concatenate(([0], np.cumsum(length))).tolist()
    return ShingleSets(members, starts, [flat[a:b] for a, b in zip(cuts, cuts[1:])])


def _similar_kept(i: int, sets: ShingleSets, index: dict[int, list[int]],
                  threshold: float) -> tuple[int, float] | None:
    """The first kept text (lowest index) with Jaccard similarity at least ``threshold`` to
    text ``i``, and the similarity; ``index`` maps a prefix shingle to the kept texts whose
    prefix holds it. Candidates are confirmed on the exact sets."""
    found: set[int] = set()
    for s in sets.prefixes[i]:
        kept = index.get(s)
        if kept:
            found.update(kept)
    if not found:
        return None
    mine = sets.set_of(i)
    for j in sorted(found):
        sim = jaccard(mine, sets.set_of(j))
        if sim >= threshold:
            return j, sim
    return None


def later_copies(flats: list[str], sets: ShingleSets | None, first: int, k: int, threshold: float,
                 exact: bool = True, near: bool = True) -> dict[int, tuple[int, float | None]]:
    """The later copies among ``flats`` (texts without whitespace), taken in order; the first
    copy stays: ``{i: (j, similarity)}`` for each text ``i`` that copies the earlier kept text
    ``j``, the similarity None for an exact copy.

    Each text is compared with the earlier texts kept so far: with ``exact``, first for the same
    text (a dict), then, with ``near``, for shingle Jaccard similarity at least ``threshold``,
    where a text shorter than ``k`` is its own only shingle (similarity 1.0 with the same text
    only). ``sets`` holds the shingle sets of ``flats`` as texts ``first``, ``first + 1``, ...
    (:func:`shingle_sets` with the same ``k`` and ``threshold``; None without ``near``); a text
    meets only the kept ones whose prefix shares a shingle with its prefix. The same result as
    comparing every pair, in about O(n) dict and set operations for n texts unless many of
    them are nearly alike.
    """
    out: dict[int, tuple[int, float | None]] = {}
    seen: dict[str, int] = {}   # text -> index of the first kept copy
    short: dict[str, int] = {}  # the same, for kept texts shorter than k
    index: dict[int, list[int]] = {}  # prefix shingle -> kept texts (numbered as in sets)
    for i, flat in enumerate(flats):
        if exact and flat in seen:
            out[i] = (seen[flat], None)
            continue
        if near:
            if len(flat) < k:  # similar only to the same text: similarity 1.0
                hit = (short[flat], 1.0) if flat in short else None
            else:
                found = _similar_kept(first + i, sets, index, threshold)
                hit = None if found is None else (found[0] - first, found[1])
            if hit:
                out[i] = hit
                continue
            if len(flat) < k:
                short.setdefault(flat, i)
            else:
                for s in sets.prefixes[first + i]:
                    index.setdefault(s, []).append(first + i)
        seen.setdefault(flat, i)
    return out
