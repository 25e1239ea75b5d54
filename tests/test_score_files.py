"""SCORES files are checked row by row (`cheems.formats.read_scores`), wherever they are read:
`eval --scores`, `bon --scores` and `bon --gold`."""

from __future__ import annotations

import json

import pytest

from cheems.formats import Scores, read_scores
from cheems.records import CheemsInputError
from tests.conftest import run_cli_in, write_jsonl_rows
from tests.test_cli import assert_one_line_error

BENCH = [{"id": "问1", "prompt": "一斤苹果八元，买三斤半要多少钱？",
          "responses": [{"id": "r1", "content": "二十八元。"}, {"id": "r2", "content": "二十四元。"}],
          "rank": {"r1": 0, "r2": 1}},
         {"id": "问2", "prompt": "写一句关于春天的诗。",
          "responses": [{"id": "r1", "content": "春风又绿江南岸。"}, {"id": "r2", "content": "春天来了。"}],
          "rank": {"r1": 0, "r2": 1}}]
SCORES = [{"prompt_id": "问1", "response_id": "r1", "score": 2.5}, {"prompt_id": "问1", "response_id": "r2", "score": 1},
          {"prompt_id": "问2", "response_id": "r1", "score": 0.5}, {"prompt_id": "问2", "response_id": "r2", "score": -1}]


def test_the_same_score_twice_counts_once_with_a_note(tmp_path):
    path = write_jsonl_rows(tmp_path / "s.jsonl", [*SCORES, SCORES[0], dict(SCORES[2], score=0.5)])
    scores = read_scores(path)
    assert isinstance(scores, Scores) and scores.repeated == 2
    assert scores == {(r["prompt_id"], r["response_id"]): float(r["score"]) for r in SCORES}
    write_jsonl_rows(tmp_path / "bench.jsonl", BENCH)
    r = run_cli_in(tmp_path, "eval", "bench.jsonl", "--scores", "s.jsonl", "--bootstrap", "0")
    assert r.returncode == 0, r.stderr
    assert "note: 2 row(s) of the scores file repeat an earlier row's score; each counts once" in r.stderr
    write_jsonl_rows(tmp_path / "gold.jsonl", [*SCORES, SCORES[3]])
    r = run_cli_in(tmp_path, "bon", "bench.jsonl", "--scores", "s.jsonl", "--gold", "gold.jsonl", "-n", "1,2",
                   "--bootstrap", "0", "--json", "bon.json")
    assert r.returncode == 0, r.stderr
    assert "note: 3 row(s) of the scores file repeat an earlier row's score; each counts once" in r.stderr
    assert json.loads((tmp_path / "bon.json").read_text(encoding="utf-8"))["repeated_score_rows"] == 3


def test_two_different_scores_for_one_response_name_both_lines(tmp_path):
    path = write_jsonl_rows(tmp_path / "s.jsonl", [*SCORES, dict(SCORES[1], score=1.5)])
    with pytest.raises(CheemsInputError) as e:
        read_scores(path)
    assert (e.value.line, e.value.field) == (5, "score")
    assert "prompt '问1' response 'r2' has two different scores: 1.0 at line 2 and 1.5 at line 5" in str(e.value)
    same_id_as_text = write_jsonl_rows(tmp_path / "t.jsonl", [{"prompt_id": 7, "response_id": "r1", "score": 1},
                                                               {"prompt_id": "7", "response_id": "r1", "score": 2}])
    with pytest.raises(CheemsInputError, match="at line 1 and 2.0 at line 2"):
        read_scores(same_id_as_text)


@pytest.mark.parametrize("raw, shown", [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"),
                                        ('"高"', "'高'"), ("true", "True"), ("null", "None"), ("[1]", "[1]")])
def test_a_score_that_is_not_a_finite_number_names_line_and_field(tmp_path, raw, shown):
    path = tmp_path / "s.jsonl"
    path.write_text('{"prompt_id": "问1", "response_id": "r1", "score": 1}\n'
                    f'{{"prompt_id": "问1", "response_id": "r2", "score": {raw}}}\n', encoding="utf-8")
    with pytest.raises(CheemsInputError) as e:
        read_scores(path)
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 2, "score")
    assert f"score must be a number, got {shown}" in str(e.value)


@pytest.mark.parametrize("command", ["eval", "bon --scores", "bon --gold"])
def test_every_reader_of_a_scores_file_refuses_a_bad_one_in_one_line(tmp_path, command):
    write_jsonl_rows(tmp_path / "bench.jsonl", BENCH)
    write_jsonl_rows(tmp_path / "good.jsonl", SCORES)
    write_jsonl_rows(tmp_path / "bad.jsonl", [*SCORES[:3], dict(SCORES[0], score=9)])
    if command == "eval":
        args = ["eval", "bench.jsonl", "--scores", "bad.jsonl"]
    elif command == "bon --scores":
        args = ["bon", "bench.jsonl", "--scores", "bad.jsonl", "--gold", "good.jsonl", "-n", "1,2"]
    else:
        args = ["bon", "bench.jsonl", "--scores", "good.jsonl", "--gold", "bad.jsonl", "-n", "1,2"]
    r = run_cli_in(tmp_path, *args)
    assert_one_line_error(r, "bad.jsonl:4: score: ", "two different scores", "at line 1 and")


def test_eval_refuses_a_negative_bootstrap_naming_the_flag(tmp_path):
    write_jsonl_rows(tmp_path / "bench.jsonl", BENCH)
    r = run_cli_in(tmp_path, "eval", "bench.jsonl", "--scorer", "length", "--bootstrap", "-1")
    assert_one_line_error(r, "--bootstrap", "-1")
    r = run_cli_in(tmp_path, "eval", "bench.jsonl", "--scorer", "length", "--bootstrap", "0", "--json", "r.json")
    assert r.returncode == 0, r.stderr
    # 问1's answers are as long as each other: a tie, wrong for Accuracy, kept by Exact Match (official)
    assert json.loads((tmp_path / "r.json").read_text("utf-8"))["overall"] == pytest.approx((0.5 + 1.0) / 2)
