"""Layouts cheems does not read get one line naming the layout and the closest formats, not a
missing field or an invalid-JSON error on every line (src/cheems/formats/layouts.py)."""

from __future__ import annotations

import json

import pytest

from cheems.formats import iter_rows, read_prompts, read_scores
from cheems.records import CheemsInputError

SEE = "(see docs/formats.md)"


def refused(path, **kw) -> CheemsInputError:
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path, **kw)
    msg = str(e.value)
    assert "looks like" in msg and "cheems reads" in msg and msg.endswith(SEE), msg
    assert "\n" not in msg
    return e.value


@pytest.mark.parametrize("name, text, layout, closest", [
    ("pairs.csv", "prompt,chosen,rejected\n你好,你好！,嗯\n", "a CSV file", "`pair`"),
    ("scores.csv", "prompt,response,score\n你好,你好！,3\n", "a CSV file", "`scored`"),
    ("ranked.csv", "prompt,最好,次之\n你好,你好！,嗯\n", "a CSV file", "ranked lists"),
    ("ranked.txt", "prompt\t最好\t次之\n你好\t你好！\t嗯\n", "tab-separated text in a file not named .tsv",
     "ranked lists"),
    ("pairs.jsonl.bak", "prompt,chosen,rejected\n你好,你好！,嗯\n", "comma-separated text", "`pair`"),
    ("wrapped.json", json.dumps({"version": 2, "data": [{"prompt": "你好", "responses": ["甲", "乙"]}]},
                                ensure_ascii=False, indent=2),
     "one JSON object holding its rows under 'data'", "a JSON list of rows"),
    ("wrapped_one_line.json", json.dumps({"data": [{"prompt": "你好", "responses": ["甲", "乙"]}]},
                                         ensure_ascii=False), "holding its rows under 'data'", "JSONL"),
    ("config.json", json.dumps({"model": "模型甲", "temperature": 0.7}, indent=2), "one JSON object (keys: model",
     "a JSON list of rows"),
])
def test_file_layouts_are_one_line_naming_the_file(tmp_path, name, text, layout, closest):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    err = refused(path)
    assert err.file == str(path) and err.line is None
    assert layout in err.message and closest in err.message, err.message
    with pytest.raises(CheemsInputError, match="this looks like"):
        read_prompts(path, skip_invalid=True)  # a file-level fault, never skipped row by row


def test_excel_workbook(tmp_path):
    path = tmp_path / "标注.xlsx"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    assert "an Excel workbook" in refused(path).message


@pytest.mark.parametrize("row, layout", [
    ({"prompt_id": "q1", "response_id": "r1", "score": 0.5}, "a SCORES file"),
    ({"messages": [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "你好！"}]},
     "chat fine-tuning rows"),
    ({"prompt": "写一句春天的诗。", "output": "春风又绿江南岸。"}, "fine-tuning rows (one response"),
    ({"question_id": 1, "category": "数学计算", "subcategory": "初等数学", "question": "3+5等于几？", "reference": "8"},
     "AlignBench questions"),
    ({"id": "q1", "prompt": "介绍一下苏州园林。"}, "prompts without responses"),
])
def test_row_layouts_name_the_layout_at_the_first_row(write_rows, row, layout):
    path = write_rows([row, row], "data.jsonl")
    err = refused(path)
    assert (err.file, err.line, err.field) == (str(path), 1, "responses")
    assert layout in err.message and "missing response list" in err.message


def test_files_other_readers_take_are_not_refused_there(write_rows):
    scores = write_rows([{"prompt_id": "q1", "response_id": "r1", "score": 0.5}], "scores.jsonl")
    assert read_scores(scores) == {("q1", "r1"): 0.5}
    prompts = write_rows([{"id": "q1", "prompt": "介绍一下苏州园林。"}], "prompts.jsonl")
    assert [obj for _, obj in iter_rows(prompts)] == [{"id": "q1", "prompt": "介绍一下苏州园林。"}]


def test_jsonl_and_json_lists_pass_untouched(write_rows, tmp_path):
    row = {"prompt": "你好", "responses": ["你好！", "嗯。"]}
    assert len(read_prompts(write_rows([row, row])).prompts) == 2
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([row], ensure_ascii=False, indent=2), encoding="utf-8")
    assert len(read_prompts(listed).prompts) == 1


def test_broken_jsonl_still_names_its_line(write_rows):
    path = write_rows([{"prompt": "你好", "responses": ["甲", "乙"]}, '{"prompt": "你好", "responses": ['])
    with pytest.raises(CheemsInputError, match=r"data\.jsonl:2: invalid JSON"):
        read_prompts(path)


@pytest.mark.parametrize("sender", [["human"], {"name": "human"}, 1])
def test_sharegpt_from_that_is_not_a_string_is_one_error_naming_the_field(write_rows, sender):
    row = {"conversations": [{"from": "system", "value": "你是导游。"}, {"from": sender, "value": "杭州哪里好玩？"}],
           "chosen": {"from": "gpt", "value": "西湖。"}, "rejected": {"from": "gpt", "value": "不知道。"}}
    path = write_rows([row])
    with pytest.raises(CheemsInputError) as e:
        read_prompts(path)
    assert (e.value.line, e.value.field) == (1, "conversations[1].from")
    assert "'from' must be system, human or gpt" in str(e.value)
