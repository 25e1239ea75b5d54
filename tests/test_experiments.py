"""`cheems experiment run` / `status`: study grids trained and evaluated cell by cell with tiny real
models, resumed after a kill, grown, and refused when their settings change."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cheems.experiments.cells import cell_id, changed_settings, setting_defaults, settings_fingerprint
from cheems.experiments.grid import read_grid
from cheems.experiments.prepare import sample_by_prompt
from cheems.experiments.cell_recipe import cell_model_settings, count_parameters
from cheems.formats import read_prompts
from cheems.records import CheemsInputError
from cheems.training.training_data import training_pairs
from tests.conftest import HANG_TIMEOUT_S, kill_when, run_cli_in
from tests.tiny_models import ONE_THREAD_ENV, copy_checkpoint

pytestmark = pytest.mark.usefixtures("single_torch_thread")

TRAIN = "train: {epochs: 1, learning_rate: 1.0e-3, micro_batch_size: 8, gradient_accumulation: 1, save_every: 1}\n"


def experiment(cwd: Path, *args):
    """``cheems experiment ARGS`` in this process, in the folder ``cwd``."""
    return run_cli_in(cwd, "experiment", *args)


def experiment_command(*args) -> list[str]:
    """The argv of ``cheems experiment ARGS`` in a fresh process."""
    return [sys.executable, "-m", "cheems.cli", "experiment", *map(str, args)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, sample_annotations, cli_tiny_model):
    """open.jsonl and human.jsonl (the sample ranked by `cheems rank`) and the tiny model."""
    d = tmp_path_factory.mktemp("experiments")
    for name in ("open", "human"):
        r = run_cli_in(d, "rank", sample_annotations / f"{name}.jsonl", "-o", f"{name}.jsonl")
        assert r.returncode == 0, r.stderr
    copy_checkpoint(cli_tiny_model, d / "tiny")
    return d


def write_grid(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(body, encoding="utf-8")
    return path


GRID = ("benchmarks: [open.jsonl]\n"
        "base_models: [tiny]\n"
        "datasets:\n"
        "  - {name: open-train, path: open.jsonl}\n"
        "  - {name: human-debiased, path: human.jsonl, curate: [debias]}\n"
        "data_sizes: [20, 40]\n"
        "seeds: [0]\n" + TRAIN + "eval: {batch_size: 16}\n")


@pytest.fixture(scope="module")
def finished(workdir):
    """The 2 datasets x 2 sizes grid, run once into ``grid-out``."""
    write_grid(workdir, "grid.yaml", GRID)
    r = experiment(workdir, "run", "grid.yaml", "-o", "grid-out")
    assert r.returncode == 0, r.stderr
    return workdir / "grid-out"


def results(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- a whole grid

def test_every_cell_reports_what_a_fresh_eval_of_its_model_finds(workdir, finished):
    rows = results(finished)
    assert [r["cell"] for r in rows] == ["open-train__tiny__20__s0", "open-train__tiny__40__s0",
                                         "human-debiased__tiny__20__s0", "human-debiased__tiny__40__s0"]
    for row in rows:
        assert row["folder"] == f"cells/{row['cell']}" and row["base_model_name"] == "tiny"
        assert 0 < row["pairs"] <= row["data_size"] and row["seed"] == 0 and row["variant"] is None
        model = finished / row["folder"] / "model"
        fresh = run_cli_in(workdir, "eval", "open.jsonl", "--model", model, "--json", f"{row['cell']}.json")
        assert fresh.returncode == 0, fresh.stderr
        report = json.loads((workdir / f"{row['cell']}.json").read_text(encoding="utf-8"))
        # scored in another process: the numbers agree within 1e-6 (docs/experiments.md)
        assert row["eval"]["overall"] == pytest.approx(report["overall"], abs=1e-6)
        for key in ("accuracy", "exact_match", "score"):
            assert row["eval"]["subsets"]["open"][key] == pytest.approx(report["subsets"]["open"][key], abs=1e-6)
        assert json.loads((finished / row["folder"] / "eval.json").read_text(encoding="utf-8")) == row["eval"]


def test_the_parameter_count_is_the_saved_models(finished):
    import torch  # noqa: F401
    from transformers import AutoModelForSequenceClassification

    row = results(finished)[0]
    model = AutoModelForSequenceClassification.from_pretrained(finished / row["folder"] / "model")
    assert row["parameters"] == count_parameters(finished / row["folder"] / "model") \
        == sum(p.numel() for p in model.parameters())


def test_the_sampled_data_holds_whole_prompts_and_the_debiased_set_is_balanced(workdir, finished):
    source = {p.id: p for p in read_prompts(workdir / "open.jsonl").prompts}
    row = results(finished)[1]
    sampled = read_prompts(finished / row["folder"] / "data" / "train.jsonl").prompts
    for p in sampled:
        assert p.rank == source[p.id].rank and [r.id for r in p.responses] == [r.id for r in source[p.id].responses]
    assert sum(len(pairs) for _, _, pairs in training_pairs(sampled)[0]) == row["pairs"]
    debiased = read_prompts(finished / "cells" / "human-debiased__tiny__40__s0" / "data" / "train.jsonl").prompts
    assert all(p.rank is None and p.comparisons for p in debiased)  # length_debias turned rankings into pairs


def test_a_second_run_trains_nothing_and_status_lists_the_cells(workdir, finished):
    before = (finished / "results.jsonl").read_bytes()
    weights = {p: digest(p) for p in finished.glob("cells/*/model/model.safetensors")}
    r = experiment(workdir, "run", "grid.yaml", "-o", "grid-out")
    assert r.returncode == 0, r.stderr
    assert "ran 0 of 4 cells (4 finished before)" in r.stdout
    assert "cell 1/4 open-train__tiny__20__s0: finished before, skipped" in r.stdout  # one line per cell
    assert r.stdout.count("finished before, skipped") == 4
    assert (finished / "results.jsonl").read_bytes() == before
    assert {p: digest(p) for p in finished.glob("cells/*/model/model.safetensors")} == weights
    st = experiment(workdir, "status", "grid-out")
    assert st.returncode == 0, st.stderr
    assert "4 of 4 cells done, 0 left" in st.stdout
    overall = {row["cell"]: f"{row['eval']['overall']:.4f}" for row in results(finished)}
    for cell, value in overall.items():
        line = next(x for x in st.stdout.splitlines() if cell in x)
        assert "done" in line and value in line


def test_a_grown_grid_adds_its_new_cells_only(workdir, finished):
    grown = workdir / "grown-out"
    shutil.copytree(finished, grown)
    before = (grown / "results.jsonl").read_bytes()
    write_grid(workdir, "grown.yaml", GRID.replace("data_sizes: [20, 40]", "data_sizes: [20, 40, 10]"))
    r = experiment(workdir, "run", "grown.yaml", "-o", "grown-out")
    assert r.returncode == 0, r.stderr
    assert "ran 2 of 6 cells (4 finished before)" in r.stdout
    assert (grown / "results.jsonl").read_bytes().startswith(before)
    assert [row["cell"] for row in results(grown)][4:] == ["open-train__tiny__10__s0", "human-debiased__tiny__10__s0"]
    record = json.loads((grown / "experiment.json").read_text(encoding="utf-8"))
    assert len(record["cells"]) == 6 and record["data_sizes"] == [20, 40, 10]


def test_a_changed_train_setting_is_refused_in_one_line(workdir, finished):
    before = (finished / "results.jsonl").read_bytes()
    write_grid(workdir, "changed.yaml", GRID.replace("learning_rate: 1.0e-3", "learning_rate: 2.0e-3"))
    r = experiment(workdir, "run", "changed.yaml", "-o", "grid-out")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "train.learning_rate 0.001 -> 0.002" in lines[0] and "another -o folder" in lines[0]
    assert (finished / "results.jsonl").read_bytes() == before


def test_a_cell_whose_data_changed_is_refused_naming_it(workdir, finished, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(finished, copy)
    rows = (workdir / "open.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "open.jsonl").write_text("\n".join(rows[:-1]) + "\n", encoding="utf-8")
    shutil.copy(workdir / "human.jsonl", tmp_path / "human.jsonl")
    body = GRID.replace("tiny]", f"{{path: {workdir / 'tiny'}, name: tiny}}]")
    body = body.replace("benchmarks: [open.jsonl]", f"benchmarks: [{workdir / 'open.jsonl'}]")
    write_grid(tmp_path, "grid.yaml", body)
    r = experiment(tmp_path, "run", "grid.yaml", "-o", "out")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "cell open-train__tiny__20__s0 exists with other settings" in r.stderr
    assert "the dataset's files changed" in r.stderr


HOLD_THE_FOLDER = ("import sys, time\nfrom cheems.experiments.folder import folder_lock\n"
                   "with folder_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n")


def test_a_second_run_on_a_folder_is_refused_naming_the_first_and_a_killed_runs_lock_frees_it(workdir, finished,
                                                                                              tmp_path):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    before = (out / "results.jsonl").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_FOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        r = experiment(workdir, "run", "grid.yaml", "-o", out)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"another `cheems experiment run` (pid {holder.pid}) is running on this folder" in r.stderr
        assert (out / "results.jsonl").read_bytes() == before
    finally:
        holder.kill()  # SIGKILL: its lock file stays behind, naming a dead process
        holder.wait()
    r = experiment(workdir, "run", "grid.yaml", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "ran 0 of 4 cells (4 finished before)" in r.stdout
    assert (out / "results.jsonl").read_bytes() == before


def test_status_and_table_read_results_without_changing_them_and_run_repairs(workdir, finished, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    path = out / "results.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b'{"cell": "x"}\n')  # a whole line, not a results line
    st = experiment(tmp_path, "status", "out")
    assert st.returncode == 2 and len(st.stderr.strip().splitlines()) == 1
    assert "out/results.jsonl:5: dataset: expected a non-empty string" in st.stderr
    assert path.read_bytes() == good + b'{"cell": "x"}\n'

    unfinished = good + good.splitlines(keepends=True)[0][:60]  # a line still being written
    path.write_bytes(unfinished)
    for command in ("status", "table"):
        r = experiment(tmp_path, command, "out")
        assert r.returncode == 0, r.stderr
        assert "out/results.jsonl:5: the last line is incomplete" in r.stderr
        assert path.read_bytes() == unfinished
    assert "4 of 4 cells done, 0 left" in experiment(tmp_path, "status", "out").stdout
    r = experiment(workdir, "run", "grid.yaml", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "ran 0 of 4 cells (4 finished before)" in r.stdout and "cut off an unfinished last line" in r.stderr
    assert path.read_bytes() == good


def test_a_cell_evaluates_on_the_gpu_unless_the_grid_names_a_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cell_model_settings({"batch_size": 4}).device == "cuda"
    assert cell_model_settings({"device": "cpu"}).device == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cell_model_settings({}).device == "cpu" and cell_model_settings({}).batch_size == 64


def test_settings_on_one_side_only_count_as_changed_only_when_they_are_not_the_default():
    defaults = setting_defaults()
    assert defaults["train.reg_coef"] == 0.1 and defaults["eval.device"] == "cpu"
    given = {"train": {"epochs": 1}, "eval": {}, "seed": 0}
    every_default = {"train": {"epochs": 1, "reg_coef": 0.1, "warmup_ratio": 0.1},
                     "eval": {"device": "cpu", "batch_size": 64}, "seed": 0}
    assert changed_settings(every_default, given, defaults) == []
    assert changed_settings(given, every_default, defaults) == []
    assert changed_settings({**every_default, "train": {"epochs": 1, "reg_coef": 0.5}}, given, defaults) == \
        ["train.reg_coef 0.5 -> 0.1 (the default is 0.1)"]
    assert changed_settings({"seed": 0}, {"seed": 0, "extra": 1}, defaults) == ["extra added"]


def test_a_folder_recorded_with_every_default_by_an_older_cheems_still_runs(workdir, finished, tmp_path):
    from cheems.experiments.grid import train_settings
    from cheems.scoring.model_settings import ModelSettings
    from cheems.training.output_folder import RESUMABLE_CHANGES

    out = tmp_path / "out"
    shutil.copytree(finished, out)
    grid = read_grid(workdir / "grid.yaml")

    def older(settings: dict) -> dict:
        """Settings as a cheems that merged in every default recorded them, before reg_coef existed."""
        train = {k: v for k, v in train_settings(grid.train).items() if k not in RESUMABLE_CHANGES}
        del train["reg_coef"]
        return {**settings, "train": train, "eval": dataclasses.asdict(ModelSettings(**grid.eval))}

    record = json.loads((out / "experiment.json").read_text(encoding="utf-8"))
    (out / "experiment.json").write_text(json.dumps({**record, "settings": older(record["settings"])}),
                                         encoding="utf-8")
    fingerprints = {}
    for cell_file in out.glob("cells/*/cell.json"):
        cell = json.loads(cell_file.read_text(encoding="utf-8"))
        settings = older(cell["settings"])
        fingerprints[cell["cell"]] = settings_fingerprint(settings)
        cell_file.write_text(json.dumps({**cell, "settings": settings, "fingerprint": fingerprints[cell["cell"]]}),
                             encoding="utf-8")
    rows = [{**row, "fingerprint": fingerprints[row["cell"]]} for row in results(out)]
    (out / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    for _ in range(2):  # the second run meets the records the first brought up to date
        r = experiment(workdir, "run", "grid.yaml", "-o", out)
        assert r.returncode == 0, r.stderr
        assert "ran 0 of 4 cells (4 finished before)" in r.stdout
    record = json.loads((out / "experiment.json").read_text(encoding="utf-8"))
    record["settings"]["train"]["reg_coef"] = 0.5
    (out / "experiment.json").write_text(json.dumps(record), encoding="utf-8")
    r = experiment(workdir, "run", "grid.yaml", "-o", out)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "train.reg_coef 0.5 -> 0.1" in r.stderr


def test_a_changed_accelerate_config_is_refused_naming_launch_config(workdir, tmp_path):
    from cheems.experiments.folder import write_experiment_record
    from cheems.experiments.run import plan_cells

    config = tmp_path / "accelerate.yaml"
    shutil.copy(Path(__file__).resolve().parents[1] / "configs" / "accelerate" / "ddp.yaml", config)
    grid_file = write_grid(tmp_path, "grid.yaml", f"benchmarks: [{workdir / 'open.jsonl'}]\n"
                           f"base_models: [{workdir / 'tiny'}]\n"
                           f"datasets: [{{name: d, path: {workdir / 'open.jsonl'}}}]\n"
                           "data_sizes: [10]\n" + TRAIN + "launch: {config: accelerate.yaml, processes: 2}\n")
    out = tmp_path / "out"
    plans, shared = plan_cells(read_grid(grid_file), out)
    assert plan_cells(read_grid(grid_file), out)[1] == shared
    out.mkdir()
    write_experiment_record(out, {"settings": shared, "cells": [p.cell for p in plans]})
    config.write_text(config.read_text(encoding="utf-8") + "mixed_precision: bf16\n", encoding="utf-8")
    changed_plans, changed = plan_cells(read_grid(grid_file), out)
    assert changed["launch"]["processes"] == 2 and changed["launch"]["config"] != shared["launch"]["config"]
    assert changed_plans[0].fingerprint != plans[0].fingerprint
    r = experiment(tmp_path, "run", "grid.yaml", "-o", "out")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "launch.config: the accelerate config file's contents changed" in r.stderr
    assert not (out / "cells").exists()


def test_a_cell_whose_base_model_weights_changed_is_refused_naming_them(workdir, tmp_path):
    from safetensors.torch import load_file, save_file

    from cheems.experiments.folder import write_cell_record
    from cheems.experiments.run import plan_cells

    model = copy_checkpoint(workdir / "tiny", tmp_path / "base")
    grid_file = write_grid(tmp_path, "grid.yaml", f"benchmarks: [{workdir / 'open.jsonl'}]\nbase_models: [base]\n"
                           f"datasets: [{{name: d, path: {workdir / 'open.jsonl'}}}]\ndata_sizes: [10, 20]\n" + TRAIN)
    out = tmp_path / "out"
    plans, _ = plan_cells(read_grid(grid_file), out)
    assert all(p.settings["base_model_files"] for p in plans)
    for plan in plans:  # the cells as a run that prepared them recorded them
        write_cell_record(out, plan.cell, {"cell": plan.cell, "fingerprint": plan.fingerprint,
                                           "settings": plan.settings})
    tensors = load_file(model / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    r = experiment(tmp_path, "run", "grid.yaml", "-o", "out")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "cell d__base__10__s0 exists with other settings (the base model's files changed" in r.stderr
    assert not (out / "results.jsonl").exists()


def test_a_record_from_before_base_model_fingerprints_still_matches():
    old = {"base_model": "m", "seed": 0}
    assert changed_settings(old, {**old, "base_model_files": "abc"}) == []
    assert changed_settings({**old, "base_model_files": "abc"}, {**old, "base_model_files": "abd"}) == \
        ["the base model's files changed (its weights, config or tokenizer)"]


# ----------------------------------------------------------------------------- kill and resume

def test_a_killed_run_resumes_the_interrupted_cell_from_its_checkpoint(workdir, tmp_path):
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copy(workdir / name, tmp_path / name)
    write_grid(tmp_path, "grid.yaml", GRID.replace("data_sizes: [20, 40]", "data_sizes: [10, all]")
               .replace("tiny]", f"{{path: {workdir / 'tiny'}, name: tiny}}]")
               .replace("micro_batch_size: 8", "micro_batch_size: 4")
               .replace("  - {name: human-debiased, path: human.jsonl, curate: [debias]}\n", ""))
    out = tmp_path / "out"
    first, second = out / "cells" / "open-train__tiny__10__s0", out / "cells" / "open-train__tiny__all__s0"

    def second_cell_checkpointed() -> bool:
        return (out / "results.jsonl").exists() and any((second / "model").glob("checkpoint-*/trainer_state.json"))

    env = {**os.environ, **ONE_THREAD_ENV}
    proc = subprocess.Popen(experiment_command("run", "grid.yaml", "-o", "out"), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, second_cell_checkpointed)
    assert not (second / "model" / "train_summary.json").exists()
    line = (out / "results.jsonl").read_bytes()
    assert [json.loads(x)["cell"] for x in line.splitlines()] == [first.name]
    weights_file = first / "model" / "model.safetensors"
    weights = (digest(weights_file), weights_file.stat().st_mtime_ns)

    again = subprocess.run(experiment_command("run", "grid.yaml", "-o", "out"), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert again.returncode == 0, again.stderr
    assert "ran 1 of 2 cells (1 finished before)" in again.stdout
    assert (out / "results.jsonl").read_bytes().startswith(line)
    assert [row["cell"] for row in results(out)] == [first.name, second.name]
    assert (digest(weights_file), weights_file.stat().st_mtime_ns) == weights
    summary = json.loads((second / "model" / "train_summary.json").read_text(encoding="utf-8"))
    assert summary["resumed_from"] and summary["resumed_from"] > 0
    steps = [json.loads(x)["step"] for x in (second / "model" / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, summary["steps"] + 1))


def test_status_of_an_interrupted_folder_shows_the_last_checkpoint(workdir, tmp_path):
    out = tmp_path / "out"
    cell = out / "cells" / "a__tiny__10__s0"
    (cell / "model" / "checkpoint-3").mkdir(parents=True)
    (cell / "model" / "checkpoint-3" / "trainer_state.json").write_text('{"step": 3}', encoding="utf-8")
    (out / "cells" / "b__tiny__10__s0" / "data").mkdir(parents=True)
    (out / "cells" / "b__tiny__10__s0" / "data" / "train.jsonl").write_text("", encoding="utf-8")
    (out / "experiment.json").write_text(json.dumps({"cells": ["a__tiny__10__s0", "b__tiny__10__s0",
                                                               "c__tiny__10__s0"]}), encoding="utf-8")
    st = experiment(tmp_path, "status", "out")
    assert st.returncode == 0, st.stderr
    assert "0 of 3 cells done, 3 left" in st.stdout
    rows = {line.split()[1]: line for line in st.stdout.splitlines() if "__tiny__" in line}
    assert "training" in rows["a__tiny__10__s0"] and " 3 " in rows["a__tiny__10__s0"]
    assert "prepared" in rows["b__tiny__10__s0"] and "waiting" in rows["c__tiny__10__s0"]
    missing = experiment(tmp_path, "status", "nowhere")
    assert missing.returncode == 2 and "no such experiment folder" in missing.stderr


# ----------------------------------------------------------------------------- the grid file

BAD_GRIDS = [
    ("colour: blue\n", "colour", "unknown key 'colour'"),
    ("train: {learning_rat: 0.1}\n", "train.learning_rat", "unknown setting 'learning_rat'"),
    ("train: {epochs: 0}\n", "train.epochs", "at least 1"),
    ("train: {output: x}\n", "train.output", "set by the experiment"),
    ("train: {seed: 3}\n", "train.seed", "the grid's seeds"),
    ("train: {lm_coef: 0.5}\n", "train.lm_coef", "applies to objective dual only, not bt"),
    ("eval: {batch_sise: 8}\n", "eval.batch_sise", "unknown setting 'batch_sise'"),
    ("eval: {device: gpu}\n", "eval.device", "cpu, cuda or cuda:N"),
    ("data_sizes: [100, some]\n", "data_sizes[1]", "positive number of pairs or 'all'"),
    ("data_sizes: [0]\n", "data_sizes[0]", "positive number"),
    ("seeds: [-1]\n", "seeds[0]", "integer >= 0"),
    ("seeds: [99999999999999999999]\n", "seeds[0]", "at most 2**63 - 1"),
    ("seeds: [9223372036854775808]\n", "seeds[0]", "at most 2**63 - 1 (9223372036854775807), got 9223372036854775808"),
    ("gpus_per_cell: many\n", "gpus_per_cell", "number >= 0"),
]


@pytest.mark.parametrize("extra, key, words", BAD_GRIDS, ids=[k for _, k, _ in BAD_GRIDS])
def test_a_bad_grid_key_is_one_line_naming_file_and_key(workdir, tmp_path, extra, key, words):
    path = write_grid(tmp_path, "bad.yaml", f"benchmarks: [{workdir / 'open.jsonl'}]\nbase_models: [tiny]\n"
                      f"datasets: [{{name: x, path: {workdir / 'open.jsonl'}}}]\n" + extra)
    with pytest.raises(CheemsInputError) as e:
        read_grid(path)
    assert str(e.value).startswith(f"{path}: {key}: ") and words in str(e.value)
    r = experiment(tmp_path, "run", "bad.yaml", "-o", "out")  # as a user meets it: one line, nothing made
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"bad.yaml: {key}: " in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_bad_datasets_are_refused_when_read(workdir, tmp_path):
    head = f"benchmarks: [{workdir / 'open.jsonl'}]\nbase_models: [tiny]\n"
    cases = [("datasets: [{name: x, path: nothing.jsonl}]\n", "datasets[0].path[0]", "no such file"),
             ("datasets: [{name: x, path: " + str(workdir / "open.jsonl") + ", curate: [shuffle]}]\n",
              "datasets[0].curate[0]", "unknown curation step 'shuffle'"),
             ("datasets: [{name: no-such-catalogue-set}]\n", "datasets[0].name", "no catalogue name"),
             ("datasets: [{name: x, path: " + str(workdir / "open.jsonl") + ", size: 3}]\n", "datasets[0].size",
              "unknown key 'size'"),
             ("datasets: [{name: x, path: a.jsonl}, {name: x, path: a.jsonl}]\n", "datasets[1]", "also datasets[0]")]
    (tmp_path / "a.jsonl").write_text("", encoding="utf-8")
    for body, key, words in cases:
        path = write_grid(tmp_path, "bad.yaml", head + body)
        with pytest.raises(CheemsInputError) as e:
            read_grid(path)
        assert str(e.value).startswith(f"{path}: {key}: ") and words in str(e.value), str(e.value)


def test_the_cli_prints_a_bad_grid_as_one_line(workdir, tmp_path):
    write_grid(tmp_path, "bad.yaml", "benchmarks: [x.jsonl]\nbase_models: [tiny]\ndatasets: [hh-rlhf-cn]\n")
    r = experiment(tmp_path, "run", "bad.yaml", "-o", "out")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "bad.yaml: benchmarks[0]: no such file" in r.stderr
    assert not (tmp_path / "out").exists()


def test_relative_paths_are_read_against_the_grid_files_folder(workdir, tmp_path):
    sub = tmp_path / "grids"
    sub.mkdir()
    shutil.copy(workdir / "open.jsonl", tmp_path / "open.jsonl")
    grid = read_grid(write_grid(sub, "g.yaml", "benchmarks: [../open.jsonl]\nbase_models: "
                                "[{path: ../tiny, name: t, variant: instruct, parameters: 5}, Qwen/Qwen2.5-0.5B]\n"
                                "datasets: [{name: a, path: ../open.jsonl}]\n"))
    assert grid.benchmarks == [str(tmp_path / "open.jsonl")]
    assert grid.datasets[0].files == (str(tmp_path / "open.jsonl"),)
    assert [(m.path, m.name, m.variant, m.parameters) for m in grid.base_models] == \
        [(str(tmp_path / "tiny"), "t", "instruct", 5), ("Qwen/Qwen2.5-0.5B", "Qwen2.5-0.5B", None, None)]
    assert grid.data_sizes == ["all"] and grid.seeds == [0]


# ----------------------------------------------------------------------------- sampling and ids

def test_sampling_by_prompt_takes_whole_prompts_up_to_n_pairs_with_the_seed(workdir):
    prompts = read_prompts(workdir / "open.jsonl").prompts
    pairs_of = {p.id: len(pairs) for _, p, pairs in training_pairs(prompts)[0]}
    total = sum(pairs_of.values())
    for size in (1, 9, 25, 60, total - 1):
        sampled, count, available = sample_by_prompt(prompts, size, seed=3)
        assert available == total and count == sum(pairs_of[p.id] for p in sampled) <= size
        # greedy: no prompt left out would still fit under the limit, unless it came after count reached size
        left = [n for pid, n in pairs_of.items() if pid not in {p.id for p in sampled}]
        assert count == size or all(count + n > size for n in left)
        assert sample_by_prompt(prompts, size, seed=3)[0] == sampled
    assert {p.id for p in sample_by_prompt(prompts, 30, seed=1)[0]} != \
        {p.id for p in sample_by_prompt(prompts, 30, seed=2)[0]}
    assert sample_by_prompt(prompts, "all", seed=0) == (prompts, total, total)
    assert sample_by_prompt(prompts, total + 100, seed=0)[1] == total


def test_a_size_over_the_data_is_one_warning(workdir, tmp_path):
    from cheems.experiments.prepare import prepare_cell_data

    notes: list[str] = []
    pairs = prepare_cell_data([workdir / "open.jsonl"], (), 100000, 0, tmp_path / "train.jsonl", notify=notes.append)
    assert len(notes) == 1 and "100000 training pairs asked for" in notes[0] and f"holds {pairs}" in notes[0]
    assert len(read_prompts(tmp_path / "train.jsonl").prompts) == 24


def test_cell_ids_are_safe_file_names():
    assert cell_id("hh-rlhf-cn", "tiny", 1000, 0) == "hh-rlhf-cn__tiny__1000__s0"
    assert cell_id("hf:org/data set", "Qwen/Qwen2.5 0.5B", "all", 2) == "hf-org-data-set__Qwen-Qwen2.5-0.5B__all__s2"


# ----------------------------------------------------------------------------- Ray

def test_ray_cells_are_submitted_at_once_and_recorded_as_they_finish():
    from cheems.experiments.ray_cells import run_as_tasks

    submitted: list[str] = []
    waited_after: list[int] = []

    class Task:
        def remote(self, plan):
            submitted.append(plan.cell)
            return plan.cell

    class FakeRay:
        def wait(self, refs, num_returns):
            waited_after.append(len(submitted))
            return refs[-1:], refs[:-1]  # the last submitted finishes first

        def get(self, ref):
            if ref == "c":
                raise RuntimeError("ray::run_cell() (pid=1)\nTraceback (most recent call last):\n  File x\n"
                                   "ValueError: boom\n")
            return {"cell": ref}, [f"note of {ref}"]

    done, notes = [], []
    with pytest.raises(CheemsInputError) as caught:
        run_as_tasks(FakeRay(), Task(), [SimpleNamespace(cell=c) for c in "abcd"],
                     lambda plan, row: done.append((plan.cell, row["cell"])), notes.append)
    assert submitted == ["a", "b", "c", "d"] and waited_after[0] == 4
    assert done == [("d", "d"), ("b", "b"), ("a", "a")]
    assert str(caught.value) == "cell c failed: ValueError: boom"
    assert notes[0] == "note of d" and notes[1] == "cell c failed: ValueError: boom (the other cells go on)"


@pytest.mark.ray
@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_a_ray_address_where_nothing_answers_is_one_line_before_ray_starts(workdir, tmp_path, monkeypatch, address):
    monkeypatch.setitem(sys.modules, "ray", None)  # importing Ray now fails: the refusal must come first
    write_grid(tmp_path, "g.yaml", GRID.replace("open.jsonl", str(workdir / "open.jsonl"))
               .replace("human.jsonl", str(workdir / "human.jsonl")).replace("[tiny]", f"[{workdir / 'tiny'}]"))
    r = experiment(tmp_path, "run", "g.yaml", "-o", "out", "--ray", address)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"ray_address: the Ray address {address} does not answer (Connection refused)" in r.stderr
    assert not (tmp_path / "out").exists()


def test_cells_run_as_ray_tasks(workdir, tmp_path):
    pytest.importorskip("ray")
    write_grid(tmp_path, "grid.yaml", f"benchmarks: [{workdir / 'open.jsonl'}]\n"
               f"base_models: [{workdir / 'tiny'}]\n"
               f"datasets: [{{name: open-train, path: {workdir / 'open.jsonl'}}}]\n"
               "data_sizes: [10, 20]\ngpus_per_cell: 0\n" + TRAIN)
    r = experiment(tmp_path, "run", "grid.yaml", "-o", "out", "--ray", "local")
    assert r.returncode == 0, r.stderr
    assert "queued as a Ray task" in r.stdout and "finished (2 of 2 done, 0 left)" in r.stdout
    rows = results(tmp_path / "out")
    assert sorted(row["cell"] for row in rows) == ["open-train__tiny__10__s0", "open-train__tiny__20__s0"]
    for row in rows:
        assert 0 < row["pairs"] <= row["data_size"]
        assert (tmp_path / "out" / row["folder"] / "model" / "model.safetensors").exists()
        assert json.loads((tmp_path / "out" / row["folder"] / "eval.json").read_text(encoding="utf-8")) == row["eval"]
    st = experiment(tmp_path, "status", "out")
    assert st.returncode == 0 and "2 of 2 cells done, 0 left" in st.stdout


# ----------------------------------------------------------------------------- cells under accelerate launch

def test_a_launched_cell_trains_on_two_processes_and_matches_a_fresh_eval(workdir):
    ddp = Path(__file__).resolve().parents[1] / "configs" / "accelerate" / "ddp.yaml"
    body = ("benchmarks: [open.jsonl]\nbase_models: [tiny]\ndatasets:\n  - {name: open-train, path: open.jsonl}\n"
            "data_sizes: [40]\n" + TRAIN + f"launch: {{config: {ddp}, processes: 2}}\n")
    write_grid(workdir, "launched.yaml", body)
    r = experiment(workdir, "run", "launched.yaml", "-o", "launched-out")
    assert r.returncode == 0, r.stderr
    (row,) = results(workdir / "launched-out")
    cell = workdir / "launched-out" / row["folder"]
    summary = json.loads((cell / "model" / "train_summary.json").read_text(encoding="utf-8"))
    assert summary["processes"] == 2 and "accelerate.commands.launch" in (cell / "train.log").read_text()
    fresh = run_cli_in(workdir, "eval", "open.jsonl", "--model", cell / "model", "--json", "launched.json")
    assert fresh.returncode == 0, fresh.stderr
    fresh_overall = json.loads((workdir / "launched.json").read_text(encoding="utf-8"))["overall"]
    assert fresh_overall == pytest.approx(row["eval"]["overall"], abs=1e-6)  # two processes against one


def test_a_launch_section_is_checked(workdir):
    body = ("benchmarks: [open.jsonl]\nbase_models: [tiny]\ndatasets:\n  - {name: d, path: open.jsonl}\n"
            "launch: {config: nowhere.yaml, processes: 0}\n")
    write_grid(workdir, "bad-launch.yaml", body)
    r = experiment(workdir, "run", "bad-launch.yaml", "-o", "bad-launch-out")
    assert r.returncode == 2 and "launch.config: no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_table3_recipe_reads_and_is_the_one_the_docs_show():
    root = Path(__file__).resolve().parents[1]
    recipe = root / "examples" / "experiments" / "table3.yaml"
    grid = read_grid(recipe)
    assert tuple(d.name for d in grid.datasets) == PAPER_TABLE3_ORDER
    assert grid.train["learning_rate"] == 5.0e-6 and grid.train["max_length"] == 2048
    assert grid.launch["processes"] == 32 and Path(grid.launch["config"]).is_file()
    assert recipe.read_text(encoding="utf-8") in (root / "docs" / "experiments.md").read_text(encoding="utf-8")


PAPER_TABLE3_ORDER = ("hh-rlhf-cn", "huozi", "kyara", "zhihu", "chatbot-arena", "hh-rlhf", "math-preference", "nectar",
                      "pku-saferlhf", "skywork", "math-stack-exchange", "ultrafeedback", "helpsteer2")
