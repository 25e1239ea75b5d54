"""Benchmark files are counted as their authors' evaluators count them: every row an item.

PandaLM-style rows repeat a pair with other metadata (``idx``, ``motivation_app``) or exactly;
RMB-style pairwise rows repeat a prompt and its pair under another ``pair_uid``. The numbers of
``eval`` are checked against a plain every-row reference written here, and the keys of repeated
rows (``id#n``) against ``score``'s SCORES file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.benchmark import read_benchmark
from cheems.curation.stages import run_analyze_bias
from cheems.formats import ReadResult, key_repeated_rows, read_prompts
from cheems.records import CheemsInputError, Prompt, Response
from cheems.scoring.evaluate import evaluate_benchmark
from tests.conftest import run_cli_in, write_jsonl_rows

PANDA_A = {"idx": 0, "motivation_app": "写作助手", "instruction": "把下面的句子改得更简洁。",
           "input": "由于天气的原因，所以我们决定把运动会推迟举行。", "response1": "因天气原因，运动会推迟。",
           "response2": "由于天气原因，我们决定推迟运动会。", "annotator1": 1, "annotator2": 1, "annotator3": 0}
PANDA_B = {"idx": 1, "motivation_app": "翻译助手", "instruction": "把这句话翻译成英文。", "input": "会议改到下周三。",
           "response1": "The meeting has been moved to next Wednesday afternoon.", "response2": "Meeting Wednesday.",
           "annotator1": 1, "annotator2": 1, "annotator3": 1}
PANDA_C = {"idx": 2, "motivation_app": "问答", "instruction": "水的沸点是多少？", "input": "",
           "response1": "一百度。", "response2": "在标准大气压下，水的沸点是一百摄氏度。",
           "annotator1": 2, "annotator2": 2, "annotator3": 1}
PANDA_TIE = {"idx": 3, "motivation_app": "问答", "instruction": "推荐一种水果。", "input": "",
             "response1": "苹果。", "response2": "香蕉。", "annotator1": 1, "annotator2": 2, "annotator3": 0}
PANDA_ROWS = [PANDA_A, PANDA_B, dict(PANDA_A, idx=4, motivation_app="写作"),  # metadata-only repeat
              PANDA_C, PANDA_B,  # an exact repeat
              dict(PANDA_C, idx=5), PANDA_TIE, PANDA_B]  # another metadata repeat, a tie, one more exact repeat


def rmb_row(uid: str, question: str, chosen: str, reject: str, path: str = "Helpfulness/Open QA/Technical") -> dict:
    return {"pair_uid": uid, "category_path": f"Pairwise_set/{path}",
            "conversation_input": [{"role": "user", "content": question, "language": "Chinese"}],
            "chosen": {"llm_name": "模型甲", "answer": chosen}, "reject": {"llm_name": "模型乙", "answer": reject}}


RMB_ROWS = [rmb_row("zh-1", "我想在家自己换水龙头，需要注意什么？", "先关闭进水总阀，再拆旧龙头，缠好生料带。", "直接换。"),
            rmb_row("zh-2", "我想在家自己换水龙头，需要注意什么？", "先关闭进水总阀，再拆旧龙头，缠好生料带。", "直接换。"),
            rmb_row("zh-3", "怎样保存新鲜的草莓？", "不洗，铺在厨房纸上冷藏。", "放冰箱里，洗干净后密封冷藏三天左右都可以。",
                    "Harmlessness/Safety/Food"),
            rmb_row("zh-3", "怎样保存新鲜的草莓？", "不洗，铺在厨房纸上冷藏。", "放冰箱里，洗干净后密封冷藏三天左右都可以。",
                    "Harmlessness/Safety/Food")]


def reference_pairs(rows: list[dict], kind: str, *, dedupe: bool = False) -> list[tuple[str, str, str]]:
    """Every row's (main category, better, worse), as the benchmark's evaluator reads a line;
    ties left out. ``dedupe`` keeps the first of rows that are equal as JSON."""
    seen, out = set(), []
    for row in rows:
        key = json.dumps(row, sort_keys=True, ensure_ascii=False)
        if dedupe and key in seen:
            continue
        seen.add(key)
        if kind == "rmb":
            category = row["category_path"].split("/")[1]
            out.append((category, row["chosen"]["answer"], row["reject"]["answer"]))
            continue
        votes = [row[k] for k in ("annotator1", "annotator2", "annotator3")]
        winner = next((v for v in (1, 2, 0) if 2 * votes.count(v) > len(votes)), 0)
        if winner:
            a, b = row["response1"], row["response2"]
            out.append(("未分类", *((a, b) if winner == 1 else (b, a))))
    return out


def category_mean(pairs: list[tuple[str, str, str]], right) -> float:
    """The mean over main categories of the share of one-pair items ``right(better, worse)`` holds for."""
    by_category: dict[str, list[bool]] = {}
    for category, a, b in pairs:
        by_category.setdefault(category, []).append(right(a, b))
    return sum(sum(v) / len(v) for v in by_category.values()) / len(by_category)


@pytest.mark.parametrize("kind, rows", [("pandalm", PANDA_ROWS), ("rmb", RMB_ROWS)])
@pytest.mark.parametrize("dedupe", [False, True])
def test_eval_counts_every_row_as_the_reference_does(tmp_path, kind, rows, dedupe):
    path = write_jsonl_rows(tmp_path / f"{kind}.jsonl", rows)
    result = evaluate_benchmark([path], baseline="length", n_bootstrap=0, dedupe=dedupe)
    pairs = reference_pairs(rows, kind, dedupe=dedupe)
    subset = result.report["subsets"][kind]
    assert subset["n_comparisons"] == len(pairs)
    assert subset["n_prompts"] == len(pairs)
    # the length scorer: right when the better text is longer; one pair per item, so under the
    # official tie rule Exact Match breaks only on a reversed pair
    assert subset["accuracy"] == pytest.approx(category_mean(pairs, lambda a, b: len(a) > len(b)))
    assert subset["exact_match"] == pytest.approx(category_mean(pairs, lambda a, b: len(a) >= len(b)))
    rows_seen = len(rows) - (result.repeated.dropped if dedupe else 0)
    assert result.report["rows"]["items"] == rows_seen


def test_repeated_rows_are_keyed_by_occurrence_and_counted_by_kind(tmp_path):
    res, repeated = read_benchmark([write_jsonl_rows(tmp_path / "panda.jsonl", PANDA_ROWS)])
    a, b, c = (res.prompts[i].id for i in (0, 1, 3))
    assert [p.id for p in res.prompts] == [a, b, f"{a}#2", c, f"{b}#2", f"{c}#2", res.prompts[6].id, f"{b}#3"]
    assert (repeated.exact, repeated.differing, repeated.dropped, repeated.keyed) == (2, 2, 0, 4)
    deduped, counts = read_benchmark([tmp_path / "panda.jsonl"], dedupe=True)
    assert [p.id for p in deduped.prompts] == [a, b, f"{a}#2", c, f"{c}#2", res.prompts[6].id]
    assert deduped.lines == [1, 2, 3, 4, 6, 7]
    assert (counts.exact, counts.differing, counts.dropped, counts.keyed) == (2, 2, 2, 2)


def test_an_occurrence_key_never_takes_an_id_the_file_uses():
    rows = [Prompt(pid, "问", [Response("r1", "甲"), Response("r2", "乙")], {"r1": 0, "r2": 1})
            for pid in ("x", "x#2", "x", "x")]
    res = ReadResult(rows, lines=[1, 2, 3, 4], files=["f"] * 4)
    counts = key_repeated_rows(res, dedupe=True)
    assert [p.id for p in res.prompts] == ["x", "x#2"]  # both later "x" rows repeat the first exactly
    assert counts.dropped == 2 and res.lines == [1, 2] and res.formats == []
    res = ReadResult([Prompt(pid, "问", [Response("r1", t)]) for pid, t in (("x", "甲"), ("x#2", "乙"), ("x", "丙"))])
    key_repeated_rows(res)
    assert [p.id for p in res.prompts] == ["x", "x#2", "x#3"]
    assert len({p.id for p in res.prompts}) == 3


def test_score_writes_the_keys_eval_reads_back_with_and_without_dedupe(tmp_path):
    write_jsonl_rows(tmp_path / "panda.jsonl", PANDA_ROWS)
    r = run_cli_in(tmp_path, "score", "panda.jsonl", "--scorer", "length", "-o", "s.jsonl")
    assert r.returncode == 0, r.stderr
    assert "2 row(s) repeat an earlier row exactly" in r.stderr and "keyed 'id#n'" in r.stderr
    keys = {row["prompt_id"] for row in map(json.loads, (tmp_path / "s.jsonl").read_text("utf-8").splitlines())}
    assert len(keys) == len(PANDA_ROWS) and sum(k.endswith("#2") for k in keys) == 3
    for extra in ([], ["--dedupe"]):
        by_file = run_cli_in(tmp_path, "eval", "panda.jsonl", "--scores", "s.jsonl", "--bootstrap", "0",
                             "--json", "a.json", *extra)
        by_scorer = run_cli_in(tmp_path, "eval", "panda.jsonl", "--scorer", "length", "--bootstrap", "0",
                               "--json", "b.json", *extra)
        assert by_file.returncode == by_scorer.returncode == 0, by_file.stderr + by_scorer.stderr
        a, b = (json.loads((tmp_path / n).read_text("utf-8")) for n in ("a.json", "b.json"))
        assert a["subsets"] == b["subsets"] and a["rows"] == b["rows"]
    assert "counted once (--dedupe)" in by_file.stderr


def test_eval_no_longer_refuses_rows_that_differ_only_in_metadata(tmp_path):
    write_jsonl_rows(tmp_path / "rmb.jsonl", RMB_ROWS)
    r = run_cli_in(tmp_path, "eval", "rmb.jsonl", "--scorer", "length", "--bootstrap", "0")
    assert r.returncode == 0, r.stderr
    assert "used twice" not in r.stderr
    assert "1 row(s) repeat an earlier row exactly" in r.stderr
    assert "1 row(s) reuse an earlier row's prompt id with other content or other keys" in r.stderr


def test_validate_names_the_format_and_what_eval_would_say(tmp_path):
    hh = {"chosen": "\n\nHuman: 我家猫最近不爱吃饭。\n\nAssistant: 把新旧猫粮混着喂，慢慢过渡。",
          "rejected": "\n\nHuman: 我家猫最近不爱吃饭。\n\nAssistant: 饿它几天就好。"}
    pairs = [{"prompt": f"推荐第{i}本书。", "chosen": "《活着》，余华写得克制动人。", "rejected": "书很多。"} for i in range(3)]
    write_jsonl_rows(tmp_path / "mixed.jsonl", [*pairs, hh, pairs[0]])
    write_jsonl_rows(tmp_path / "panda.jsonl", PANDA_ROWS)
    r = run_cli_in(tmp_path, "validate", "mixed.jsonl", "panda.jsonl")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "format: pair (4 rows), hh-rlhf (1 row); ok" in r.stdout
    assert "format: pandalm; ok" in r.stdout
    assert "note: 1 row(s) repeat an earlier row exactly" in r.stdout
    assert "note: 2 row(s) repeat an earlier row exactly" in r.stdout
    assert "note: 2 row(s) reuse an earlier row's prompt id" in r.stdout


def test_analyze_bias_reads_repeated_ids_and_skips_bad_rows(tmp_path):
    path = write_jsonl_rows(tmp_path / "panda.jsonl", [*PANDA_ROWS, '{"instruction": ', PANDA_A])
    with pytest.raises(CheemsInputError, match="invalid JSON"):
        run_analyze_bias({"panda": [path]})
    result = run_analyze_bias({"panda": [path]}, skip_invalid=True)
    assert [e.line for e in result["skipped"]] == [9]
    votes = sum(3 for _ in read_prompts(path, skip_invalid=True).prompts)
    assert result["tables"]["panda"]["n"] == votes and result["tables"]["panda"]["n_prompts"] == 9
    r = run_cli_in(tmp_path, "analyze", "bias", "panda.jsonl", "--skip-invalid")
    assert r.returncode == 0, r.stderr
    assert "skipped 1 invalid row(s)" in r.stderr and "panda.jsonl:9: invalid JSON" in r.stderr


def test_design_doc_example_counts(tmp_path):
    """The docs' example: RMB repeats prompt ids, and every line is an item."""
    res, counts = read_benchmark([write_jsonl_rows(tmp_path / "rmb.jsonl", RMB_ROWS)])
    assert len(res.prompts) == len(RMB_ROWS) and counts.keyed == 2
    assert Path(res.files[0]).name == "rmb.jsonl" and res.formats == ["rmb"] * 4
