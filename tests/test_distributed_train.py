"""Training under `accelerate launch` with two CPU processes (gloo), and LoRA.

With n processes a micro batch of m sequences per process plans the same forward batches as
one process with n x m, and the rewards are gathered across processes, so DDP and DeepSpeed
ZeRO-2/3 must end where one process ends (fp32 on CPU: up to summation order). The launched
runs pack each process's sequences into one row (the default); the one-process reference pads
them (--no-packing), so the comparison also holds packed against padded training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S, REPO_ROOT
from tests.test_trainer import config, ranked, write
from tests.tiny_models import require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.records import CheemsInputError  # noqa: E402
from cheems.training.config import TrainConfig  # noqa: E402
from cheems.training.trainer import train  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")
SETTINGS = dict(epochs=1, learning_rate=1e-3, gradient_accumulation=2, warmup_ratio=0.0, seed=0)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def data(tmp_path_factory, tiny_prompts):
    folder = tmp_path_factory.mktemp("dist-data")
    rows = ranked(tiny_prompts)
    return write(folder / "train.jsonl", rows[:16]), write(folder / "eval.jsonl", rows[40:])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, seq_cls_model, data):
    """The reference: one process, micro batch 8, right-padded batches."""
    out = tmp_path_factory.mktemp("one") / "out"
    torch.set_num_threads(1)
    summary = train(config(seq_cls_model, [data[0]], out, eval=[data[1]], micro_batch_size=8, packing=False,
                           **SETTINGS))
    return out, summary


def _failure(done: subprocess.CompletedProcess) -> str:
    """What a failed launch said: each process's own lines (``[rankN]:``, where the process that
    failed first names its error), the lines of a process that died in native code without a
    Python traceback (``terminate called``, ``what():``, a fatal signal), then the launcher's last lines."""
    said: dict[str, list[str]] = {}
    native = []
    for line in done.stderr.splitlines():
        if line.startswith("[rank") and "]" in line:
            said.setdefault(line[:line.index("]") + 1], []).append(line)
        elif any(mark in line for mark in ("terminate called", "what():", "Fatal", "Aborted", "Segmentation",
                                           "gloo", "EnforceNotMet", "Address already in use")):
            native.append(line[:400])
    own = "\n".join("\n".join(lines)[-2500:] for _, lines in sorted(said.items()))
    return f"{own}\n{chr(10).join(native[:30])}\n...\n{done.stderr[-1500:]}"


def _accelerate_config(tmp: Path, kind: str) -> Path:
    """An accelerate config for 2 local processes; DeepSpeed ones use the shipped JSON."""
    shipped = REPO_ROOT / "configs" / "accelerate"
    if kind == "ddp":
        text = (shipped / "ddp.yaml").read_text(encoding="utf-8")
    else:
        text = (shipped / f"deepspeed_{kind}.yaml").read_text(encoding="utf-8")
        text = text.replace(f"configs/accelerate/deepspeed_{kind}.json", str(shipped / f"deepspeed_{kind}.json"))
    path = tmp / f"{kind}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _launch(accelerate_config: Path, model: Path, data, out: Path, *,
            held_second_process: Path | None = None) -> subprocess.CompletedProcess:
    """``cheems train`` in two processes, through tests/launched_train.py (DeepSpeed without its
    shared-memory extension); with ``held_second_process`` (a folder for its signal files) the
    second process writes its share of each checkpoint only after the main process has moved on."""
    from tests.launched_train import NO_SHM_OP, SIGNALS

    args = ["--model", model, "--train", data[0], "--eval", data[1], "--micro-batch-size", 4, "-o", out]
    for k, v in SETTINGS.items():
        args += [f"--{k.replace('_', '-')}", v]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), NO_SHM_OP: "1"}
    if held_second_process is not None:
        env[SIGNALS] = str(held_second_process)
    return subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config),
                           "--num_processes", "2", str(REPO_ROOT / "tests" / "launched_train.py"), "train",
                           *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=HANG_TIMEOUT_S, cwd=out.parent)


@pytest.mark.parametrize("kind", ["ddp", "zero2", "zero3"])
def test_two_processes_match_one_process(kind, tmp_path, seq_cls_model, data, one_process):
    """Under DDP and ZeRO-2 the second process also writes its share of every checkpoint last
    (tests/launched_train.py): the main process must wait for it before it moves the checkpoint's
    temp folder into place, or the second process finds no folder to write to."""
    if kind != "ddp":
        pytest.importorskip("deepspeed")
    out, signals = tmp_path / "out", tmp_path / "signals"
    held = kind in ("ddp", "zero2")
    signals.mkdir()
    done = _launch(_accelerate_config(tmp_path, kind), seq_cls_model, data, out,
                   held_second_process=signals if held else None)
    if kind == "zero3" and done.returncode != 0 and "terminate called without an active exception" in done.stderr:
        # DeepSpeed ZeRO-3 on CPU (gloo) now and then aborts in native code with no Python error,
        # whatever the run did; one fresh launch tells that apart from a failure of ours.
        out = tmp_path / "out-again"
        done = _launch(_accelerate_config(tmp_path, kind), seq_cls_model, data, out, held_second_process=None)
    assert done.returncode == 0, _failure(done)
    assert done.stdout.count("trained ") == 1, done.stdout  # only the first process reports
    summary = json.loads((out / "train_summary.json").read_text(encoding="utf-8"))
    reference_out, reference = one_process
    assert summary["processes"] == 2
    assert summary["padding_share"] == 0 < reference["padding_share"]  # packed rows against padded batches
    assert summary["steps"] == reference["steps"] and summary["pair_coverage"] == reference["pair_coverage"]
    moved = _max_diff(_weights(reference_out), _weights(seq_cls_model))
    apart = _max_diff(_weights(reference_out), _weights(out))
    assert moved > 1e-3 and apart < 1e-3 * max(1.0, moved), (moved, apart)
    assert summary["eval"]["overall"] == pytest.approx(reference["eval"]["overall"], abs=1e-6)
    assert summary["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-3)
    # every checkpoint holds every process's state for --resume, and no temp folder is left
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert out / f"checkpoint-{summary['steps']}" in checkpoints and not list(out.glob(".checkpoint-*"))
    for checkpoint in checkpoints:
        assert {f.name for f in (checkpoint / "accelerate_state").glob("random_states_*.pkl")} == {
            "random_states_0.pkl", "random_states_1.pkl"}
    if held:
        assert len(list(signals.glob("moved-on-*"))) >= len(checkpoints)  # held at every save


def test_fsdp_on_cpu_is_refused_not_silently_ddp(monkeypatch, seq_cls_model, data, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    if torch.cuda.is_available():
        pytest.skip("the refusal is for CPU runs")
    with pytest.raises(CheemsInputError, match="FSDP runs on GPUs only"):
        train(config(seq_cls_model, [data[0]], tmp_path / "out", micro_batch_size=8, **SETTINGS))


# ----------------------------------------------------------------------------- LoRA

def test_lora_trains_adapters_and_saves_a_merged_standard_checkpoint(seq_cls_model, data, tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "out"
    summary = train(config(seq_cls_model, [data[0]], out, micro_batch_size=8, lora_r=4, lora_alpha=8,
                           lora_dropout=0.0, **SETTINGS))
    full = sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(seq_cls_model).parameters())
    assert 0 < summary["trainable_parameters"] < full / 2
    assert not (out / "adapter_config.json").exists()  # merged: a plain checkpoint
    merged = AutoModelForSequenceClassification.from_pretrained(out).eval()
    # the last checkpoint holds the adapter alone; base + adapter must score as the merged model
    checkpoint = out / f"checkpoint-{summary['steps']}"
    assert (checkpoint / "adapter_config.json").exists()
    # no config.json beside the adapter: the checkpoint's state records where the run read rewards
    assert json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))["reward_position"] == (
        json.loads((out / "config.json").read_text(encoding="utf-8"))["cheems_reward_position"]) == "end_of_turn"
    base = AutoModelForSequenceClassification.from_pretrained(seq_cls_model)
    base.config.pad_token_id = merged.config.pad_token_id
    adapted = PeftModel.from_pretrained(base, checkpoint).eval()
    ids = torch.tensor([[5, 17, 33, 2, 9, 41], [7, 7, 12, 30, 3, 8]])
    with torch.no_grad():
        a, b = merged(input_ids=ids).logits, adapted(input_ids=ids).logits
        before = AutoModelForSequenceClassification.from_pretrained(seq_cls_model)(input_ids=ids).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert (a - before).abs().max().item() > 1e-4  # training changed the scores


def test_lora_bad_target_names_the_field(seq_cls_model, data, tmp_path):
    pytest.importorskip("peft")
    with pytest.raises(CheemsInputError) as e:
        train(config(seq_cls_model, [data[0]], tmp_path / "out", lora_r=4, lora_target="no_such_module", **SETTINGS))
    assert e.value.field == "lora_target"


@pytest.mark.parametrize("field,value", [("lora_r", -1), ("lora_dropout", 1.5), ("token_budget", 0)])
def test_bad_lora_and_budget_settings(field, value, tmp_path):
    lora = {"lora_r": 4} if field.startswith("lora_") and field != "lora_r" else {}  # LoRA settings need LoRA
    with pytest.raises(CheemsInputError) as e:  # refused as the config is built
        TrainConfig(model="m", train=["t"], output=str(tmp_path), **lora, **{field: value})
    assert e.value.field == field


@pytest.mark.parametrize("name", ["ddp", "deepspeed_zero2", "deepspeed_zero3", "fsdp"])
def test_shipped_configs_take_a_free_port(name):
    """Port 0 makes accelerate take a free port: two runs launched at once on one machine (two
    experiment cells, two test processes) would otherwise both reach for 29500, and the check
    accelerate makes before binding it leaves a window in which both pass."""
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(REPO_ROOT / "configs" / "accelerate" / f"{name}.yaml"))
    assert loaded.num_machines == 1 and loaded.main_process_port == 0
