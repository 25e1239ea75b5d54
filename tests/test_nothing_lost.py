"""Nothing lost: no command writes over one of its inputs, a command's outputs appear together
or not at all, temp files of killed runs are cleaned up, and resumable outputs refuse stale
input instead of silently reusing it."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cheems.io import check_outputs, outputs_together, remove_stale_temps, same_file, write_jsonl
from cheems.records import CheemsInputError
from tests.conftest import run_cli_in
from tests.test_cli import assert_one_line_error
from tests.tiny_models import copy_checkpoint


@pytest.fixture
def work(tmp_path, sample_annotations) -> Path:
    """A folder with the sample annotations and the benchmark ranked from them."""
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copyfile(sample_annotations / name, tmp_path / name)
    r = run_cli_in(tmp_path, "rank", "open.jsonl", "human.jsonl", "-o", "bench.jsonl")
    assert r.returncode == 0, r.stderr
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# (command line, the input it would destroy): every one must be refused with the input intact
SAME_FILE_CASES = [
    ("rank open.jsonl -o open.jsonl", "open.jsonl"),
    ("rank open.jsonl -o ranked.jsonl --report open.jsonl", "open.jsonl"),
    ("rank open.jsonl -o ./sub/../open.jsonl", "open.jsonl"),
    ("tasks bench.jsonl -o bench.jsonl", "bench.jsonl"),
    ("score bench.jsonl --scorer length -o bench.jsonl", "bench.jsonl"),
    ("eval bench.jsonl --scorer length --json bench.jsonl", "bench.jsonl"),
    ("curate filter bench.jsonl -o bench.jsonl", "bench.jsonl"),
    ("curate filter X.removed.jsonl -o X.jsonl", "X.removed.jsonl"),
    ("curate debias X.report.json -o X.jsonl --seed 0", "X.report.json"),
    ("curate merge --human open.jsonl --judge human.jsonl -o open.jsonl", "open.jsonl"),
    ("curate resolve bench.jsonl --scores s.jsonl -o s.jsonl", "s.jsonl"),
    ("analyze bias open.jsonl --json open.jsonl", "open.jsonl"),
    ("data get huozi --source huozi -o huozi/huozi_rlhf_data.json", "huozi/huozi_rlhf_data.json"),
    ("data get huozi --source huozi -o huozi/README.md", "huozi/README.md"),
    ("data get hf:team/pairs --source huozi -o ./huozi/../huozi/huozi_rlhf_data.json", "huozi/huozi_rlhf_data.json"),
]
CATALOG_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "catalog"


@pytest.mark.parametrize("command, victim", SAME_FILE_CASES, ids=[c for c, _ in SAME_FILE_CASES])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(work, command, victim):
    (work / "sub").mkdir()
    for name in ("X.removed.jsonl", "X.report.json"):
        shutil.copyfile(work / "bench.jsonl", work / name)
    (work / "s.jsonl").write_text('{"prompt_id": "p", "response_id": "r", "score": 1}\n', encoding="utf-8")
    shutil.copytree(CATALOG_FIXTURES / "huozi", work / "huozi")  # a dataset's source folder
    before = snapshot(work)
    r = run_cli_in(work, *command.split())
    assert_one_line_error(r, "is also an input")
    assert snapshot(work) == before  # nothing written, nothing lost


def test_a_hard_link_to_an_input_is_the_same_file(work):
    os.link(work / "open.jsonl", work / "alias.jsonl")
    before = (work / "open.jsonl").read_bytes()
    r = run_cli_in(work, "rank", "open.jsonl", "-o", "alias.jsonl")
    assert_one_line_error(r, "alias.jsonl", "is also an input")
    assert (work / "open.jsonl").read_bytes() == before


def test_rank_writes_both_outputs_or_neither(work):
    (work / "report-is-a-folder").mkdir()
    r = run_cli_in(work, "rank", "open.jsonl", "-o", "new.jsonl", "--report", "report-is-a-folder")
    assert_one_line_error(r, "report-is-a-folder", "is a folder")
    assert not (work / "new.jsonl").exists()


def test_an_output_under_a_file_is_one_line(work):
    r = run_cli_in(work, "rank", "open.jsonl", "-o", "open.jsonl/out.jsonl")
    assert_one_line_error(r, "is a file, not a folder")


def test_stale_temp_files_of_killed_runs_are_removed(work):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # a process that has ended
    stale = work / f".ranked.jsonl.{dead_pid}.0badc0de.tmp"
    stale.write_bytes(b"half a file")
    live = work / f".ranked.jsonl.{os.getpid()}.0badc0de.tmp"  # this test process is alive
    live.write_bytes(b"being written")
    r = run_cli_in(work, "rank", "open.jsonl", "-o", "ranked.jsonl")
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and live.exists()
    assert not [p for p in work.iterdir() if p.name.startswith(".ranked.jsonl.") and p != live]


def test_outputs_together_leaves_nothing_on_failure(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.json"
    with pytest.raises(RuntimeError):
        with outputs_together(a, b) as (ta, tb):
            write_jsonl(ta, [{"x": 1}])
            raise RuntimeError("the second output failed")
    assert list(tmp_path.iterdir()) == []
    with outputs_together(a, None, b) as (ta, none, tb):
        assert none is None
        write_jsonl(ta, [{"x": 1}])
        write_jsonl(tb, [{"y": 2}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.json"]


def test_a_full_disk_is_one_error_naming_the_file(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(CheemsInputError) as e:
        write_jsonl(tmp_path / "out.jsonl", [{"x": 1}])
    assert str(e.value) == f"{tmp_path / 'out.jsonl'}: cannot write: No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_check_outputs_and_same_file(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text("{}\n", encoding="utf-8")
    assert same_file(f, tmp_path / "." / "in.jsonl") and not same_file(f, tmp_path / "other.jsonl")
    check_outputs([tmp_path / "new" / "deeper" / "out.jsonl"], [f])  # folders to be made are fine
    with pytest.raises(CheemsInputError, match="given for two outputs"):
        check_outputs([tmp_path / "o.jsonl", tmp_path / "o.jsonl"])
    assert remove_stale_temps(tmp_path / "no-such-folder" / "x.jsonl") == 0


# ----------------------------------------------------------------------------- resumable outputs

@pytest.fixture
def tiny_model(work, cli_tiny_model):
    """The tiny model of `cheems init-model`, as ``tiny`` in the test's folder (a copy to change)."""
    return copy_checkpoint(cli_tiny_model, work / "tiny")


def test_rescoring_after_the_responses_changed_is_refused(work, tiny_model):
    r = run_cli_in(work, "score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (work / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    rows[0]["responses"][0]["content"] += "（修改过）"
    (work / "changed.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows),
                                        encoding="utf-8")
    scores_before = (work / "scores.jsonl").read_bytes()
    r = run_cli_in(work, "score", "changed.jsonl", "--model", "tiny", "-o", "scores.jsonl")
    assert_one_line_error(r, "scores.jsonl", "the responses changed", "--overwrite")
    assert (work / "scores.jsonl").read_bytes() == scores_before
    r = run_cli_in(work, "score", "changed.jsonl", "--model", "tiny", "-o", "scores.jsonl", "--overwrite")
    assert r.returncode == 0 and "scored 240 responses" in r.stdout, r.stdout + r.stderr


def test_rescoring_with_a_changed_model_is_refused(work, tiny_model):
    assert run_cli_in(work, "score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl").returncode == 0
    cfg = json.loads((tiny_model / "config.json").read_text(encoding="utf-8"))
    cfg["cheems_note"] = "retrained"
    (tiny_model / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    r = run_cli_in(work, "score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl")
    assert_one_line_error(r, "the model changed")


def test_a_corrupt_meta_file_is_one_line(work, tiny_model):
    assert run_cli_in(work, "score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl").returncode == 0
    (work / "scores.jsonl.meta.json").write_text("{not json", encoding="utf-8")
    r = run_cli_in(work, "score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl")
    assert_one_line_error(r, "scores.jsonl.meta.json", "--overwrite")


def test_training_into_the_starting_model_folder_is_refused(work, tiny_model):
    before = snapshot(tiny_model)
    r = run_cli_in(work, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "tiny")
    assert_one_line_error(r, "holds an input")
    assert snapshot(tiny_model) == before
