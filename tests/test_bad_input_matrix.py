"""Every command of `cheems` against the shared table of bad inputs (tests/bad_inputs.py).

For each (command, kind) pair the registry admits: exit code 2, stderr one line ``error: ...``
naming the bad file (its line and field where it has them) or flag, no traceback, nothing on
stdout, no file made and every file there byte-identical after. A missing output folder is the
exception: it is made and the output written. The commands run in this process
(tests/conftest.py ``run_cli_in``), each case in its own folder holding copies of the work
files its call names. The baselines run too, so that a case fails for its bad input alone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import typer.main

from cheems.cli import app
from tests.bad_inputs import (COMMANDS, DB, FAMILIES, FAMILY_OF_SHAPE, KINDS, LONGEST_ERROR_LINE, Call, Case,
                              WORK_FILES, cases, unplaced)
from tests.conftest import REPO_ROOT, run_cli_in
from tests.openai_server import JudgeServer, by_model, responder, smart_judge
from tests.test_cli import assert_one_line_error
from tests.tiny_models import copy_checkpoint

CASES = list(cases())


# ----------------------------------------------------------------------------- the registry itself

def leaf_commands(command, path: tuple[str, ...] = ()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from leaf_commands(sub, path + (name,))
    else:
        yield " ".join(path)


def test_every_command_is_registered():
    """A command added to the app fails here until tests/bad_inputs.py has its entry."""
    commands = set(leaf_commands(typer.main.get_command(app)))
    assert sorted(commands - COMMANDS.keys()) == [], "commands without an entry in tests/bad_inputs.py COMMANDS"
    assert sorted(COMMANDS.keys() - commands) == [], "entries of tests/bad_inputs.py for no command"


def test_every_command_places_every_family_or_says_why_not():
    for command in COMMANDS.values():
        families = {s.family for call in command.calls for s in call.slots}
        for family in FAMILIES:
            exempt = [e for e in command.exempt if e.kind == family]
            assert (family in families) != bool(exempt), (command.name, family, "a place or an exemption, not both")
        for e in command.exempt:
            assert e.reason.strip(), (command.name, e.kind)
            if e.kind in FAMILIES:
                continue
            kind = next((k for k in KINDS if k.name == e.kind), None)
            assert kind is not None, (command.name, e.kind, "no such kind")
            shapes = {s.shape for call in command.calls for s in call.slots}
            assert shapes & set(kind.shapes), (command.name, e.kind, "exempt from a kind it has no place for")


def test_every_kind_has_cases_and_every_pair_a_case_or_a_reason():
    placed = {(c.command, c.kind.name) for c in CASES}
    assert {k.name for k in KINDS} == {c.kind.name for c in CASES}
    reasons = unplaced()
    assert placed.isdisjoint(reasons)
    assert placed | reasons.keys() == {(c, k.name) for c in COMMANDS for k in KINDS}
    assert all(FAMILY_OF_SHAPE[c.slot.shape] == c.kind.family for c in CASES)


# ----------------------------------------------------------------------------- the work folder

@pytest.fixture(scope="module")
def loopback():
    """One OpenAI-compatible loopback server: the sampled models answer, the judge judges."""
    script = by_model({"judge": smart_judge, "模型甲": responder, "模型乙": responder})
    with JudgeServer(script) as server:
        yield server


def write_pipeline(path: Path, base_url: str) -> None:
    path.write_text(f"""\
sample:
  concurrency: 4
  models:
    - {{name: 模型甲, api_base: "{base_url}", n: 1, max_tokens: 64}}
    - {{name: 模型乙, api_base: "{base_url}", n: 1, max_tokens: 64}}
filter:
  max_chars: 8000
  min_responses: 2
judge:
  model: judge
  api_base: "{base_url}"
  concurrency: 4
  max_retries: 0
resolve:
  scope: cycles
""", encoding="utf-8")


@pytest.fixture(scope="module")
def work(tmp_path_factory, sample_annotations, cli_tiny_model, v_head_file_model, loopback) -> Path:
    """The files of tests/bad_inputs.py WORK_FILES, built with the commands themselves."""
    d = tmp_path_factory.mktemp("bad_input_matrix")

    def cli(*args: str) -> None:
        r = run_cli_in(d, *args)
        assert r.returncode == 0, (args, r.stderr)

    for name in ("open.jsonl", "human.jsonl"):
        shutil.copyfile(sample_annotations / name, d / name)
    lines = (d / "open.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (d / "few.jsonl").write_text("".join(lines[:4]), encoding="utf-8")
    cli("rank", "open.jsonl", "human.jsonl", "-o", "bench.jsonl")
    cli("rank", "open.jsonl", "-o", "open-bench.jsonl")
    cli("score", "bench.jsonl", "--scorer", "length", "-o", "scores.jsonl")
    rows = [json.loads(x) for x in (d / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    (d / "gold.jsonl").write_text("".join(json.dumps({"prompt_id": r["id"], "response_id": rid, "score": -level}) + "\n"
                                          for r in rows for rid, level in r["rank"].items()), encoding="utf-8")
    for name, how in (("length", ["--scorer", "length"]), ("random", ["--scorer", "random"]),
                      ("oracle", ["--scores", "gold.jsonl", "--name", "oracle"])):
        cli("eval", "bench.jsonl", *how, "--bootstrap", "50", "--json", f"{name}.json")
    (d / "down.json").write_text(json.dumps({"length": {"win": 0.6}, "random": {"win": 0.4}, "oracle": {"win": 0.9}}),
                                 encoding="utf-8")
    (d / "train.yaml").write_text("model: tiny\ntrain: bench.jsonl\noutput: run\nepochs: 1\n", encoding="utf-8")
    (d / "grid.yaml").write_text("benchmarks: [bench.jsonl]\nbase_models: [tiny]\n"
                                 "datasets:\n  - {name: d, path: bench.jsonl}\ndata_sizes: [20]\nseeds: [0]\n"
                                 "train: {epochs: 1}\n", encoding="utf-8")
    write_pipeline(d / "pipeline.yaml", loopback.base_url)
    cli("annotate", "init", "--db", DB)
    cli("annotate", "import", "open.jsonl", "--db", DB)
    cli("annotate", "init", "--db", "sqlite:///annotations-gold.db")
    copy_checkpoint(cli_tiny_model, d / "tiny")
    copy_checkpoint(v_head_file_model.dir, d / "v-head")
    shutil.copytree(REPO_ROOT / "tests" / "fixtures" / "catalog" / "zhihu", d / "zhihu-src")
    assert {p.name for p in d.iterdir()} >= set(WORK_FILES)
    return d


def named_entries(words: list[str], needs: tuple[str, ...]) -> list[str]:
    """The work entries a call's words (or its config) name: files, folders, sqlite:///FILE."""
    names = [w.removeprefix("sqlite:///") for w in words] + list(needs)
    for name in list(names):  # an eval report comes with its items beside it
        if name.endswith(".json"):
            names.append(name[: -len(".json")] + ".items.jsonl")
    return names


def case_folder(work: Path, folder: Path, call: Call) -> Path:
    """``folder`` holding a copy of every work entry the call's baseline names."""
    for name in named_entries(call.words(), call.needs):
        src = work / name
        if not src.exists() or (folder / name).exists():
            continue
        if src.is_dir():
            shutil.copytree(src, folder / name)
        else:
            shutil.copyfile(src, folder / name)
    return folder


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every path under ``folder``: a file's bytes, "folder" for a folder."""
    found: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), folder)] = "folder"
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = Path(path).read_bytes()
    return found


class ReachedServing(Exception):
    """The command got as far as starting its server (the test stops it there)."""


@pytest.fixture
def no_serving(monkeypatch):
    """Starting a uvicorn server raises ReachedServing instead of serving until stopped."""
    uvicorn = pytest.importorskip("uvicorn")

    def refuse(self, *args, **kwargs):
        raise ReachedServing()

    monkeypatch.setattr(uvicorn.Server, "run", refuse)


def run_call(folder: Path, call: Call, words: list[str]):
    return run_cli_in(folder, *words, input=call.input)


# ----------------------------------------------------------------------------- the baselines

BASELINES = [(name, i, call) for name, command in COMMANDS.items() for i, call in enumerate(command.calls)
             if call.baseline is True]


@pytest.mark.parametrize("name, i, call", BASELINES, ids=[f"{n}#{i}" for n, i, _ in BASELINES])
def test_the_baseline_runs(work, tmp_path, name, i, call, no_serving):
    folder = case_folder(work, tmp_path, call)
    if call.serves:
        with pytest.raises(ReachedServing):
            run_call(folder, call, call.words())
        return
    r = run_call(folder, call, call.words())
    assert r.returncode == 0, (call.words(), r.stdout, r.stderr)
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- the matrix

@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(work, tmp_path, case: Case, no_serving):
    folder = case_folder(work, tmp_path, case.call)
    arg = case.kind.make(folder, case.slot)
    items = folder / case.slot.value.replace(".json", ".items.jsonl")
    if case.slot.shape == "json" and items.is_file() and (folder / arg).is_file():  # an eval report's items beside it
        shutil.copyfile(items, folder / arg.replace(".json", ".items.jsonl"))
    words = case.call.words(**{case.slot.name: arg})
    before = snapshot(folder)
    try:
        r = run_call(folder, case.call, words)
    except ReachedServing:
        pytest.fail(f"cheems {' '.join(words)}: started serving instead of refusing the bad input")
    if case.kind.succeeds:
        assert r.returncode == 0, (words, r.stderr)
        assert (folder / arg).exists(), f"{arg} not written"
        after = snapshot(folder)
        assert {k: v for k, v in after.items() if k in before} == before, "an input changed"
        return
    assert_one_line_error(r)
    line = r.stderr.strip()
    for part in case.kind.names(arg, case.call.flag_of(case.slot), case.slot):
        assert any(p in line for p in (part if isinstance(part, tuple) else (part,))), (part, line)
    assert len(line) <= LONGEST_ERROR_LINE, f"an error line of {len(line)} characters"
    after = snapshot(folder)
    assert sorted(after.keys() - before.keys()) == [], "files made by a refused run"
    assert [k for k in before if after.get(k) != before[k]] == [], "files changed by a refused run"
