"""The few-steps note (cheems.training.step_plan): before step 1, a run that plans fewer than
about 100 optimizer steps (200 for a generative judge) says so, with the step count and what
gradient_accumulation, micro_batch_size and epochs would give; through ``notify`` (the
CLI prints it) or, to a Python caller who passed none, as a warning. Checked on the arithmetic
alone, then on tiny real runs of every objective (the marker task of tests/marker_task.py) and
through the CLI."""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import replace

import pytest

from cheems.training.config import TrainConfig
from cheems.training.step_plan import FEW_STEPS, FewStepsWarning, few_steps_note, planned_steps
from tests.conftest import run_cli_in
from tests.marker_task import build_marker_task, synthetic_rows, write_rows
from tests.tiny_models import require_models_extra

pytestmark = pytest.mark.usefixtures("single_torch_thread")

NOTE = re.compile(r"note: (\d+) optimizer step\(s\) planned")


def _config(**kw) -> TrainConfig:
    return TrainConfig(model="m", train=["t.jsonl"], output="o", **kw)


# ----------------------------------------------------------------------------- the arithmetic

def test_the_users_plan_gets_the_count_and_what_each_setting_would_give():
    """600 judge examples (300 pairs in two orders), 8 x 32 sequences a step, 10 epochs: 75
    forward batches an epoch, 3 steps an epoch, 30 in all."""
    config = _config(objective="generative", epochs=10)
    note = few_steps_note(config, 75, lambda m: math.ceil(600 / m))
    assert note.startswith("note: 30 optimizer step(s) planned (10 epoch(s) x 3, each step 32 forward batch(es) "
                           "of up to 8 sequences), under about 200 for objective generative: ")
    # the largest accumulation that reaches 200: ceil(75 / 3) x 10; no micro batch does: 1 gives ceil(600 / 32) x 10
    assert note.endswith("More steps: gradient_accumulation 3 (250 steps), micro_batch_size 1 (190 steps) "
                         "or epochs 67 (201 steps)")
    from cheems.cli.console import cli_name

    assert note.render(cli_name).endswith(  # at the command line: the flags that give more
        "for --objective generative: " + note.split("generative: ", 1)[1].split("More steps:")[0] + "More steps: "
        "--gradient-accumulation 3 (250 steps), --micro-batch-size 1 (190 steps) or --epochs 67 (201 steps)")
    note = few_steps_note(replace(config, objective="bt"), 75, lambda m: math.ceil(600 / m))
    assert "under about 100 for objective bt" in note  # a scalar head needs fewer
    assert note.endswith("More steps: gradient_accumulation 8 (100 steps), micro_batch_size 2 (100 steps) "
                         "or epochs 34 (102 steps)")


def test_a_plan_of_enough_steps_has_no_note_and_the_count_is_the_runs():
    assert few_steps_note(_config(epochs=10, gradient_accumulation=1), 75, lambda m: 1 / 0) is None
    assert few_steps_note(_config(epochs=4, gradient_accumulation=3), 75, lambda m: 1 / 0) is None  # 25 x 4
    assert few_steps_note(_config(objective="dual", epochs=4, gradient_accumulation=3), 75, lambda m: 1 / 0) is None
    assert few_steps_note(_config(objective="generative", epochs=8, gradient_accumulation=3), 75,
                          lambda m: 1 / 0) is None  # 25 x 8
    assert planned_steps(75, 3, 4) == FEW_STEPS["bt"] and planned_steps(76, 32, 1) == 3  # the last step filled


def test_flags_that_would_not_help_are_left_out():
    # accumulation already 1, and the token budget (not the micro batch) cuts the batches
    note = few_steps_note(_config(epochs=2, gradient_accumulation=1), 20, lambda m: 20)
    assert note.endswith("More steps: epochs 5 (100 steps)") and "micro_batch_size" not in note
    # nothing reaches 100: the most each flag gives
    note = few_steps_note(_config(epochs=1, micro_batch_size=4), 10, lambda m: 10 * 4 // m)
    assert "gradient_accumulation 1 (10 steps), micro_batch_size 1 (2 steps) or epochs 100" in note
    # bt and dual: no micro batch under a prompt's responses, whose pairs would no longer meet
    plan = _config(epochs=1, gradient_accumulation=1)
    assert "micro_batch_size 1 (80 steps)" in few_steps_note(plan, 10, lambda m: 80 // m)
    assert "micro_batch_size 4 (20 steps)" in few_steps_note(plan, 10, lambda m: 80 // m, smallest_micro_batch=3)


# ----------------------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """The tiny models of the marker task and ``small``, 40 of its prompts (about 100 response
    sequences, 120 judge prompts): runs of a few seconds."""
    require_models_extra()
    task = build_marker_task(tmp_path_factory.mktemp("steps"), reward_model=True)
    return task | {"small": write_rows(task["root"] / "small.jsonl", synthetic_rows(40, seed=2))}


def _run_config(task, objective: str, output, **kw) -> TrainConfig:
    model = task["reward_model"] if objective == "bt" else task["model"]
    extra = {"judge_template": task["template"]} if objective == "generative" else {}
    return TrainConfig(model=str(model), train=[task["small"]], output=str(output), objective=objective,
                       learning_rate=1e-3, **extra, **kw)


@pytest.mark.parametrize("objective", ["bt", "dual", "generative"])
def test_every_objective_says_its_step_count_before_step_1(task, tmp_path, objective):
    from cheems.training.trainer import train

    said = []
    summary = train(_run_config(task, objective, tmp_path / "run", epochs=1),
                    progress=lambda step, total, stats: said.append(("step", step)),
                    notify=lambda line: said.append(("note", line)))
    notes = [line for kind, line in said if kind == "note" and NOTE.match(line)]
    assert len(notes) == 1 and said[0] == ("note", notes[0]), said[:3]
    assert int(NOTE.match(notes[0]).group(1)) == summary["total_steps"] == summary["steps"] < FEW_STEPS[objective]
    with pytest.warns(FewStepsWarning, match=f"^note: {summary['steps']} optimizer step"):
        train(_run_config(task, objective, tmp_path / "quiet", epochs=1))  # no notify: a warning


def test_a_run_of_enough_steps_says_nothing(task, tmp_path):
    from cheems.training.trainer import train

    notes = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewStepsWarning)
        summary = train(_run_config(task, "bt", tmp_path / "run", epochs=10, gradient_accumulation=1),
                        notify=notes.append)
    assert summary["steps"] >= FEW_STEPS["bt"] and not [n for n in notes if NOTE.match(n)], notes


@pytest.mark.parametrize("flags, said", [(("--epochs", "1"), True),
                                          (("--epochs", "10", "--gradient-accumulation", "1"), False)])
def test_the_cli_prints_the_note_with_the_runs_step_count(task, tmp_path, flags, said):
    r = run_cli_in(tmp_path, "train", "--model", task["reward_model"], "--train", task["small"], "--output", "run",
                   "--learning-rate", "1e-3", *flags)
    assert r.returncode == 0, r.stderr
    steps = json.loads((tmp_path / "run" / "train_summary.json").read_text(encoding="utf-8"))["steps"]
    lines = [line for line in r.stderr.splitlines() if NOTE.match(line)]
    if said:
        assert len(lines) == 1 and int(NOTE.match(lines[0]).group(1)) == steps, r.stderr
        assert "--gradient-accumulation 1 (" in lines[0] and "--epochs" in lines[0]  # the flags, at the command line
    else:
        assert steps >= FEW_STEPS["bt"] and not lines, r.stderr
