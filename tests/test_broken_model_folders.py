"""Broken model folders are one line naming the broken file and exit 2 in `cheems score --model`
and `cheems eval --model`, never a traceback from transformers, safetensors, tokenizers or
torch: a config without (or with an unknown) model_type or whose sizes do not fit the weights,
a safetensors file with a broken header, a tokenizer.json that is garbage or no tokenizer, a
pytorch_model.bin that is a pickle of more than tensors (refused, never run) or garbage, a
weight index without a weight map or metadata or naming a missing shard, other tokenizer JSON
files that do not parse, a broken value_head.bin."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli_in
from tests.test_cli import assert_one_line_error
from tests.tiny_models import copy_checkpoint, require_models_extra

require_models_extra()
import torch  # noqa: E402  (loaded before the first in-process run, as in a fresh process)
import transformers  # noqa: E402, F401

PWNED = "pwned-by-pickle"


def noise(n: int, seed: int = 0) -> bytes:
    """``n`` bytes of seeded garbage (the same in every run)."""
    return random.Random(seed).randbytes(n)  # the file a malicious pickle would create if it were ever run


class Payload:
    """Unpickles to ``open(PWNED, "w")``: a file appears if anything unpickles it for real."""

    def __init__(self, folder: Path):
        self.target = str(folder / PWNED)

    def __reduce__(self):
        return (open, (self.target, "w"))


def write(name: str, data: str | bytes):
    def damage(folder: Path) -> None:
        f = folder / name
        f.write_bytes(data) if isinstance(data, bytes) else f.write_text(data, encoding="utf-8")
    return damage


def edit_config(**changes):
    def damage(folder: Path) -> None:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        for key, value in changes.items():
            cfg.pop(key, None) if value is None else cfg.__setitem__(key, value)
        (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return damage


def safetensors_header(header: bytes):
    """Keep the file's length field honest but replace its header with ``header``."""
    def damage(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return damage


def bad_dtype(folder: Path) -> None:
    f = folder / "model.safetensors"
    data = f.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["dtype"] = "Q9"
    new = json.dumps(header).encode()
    f.write_bytes(len(new).to_bytes(8, "little") + new + data[8 + n:])


def pickled_code(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    torch.save({"weight": torch.zeros(2), "payload": Payload(folder)}, folder / "pytorch_model.bin")


def garbage_bin(name: str):
    def damage(folder: Path) -> None:
        if name == "pytorch_model.bin":
            (folder / "model.safetensors").unlink()
        (folder / name).write_bytes(noise(4096))
    return damage


def sharded(index: dict):
    def damage(folder: Path) -> None:
        (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
        (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return damage


SHARD = "model-00001-of-00001.safetensors"
BROKEN = [  # name, damage, file named, message
    ("config-no-model-type", edit_config(model_type=None), "config.json", "has no model_type"),
    ("config-unknown-model-type", edit_config(model_type="no_such_model"), "config.json",
     "model_type 'no_such_model' is unknown to transformers"),
    ("config-sizes-do-not-fit", edit_config(hidden_size=128), "config.json", "the weights do not fit it"),
    ("config-labels-not-a-number", edit_config(num_labels="one"), "config.json", "num_labels must be a whole number"),
    ("safetensors-header-a-list", safetensors_header(b"[1, 2, 3]"), "model.safetensors", "not a JSON object"),
    ("safetensors-bad-dtype", bad_dtype, "model.safetensors", "is not a valid safetensors file"),
    ("safetensors-garbage", write("model.safetensors", noise(100_000)), "model.safetensors",
     "truncated or not a safetensors file"),
    ("tokenizer-not-json", write("tokenizer.json", "garbage!!"), "tokenizer.json", "is not valid JSON"),
    ("tokenizer-binary", write("tokenizer.json", b"\x81\xff" + noise(2000)), "tokenizer.json",
     "is not valid JSON"),
    ("tokenizer-no-tokenizer", write("tokenizer.json", '{"version": "1.0", "model": {"type": "Nope"}}'),
     "tokenizer.json", "is not a tokenizer"),
    ("special-tokens-garbage", write("special_tokens_map.json", "nope"), "special_tokens_map.json",
     "is not valid JSON"),
    ("bin-pickled-code", pickled_code, "pytorch_model.bin", "pickle holding more than tensors"),
    ("bin-garbage", garbage_bin("pytorch_model.bin"), "pytorch_model.bin", "is not a PyTorch weights file"),
    ("value-head-garbage", garbage_bin("value_head.bin"), "value_head.bin", "is not a PyTorch weights file"),
    ("index-weight-map-list", sharded({"metadata": {}, "weight_map": [SHARD]}), "model.safetensors.index.json",
     "has no weight_map object"),
    ("index-no-metadata", sharded({"weight_map": {"score.weight": SHARD}}), "model.safetensors.index.json",
     "has no metadata object"),
    ("index-missing-shard", sharded({"metadata": {}, "weight_map": {"a": SHARD, "b": "model-2-of-2.safetensors"}}),
     "index-missing-shard", "shard model-2-of-2.safetensors named by model.safetensors.index.json is missing"),
    ("index-shard-outside", sharded({"metadata": {}, "weight_map": {"a": "../tiny/model.safetensors"}}),
     "model.safetensors.index.json", "expected a file name in the folder"),
]


FOUND_WHILE_LOADING = {"config-sizes-do-not-fit"}  # only transformers can tell, as it loads


def assert_error_after_loading(r, *parts: str) -> None:
    """Exit 2, no traceback; after the "loading ..." status line, one error line naming ``parts``."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 2 and lines[0].startswith("loading ") and lines[1].startswith("error: "), r.stderr
    assert all(p in lines[1] for p in parts), r.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory, sample_annotations, cli_tiny_model) -> Path:
    """A small ranked benchmark and, as ``tiny``, the model `cheems init-model` makes."""
    d = tmp_path_factory.mktemp("broken_models")
    assert run_cli_in(d, "rank", sample_annotations / "open.jsonl", "-o", "all.jsonl").returncode == 0
    lines = (d / "all.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (d / "bench.jsonl").write_text("".join(lines[:3]), encoding="utf-8")
    copy_checkpoint(cli_tiny_model, d / "tiny")
    return d


@pytest.mark.parametrize("name, damage, file, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_model_folder_is_one_line_naming_the_file(work, name, damage, file, message):
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(work / "tiny", folder)
    damage(folder)
    named = f"{name}/{file}" if file != name else name
    for command in (["score", "bench.jsonl", "--model", name, "-o", f"{name}.jsonl"],
                    ["eval", "bench.jsonl", "--model", name]):
        r = run_cli_in(work, *command)
        if name in FOUND_WHILE_LOADING:
            assert_error_after_loading(r, named, message)
        else:
            assert_one_line_error(r, named, message)
        assert not (work / f"{name}.jsonl").exists()
    assert not (folder / PWNED).exists()  # the pickle was refused, never run


def test_the_payload_would_run_if_unpickled(tmp_path):
    """The pickle case is a real one: loading it without weights_only creates the file."""
    torch.save({"payload": Payload(tmp_path)}, tmp_path / "p.bin")
    torch.load(tmp_path / "p.bin", weights_only=False)
    assert (tmp_path / PWNED).exists()


def test_an_intact_folder_still_scores(work):
    r = run_cli_in(work, "score", "bench.jsonl", "--model", "tiny", "-o", "tiny.jsonl")
    assert r.returncode == 0, r.stderr


def test_any_garbage_bin_is_one_error_naming_it(tmp_path):
    """Garbage makes torch's unpickler fail in many ways (UnpicklingError, IndexError, KeyError,
    UnicodeDecodeError, warnings first); each is the same one error."""
    from cheems.models.checkpoints import tensor_names
    from cheems.records import CheemsInputError

    f = tmp_path / "value_head.bin"
    for seed in range(200):
        f.write_bytes(noise(4096, seed))
        with pytest.raises(CheemsInputError, match="is not a PyTorch weights file|pickle holding more than tensors"):
            tensor_names(f)


def test_a_v_head_folder_whose_sizes_do_not_fit_is_one_line(work, v_head_file_model):
    """The official layout (causal LM + v_head) loads through another path than sequence
    classification; a config that does not fit its weights is the same one line there."""
    folder = work / "v-head-sizes-do-not-fit"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(v_head_file_model.dir, folder)
    edit_config(hidden_size=128)(folder)
    r = run_cli_in(work, "score", "bench.jsonl", "--model", folder.name, "-o", "v.jsonl")
    assert_error_after_loading(r, f"{folder.name}/config.json", "the weights do not fit it")
    assert not (work / "v.jsonl").exists()
