"""The formats users hold (LLaMA-Factory, MedicalGPT, Auto-J, CritiqueLLM, PandaLM, RMB, HH-RLHF, TRL),
one fixture file each under tests/fixtures/formats/, and prompts repeated with other responses.

Every fixture is read with its format detected and forced, written back as cheems rows and read again,
and goes through dataset statistics and an evaluation of the length baseline, as a user's file would.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.formats import (FORMAT_NAMES, FORMATS, check_unique_ids, detect_format, group_by_prompt, iter_rows,
                            merge_prompts, parse_row, read_many, read_prompts, read_scores)
from cheems.io import write_jsonl
from cheems.metrics import dataset_stats, evaluate
from cheems.records import (CheemsInputError, Comparison, Prompt, Response, preference_pairs, prompt_id,
                            validate_prompt)
from cheems.scoring.baselines import length_scores

FIXTURES = Path(__file__).parent / "fixtures" / "formats"

# file, the format detected on every row, rows, prompts the length baseline can be scored on (a tie has no pair)
FILES = [
    ("llama_factory_alpaca.json", "alpaca", 4, 4),
    ("llama_factory_alpaca_ranking.json", "alpaca-ranking", 3, 3),
    ("medicalgpt_reward.jsonl", "medicalgpt", 3, 3),
    ("autoj_pairwise.jsonl", "autoj", 3, 2),
    ("critiquellm_pairwise.jsonl", "critiquellm", 3, 2),
    ("pandalm_testset.json", "pandalm", 3, 2),
    ("rmb_pairwise.json", "rmb", 3, 3),
    ("rmb_bon.json", "rmb-bon", 2, 2),
    ("hh_rlhf.jsonl", "hh-rlhf", 2, 2),
    ("trl_conversational.jsonl", "trl", 3, 3),
]


def md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def read(name: str, **kw) -> list[Prompt]:
    res = read_prompts(FIXTURES / name, **kw)
    assert res.errors == []
    return res.prompts


def contents(p: Prompt) -> list[str]:
    return [r.content for r in p.responses]


def ranked_contents(p: Prompt) -> list[list[str]]:
    """The responses' contents grouped by rank, best first (a tie shares a group)."""
    text = {r.id: r.content for r in p.responses}
    levels = sorted(set(p.rank.values()))
    return [[text[rid] for rid, v in p.rank.items() if v == level] for level in levels]


# ----------------------------------------------------------------------------- every fixture

@pytest.mark.parametrize("name, fmt, n_rows, n_scored", FILES)
def test_fixture_detected_forced_written_and_evaluated(tmp_path, name, fmt, n_rows, n_scored):
    path = FIXTURES / name
    assert {detect_format(obj) for _, obj in iter_rows(path)} == {fmt}
    prompts = read(name)
    assert len(prompts) == n_rows
    assert read(name, fmt=fmt) == prompts  # forcing the detected format changes nothing
    for p in prompts:
        validate_prompt(p)
        assert p.rank is not None and set(p.rank) == set(p.response_ids())
    assert len({p.id for p in prompts}) == n_rows  # every row its own item, repeated prompts included
    check_unique_ids(prompts)

    out = tmp_path / "cheems.jsonl"  # written as cheems rows, read back the same
    write_jsonl(out, (p.to_dict() for p in prompts))
    assert {detect_format(obj) for _, obj in iter_rows(out)} == {"cheems"}
    again = read_prompts(out).prompts
    assert [p.id for p in again] == [p.id for p in prompts]
    assert [(p.prompt, contents(p), ranked_contents(p), p.category) for p in again] == \
           [(p.prompt, contents(p), ranked_contents(p), p.category) for p in prompts]

    stats = dataset_stats(prompts)
    assert stats["prompts"] == n_rows
    report = evaluate(prompts, length_scores(prompts), n_bootstrap=20)
    (subset,) = report["subsets"].values()
    assert subset["n_prompts"] == n_scored and subset["n_skipped"] == n_rows - n_scored
    assert 0.0 <= report["overall"] <= 1.0


def test_every_format_name_is_listed_and_described():
    assert FORMAT_NAMES == tuple(FORMATS)
    assert {fmt for _, fmt, _, _ in FILES} | {"cheems", "cheems-pairwise", "task", "pair", "sharegpt", "scored"} == \
           set(FORMAT_NAMES)
    assert all(FORMATS[n] for n in FORMAT_NAMES)


# ----------------------------------------------------------------------------- each format's mapping

def test_llama_factory_alpaca_pairwise():
    a, b, c, d = read("llama_factory_alpaca.json")
    assert a.prompt == "把下面这句话改写得更礼貌一些。\n明天之前把报告交上来，别再拖了。"  # instruction + "\n" + input
    assert b.prompt == c.prompt == "解释一下什么是复利。"  # an empty input adds nothing
    assert b.id != c.id  # one prompt, two pairs: two items
    assert d.prompt == [{"role": "system", "content": "你是一名耐心的小学数学老师。"},
                        {"role": "user", "content": "小明有五个苹果，吃了两个，还剩几个？"},
                        {"role": "assistant", "content": "还剩三个苹果，因为五减二等于三。"},
                        {"role": "user", "content": "那他又买了四个呢？"}]
    assert ranked_contents(d) == [["三个再加上四个，一共是七个苹果。"], ["九个。"]]
    assert all(p.extra == {} for p in (a, b, c, d))


def test_alpaca_pairwise_with_empty_input_is_not_an_empty_prompt(write_rows):
    """Such a row used to be read as a pair whose prompt was the empty `input`."""
    row = {"instruction": "写一首关于秋天的五言绝句。", "input": "", "chosen": "秋风吹落叶，", "rejected": "秋天。"}
    (p,) = read_prompts(write_rows([row])).prompts
    assert p.prompt == "写一首关于秋天的五言绝句。"
    with pytest.raises(CheemsInputError) as e:
        read_prompts(write_rows([dict(row, instruction=" ")], "empty.jsonl"))
    assert e.value.field == "instruction" and "empty" in e.value.message


def test_llama_factory_alpaca_ranking():
    a, b, c = read("llama_factory_alpaca_ranking.json")
    assert ranked_contents(b) == [["The meeting has been moved to 2 p.m. next Wednesday."],
                                  ["The meeting is changed to Wednesday."], ["Meeting two o'clock."]]
    assert b.prompt == "把这段话翻译成英文。\n会议改到下周三下午两点。"
    assert c.prompt[-1] == {"role": "user", "content": "我刚才问了什么？"} and len(c.prompt) == 3


def test_medicalgpt_reward():
    a, b, c = read("medicalgpt_reward.jsonl")
    assert a.prompt == "感冒了可以吃抗生素吗？"
    assert ranked_contents(a)[1] == ["可以，吃点阿莫西林好得快。"]
    assert [m["role"] for m in b.prompt] == ["system", "user", "assistant", "user"]
    assert b.prompt[-1]["content"] == "那一天最多能吃几次？"


def test_autoj_labels_and_a_tie_that_stays_a_tie():
    better1, better2, tie = read("autoj_pairwise.jsonl")
    r1, r2 = better1.response_ids()
    assert better1.rank == {r1: 0, r2: 1} and better1.comparisons == [Comparison(r1, r2, "g", source="label")]
    r1, r2 = better2.response_ids()
    assert better2.rank == {r1: 1, r2: 0} and better2.comparisons == [Comparison(r1, r2, "b", source="label")]
    r1, r2 = tie.response_ids()
    assert tie.rank == {r1: 0, r2: 0}  # a two-way tie: no fake preference
    assert tie.comparisons == [Comparison(r1, r2, "s", source="label")]
    assert preference_pairs(tie) == []
    assert [p.category for p in (better1, better2, tie)] == [["writing_email"], ["code_generation"], ["chitchat"]]


def test_critiquellm_labels_follow_its_readme():
    """CritiqueLLM's README: 0 = response_1 wins, 1 = response_2 wins, 2 = tie."""
    first, second, tie = read("critiquellm_pairwise.jsonl")
    assert ranked_contents(first)[0] == ["丙最矮。因为甲比乙高、乙比丙高，所以身高从高到低是甲、乙、丙。"]
    assert ranked_contents(second)[0] == ["比喻做了多余的事，反而把事情弄糟。"]
    assert ranked_contents(tie) == [["一百八十。", "12 × 15 = 180。"]]
    assert [p.id for p in (first, second, tie)] == ["0", "1", "2"]  # the row's own id
    assert first.category == ["逻辑推理"] and first.extra == {"reference": "丙最矮。"}


def test_pandalm_majority_of_annotators():
    majority, unanimous, split = read("pandalm_testset.json")
    assert ranked_contents(majority) == [["因天气原因，明天的运动会推迟。"],
                                         ["由于天气原因，我们决定把明天的运动会推迟举行。"]]  # votes 1, 1, 0
    assert [(c.annotator, c.label) for c in majority.comparisons] == \
           [("annotator1", "g"), ("annotator2", "g"), ("annotator3", "s")]
    assert unanimous.prompt == "列出三个学习编程时常用的搜索关键词。"  # input NaN: none
    assert ranked_contents(unanimous)[0][0].startswith("1. Python")  # votes 2, 2, 2
    assert len(ranked_contents(split)) == 1  # votes 1, 2, 0: no majority, a tie
    assert majority.extra == {"idx": 0, "motivation_app": "写作助手"}


def test_rmb_pairwise():
    a, b, multi = read("rmb_pairwise.json")
    assert a.prompt == b.prompt == "我想在家自己换水龙头，需要注意什么？" and a.id != b.id
    assert [r.model for r in a.responses] == ["模型甲", "模型乙"]
    assert a.responses[0].extra == {"score": 4.5}
    assert a.category == ["Helpfulness", "Open QA", "Technical and Practical Support"]  # "Pairwise_set" left out
    assert multi.prompt == [{"role": "user", "content": "帮我想个周末活动。"},
                            {"role": "assistant", "content": "可以去郊外爬山，或者去博物馆看展。"},
                            {"role": "user", "content": "我不想出门。"}]  # "language" dropped
    assert a.extra == {"pair_uid": "zh-0001"}


def test_rmb_best_of_n_exact_match_is_bon_accuracy():
    harm, help_ = read("rmb_bon.json")
    assert [len(level) for level in ranked_contents(harm)] == [1, 2]  # best above every loser, losers tied
    assert [len(level) for level in ranked_contents(help_)] == [1, 2]  # a loser given twice is kept once
    assert harm.category == ["Harmlessness", "S9"]
    # a scorer that picks the best of one prompt and not of the other: RMB's best-of-N accuracy 0.5
    scores = {(p.id, r.id): float(p.rank[r.id] == 0) for p in (harm, help_) for r in p.responses}
    worst_loser = help_.responses[2].id
    scores[(help_.id, worst_loser)] = 2.0
    report = evaluate([harm, help_], scores, n_bootstrap=0)
    assert report["subsets"]["default"]["exact_match"] == 0.5
    assert report["subsets"]["default"]["accuracy"] == 0.75  # pairwise: 3 of 4 comparisons


def test_hh_rlhf_transcripts():
    single, multi = read("hh_rlhf.jsonl")
    assert single.prompt == "怎么让米饭煮得更香？"
    assert contents(single)[1] == "多放点水就行。"
    assert multi.prompt == [{"role": "user", "content": "我家猫最近不爱吃饭。"},
                            {"role": "assistant", "content": "最近有换猫粮或者搬家吗？"},
                            {"role": "user", "content": "换了一种新猫粮。"}]
    assert contents(multi)[1] == "那就饿它几天，饿了自然会吃。"
    assert multi.rank == {multi.responses[0].id: 0, multi.responses[1].id: 1}


def test_trl_conversational_explicit_and_implicit_prompt():
    explicit, implicit, text = read("trl_conversational.jsonl")
    assert explicit.prompt == "用一句话介绍一下长江。"  # one user message is plain text
    assert implicit.prompt == [{"role": "system", "content": "你是一个旅行顾问。"},
                               {"role": "user", "content": "十月去哪里看红叶好？"}]  # the shared prefix
    assert contents(implicit)[1] == "哪里都行。"
    assert text.prompt == "写一句中秋节的祝福。"


def test_sharegpt_system_column_becomes_the_system_message(write_rows):
    row = {"conversations": [{"from": "human", "value": "你好"}], "system": "你是客服。",
           "chosen": {"from": "gpt", "value": "您好，请问有什么可以帮您？"}, "rejected": {"from": "gpt", "value": "嗯。"}}
    (p,) = read_prompts(write_rows([row])).prompts
    assert p.prompt == [{"role": "system", "content": "你是客服。"}, {"role": "user", "content": "你好"}]
    assert p.extra == {}


# ----------------------------------------------------------------------------- forcing a format

def test_unknown_format_name_lists_the_known_ones(write_rows):
    path = write_rows([{"prompt": "你好", "chosen": "你好！", "rejected": "嗯。"}])
    for call in (lambda: read_prompts(path, fmt="llamafactory"), lambda: read_many([path], fmt="llamafactory"),
                 lambda: parse_row({"prompt": "你好"}, "llamafactory")):
        with pytest.raises(CheemsInputError) as e:
            call()
        assert e.value.field == "format" and "'llamafactory'" in e.value.message
        assert all(n in e.value.message for n in FORMAT_NAMES)


def test_forced_format_reads_what_detection_would_not(write_rows):
    transcript = {"prompt": "（见对话）", "chosen": "\n\nHuman: 一加一？\n\nAssistant: 二。",
                  "rejected": "\n\nHuman: 一加一？\n\nAssistant: 三。"}
    path = write_rows([transcript])
    assert read_prompts(path).prompts[0].prompt == "（见对话）"  # detected: a pair with a prompt
    (p,) = read_prompts(path, fmt="hh-rlhf").prompts
    assert p.prompt == "一加一？" and contents(p) == ["二。", "三。"]


def test_forced_format_that_does_not_fit_names_the_missing_field():
    with pytest.raises(CheemsInputError) as e:
        read_prompts(FIXTURES / "autoj_pairwise.jsonl", fmt="critiquellm")
    assert (e.value.line, e.value.field) == (1, "question")


# ----------------------------------------------------------------------------- bad rows

ANSWER = {"answer": "好的。"}
BAD_ROWS = {
    "alpaca history turn not a pair": ({"instruction": "继续", "chosen": "甲", "rejected": "乙",
                                        "history": [["只有一句"]]}, "history[0]", ["[user, assistant]"]),
    "alpaca input not text": ({"instruction": "翻译", "input": 3, "chosen": "甲", "rejected": "乙"}, "input",
                              ["string"]),
    "alpaca ranking with one output": ({"instruction": "写诗", "output": "床前明月光"}, "output",
                                       ["two or more"]),
    "medicalgpt without rejected": ({"question": "头疼怎么办？", "response_chosen": "多休息。"},
                                    "response_rejected", ["missing"]),
    "autoj label 3": ({"prompt": "你好", "response 1": "甲", "response 2": "乙", "label": 3}, "label",
                      ["2 (tie)", "3"]),
    "autoj label true": ({"prompt": "你好", "response 1": "甲", "response 2": "乙", "label": True}, "label",
                         ["True"]),
    "critiquellm label tie as text": ({"question": "你好", "response_1": "甲", "response_2": "乙",
                                       "label": "tie"}, "label", ["'tie'"]),
    "pandalm vote 5": ({"instruction": "改写", "input": "", "response1": "甲", "response2": "乙",
                        "annotator1": 1, "annotator2": 5, "annotator3": 1}, "annotator2", ["5"]),
    "pandalm without votes": ({"instruction": "改写", "input": "", "response1": "甲", "response2": "乙"},
                              "annotator1", ["annotator"]),
    "rmb reject without answer": ({"conversation_input": [{"role": "user", "content": "你好"}],
                                   "chosen": ANSWER, "reject": {"llm_name": "某模型"}}, "reject", ["answer"]),
    "rmb prompt ends with assistant": ({"conversation_input": [{"role": "user", "content": "你好"},
                                                               {"role": "assistant", "content": "你好！"}],
                                        "chosen": ANSWER, "reject": {"answer": "嗯。"}},
                                       "conversation_input[1].role", ["user"]),
    "rmb unknown role": ({"conversation_input": [{"role": "客户", "content": "你好"}], "chosen": ANSWER,
                          "reject": {"answer": "嗯。"}}, "conversation_input[0].role", ["'客户'"]),
    "rmb-bon loser equals best": ({"conversation_input": [{"role": "user", "content": "你好"}],
                                   "bon_best": ANSWER, "loser_list": [ANSWER]}, "loser_list[0]", ["bon_best"]),
    "rmb-bon empty loser list": ({"conversation_input": [{"role": "user", "content": "你好"}],
                                  "bon_best": ANSWER, "loser_list": []}, "loser_list", ["non-empty"]),
    "hh prompts differ": ({"chosen": "\n\nHuman: 你好\n\nAssistant: 你好！",
                           "rejected": "\n\nHuman: 您好\n\nAssistant: 嗯。"}, "rejected", ["shared prompt"]),
    "hh ends with human": ({"chosen": "\n\nHuman: 你好\n\nAssistant: 你好！\n\nHuman: 再见",
                            "rejected": "\n\nHuman: 你好\n\nAssistant: 嗯。"}, "chosen", ["Assistant"]),
    "trl two assistant messages": ({"prompt": "你好", "chosen": [{"role": "assistant", "content": "你好！"},
                                                                {"role": "assistant", "content": "在吗？"}],
                                    "rejected": [{"role": "assistant", "content": "嗯。"}]}, "chosen",
                                   ["one assistant message"]),
    "trl nothing shared": ({"chosen": [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "甲"}],
                            "rejected": [{"role": "user", "content": "您好"},
                                         {"role": "assistant", "content": "乙"}]}, "prompt", ["missing prompt"]),
    "trl message without content": ({"prompt": "你好", "chosen": [{"role": "assistant"}],
                                     "rejected": [{"role": "assistant", "content": "嗯。"}]}, "chosen[0]",
                                    ["content"]),
}


@pytest.mark.parametrize("name", list(BAD_ROWS))
def test_bad_row_of_a_new_format_names_file_line_and_field(write_rows, name):
    row, field, words = BAD_ROWS[name]
    good = {"instruction": "你好", "chosen": "你好！", "rejected": "嗯。"}
    path = write_rows([good, dict(good, instruction="再见"), row], "bad.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    msg = str(e.value)
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 3, field), msg
    for w in words:
        assert w in msg, msg


def test_nan_is_read_as_python_writes_it(tmp_path):
    path = tmp_path / "pandalm.jsonl"
    path.write_text('{"instruction": "问好", "input": NaN, "response1": "你好！", "response2": "嗯。", '
                    '"annotator1": 1, "annotator2": 1, "annotator3": 2}\n', encoding="utf-8")
    (p,) = read_prompts(path).prompts
    assert p.prompt == "问好"
    scores = tmp_path / "scores.jsonl"
    scores.write_text('{"prompt_id": "a", "response_id": "b", "score": NaN}\n', encoding="utf-8")
    with pytest.raises(CheemsInputError, match="score must be a number"):
        read_scores(scores)


# ----------------------------------------------------------------------------- repeated prompts

PAIRS = [{"prompt": "推荐一部电影。", "chosen": "《霸王别姬》，张国荣的表演令人难忘。", "rejected": "随便看。"},
         {"prompt": "推荐一部电影。", "chosen": "《流浪地球》，场面宏大。", "rejected": "随便看。"},
         {"prompt": "推荐一部电影。", "chosen": "《霸王别姬》，张国荣的表演令人难忘。", "rejected": "不知道。"}]


def test_rows_repeating_a_prompt_with_other_responses_are_separate_items(write_rows):
    res = read_prompts(write_rows(PAIRS))
    assert len({p.id for p in res.prompts}) == 3
    check_unique_ids(res.prompts, res.locations())  # eval and score accept the file
    report = evaluate(res.prompts, length_scores(res.prompts), n_bootstrap=0)
    assert report["subsets"]["default"]["n_prompts"] == 3  # each pair counted, as RewardBench does
    p = res.prompts[0]
    assert p.id == prompt_id(p.prompt, contents(p)) == prompt_id(p.prompt, contents(p)[::-1])


def test_rows_identical_in_prompt_and_responses_share_an_id_named_at_both_lines(write_rows):
    swapped = {"prompt": PAIRS[0]["prompt"], "responses": [PAIRS[0]["rejected"], PAIRS[0]["chosen"]]}
    res = read_prompts(write_rows(PAIRS + [swapped], "dup.jsonl"))
    assert res.prompts[3].id == res.prompts[0].id
    with pytest.raises(CheemsInputError) as e:
        check_unique_ids(res.prompts, res.locations())
    msg = str(e.value)
    assert msg.startswith(f"{res.files[3]}:4: id: ") and f"{res.files[0]}:1" in msg
    assert "used twice" in msg and "repeat one prompt and its responses" in msg


def test_one_explicit_id_on_rows_of_different_content_names_both_lines(write_rows):
    rows = [dict(PAIRS[0], id="电影-1"), dict(PAIRS[1], id="电影-2"), dict(PAIRS[1], id="电影-1")]
    res = read_prompts(write_rows(rows, "ids.jsonl"))
    with pytest.raises(CheemsInputError) as e:
        check_unique_ids(res.prompts, res.locations())
    msg = str(e.value)
    assert msg.startswith(f"{res.files[2]}:3: id: ") and f"{res.files[0]}:1" in msg
    assert "'电影-1' is used twice" in msg and "different content" in msg


def test_task_rows_keep_their_prompt_id_and_are_merged(write_rows):
    responses = [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "乙"}, {"id": "r3", "content": "丙"},
                 {"id": "r4", "content": "丁"}]
    tasks = [{"task_id": "q#1", "prompt_id": "q", "prompt": "问", "responses": responses[:3],
              "ids": ["r1", "r2", "r3"], "ranking": "r1>r2=r3"},
             {"task_id": "q#2", "prompt_id": "q", "prompt": "问", "responses": responses[1:],
              "ids": ["r2", "r3", "r4"], "ranking": "r4>r2>r3"}]
    res = read_prompts(write_rows(tasks))
    assert [p.id for p in res.prompts] == ["q", "q"]
    (merged,) = merge_prompts(res.prompts, res.locations())
    assert merged.response_ids() == ["r1", "r2", "r3", "r4"] and len(merged.comparisons) == 6


def test_group_by_prompt_joins_the_pairs_of_one_prompt(write_rows):
    rows = PAIRS + [{"prompt": "推荐一本书。", "chosen": "《活着》。", "rejected": "书很多。"}]
    prompts = read_prompts(write_rows(rows)).prompts
    joined, book = group_by_prompt(prompts)
    assert book is prompts[3]  # a prompt of one row is returned as it is
    assert joined.id == prompts[0].id and joined.rank is None
    assert contents(joined) == ["《霸王别姬》，张国荣的表演令人难忘。", "随便看。", "《流浪地球》，场面宏大。", "不知道。"]
    by_id = {r.id: r.content for r in joined.responses}
    assert {(by_id[a], by_id[b]) for a, b in preference_pairs(joined)} == \
           {(r["chosen"], r["rejected"]) for r in PAIRS}
    assert all(c.source == "rank" for c in joined.comparisons)
    validate_prompt(joined)


def test_group_by_prompt_on_the_alpaca_fixture():
    prompts = read("llama_factory_alpaca.json")
    groups = group_by_prompt(prompts)
    assert len(groups) == 3 and len(groups[1].responses) == 4
    assert groups[0] is prompts[0] and groups[2] is prompts[3]


def test_group_by_prompt_renames_a_clashing_response_id_and_keeps_comparisons():
    a = Prompt("a", "问", [Response("r1", "甲"), Response("r2", "乙")], comparisons=[Comparison("r1", "r2", "b")])
    b = Prompt("b", [{"role": "user", "content": "问"}], [Response("r1", "丙"), Response("r2", "乙")],
               rank={"r1": 0, "r2": 0})
    (joined,) = group_by_prompt([a, b])  # one user message is the same prompt as its text
    assert joined.response_ids() == ["r1", "r2", md5("丙")]
    assert [(c.a, c.b, c.label, c.source) for c in joined.comparisons] == \
           [("r1", "r2", "b", None), (md5("丙"), "r2", "s", "rank")]
    assert a.response_ids() == ["r1", "r2"] and b.response_ids() == ["r1", "r2"]  # inputs untouched


TEXTS = ["甲", "乙", "丙", "丁", "戊"]


@st.composite
def rows(draw):
    """Rows over few prompts and contents; response ids drawn from a small pool, so they clash across rows."""
    out = []
    for i in range(draw(st.integers(1, 8))):
        prompt = draw(st.sampled_from(["问一", "问二", [{"role": "system", "content": "系统"},
                                                      {"role": "user", "content": "问一"}]]))
        texts = draw(st.lists(st.sampled_from(TEXTS), min_size=2, max_size=4, unique=True))
        ids = draw(st.lists(st.sampled_from(["r1", "r2", "r3", "r4", "r5"]), min_size=len(texts),
                            max_size=len(texts), unique=True))
        responses = [Response(rid, t) for rid, t in zip(ids, texts)]
        if draw(st.booleans()):
            rank = {rid: draw(st.integers(0, 2)) for rid in ids}
            comparisons = [Comparison(ids[0], ids[1], "b")]  # ignored for training beside a rank
        else:
            rank = None
            comparisons = [Comparison(ids[x], ids[y], draw(st.sampled_from("gbs")))
                           for x, y in draw(st.lists(st.tuples(st.integers(0, len(ids) - 1),
                                                               st.integers(0, len(ids) - 1)).filter(
                                                                   lambda t: t[0] != t[1]), max_size=4))]
        out.append(Prompt(f"p{i}", prompt, responses, rank, comparisons))
    return out


def content_pairs(p: Prompt) -> set[tuple[str, str]]:
    text = {r.id: r.content for r in p.responses}
    return {(text[a], text[b]) for a, b in preference_pairs(p)}


@settings(max_examples=200, deadline=None)
@given(rows())
def test_group_by_prompt_matches_a_plain_reference(prompts):
    groups = group_by_prompt(prompts)
    key = lambda p: json.dumps(p.prompt, ensure_ascii=False) if isinstance(p.prompt, list) else p.prompt
    reference: dict[str, list[Prompt]] = {}
    for p in prompts:
        reference.setdefault(key(p), []).append(p)
    assert [key(g) for g in groups] == list(reference)
    for g, members in zip(groups, reference.values()):
        validate_prompt(g)
        if len(members) == 1:
            assert g is members[0]
            continue
        assert g.rank is None and g.id == members[0].id
        assert contents(g) == list(dict.fromkeys(t for p in members for t in contents(p)))
        assert content_pairs(g) == set().union(*(content_pairs(p) for p in members))


# ----------------------------------------------------------------------------- real data, when present

def test_llama_factory_dpo_sample_repeats_whole_rows(shared_data):
    """dpo_zh_demo.json (LLaMA-Factory's own DPO sample): 300 rows, 289 distinct prompts. Its 11 repeats
    hold the same chosen and rejected too, so they share an id and check_unique_ids names both rows."""
    path = shared_data / "dpo_zh_demo.json"
    if not path.is_file():
        pytest.skip("optional real data file is absent")
    res = read_prompts(path)
    assert len(res.prompts) == 300 and len(group_by_prompt(res.prompts)) == 289
    with pytest.raises(CheemsInputError) as e:
        check_unique_ids(res.prompts, res.locations())
    assert "repeat one prompt and its responses" in str(e.value) and e.value.line is not None


def test_docs_show_one_row_of_every_format_that_reads_as_that_format():
    """docs/formats.md has a section per format name; the example row in it is detected as that format."""
    text = (Path(__file__).parents[1] / "docs" / "formats.md").read_text(encoding="utf-8")
    sections = {}
    for part in text.split("\n## `")[1:]:
        name, body = part.split("`", 1)
        sections[name] = json.loads(body.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert list(sections) == list(FORMAT_NAMES)
    for name, row in sections.items():
        assert detect_format(row) == name
        parse_row(row)


KEYS = sorted({"id", "prompt", "input", "question", "instruction", "system", "history", "output", "chosen",
               "rejected", "reject", "responses", "rank", "comparisons", "label", "scenario", "category",
               "response 1", "response 2", "response_1", "response_2", "response1", "response2", "annotator1",
               "annotator2", "response_chosen", "response_rejected", "conversation_input", "bon_best",
               "loser_list", "category_path", "conversations", "task_id", "prompt_id", "ids", "ranking"})
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2, 3) | st.floats(allow_nan=True)
                           | st.sampled_from(["", "你好", "user", "assistant", "\n\nHuman: 问\n\nAssistant: 答"]),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["role", "content", "answer", "from", "value"]),
                                             inner, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6), st.sampled_from((None,) + FORMAT_NAMES))
def test_any_odd_row_is_read_or_refused_with_an_input_error(row, fmt):
    try:
        p = parse_row(row, fmt)
    except CheemsInputError as e:
        assert e.message
    else:
        validate_prompt(p)
