"""Identical responses score identically: each distinct conversation is encoded and scored
once, so the scores of repeated responses cannot drift apart with batch size (and the tie
rule is never decided by float noise). Two responses of identical text in one row are read,
scored as a tie, skipped in training (their pair carries no signal) and kept as tokenizer text."""

from __future__ import annotations

import json

import pytest

from tests.tiny_models import require_models_extra

require_models_extra()

from cheems.formats import read_prompts  # noqa: E402
from cheems.metrics import evaluate  # noqa: E402
from cheems.records import CheemsInputError, Prompt, Response  # noqa: E402
from cheems.scoring.transformers_rm import load_reward_model, score_prompts  # noqa: E402
from cheems.training.init_model import tokenizer_texts  # noqa: E402
from cheems.training.training_data import read_training_prompts, training_pairs  # noqa: E402
from tests.conftest import run_cli_in, write_jsonl_rows  # noqa: E402


def bench_with_twins(prompts: list[Prompt]) -> list[Prompt]:
    """Each prompt's best and worst responses made identical in content (different ids), and a
    prompt repeated under another id, so the same conversation occurs across prompts too."""
    out = []
    for p in prompts[:6]:
        rs = list(p.responses)
        twin = Response(rs[-1].id + "-twin", rs[0].content)
        out.append(Prompt(p.id, p.prompt, rs[:-1] + [twin], {r.id: k for k, r in enumerate(rs[:-1] + [twin])},
                          category=p.category, subset="twins"))
    first = out[0]
    out.append(Prompt(first.id + "-again", first.prompt, list(first.responses), dict(first.rank),
                      category=first.category, subset="twins"))
    return out


@pytest.mark.parametrize("batch_size, token_budget", [(1, None), (2, None), (3, 64), (7, None), (64, 4096)])
def test_identical_conversations_score_identically(seq_cls_model, tiny_prompts, batch_size, token_budget):
    rm = load_reward_model(seq_cls_model)
    bench = bench_with_twins(tiny_prompts)
    scores = {}
    for batch in score_prompts(rm, bench, batch_size=batch_size, token_budget=token_budget):
        scores.update(((pid, rid), s) for pid, rid, s in batch)
    assert len(scores) == sum(len(p.responses) for p in bench)
    for p in bench:
        best, worst = p.responses[0], p.responses[-1]
        assert best.content == worst.content
        assert scores[(p.id, best.id)] == scores[(p.id, worst.id)]  # exactly, not approximately
    again = bench[-1]
    assert [scores[(again.id, r.id)] for r in again.responses] == [scores[(bench[0].id, r.id)]
                                                                    for r in bench[0].responses]
    # the twins tie, so the official rule keeps Exact Match unless another pair is reversed
    report = evaluate(bench, scores, n_bootstrap=0)
    assert report["subsets"]["twins"]["n_tied"] >= len(bench)


def test_each_distinct_conversation_is_encoded_once(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model)
    bench = bench_with_twins(tiny_prompts)
    seen = []
    for batch in score_prompts(rm, bench, progress=lambda done, total: seen.append((done, total))):
        pass
    distinct = {(p.prompt if isinstance(p.prompt, str) else str(p.prompt), r.content)
                for p in bench for r in p.responses}
    assert rm.stats.sequences == len(distinct) < sum(len(p.responses) for p in bench)
    total = sum(len(p.responses) for p in bench)
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    a, b = (bench[0].prompt, bench[0].responses[0].content), (bench[0].prompt, bench[0].responses[1].content)
    got = rm.score([a, b, a, a], batch_size=2)  # the scorer interface shares one score too
    assert got[0] == got[2] == got[3] and len(set(got)) == 2


# ----------------------------------------------------------------------------- identical text in one row

TWINS = [{"id": "价格", "prompt": "一斤苹果八元，买三斤半要多少钱？", "category": "数学",
          "responses": [{"id": "甲", "content": "二十八元。"}, {"id": "乙", "content": "二十八元。"},
                        {"id": "丙", "content": "二十四块钱吧。"}],
          "rank": {"甲": 0, "乙": 1, "丙": 2},
          "comparisons": [{"a": "甲", "b": "乙", "label": "g"}, {"a": "乙", "b": "丙", "label": "g"}]},
         {"id": "诗句", "prompt": "写一句关于春天的诗。", "category": "写作",
          "responses": [{"id": "甲", "content": "春风又绿江南岸。"}, {"id": "乙", "content": "春天来了。"}],
          "rank": {"甲": 0, "乙": 1}}]


def plain_length_eval(rows: list[dict], ties: str) -> tuple[float, float]:
    """(Accuracy, Exact Match) of the length scorer, every ranked pair of every row, by hand:
    a tied score is wrong for Accuracy; for Exact Match it is wrong only under ``strict``, and
    under ``official`` only a reversed pair breaks the row."""
    accuracy, exact = {}, {}
    for row in rows:
        length = {r["id"]: len(r["content"]) for r in row["responses"]}
        pairs = [(x, y) for x in row["rank"] for y in row["rank"] if row["rank"][x] < row["rank"][y]]
        right = [length[x] > length[y] for x, y in pairs]
        reversed_ = [length[x] < length[y] for x, y in pairs]
        accuracy.setdefault(row["category"], []).append(sum(right) / len(pairs))
        exact.setdefault(row["category"], []).append(all(right) if ties == "strict" else not any(reversed_))
    mean = lambda d: sum(sum(v) / len(v) for v in d.values()) / len(d)
    return mean(accuracy), mean(exact)


@pytest.mark.parametrize("ties", ["official", "strict"])
def test_eval_scores_identical_responses_as_a_tie_with_a_warning(tmp_path, ties):
    write_jsonl_rows(tmp_path / "twins.jsonl", TWINS)
    r = run_cli_in(tmp_path, "eval", "twins.jsonl", "--scorer", "length", "--bootstrap", "0", "--ties", ties,
                   "--json", "r.json")
    assert r.returncode == 0, r.stderr
    assert "warning: 1 row(s) hold two responses of identical text" in r.stderr
    subset = json.loads((tmp_path / "r.json").read_text("utf-8"))["subsets"]["twins"]
    assert (subset["accuracy"], subset["exact_match"]) == pytest.approx(plain_length_eval(TWINS, ties))
    assert subset["n_tied"] == 1
    v = run_cli_in(tmp_path, "validate", "twins.jsonl")
    assert v.returncode == 0 and "warning: 1 row(s) hold two responses of identical text" in v.stdout


def test_training_skips_the_pair_of_identical_responses_and_says_how_many(tmp_path):
    path = write_jsonl_rows(tmp_path / "twins.jsonl", [*TWINS, '{"id": "坏"'])
    with pytest.raises(CheemsInputError, match="invalid JSON"):
        read_training_prompts([str(path)])
    heard: list[str] = []
    prompts = read_training_prompts([str(path)], skip_invalid=True, notify=heard.append)
    assert heard[0] == "warning: skipped 1 invalid row(s):" and "twins.jsonl:3: invalid JSON" in heard[1]
    assert "1 row(s) hold two responses of identical text" in heard[2]
    judged, identical = training_pairs(prompts)
    assert identical == 1  # 甲 > 乙 is one text against itself
    kept = {p.id: pairs for _, p, pairs in judged}
    assert kept == {"价格": [("甲", "丙"), ("乙", "丙")], "诗句": [("甲", "乙")]}
    only_twins = read_prompts(write_jsonl_rows(tmp_path / "only.jsonl", [dict(TWINS[0], rank={"甲": 0, "乙": 1},
                                                                             responses=TWINS[0]["responses"][:2],
                                                                             comparisons=[])])).prompts
    assert training_pairs(only_twins) == ([], 1)


def test_init_model_texts_keep_identical_responses_and_skip_bad_rows(tmp_path):
    path = write_jsonl_rows(tmp_path / "twins.jsonl", [*TWINS, {"id": "缺", "prompt": "你好"}])
    with pytest.raises(CheemsInputError, match="twins.jsonl:3"):
        tokenizer_texts([path])
    errors: list = []
    texts = tokenizer_texts([path], skip_invalid=True, errors=errors)
    assert [e.line for e in errors] == [3]
    assert texts.count("二十八元。") == 2 and len(texts) == 2 + 3 + 2
