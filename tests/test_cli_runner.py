"""The two ways tests run the command line (tests/conftest.py): ``run_cli_in`` (this process) must
give what ``run_cli_process`` (a fresh ``python -m cheems.cli``) gives: the same exit code, the
same stdout and the same stderr, character for character. The in-process runner must also show
log lines and warnings where a fresh process shows them, fail the test on a crash, and leave
nothing of a run behind in this process.

The fresh-process cases below also keep every command group running through the real entry
point: the top-level commands, ``curate``, ``analyze`` and ``annotate``."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from cheems.cli import console
from tests.conftest import run_cli_in, run_cli_process, write_jsonl_rows
from tests.test_cli import good_row
from tests.tiny_models import copy_checkpoint

ODD_NAME = os.fsdecode(b"r\xffnked.jsonl")  # not UTF-8: printed escaped

CASES = {  # name: the command line, run in a folder holding open.jsonl, human.jsonl and bad.jsonl
    "help": ["--help"],
    "a command's help": ["eval", "--help"],
    "the curate group": ["curate", "--help"],
    "the analyze group": ["analyze", "bias", "open.jsonl", "human.jsonl"],
    "the annotate group": ["annotate", "import", "open.jsonl", "--db", "sqlite:///no/such/folder/a.db"],
    "a table": ["stats", "open.jsonl", "human.jsonl"],
    "files written": ["rank", "open.jsonl", "human.jsonl", "-o", "bench.jsonl", "--report", "report.json"],
    "a name that is not UTF-8": ["rank", "open.jsonl", "-o", ODD_NAME],
    "invalid rows, exit 1": ["validate", "bad.jsonl"],
    "a bad input, exit 2": ["tasks", "bad.jsonl", "-o", "tasks.jsonl"],
    "a missing file": ["stats", "缺失.jsonl"],
    "a usage error": ["rank"],
    "an unknown command": ["rnak"],
    "several paths after one flag": ["curate", "merge", "--human", "open.jsonl", "human.jsonl", "--judge",
                                     "open.jsonl", "-o", "merged.jsonl"],
}


def inputs(folder: Path, sample_annotations: Path) -> Path:
    folder.mkdir()
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copyfile(sample_annotations / name, folder / name)
    write_jsonl_rows(folder / "bad.jsonl", [good_row("一"), '{"id": "坏", ', good_row("二")])
    return folder


def assert_same_run(tmp_path: Path, *args: str) -> None:
    """``cheems ARGS`` in two copies of ``tmp_path/here``: the same output either way (but for the
    folder's own path, where a message names it), and the same files."""
    here, there = tmp_path / "here", tmp_path / "there"
    shutil.copytree(here, there)
    a = run_cli_in(here, *args)
    b = run_cli_process(there, *args)
    assert a.returncode == b.returncode, (a.returncode, b.returncode, a.stderr, b.stderr)
    assert a.stdout.replace(str(here), "FOLDER") == b.stdout.replace(str(there), "FOLDER")
    assert a.stderr.replace(str(here), "FOLDER") == b.stderr.replace(str(there), "FOLDER")
    files = [sorted(p.relative_to(folder) for p in folder.rglob("*")) for folder in (here, there)]
    assert files[0] == files[1]


@pytest.mark.parametrize("name", list(CASES))
def test_in_this_process_as_in_a_fresh_one(tmp_path, sample_annotations, name):
    inputs(tmp_path / "here", sample_annotations)
    assert_same_run(tmp_path, *CASES[name])


def test_a_model_run_in_this_process_as_in_a_fresh_one(tmp_path, sample_annotations, cli_tiny_model):
    """The libraries under the models commands (torch, transformers) print nothing more, or less, here."""
    here = inputs(tmp_path / "here", sample_annotations)
    assert run_cli_in(here, "rank", "open.jsonl", "-o", "bench.jsonl").returncode == 0
    copy_checkpoint(cli_tiny_model, here / "tiny")
    assert_same_run(tmp_path, "eval", "bench.jsonl", "--model", "tiny", "--check", "--max-length", "64",
                    "--bootstrap", "0", "--json", "r.json")


@pytest.fixture
def stats_printing(monkeypatch):
    """``also()`` runs inside ``cheems stats`` (just before its table is printed); set it per test."""
    calls = []
    table = console.out.print

    def print_with(*args, **kwargs):
        calls.append(args)
        hook[0]()
        return table(*args, **kwargs)

    hook = [lambda: None]
    monkeypatch.setattr(console.out, "print", print_with)

    def also(fn):
        hook[0] = fn
        return calls

    return also


def test_log_lines_and_warnings_land_where_a_fresh_process_shows_them(tmp_path, stats_printing):
    write_jsonl_rows(tmp_path / "a.jsonl", [good_row("一")])
    library = logging.getLogger("tests.a_library")
    handler = logging.StreamHandler()  # bound now, as a library's handler is at import: to the outer stderr
    outer = handler.stream
    library.addHandler(handler)
    root_handlers = list(logging.getLogger().handlers)
    try:
        def noise():
            library.warning("from a library's own handler")
            logging.getLogger("tests.no_handler").warning("to logging's last resort")
            warnings.warn("a user warning", UserWarning)
            warnings.warn("a deprecation a user never sees", DeprecationWarning)

        calls = stats_printing(noise)
        r = run_cli_in(tmp_path, "stats", "a.jsonl")
    finally:
        library.removeHandler(handler)
    assert r.returncode == 0, r.stderr
    assert calls, "the hook did not run"
    assert "from a library's own handler" in r.stderr
    assert "to logging's last resort" in r.stderr
    assert "UserWarning: a user warning" in r.stderr
    assert "deprecation" not in r.stderr
    assert "a.jsonl" in r.stdout and "from a library" not in r.stdout
    assert handler.stream is outer, "the library's handler must print where it printed before the run"
    assert logging.getLogger().handlers == root_handlers


def test_a_run_leaves_nothing_behind(tmp_path, stats_printing):
    write_jsonl_rows(tmp_path / "a.jsonl", [good_row("一")])
    before = (dict(os.environ), os.getcwd(), list(sys.argv), list(logging.getLogger("DeepSpeed").filters),
              list(warnings.filters))

    def change_the_process():
        os.environ["RANK"] = "3"
        os.chdir(tmp_path.parent)
        assert os.environ["CHEEMS_RUNNER_PROBE"] == "given"
        assert sys.argv[1:] == ["stats", "a.jsonl"]

    stats_printing(change_the_process)
    r = run_cli_in(tmp_path, "stats", "a.jsonl", env={"CHEEMS_RUNNER_PROBE": "given"})
    assert r.returncode == 0, r.stderr
    after = (dict(os.environ), os.getcwd(), list(sys.argv), list(logging.getLogger("DeepSpeed").filters),
             list(warnings.filters))
    assert after == before


def test_a_crash_fails_the_test_with_the_runs_output(tmp_path, stats_printing):
    write_jsonl_rows(tmp_path / "a.jsonl", [good_row("一")])

    def crash():
        print("printed before the crash")
        raise RuntimeError("a bug in a command")

    stats_printing(crash)
    with pytest.raises(RuntimeError, match="a bug in a command") as e:
        run_cli_in(tmp_path, "stats", "a.jsonl")
    note = "\n".join(getattr(e.value, "__notes__", []))
    assert "cheems stats a.jsonl" in note and "printed before the crash" in note


def test_one_run_at_a_time(tmp_path, stats_printing):
    write_jsonl_rows(tmp_path / "a.jsonl", [good_row("一")])
    stats_printing(lambda: run_cli_in(tmp_path, "stats", "a.jsonl"))
    with pytest.raises(RuntimeError, match="one in-process cheems run at a time"):
        run_cli_in(tmp_path, "stats", "a.jsonl")
