"""The fast paths of cheems.graph against plain references: comparison_arrays (one dict of
ids, dense table or binary search) against per-prompt dictionaries, and resolve_arrays on
bit sets (with offsets) against the scipy path (without)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.graph import BLOCK_BITS, comparison_arrays, resolve_arrays
from cheems.records import Comparison, Prompt, Response


def arrays_plain(prompts):
    """comparison_arrays the plain way: one dictionary per prompt (a later repeated id wins)."""
    offsets, a, b, lab, owner, ids = [0], [], [], [], [], []
    for i, p in enumerate(prompts):
        index = {r.id: offsets[-1] + j for j, r in enumerate(p.responses)}
        ids += [r.id for r in p.responses]
        for c in p.comparisons:
            a.append(index[c.a])
            b.append(index[c.b])
            lab.append("gbs".index(c.label))
            owner.append(i)
        offsets.append(offsets[-1] + len(p.responses))
    return offsets, a, b, lab, owner, ids


@st.composite
def prompt_lists(draw):
    shared = draw(st.booleans())  # ids such as r0, r1 in every prompt, or ids of their own
    prompts = []
    for i in range(draw(st.integers(0, 6))):
        n = draw(st.integers(0, 6))
        ids = [f"r{j}" if shared else f"p{i}r{j}" for j in range(n)]
        if n and draw(st.integers(0, 9)) == 0:
            ids.append(ids[0])  # an id twice in one prompt
        comps = [Comparison(draw(st.sampled_from(ids)), draw(st.sampled_from(ids)), draw(st.sampled_from("gbs")))
                 for _ in range(draw(st.integers(0, 8)))] if ids else []
        prompts.append(Prompt(f"p{i}", "问题", [Response(r, "x") for r in ids], comparisons=comps))
    return prompts


def same_arrays(got, expected):
    assert [np.asarray(x).tolist() for x in got[:5]] == [list(x) for x in expected[:5]]
    assert got[5] == expected[5]


@settings(max_examples=300, deadline=None)
@given(prompt_lists())
def test_comparison_arrays_match_per_prompt_dicts(prompts):
    same_arrays(comparison_arrays(prompts), arrays_plain(prompts))


def test_comparison_arrays_binary_search_path():
    # 1,500 prompts with ids of their own: too many (prompt, id) keys for the dense table
    prompts = [Prompt(f"p{i}", "问题", [Response(f"p{i}a", "x"), Response(f"p{i}b", "y")],
                      comparisons=[Comparison(f"p{i}b", f"p{i}a", "gbs"[i % 3])]) for i in range(1500)]
    same_arrays(comparison_arrays(prompts), arrays_plain(prompts))
    prompts[7].comparisons.append(Comparison("p8a", "p7a", "g"))  # another prompt's response
    with pytest.raises(ValueError, match="unknown response"):
        comparison_arrays(prompts)


def test_comparison_arrays_unknown_response_and_label():
    p = Prompt("p", "问题", [Response("r0", "x"), Response("r1", "y")], comparisons=[Comparison("r0", "r9", "g")])
    with pytest.raises(ValueError, match="unknown response"):
        comparison_arrays([p])
    p.comparisons = [Comparison("r0", "r1", "x")]
    with pytest.raises(ValueError, match="labels must be validated"):
        comparison_arrays([p])


@st.composite
def block_graphs(draw):
    sizes = draw(st.lists(st.integers(0, 9), min_size=1, max_size=6))
    if draw(st.integers(0, 9)) == 0:
        sizes.append(draw(st.integers(BLOCK_BITS - 1, BLOCK_BITS + 2)))  # at the bit-set limit, or past it
    src, dst, off = [], [], 0
    for n in sizes:
        if n >= 2:
            pair = st.tuples(st.integers(off, off + n - 1), st.integers(off, off + n - 1))
            for u, v in draw(st.lists(pair, max_size=3 * n)):
                src.append(u)
                dst.append(v)
        off += n
    return np.cumsum([0] + sizes), np.array(src, np.int64), np.array(dst, np.int64)


@settings(max_examples=300, deadline=None)
@given(block_graphs())
def test_bit_sets_match_scipy(graph):
    offsets, src, dst = graph
    n = int(offsets[-1])
    rank, comp = resolve_arrays(n, src, dst, offsets)
    rank_ref, comp_ref = resolve_arrays(n, src, dst)
    assert rank.tolist() == rank_ref.tolist()
    assert sorted(set(comp.tolist())) == list(range(len(set(comp_ref.tolist()))))
    same = comp[:, None] == comp[None, :]
    assert (same == (comp_ref[:, None] == comp_ref[None, :])).all()
