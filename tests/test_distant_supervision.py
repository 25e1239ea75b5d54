"""cheems.curation.distant_supervision against a plain per-prompt networkx reference,
hand-checked examples and the messages of bad input."""

from __future__ import annotations

import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.curation.distant_supervision import REASONS, distant_supervision
from cheems.graph import resolve_conflicts
from cheems.records import CheemsInputError, Comparison, Prompt, Response

CATEGORIES = [["理解", "阅读"], ["推理"], ["代码", "调试"], []]


# ----------------------------------------------------------------------------- plain reference

def edges(a: str, b: str, label: str) -> list[tuple[str, str]]:
    """Better -> worse edges of one comparison, ties both ways (as cheems.graph builds them)."""
    return {"g": [(a, b)], "b": [(b, a)], "s": [(a, b), (b, a)]}[label]


def components(ids: list[str], comps: list[tuple[str, str, str]]) -> tuple[dict[str, int], set[int]]:
    """SCC number of each response, and the SCCs that hold a strict comparison (conflicts)."""
    g = nx.DiGraph()
    g.add_nodes_from(ids)
    for a, b, label in comps:
        g.add_edges_from(edges(a, b, label))
    comp = {rid: k for k, members in enumerate(nx.strongly_connected_components(g)) for rid in members}
    conflicting = {comp[a] for a, b, label in comps if label != "s" and comp[a] == comp[b]}
    return comp, conflicting


def chosen_rejected(a: str, b: str, label: str) -> tuple[str, str]:
    return (b, a) if label == "b" else (a, b)


def reference_reasons(ids, comps, score, scope, margin) -> list[str | None]:
    """Why each comparison of one prompt is dropped (None: kept), one comparison at a time."""
    reasons: list[str | None] = [None] * len(comps)
    if scope == "all":
        for k, (a, b, label) in enumerate(comps):
            if label == "s":
                contradicted = abs(score[a] - score[b]) > margin
            else:
                chosen, rejected = chosen_rejected(a, b, label)
                contradicted = score[rejected] - score[chosen] > margin
            if contradicted:
                reasons[k] = "rm_contradicts_margin"
    alive = [c for c, r in zip(comps, reasons) if r is None]
    comp, conflicting = components(ids, alive)
    for k, (a, b, label) in enumerate(comps):
        if reasons[k] is not None or comp[a] != comp[b] or comp[a] not in conflicting:
            continue
        if label == "s":
            if score[a] != score[b]:
                reasons[k] = "tie_in_cycle"
        else:
            chosen, rejected = chosen_rejected(a, b, label)
            if not score[chosen] > score[rejected]:
                reasons[k] = "rm_disagrees_in_cycle"
    return reasons


def has_conflict(ids, comps) -> bool:
    return bool(components(ids, comps)[1])


# ----------------------------------------------------------------------------- generated data

@st.composite
def prompt_specs(draw):
    """One prompt: response ids, judge comparisons (some pairs in both orders, some explicit
    cycles, some repeats) and RM scores that are often exactly equal."""
    n = draw(st.integers(1, 7))
    ids = draw(st.permutations([f"r{k}" for k in range(n)]))
    comps: list[tuple[str, str, str]] = []
    if n >= 2:
        pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda t: t[0] != t[1])
        raw = draw(st.lists(st.tuples(pair, st.sampled_from("gbs")), max_size=3 * n))
        comps = [(ids[i], ids[j], lab) for (i, j), lab in raw]
        if comps and draw(st.booleans()):  # the judge asked again with the order swapped
            again = draw(st.lists(st.sampled_from(comps), max_size=len(comps)))
            comps += [(b, a, draw(st.sampled_from("gbs"))) for a, b, _ in again]
        if draw(st.booleans()):  # an explicit strict cycle
            k = draw(st.integers(2, n))
            members = draw(st.permutations(ids))[:k]
            comps += [(members[t], members[(t + 1) % k], "g") for t in range(k)]
        comps = draw(st.permutations(comps))
    grades = st.integers(-2, 2).map(float)  # a coarse RM: equal scores are common
    fine = st.floats(-3, 3, allow_nan=False, allow_infinity=False)
    value = draw(st.sampled_from([grades, fine]))
    score = {rid: draw(value) for rid in ids}
    category = draw(st.sampled_from(CATEGORIES))
    return ids, comps, score, category


prompt_lists = st.lists(prompt_specs(), min_size=1, max_size=5)
margins = st.one_of(st.sampled_from([0.0, 0.5, 1.0, math.inf]), st.floats(0, 4, allow_nan=False))


def build(specs, *, old_dropped: bool = False) -> tuple[list[Prompt], dict]:
    prompts, scores = [], {}
    for i, (ids, comps, score, category) in enumerate(specs):
        pid = f"p{i}"
        extra = {"judge": "gpt-4o"}
        if old_dropped:
            extra["dropped_comparisons"] = [{"a": ids[0], "b": ids[0], "label": "g", "dropped": "earlier"}]
        prompts.append(Prompt(pid, f"问题 {pid}", [Response(r, f"回答 {r}") for r in ids],
                              comparisons=[Comparison(a, b, lab, annotator="judge", extra={"k": k})
                                           for k, (a, b, lab) in enumerate(comps)],
                              category=list(category), subset="open", extra=extra))
        scores.update({(pid, r): s for r, s in score.items()})
    return prompts, scores


def triples(p: Prompt) -> list[tuple[str, str, str]]:
    return [(c.a, c.b, c.label) for c in p.comparisons]


# ----------------------------------------------------------------------------- properties

@settings(max_examples=100, deadline=None)
@given(prompt_lists, st.sampled_from(["cycles", "all"]), margins)
def test_matches_plain_reference(specs, scope, margin):
    prompts, scores = build(specs)
    res = distant_supervision(prompts, scores, scope=scope, margin=margin)
    assert [p.id for p in res.prompts] == [p.id for p in prompts]
    for p, q, (ids, comps, score, _) in zip(prompts, res.prompts, specs):
        reasons = reference_reasons(ids, comps, score, scope, margin)
        assert q.comparisons == [c for c, r in zip(p.comparisons, reasons) if r is None], (ids, comps, score)
        assert [d["dropped"] for d in q.extra.get("dropped_comparisons", [])] == [r for r in reasons if r]


@settings(max_examples=100, deadline=None)
@given(prompt_lists, st.sampled_from(["cycles", "all"]), margins)
def test_result_has_no_conflicts(specs, scope, margin):
    prompts, scores = build(specs)
    res = distant_supervision(prompts, scores, scope=scope, margin=margin)
    for q in res.prompts:
        assert not has_conflict(q.response_ids(), triples(q))
    assert int(resolve_conflicts(res.prompts).n_conflicts.sum()) == 0
    rep = res.report()["total"]
    assert rep["prompts_with_conflicts_after"] == 0
    assert rep["prompts_with_conflicts_before"] == sum(has_conflict(p.response_ids(), triples(p)) for p in prompts)


@settings(max_examples=90, deadline=None)
@given(prompt_lists)
def test_cycles_scope_touches_only_conflicts_and_keeps_what_the_rm_agrees_with(specs):
    prompts, scores = build(specs)
    res = distant_supervision(prompts, scores)
    for p, q, (ids, comps, score, _) in zip(prompts, res.prompts, specs):
        comp, conflicting = components(ids, comps)
        kept = {id(c) for c in q.comparisons}
        for c in p.comparisons:
            inside = comp[c.a] == comp[c.b] and comp[c.a] in conflicting
            if not inside:
                assert id(c) in kept  # outside a conflict nothing changes
            elif id(c) in kept:
                if c.label == "s":
                    assert score[c.a] == score[c.b]
                else:
                    chosen, rejected = chosen_rejected(c.a, c.b, c.label)
                    assert score[chosen] > score[rejected]


@settings(max_examples=90, deadline=None)
@given(prompt_lists, st.sampled_from(["cycles", "all"]), margins)
def test_kept_and_dropped_make_up_the_input(specs, scope, margin):
    prompts, scores = build(specs, old_dropped=True)
    before = [p.to_dict() for p in prompts]
    res = distant_supervision(prompts, scores, scope=scope, margin=margin)
    assert [p.to_dict() for p in prompts] == before  # the input is left as it was
    for p, q in zip(prompts, res.prompts):
        dropped = q.extra["dropped_comparisons"]
        assert dropped[0] == p.extra["dropped_comparisons"][0]  # earlier entries stay first
        new = dropped[1:]
        assert all(d["dropped"] in REASONS for d in new)
        kept_rows = [c.to_dict() for c in q.comparisons]
        dropped_rows = [{k: v for k, v in d.items() if k != "dropped"} for d in new]
        # every comparison is either kept or dropped, in input order (extra "k" numbers them)
        assert sorted(kept_rows + dropped_rows, key=lambda d: d["k"]) == [c.to_dict() for c in p.comparisons]
        assert (q.id, q.responses, q.category, q.subset, q.rank) == (p.id, p.responses, p.category, p.subset, p.rank)
        assert q.extra["judge"] == "gpt-4o"


@settings(max_examples=60, deadline=None)
@given(prompt_lists)
def test_scope_all_with_huge_margin_is_cycles(specs):
    prompts, scores = build(specs)
    cycles = distant_supervision(prompts, scores)
    for margin in (math.inf, 1e9):
        wide = distant_supervision(prompts, scores, scope="all", margin=margin)
        assert [q.comparisons for q in wide.prompts] == [q.comparisons for q in cycles.prompts]
        assert [q.extra for q in wide.prompts] == [q.extra for q in cycles.prompts]


@settings(max_examples=60, deadline=None)
@given(prompt_lists)
def test_scope_all_with_zero_margin_keeps_nothing_the_rm_contradicts(specs):
    prompts, scores = build(specs)
    res = distant_supervision(prompts, scores, scope="all", margin=0.0)
    for q, (_, _, score, _) in zip(res.prompts, specs):
        for c in q.comparisons:
            if c.label == "s":
                assert score[c.a] == score[c.b]
            else:
                chosen, rejected = chosen_rejected(c.a, c.b, c.label)
                assert score[chosen] >= score[rejected]


@settings(max_examples=80, deadline=None)
@given(prompt_lists, st.sampled_from(["cycles", "all"]), margins)
def test_report_counts_add_up(specs, scope, margin):
    prompts, scores = build(specs)
    res = distant_supervision(prompts, scores, scope=scope, margin=margin)
    rep = res.report()
    total = rep["total"]
    assert total["prompts"] == len(prompts)
    assert total["comparisons"] == sum(len(p.comparisons) for p in prompts)
    assert total["kept"] == sum(len(q.comparisons) for q in res.prompts)
    assert total["kept"] + total["dropped"] == total["comparisons"]
    assert sum(total["dropped_by_reason"].values()) == total["dropped"]
    if scope == "cycles":
        assert total["dropped_by_reason"]["rm_contradicts_margin"] == 0
    assert total["prompts_changed"] == sum(len(q.comparisons) < len(p.comparisons)
                                           for p, q in zip(prompts, res.prompts))
    # judge-RM agreement over every strict comparison of the input
    strict = agree = 0
    per_cat: dict[str, list[int]] = {}
    for p, (_, comps, score, _) in zip(prompts, specs):
        counts = per_cat.setdefault(p.main_category, [0, 0])
        for a, b, label in comps:
            if label == "s":
                continue
            chosen, rejected = chosen_rejected(a, b, label)
            ok = score[chosen] > score[rejected]
            strict, agree = strict + 1, agree + ok
            counts[0] += 1
            counts[1] += ok
    assert total["strict_comparisons"] == strict
    assert total["judge_rm_agreement"] == (pytest.approx(agree / strict) if strict else None)
    assert set(rep["by_category"]) == set(per_cat)
    for name, (n_strict, n_agree) in per_cat.items():
        cat = rep["by_category"][name]
        assert cat["strict_comparisons"] == n_strict
        assert cat["judge_rm_agreement"] == (pytest.approx(n_agree / n_strict) if n_strict else None)
    for key in ("prompts", "comparisons", "kept", "dropped", "prompts_with_conflicts_before",
                "prompts_with_conflicts_after", "prompts_changed", "strict_comparisons"):
        assert sum(cat[key] for cat in rep["by_category"].values()) == total[key]
    for reason in REASONS:
        assert sum(cat["dropped_by_reason"][reason] for cat in rep["by_category"].values()) == \
            total["dropped_by_reason"][reason]


# ----------------------------------------------------------------------------- hand-checked examples

def one_prompt(comps, score, pid="q1", category=("写作",)):
    ids = sorted({r for a, b, _ in comps for r in (a, b)} | set(score))
    p = Prompt(pid, "写一首诗", [Response(r, f"诗 {r}") for r in ids],
               comparisons=[Comparison(a, b, lab) for a, b, lab in comps], category=list(category))
    return p, {(pid, r): s for r, s in score.items()}


def test_figure_3_cycle_is_cut_where_the_rm_disagrees():
    # a > b > c > a is a conflict; d is below all of them and stays untouched
    comps = [("a", "b", "g"), ("b", "c", "g"), ("a", "c", "b"), ("a", "d", "g"), ("d", "c", "b")]
    p, scores = one_prompt(comps, {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0})
    res = distant_supervision([p], scores)
    q = res.prompts[0]
    assert triples(q) == [("a", "b", "g"), ("b", "c", "g"), ("a", "d", "g"), ("d", "c", "b")]
    assert q.extra["dropped_comparisons"] == [{"a": "a", "b": "c", "label": "b", "dropped": "rm_disagrees_in_cycle"}]
    assert resolve_conflicts([q]).ranks[0] == {"a": 0, "b": 1, "c": 2, "d": 3}
    total = res.report()["total"]
    assert (total["comparisons"], total["kept"], total["dropped"]) == (5, 4, 1)
    assert total["judge_rm_agreement"] == pytest.approx(4 / 5)
    assert (total["prompts_with_conflicts_before"], total["prompts_with_conflicts_after"]) == (1, 0)


def test_both_orders_keep_the_one_the_rm_agrees_with():
    comps = [("x", "y", "g"), ("y", "x", "g")]
    p, scores = one_prompt(comps, {"x": 0.1, "y": 0.7})
    q = distant_supervision([p], scores).prompts[0]
    assert triples(q) == [("y", "x", "g")]


def test_equal_rm_scores_agree_with_no_strict_label():
    comps = [("x", "y", "g"), ("y", "x", "g")]
    p, scores = one_prompt(comps, {"x": 0.5, "y": 0.5})
    q = distant_supervision([p], scores).prompts[0]
    assert q.comparisons == []
    assert [d["dropped"] for d in q.extra["dropped_comparisons"]] == ["rm_disagrees_in_cycle"] * 2


def test_tie_inside_a_conflict_is_kept_only_when_the_rm_scores_are_equal():
    # u = v contradicts u > w > v; the RM puts u and v level, so the tie survives and u > w,
    # w > v cannot both stay
    comps = [("u", "v", "s"), ("u", "w", "g"), ("w", "v", "g")]
    p, scores = one_prompt(comps, {"u": 1.0, "v": 1.0, "w": 0.0})
    q = distant_supervision([p], scores).prompts[0]
    assert triples(q) == [("u", "v", "s"), ("u", "w", "g")]
    assert resolve_conflicts([q]).n_conflicts.sum() == 0
    p, scores = one_prompt(comps, {"u": 2.0, "v": 0.0, "w": 1.0})
    q = distant_supervision([p], scores).prompts[0]
    assert triples(q) == [("u", "w", "g"), ("w", "v", "g")]
    assert q.extra["dropped_comparisons"][0]["dropped"] == "tie_in_cycle"


def test_tie_groups_are_not_conflicts():
    comps = [("u", "v", "s"), ("v", "w", "s"), ("u", "z", "g")]
    p, scores = one_prompt(comps, {"u": 0.0, "v": 5.0, "w": -5.0, "z": 9.0})
    res = distant_supervision([p], scores)
    assert res.prompts[0].comparisons == p.comparisons
    assert res.report()["total"]["prompts_with_conflicts_before"] == 0


def test_scope_all_drops_contradicted_labels_beyond_the_margin():
    comps = [("a", "b", "g"), ("b", "c", "g"), ("c", "d", "s")]
    p, scores = one_prompt(comps, {"a": 1.0, "b": 1.4, "c": 0.0, "d": 0.3})
    res = distant_supervision([p], scores, scope="all", margin=0.35)
    q = res.prompts[0]
    assert triples(q) == [("b", "c", "g"), ("c", "d", "s")]
    assert q.extra["dropped_comparisons"][0]["dropped"] == "rm_contradicts_margin"
    assert res.report()["total"]["dropped_by_reason"]["rm_contradicts_margin"] == 1
    q = distant_supervision([p], scores, scope="all", margin=0.2).prompts[0]
    assert triples(q) == [("b", "c", "g")]


def test_comparison_provenance_and_prompt_fields_are_kept():
    comps = [("a", "b", "g"), ("b", "a", "g")]
    p, scores = one_prompt(comps, {"a": 1.0, "b": 0.0})
    p.comparisons[0].annotator = "gpt-4o"
    p.comparisons[0].extra = {"raw": "A 更好"}
    p.comparisons[1].source = "swapped"
    p.subset, p.extra = "human", {"batch": 3}
    q = distant_supervision([p], scores).prompts[0]
    assert q.comparisons == [p.comparisons[0]] and q.comparisons[0].extra == {"raw": "A 更好"}
    assert q.extra == {"batch": 3, "dropped_comparisons": [
        {"a": "b", "b": "a", "label": "g", "source": "swapped", "dropped": "rm_disagrees_in_cycle"}]}
    assert (q.subset, q.category, q.response_ids()) == ("human", ["写作"], ["a", "b"])


def test_no_prompts_and_no_comparisons():
    res = distant_supervision([], {})
    assert res.prompts == []
    assert res.report()["total"]["comparisons"] == 0
    assert res.report()["total"]["judge_rm_agreement"] is None
    p = Prompt("lonely", "问", [Response("r", "答")])
    res = distant_supervision([p], {})  # an uncompared response needs no score
    assert res.prompts[0].comparisons == [] and res.prompts[0].extra == {}


# ----------------------------------------------------------------------------- bad input

def test_missing_score_names_prompt_and_response():
    p, scores = one_prompt([("a", "b", "g"), ("b", "c", "g")], {"a": 1.0, "b": 0.5, "c": 0.0}, pid="问题-7")
    del scores[("问题-7", "c")]
    with pytest.raises(CheemsInputError) as err:
        distant_supervision([p], scores)
    assert "'问题-7'" in str(err.value) and "'c'" in str(err.value)
    assert err.value.field == "score"


def test_bad_scope_and_margin():
    p, scores = one_prompt([("a", "b", "g")], {"a": 1.0, "b": 0.0})
    with pytest.raises(CheemsInputError, match="cycles, all") as err:
        distant_supervision([p], scores, scope="everything")
    assert err.value.field == "scope"
    for bad in (-0.1, math.nan, "1"):
        with pytest.raises(CheemsInputError, match=">= 0") as err:
            distant_supervision([p], scores, scope="all", margin=bad)
        assert err.value.field == "margin"


def test_bad_comparison_is_located():
    p, scores = one_prompt([("a", "b", "g")], {"a": 1.0, "b": 0.0})
    p.comparisons.append(Comparison("a", "ghost", "g"))
    with pytest.raises(CheemsInputError, match="unknown response 'ghost'") as err:
        distant_supervision([p], scores)
    assert err.value.field == "comparisons[1].b"
    p.comparisons[1] = Comparison("a", "b", "x")
    with pytest.raises(CheemsInputError, match="label") as err:
        distant_supervision([p], scores)
    assert err.value.field == "comparisons[1].label"
