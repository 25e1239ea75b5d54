"""The ``scored`` format (one response a row, ranked by score once the rows of a prompt are joined)
and TSV files (ranked lists, or scored rows with a rank column).

The join is the one the ``task`` format goes through: rows of one prompt id are merged by
:func:`cheems.formats.merge_prompts`, then :func:`cheems.formats.scored.rank_scored` ranks them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.formats import detect_format, merge_prompts, parse_row, read_prompts
from cheems.formats.scored import parse_scored, rank_scored
from cheems.records import CheemsInputError


def joined(path, fmt=None):
    """The prompts of a file of scored rows, the rows of one prompt joined and ranked."""
    res = read_prompts(path, fmt=fmt)
    return rank_scored(merge_prompts(res.prompts, res.locations()))


def ranks_by_content(p):
    return {r.content: p.rank[r.id] for r in p.responses}


# ------------------------------------------------------------------------ the three public layouts

LLMEVAL2 = [  # results/human-score/*.json: a JSON list, one model's answer a row
    {"question_uuid": "Chemistry_1", "dialog_uuid": "模型甲_Chemistry_1", "llm_name": "模型甲",
     "dialog": [{"role": "user", "content": "请写出实验室制取氧气的一个化学方程式。"},
                {"role": "llm", "content": "2KMnO4 → K2MnO4 + MnO2 + O2↑（加热）"}],
     "hint": "高锰酸钾受热分解", "type": "A", "stars": {"Correctness": 3, "Explanation Correctness": 2}},
    {"question_uuid": "Chemistry_1", "dialog_uuid": "模型乙_Chemistry_1", "llm_name": "模型乙",
     "dialog": [{"role": "user", "content": "请写出实验室制取氧气的一个化学方程式。"},
                {"role": "llm", "content": "H2O → H2 + O2"}],
     "hint": "高锰酸钾受热分解", "type": "A", "stars": {"Correctness": 1, "Explanation Correctness": 1}},
    {"question_uuid": "Chemistry_1", "dialog_uuid": "模型丙_Chemistry_1", "llm_name": "模型丙",
     "dialog": [{"role": "user", "content": "请写出实验室制取氧气的一个化学方程式。"},
                {"role": "llm", "content": "2H2O2 → 2H2O + O2↑（MnO2 催化）"}],
     "hint": "高锰酸钾受热分解", "type": "A", "stars": {"Correctness": 3, "Explanation Correctness": 1}},
]


def test_llmeval2_rows_join_into_one_prompt_ranked_by_the_sum_of_stars(tmp_path):
    path = tmp_path / "Chemistry_data.json"
    path.write_text(json.dumps(LLMEVAL2, ensure_ascii=False), encoding="utf-8")
    (p,) = joined(path)
    assert p.id == "Chemistry_1" and p.prompt == "请写出实验室制取氧气的一个化学方程式。"
    assert [r.id for r in p.responses] == ["模型甲_Chemistry_1", "模型乙_Chemistry_1", "模型丙_Chemistry_1"]
    assert [r.model for r in p.responses] == ["模型甲", "模型乙", "模型丙"]
    assert p.rank == {"模型甲_Chemistry_1": 0, "模型丙_Chemistry_1": 1, "模型乙_Chemistry_1": 2}  # 5, 4, 2 stars
    assert p.responses[0].extra["stars"] == {"Correctness": 3, "Explanation Correctness": 2}
    assert p.extra["hint"] == "高锰酸钾受热分解" and p.extra["ranked_by"] == "stars"


def test_llmeval2_by_one_dimension_ties_equal_stars(tmp_path):
    path = tmp_path / "Chemistry_data.json"
    path.write_text(json.dumps(LLMEVAL2, ensure_ascii=False), encoding="utf-8")
    (p,) = joined(path, fmt="scored:stars.Correctness")
    assert p.rank == {"模型甲_Chemistry_1": 0, "模型丙_Chemistry_1": 0, "模型乙_Chemistry_1": 1}


ALIGNBENCH = [  # one judgment file per model: each question once in each
    [{"question_id": 31, "category": "逻辑推理", "subcategory": "常识推理", "question": "一年中哪个月最短？",
      "reference": "二月。", "model_id": "模型甲", "answer_id": "31_模型甲", "answer": "二月，平年28天，闰年29天。",
      "judgment": "回答正确且完整。", "rating": {"事实正确性": 9, "综合得分": 9}, "score": 9}],
    [{"question_id": 31, "category": "逻辑推理", "subcategory": "常识推理", "question": "一年中哪个月最短？",
      "reference": "二月。", "model_id": "模型乙", "answer_id": "31_模型乙", "answer": "二月。",
      "judgment": "正确但简略。", "rating": {"事实正确性": 9, "综合得分": 7}, "score": 7}],
    [{"question_id": 31, "category": "逻辑推理", "subcategory": "常识推理", "question": "一年中哪个月最短？",
      "reference": "二月。", "model_id": "模型丙", "answer_id": "31_模型丙", "answer": "二月。平年有28天。",
      "judgment": "正确。", "rating": {"事实正确性": 9, "综合得分": 7}, "score": 7}],
]


def test_alignbench_judgments_of_several_models_join_with_ties(write_rows):
    paths = [write_rows(rows, f"{rows[0]['model_id']}.jsonl") for rows in ALIGNBENCH]
    from cheems.formats import read_many
    res = read_many(paths)
    (p,) = rank_scored(merge_prompts(res.prompts, res.locations()))
    assert p.id == "31" and p.category == ["逻辑推理", "常识推理"] and p.extra["reference"] == "二月。"
    assert p.rank == {"31_模型甲": 0, "31_模型乙": 1, "31_模型丙": 1}
    assert p.responses[1].extra["judgment"] == "正确但简略。"
    by_rating = rank_scored(merge_prompts(read_many(paths, fmt="scored:rating.事实正确性").prompts))
    assert set(by_rating[0].rank.values()) == {0}


def test_alignbench_unparsed_score_is_refused(write_rows):
    row = dict(ALIGNBENCH[0][0], score=-1)
    path = write_rows([row], "模型甲.jsonl")
    with pytest.raises(CheemsInputError, match=r"模型甲\.jsonl:1: score: score is -1: AlignBench"):
        read_prompts(path)


HELPSTEER = [
    {"prompt": "用三句话介绍一下长城。", "response": "长城是中国古代的军事防御工程。它东起山海关，西至嘉峪关。它是世界文化遗产。",
     "helpfulness": 4, "correctness": 4, "coherence": 4, "complexity": 1, "verbosity": 1},
    {"prompt": "用三句话介绍一下长城。", "response": "长城很长。",
     "helpfulness": 1, "correctness": 3, "coherence": 4, "complexity": 0, "verbosity": 0},
    {"prompt": "用三句话介绍一下长城。", "response": "长城是古代修的城墙，用来防御北方游牧民族，现在是著名景点。",
     "helpfulness": 3, "correctness": 4, "coherence": 4, "complexity": 1, "verbosity": 1},
]


def test_helpsteer_ranks_by_helpfulness_or_a_chosen_attribute(write_rows):
    path = write_rows(HELPSTEER)
    assert {detect_format(r) for r in HELPSTEER} == {"scored"}
    (p,) = joined(path)
    assert list(ranks_by_content(p).values()) == [0, 2, 1]
    assert p.responses[1].extra["correctness"] == 3
    (q,) = joined(path, fmt="scored:correctness")
    assert list(ranks_by_content(q).values()) == [0, 1, 0]


@pytest.mark.parametrize("row, field, words", [
    ({"prompt": "你好", "response": "你好！"}, "score", ["no score to rank by", "scored:ATTRIBUTE"]),
    ({"prompt": "你好", "response": "你好！", "score": "高"}, "score", ["no score to rank by"]),
    ({"prompt": "你好", "response": 3, "score": 1}, "response", ["not a string"]),
    ({"prompt": "你好", "response": "你好！", "score": float("nan")}, "score", ["no score"]),
    ({"dialog": [{"role": "user", "content": "你好"}], "score": 1}, "dialog", ["answer"]),
    ({"dialog": [{"role": "llm", "content": "你好"}, {"role": "user", "content": "嗯"}], "score": 1},
     "dialog", ["last turn"]),
])
def test_bad_scored_row_is_one_line_naming_the_field(write_rows, row, field, words):
    path = write_rows([HELPSTEER[0], row], "bad.jsonl")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert (e.value.line, e.value.field) == (2, field), str(e.value)
    for w in words:
        assert w in str(e.value)


def test_chosen_attribute_missing_names_it(write_rows):
    path = write_rows([HELPSTEER[0]])
    with pytest.raises(CheemsInputError, match=r"data\.jsonl:1: harmlessness: 'harmlessness' must be a number"):
        read_prompts(path, fmt="scored:harmlessness")


def test_format_option_is_checked():
    with pytest.raises(CheemsInputError, match="takes no option"):
        parse_row({"prompt": "你好", "chosen": "甲", "rejected": "乙"}, "pair:x")
    with pytest.raises(CheemsInputError, match="needs an option"):
        parse_row(HELPSTEER[0], "scored:")
    with pytest.raises(CheemsInputError, match="unknown format"):
        parse_row(HELPSTEER[0], "scores:helpfulness")


# ------------------------------------------------------------------------ grouping: a plain reference

def reference_ranks(rows: list[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """{prompt: {response: rank}}: the first score of each response; rank = how many distinct
    scores of the prompt are higher."""
    scores: dict[str, dict[str, int]] = {}
    for prompt, response, score in rows:
        scores.setdefault(prompt, {}).setdefault(response, score)
    return {p: {r: len({v for v in s.values() if v > x}) for r, x in s.items()} for p, s in scores.items()}


ROWS = st.lists(st.tuples(st.sampled_from(["问甲", "问乙", "问丙"]), st.sampled_from(["答一", "答二", "答三", "答四"]),
                          st.integers(0, 4)), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_grouping_matches_a_plain_reference(rows):
    prompts = [parse_scored({"prompt": p, "response": r, "helpfulness": s}) for p, r, s in rows]
    got = {p.prompt: ranks_by_content(p) for p in rank_scored(merge_prompts(prompts))}
    assert got == reference_ranks(rows)
    order = list(dict.fromkeys(p for p, _, _ in rows))
    assert [p.prompt for p in rank_scored(merge_prompts(prompts))] == order  # first-seen order


@settings(max_examples=100, deadline=None)
@given(ROWS)
def test_rank_column_lower_is_better(rows):
    prompts = [parse_scored({"prompt": p, "response": r, "rank": 4 - s}) for p, r, s in rows]
    got = {p.prompt: ranks_by_content(p) for p in rank_scored(merge_prompts(prompts))}
    assert got == reference_ranks(rows)


# ------------------------------------------------------------------------ TSV files

def write_tsv(tmp_path: Path, text: str, name: str = "data.tsv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_ranked_lists(tmp_path):
    path = write_tsv(tmp_path, "prompt\tresponse_1\tresponse_2\tresponse_3\tcategory\n"
                               "用一句话介绍西湖。\t西湖位于杭州，以“西湖十景”闻名。\t西湖在杭州。\t不知道。\t地理\n"
                               "\n"
                               "1+1等于几？\t等于2。\t等于3。\t\t数学\n")
    res = read_prompts(path)
    assert res.lines == [2, 4]
    a, b = res.prompts
    assert [r.content for r in a.responses] == ["西湖位于杭州，以“西湖十景”闻名。", "西湖在杭州。", "不知道。"]
    assert [a.rank[r.id] for r in a.responses] == [0, 1, 2] and a.category == ["地理"]
    assert [r.content for r in b.responses] == ["等于2。", "等于3。"] and b.subset is None


def test_tsv_quoted_cells_hold_tabs_and_newlines(tmp_path):
    path = write_tsv(tmp_path, 'prompt\t最好\t次之\n"写两行诗。"\t"白日依山尽，\n黄河入海流。"\t"床前\t明月光"\n'
                               "问好。\t你好！\t嗯。\n")
    res = read_prompts(path)
    assert res.prompts[0].responses[0].content == "白日依山尽，\n黄河入海流。"
    assert res.prompts[0].responses[1].content == "床前\t明月光"
    assert res.lines == [2, 4]


def test_tsv_with_a_rank_column_joins_scored_rows(tmp_path):
    path = write_tsv(tmp_path, "prompt\tresponse\trank\n"
                               "推荐一本入门编程书。\t《Python编程：从入门到实践》。\t0\n"
                               "推荐一本入门编程书。\t随便。\t2\n"
                               "推荐一本入门编程书。\t《笨办法学Python》。\t0\n")
    assert [detect_format({"prompt": "x", "response": "y", "rank": 0})] == ["scored"]
    (p,) = joined(path)
    assert list(ranks_by_content(p).values()) == [0, 1, 0]


def test_tsv_ranks_by_a_chosen_numeric_column(tmp_path):
    path = write_tsv(tmp_path, "prompt\thelpfulness\tresponse\tcorrectness\n"
                               "写一句关于秋天的诗。\t3\t停车坐爱枫林晚。\t4\n"
                               "写一句关于秋天的诗。\t3\t秋天来了。\t2\n")
    (p,) = joined(path, fmt="scored:correctness")
    assert list(ranks_by_content(p).values()) == [0, 1]
    assert p.responses[0].extra == {"helpfulness": 3, "correctness": 4}


@pytest.mark.parametrize("text, line, words", [
    ("问题\t回答一\t回答二\n你好\t甲\t乙\n", 1, ["first column must be 'prompt'"]),
    ("prompt\tresponse_1\n你好\t甲\n", 1, ["two or more response columns"]),
    ("prompt\trank\n你好\t0\n", 1, ["'response' column"]),
    ("prompt\tresponse_1\tresponse_2\n你好\t甲\t乙\n再见\t甲\n", 3, ["2 cells", "header has 3"]),
])
def test_bad_tsv_names_file_and_line(tmp_path, text, line, words):
    path = write_tsv(tmp_path, text, "bad.tsv")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert str(e.value).startswith(f"{path}:{line}: "), str(e.value)
    for w in words:
        assert w in str(e.value)


def test_tsv_rank_that_is_not_a_number_names_the_line(tmp_path):
    path = write_tsv(tmp_path, "prompt\tresponse\trank\n你好\t你好！\t0\n你好\t嗯\t第二\n", "bad.tsv")
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert (e.value.line, e.value.field) == (3, "score") and "no score to rank by" in str(e.value)
