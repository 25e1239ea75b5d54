"""Best-of-n: the exact estimator against brute force over every n-subset (ties broken uniformly
at random, enumerated), and the curve's bookkeeping."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given, settings, strategies as st

from cheems.records import Prompt, Response
from cheems.report.bon import best_of_n_curve, expected_best_of_n, pick_weights


def brute_force(rewards: list[int], gold: list[int], n: int) -> Fraction:
    """Average over all n-subsets of the mean gold of the subset's top-reward members (a tie for
    the top is broken uniformly at random), in exact fractions."""
    total, count = Fraction(0), 0
    for subset in itertools.combinations(range(len(rewards)), n):
        top = max(rewards[i] for i in subset)
        best = [gold[i] for i in subset if rewards[i] == top]
        total += Fraction(sum(best), len(best))
        count += 1
    return total / count


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_estimator_equals_brute_force_with_ties(data):
    size = data.draw(st.integers(1, 10))
    rewards = data.draw(st.lists(st.integers(0, 4), min_size=size, max_size=size))  # many ties
    gold = data.draw(st.lists(st.integers(-5, 5), min_size=size, max_size=size))
    n = data.draw(st.integers(1, size))
    assert abs(expected_best_of_n(rewards, gold, n) - float(brute_force(rewards, gold, n))) < 1e-9


def test_pick_weights_sum_to_one_and_n_equals_one_is_the_mean():
    for big in (1, 5, 32, 300):
        for n in (1, big // 2 or 1, big):
            assert abs(pick_weights(big, n).sum() - 1) < 1e-9
    assert abs(expected_best_of_n([3, 1, 2], [10, 20, 30], 1) - 20) < 1e-12
    assert expected_best_of_n([3, 1, 2], [10, 20, 30], 3) == 10  # all drawn: the top reward's gold


def test_the_curve_leaves_out_short_prompts_and_gives_win_rates():
    prompts = [Prompt("p1", "问题一", [Response(f"a{i}", str(i)) for i in range(4)], category=["数学"]),
               Prompt("p2", "问题二", [Response(f"b{i}", str(i)) for i in range(2)], category=["代码"])]
    rewards = {("p1", f"a{i}"): float(i) for i in range(4)} | {("p2", f"b{i}"): float(-i) for i in range(2)}
    gold = {("p1", f"a{i}"): 1.0 if i >= 2 else -1.0 for i in range(4)} | {("p2", "b0"): 1.0, ("p2", "b1"): -1.0}
    out = best_of_n_curve(prompts, rewards, gold, [1, 2, 4], n_bootstrap=200, seed=1)
    by_n = {p["n"]: p for p in out["curve"]}
    assert by_n[4]["prompts"] == 1 and by_n[4]["left_out"] == 1 and by_n[4]["expected_gold"] == 1.0
    assert by_n[1]["expected_gold"] == 0.0 and by_n[1]["win_rate"] == 0.5
    assert out["gold_is_win_loss"] and set(out["categories"]) == {"数学", "代码"}
    again = best_of_n_curve(prompts, rewards, gold, [1, 2, 4], n_bootstrap=200, seed=1)
    assert again == out  # seeded
    assert np.isclose(by_n[2]["expected_gold"], (expected_best_of_n([0, 1, 2, 3], [-1, -1, 1, 1], 2) + 1) / 2)


def test_bon_from_the_command_line_with_the_human_ranking_as_gold(tmp_path, sample_annotations):
    import json

    from tests.conftest import run_cli_in

    assert run_cli_in(tmp_path, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl").returncode == 0
    rows = [json.loads(x) for x in (tmp_path / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    gold = [{"prompt_id": r["id"], "response_id": rid, "score": -level}
            for r in rows for rid, level in r["rank"].items()]
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gold), encoding="utf-8")
    assert run_cli_in(tmp_path, "score", "bench.jsonl", "--scorer", "length", "-o", "length.jsonl").returncode == 0
    r = run_cli_in(tmp_path, "bon", "bench.jsonl", "--scores", "length.jsonl", "--gold", "gold.jsonl",
                   "-n", "1,2,5,8", "--json", "bon.json")
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "bon.json").read_text(encoding="utf-8"))
    curve = {p["n"]: p for p in out["curve"]}
    assert out["kind"] == "bon" and out["model"] == "length"
    assert curve[8]["prompts"] == 0 and curve[8]["left_out"] == 24 and "fewer than 8" in r.stderr
    scores = {(s["prompt_id"], s["response_id"]): s["score"]
              for s in map(json.loads, (tmp_path / "length.jsonl").read_text(encoding="utf-8").splitlines())}
    want = np.mean([expected_best_of_n([scores[(row["id"], x)] for x in row["rank"]],
                                       [-v for v in row["rank"].values()], 5) for row in rows])
    assert np.isclose(curve[5]["expected_gold"], want)
    bad = run_cli_in(tmp_path, "bon", "bench.jsonl", "--scores", "length.jsonl", "--gold", "gold.jsonl", "-n", "0")
    assert bad.returncode == 2 and "-n" in bad.stderr and "Traceback" not in bad.stderr
    named = run_cli_in(tmp_path, "bon", "bench.jsonl", "--scores", "length.jsonl", "--gold", "gold.jsonl", "-n", "1,2",
                       "--name", "长度基线", "--json", "named.json")
    assert named.returncode == 0, named.stderr
    assert json.loads((tmp_path / "named.json").read_text(encoding="utf-8"))["model"] == "长度基线"
    assert "Best-of-n: 长度基线" in named.stdout
    empty = run_cli_in(tmp_path, "bon", "bench.jsonl", "--scores", "length.jsonl", "--gold", "gold.jsonl",
                       "--name", " ")
    assert empty.returncode == 2 and "name: must not be empty" in empty.stderr


def test_the_best_of_n_pick_judged_against_a_baseline_in_both_orders(tmp_path):
    from cheems.report.bon import judged_win_rate
    from cheems.scoring.bench_judge import JudgeConfig
    from tests.openai_server import JudgeServer, first_judge, quality, smart_judge

    prompts = [Prompt(f"p{i}", f"第{i}题：介绍一种水果。",
                      [Response("base", "香蕉是黄色的。" + quality(3))]
                      + [Response(f"c{k}", f"候选{k}：苹果。" + quality(k)) for k in (1, 2, 4, 5)],
                      category=["知识"]) for i in range(6)]
    good = {(p.id, r.id): float(k) for p in prompts for k, r in enumerate(p.responses)}  # c5 scores highest
    bad = {key: -v for key, v in good.items()}  # picks c1, worse than the baseline
    with JudgeServer(smart_judge) as server:
        config = JudgeConfig(model="fake-judge", api_base=server.base_url, api_key="test",
                             cache_path=tmp_path / "judge.sqlite")
        win = judged_win_rate(prompts, good, "base", config, n_bootstrap=100)
        lose = judged_win_rate(prompts, bad, "base", config, n_bootstrap=100)
        assert server.requests == 2 * 2 * len(prompts)  # both orders, both picks
        again = judged_win_rate(prompts, good, "base", config, n_bootstrap=100)
        assert server.requests == 2 * 2 * len(prompts) and again["cached"] == 2 * len(prompts)  # from the cache
    assert win["win_rate"] == 1.0 and lose["win_rate"] == 0.0 and win["position_consistency"] == 1.0
    with JudgeServer(first_judge) as server:  # pure position bias: one win and one loss per prompt
        config = JudgeConfig(model="first", api_base=server.base_url, api_key="test", cache_path=tmp_path / "f.sqlite")
        biased = judged_win_rate(prompts, good, "base", config, n_bootstrap=0)
    assert biased["win_rate"] == 0.5 and biased["first_position_rate"] == 1.0 and biased["position_consistency"] == 0
