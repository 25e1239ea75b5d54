"""Preference graphs: conflict resolution, conflict ratio and triple-wise task design.

Conflict resolution follows Cheems (paper §3.2, Appendix C, Algorithm 1): per prompt, a
directed graph with an edge from the better to the worse response of every comparison (both
ways for a tie); every cycle merged into one node; the condensed graph layered
topologically; each response ranked by its layer (0 = best, merged members share a rank).

Merging cycles until none remain gives exactly the strongly connected components, and
Kahn's layer-by-layer topological sort puts a node at the length of the longest path that
ends in it. Both are computed for all prompts at once on one block-diagonal graph: prompts
of at most 64 responses as bit sets (Warshall's closure, numpy alone, no scipy start-up
cost), larger ones with scipy's Tarjan-style ``connected_components`` and a vectorised Kahn
sort. Cost O(E + Σ n_p² + V·L) with n_p a prompt's responses and L the longest chain.
"""

from __future__ import annotations

import itertools
import random
from itertools import chain, count, islice, repeat
from operator import attrgetter
from dataclasses import dataclass

import numpy as np
from cheems.io import gc_paused
from cheems.records import Prompt

__all__ = ["BLOCK_BITS", "LABEL_CODE", "Resolution", "annotation_tasks", "comparison_arrays",
           "comparison_arrays_from_codes", "conflict_ratio", "conflict_report", "invalid_code_prompts", "pair_coverage",
           "resolve_arrays", "resolve_comparisons", "resolve_conflicts", "strong_components", "triple_tasks"]

LABEL_CODE = {"g": 0, "b": 1, "s": 2}


def strong_components(n_nodes: int, src: np.ndarray, dst: np.ndarray,
                      offsets: np.ndarray | None = None) -> np.ndarray:
    """Id of the strongly connected component of every node of the graph ``src[i] -> dst[i]``
    over nodes ``0..n_nodes-1``: ids run from 0 to (number of components - 1).

    With ``offsets`` (prompt i owns nodes ``offsets[i]:offsets[i+1]``, no edge between
    prompts) and at most :data:`BLOCK_BITS` nodes per prompt, on bit sets with numpy alone
    (:func:`_block_components`, no per-call set-up: the fast way for a batch of small
    prompts); otherwise scipy's ``connected_components`` (Pearce's iterative variant of
    Tarjan's algorithm) on a sparse matrix, O(V + E).
    """
    from scipy.sparse import csr_matrix  # imported here: task design needs no scipy start-up cost
    from scipy.sparse.csgraph import connected_components

    if n_nodes == 0:
        return np.zeros(0, np.int64)
    if offsets is not None and int(np.diff(offsets).max(initial=0)) <= BLOCK_BITS:
        return _block_components(np.asarray(offsets, np.int64), np.asarray(src, np.int64),
                                 np.asarray(dst, np.int64))[0]
    g = csr_matrix((np.ones(len(src), np.int8), (src, dst)), shape=(n_nodes, n_nodes))
    return connected_components(g, directed=True, connection="strong")[1]


def resolve_arrays(n_nodes: int, src: np.ndarray, dst: np.ndarray,
                   offsets: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Layer ranks of a graph given as edges ``src[i] -> dst[i]`` (better -> worse).

    Returns ``(rank, component)``: for each node its layer in the condensation (0 for nodes
    with no better node) and the id of its strongly connected component (ids 0..k-1, in no
    promised order). Nodes of different prompts must share no edge; each prompt's ranks then
    start at 0. With ``offsets`` (prompt i owns nodes ``offsets[i]:offsets[i+1]``) and at
    most :data:`BLOCK_BITS` nodes per prompt, :func:`_block_resolve` works on bit sets with
    numpy alone; otherwise scipy finds the components and :func:`_layers` the layers.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if n_nodes == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if offsets is not None and int(np.diff(offsets).max(initial=0)) <= BLOCK_BITS:
        return _block_resolve(np.asarray(offsets, np.int64), src, dst)
    comp = strong_components(n_nodes, src, dst)
    n_comp = int(comp.max()) + 1
    cs, cd = comp[src], comp[dst]
    keep = cs != cd
    cs, cd = cs[keep], cd[keep]
    return _layers(n_comp, cs, cd)[comp], comp


BLOCK_BITS = 64
"""The most nodes of one prompt that :func:`resolve_arrays` keeps in one bit set (uint64)."""
_ONE = np.uint64(1)


def _block_resolve(offsets: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`resolve_arrays` for prompts of at most 64 responses, on bit sets.

    Bit j of a node's set stands for node j of its prompt. The descendants and ancestors
    of every node (itself included) come from Warshall's transitive closure
    (:func:`_closures`); two nodes share a component when each reaches the other, and the
    component is numbered after its first node. Layers are peeled off: a node joins the
    current layer when every ancestor outside its component is in an earlier one, so its
    layer is its longest path. O(E + Σ n_p² + V·L) word operations for prompts of n_p
    responses and L layers.
    """
    comp, anc, mutual, bit, node_owner = _block_components(offsets, src, dst)
    n_nodes, sizes = int(offsets[-1]), np.diff(offsets)
    above = anc & ~mutual  # ancestors outside the component
    layer = np.zeros(n_nodes, np.int64)
    placed = np.zeros(len(sizes), np.uint64)  # per prompt, the nodes in a layer so far
    ready = above == 0
    pending = np.arange(n_nodes)
    depth = 0
    while len(pending):  # one layer per round; at most (longest chain + 1) rounds
        now = pending[ready]
        layer[now] = depth
        np.bitwise_or.at(placed, node_owner[now], bit[now])
        pending = pending[~ready]
        ready = (above[pending] & ~placed[node_owner[pending]]) == 0
        depth += 1
    return layer, comp


def _block_components(offsets: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, ...]:
    """The strongly connected components of prompts of at most 64 nodes, on bit sets (see
    :func:`_block_resolve`): ``(comp, ancestors, mutual, bit, node_owner)``, the component id
    of every node (numbered in the order of their first nodes), the bit set of its ancestors
    and of its component (itself included), its own bit and its prompt."""
    sizes = np.diff(offsets)
    n_nodes = int(offsets[-1])
    node_owner = np.repeat(np.arange(len(sizes)), sizes)
    first = offsets[node_owner]
    bit = _ONE << (np.arange(n_nodes) - first).astype(np.uint64)
    desc, anc = bit.copy(), bit.copy()
    np.bitwise_or.at(desc, src, bit[dst])
    np.bitwise_or.at(anc, dst, bit[src])
    desc, anc = _closures(np.stack([desc, anc]), offsets, sizes)
    mutual = desc & anc  # the node's component
    lowest = mutual & (~mutual + _ONE)  # its first node's bit; frexp reads the bit's position exactly
    head = first + (np.frexp(lowest.astype(np.float64))[1] - 1)
    is_head = np.zeros(n_nodes, bool)
    is_head[head] = True
    return (np.cumsum(is_head) - 1)[head], anc, mutual, bit, node_owner


def _closures(sets: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Warshall's transitive closure of bit sets ``sets[s, v]`` (bit j: node j of v's prompt),
    for every prompt at once, prompts of one size together: through each node k in turn,
    whoever reaches k reaches what k reaches. O(Σ n_p²) word operations."""
    for n in np.flatnonzero(np.bincount(sizes)).tolist():  # the sizes present (np.unique would import numpy.ma)
        nodes = offsets[np.flatnonzero(sizes == n)] + np.arange(n)[:, None]
        block = sets[:, nodes]  # (len(sets), n, prompts of size n): the long axis innermost
        via = np.empty_like(block)
        for k in range(n):
            np.right_shift(block, np.uint64(k), out=via)
            np.bitwise_and(via, _ONE, out=via)
            np.multiply(via, block[:, k:k + 1], out=via)
            np.bitwise_or(block, via, out=block)
        sets[:, nodes] = block
    return sets


def _layers(n_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Length of the longest path ending in each node of the acyclic graph ``src -> dst``.

    Kahn's topological sort, one generation per round for every prompt at once: a node
    joins the frontier when its last edge from an earlier generation is removed, so its
    round is its longest path. Each edge is visited once, O(V·L + E) for L generations.
    """
    layer = np.zeros(n_nodes, np.int64)
    if not len(src):
        return layer
    order = np.argsort(src, kind="stable")
    targets = dst[order]  # out-edges grouped by source, node v's at indptr[v]:indptr[v + 1]
    indptr = np.zeros(n_nodes + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n_nodes), out=indptr[1:])
    indegree = np.bincount(dst, minlength=n_nodes)
    frontier = np.flatnonzero(indegree == 0)
    depth = 0
    while len(frontier):
        layer[frontier] = depth
        start, n_out = indptr[frontier], indptr[frontier + 1] - indptr[frontier]
        ends = np.cumsum(n_out)
        edges = np.repeat(start - ends + n_out, n_out) + np.arange(int(ends[-1]))  # the frontier's out-edges
        hit = targets[edges]
        indegree -= np.bincount(hit, minlength=n_nodes)
        frontier = np.unique(hit[indegree[hit] == 0])
        depth += 1
    return layer


@dataclass
class Resolution:
    """Result of :func:`resolve_conflicts` for a list of prompts.

    ``ranks[i]`` is prompt i's ranking ({response id: layer}); the per-prompt arrays count
    input comparisons, those the final ranking does not reproduce, merged cycles (groups
    of responses merged because strict preferences among them formed a cycle) and tie
    groups (responses merged only because they were judged the same).
    """

    ranks: list[dict[str, int]]
    n_comparisons: np.ndarray
    n_conflicts: np.ndarray
    n_merged: np.ndarray
    n_tie_groups: np.ndarray
    n_uncompared: np.ndarray | None = None  # responses in no comparison (ranked 0 by default)

    def report(self, prompts: list[Prompt]) -> dict:
        """Conflict statistics per subset and in total (paper Table 5)."""
        return conflict_report([p.subset for p in prompts], self.n_comparisons, self.n_conflicts, self.n_merged,
                               self.n_tie_groups, self.n_uncompared)


def conflict_report(subsets: list[str | None], n_comparisons: np.ndarray, n_conflicts: np.ndarray,
                    n_merged: np.ndarray, n_tie_groups: np.ndarray, n_uncompared: np.ndarray | None) -> dict:
    """Conflict statistics per subset (sorted by name, no subset as ``(none)``) and in total
    (paper Table 5), from the per-prompt counts of :class:`Resolution` and each prompt's
    subset. O(prompts x subsets)."""
    subsets = np.array([s or "" for s in subsets], dtype=object)
    out = {}
    names = sorted(set(subsets.tolist()))
    for name in names + ["total"]:
        m = np.ones(len(subsets), bool) if name == "total" else subsets == name
        nc = int(n_comparisons[m].sum())
        nk = int(n_conflicts[m].sum())
        out[name or "(none)"] = {
            "prompts": int(m.sum()),
            "comparisons": nc,
            "conflicts": nk,
            "conflict_ratio": nk / nc if nc else 0.0,
            "merged_cycles": int(n_merged[m].sum()),
            "prompts_with_cycles": int((n_merged[m] > 0).sum()),
            "tie_groups": int(n_tie_groups[m].sum()),
            "uncompared_responses": int(n_uncompared[m].sum()) if n_uncompared is not None else 0,
        }
    return out


def comparison_arrays(prompts: list[Prompt]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                      list[str]]:
    """Flatten prompts into global node numbering and comparison arrays.

    Returns ``(offsets, a, b, label_code, prompt_index, ids)``: prompt i owns nodes
    ``offsets[i]:offsets[i+1]`` in the order of its response list, whose ids are
    ``ids[offsets[i]:offsets[i+1]]``; comparison k relates nodes ``a[k]`` and ``b[k]`` with
    label code 0 (g), 1 (b) or 2 (s). O(V + E) for V responses and E comparisons
    (:func:`_read_fields` reads the objects, :func:`_node_indices` finds the nodes).
    """
    n = len(prompts)
    sizes, counts, labels, ids, node_first, side_first = _read_fields(prompts)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    owner = np.repeat(np.arange(n), counts)
    lab = _LABEL_TABLE[np.frombuffer(labels.encode("ascii"), np.uint8)]
    if len(lab) != len(owner) or (lab < 0).any():
        raise ValueError("comparison labels must be validated (g, b or s) before resolving")
    a, b = _node_indices(prompts, sizes, offsets, owner, node_first, side_first)
    return offsets, a, b, lab, owner, ids


def comparison_arrays_from_codes(sizes, counts, node_first, a_first, b_first,
                                 labels: str) -> tuple[np.ndarray, ...] | None:
    """:func:`comparison_arrays` from prompts read as integer codes, without :class:`Prompt`
    objects (as :class:`cheems.formats.ColumnarBatch` reads them): ``sizes[i]`` responses and
    ``counts[i]`` comparisons per prompt; for every response the index of the first response
    holding its id, and for each comparison side the same for the id it names (-1: none);
    one label letter per comparison. Integer sequences may be any buffer (``array``, numpy).

    Returns ``(offsets, a, b, label_code, prompt_index)`` as :func:`comparison_arrays` does,
    or None when the codes are not those of valid prompts: no response at all, a prompt that
    repeats a response id, a comparison naming an id its prompt lacks or one response twice,
    a label other than g, b or s. O(V + E) (a dense table), O((V + E) log V) at worst.
    """
    sizes, counts, node_first, a_first, b_first = (np.frombuffer(x, np.int64) if len(x) else np.zeros(0, np.int64)
                                                   for x in (sizes, counts, node_first, a_first, b_first))
    n = len(sizes)
    if not len(node_first) or int(sizes.sum()) != len(node_first):
        return None
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    owner = np.repeat(np.arange(n), counts)
    try:
        lab = _LABEL_TABLE[np.frombuffer(labels.encode("ascii"), np.uint8)]
    except UnicodeEncodeError:
        return None
    if len(lab) != len(owner) or len(a_first) != len(owner) or len(b_first) != len(owner) or (lab < 0).any():
        return None
    found, unique, known = _lookup_nodes(n, sizes, owner, node_first, [a_first, b_first])
    if not (unique and known) or (found[0] == found[1]).any():
        return None
    return offsets, found[0], found[1], lab, owner


def invalid_code_prompts(sizes, counts, node_first, a_first, b_first, labels: str) -> np.ndarray:
    """Which prompts, given as :func:`comparison_arrays_from_codes` takes them, make it refuse
    them all: no response, a response id given twice, a comparison that names an id the prompt
    lacks or one response twice, a label other than g, b or s. One boolean per prompt; for
    the rare input refused, so by sorting. O((V + E) log V)."""
    sizes, counts, node_first, a_first, b_first = (np.frombuffer(x, np.int64) if len(x) else np.zeros(0, np.int64)
                                                   for x in (sizes, counts, node_first, a_first, b_first))
    n, n_nodes = len(sizes), len(node_first)
    bad = sizes == 0
    owner = np.repeat(np.arange(n), counts)
    node_owner = np.repeat(np.arange(n), sizes)
    lab = _LABEL_TABLE[np.frombuffer(labels.encode("ascii", "replace"), np.uint8)]
    bad[owner[lab < 0]] = True
    key = np.sort(node_owner * max(n_nodes, 1) + node_first)  # (prompt, id) of every response
    bad[np.unique(key[1:][key[1:] == key[:-1]]) // max(n_nodes, 1)] = True
    for side in (a_first, b_first):
        side_key = owner * max(n_nodes, 1) + side
        at = np.minimum(np.searchsorted(key, side_key), max(len(key) - 1, 0))
        missing = (side < 0) | (key[at] != side_key) if len(key) else np.ones(len(side), bool)
        bad[owner[missing]] = True
    bad[owner[a_first == b_first]] = True
    return bad


_LABEL_TABLE = np.full(256, -1, np.int8)
for _label, _code in LABEL_CODE.items():
    _LABEL_TABLE[ord(_label)] = _code

_CHUNK = 256  # prompts read per round: their objects stay in the CPU cache from one field to the next
_FIELDS = tuple(map(attrgetter, ("responses", "comparisons", "id", "label", "a", "b")))


def _read_fields(prompts: list[Prompt]) -> tuple[np.ndarray, np.ndarray, str, list, np.ndarray, list[np.ndarray]]:
    """The fields of every prompt's responses and comparisons, read by C-level ``map``s (no
    Python code runs per response or comparison), a chunk of prompts at a time.

    Returns ``(sizes, counts, labels, ids, node_first, [a_first, b_first])``: responses and
    comparisons per prompt, the comparisons' labels as one string, every response id, and
    for each response and each comparison side the global index of the first response that
    holds its id (one dict over all ids, each string hashed once), -1 for an id no response
    up to its own prompt holds. O(V + E).
    """
    get_responses, get_comparisons, get_id, get_label, get_a, get_b = _FIELDS
    first: dict = {}
    sizes, counts, labels, ids, node_first, a_first, b_first = [], [], [], [], [], [], []
    for lo in range(0, len(prompts), _CHUNK):
        part = prompts[lo:lo + _CHUNK]
        responses = list(map(get_responses, part))
        comparisons = list(map(get_comparisons, part))
        sizes.append(np.fromiter(map(len, responses), np.int64, len(part)))
        counts.append(np.fromiter(map(len, comparisons), np.int64, len(part)))
        part_ids = list(map(get_id, chain.from_iterable(responses)))
        node_first.append(np.fromiter(map(first.setdefault, part_ids, count(len(ids))), np.int64, len(part_ids)))
        ids += part_ids
        comps = list(chain.from_iterable(comparisons))
        labels.append("".join(map(get_label, comps)))
        a_first.append(np.fromiter(map(first.get, map(get_a, comps), repeat(-1)), np.int64, len(comps)))
        b_first.append(np.fromiter(map(first.get, map(get_b, comps), repeat(-1)), np.int64, len(comps)))
    join = _concatenate
    return (join(sizes), join(counts), "".join(labels), ids, join(node_first), [join(a_first), join(b_first)])


def _concatenate(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


_DENSE_SLACK = 1 << 20  # a dense (prompt, id) table may hold this many entries beyond 8 per node


def _node_indices(prompts, sizes, offsets, owner, node_first, side_first) -> tuple[np.ndarray, np.ndarray]:
    """Global node index of each comparison's two responses, from :func:`_read_fields`' codes
    (:func:`_lookup_nodes`). Should one prompt hold an id twice, exact per-prompt dictionaries
    are used instead (the later response wins). O(V + E) with the table, O((V + E) log V)
    with the search."""
    found, unique, known = _lookup_nodes(len(prompts), sizes, owner, node_first, side_first)
    if unique:
        if not known:
            raise ValueError("a comparison names an unknown response (validate prompts first)")
        return found[0], found[1]
    a: list[int] = []  # an id repeated within a prompt: exact lookups, one prompt at a time
    b: list[int] = []
    for p, off in zip(prompts, offsets.tolist()):
        index = {r.id: off + j for j, r in enumerate(p.responses)}
        a.extend(index[c.a] for c in p.comparisons)
        b.extend(index[c.b] for c in p.comparisons)
    return np.array(a, np.int64), np.array(b, np.int64)


def _lookup_nodes(n_prompts: int, sizes, owner, node_first, side_first) -> tuple[list[np.ndarray], bool, bool]:
    """``(found, unique, known)``: the global node of each comparison side (``found[0]`` for
    ``a``, ``found[1]`` for ``b``), whether no prompt holds an id twice, and whether every
    side names a response of its own prompt; ``found`` is meaningful only when both hold.

    The distinct ids are numbered 0..n_codes-1; response j of prompt i gets the key
    ``i * n_codes + code``, each comparison side the key of its prompt and of the id it names.
    Keys are looked up in a dense table when ``n_prompts * n_codes`` is small (ids repeat
    across prompts, as ``r1``, ``r2``, ... do), else by binary search in the sorted node
    keys. O(V + E) with the table, O((V + E) log V) with the search.
    """
    n_nodes = len(node_first)
    is_first = node_first == np.arange(n_nodes)
    code = np.cumsum(is_first) - 1  # at a first occurrence: the number of its id
    n_codes = int(is_first.sum())
    node_key = np.repeat(np.arange(n_prompts, dtype=np.int64) * n_codes, sizes) + code[node_first]
    known = [f >= 0 for f in side_first]
    sides = [owner * n_codes + np.where(k, code[f], 0) for f, k in zip(side_first, known)]
    n_keys = n_prompts * n_codes
    if n_keys <= 8 * n_nodes + _DENSE_SLACK:
        table = np.full(n_keys, -1, np.int64)
        table[node_key] = np.arange(n_nodes)
        unique = np.count_nonzero(table >= 0) == n_nodes
        found = [table[key] for key in sides] if unique else []
        missing = any((f < 0).any() for f in found)
    else:
        order = np.argsort(node_key, kind="stable")
        sorted_key = node_key[order]
        unique = not (sorted_key[1:] == sorted_key[:-1]).any()
        pos = [np.minimum(np.searchsorted(sorted_key, key), n_nodes - 1) for key in sides] if unique else []
        missing = any((sorted_key[p] != key).any() for p, key in zip(pos, sides))
        found = [order[p] for p in pos]
    return found, bool(unique), not missing and all(k.all() for k in known)


def resolve_conflicts(prompts: list[Prompt]) -> Resolution:
    """Resolve every prompt's comparisons into a partial ranking (Cheems Algorithm 1).

    Responses never compared stand alone and get rank 0 (nothing is known to beat them).
    The conflict ratio counts input comparisons the ranking does not reproduce: a ``g``/``b``
    whose responses end tied or reversed, an ``s`` whose responses end with different ranks.
    """
    with gc_paused():
        return _resolve(prompts)


def _resolve(prompts: list[Prompt]) -> Resolution:
    return resolve_comparisons(*comparison_arrays(prompts))


def resolve_comparisons(offsets: np.ndarray, a: np.ndarray, b: np.ndarray, lab: np.ndarray, owner: np.ndarray,
                        ids: list[str]) -> Resolution:
    """:func:`resolve_conflicts` on the arrays of :func:`comparison_arrays` (or
    :func:`comparison_arrays_from_codes` with the response ids): prompt i's ranking maps
    ``ids[offsets[i]:offsets[i+1]]`` to their layers. O(E + Σ n_p² + V·L), see :func:`resolve_arrays`.
    """
    n_nodes = int(offsets[-1])
    # g: a -> b; b: b -> a; s: both ways
    src = np.concatenate([np.where(lab == 1, b, a), b[lab == 2]])
    dst = np.concatenate([np.where(lab == 1, a, b), a[lab == 2]])
    rank, comp = resolve_arrays(n_nodes, src, dst, offsets)
    reproduced = np.sign(rank[a] - rank[b]) == _REPRODUCED_SIGN[lab]
    n_prompts = len(offsets) - 1
    n_comparisons = np.bincount(owner, minlength=n_prompts)
    n_conflicts = np.bincount(owner[~reproduced], minlength=n_prompts)
    # a merged group is a conflict cycle when a strict preference ended inside it; groups
    # held together only by ties ("s") are counted apart
    node_owner = np.repeat(np.arange(n_prompts), np.diff(offsets))
    n_comp = int(comp.max()) + 1 if n_nodes else 0
    comp_size = np.bincount(comp, minlength=n_comp)
    comp_owner = np.zeros(n_comp, np.int64)
    comp_owner[comp] = node_owner
    cyclic = np.zeros(n_comp, bool)
    ca = comp[a]
    cyclic[ca[(lab != 2) & (ca == comp[b])]] = True
    n_merged = np.bincount(comp_owner[cyclic], minlength=n_prompts)
    n_tie_groups = np.bincount(comp_owner[(comp_size > 1) & ~cyclic], minlength=n_prompts)
    pairs = zip(ids, rank.tolist())  # each prompt's dict takes its responses' pairs off the front
    ranks = list(map(dict, map(islice, repeat(pairs), np.diff(offsets).tolist())))
    compared = np.zeros(n_nodes, bool)
    compared[a] = True
    compared[b] = True
    n_uncompared = np.bincount(node_owner[~compared], minlength=n_prompts)
    return Resolution(ranks, n_comparisons, n_conflicts, n_merged, n_tie_groups, n_uncompared)


_REPRODUCED_SIGN = np.array([-1, 1, 0])  # sign of rank(a) - rank(b) that reproduces g, b and s


def conflict_ratio(prompts: list[Prompt], ranks: list[dict[str, int]]) -> float:
    """Share of the prompts' comparisons that the given rankings do not reproduce."""
    total = wrong = 0
    for p, rank in zip(prompts, ranks):
        for c in p.comparisons:
            ra, rb = rank[c.a], rank[c.b]
            ok = ra < rb if c.label == "g" else rb < ra if c.label == "b" else ra == rb
            total += 1
            wrong += not ok
    return wrong / total if total else 0.0


# ----------------------------------------------------------------------------- task design

def triple_tasks(n: int, design: str = "circular") -> list[tuple[int, ...]]:
    """Triple-wise annotation tasks over responses ``0..n-1``.

    ``circular`` (paper §3.2): the circularly adjacent triples (i, i+1, i+2 mod n); for
    n = 5 these five tasks cover all 10 pairs, for n > 5 only pairs at circular distance
    1 or 2. ``cover``: the circular triples plus, greedily, the triple that covers most
    uncovered pairs until every pair is covered. n = 2 gives one pair task, n < 2 none.
    """
    if design not in ("circular", "cover"):
        raise ValueError(f"unknown design {design!r} (use 'circular' or 'cover')")
    if n < 2:
        return []
    if n == 2:
        return [(0, 1)]
    tasks: list[tuple[int, ...]] = []
    seen: set[frozenset] = set()
    for i in range(n):
        t = (i, (i + 1) % n, (i + 2) % n)
        if frozenset(t) not in seen:
            seen.add(frozenset(t))
            tasks.append(t)
    if design == "cover":
        covered = {frozenset(p) for t in tasks for p in itertools.combinations(t, 2)}
        while len(covered) < n * (n - 1) // 2:
            best = max(itertools.combinations(range(n), 3),
                       key=lambda t: sum(frozenset(p) not in covered for p in itertools.combinations(t, 2)))
            tasks.append(best)
            covered.update(frozenset(p) for p in itertools.combinations(best, 2))
    return tasks


def annotation_tasks(prompts: list[Prompt], design: str = "circular", *,
                     seed: int | None = None) -> tuple[list[dict], list[float]]:
    """Task rows for annotators, and each prompt's pair coverage.

    One row per task: ``{task_id, prompt_id, round, prompt, category, subset, ids, responses,
    ranking: None}``; the annotator fills ``ranking`` (e.g. ``"r2>r1=r3"``) and the rows go
    back into `cheems rank`. With ``seed``, each prompt's responses are shuffled first.
    """
    rng = random.Random(seed)
    rows: list[dict] = []
    coverage: list[float] = []
    for p in prompts:
        order = list(p.responses)
        if seed is not None:
            rng.shuffle(order)
        tasks = triple_tasks(len(order), design)
        coverage.append(pair_coverage(len(order), tasks))
        for k, t in enumerate(tasks):
            chosen = [order[i] for i in t]
            rows.append({"task_id": f"{p.id}#{k + 1}", "prompt_id": p.id, "round": k + 1, "prompt": p.prompt,
                         "category": p.category, "subset": p.subset, "ids": [r.id for r in chosen],
                         "responses": [r.to_dict() for r in chosen], "ranking": None})
    return rows, coverage


def pair_coverage(n: int, tasks: list[tuple[int, ...]]) -> float:
    """Share of the n·(n-1)/2 response pairs that appear together in at least one task."""
    if n < 2:
        return 1.0
    covered = {frozenset(p) for t in tasks for p in itertools.combinations(t, 2)}
    return len(covered) / (n * (n - 1) // 2)
