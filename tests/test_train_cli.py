"""`cheems train` from the command line: flags, a YAML config, and the saved model."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli_in
from tests.test_cli import assert_one_line_error
from tests.tiny_models import copy_checkpoint

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _cli(cwd, *args):
    """``cheems ARGS`` in the folder ``cwd``, run in this process."""
    return run_cli_in(cwd, *args)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, sample_annotations, cli_tiny_model):
    d = tmp_path_factory.mktemp("train_cli")
    assert _cli(d, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl").returncode == 0
    copy_checkpoint(cli_tiny_model, d / "tiny")
    return d


def test_train_with_flags_then_eval_the_output(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--eval", "bench.jsonl",
             "--output", "run1", "--epochs", "1", "--learning-rate", "1e-3", "--gradient-accumulation", "1")
    assert r.returncode == 0, r.stderr
    assert "trained" in r.stdout and "final eval: Overall" in r.stdout and "padding 0.0%" in r.stdout
    summary = json.loads((workdir / "run1" / "train_summary.json").read_text(encoding="utf-8"))
    assert summary["pairs"] > 0 and summary["steps"] > 0
    e = _cli(workdir, "eval", "bench.jsonl", "--model", "run1", "--json", "e.json", "--bootstrap", "0")
    assert e.returncode == 0, e.stderr
    assert json.loads((workdir / "e.json").read_text(encoding="utf-8"))["overall"] == \
        pytest.approx(summary["eval"]["overall"], abs=1e-6)


def test_train_yaml_config_and_command_line_override(workdir):
    (workdir / "train.yaml").write_text("model: tiny\ntrain: bench.jsonl\noutput: run2\nepochs: 5\n"
                                        "learning_rate: 0.001\ngradient_accumulation: 1\npacking: true\n",
                                        encoding="utf-8")
    r = _cli(workdir, "train", "--config", "train.yaml", "--epochs", "1", "--no-packing")
    assert r.returncode == 0, r.stderr
    summary = json.loads((workdir / "run2" / "train_summary.json").read_text(encoding="utf-8"))
    assert summary["epochs"] == 1  # the flags won over the file
    assert summary["padding_share"] > 0.1  # right-padded batches


def test_train_bad_input_is_one_line(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--output", "x")
    assert r.returncode == 2 and "--train" in r.stderr and "Traceback" not in r.stderr
    (workdir / "bad.yaml").write_text("model: tiny\ntrain: bench.jsonl\noutput: y\nlearning_rat: 1\n", encoding="utf-8")
    r = _cli(workdir, "train", "--config", "bad.yaml")
    assert r.returncode == 2 and "learning_rat" in r.stderr and "Traceback" not in r.stderr
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "z", "--liger-kernels")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "Liger" in r.stderr and "CUDA" in r.stderr and not (workdir / "z").exists(), r.stderr


# ----------------------------------------------------------------------------- settings of one objective

OTHER_OBJECTIVES_SETTINGS = [  # (flags, the setting refused, the objectives it applies to, the run's objective)
    (("--lm-coef", "0.5"), "--lm-coef", "dual", "bt"),
    (("--label-smoothing", "0.2"), "--label-smoothing", "generative", "bt"),
    (("--judge-ties",), "--judge-ties", "generative", "bt"),
    (("--objective", "dual", "--judge-template", "t.json"), "--judge-template", "generative", "dual"),
    (("--objective", "dual", "--judge-language", "en"), "--judge-language", "generative", "dual"),
    (("--objective", "generative", "--lm-coef", "0.5"), "--lm-coef", "dual", "generative"),
    (("--objective", "generative", "--reg-coef", "0.5"), "--reg-coef", "bt and dual", "generative"),
]


@pytest.mark.parametrize("flags,refused,applies_to,objective", OTHER_OBJECTIVES_SETTINGS,
                         ids=[case[1] + "-with-" + case[3] for case in OTHER_OBJECTIVES_SETTINGS])
def test_a_setting_of_another_objective_is_refused_before_anything_is_read(tmp_path, flags, refused, applies_to,
                                                                           objective):
    # no model and no training file: the setting is refused before either is looked for
    r = _cli(tmp_path, "train", "--model", "no-model", "--train", "no-data.jsonl", "--output", "out", *flags)
    assert_one_line_error(r, f"{refused}: applies to objective {applies_to} only, not {objective}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags,refused", [(("--lora-alpha", "32"), "--lora-alpha"),
                                           (("--lora-dropout", "0.2"), "--lora-dropout"),
                                           (("--lora-r", "0", "--lora-target", "q_proj"), "--lora-target")])
def test_a_lora_setting_without_lora_is_refused_before_anything_is_read(tmp_path, flags, refused):
    r = _cli(tmp_path, "train", "--model", "no-model", "--train", "no-data.jsonl", "--output", "out", *flags)
    assert_one_line_error(r, f"{refused}: applies to LoRA adapters only, which lora_r 0 does not train")
    assert list(tmp_path.iterdir()) == []
    from cheems.training.config import TrainConfig

    TrainConfig(model="m", train=["t"], output="o", lora_r=8, lora_alpha=32, lora_dropout=0.2, lora_target="q_proj")


def test_a_setting_at_its_default_or_with_its_objective_passes():
    from cheems.training.config import TrainConfig

    TrainConfig(model="m", train=["t"], output="o", objective="bt", lm_coef=0.01, judge_language="zh")  # defaults
    TrainConfig(model="m", train=["t"], output="o", objective="generative", judge_ties=True, label_smoothing=0.2)
    TrainConfig(model="m", train=["t"], output="o", objective="dual", lm_coef=0.5, reg_coef=0.2)


def test_a_setting_of_another_objective_is_refused_from_a_yaml_file_and_from_python(workdir):
    from cheems.records import CheemsInputError
    from cheems.training.config import TrainConfig

    (workdir / "judge.yaml").write_text("model: tiny\ntrain: bench.jsonl\noutput: no-judge\njudge_ties: true\n",
                                        encoding="utf-8")
    r = _cli(workdir, "train", "--config", "judge.yaml")
    assert_one_line_error(r, "judge.yaml: judge_ties: applies to objective generative only, not bt")
    r = _cli(workdir, "train", "--config", "judge.yaml", "--objective", "dual")  # the flag's objective, the file's
    assert_one_line_error(r, "judge.yaml: judge_ties: applies to objective generative only, not dual")
    assert not (workdir / "no-judge").exists()
    config = TrainConfig(model="tiny", train=["bench.jsonl"], output="o", objective="dual", lm_coef=0.5)
    config.objective = "bt"  # changed after it was built: train() checks it again
    with pytest.raises(CheemsInputError) as e:
        config.validate()
    assert (e.value.field, e.value.message) == ("lm_coef", "applies to objective dual only, not bt; leave it out")


# ----------------------------------------------------------------------------- the model an objective starts from

@pytest.mark.parametrize("objective", ["dual", "generative"])
def test_a_causal_lm_objective_refuses_a_reward_model_before_reading_the_data(workdir, objective):
    (workdir / "unread.jsonl").write_text("not a row\n", encoding="utf-8")  # read first, it would be the error
    r = _cli(workdir, "train", "--model", "tiny", "--train", "unread.jsonl", "--output", f"from-rm-{objective}",
             "--objective", objective)
    assert_one_line_error(r, f"tiny: objective {objective} starts from a causal LM; this folder holds a reward "
                          "model (Qwen2ForSequenceClassification), which has no LM head to train")
    assert not (workdir / f"from-rm-{objective}").exists()


def test_a_config_is_checked_as_it_is_built_and_once_a_run(workdir, monkeypatch):
    """A bad value is refused when TrainConfig is built (from Python as from a file or flags); a run
    validates its config once (the files and folders it names), not once for each piece it sets up."""
    from cheems.records import CheemsInputError
    from cheems.training import config as config_module
    from cheems.training.config import TrainConfig
    from cheems.training.trainer import train

    monkeypatch.chdir(workdir)
    with pytest.raises(CheemsInputError) as e:
        TrainConfig(model="tiny", train=["bench.jsonl"], output="o", epochs=0)
    assert e.value.field == "epochs"
    calls = []
    real = config_module.TrainConfig.validate
    monkeypatch.setattr(config_module.TrainConfig, "validate", lambda self: (calls.append(1), real(self))[1])
    for objective in ("bt", "generative"):
        calls.clear()
        config = TrainConfig(model="tiny", train=["bench.jsonl"], output=f"out-{objective}", objective=objective,
                             epochs=1)
        try:
            train(config)
        except CheemsInputError:
            pass  # the tiny sequence classifier is no causal LM for the generative objective: refused at validate
        assert calls == [1], (objective, calls)
