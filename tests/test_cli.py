"""End-to-end: the ``cheems`` command line as a user runs it, on the sample.

The commands run in this process (``run_cli_in``: ``cheems.cli.main`` with its output captured);
that the entry points start and run at all is checked in fresh processes below, and
tests/test_cli_runner.py checks that both ways print the same."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from cheems.formats import read_prompts
from tests.conftest import HANG_TIMEOUT_S, run_cli_in, run_cli_process, write_jsonl_rows


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def table_row(stdout: str, first_cell: str) -> list[str]:
    """Cells of the table row whose first cell is ``first_cell`` (rich box or ASCII)."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│|┃]", line)[1:-1]]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row {first_cell!r} in:\n{stdout}")


def assert_one_line_error(r, *parts: str) -> None:
    """Exit code 2, one readable line on stderr naming ``parts``, no traceback, no stdout."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), r.stderr
    for p in parts:
        assert p in lines[0], r.stderr
    assert r.stdout.strip() == "", r.stdout


# ----------------------------------------------------------------------------- the demo pipeline

@pytest.fixture(scope="module")
def demo(tmp_path_factory, sample_annotations):
    """``cheems sample`` then ``cheems rank`` on its two files, once for the module."""
    d = tmp_path_factory.mktemp("demo")
    sample = run_cli_in(d, "sample", "-o", "样例")
    ann = d / "样例" / "annotations"
    ranked = run_cli_in(d, "rank", ann / "open.jsonl", ann / "human.jsonl", "-o", "bench.jsonl",
                        "--report", "rep.json")
    return SimpleNamespace(dir=d, ann=ann, sample=sample, rank=ranked, bench=d / "bench.jsonl",
                           report=d / "rep.json")


def test_python_m_cheems_cli_runs(tmp_path):
    r = run_cli_process(tmp_path, "--help")
    assert r.returncode == 0, r.stderr
    for command in ("tasks", "rank", "eval", "validate", "stats", "sample"):
        assert command in r.stdout


def test_the_cheems_console_script_runs(tmp_path):
    """The installed entry point ``cheems`` (pyproject's [project.scripts]), in a real process."""
    script = Path(sys.executable).parent / "cheems"
    if not script.is_file():
        pytest.skip(f"no console script next to {sys.executable}: cheems is not installed in this environment")
    done = subprocess.run([str(script), "stats", "bench.jsonl"], cwd=tmp_path, capture_output=True, text=True,
                          encoding="utf-8", timeout=HANG_TIMEOUT_S)
    assert done.returncode == 2, done.stderr  # the exit code of a bad input, through a real process
    assert done.stderr.startswith("error: ") and "bench.jsonl: no such file" in done.stderr, done.stderr
    write_jsonl_rows(tmp_path / "bench.jsonl", [good_row("一")])
    done = subprocess.run([str(script), "stats", "bench.jsonl"], cwd=tmp_path, capture_output=True, text=True,
                          encoding="utf-8", timeout=HANG_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert table_row(done.stdout, "bench.jsonl")[1] == "1"


def test_sample_copies_the_bundled_annotations(demo, sample_annotations):
    assert demo.sample.returncode == 0, demo.sample.stderr
    assert sorted(p.name for p in demo.ann.iterdir()) == ["human.jsonl", "open.jsonl"]
    for name in ("open.jsonl", "human.jsonl"):
        assert (demo.ann / name).read_bytes() == (sample_annotations / name).read_bytes()
    assert "human.jsonl, open.jsonl" in demo.sample.stdout


def test_rank_writes_a_full_ranking_for_every_prompt(demo):
    assert demo.rank.returncode == 0, demo.rank.stderr
    inputs = [p for name in ("open.jsonl", "human.jsonl")
              for p in read_prompts(demo.ann / name).prompts]
    rows = read_jsonl(demo.bench)
    assert [r["id"] for r in rows] == [p.id for p in inputs]
    for row in rows:
        ids = [r["id"] for r in row["responses"]]
        assert sorted(row["rank"]) == sorted(ids), row["id"]
        values = sorted(set(row["rank"].values()))
        assert values == list(range(len(values))), row  # layers 0, 1, 2, ... without gaps
        assert "comparisons" not in row  # not kept unless --keep-comparisons
    assert f"wrote {len(rows)} ranked prompts" in demo.rank.stdout


def test_rank_report_has_subsets_and_total(demo):
    report = json.loads(demo.report.read_text(encoding="utf-8"))
    assert {"open", "human", "total"} <= set(report)
    for name, s in report.items():
        assert 0.0 <= s["conflict_ratio"] <= 1.0, name
        assert s["conflict_ratio"] == pytest.approx(s["conflicts"] / s["comparisons"]), name
        assert s["prompts_with_cycles"] <= min(s["merged_cycles"], s["prompts"]), name
    total = report["total"]
    parts = [s for name, s in report.items() if name != "total"]
    for key in ("prompts", "comparisons", "conflicts", "merged_cycles"):
        assert total[key] == sum(s[key] for s in parts), key
    assert total["merged_cycles"] > 0  # the sample contains deliberate conflicts
    assert total["conflicts"] > 0
    n_rows = len(read_jsonl(demo.bench))
    assert total["prompts"] == n_rows
    assert table_row(demo.rank.stdout, "total")[1] == str(n_rows)


def expected_eval(rows: list[dict], score) -> dict:
    """Accuracy / exact match by hand: per main category, macro over categories, per subset."""
    table = defaultdict(lambda: defaultdict(list))  # subset -> category -> [(pairs, right)]
    for row in rows:
        rank = row["rank"]
        pairs = [(x, y) if rank[x] < rank[y] else (y, x)
                 for x, y in itertools.combinations(rank, 2) if rank[x] != rank[y]]
        if not pairs:
            continue
        right = sum(score(row, w) > score(row, l) for w, l in pairs)
        category = row.get("category", ["未分类"])[0]
        table[row.get("subset") or "bench"][category].append((len(pairs), right))
    out = {}
    for subset, cats in table.items():
        accs = [sum(r for _, r in v) / sum(n for n, _ in v) for v in cats.values()]
        ems = [sum(n == r for n, r in v) / len(v) for v in cats.values()]
        out[subset] = {"accuracy": sum(accs) / len(accs), "exact_match": sum(ems) / len(ems),
                       "n_prompts": sum(len(v) for v in cats.values()),
                       "n_comparisons": sum(n for v in cats.values() for n, _ in v),
                       "categories": sorted(cats)}
    return out


def check_eval_report(report: dict) -> None:
    assert set(report["subsets"]) == {"open", "human"}
    for name, s in report["subsets"].items():
        for key in ("accuracy", "exact_match", "n_prompts", "n_comparisons", "ci", "categories"):
            assert key in s, (name, key)
        assert 0.0 <= s["accuracy"] <= 1.0 and 0.0 <= s["exact_match"] <= 1.0
        assert s["score"] == pytest.approx((s["accuracy"] + s["exact_match"]) / 2)
        assert s["n_prompts"] > 0 and s["n_comparisons"] > 0
        lo, hi = s["ci"]["accuracy"]
        assert 0.0 <= lo <= hi <= 1.0
        assert s["categories"]
        assert sum(c["n_prompts"] for c in s["categories"].values()) == s["n_prompts"]
    scores = [s["score"] for s in report["subsets"].values()]
    assert report["overall"] == pytest.approx(sum(scores) / len(scores))
    lo, hi = report["overall_ci"]
    assert lo <= hi


def test_eval_length_scorer(demo):
    r = run_cli_in(demo.dir, "eval", "bench.jsonl", "--scorer", "length", "--json", "length.json")
    assert r.returncode == 0, r.stderr
    report = json.loads((demo.dir / "length.json").read_text(encoding="utf-8"))
    check_eval_report(report)
    assert report["model"] == "length"
    expected = expected_eval(read_jsonl(demo.bench),
                             lambda row, rid: len(next(x["content"] for x in row["responses"]
                                                       if x["id"] == rid)))
    for name, want in expected.items():
        got = report["subsets"][name]
        assert got["accuracy"] == pytest.approx(want["accuracy"]), name
        assert got["exact_match"] == pytest.approx(want["exact_match"]), name
        assert (got["n_prompts"], got["n_comparisons"]) == (want["n_prompts"], want["n_comparisons"])
        assert sorted(got["categories"]) == want["categories"]
    assert "Overall" in r.stdout and f"{report['overall']:.4f}" in r.stdout


def test_eval_random_scorer_is_seeded(demo):
    runs = []
    for name in ("random-a.json", "random-b.json"):
        r = run_cli_in(demo.dir, "eval", "bench.jsonl", "--scorer", "random", "--seed", "3",
                       "--bootstrap", "200", "--json", name)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads((demo.dir / name).read_text(encoding="utf-8")))
    check_eval_report(runs[0])
    assert runs[0] == runs[1]
    assert runs[0]["subsets"]["open"]["ci"]["n_bootstrap"] == 200


def write_scores(bench: Path, path: Path, score, skip: set = frozenset()) -> None:
    rows = [{"prompt_id": row["id"], "response_id": rid, "score": score(v)}
            for row in read_jsonl(bench) for rid, v in row["rank"].items()
            if (row["id"], rid) not in skip]
    write_jsonl_rows(path, rows)


@pytest.mark.parametrize("score, ties, acc, em", [
    (lambda rank: -rank, "official", 1.0, 1.0),   # perfect scorer
    (lambda rank: rank, "official", 0.0, 0.0),    # reversed
    (lambda rank: 0.5, "strict", 0.0, 0.0),       # strict: a tie is wrong in both
    (lambda rank: 0.5, "official", 0.0, 1.0)])    # official: a tie is wrong, but reverses nothing
def test_eval_scores_file(demo, tmp_path, score, ties, acc, em):
    scores = tmp_path / "我的模型.jsonl"
    write_scores(demo.bench, scores, score)
    r = run_cli_in(demo.dir, "eval", demo.bench, "--scores", scores, "--json", tmp_path / "r.json", "--ties", ties)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["model"] == "我的模型" and report["ties"] == ties
    assert report["overall"] == (acc + em) / 2
    for s in report["subsets"].values():
        assert (s["accuracy"], s["exact_match"]) == (acc, em)
        for c in s["categories"].values():
            assert (c["accuracy"], c["exact_match"]) == (acc, em)
    tied = score(0) == score(1)
    assert all((s["n_tied"] > 0) == tied for s in report["subsets"].values())
    assert ("tied" in r.stdout) == tied


def test_eval_scores_file_missing_a_response(demo, tmp_path, run_cli):
    row = read_jsonl(demo.bench)[1]
    missing = (row["id"], row["responses"][2]["id"])
    scores = tmp_path / "缺分.jsonl"
    write_scores(demo.bench, scores, lambda rank: -rank, skip={missing})
    r = run_cli("eval", demo.bench, "--scores", scores, "--json", "r.json")
    assert_one_line_error(r, "缺分.jsonl", repr(missing[0]), repr(missing[1]), "1 response(s)")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("flags", [[], ["--scorer", "length", "--scores", "s.jsonl"]])
def test_eval_needs_exactly_one_of_scores_and_scorer(demo, flags):
    r = run_cli_in(demo.dir, "eval", "bench.jsonl", *flags)
    assert_one_line_error(r, "--scores", "--scorer")


def test_eval_of_a_file_without_rank_says_run_cheems_rank(demo, tmp_path, run_cli):
    r = run_cli("eval", demo.ann / "open.jsonl", "--scorer", "length", "--json", "r.json")
    assert_one_line_error(r, "open.jsonl:1: rank: ", "cheems rank")
    assert not (tmp_path / "r.json").exists()


# ----------------------------------------------------------------------------- tasks

def task_pairs(tasks: list[dict]) -> dict[str, set]:
    covered = defaultdict(set)
    for t in tasks:
        assert len(set(t["ids"])) == len(t["ids"]) == 3
        assert [r["id"] for r in t["responses"]] == t["ids"]
        covered[t["prompt_id"]].update(frozenset(p) for p in itertools.combinations(t["ids"], 2))
    return covered


def test_tasks_on_the_sample(demo, tmp_path, run_cli):
    src = demo.ann / "open.jsonl"
    r = run_cli("tasks", src, "-o", "tasks.jsonl")
    assert r.returncode == 0, r.stderr
    prompts = {p.id: p.response_ids() for p in read_prompts(src).prompts}
    tasks = read_jsonl(tmp_path / "tasks.jsonl")
    by_prompt = defaultdict(list)
    for t in tasks:
        by_prompt[t["prompt_id"]].append(t)
        assert set(t["ids"]) <= set(prompts[t["prompt_id"]])
    five = [pid for pid, ids in prompts.items() if len(ids) == 5]
    assert five, "the sample should have prompts with 5 responses"
    covered = task_pairs(tasks)
    for pid in five:
        assert [t["round"] for t in by_prompt[pid]] == [1, 2, 3, 4, 5]
        assert len(covered[pid]) == 10
    assert f"{len(tasks)} tasks for {len(prompts)} prompts" in r.stdout
    assert "pair coverage: mean 100.0%" in r.stdout
    assert f"{len(prompts)}/{len(prompts)} prompts fully covered" in r.stdout


SEVEN = [{"id": f"七-{k}", "prompt": f"第{k}题：写一首关于秋天的诗。",
          "responses": [f"秋天的诗，第{j}版。" for j in range(7)]} for k in range(2)]


@pytest.mark.parametrize("design, n_pairs, coverage, full", [("circular", 14, "66.7%", "0/2"),
                                                              ("cover", 21, "100.0%", "2/2")])
def test_tasks_designs_on_seven_responses(tmp_path, design, n_pairs, coverage, full, run_cli):
    src = write_jsonl_rows(tmp_path / "seven.jsonl", SEVEN)
    r = run_cli("tasks", src, "-o", "tasks.jsonl", "--design", design)
    assert r.returncode == 0, r.stderr
    tasks = read_jsonl(tmp_path / "tasks.jsonl")
    covered = task_pairs(tasks)
    assert sorted(covered) == ["七-0", "七-1"]
    assert all(len(c) == n_pairs for c in covered.values())
    if design == "circular":
        assert len(tasks) == 14  # 7 adjacent triples per prompt
    assert f"pair coverage: mean {coverage}, {full} prompts fully covered" in r.stdout


# ----------------------------------------------------------------------------- validate / stats

def test_validate_good_files(demo):
    r = run_cli_in(demo.dir, "validate", demo.ann / "open.jsonl", demo.ann / "human.jsonl", "bench.jsonl")
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(read_jsonl(demo.bench))
    assert f"bench.jsonl: {n} valid row(s)" in r.stdout
    assert r.stdout.count("; ok") == 3


def test_validate_bad_file_prints_every_error(tmp_path, run_cli):
    rows = [good_row("一"), "{坏的JSON", good_row("二"),
            dict(good_row("三"), comparisons=[{"a": "r1", "b": "r9", "label": "g"}]),
            dict(good_row("四"), rank={"r1": 0})]
    write_jsonl_rows(tmp_path / "bad.jsonl", rows)
    r = run_cli("validate", "bad.jsonl")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bad.jsonl: 2 valid row(s)" in r.stdout
    assert "3 invalid row(s)" in r.stdout
    assert "bad.jsonl:2: invalid JSON" in r.stdout
    assert "bad.jsonl:4: comparisons[0].b: " in r.stdout and "'r9'" in r.stdout
    assert "bad.jsonl:5: rank: ranks missing" in r.stdout
    assert "Traceback" not in r.stderr


def test_stats_prints_prompts_and_comparisons(demo):
    r = run_cli_in(demo.dir, "stats", "bench.jsonl")
    assert r.returncode == 0, r.stderr
    rows = read_jsonl(demo.bench)
    n_comparisons = sum(row["rank"][x] != row["rank"][y] for row in rows
                        for x, y in itertools.combinations(row["rank"], 2))
    cells = table_row(r.stdout, "bench.jsonl")
    assert cells[1] == f"{len(rows):,}"
    assert cells[3] == f"{n_comparisons:,}"


def test_stats_of_several_files_adds_a_total(tmp_path, run_cli):
    write_jsonl_rows(tmp_path / "a.jsonl", [good_row("一"), good_row("二")])
    write_jsonl_rows(tmp_path / "b.jsonl", [{"prompt": "你好", "chosen": "你好！", "rejected": "嗯。"}])
    r = run_cli("stats", "a.jsonl", "b.jsonl")
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "a.jsonl")[1:4] == ["2", "3.00", "4"]  # 2 ranked pairs per prompt
    assert table_row(r.stdout, "b.jsonl")[1:4] == ["1", "2.00", "1"]
    assert table_row(r.stdout, "total")[1:4] == ["3", "2.67", "5"]


# ----------------------------------------------------------------------------- bad input

def good_row(pid: str) -> dict:
    """A row every command accepts: it has both a rank and comparisons."""
    return {"id": pid, "prompt": f"问题{pid}：天空为什么是蓝色的？", "subset": "open", "category": ["知识问答"],
            "responses": [{"id": "r1", "content": "因为瑞利散射。"}, {"id": "r2", "content": "因为海是蓝的。"},
                          {"id": "r3", "content": "不知道。"}],
            "rank": {"r1": 0, "r2": 1, "r3": 1},
            "comparisons": [{"a": "r1", "b": "r2", "label": "g"}, {"a": "r2", "b": "r3", "label": "s"}]}


BAD_LINES = {
    "unknown response": (dict(good_row("坏"), comparisons=[{"a": "r1", "b": "r9", "label": "g"}]),
                         "bad.jsonl:3: comparisons[0].b: ", "'r9'"),
    "invalid JSON": ('{"id": "坏", "prompt": ', "bad.jsonl:3: invalid JSON", ""),
    "ranks missing": (dict(good_row("坏"), rank={"r1": 0}), "bad.jsonl:3: rank: ", "'r2'"),
}

COMMANDS = {  # command line, and the files it must not write on failure
    "rank": (["rank", "bad.jsonl", "-o", "out.jsonl", "--report", "rep.json"], ["out.jsonl", "rep.json"]),
    "tasks": (["tasks", "bad.jsonl", "-o", "out.jsonl"], ["out.jsonl"]),
    "eval": (["eval", "bad.jsonl", "--scorer", "length", "--json", "out.json"], ["out.json"]),
    "stats": (["stats", "bad.jsonl"], []),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("bad", list(BAD_LINES))
def test_bad_input_fails_with_one_line_and_writes_nothing(tmp_path, command, bad, run_cli):
    row, where, what = BAD_LINES[bad]
    write_jsonl_rows(tmp_path / "bad.jsonl", [good_row("一"), good_row("二"), row, good_row("三")])
    args, outputs = COMMANDS[command]
    r = run_cli(*args)
    assert_one_line_error(r, where, what)
    for name in outputs:
        assert not (tmp_path / name).exists(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no temp files either


@pytest.mark.parametrize("command", list(COMMANDS))
def test_missing_input_file(tmp_path, command, run_cli):
    args, outputs = COMMANDS[command]
    r = run_cli(*["缺失.jsonl" if a == "bad.jsonl" else a for a in args])
    assert_one_line_error(r, "缺失.jsonl: no such file")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_skip_invalid_writes_the_good_rows_and_reports_the_bad(tmp_path, command, run_cli):
    rows = [good_row("一"), '{"id": "坏", ', good_row("二"),
            dict(good_row("坏2"), comparisons=[{"a": "r1", "b": "r9", "label": "g"}]), good_row("三")]
    write_jsonl_rows(tmp_path / "bad.jsonl", rows)
    args, outputs = COMMANDS[command]
    r = run_cli(*args, "--skip-invalid")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "skipped 2 invalid row(s)" in r.stderr
    assert "bad.jsonl:2: invalid JSON" in r.stderr
    assert "bad.jsonl:4: comparisons[0].b: " in r.stderr and "'r9'" in r.stderr
    good = ["一", "二", "三"]
    if command == "rank":
        assert [row["id"] for row in read_jsonl(tmp_path / "out.jsonl")] == good
        assert json.loads((tmp_path / "rep.json").read_text(encoding="utf-8"))["total"]["prompts"] == 3
    elif command == "tasks":
        assert [t["prompt_id"] for t in read_jsonl(tmp_path / "out.jsonl")] == good  # 1 triple each
    elif command == "eval":
        report = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
        assert report["subsets"]["open"]["n_prompts"] == 3
    else:
        assert table_row(r.stdout, "bad.jsonl")[1] == "3"


def test_rank_row_without_comparisons_names_its_line(tmp_path, run_cli):
    rows = [good_row("一"), {"id": "无比较", "prompt": "你好", "responses": ["甲", "乙"]}]
    write_jsonl_rows(tmp_path / "anno.jsonl", rows)
    r = run_cli("rank", "anno.jsonl", "-o", "out.jsonl")
    assert_one_line_error(r, "anno.jsonl:2: comparisons: ")
    assert not (tmp_path / "out.jsonl").exists()


def test_rank_uses_file_stem_as_subset_like_eval(tmp_path, run_cli):
    """Rows without 'subset' take their file's stem as subset, in rank as in eval."""
    for stem in ("open", "human"):
        rows = [{k: v for k, v in good_row(f"{stem}-{i}").items() if k not in ("subset", "rank")}
                for i in range(2)]
        write_jsonl_rows(tmp_path / f"{stem}.jsonl", rows)
    r = run_cli("rank", "open.jsonl", "human.jsonl", "-o", "bench.jsonl",
                   "--report", "rep.json")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "rep.json").read_text(encoding="utf-8"))
    assert sorted(report) == ["human", "open", "total"]
    assert [row.get("subset") for row in read_jsonl(tmp_path / "bench.jsonl")] == ["open"] * 2 + ["human"] * 2


def test_error_message_keeps_brackets_in_paths(tmp_path, run_cli):
    folder = tmp_path / "数据[v2]"
    folder.mkdir()
    r = run_cli("stats", "数据[v2]/bench.jsonl")
    assert_one_line_error(r, "数据[v2]/bench.jsonl: no such file")


def test_error_message_with_markup_like_text_does_not_crash(tmp_path, run_cli):
    row = dict(good_row("一"), comparisons=[{"a": "r1", "b": "r2", "label": "[/]"}])
    write_jsonl_rows(tmp_path / "bad.jsonl", [row])
    r = run_cli("tasks", "bad.jsonl", "-o", "out.jsonl")
    assert_one_line_error(r, "bad.jsonl:1: comparisons[0].label: ", "'[/]'")


# ----------------------------------------------------------------------------- annotated tasks

def test_annotated_tasks_rank_back_to_the_annotators_order(demo, tmp_path, run_cli):
    """tasks -> annotators fill 'ranking' -> rank: a consistent annotator gives back their order."""
    r = run_cli("tasks", demo.ann / "human.jsonl", "-o", "tasks.jsonl")
    assert r.returncode == 0, r.stderr
    prompts = {p.id: p for p in read_prompts(demo.ann / "human.jsonl").prompts}
    # the annotator's private total order: longer content is better, ties broken by id
    order = {pid: sorted(p.responses, key=lambda x: (-len(x.content), x.id)) for pid, p in prompts.items()}
    position = {pid: {x.id: k for k, x in enumerate(rs)} for pid, rs in order.items()}
    tasks = read_jsonl(tmp_path / "tasks.jsonl")
    assert all(t["ranking"] is None for t in tasks)
    for t in tasks:
        t["ranking"] = ">".join(sorted(t["ids"], key=position[t["prompt_id"]].get))
        t["annotator"] = "标注员甲"
    write_jsonl_rows(tmp_path / "done.jsonl", tasks)
    r = run_cli("rank", "done.jsonl", "-o", "bench.jsonl", "--report", "rep.json")
    assert r.returncode == 0, r.stderr
    rows = read_jsonl(tmp_path / "bench.jsonl")
    assert [row["id"] for row in rows] == list(prompts)
    for row in rows:
        assert row["rank"] == position[row["id"]]  # 5 circular triples cover every pair
        assert row["subset"] == "human"
        assert row["category"] == prompts[row["id"]].category
    report = json.loads((tmp_path / "rep.json").read_text(encoding="utf-8"))
    assert report["total"]["conflicts"] == 0 and report["total"]["merged_cycles"] == 0
    assert report["total"]["comparisons"] == 3 * len(tasks)


def test_task_without_ranking_names_its_line(demo, tmp_path, run_cli):
    r = run_cli("tasks", demo.ann / "open.jsonl", "-o", "tasks.jsonl")
    assert r.returncode == 0, r.stderr
    tasks = read_jsonl(tmp_path / "tasks.jsonl")
    for t in tasks[:3]:
        t["ranking"] = ">".join(t["ids"])
    write_jsonl_rows(tmp_path / "done.jsonl", tasks[:4])
    r = run_cli("rank", "done.jsonl", "-o", "bench.jsonl")
    assert_one_line_error(r, "done.jsonl:4: ranking: ")
    assert not (tmp_path / "bench.jsonl").exists()


def test_rank_does_not_merge_different_prompts_that_share_an_id(tmp_path, run_cli):
    """Two files may number their prompts alike; different prompts must not become one."""
    row = {"id": "1", "responses": [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "乙"}],
           "comparisons": [{"a": "r1", "b": "r2", "label": "g"}]}
    write_jsonl_rows(tmp_path / "open.jsonl", [dict(row, prompt="你好", subset="open")])
    write_jsonl_rows(tmp_path / "human.jsonl", [dict(row, prompt="再见", subset="human",
                                                     responses=[{"id": "r3", "content": "丙"},
                                                                {"id": "r4", "content": "丁"}],
                                                     comparisons=[{"a": "r3", "b": "r4", "label": "g"}])])
    r = run_cli("rank", "open.jsonl", "human.jsonl", "-o", "bench.jsonl")
    if r.returncode == 0:  # kept apart ...
        rows = read_jsonl(tmp_path / "bench.jsonl")
        assert sorted((x["prompt"], x["subset"], len(x["responses"])) for x in rows) == \
            [("你好", "open", 2), ("再见", "human", 2)], rows
        # ... under distinct ids: a SCORES file addresses responses by (prompt_id, response_id)
        assert len({x["id"] for x in rows}) == 2, [x["id"] for x in rows]
    else:  # ... or refused, naming where
        assert_one_line_error(r, "human.jsonl:1: ", "'1'")
        assert not (tmp_path / "bench.jsonl").exists()


def test_rank_conflicting_response_contents_name_file_and_line(tmp_path, run_cli):
    row = {"id": "1", "prompt": "你好", "responses": [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "乙"}],
           "comparisons": [{"a": "r1", "b": "r2", "label": "g"}]}
    write_jsonl_rows(tmp_path / "a.jsonl", [row])
    write_jsonl_rows(tmp_path / "b.jsonl", [good_row("二"), dict(row, responses=[{"id": "r1", "content": "甲"},
                                                                                {"id": "r2", "content": "丙"}])])
    r = run_cli("rank", "a.jsonl", "b.jsonl", "-o", "bench.jsonl")
    assert_one_line_error(r, "b.jsonl:2: responses", "'r2'")
    assert not (tmp_path / "bench.jsonl").exists()


def test_score_command_matches_the_built_in_scorer(demo, tmp_path, run_cli):
    r = run_cli("score", demo.bench, "-o", "length.jsonl", "--scorer", "length")
    assert r.returncode == 0, r.stderr
    n_responses = sum(len(row["responses"]) for row in read_jsonl(demo.bench))
    assert len(read_jsonl(tmp_path / "length.jsonl")) == n_responses
    a = run_cli("eval", demo.bench, "--scores", "length.jsonl", "--json", "a.json")
    b = run_cli("eval", demo.bench, "--scorer", "length", "--json", "b.json")
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    ra, rb = (json.loads((tmp_path / n).read_text(encoding="utf-8")) for n in ("a.json", "b.json"))
    assert ra["model"] == rb["model"] == "length"
    assert ra["subsets"] == rb["subsets"] and ra["overall"] == rb["overall"]


def test_eval_and_score_key_two_prompts_sharing_an_id_apart(tmp_path, run_cli):
    rows = [{"id": "1", "prompt": p, "responses": [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "乙乙"}],
             "rank": {"r1": 0, "r2": 1}} for p in ("你好", "再见")]
    write_jsonl_rows(tmp_path / "bench.jsonl", rows)
    r = run_cli("eval", "bench.jsonl", "--scorer", "length", "--bootstrap", "0", "--json", "r.json")
    assert r.returncode == 0, r.stderr
    assert "1 row(s) reuse an earlier row's prompt id with other content" in r.stderr
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["subsets"]["bench"]["n_prompts"] == 2
    r = run_cli("score", "bench.jsonl", "--scorer", "length", "-o", "s.jsonl")
    assert r.returncode == 0, r.stderr
    assert [row["prompt_id"] for row in read_jsonl(tmp_path / "s.jsonl")] == ["1", "1", "1#2", "1#2"]


def test_rank_warns_about_responses_in_no_comparison(tmp_path, run_cli):
    row = {"id": "p", "prompt": "问", "responses": [{"id": "a", "content": "甲"}, {"id": "b", "content": "乙"},
                                                     {"id": "c", "content": "丙"}],
           "comparisons": [{"a": "a", "b": "b", "label": "g"}]}
    write_jsonl_rows(tmp_path / "ann.jsonl", [row])
    r = run_cli("rank", "ann.jsonl", "-o", "bench.jsonl", "--report", "rep.json")
    assert r.returncode == 0, r.stderr
    assert "1 response(s) appear in no comparison" in r.stderr
    rep = json.loads((tmp_path / "rep.json").read_text(encoding="utf-8"))
    assert rep["total"]["uncompared_responses"] == 1
    (out,) = read_jsonl(tmp_path / "bench.jsonl")
    assert out["rank"] == {"a": 0, "b": 1, "c": 0}
