"""Training runs that cannot go silently wrong: resuming a finished run, resuming with other
data or settings, the log after a resume, long sequences, and output in a pipe."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tests.test_cli import assert_one_line_error  # noqa: E402
from tests.test_train_cli import _cli, workdir  # noqa: E402,F401  (the fixture is used by name)

FAST = ["--epochs", "2", "--learning-rate", "1e-3", "--gradient-accumulation", "4", "--micro-batch-size", "8"]


def log_steps(folder) -> list[int]:
    return [json.loads(line)["step"] for line in (folder / "train_log.jsonl").read_text(encoding="utf-8").splitlines()]


def test_resuming_a_finished_run_says_so_and_trains_nothing(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "done", *FAST)
    assert r.returncode == 0, r.stderr
    weights = (workdir / "done" / "model.safetensors").read_bytes()
    steps = log_steps(workdir / "done")
    again = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "done", "--resume", *FAST)
    assert again.returncode == 0, again.stderr
    assert "already finished" in again.stdout and f"({steps[-1]} steps)" in again.stdout
    assert (workdir / "done" / "model.safetensors").read_bytes() == weights
    assert log_steps(workdir / "done") == steps == list(range(1, steps[-1] + 1))


def test_resuming_with_other_settings_or_data_is_refused_naming_them(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "other", *FAST)
    assert r.returncode == 0, r.stderr
    (workdir / "other" / "train_summary.json").unlink()  # as if it had been stopped before the end
    changed = [x if x != "1e-3" else "2e-3" for x in FAST]
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "other", "--resume", *changed)
    assert_one_line_error(r, "cannot resume", "learning_rate 0.001 -> 0.002")
    rows = (workdir / "bench.jsonl").read_text(encoding="utf-8").splitlines()
    (workdir / "bench-edited.jsonl").write_text("\n".join(rows[1:]) + "\n", encoding="utf-8")
    (workdir / "bench.jsonl").rename(workdir / "bench-original.jsonl")
    try:
        (workdir / "bench-edited.jsonl").rename(workdir / "bench.jsonl")
        r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "other", "--resume",
                 *FAST)
        assert_one_line_error(r, "the training data changed")
    finally:
        (workdir / "bench.jsonl").rename(workdir / "bench-edited.jsonl")
        (workdir / "bench-original.jsonl").rename(workdir / "bench.jsonl")


def test_a_resumed_run_logs_each_step_once(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "resumed", *FAST)
    assert r.returncode == 0, r.stderr
    folder = workdir / "resumed"
    steps = log_steps(folder)
    # a kill after the first epoch's checkpoint, with steps of epoch two already logged
    checkpoints = sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*"))
    last = checkpoints[-1]
    import shutil
    shutil.rmtree(folder / f"checkpoint-{last}")
    (folder / "train_summary.json").unlink()
    with open(folder / "train_log.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 999, "loss": 1.0}\n{"step": 10')  # and a line cut short by the kill
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "resumed", "--resume", *FAST)
    assert r.returncode == 0, r.stderr
    assert log_steps(folder) == steps


def test_many_sequences_over_max_length_are_warned_about_before_training(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "short", "--max-length", "200",
             *FAST)
    assert r.returncode == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warning and "longer than --max-length 200 tokens" in warning[0] and "--truncate" in warning[0]


def test_a_pipe_gets_a_plain_line_per_epoch_and_evaluation(workdir):
    r = _cli(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--eval", "bench.jsonl", "--output",
             "piped", *FAST)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 2  # one per epoch; each epoch ends with an evaluation
    assert all("eval Overall" in line and "loss" in line for line in lines)
    assert "epoch 1.00" in lines[0] and "epoch 2.00" in lines[1]


def test_rows_of_one_prompt_train_as_one_prompt(tmp_path):
    from cheems.records import preference_pairs
    from cheems.training.trainer import read_training_prompts
    from tests.conftest import write_jsonl_rows

    rows = [{"prompt": "写一句春天的诗。", "chosen": "春风又绿江南岸。", "rejected": "春天来了。"},
            {"prompt": "写一句春天的诗。", "chosen": "春风又绿江南岸。", "rejected": "天气不错。"},
            {"prompt": "写一句秋天的诗。", "chosen": "霜叶红于二月花。", "rejected": "秋天到了。"}]
    prompts = read_training_prompts([write_jsonl_rows(tmp_path / "dpo.jsonl", rows)])
    assert [p.prompt for p in prompts] == ["写一句春天的诗。", "写一句秋天的诗。"]
    spring = prompts[0]
    assert sorted(r.content for r in spring.responses) == sorted({"春风又绿江南岸。", "春天来了。", "天气不错。"})
    content = {r.id: r.content for r in spring.responses}
    assert sorted((content[a], content[b]) for a, b in preference_pairs(spring)) == [
        ("春风又绿江南岸。", "天气不错。"), ("春风又绿江南岸。", "春天来了。")]


def test_a_checkpoint_from_before_a_setting_existed_resumes_with_its_default(tmp_path):
    """A checkpoint whose recorded settings predate ``packing`` (and the speed-only kernels)
    was trained as their defaults say: it resumes with them, and is refused with --no-packing."""
    from cheems.records import CheemsInputError
    from cheems.training.config import TrainConfig
    from cheems.training.output_folder import STATE_FILE, check_resume, config_record

    config = TrainConfig(model="m", train=["t.jsonl"], output="o")
    old = {k: v for k, v in config_record(config).items() if k not in ("packing", "liger_kernels", "compile")}
    checkpoint = tmp_path / "checkpoint-3"
    checkpoint.mkdir()
    (checkpoint / STATE_FILE).write_text(json.dumps({"step": 3, "data_fingerprint": "f", "config": old}),
                                         encoding="utf-8")
    assert check_resume(checkpoint, config, "f")["step"] == 3
    config.compile = config.liger_kernels = True  # how fast, not what is learnt
    assert check_resume(checkpoint, config, "f")["step"] == 3
    config.packing = False
    with pytest.raises(CheemsInputError, match="packing True -> False"):
        check_resume(checkpoint, config, "f")
