"""The command line on real-sized data: several paths after one flag, validate output that
stays readable for a file in the wrong format, many subsets, eval --model's checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.cli import expand_multi_value_flags
from tests.conftest import run_cli_in, write_jsonl_rows
from tests.tiny_models import copy_checkpoint


@pytest.mark.parametrize("argv, expected", [
    (["train", "--train", "a", "b", "--eval", "c", "-o", "out"],
     ["train", "--train", "a", "--train", "b", "--eval", "c", "-o", "out"]),
    (["curate", "merge", "--human", "h1", "h2", "--judge", "j1", "j2", "j3", "-o", "m"],
     ["curate", "merge", "--human", "h1", "--human", "h2", "--judge", "j1", "--judge", "j2", "--judge", "j3",
      "-o", "m"]),
    (["init-model", "-o", "m", "--tokenizer-from", "x.txt", "y.jsonl"],
     ["init-model", "-o", "m", "--tokenizer-from", "x.txt", "--tokenizer-from", "y.jsonl"]),
    (["eval", "b.jsonl", "--judge", "gpt", "c.jsonl"], ["eval", "b.jsonl", "--judge", "gpt", "c.jsonl"]),  # one value
    (["train", "--train", "a", "--train", "b"], ["train", "--train", "a", "--train", "b"]),
])
def test_several_paths_after_one_flag(argv, expected):
    assert expand_multi_value_flags(argv) == expected


def test_curate_merge_takes_several_files_after_one_flag(tmp_path, sample_annotations):
    import shutil
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copyfile(sample_annotations / name, tmp_path / name)
    rows = [json.loads(line) for line in (tmp_path / "open.jsonl").read_text(encoding="utf-8").splitlines()]
    write_jsonl_rows(tmp_path / "a.jsonl", rows[:10])
    write_jsonl_rows(tmp_path / "b.jsonl", rows[10:20])
    r = run_cli_in(tmp_path, "curate", "merge", "--human", "a.jsonl", "b.jsonl", "--judge", "human.jsonl",
                   "-o", "merged.jsonl")
    assert r.returncode == 0, r.stderr
    assert "20 human" in r.stdout


def test_validate_groups_many_errors_of_one_kind(tmp_path):
    # 9,000 rows of a format cheems does not read: a few lines, not 9,000
    write_jsonl_rows(tmp_path / "other.jsonl", [{"query": f"问题{i}", "answer": f"回答{i}"} for i in range(9000)])
    r = run_cli_in(tmp_path, "validate", "other.jsonl")
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert len(lines) <= 6, r.stdout
    assert "9000 invalid row(s)" in lines[0] and "9000 row(s) with this error" in lines[1]
    assert "other.jsonl:1:" in r.stdout and "other.jsonl:9000:" not in r.stdout
    assert "and 8997 more like these (--all prints them)" in r.stdout
    every = run_cli_in(tmp_path, "validate", "other.jsonl", "--all")
    assert every.returncode == 1 and every.stdout.count("other.jsonl:") == 9001


def test_eval_prints_many_subsets_as_rows(tmp_path, sample_annotations):
    r = run_cli_in(tmp_path, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        row["subset"] = f"子集{i % 6}"
    write_jsonl_rows(tmp_path / "six.jsonl", rows)
    r = run_cli_in(tmp_path, "eval", "six.jsonl", "--scorer", "length", "--bootstrap", "0")
    assert r.returncode == 0, r.stderr
    main_table = r.stdout.split("By main category")[0]
    body = [line for line in main_table.splitlines() if "子集" in line]
    assert len(body) == 6 and "Overall" in main_table
    assert max(len(line) for line in r.stdout.splitlines()) <= 120


def test_eval_model_takes_truncation_and_check(tmp_path, sample_annotations, cli_tiny_model):
    assert run_cli_in(tmp_path, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl").returncode == 0
    copy_checkpoint(cli_tiny_model, tmp_path / "tiny")
    r = run_cli_in(tmp_path, "eval", "bench.jsonl", "--model", "tiny", "--check", "--truncation", "right",
                   "--max-length", "64", "--bootstrap", "0")
    assert r.returncode == 0, r.stderr
    assert "batch invariance:" in r.stderr and ": ok" in r.stderr
    assert "truncated (right)" in r.stderr


FIXTURES = sorted((Path(__file__).parent / "fixtures" / "formats").iterdir())


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_every_format_round_trips_through_validate_stats_and_eval(tmp_path, fixture):
    for command in (["validate", fixture], ["stats", fixture],
                    ["eval", fixture, "--scorer", "length", "--bootstrap", "0", "--json", "r.json"]):
        r = run_cli_in(tmp_path, *command)
        assert r.returncode == 0, (command, r.stdout, r.stderr)
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["model"] == "length" and report["overall"] is not None


def test_a_forced_format_and_an_unknown_one(tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "formats" / "medicalgpt_reward.jsonl"
    r = run_cli_in(tmp_path, "validate", fixture, "--format", "medicalgpt")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_cli_in(tmp_path, "validate", fixture, "--format", "rmb")  # the wrong one: every row refused
    assert r.returncode == 1 and "0 valid row(s)" in r.stdout
    r = run_cli_in(tmp_path, "stats", fixture, "--format", "nonsense")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown format 'nonsense'" in r.stderr


def test_every_row_is_an_item_as_the_source_counts_it_and_dedupe_counts_exact_repeats_once(tmp_path):
    """RewardBench, RMB and the official evaluator count every line: an exact repeat is one more item
    (noted), ``--dedupe`` counts it once, and two rows under one id with other content are two items."""
    rows = [{"prompt": "推荐一本书。", "chosen": "《红楼梦》，细腻动人。", "rejected": "不知道。"},
            {"prompt": "推荐一本书。", "chosen": "《围城》，幽默犀利。", "rejected": "随便。"},
            {"prompt": "推荐一本书。", "chosen": "《红楼梦》，细腻动人。", "rejected": "不知道。"}]  # row 1 again
    write_jsonl_rows(tmp_path / "dpo.jsonl", rows)
    counts = {}
    for flags in ((), ("--dedupe",)):
        r = run_cli_in(tmp_path, "eval", "dpo.jsonl", "--scorer", "length", "--bootstrap", "0", "--json", "r.json",
                       *flags)
        assert r.returncode == 0, r.stderr
        assert "1 row(s) repeat an earlier row exactly" in r.stderr
        report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
        counts[flags] = (report["subsets"]["dpo"]["n_prompts"], report["subsets"]["dpo"]["n_comparisons"])
    assert counts == {(): (3, 3), ("--dedupe",): (2, 2)}
    write_jsonl_rows(tmp_path / "clash.jsonl", [dict(rows[0], id="x"), dict(rows[1], id="x")])
    r = run_cli_in(tmp_path, "eval", "clash.jsonl", "--scorer", "length", "--bootstrap", "0", "--json", "c.json")
    assert r.returncode == 0 and "reuse an earlier row's prompt id" in r.stderr, r.stderr
    report = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    assert report["subsets"]["clash"]["n_prompts"] == 2


def test_a_progress_bar_off_a_terminal_writes_nothing_before_the_error_line(capsys):
    """Into a pipe or a file the bar draws nothing, not even its closing newline, so that an error
    raised under it stays the one line on stderr."""
    from cheems.cli.console import err, progress

    with pytest.raises(ValueError):
        with progress("scoring") as bar:
            bar(3, 10)
            raise ValueError("stopped")
    err.print("error: stopped")
    assert capsys.readouterr().err == "error: stopped\n"
