"""The statistics `eval` adds beside Accuracy and Exact Match: the official evaluator's
calibration error, per-prompt Kendall tau-b, the length diagnostic and the per-prompt items."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings, strategies as st
from scipy.stats import kendalltau

from cheems.metrics import calibration_error, evaluate, kendall_taus, pair_scores, prompt_items
from cheems.records import Prompt, Response


def reference_ece(chosen: list[float], rejected: list[float], n_bins: int = 5) -> float | None:
    """The official definition written out one pair at a time: |d| binned in n_bins equal
    widths of [0, max|d|) (half-open, so the max itself is in no bin), a pair right when
    d >= 0, each bin's |accuracy - sigmoid(mean |d|)| weighted by its count."""
    d = [c - r for c, r in zip(chosen, rejected)]
    if not d:
        return None
    top = max(abs(x) for x in d)
    step = top / n_bins
    num, den = 0.0, 0
    for i in range(n_bins):
        members = [x for x in d if i * step <= abs(x) < (i + 1) * step]
        if members:
            acc = sum(x >= 0 for x in members) / len(members)
            mean = sum(abs(x) for x in members) / len(members)
            num += abs(acc - 1 / (1 + math.exp(-mean))) * len(members)
            den += len(members)
    return num / den if den else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-6, 6), st.integers(-6, 6)), max_size=60), st.integers(1, 8))
def test_ece_equals_the_official_definition(pairs, n_bins):
    chosen = [a / 2 for a, _ in pairs]
    rejected = [b / 2 for _, b in pairs]
    got = calibration_error(np.array(chosen), np.array(rejected), n_bins)
    want = reference_ece(chosen, rejected, n_bins)
    assert (got is None and want is None) or abs(got - want) < 1e-12


def bench() -> tuple[list[Prompt], dict]:
    p1 = Prompt("p1", "问", [Response("a", "短"), Response("b", "长一些的回答"), Response("c", "最长最长最长的回答")],
                rank={"a": 0, "b": 1, "c": 2}, category=["数学"], subset="open")
    p2 = Prompt("p2", "问", [Response("a", "一"), Response("b", "二二")], rank={"a": 0, "b": 1}, category=["代码"],
                subset="open")
    scores = {("p1", "a"): 3.0, ("p1", "b"): 2.0, ("p1", "c"): 2.0, ("p2", "a"): 0.0, ("p2", "b"): 1.0}
    return [p1, p2], scores


def test_kendall_tau_items_and_length_in_the_report():
    prompts, scores = bench()
    taus = kendall_taus(prompts, scores)
    assert math.isclose(taus[0], kendalltau([0, -1, -2], [3, 2, 2], variant="b").statistic)
    assert taus[1] == -1.0
    report = evaluate(prompts, scores, n_bootstrap=0)["subsets"]["open"]
    assert math.isclose(report["kendall_tau_b"], (taus[0] + taus[1]) / 2)
    # the better is shorter in every pair here: a -> b, a -> c, b -> c and p2's a -> b
    assert report["length"]["better_longer"] == {"pairs": 0, "accuracy": None}
    assert report["length"]["better_shorter"]["pairs"] == 4
    items = prompt_items(prompts, pair_scores(prompts, scores))
    assert items[0]["pairs"] == [["a", "b", "right"], ["a", "c", "right"], ["b", "c", "tied"]]
    assert (items[0]["right"], items[0]["tied"], items[1]["reversed"]) == (2, 1, 1)
