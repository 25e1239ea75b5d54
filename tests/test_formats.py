"""Reading and writing prompt rows: every accepted shape, every bad input, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cheems.formats import read_prompts, read_scores
from cheems.io import write_jsonl
from cheems.records import CheemsInputError, Comparison, Prompt, Response


def md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def read_one(write_rows, row: dict) -> Prompt:
    res = read_prompts(write_rows([row]))
    assert res.errors == []
    assert len(res.prompts) == 1
    return res.prompts[0]


R1, R2, R3 = "长城是中国古代的军事防御工程。", "长城很长。", "不知道。"


# ----------------------------------------------------------------------------- row shapes

def test_cheems_row_with_ids_rank_dict_category_list(write_rows):
    row = {"id": "p1", "prompt": "请介绍一下长城。",
           "responses": [{"id": "r1", "content": R1, "model": "模型甲"},
                         {"id": "r2", "content": R2}, {"id": "r3", "content": R3}],
           "rank": {"r1": 0, "r2": 1, "r3": 1}, "category": ["知识问答", "历史"],
           "subset": "open", "来源": "人工撰写"}
    assert read_one(write_rows, row) == Prompt(
        id="p1", prompt="请介绍一下长城。",
        responses=[Response("r1", R1, "模型甲"), Response("r2", R2), Response("r3", R3)],
        rank={"r1": 0, "r2": 1, "r3": 1}, comparisons=[], category=["知识问答", "历史"],
        subset="open", extra={"来源": "人工撰写"})


def test_official_row_input_without_ids_rank_list_category_str(write_rows):
    row = {"input": "请介绍一下长城。", "responses": [{"content": R1}, {"content": R2}],
           "rank": [1, 0], "category": "知识问答"}
    p = read_one(write_rows, row)
    assert p.prompt == "请介绍一下长城。"
    assert p.response_ids() == [md5(R1), md5(R2)]  # the official id: md5 of the content
    assert p.rank == {md5(R1): 1, md5(R2): 0}
    assert p.category == ["知识问答"]
    assert p.subset is None
    assert p.comparisons == []


def test_integer_ids_become_strings(write_rows):
    row = {"id": 42, "prompt": "一加一等于几？", "responses": [{"id": 1, "content": "二"},
                                                        {"id": 2, "content": "三"}],
           "rank": {"1": 0, "2": 1}}
    p = read_one(write_rows, row)
    assert p.id == "42"
    assert p.response_ids() == ["1", "2"]
    assert p.rank == {"1": 0, "2": 1}


@pytest.mark.parametrize("preference, rank, label", [(1, (0, 1), "g"), (2, (1, 0), "b"),
                                                     ("2", (1, 0), "b")])
def test_official_pairwise_row(write_rows, preference, rank, label):
    row = {"input": "写一句关于春天的诗。", "answer1": "春风又绿江南岸。", "answer2": "春天来了。",
           "preference": preference}
    p = read_one(write_rows, row)
    a, b = md5("春风又绿江南岸。"), md5("春天来了。")
    assert p.prompt == "写一句关于春天的诗。"
    assert p.responses == [Response(a, "春风又绿江南岸。"), Response(b, "春天来了。")]
    assert p.rank == {a: rank[0], b: rank[1]}
    assert p.comparisons == [Comparison(a, b, label, source="preference")]


def test_annotations_rows_become_comparisons(write_rows):
    row = {"id": "p2", "prompt": "推荐一本书。",
           "responses": [{"id": "r1", "content": "《红楼梦》"}, {"id": "r2", "content": "《三体》"},
                         {"id": "r3", "content": "随便。"}],
           "annotations": [["r1", "r2", "1"], ["r2", "r3", "2"], ["r1", "r3", "0"]]}
    p = read_one(write_rows, row)
    assert p.rank is None
    assert p.comparisons == [Comparison("r1", "r2", "g", source="annotation"),
                             Comparison("r2", "r3", "b", source="annotation"),
                             Comparison("r1", "r3", "s", source="annotation")]


def test_triples_expand_into_pairwise_comparisons(write_rows):
    row = {"id": "p3", "prompt": "解释什么是光合作用。",
           "responses": [{"id": "x", "content": "植物利用光能合成有机物。"},
                         {"id": "y", "content": "植物吃阳光。"}, {"id": "z", "content": "不清楚。"}],
           "triples": [{"ids": ["x", "y", "z"], "ranking": "x>z=y", "annotator": "标注员甲"}]}
    p = read_one(write_rows, row)
    assert p.rank is None
    assert p.comparisons == [Comparison("x", "y", "g", "标注员甲", "triple"),
                             Comparison("x", "z", "g", "标注员甲", "triple"),
                             Comparison("y", "z", "s", "标注员甲", "triple")]


def test_ranked_list_of_strings_rank_is_position(write_rows):
    p = read_one(write_rows, {"prompt": "北京有什么好玩的？", "responses": [R1, R2, R3]})
    assert p.responses == [Response(md5(R1), R1), Response(md5(R2), R2), Response(md5(R3), R3)]
    assert p.rank == {md5(R1): 0, md5(R2): 1, md5(R3): 2}


def test_pair_row(write_rows):
    row = {"prompt": "如何学习编程？", "chosen": "先学基础语法，再多写项目。", "rejected": "不用学。",
           "subset": "安全"}
    p = read_one(write_rows, row)
    c, r = md5("先学基础语法，再多写项目。"), md5("不用学。")
    assert p.prompt == "如何学习编程？"
    assert p.response_ids() == [c, r]
    assert p.rank == {c: 0, r: 1}
    assert p.subset == "安全"


@pytest.mark.parametrize("as_object", [False, True])
def test_sharegpt_single_human_turn_gives_plain_prompt(write_rows, as_object):
    chosen, rejected = "你好！有什么可以帮你？", "嗯。"
    if as_object:
        chosen, rejected = {"from": "gpt", "value": chosen}, {"from": "gpt", "value": rejected}
    row = {"conversations": [{"from": "human", "value": "你好"}], "chosen": chosen,
           "rejected": rejected}
    p = read_one(write_rows, row)
    assert p.prompt == "你好"
    assert p.responses == [Response(md5("你好！有什么可以帮你？"), "你好！有什么可以帮你？"),
                           Response(md5("嗯。"), "嗯。")]
    assert p.rank == {md5("你好！有什么可以帮你？"): 0, md5("嗯。"): 1}


def test_sharegpt_system_and_multi_turn_give_messages(write_rows):
    row = {"conversations": [{"from": "system", "value": "你是一个乐于助人的助手。"},
                             {"from": "human", "value": "什么是人工智能？"},
                             {"from": "gpt", "value": "人工智能是让机器模拟人类智能的技术。"},
                             {"from": "human", "value": "举个例子。"}],
           "chosen": {"from": "gpt", "value": "比如语音助手。"},
           "rejected": {"from": "gpt", "value": "没有例子。"}}
    p = read_one(write_rows, row)
    assert p.prompt == [{"role": "system", "content": "你是一个乐于助人的助手。"},
                        {"role": "user", "content": "什么是人工智能？"},
                        {"role": "assistant", "content": "人工智能是让机器模拟人类智能的技术。"},
                        {"role": "user", "content": "举个例子。"}]
    assert p.response_ids() == [md5("比如语音助手。"), md5("没有例子。")]
    assert p.rank == {md5("比如语音助手。"): 0, md5("没有例子。"): 1}


def test_row_id_is_kept(write_rows):
    p = read_one(write_rows, {"id": "样例-7", "prompt": "你好", "chosen": "你好！", "rejected": "滚。"})
    assert p.id == "样例-7"


def test_missing_id_is_a_stable_hash_of_the_prompt_and_responses(tmp_path, write_rows):
    rows = [{"prompt": "今天天气怎么样？", "responses": ["晴天。", "下雨。"]},
            {"prompt": "今天天气怎么样？", "chosen": "晴天。", "rejected": "不知道。"},
            {"prompt": "明天天气怎么样？", "responses": ["晴天。", "下雨。"]},
            {"conversations": [{"from": "system", "value": "你是气象员。"},
                               {"from": "human", "value": "今天天气怎么样？"}],
             "chosen": "晴天。", "rejected": "下雨。"},
            {"prompt": "今天天气怎么样？", "chosen": "下雨。", "rejected": "晴天。"}]
    first = [p.id for p in read_prompts(write_rows(rows, "a.jsonl")).prompts]
    again = [p.id for p in read_prompts(write_rows(rows, "b.jsonl")).prompts]
    assert first == again
    assert first[0] == first[4]  # same prompt and responses, other row shape and order
    assert len({first[0], first[1], first[2], first[3]}) == 4  # a repeated prompt with other responses differs
    # stable across processes too (no use of Python's salted hash())
    code = ("import sys; from cheems.formats import read_prompts; "
            "print(' '.join(p.id for p in read_prompts(sys.argv[1]).prompts))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.jsonl")], capture_output=True,
                         text=True, env={**os.environ, "PYTHONHASHSEED": "12345"}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == first


def test_json_list_file(tmp_path):
    path = tmp_path / "list.json"
    rows = [{"id": "a", "prompt": "你好", "responses": ["你好！", "嗯。"]},
            {"id": "b", "prompt": "再见", "chosen": "再见！", "rejected": "哦。"}]
    path.write_text(json.dumps(rows, ensure_ascii=False, indent=2), encoding="utf-8")
    res = read_prompts(path)
    assert [p.id for p in res.prompts] == ["a", "b"]
    assert res.prompts[1].rank == {md5("再见！"): 0, md5("哦。"): 1}


def test_json_list_file_error_names_item(tmp_path):
    path = tmp_path / "list.json"
    rows = [{"prompt": "你好", "responses": ["你好！"]}, {"prompt": "你好", "responses": []}]
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert "list.json:2: responses: " in str(e.value)


def test_round_trip_through_write_jsonl(tmp_path, write_rows):
    rows = [
        {"id": "p1", "prompt": "请介绍一下长城。", "subset": "open", "category": ["知识问答", "历史"],
         "responses": [{"id": "r1", "content": R1, "model": "模型甲"}, {"id": "r2", "content": R2}],
         "rank": {"r1": 0, "r2": 1}, "备注": {"难度": 3}},
        {"input": "写一句关于春天的诗。", "answer1": "春风又绿江南岸。", "answer2": "春天来了。",
         "preference": 2},
        {"prompt": "推荐一本书。", "responses": [{"id": "a", "content": "《红楼梦》"},
                                          {"id": "b", "content": "《三体》"},
                                          {"id": "c", "content": "随便。"}],
         "annotations": [["a", "b", "1"]], "triples": [{"ids": ["a", "b", "c"], "ranking": "b>a=c"}]},
        {"prompt": "北京有什么好玩的？", "responses": [R1, R2, R3]},
        {"prompt": "如何学习编程？", "chosen": "多写项目。", "rejected": "不用学。", "subset": "安全"},
        {"conversations": [{"from": "system", "value": "你是助手。"}, {"from": "human", "value": "你好"}],
         "chosen": {"from": "gpt", "value": "你好！"}, "rejected": "嗯。"},
    ]
    original = read_prompts(write_rows(rows)).prompts
    assert len(original) == len(rows)
    out = tmp_path / "out.jsonl"
    assert write_jsonl(out, (p.to_dict() for p in original)) == len(rows)
    assert read_prompts(out).prompts == original


# ----------------------------------------------------------------------------- bad input

GOOD = {"id": "好", "prompt": "你好", "responses": [{"id": "r1", "content": "你好！"}]}
RESP = [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "乙"}, {"id": "r3", "content": "丙"}]

BAD_ROWS = {
    # name: (row at line 3, field named in the message, words of the message)
    "missing prompt": ({"responses": RESP}, "prompt", ["missing prompt"]),
    "empty prompt": ({"prompt": "  ", "responses": RESP}, "prompt", ["empty"]),
    "pair missing prompt": ({"chosen": "甲", "rejected": "乙"}, "prompt", ["missing prompt"]),
    "empty response list": ({"prompt": "你好", "responses": []}, "responses", ["empty"]),
    "missing response list": ({"prompt": "你好"}, "responses", ["missing"]),
    "response without content": ({"prompt": "你好", "responses": [{"id": "r1"}]},
                                 "responses[0].content", ["content"]),
    "duplicate response ids": ({"prompt": "你好", "responses": RESP + [{"id": "r2", "content": "丁"}]},
                               "responses[3].id", ["duplicate", "'r2'"]),
    "rank names unknown response": ({"prompt": "你好", "responses": RESP,
                                     "rank": {"r1": 0, "r2": 1, "r3": 2, "r9": 3}},
                                    "rank", ["unknown", "'r9'"]),
    "ranks missing": ({"prompt": "你好", "responses": RESP, "rank": {"r1": 0}},
                      "rank", ["missing", "'r2'", "'r3'"]),
    "rank list too short": ({"prompt": "你好", "responses": RESP, "rank": [0, 1]},
                            "rank", ["2 entries", "3 responses"]),
    "rank not an integer": ({"prompt": "你好", "responses": RESP, "rank": {"r1": 0, "r2": "一", "r3": 2}},
                            "rank", ["integer", "'r2'"]),
    "comparison names unknown response": ({"prompt": "你好", "responses": RESP,
                                           "comparisons": [{"a": "r1", "b": "r9", "label": "g"}]},
                                          "comparisons[0].b", ["unknown", "'r9'"]),
    "comparison label outside g/b/s": ({"prompt": "你好", "responses": RESP,
                                        "comparisons": [{"a": "r1", "b": "r2", "label": "好"}]},
                                       "comparisons[0].label", ["g, b, s", "'好'"]),
    "comparison without label": ({"prompt": "你好", "responses": RESP,
                                  "comparisons": [{"a": "r1", "b": "r2"}]},
                                 "comparisons[0].label", ["missing"]),
    "comparison with itself": ({"prompt": "你好", "responses": RESP,
                                "comparisons": [{"a": "r1", "b": "r1", "label": "g"}]},
                               "comparisons[0]", ["itself"]),
    "annotation label outside 1/2/0": ({"prompt": "你好", "responses": RESP,
                                        "annotations": [["r1", "r2", "3"]]},
                                       "annotations[0][2]", ["'3'"]),
    # the user wrote no 'comparisons' field: the message must point at what they wrote
    "annotation names unknown response": ({"prompt": "你好", "responses": RESP,
                                           "annotations": [["r1", "r2", "1"], ["r1", "r9", "1"]]},
                                          "annotations[1][1]", ["unknown", "'r9'"]),
    "triple names unknown response": ({"prompt": "你好", "responses": RESP,
                                       "triples": [{"ids": ["r1", "r2", "r3"], "ranking": "r1>r2>r3"},
                                                   {"ids": ["r1", "r2", "r9"], "ranking": "r1>r2>r9"}]},
                                      "triples[1].ids", ["unknown", "'r9'"]),
    "malformed triple ranking": ({"prompt": "你好", "responses": RESP,
                                  "triples": [{"ids": ["r1", "r2", "r3"], "ranking": "r1>>r2=r3"}]},
                                 "triples[0].ranking", ["malformed", "r1>>r2=r3"]),
    "triple ranking misses an id": ({"prompt": "你好", "responses": RESP,
                                     "triples": [{"ids": ["r1", "r2", "r3"], "ranking": "r1>r2"}]},
                                    "triples[0].ranking", ["exactly once"]),
    "triple with two ids": ({"prompt": "你好", "responses": RESP,
                             "triples": [{"ids": ["r1", "r2"], "ranking": "r1>r2"}]},
                            "triples[0]", ["ids"]),
    "official pair preference 3": ({"input": "你好", "answer1": "甲", "answer2": "乙", "preference": 3},
                                   "preference", ["1 or 2"]),
    "pair without rejected": ({"prompt": "你好", "chosen": "甲"}, "rejected", ["missing"]),
    "sharegpt unknown role": ({"conversations": [{"from": "机器人", "value": "你好"}],
                               "chosen": "甲", "rejected": "乙"}, "conversations[0].from", ["'机器人'"]),
    "sharegpt ends with gpt": ({"conversations": [{"from": "human", "value": "你好"},
                                                  {"from": "gpt", "value": "你好！"}],
                                "chosen": "甲", "rejected": "乙"}, "conversations", ["last turn"]),
    "sharegpt empty conversations": ({"conversations": [], "chosen": "甲", "rejected": "乙"},
                                     "conversations", ["missing prompt"]),
    "category not strings": ({"prompt": "你好", "responses": RESP, "rank": [0, 1, 2], "category": [1]},
                             "category", ["string"]),
}


@pytest.mark.parametrize("name", list(BAD_ROWS))
def test_bad_row_names_file_line_and_field(write_rows, name):
    row, field, words = BAD_ROWS[name]
    path = write_rows([GOOD, dict(GOOD, id="好2"), row], "bad.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    msg = str(e.value)
    assert f"bad.jsonl:3: {field}: " in msg, msg
    for w in words:
        assert w in msg, msg
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 3, field)


def test_blank_lines_count_in_line_numbers(write_rows):
    path = write_rows([GOOD, "", "   ", {"prompt": "你好", "responses": []}], "bad.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert "bad.jsonl:4: responses: " in str(e.value)


def test_row_that_is_not_an_object(write_rows):
    path = write_rows([GOOD, GOOD, ["你好", "甲"]], "bad.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert "bad.jsonl:3: " in str(e.value) and "JSON object" in str(e.value)


def test_invalid_json_names_file_and_line(write_rows):
    path = write_rows([GOOD, GOOD, '{"prompt": "你好", "responses": [', GOOD], "bad.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert "bad.jsonl:3: invalid JSON" in str(e.value)
    assert e.value.line == 3


def test_non_utf8_bytes_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(GOOD, ensure_ascii=False).encode("utf-8")
    gbk = json.dumps({"prompt": "你好", "responses": ["甲"]}, ensure_ascii=False).encode("gbk")
    path.write_bytes(good + b"\n" + good + b"\n" + gbk + b"\n")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert "bad.jsonl:3: " in str(e.value)
    assert "UTF-8" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(CheemsInputError) as e:
        read_prompts(tmp_path / "不存在.jsonl")
    assert "不存在.jsonl: no such file" in str(e.value)
    with pytest.raises(CheemsInputError):  # skip_invalid skips rows, not files
        read_prompts(tmp_path / "不存在.jsonl", skip_invalid=True)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(CheemsInputError) as e:
        read_prompts(tmp_path)
    assert "directory" in str(e.value)


def test_broken_json_list_names_file(tmp_path):
    path = tmp_path / "list.json"
    path.write_text('[{"prompt": "你好", "responses": ["甲"]},', encoding="utf-8")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path, skip_invalid=True)
    assert str(e.value).startswith(f"{path}: invalid JSON")


def test_skip_invalid_keeps_good_rows_and_reports_bad_ones_by_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(dict(GOOD, id="一"), ensure_ascii=False),
             '{"prompt": "坏的JSON", ',
             json.dumps(dict(GOOD, id="二"), ensure_ascii=False),
             json.dumps({"prompt": "你好", "responses": RESP, "rank": {"r1": 0}}, ensure_ascii=False),
             "",
             json.dumps(dict(GOOD, id="三"), ensure_ascii=False)]
    gbk = json.dumps(dict(GOOD, id="四"), ensure_ascii=False).encode("gbk")
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8") + gbk + b"\n")
    res = read_prompts(path, skip_invalid=True)
    assert [p.id for p in res.prompts] == ["一", "二", "三"]
    assert [e.line for e in res.errors] == [2, 4, 7]
    msgs = [str(e) for e in res.errors]
    assert "bad.jsonl:2: invalid JSON" in msgs[0]
    assert "bad.jsonl:4: rank: ranks missing" in msgs[1]
    assert "bad.jsonl:7: " in msgs[2] and "UTF-8" in msgs[2]


def test_without_skip_invalid_the_first_bad_row_raises(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({"prompt": "你好", "responses": []}) + "\n"
                    + "{坏\n", encoding="utf-8")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert e.value.line == 2


# ----------------------------------------------------------------------------- atomic writes

def _failing_rows():
    yield {"id": "一", "prompt": "你好"}
    yield {"id": "二", "prompt": "再见"}
    raise RuntimeError("生成中途失败")


def test_write_jsonl_failure_keeps_existing_file(tmp_path):
    target = tmp_path / "bench.jsonl"
    target.write_text('{"旧": "内容"}\n', encoding="utf-8")
    with pytest.raises(RuntimeError, match="生成中途失败"):
        write_jsonl(target, _failing_rows())
    assert target.read_text(encoding="utf-8") == '{"旧": "内容"}\n'
    assert sorted(os.listdir(tmp_path)) == ["bench.jsonl"]


def test_write_jsonl_failure_creates_nothing(tmp_path):
    target = tmp_path / "bench.jsonl"
    with pytest.raises(RuntimeError):
        write_jsonl(target, _failing_rows())
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_write_jsonl_writes_utf8_rows_and_counts_them(tmp_path):
    target = tmp_path / "sub" / "out.jsonl"
    assert write_jsonl(target, [{"prompt": "长城"}, {"prompt": "黄河"}]) == 2
    assert target.read_bytes() == '{"prompt":"长城"}\n{"prompt":"黄河"}\n'.encode("utf-8")
    assert os.listdir(target.parent) == ["out.jsonl"]


def test_write_jsonl_file_mode_follows_umask(tmp_path):
    """An atomically written file gets the permissions a plain open() would give it."""
    old = os.umask(0o022)
    try:
        write_jsonl(tmp_path / "out.jsonl", [{"prompt": "你好"}])
        (tmp_path / "plain.jsonl").write_text("{}\n")
    finally:
        os.umask(old)
    assert oct((tmp_path / "plain.jsonl").stat().st_mode & 0o777) == oct(0o644)
    assert oct((tmp_path / "out.jsonl").stat().st_mode & 0o777) == oct(0o644)


# ----------------------------------------------------------------------------- scores

def test_read_scores(write_rows):
    path = write_rows([{"prompt_id": "问1", "response_id": "r1", "score": 1.5},
                       {"prompt_id": "问1", "response_id": "r2", "score": -2},
                       {"prompt_id": 7, "response_id": 8, "score": 0},
                       {"prompt_id": "问1", "response_id": "r1", "score": 1.5}], "scores.jsonl")
    assert read_scores(path) == {("问1", "r1"): 1.5, ("问1", "r2"): -2.0, ("7", "8"): 0.0}


@pytest.mark.parametrize("row, field, words", [
    ({"response_id": "r1", "score": 1.0}, "prompt_id", ["missing 'prompt_id'"]),
    ({"prompt_id": "问1", "score": 1.0}, "response_id", ["missing 'response_id'"]),
    ({"prompt_id": "问1", "response_id": "r1"}, "score", ["missing 'score'"]),
    ({"prompt_id": "问1", "response_id": "r1", "score": "高"}, "score", ["number", "'高'"]),
    ({"prompt_id": "问1", "response_id": "r1", "score": None}, "score", ["number", "None"]),
    ({"prompt_id": "问1", "response_id": "r1", "score": True}, "score", ["number"]),
])
def test_read_scores_bad_row(write_rows, row, field, words):
    good = {"prompt_id": "问1", "response_id": "r0", "score": 0.5}
    path = write_rows([good, row], "scores.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_scores(path)
    msg = str(e.value)
    assert f"scores.jsonl:2: {field}: " in msg, msg
    for w in words:
        assert w in msg, msg


def test_read_scores_invalid_json_and_missing_file(write_rows, tmp_path):
    path = write_rows([{"prompt_id": "问1", "response_id": "r0", "score": 0.5}, "{score: 1}"],
                      "scores.jsonl")
    with pytest.raises(CheemsInputError, match=r"scores\.jsonl:2: invalid JSON"):
        read_scores(path)
    with pytest.raises(CheemsInputError, match="no such file"):
        read_scores(tmp_path / "无.jsonl")


# ----------------------------------------------------------------------------- real data

def test_shared_real_data_parses(shared_data):
    demo, jsonl = shared_data / "dpo_zh_demo.json", shared_data / "dpo_zh_500.jsonl"
    if not demo.is_file() or not jsonl.is_file():
        pytest.skip("optional real data files are absent")
    a = read_prompts(demo)
    b = read_prompts(jsonl)
    assert (len(a.prompts), a.errors) == (300, [])
    assert (len(b.prompts), b.errors) == (499, [])
    for p in a.prompts + b.prompts:
        assert len(p.responses) == 2
        assert p.rank == {p.responses[0].id: 0, p.responses[1].id: 1}  # chosen first
    # the data's README: 289 distinct prompts, 64 with a system turn, 23 prompts in both files
    ids_a = {p.id for p in a.prompts}
    assert len(ids_a) == 289
    assert sum(isinstance(p.prompt, list) and p.prompt[0]["role"] == "system" for p in a.prompts) == 64
    assert len(ids_a & {p.id for p in b.prompts}) == 23


# --- additions: byte order mark, repeated contents, repeated prompt ids -----------------------

def test_utf8_byte_order_mark_is_accepted(tmp_path):
    from cheems.formats import read_prompts

    path = tmp_path / "bom.jsonl"
    row = {"id": "q1", "prompt": "你好", "responses": ["甲", "乙"]}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
    (p,) = read_prompts(path).prompts
    assert p.id == "q1" and [r.content for r in p.responses] == ["甲", "乙"]


IDENTICAL_TEXT_ROWS = {
    "ranked list": {"prompt": "问", "responses": ["甲", "乙", "甲"]},
    "official pair": {"input": "你好", "answer1": "甲", "answer2": "甲", "preference": 1},
    "alpaca ranking": {"instruction": "写诗", "output": ["甲", "乙", "甲"]},
    "autoj": {"prompt": "你好", "response 1": "甲", "response 2": "甲", "label": 0},
    "pair": {"prompt": "你好", "chosen": "一样的回答", "rejected": "一样的回答"},
    "rmb": {"conversation_input": [{"role": "user", "content": "你好"}], "chosen": {"answer": "同"},
            "reject": {"answer": "同"}, "category_path": "帮助/日常"},
}


@pytest.mark.parametrize("name", list(IDENTICAL_TEXT_ROWS))
def test_identical_texts_in_one_row_are_read_with_distinct_ids(tmp_path, name):
    """Two responses with the same text are read (a warning downstream, not an error): the later one's
    id made from its content gets ``#2``, and the row keeps its ranking over the distinct ids."""
    from cheems.formats import read_prompts
    from cheems.records import identical_responses, response_id

    path = tmp_path / "twins.jsonl"
    path.write_text(json.dumps(IDENTICAL_TEXT_ROWS[name], ensure_ascii=False) + "\n", encoding="utf-8")
    (p,) = read_prompts(path).prompts
    ids = [r.id for r in p.responses]
    assert len(set(ids)) == len(ids)
    twin = next(r for r in p.responses if r.id.endswith("#2"))
    assert twin.id == response_id(twin.content) + "#2"
    assert identical_responses(p) >= 1
    assert p.rank is None or set(p.rank) <= set(ids)


def test_check_unique_ids_points_at_both_rows():
    from cheems.formats import check_unique_ids
    from cheems.records import CheemsInputError, Prompt, Response

    a = Prompt("1", "你好", [Response("r1", "甲")])
    b = Prompt("1", "再见", [Response("r1", "乙")])
    check_unique_ids([a])
    with pytest.raises(CheemsInputError) as e:
        check_unique_ids([a, b], [("x.jsonl", 3), ("y.jsonl", 7)])
    assert str(e.value).startswith("y.jsonl:7: id: ")
    assert "x.jsonl:3" in str(e.value)


def test_merge_prompts_joins_rows_of_one_prompt_and_keeps_others():
    from cheems.formats import merge_prompts
    from cheems.records import Comparison, Prompt, Response

    t1 = Prompt("p", "问", [Response("a", "甲"), Response("b", "乙")], comparisons=[Comparison("a", "b", "g")])
    t2 = Prompt("p", "问", [Response("b", "乙"), Response("c", "丙")], comparisons=[Comparison("b", "c", "s")])
    other = Prompt("q", "别的", [Response("a", "丁")])
    merged = merge_prompts([t1, other, t2])
    assert [m.id for m in merged] == ["p", "q"]
    assert [r.id for r in merged[0].responses] == ["a", "b", "c"]
    assert [(c.a, c.b, c.label) for c in merged[0].comparisons] == [("a", "b", "g"), ("b", "c", "s")]
    assert merged[1] is other


def test_parquet_rows_read_like_jsonl(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"id": "q1", "prompt": "一加一等于几？", "chosen": "二", "rejected": "三", "subset": "math"},
            {"id": "q2", "prompt": "中国的首都是哪里？", "chosen": "北京", "rejected": "上海", "subset": "math"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pairs.parquet")
    got = read_prompts(tmp_path / "pairs.parquet").prompts
    assert [p.id for p in got] == ["q1", "q2"]
    assert [[r.content for r in p.responses] for p in got] == [["二", "三"], ["北京", "上海"]]
    assert all(p.rank == {p.responses[0].id: 0, p.responses[1].id: 1} for p in got)
    bad = [{"id": "q3", "prompt": "问", "chosen": "同", "rejected": None}]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "bad.parquet")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(tmp_path / "bad.parquet")
    assert "bad.parquet:1: rejected: " in str(e.value)
