"""`cheems train` from the command line: flags, a YAML config, and the saved model."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli_in
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
