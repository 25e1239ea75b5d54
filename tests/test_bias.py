"""Annotator bias tables and plots (paper Appendix D.3) against plain references."""

from __future__ import annotations

import math
import sys
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from cheems.curation.bias import (DEFAULT_BINS, analyze_bias, bias_table, format_bias_table, length_bins,
                                  plot_bias, wilson_interval)
from cheems.records import CheemsInputError, Comparison, Prompt, Response

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- reference

def plain_length(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


def reference_bin(d: int, edges: tuple) -> str:
    """The label of the bin holding ``d``, found by testing each interval in turn."""
    if d <= -edges[-1]:
        return f"(-inf, {-edges[-1]}]"
    for lo, hi in zip(edges[1:][::-1], edges[:-1][::-1]):  # (-hi_edge, -lo_edge]
        if -lo < d <= -hi:
            return f"({-lo}, {-hi}]"
    if -edges[0] < d < edges[0]:
        return f"({-edges[0]}, {edges[0]})"
    for lo, hi in zip(edges[:-1], edges[1:]):
        if lo <= d < hi:
            return f"[{lo}, {hi})"
    assert d >= edges[-1]
    return f"[{edges[-1]}, inf)"


def reference_table(prompts: list[Prompt], edges: tuple) -> dict:
    """{bin label: [n, a, b, tie]}, and overall [a, b, tie], and (longer won, unequal strict)."""
    bins: dict[str, list[int]] = {}
    overall = [0, 0, 0]
    longer = unequal = 0
    for p in prompts:
        content = {r.id: r.content for r in p.responses}
        for c in p.comparisons:
            d = plain_length(content[c.a]) - plain_length(content[c.b])
            row = bins.setdefault(reference_bin(d, edges), [0, 0, 0, 0])
            row[0] += 1
            k = "gbs".index(c.label)
            row[1 + k] += 1
            overall[k] += 1
            if c.label != "s" and d != 0:
                unequal += 1
                if (c.label == "g" and d > 0) or (c.label == "b" and d < 0):
                    longer += 1
    return {"bins": bins, "overall": overall, "longer": longer, "unequal": unequal}


def direct_wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    lower = (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    upper = (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    return max(0.0, lower), min(1.0, upper)


# ----------------------------------------------------------------------------- strategies

@st.composite
def annotated_prompts(draw) -> list[Prompt]:
    out = []
    for i in range(draw(st.integers(0, 6))):
        n = draw(st.integers(2, 4))
        # lengths up to ~700 so every default bin can be reached; whitespace must not count
        responses = []
        for k in range(n):
            length = draw(st.integers(0, 700))
            spaces = draw(st.integers(0, 5))
            responses.append(Response(f"r{k}", "好" * length + " \n" * spaces))
        pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.sampled_from("gbs")),
                              max_size=10))
        comparisons = [Comparison(f"r{a}", f"r{b}", label) for a, b, label in pairs if a != b]
        out.append(Prompt(f"p{i}", "比较两段回答。", responses, comparisons=comparisons))
    return out


EDGES = st.sampled_from([DEFAULT_BINS, (100,), (10, 20), (1, 2, 3, 300)])
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- bins

def test_default_bins_are_symmetric():
    assert [b["bin"] for b in length_bins()] == ["(-inf, -500]", "(-500, -200]", "(-200, -50]", "(-50, 50)",
                                                 "[50, 200)", "[200, 500)", "[500, inf)"]
    bins = length_bins((100, 300))
    assert [(b["low"], b["high"]) for b in bins] == [(None, -300), (-300, -100), (-100, 100), (100, 300),
                                                     (300, None)]


@pytest.mark.parametrize("bins, message", [
    ((), "at least one edge"),
    ((50, 50), "increase strictly"),
    ((200, 50), "increase strictly"),
    ((0, 50), "positive finite"),
    ((-50,), "positive finite"),
    ((float("nan"),), "positive finite"),
    (("五十",), "positive finite"),
    (50, "list of positive edges"),
])
def test_bad_bins(bins, message):
    with pytest.raises(CheemsInputError, match=message) as e:
        bias_table([], bins=bins)
    assert e.value.field == "bins"


# ----------------------------------------------------------------------------- table vs reference

@FAST
@given(annotated_prompts(), EDGES)
def test_table_matches_brute_force(prompts, edges):
    t = bias_table(prompts, bins=edges)
    ref = reference_table(prompts, edges)
    assert t["n_prompts"] == len(prompts)
    assert t["n"] == sum(ref["overall"])
    assert len(t["by_length"]) == 2 * len(edges) + 1
    assert sum(r["n"] for r in t["by_length"]) == t["n"]
    for r in t["by_length"]:
        n, a, b, tie = ref["bins"].get(r["bin"], [0, 0, 0, 0])
        assert (r["n"], r["a"], r["b"], r["tie"]) == (n, a, b, tie)
        if n:
            assert r["p_a"] == pytest.approx(a / n)
            assert r["p_b"] == pytest.approx(b / n)
            assert r["p_tie"] == pytest.approx(tie / n)
            lo, hi = r["p_a_ci"]
            assert lo <= r["p_a"] <= hi
            assert (lo, hi) == pytest.approx(direct_wilson(a, n))
        else:
            assert r["p_a"] is r["p_b"] is r["p_tie"] is r["p_a_ci"] is None
    a, b, tie = ref["overall"]
    pos = t["by_position"]
    assert (pos["n"], pos["a"], pos["b"], pos["tie"], pos["n_strict"]) == (a + b + tie, a, b, tie, a + b)
    if a + b:
        assert pos["p_a_strict"] == pytest.approx(a / (a + b))
        assert pos["p_value"] == pytest.approx(binomtest(a, a + b, 0.5).pvalue)
        assert 0 <= pos["p_value"] <= 1
    else:
        assert pos["p_a_strict"] is pos["p_value"] is pos["p_a_strict_ci"] is None
    lw = t["longer_won"]
    assert (lw["longer"], lw["n"]) == (ref["longer"], ref["unequal"])
    assert lw["n"] + lw["equal_length"] == a + b


def test_worked_example():
    responses = [Response("短", "好" * 10), Response("长", "好" * 310), Response("中", "好" * 80)]
    comparisons = [
        Comparison("长", "短", "g"),  # d = 300: [200, 500), A chosen, longer won
        Comparison("长", "短", "b"),  # d = 300: B chosen, shorter won
        Comparison("短", "长", "b"),  # d = -300: (-500, -200], B chosen, longer won
        Comparison("中", "短", "s"),  # d = 70: [50, 200), tie
        Comparison("短", "中", "g"),  # d = -70: (-200, -50], A chosen, shorter won
    ]
    t = bias_table([Prompt("甲", "写一段介绍。", responses, comparisons=comparisons)])
    rows = {r["bin"]: r for r in t["by_length"]}
    assert rows["[200, 500)"]["n"] == 2 and rows["[200, 500)"]["p_a"] == 0.5
    assert rows["(-500, -200]"]["p_b"] == 1.0
    assert rows["[50, 200)"]["p_tie"] == 1.0
    assert rows["(-200, -50]"]["p_a"] == 1.0
    assert rows["(-50, 50)"]["n"] == 0 and rows["(-50, 50)"]["p_a"] is None
    assert t["by_position"]["p_a"] == pytest.approx(2 / 5)
    assert t["by_position"]["p_a_strict"] == 0.5 and t["by_position"]["p_value"] == 1.0
    assert t["longer_won"] == {"n": 4, "longer": 2, "share": 0.5, "share_ci": pytest.approx(direct_wilson(2, 4)),
                               "p_value": 1.0, "equal_length": 0}


def test_no_data_gives_empty_rows_not_errors():
    empty = Prompt("甲", "你好", [Response("r0", "你好呀")])
    t = bias_table([empty])
    assert t["n"] == 0 and t["n_prompts"] == 1
    for r in t["by_length"]:
        assert r["n"] == 0 and r["p_a"] is None and r["p_a_ci"] is None
    pos = t["by_position"]
    assert pos["n"] == 0 and pos["p_a"] is pos["p_value"] is pos["p_a_strict"] is None
    assert t["longer_won"]["share"] is None and t["longer_won"]["p_value"] is None
    text = format_bias_table({"人工": t})
    assert "人工" in text and "(-50, 50)" in text


def test_ranked_prompts_without_comparisons_add_nothing():
    p = Prompt("甲", "你好", [Response("r0", "好"), Response("r1", "好好")], rank={"r0": 0, "r1": 1})
    assert bias_table([p])["n"] == 0


def test_unknown_response_and_label_are_named():
    p = Prompt("甲", "你好", [Response("r0", "好"), Response("r1", "好好")],
               comparisons=[Comparison("r0", "r1", "g"), Comparison("r0", "r7", "g")])
    with pytest.raises(CheemsInputError, match="unknown response 'r7'") as e:
        bias_table([p])
    assert e.value.field == "comparisons[1].b"
    p.comparisons = [Comparison("r0", "r1", "?")]
    with pytest.raises(CheemsInputError, match="label must be one of g, b, s") as e:
        bias_table([p])
    assert e.value.field == "comparisons[0].label"


# ----------------------------------------------------------------------------- statistics

@given(st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_matches_the_formula_and_scipy(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    assert (lo, hi) == pytest.approx(direct_wilson(k, n), abs=1e-12)
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert 0 <= lo <= k / n <= hi <= 1


def test_wilson_interval_known_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 0) is None


def test_position_p_value_sanity():
    def table(n_a: int, n_b: int) -> dict:
        responses = [Response("r0", "甲乙"), Response("r1", "丙丁")]
        comparisons = [Comparison("r0", "r1", "g")] * n_a + [Comparison("r0", "r1", "b")] * n_b
        return bias_table([Prompt("甲", "问", responses, comparisons=comparisons)])["by_position"]

    assert table(20, 20)["p_value"] == 1.0  # perfectly balanced
    assert table(30, 0)["p_value"] == pytest.approx(2 * 0.5 ** 30)  # all first: strongly biased
    assert table(0, 30)["p_value"] == pytest.approx(2 * 0.5 ** 30)
    assert table(12, 8)["p_value"] > 0.05  # no evidence either way
    assert table(70, 30)["p_value"] < 0.001
    assert table(70, 30)["p_a_strict_ci"][0] > 0.5


def test_analyze_bias_one_table_per_group():
    responses = [Response("r0", "好" * 100), Response("r1", "好")]
    human = [Prompt("甲", "问", responses, comparisons=[Comparison("r0", "r1", "g")])]
    judge = [Prompt("甲", "问", responses, comparisons=[Comparison("r0", "r1", "b")] * 3)]
    tables = analyze_bias({"human": human, "judge": judge}, bins=(30,))
    assert list(tables) == ["human", "judge"]
    assert tables["human"]["by_position"]["p_a"] == 1.0 and tables["judge"]["by_position"]["p_b"] == 1.0
    assert tables["judge"]["bins"] == [30]
    with pytest.raises(CheemsInputError, match="no annotation groups"):
        analyze_bias({})


# ----------------------------------------------------------------------------- plots and text

def sample_tables() -> dict:
    responses = [Response(f"r{i}", "好" * n + "\n") for i, n in enumerate([5, 60, 260, 700])]
    human, judge = [], []
    for i in range(4):
        for j in range(4):
            if i != j:
                human.append(Comparison(f"r{i}", f"r{j}", "gbs"[(i + j) % 3]))
                judge.append(Comparison(f"r{i}", f"r{j}", "b" if (i * j) % 2 else "g"))
    return analyze_bias({"human": [Prompt("甲", "写一篇短文。", responses, comparisons=human)],
                         "judge": [Prompt("甲", "写一篇短文。", responses, comparisons=judge)],
                         "empty": []})


def test_plots_are_png_files(tmp_path):
    tables = sample_tables()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph or backend trouble would warn
        paths = plot_bias(tables, tmp_path / "图")
    assert [p.name for p in paths] == ["bias_length.png", "bias_position.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 10_000
    assert sorted(p.name for p in (tmp_path / "图").iterdir()) == ["bias_length.png", "bias_position.png"]
    # drawing again replaces the files in place
    assert plot_bias(tables, tmp_path / "图") == paths


def test_plot_legends_stand_beside_the_axes(tmp_path, monkeypatch):
    """No legend covers an axes (so none covers data), and the saved file holds the whole legend."""
    import cheems.curation.bias as bias

    drawn, save = [], bias._save_png
    monkeypatch.setattr(bias, "_save_png", lambda fig, path: (drawn.append(fig), save(fig, path)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plot_bias(sample_tables(), tmp_path)
    assert len(drawn) == 2
    for fig in drawn:
        renderer = fig.canvas.get_renderer()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert legends
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
            tight = fig.get_tightbbox(renderer)  # what bbox_inches="tight" saves (inches)
            assert box.x1 <= tight.x1 * fig.dpi + 1


def test_plots_refuse_mismatched_bins_and_nothing(tmp_path):
    tables = {"human": bias_table([]), "judge": bias_table([], bins=(10,))}
    with pytest.raises(CheemsInputError, match="other length bins"):
        plot_bias(tables, tmp_path)
    with pytest.raises(CheemsInputError, match="no bias tables"):
        plot_bias({}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_plots_without_matplotlib(tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.backends.backend_agg", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(CheemsInputError) as e:
        plot_bias(sample_tables(), tmp_path)
    assert str(e.value) == "plots need matplotlib: pip install 'cheems[plot]'"


def test_format_bias_table():
    text = format_bias_table(sample_tables())
    for needle in ("== human:", "== judge:", "== empty: 0 comparisons", "[500, inf)", "P(A|strict)",
                   "longer response won"):
        assert needle in text
    assert text.count("(-inf, -500]") == 3
