"""Scored rows of one question joined by its question id, as LLMEval-2's human-score files need.

LLMEval-2 (``results/human-score/*.json``, 12 subject files, 480 questions x 20 models) holds one
model's answer a row. In 103 of its questions some models were shown a slightly different wording
(``Biological_Science_13``...): the rows are still one question, keyed by ``question_uuid``, so
every command joins them under it, keeps the first wording and says so in one note. Two models
that give the same answer text are two answers (each row has its own answer id and human score).
The rows below are written by the team in that shape; the ``question_id`` / ``answer_id`` /
``score`` shape (AlignBench's judgments) is read by the same reader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cheems.benchmark
import cheems.formats.columnar_sums
from cheems.formats import NotPlain, read_many

QUESTION = "光合作用的产物是什么？"
REWORDED = "光合作用的产物是什么?请简要回答。"  # another model's wording of question 生物_1


def llmeval2_row(qid: str, model: str, question: str, answer: str, correctness: int) -> dict:
    """One row of an LLMEval-2 human-score file: one model's answer to one question, with its stars."""
    return {"question_uuid": qid, "dialog_uuid": f"{model}_{qid}", "llm_name": model,
            "dialog": [{"role": "user", "content": question}, {"role": "llm", "content": answer}],
            "hint": "葡萄糖和氧气", "type": "A", "stars": {"Correctness": correctness, "Explanation Correctness": 1}}


FIRST_FILE = [  # 生物_data.json: models 甲 and 乙
    llmeval2_row("生物_1", "模型甲", QUESTION, "葡萄糖和氧气，光能转化为化学能储存在葡萄糖中。", 3),
    llmeval2_row("生物_1", "模型乙", QUESTION, "二氧化碳。", 1),
    llmeval2_row("生物_2", "模型甲", "细胞膜的主要成分是什么？", "磷脂和蛋白质。", 3),
    llmeval2_row("生物_2", "模型乙", "细胞膜的主要成分是什么？", "磷脂和蛋白质。", 2),  # the same text as 模型甲's
]
SECOND_FILE = [  # 生物_extra.json: model 丙 saw 生物_1 worded otherwise
    llmeval2_row("生物_1", "模型丙", REWORDED, "葡萄糖和氧气。", 2),
    llmeval2_row("生物_2", "模型丙", "细胞膜的主要成分是什么？", "纤维素。", 1),
]
NOTE = ("note: 1 question(s) are worded differently in some of their scored rows (the first at "
        "生物_extra.json:1, question id '生物_1'); each is one prompt under its question id, worded as in its "
        "first row")


@pytest.fixture
def llmeval2(tmp_path: Path) -> list[Path]:
    """The two subject files, as JSON lists (LLMEval-2's layout)."""
    paths = []
    for name, rows in (("生物_data.json", FIRST_FILE), ("生物_extra.json", SECOND_FILE)):
        path = tmp_path / name
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
        paths.append(path)
    return paths


def test_eval_joins_a_question_worded_two_ways_keeping_the_first_wording(llmeval2, run_cli, tmp_path):
    r = run_cli("eval", *(p.name for p in llmeval2), "--scorer", "length", "--skip-invalid", "--bootstrap", "0",
                "--json", "report.json")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(NOTE) == 1, r.stderr
    assert "skipped" not in r.stderr
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["rows"]["items"] == 2  # two questions, each one prompt of three answers
    joined = {p.id: p for p in read_many(llmeval2).prompts}
    assert joined["生物_1"].prompt == QUESTION  # the first wording, in file order
    assert [r.model for r in joined["生物_1"].responses] == ["模型甲", "模型乙", "模型丙"]
    assert joined["生物_1"].rank == {"模型甲_生物_1": 0, "模型丙_生物_1": 1, "模型乙_生物_1": 2}


def test_the_same_answer_text_under_two_answer_ids_is_two_answers(llmeval2, run_cli, tmp_path):
    """Each row is one model's answer with its own id and human score: equal texts stay apart,
    ranked by their own scores, and `eval` counts the row under identical responses."""
    r = run_cli("score", *(p.name for p in llmeval2), "--scorer", "length", "-o", "scores.jsonl")
    assert r.returncode == 0, r.stderr
    assert NOTE in r.stderr and "1 row(s) hold two responses of identical text" in r.stderr
    scored = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [s["response_id"] for s in scored if s["prompt_id"] == "生物_2"] == \
        ["模型甲_生物_2", "模型乙_生物_2", "模型丙_生物_2"]
    (p,) = [p for p in read_many(llmeval2).prompts if p.id == "生物_2"]
    assert p.rank == {"模型甲_生物_2": 0, "模型乙_生物_2": 1, "模型丙_生物_2": 2}  # 4, 3 and 2 stars


def test_alignbench_shaped_rows_keep_equal_answers_apart_by_answer_id(run_cli, write_rows):
    """``question_id`` / ``answer_id`` / ``score`` rows: one question worded two ways, joined; two
    answers of one text under two answer ids, two responses; without an answer id, one (its id is
    the md5 of the text, the first row's score counts)."""
    rows = [{"question_id": 7, "question": "一年有几个季节？", "answer_id": "7_甲", "answer": "四个。", "score": 9},
            {"question_id": 7, "question": "一年有几个季节?", "answer_id": "7_乙", "answer": "四个。", "score": 6},
            {"question_id": 7, "question": "一年有几个季节？", "answer_id": "7_丙", "answer": "三个。", "score": 2},
            {"question_id": 8, "question": "水的化学式？", "answer": "H2O。", "score": 9},
            {"question_id": 8, "question": "水的化学式？", "answer": "H2O。", "score": 3},
            {"question_id": 8, "question": "水的化学式？", "answer": "HO。", "score": 1}]
    write_rows(rows, "judgments.jsonl")
    r = run_cli("validate", "judgments.jsonl")
    assert r.returncode == 0, r.stdout
    assert "2 valid row(s), 5 responses, 2 ranked" in r.stdout
    assert "1 question(s) are worded differently" in r.stdout and "judgments.jsonl:2, question id '7'" in r.stdout


def test_stats_and_rank_say_it_on_the_columnar_and_the_object_path(llmeval2, run_cli, tmp_path, monkeypatch):
    """The scored rows go to the general readers on both paths: the same output, note included.
    `stats` reads each file on its own (here all the rows in one JSONL file); `rank` refuses the
    scored prompts (already ranked: no comparisons to rank from) and ranks the annotated row."""
    annotated = {"id": "标注-1", "prompt": "推荐一本入门的编程书。", "responses": [
        {"id": "a", "content": "《Python编程：从入门到实践》。"}, {"id": "b", "content": "随便。"}],
        "comparisons": [{"a": "a", "b": "b", "label": "g"}]}
    (tmp_path / "标注.jsonl").write_text(json.dumps(annotated, ensure_ascii=False) + "\n", encoding="utf-8")
    (tmp_path / "生物.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                               for r in FIRST_FILE + SECOND_FILE), encoding="utf-8")
    for args, note in ((["stats", "生物.jsonl"], NOTE.replace("生物_extra.json:1", "生物.jsonl:5")),
                       (["rank", "标注.jsonl", *(p.name for p in llmeval2), "-o", "out.jsonl", "--skip-invalid"], NOTE)):
        columnar = run_cli(*args)
        written = (tmp_path / "out.jsonl").read_bytes() if args[0] == "rank" else None
        with monkeypatch.context() as mp:  # every columnar path off: the object path, the reference
            mp.setattr(cheems.formats.columnar_sums, "columnar_stats", lambda *a, **k: None)
            mp.setattr(cheems.benchmark, "_rank_plain", _object_path_only)
            reference = run_cli(*args)
        assert (columnar.returncode, columnar.stdout, columnar.stderr) == \
            (reference.returncode, reference.stdout, reference.stderr)
        assert columnar.returncode == 0 and note in columnar.stderr, columnar.stderr
        if written is not None:
            assert written == (tmp_path / "out.jsonl").read_bytes()
            assert [json.loads(line)["id"] for line in written.decode("utf-8").splitlines()] == ["标注-1"]


def _object_path_only(*args, **kwargs):
    raise NotPlain("the object path, as the reference")


def test_cheems_rows_naming_two_prompts_under_one_id_stay_an_error(run_cli, write_rows):
    """Only scored rows are keyed by the source's question id: two annotation rows of one id
    that hold different prompts are a mistake, and `rank` names it."""
    row = {"id": "题-1", "prompt": "一年有几个季节？", "responses": [{"id": "a", "content": "四个。"},
                                                            {"id": "b", "content": "三个。"}],
           "comparisons": [{"a": "a", "b": "b", "label": "g"}]}
    write_rows([row, {**row, "prompt": "一年有几个月？"}], "annotations.jsonl")
    r = run_cli("rank", "annotations.jsonl", "-o", "out.jsonl")
    assert r.returncode == 2
    assert "annotations.jsonl:2: id: prompt id '题-1' names two different prompts" in r.stderr


def test_data_get_writes_the_rows_and_reading_them_joins_as_the_files_do(llmeval2, run_cli, tmp_path):
    """A hub copy of the files (``hf:``, the generic conversion) keeps one answer a row; `eval`
    of the converted file joins them as it joins the files: the same note, the same scores."""
    pytest.importorskip("datasets")
    source = tmp_path / "src"
    source.mkdir()
    rows = FIRST_FILE + SECOND_FILE
    (source / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                        encoding="utf-8")
    got = run_cli("data", "get", "hf:team/llmeval2", "--source", "src", "-o", "got.jsonl")
    assert got.returncode == 0, got.stderr
    r = run_cli("eval", "got.jsonl", "--scorer", "length", "--bootstrap", "0", "--json", "got.json")
    assert r.returncode == 0, r.stderr
    assert NOTE.replace("生物_extra.json:1", "got.jsonl:5") in r.stderr
    files = run_cli("eval", *(p.name for p in llmeval2), "--scorer", "length", "--bootstrap", "0",
                    "--json", "files.json")
    reports = [json.loads((tmp_path / name).read_text(encoding="utf-8")) for name in ("got.json", "files.json")]
    assert files.returncode == 0 and reports[0]["overall"] == reports[1]["overall"]
