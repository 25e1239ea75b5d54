"""The public API: ``import cheems`` offers one documented call per job, loads none of the heavy
packages, and every command of the CLI is a thin layer over exactly one of those calls, made
through the ``cheems`` namespace (so replacing ``cheems.rank`` here is what ``cheems rank`` calls)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

import cheems
from cheems.cli import app
from tests.conftest import REPO_ROOT, run_cli_in

COMMANDS = {
    "tasks": "make_tasks", "rank": "rank", "validate": "validate", "stats": "stats",
    "eval": "evaluate", "score": "score", "bon": "best_of_n", "compare": "compare", "correlate": "correlate",
    "report": "write_report",
    "train": "train", "init-model": "init_model", "convert": "convert", "serve": "serve",
    "data list": "list_datasets", "data info": "dataset_info", "data get": "load_dataset",
    "experiment run": "run_experiment", "experiment status": "experiment_status",
    "experiment table": "experiment_tables",
    "curate sample": "curate_sample", "curate filter": "curate_filter", "curate judge": "curate_judge",
    "curate resolve": "curate_resolve", "curate debias": "curate_debias", "curate merge": "curate_merge",
    "analyze bias": "analyze_bias",
    "annotate init": "annotate_init", "annotate add-user": "annotate_add_user", "annotate import": "annotate_import",
    "annotate serve": "annotate_serve", "annotate status": "annotate_status", "annotate export": "annotate_export",
    "annotate study add": "annotate_add_study", "annotate study list": "annotate_list_studies",
}
"""Every command of `cheems` -> the public call it makes."""

NO_CALL = {
    "example-data": "copies the bundled sample files into a folder: nothing to compute, no library call of its own",
    "sample": "the hidden old name of example-data",
}
"""The commands without a library call of their own, and why."""

TYPES = {"CheemsInputError", "Comparison", "Prompt", "Response", "__version__",
         "ReadSettings", "StatisticsSettings", "ScorerSettings", "OutputSettings"}
"""The names of ``cheems.__all__`` that are data types, the settings classes the calls take (and
the version), not calls."""

HEAVY = ("torch", "transformers", "fastapi", "ray", "matplotlib", "sqlalchemy", "openai", "vllm")


def walk(command, path: tuple[str, ...] = ()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from walk(sub, path + (name,))
    else:
        yield " ".join(path)


def test_the_table_covers_every_command():
    commands = set(walk(typer.main.get_command(app)))
    assert commands - COMMANDS.keys() - NO_CALL.keys() == set(), "commands missing from COMMANDS (or NO_CALL)"
    assert COMMANDS.keys() - commands == set() and NO_CALL.keys() - commands == set(), "no such command"
    assert set(COMMANDS.values()) == set(cheems.__all__) - TYPES - {"read"}, "a public call no command makes"


class Called(Exception):
    """Raised by the stand-in of a public call: the command got as far as calling it."""


@pytest.fixture(scope="module")
def files(tmp_path_factory, sample_annotations) -> dict[str, str]:
    """The inputs the commands are given (never read: the public call is replaced)."""
    folder = tmp_path_factory.mktemp("public_api")
    report = folder / "a.json"
    report.write_text(json.dumps({"model": "a", "subsets": {}}), encoding="utf-8")
    (folder / "down.json").write_text(json.dumps({"a": {"win": 0.5}}), encoding="utf-8")
    return {"open": str(sample_annotations / "open.jsonl"), "human": str(sample_annotations / "human.jsonl"),
            "report": str(report), "down": str(folder / "down.json"),
            "pipeline": str(REPO_ROOT / "examples" / "curation" / "pipeline.yaml")}


DB = ["--db", "sqlite:///annotations-test.db"]

ARGS = {
    "tasks": ["{open}", "-o", "tasks.jsonl"], "rank": ["{open}", "-o", "bench.jsonl"], "validate": ["{open}"],
    "stats": ["{open}"], "eval": ["{open}", "--scorer", "length"],
    "score": ["{open}", "--scorer", "length", "-o", "scores.jsonl"],
    "bon": ["{open}", "--gold", "{human}", "--scores", "{human}"], "compare": ["{report}", "{report}"],
    "correlate": ["{report}", "--downstream", "{down}"], "report": ["{report}", "-o", "page.html"],
    "train": ["--train", "{open}", "--model", "model", "-o", "trained"],
    "init-model": ["-o", "tiny", "--tokenizer-from", "{open}"], "convert": ["source", "-o", "converted"],
    "serve": ["model"],
    "data list": [], "data info": ["zhihu"], "data get": ["zhihu", "-o", "zhihu.jsonl"],
    "experiment run": ["grid.yaml", "-o", "study"], "experiment status": ["study"], "experiment table": ["study"],
    "curate sample": ["{open}", "-o", "sampled.jsonl", "--config", "{pipeline}"],
    "curate filter": ["{open}", "-o", "filtered.jsonl"],
    "curate judge": ["{open}", "-o", "judged.jsonl", "--judge", "judge", "--api-base", "http://127.0.0.1:9/v1"],
    "curate resolve": ["{open}", "-o", "resolved.jsonl", "--scores", "{human}"],
    "curate debias": ["{open}", "-o", "debiased.jsonl", "--seed", "0"],
    "curate merge": ["--human", "{human}", "--judge", "{open}", "-o", "merged.jsonl"],
    "analyze bias": ["{open}"],
    "annotate init": DB, "annotate add-user": ["李雷", "--password-stdin", *DB], "annotate import": ["{open}", *DB],
    "annotate serve": DB, "annotate status": DB, "annotate export": ["-o", "bench.jsonl", *DB],
    "annotate study add": ["诗歌", *DB], "annotate study list": DB,
}
"""Valid arguments of each command."""


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_calls_its_public_call(command, files, tmp_path, monkeypatch):
    calls = []

    def stand_in(*args, **kwargs):
        calls.append((args, kwargs))
        raise Called(command)

    monkeypatch.setattr(cheems, COMMANDS[command], stand_in)
    args = [a.format(**files) for a in ARGS[command]]
    with pytest.raises(Called):
        r = run_cli_in(tmp_path, *command.split(), *args, input="secret\n")
        pytest.fail(f"cheems {command} ended ({r.returncode}) without calling cheems.{COMMANDS[command]}:\n{r.stderr}")
    assert len(calls) == 1


PUBLIC_CALLS = sorted(set(cheems.__all__) - TYPES)


@pytest.mark.parametrize("name", PUBLIC_CALLS)
def test_each_public_call_is_documented_in_one_form(name):
    call = getattr(cheems, name)
    doc = inspect.getdoc(call) or ""
    first = doc.splitlines()[0] if doc else ""
    assert first.endswith(".") and len(first) > 20, f"cheems.{name}: the first line says what it computes"
    sections = ("Args", "Returns", "Raises") if inspect.signature(call).parameters else ("Returns", "Raises")
    where = [doc.find(f"\n{section}:\n") for section in sections]
    assert -1 not in where and where == sorted(where), f"cheems.{name}: {', '.join(sections)}, in that order"
    assert call.__module__.startswith("cheems.api."), call.__module__
    assert name in dir(cheems)


def test_the_types_are_documented():
    for name in sorted(TYPES - {"__version__"}):
        assert inspect.getdoc(getattr(cheems, name)), name
    assert isinstance(cheems.__version__, str)


def test_import_cheems_stays_light():
    """A fresh ``import cheems`` loads none of the heavy packages, nor the modules of the calls
    or of their settings."""
    probe = ("import json, sys; import cheems; "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('cheems') or '.' not in m)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(json.loads(done.stdout))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
    assert not any(m.startswith("cheems.api") for m in loaded), sorted(loaded)
    assert "cheems.common_settings" not in loaded


def test_the_settings_classes_are_the_commands_own():
    """``cheems.ReadSettings`` & co. are the classes the commands build from their flags, loaded on first use."""
    from cheems import common_settings

    for name in ("ReadSettings", "StatisticsSettings", "ScorerSettings", "OutputSettings"):
        assert getattr(cheems, name) is getattr(common_settings, name) and name in dir(cheems)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        cheems.nothing_here  # noqa: B018
