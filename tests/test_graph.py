"""cheems.graph against a networkx oracle, plus hand-checked examples and task design."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.graph import conflict_ratio, pair_coverage, resolve_arrays, resolve_conflicts, triple_tasks
from cheems.records import CheemsInputError, Comparison, Prompt, Response, triple_comparisons
from tests.reference import conflicts_plain, merged_kinds, resolve_networkx

SUBSETS = ["open", "human", None]


def make_prompt(pid: str, ids: list[str], comps: list[tuple[str, str, str]], subset=None) -> Prompt:
    return Prompt(pid, f"问题 {pid}", [Response(r, f"回答 {r}") for r in ids],
                  comparisons=[Comparison(a, b, lab) for a, b, lab in comps], subset=subset)


@st.composite
def prompt_specs(draw, max_responses: int = 9):
    """One prompt: shuffled response ids and random comparisons (duplicates, s-ties,
    contradictions and cycles all come up with few responses and many comparisons)."""
    n = draw(st.integers(1, max_responses))
    # ids in a random order so response-list order differs from any sorted order
    ids = draw(st.permutations([f"r{k}" for k in range(n)]))
    comps: list[tuple[str, str, str]] = []
    if n >= 2:
        pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda t: t[0] != t[1])
        raw = draw(st.lists(st.tuples(pair, st.sampled_from("gbs")), max_size=3 * n))
        comps = [(ids[i], ids[j], lab) for (i, j), lab in raw]
        if draw(st.booleans()):  # an explicit cycle through a few responses
            k = draw(st.integers(2, n))
            members = draw(st.permutations(ids))[:k]
            comps += [(members[t], members[(t + 1) % k], "g") for t in range(k)]
        if comps and draw(st.booleans()):  # repeat some comparisons verbatim
            comps += draw(st.lists(st.sampled_from(comps), max_size=4))
        comps = draw(st.permutations(comps))
    subset = draw(st.sampled_from(SUBSETS))
    return ids, comps, subset


prompt_lists = st.lists(prompt_specs(), min_size=1, max_size=6)


def build(specs) -> list[Prompt]:
    return [make_prompt(f"p{i}", ids, comps, subset) for i, (ids, comps, subset) in enumerate(specs)]


# ----------------------------------------------------------------------------- resolve_conflicts

@settings(max_examples=300, deadline=None)
@given(prompt_lists)
def test_resolve_conflicts_matches_networkx(specs):
    prompts = build(specs)
    res = resolve_conflicts(prompts)
    assert len(res.ranks) == len(prompts)
    for i, (ids, comps, _) in enumerate(specs):
        expected, merged = resolve_networkx(ids, comps)
        assert res.ranks[i] == expected, (ids, comps)
        assert list(res.ranks[i]) == ids  # keyed in response-list order, every response
        assert int(res.n_comparisons[i]) == len(comps)
        assert int(res.n_conflicts[i]) == conflicts_plain(comps, expected)
        cycles, ties = merged_kinds(ids, comps)
        assert cycles + ties == merged
        assert int(res.n_merged[i]) == cycles
        assert int(res.n_tie_groups[i]) == ties
        values = set(res.ranks[i].values())
        assert values == set(range(max(values) + 1))  # contiguous layers 0..k


@settings(max_examples=150, deadline=None)
@given(prompt_lists)
def test_report_and_conflict_ratio_match_reference(specs):
    prompts = build(specs)
    res = resolve_conflicts(prompts)
    oracle = [resolve_networkx(ids, comps) for ids, comps, _ in specs]

    expected: dict[str, dict] = {}
    for (ids, comps, subset), (rank, merged) in zip(specs, oracle):
        for key in (subset or "(none)", "total"):
            row = expected.setdefault(key, dict(prompts=0, comparisons=0, conflicts=0,
                                                merged_cycles=0, prompts_with_cycles=0,
                                                tie_groups=0, uncompared_responses=0))
            cycles, ties = merged_kinds(ids, comps)
            row["prompts"] += 1
            row["comparisons"] += len(comps)
            row["conflicts"] += conflicts_plain(comps, rank)
            row["merged_cycles"] += cycles
            row["prompts_with_cycles"] += cycles > 0
            row["tie_groups"] += ties
            named = {x for a, b, _ in comps for x in (a, b)}
            row["uncompared_responses"] += sum(r not in named for r in ids)
    for row in expected.values():
        row["conflict_ratio"] = row["conflicts"] / row["comparisons"] if row["comparisons"] else 0.0

    report = res.report(prompts)
    assert set(report) == set(expected)
    for key, row in expected.items():
        got = report[key]
        assert set(report[key]) == set(row)
        for field in ("prompts", "comparisons", "conflicts", "merged_cycles", "prompts_with_cycles",
                      "tie_groups", "uncompared_responses"):
            assert got[field] == row[field], (key, field)
        assert got["conflict_ratio"] == pytest.approx(row["conflict_ratio"], abs=1e-12)

    total = expected["total"]["conflict_ratio"]
    assert conflict_ratio(prompts, res.ranks) == pytest.approx(total, abs=1e-12)
    # conflict_ratio judged on the oracle's ranks, independently of resolve_conflicts
    assert conflict_ratio(prompts, [r for r, _ in oracle]) == pytest.approx(total, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(prompt_lists, st.data())
def test_conflict_ratio_on_arbitrary_ranks(specs, data):
    prompts = build(specs)
    ranks = [{rid: data.draw(st.integers(0, 3)) for rid in ids} for ids, _, _ in specs]
    n = sum(len(comps) for _, comps, _ in specs)
    wrong = sum(conflicts_plain(comps, r) for (_, comps, _), r in zip(specs, ranks))
    assert conflict_ratio(prompts, ranks) == pytest.approx(wrong / n if n else 0.0, abs=1e-12)


class ClashingId(str):
    """A response id whose hash collides with every other ClashingId of the same bucket,
    forcing the exact (dictionary) lookup of response ids."""

    def __hash__(self):
        return len(self) % 2


def check_against_oracle(prompts, specs):
    res = resolve_conflicts(prompts)
    for i, (ids, comps, _) in enumerate(specs):
        expected, merged = resolve_networkx(ids, comps)
        assert res.ranks[i] == expected
        assert int(res.n_conflicts[i]) == conflicts_plain(comps, expected)
        assert int(res.n_merged[i] + res.n_tie_groups[i]) == merged


@settings(max_examples=60, deadline=None)
@given(prompt_lists)
def test_resolve_conflicts_with_hash_collisions(specs):
    clashing = []
    for ids, comps, subset in specs:
        new = {r: ClashingId(r + "x" * k) for k, r in enumerate(ids)}  # equal hash for every 2nd id
        clashing.append(([new[r] for r in ids], [(new[a], new[b], lab) for a, b, lab in comps], subset))
    check_against_oracle(build(clashing), clashing)


@settings(max_examples=15, deadline=None)
@given(prompt_lists, st.integers(65, 90), st.data())
def test_resolve_conflicts_with_a_large_prompt(specs, n, data):
    # a prompt with more than 64 responses next to small ones
    ids = [f"big{k}" for k in range(n)]
    pair = st.tuples(st.sampled_from(ids), st.sampled_from(ids)).filter(lambda t: t[0] != t[1])
    comps = [(a, b, lab) for (a, b), lab in data.draw(st.lists(st.tuples(pair, st.sampled_from("gbs")),
                                                               max_size=150))]
    comps += [(ids[k], ids[k + 1], "g") for k in range(n - 1)]  # a long chain: many layers
    specs = specs[:1] + [(ids, comps, "big")] + specs[1:]
    check_against_oracle(build(specs), specs)


def test_long_chain_in_large_prompt():
    n = 100
    ids = [f"r{k}" for k in range(n)]
    p = make_prompt("p", ids[::-1], [(ids[k], ids[k + 1], "g") for k in range(n - 1)])
    res = resolve_conflicts([make_prompt("q", ["a", "b"], [("a", "b", "b")]), p])
    assert res.ranks[0] == {"a": 1, "b": 0}
    assert res.ranks[1] == {f"r{k}": k for k in range(n)}


def test_same_ids_differ_only_in_prompt():
    # ids repeated across prompts, one prompt's ids a permutation of another's
    p1 = make_prompt("p1", ["x", "y", "z"], [("x", "y", "g"), ("y", "z", "g")])
    p2 = make_prompt("p2", ["z", "y", "x"], [("x", "y", "g"), ("y", "z", "g")])
    res = resolve_conflicts([p1, p2])
    assert res.ranks[0] == res.ranks[1] == {"x": 0, "y": 1, "z": 2}


# ----------------------------------------------------------------------------- resolve_arrays

@st.composite
def edge_graphs(draw):
    """Several disjoint blocks of nodes; each block a random DAG, optionally with back
    edges that close cycles. Returns (n_nodes, src, dst)."""
    blocks = draw(st.lists(st.integers(1, 10), min_size=1, max_size=5))
    src: list[int] = []
    dst: list[int] = []
    off = 0
    for size in blocks:
        order = draw(st.permutations(range(off, off + size)))  # a hidden topological order
        if size >= 2:
            fwd = st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).filter(lambda t: t[0] < t[1])
            for i, j in draw(st.lists(fwd, max_size=2 * size)):
                src.append(order[i])
                dst.append(order[j])
            for i, j in draw(st.lists(fwd, max_size=2)):  # back edges: cycles
                src.append(order[j])
                dst.append(order[i])
        off += size
    perm = draw(st.permutations(range(len(src))))
    return off, [src[k] for k in perm], [dst[k] for k in perm]


@settings(max_examples=300, deadline=None)
@given(edge_graphs())
def test_resolve_arrays_matches_networkx(graph):
    n, src, dst = graph
    rank, comp = resolve_arrays(n, np.array(src, np.int64), np.array(dst, np.int64))
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src, dst))
    cond = nx.condensation(g)
    expected = [0] * n
    for layer, gen in enumerate(nx.topological_generations(cond)):
        for c in gen:
            for v in cond.nodes[c]["members"]:
                expected[v] = layer
    assert rank.tolist() == expected
    scc = cond.graph["mapping"]
    for u in range(n):
        for v in range(n):
            assert (comp[u] == comp[v]) == (scc[u] == scc[v])


def test_resolve_arrays_chain_and_dag():
    # 0 -> 1 -> 2 -> 3 and a shortcut 0 -> 3: the longest path decides, 3 is at layer 3
    rank, comp = resolve_arrays(5, np.array([0, 1, 2, 0]), np.array([1, 2, 3, 3]))
    assert rank.tolist() == [0, 1, 2, 3, 0]
    assert len(set(comp.tolist())) == 5
    # a 2-cycle above a node: {0, 1} merged at 0, 2 below at 1
    rank, comp = resolve_arrays(3, np.array([0, 1, 1]), np.array([1, 0, 2]))
    assert rank.tolist() == [0, 0, 1]
    assert comp[0] == comp[1] != comp[2]


def test_resolve_arrays_empty():
    rank, comp = resolve_arrays(0, np.array([], np.int64), np.array([], np.int64))
    assert len(rank) == 0 and len(comp) == 0
    rank, _ = resolve_arrays(3, np.array([], np.int64), np.array([], np.int64))
    assert rank.tolist() == [0, 0, 0]


# ----------------------------------------------------------------------------- hand examples

def test_five_responses_with_three_cycle():
    # r4 beats r1; r1 > r2 > r3 > r1 is a cycle; r2 > r5 and r4 > r5.
    # Condensed: r4 -> {r1, r2, r3} -> r5 and r4 -> r5; longest paths give
    # r4: 0, cycle: 1, r5: 2. The three cycle comparisons end tied: 3 conflicts of 6.
    comps = [("r1", "r2", "g"), ("r2", "r3", "g"), ("r1", "r3", "b"),
             ("r4", "r1", "g"), ("r5", "r2", "b"), ("r4", "r5", "g")]
    p = make_prompt("p", ["r1", "r2", "r3", "r4", "r5"], comps)
    res = resolve_conflicts([p])
    assert res.ranks == [{"r1": 1, "r2": 1, "r3": 1, "r4": 0, "r5": 2}]
    assert res.n_comparisons.tolist() == [6]
    assert res.n_conflicts.tolist() == [3]
    assert res.n_merged.tolist() == [1]
    assert res.n_tie_groups.tolist() == [0]
    assert conflict_ratio([p], res.ranks) == 0.5
    assert res.report([p])["total"]["conflict_ratio"] == 0.5


def test_same_label_ties_share_rank():
    p = make_prompt("p", ["a", "b", "c"], [("a", "b", "s"), ("c", "a", "b")])
    res = resolve_conflicts([p])
    assert res.ranks == [{"a": 0, "b": 0, "c": 1}]
    assert res.n_conflicts.tolist() == [0]
    # {a, b} is merged by a tie alone: a tie group, not a conflict cycle
    assert res.n_merged.tolist() == [0]
    assert res.n_tie_groups.tolist() == [1]
    # a = b = c by a chain of ties; d beats c and so, through the merged tie, all three
    p2 = make_prompt("p2", ["a", "b", "c", "d"], [("a", "b", "s"), ("b", "c", "s"), ("d", "c", "g")])
    res = resolve_conflicts([p2])
    assert res.ranks == [{"a": 1, "b": 1, "c": 1, "d": 0}]
    assert res.n_conflicts.tolist() == [0]
    assert res.n_merged.tolist() == [0]
    assert res.n_tie_groups.tolist() == [1]
    # a tie contradicted by a strict judgement inside the group makes it a conflict cycle
    p3 = make_prompt("p3", ["a", "b", "c"], [("a", "b", "s"), ("a", "b", "g"), ("c", "b", "g")])
    res = resolve_conflicts([p3])
    assert res.ranks == [{"a": 1, "b": 1, "c": 0}]
    assert res.n_conflicts.tolist() == [1]
    assert res.n_merged.tolist() == [1]
    assert res.n_tie_groups.tolist() == [0]


def test_uncompared_response_gets_rank_zero():
    p = make_prompt("p", ["x", "y", "z"], [("y", "x", "b")])
    res = resolve_conflicts([p])
    assert res.ranks == [{"x": 0, "y": 1, "z": 0}]
    q = make_prompt("q", ["only"], [])
    assert resolve_conflicts([q]).ranks == [{"only": 0}]


def test_prompts_are_independent_with_offsets():
    # identical ids in two prompts; the second prompt's ranks are not shifted by the first
    p1 = make_prompt("p1", ["a", "b", "c"], [("a", "b", "g"), ("b", "c", "g")])
    p2 = make_prompt("p2", ["c", "b", "a"], [("a", "b", "b")])
    p3 = make_prompt("p3", ["a", "b"], [])
    res = resolve_conflicts([p1, p2, p3])
    assert res.ranks == [{"a": 0, "b": 1, "c": 2}, {"c": 0, "b": 0, "a": 1}, {"a": 0, "b": 0}]
    assert res.n_comparisons.tolist() == [2, 1, 0]
    assert res.n_conflicts.tolist() == [0, 0, 0]
    assert res.n_merged.tolist() == [0, 0, 0]


def test_resolve_conflicts_empty_list():
    res = resolve_conflicts([])
    assert res.ranks == []
    assert res.report([])["total"] == {"prompts": 0, "comparisons": 0, "conflicts": 0,
                                       "conflict_ratio": 0.0, "merged_cycles": 0,
                                       "prompts_with_cycles": 0, "tie_groups": 0,
                                       "uncompared_responses": 0}
    assert conflict_ratio([], []) == 0.0


# ----------------------------------------------------------------------------- triple tasks

def all_pairs(n):
    return {frozenset(p) for p in itertools.combinations(range(n), 2)}


def covered_pairs(tasks):
    return {frozenset(p) for t in tasks for p in itertools.combinations(t, 2)}


def test_triple_tasks_five():
    tasks = triple_tasks(5)
    assert tasks == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]
    assert covered_pairs(tasks) == all_pairs(5)
    assert pair_coverage(5, tasks) == 1.0


@pytest.mark.parametrize("n", range(2, 13))
def test_triple_tasks_cover_and_circular(n):
    cover = triple_tasks(n, design="cover")
    assert covered_pairs(cover) == all_pairs(n)
    assert pair_coverage(n, cover) == 1.0

    circ = triple_tasks(n, design="circular")
    near = [(i, j) for i, j in itertools.combinations(range(n), 2) if min(j - i, n - (j - i)) <= 2]
    assert pair_coverage(n, circ) == pytest.approx(len(near) / (n * (n - 1) / 2))
    assert covered_pairs(circ) == {frozenset(p) for p in near}

    for t in cover + circ:
        assert len(set(t)) == len(t)
        assert all(0 <= x < n for x in t)
    # the circular triples come first in the cover design
    assert cover[:len(circ)] == circ


def test_triple_tasks_small_n():
    assert triple_tasks(3) == [(0, 1, 2)]
    assert triple_tasks(3, design="cover") == [(0, 1, 2)]
    assert triple_tasks(1) == [] and triple_tasks(0) == []
    assert triple_tasks(1, design="cover") == []


def test_triple_tasks_unknown_design():
    with pytest.raises(ValueError, match="unknown design"):
        triple_tasks(5, design="spiral")


def test_pair_coverage_partial():
    assert pair_coverage(4, [(0, 1, 2)]) == 0.5  # 3 of 6 pairs
    assert pair_coverage(4, []) == 0.0


# ----------------------------------------------------------------------------- triple comparisons

def test_triple_comparisons_expands_ranking():
    got = triple_comparisons(["x", "y", "z"], "x>z=y", annotator="ann")
    assert [(c.a, c.b, c.label) for c in got] == [("x", "y", "g"), ("x", "z", "g"), ("y", "z", "s")]
    assert all(c.annotator == "ann" and c.source == "triple" for c in got)
    got = triple_comparisons(["x", "y", "z"], "z > y > x")
    assert [(c.a, c.b, c.label) for c in got] == [("x", "y", "b"), ("x", "z", "b"), ("y", "z", "b")]


@pytest.mark.parametrize("ranking", ["x>y", "x>y>y", "x>>y=z", "", "   ", "x>y>z>w", "x=y=", None])
def test_triple_comparisons_malformed(ranking):
    with pytest.raises(CheemsInputError) as e:
        triple_comparisons(["x", "y", "z"], ranking, field_name="tasks[0].ranking")
    assert e.value.field == "tasks[0].ranking"
    assert str(e.value).startswith("tasks[0].ranking: ")


@st.composite
def block_graphs(draw):
    """Prompts of 1-70 nodes (past the 64 of a bit set now and then), random edges inside each,
    none between them. Returns (offsets, src, dst)."""
    sizes = draw(st.lists(st.one_of(st.integers(1, 8), st.integers(60, 70)), min_size=1, max_size=6))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    src: list[int] = []
    dst: list[int] = []
    for lo, size in zip(offsets[:-1].tolist(), sizes):
        node = st.integers(lo, lo + size - 1)
        for u, v in draw(st.lists(st.tuples(node, node), max_size=3 * size)):
            src.append(u)
            dst.append(v)
    return offsets, src, dst


@settings(max_examples=150, deadline=None)
@given(block_graphs())
def test_strong_components_of_prompts_match_networkx(graph):
    """With offsets (bit sets for prompts of at most 64 nodes, scipy past that) and without
    (scipy), the same partition into components as networkx."""
    from cheems.graph import strong_components

    offsets, src, dst = graph
    n = int(offsets[-1])
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src, dst))
    expected = {frozenset(c) for c in nx.strongly_connected_components(g)}
    for given_offsets in (offsets, None):
        comp = strong_components(n, np.array(src, np.int64), np.array(dst, np.int64), given_offsets)
        assert sorted(set(comp.tolist())) == list(range(len(expected)))
        found = {}
        for v, c in enumerate(comp.tolist()):
            found.setdefault(c, set()).add(v)
        assert {frozenset(c) for c in found.values()} == expected
