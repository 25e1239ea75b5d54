"""Paired statistics between two reward models and the correlation with downstream results:
McNemar against scipy's binomial test, Holm against its definition, the paired bootstrap seeded
and centred on the real difference, refusals of mismatched reports, and the CLI end to end."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import binomtest, kendalltau, pearsonr, spearmanr

from cheems.records import CheemsInputError
from cheems.report.compare import compare_reports, holm, mcnemar_exact, paired_bootstrap
from cheems.report.correlate import correlate
from tests.conftest import run_cli_in


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_the_binomial_test_of_the_discordant_pairs(a, b):
    want = 1.0 if a + b == 0 else binomtest(a, a + b, 0.5).pvalue
    assert mcnemar_exact(a, b) == pytest.approx(want)


def reference_holm(p: dict) -> dict:
    keys = sorted(p, key=p.get)
    m = len(keys)
    adjusted = {}
    for k, key in enumerate(keys):
        adjusted[key] = min(1.0, max((m - j) * p[keys[j]] for j in range(k + 1)))
    return adjusted


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 1), min_size=1, max_size=8))
def test_holm_matches_its_definition(p):
    got, want = holm(p), reference_holm(p)
    assert all(got[k] == pytest.approx(want[k]) for k in p)


def items(seed: int, skill: float, n: int = 40) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        pairs = [[f"r{k}", f"r{k + 1}", "right" if rng.random() < skill else "reversed"] for k in range(4)]
        right = sum(p[2] == "right" for p in pairs)
        out.append({"prompt_id": f"p{i}", "subset": "open" if i % 2 else "human", "category": ["数学", "代码"][i % 4 // 2],
                    "pairs": pairs, "right": right, "tied": 0, "reversed": 4 - right})
    return out


def test_the_paired_bootstrap_is_seeded_and_its_point_is_the_difference():
    a, b = items(1, 0.6), items(1, 0.6)
    for row in b:  # b is a with every pair right
        row["pairs"] = [[x, y, "right"] for x, y, _ in row["pairs"]]
        row["right"], row["reversed"] = 4, 0
    one = paired_bootstrap(a, b, n_bootstrap=300, seed=3)
    assert one == paired_bootstrap(a, b, n_bootstrap=300, seed=3)
    assert one["overall"]["b"] == 1.0 and one["overall"]["difference"] > 0 and one["overall"]["ci"][0] > 0
    assert one["overall"]["p_value"] < 0.01
    same = paired_bootstrap(a, a, n_bootstrap=300, seed=3)
    assert same["overall"]["difference"] == 0 and same["overall"]["ci"] == [0.0, 0.0]


def test_compare_refuses_other_benchmarks_and_counts_discordant_pairs():
    a, b = items(1, 0.5), items(2, 0.5)
    ra = {"model": "A", "ties": "official", "benchmark": {"fingerprint": "x", "prompts": 40}}
    rb = dict(ra, model="B")
    out = compare_reports(ra, a, rb, b, n_bootstrap=100)
    only_a = sum(pa[2] == "right" and pb[2] != "right"
                 for ia, ib in zip(a, b) for pa, pb in zip(ia["pairs"], ib["pairs"]))
    assert out["mcnemar"]["only_a"] == only_a
    assert set(out["categories"]) == {"数学", "代码"}
    with pytest.raises(CheemsInputError, match="different benchmarks"):
        compare_reports(ra, a, dict(rb, benchmark={"fingerprint": "y", "prompts": 40}), b)


def test_correlate_equals_scipy_on_the_models_it_has():
    rng = np.random.default_rng(0)
    overall = rng.random(6)
    reports = {f"m{i}": [{"kind": "eval", "overall": float(overall[i]), "subsets": {}}] for i in range(6)}
    down = {f"m{i}": {"win_rate": float(overall[i] + rng.normal(0, 0.1))} for i in range(6)}
    down["only-downstream"] = {"win_rate": 0.5}
    out = correlate(reports, down, n_bootstrap=200)
    cell = out["correlations"]["overall"]["win_rate"]
    x = overall
    y = np.array([down[f"m{i}"]["win_rate"] for i in range(6)])
    assert cell["pearson"]["r"] == pytest.approx(pearsonr(x, y)[0])
    assert cell["spearman"]["r"] == pytest.approx(spearmanr(x, y)[0])
    assert cell["kendall"]["r"] == pytest.approx(kendalltau(x, y)[0])
    assert out["left_out"] == ["only-downstream"] and cell["n"] == 6
    with pytest.raises(CheemsInputError, match="at least 3"):
        correlate({"a": reports["m0"]}, {"a": down["m0"]})


def test_eval_compare_and_correlate_from_the_command_line(tmp_path, sample_annotations):
    assert run_cli_in(tmp_path, "rank", sample_annotations / "open.jsonl", sample_annotations / "human.jsonl",
                      "-o", "bench.jsonl").returncode == 0
    for name, extra in (("length", []), ("random", ["--seed", "1"])):
        r = run_cli_in(tmp_path, "eval", "bench.jsonl", "--scorer", name, *extra, "--json", f"{name}.json")
        assert r.returncode == 0, r.stderr
        assert (tmp_path / f"{name}.items.jsonl").exists()
    r = run_cli_in(tmp_path, "compare", "length.json", "random.json", "--json", "cmp.json")
    assert r.returncode == 0, r.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text(encoding="utf-8"))
    length = json.loads((tmp_path / "length.json").read_text(encoding="utf-8"))
    assert cmp["overall"]["a"] == pytest.approx(length["overall"])  # the point estimates are eval's own
    assert "McNemar" in r.stdout
    (tmp_path / "down.json").write_text(json.dumps({"length": {"win": 0.6}, "random": {"win": 0.4},
                                                    "other": {"win": 0.5}}), encoding="utf-8")
    r = run_cli_in(tmp_path, "correlate", "length.json", "random.json", "--downstream", "down.json")
    assert r.returncode == 2 and "at least 3" in r.stderr


def test_the_sign_is_b_minus_a_in_the_table_the_json_and_the_report(tmp_path, sample_annotations):
    """length (A) against an oracle that scores every response by the human ranking (B): B is better, so
    B - A is positive in the CLI table and the JSON, and on the page the oracle's row is positive and the
    length baseline's row negative."""
    from tests.test_report_page import matrix_of, parse_page

    assert run_cli_in(tmp_path, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl").returncode == 0
    rows = [json.loads(x) for x in (tmp_path / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    (tmp_path / "oracle.jsonl").write_text("".join(json.dumps({"prompt_id": r["id"], "response_id": rid,
                                                               "score": -level}) + "\n"
                                                   for r in rows for rid, level in r["rank"].items()),
                                           encoding="utf-8")
    for args in (("--scorer", "length", "--json", "length.json"),
                 ("--scores", "oracle.jsonl", "--json", "oracle.json")):
        done = run_cli_in(tmp_path, "eval", "bench.jsonl", *args)
        assert done.returncode == 0, done.stderr
    done = run_cli_in(tmp_path, "compare", "length.json", "oracle.json", "--bootstrap", "999", "--json", "cmp.json")
    assert done.returncode == 0, done.stderr
    assert "A = length vs B = oracle: difference B − A" in done.stdout and "< 0.0010" in done.stdout
    assert "0.0000" not in done.stdout.split("McNemar")[0]
    cmp = json.loads((tmp_path / "cmp.json").read_text(encoding="utf-8"))
    assert cmp["a"] == "length" and cmp["b"] == "oracle" and cmp["difference"] == "b - a"
    difference = cmp["overall"]["difference"]
    assert difference == pytest.approx(cmp["overall"]["b"] - cmp["overall"]["a"]) and difference > 0.2
    assert cmp["overall"]["p_value"] == 0.0

    done = run_cli_in(tmp_path, "report", "cmp.json", "-o", "report.html", "--lang", "en")
    assert done.returncode == 0, done.stderr
    page = parse_page((tmp_path / "report.html").read_text(encoding="utf-8"))
    cells = matrix_of(page)
    assert cells["oracle", "length"] == f"{difference:.4f} (p < 0.0010)"
    assert cells["length", "oracle"] == f"{-difference:.4f} (p < 0.0010)"
    details = next(t for t in page.tables if t[0][0] == "Metric")
    assert details[0][:4] == ["Metric", "A: length", "B: oracle", "B − A"]
    assert details[1][0] == "Overall" and float(details[1][3]) == pytest.approx(difference, abs=1e-4)
    assert details[1][5] == "< 0.0010"
    shown = {(n["data-path"], n.get("data-negated")): float(n["data-value"]) for n in page.nums}
    assert shown["overall/difference", None] == difference and shown["overall/difference", "true"] == -difference


@pytest.mark.parametrize("overall", ['"0.61"', '{"x": 1}', '[0.5]'])
def test_correlate_refuses_a_report_whose_overall_is_not_a_number(tmp_path, overall):
    for k in range(3):
        (tmp_path / f"m{k}.json").write_text(f'{{"kind": "eval", "model": "m{k}", "subsets": {{}}, "overall": '
                                             f'{overall if k == 1 else 0.5 + k / 10}}}', encoding="utf-8")
    (tmp_path / "down.json").write_text(json.dumps({f"m{k}": {"win": k / 3} for k in range(3)}), encoding="utf-8")
    done = run_cli_in(tmp_path, "correlate", "m0.json", "m1.json", "m2.json", "--downstream", "down.json")
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "m1.json" in lines[0] and "overall" in lines[0], done.stderr
