"""Model fingerprints cover every byte of every file that affects scores, and a cache keyed by
(absolute path, size, mtime, ctime, device, inode) keeps a rerun on an unchanged folder from
reading the weights again. A scores file of a model whose files changed is not resumed: the
refusal names the file that changed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import cheems.models.checkpoints as checkpoints
from cheems.models.checkpoints import FINGERPRINT_CACHE, file_digest, model_file_digests, model_fingerprint
from tests.conftest import run_cli_in
from tests.test_cli import assert_one_line_error
from tests.tiny_models import copy_checkpoint

MiB = 1 << 20


def age(folder: Path, seconds: float = 60.0) -> None:
    """Date every file of ``folder`` ``seconds`` back, as a model downloaded a while ago."""
    past = time.time() - seconds
    for f in folder.iterdir():
        os.utime(f, (past, past))


def flip_middle_byte(f: Path) -> None:
    """Change one byte in the middle of ``f``, in place (same size, same inode)."""
    with open(f, "r+b") as fh:
        fh.seek(f.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The names of the files whose bytes are hashed from now on."""
    seen: list[str] = []

    def counting(f):
        seen.append(Path(f).name)
        return file_digest(f)

    monkeypatch.setattr(checkpoints, "file_digest", counting)
    return seen


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A model-like folder with weights bigger than the old 2 x 1 MiB sample, and files that
    do not affect scores; the user cache folder is the test's own."""
    monkeypatch.setenv("CHEEMS_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "model"
    d.mkdir()
    (d / "model.safetensors").write_bytes(os.urandom(5 * MiB))
    (d / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    (d / "tokenizer.json").write_text("{}", encoding="utf-8")
    (d / "README.md").write_text("a model card", encoding="utf-8")
    (d / "optimizer.pt").write_bytes(b"state")
    (d / "train_log.jsonl").write_text("{}\n", encoding="utf-8")
    (d / "sub").mkdir()
    age(d)
    return d


def test_every_byte_of_every_scored_file_counts(folder):
    before = model_file_digests(folder)
    assert list(before) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert before["model.safetensors"] == file_digest(folder / "model.safetensors")
    fingerprint = model_fingerprint(folder)
    flip_middle_byte(folder / "model.safetensors")
    after = model_file_digests(folder)
    assert {k for k in before if before[k] != after[k]} == {"model.safetensors"}
    assert model_fingerprint(folder) != fingerprint
    (folder / "README.md").write_text("another card", encoding="utf-8")
    (folder / "optimizer.pt").write_bytes(b"other state")
    assert model_file_digests(folder) == after  # files that cannot change scores do not count


def test_file_digest_is_sha256_of_the_whole_file(tmp_path):
    import hashlib

    f = tmp_path / "w.bin"
    data = os.urandom(3 * MiB + 17)
    f.write_bytes(data)
    assert file_digest(f) == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert file_digest(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


def test_an_unchanged_folder_is_not_read_again(folder, reads):
    first = model_file_digests(folder)
    assert sorted(reads) == ["config.json", "model.safetensors", "tokenizer.json"]
    cache = folder.parent / "cache" / FINGERPRINT_CACHE
    entries = json.loads(cache.read_text(encoding="utf-8"))["files"]
    assert str((folder / "model.safetensors").resolve()) in entries
    reads.clear()
    assert model_file_digests(folder) == first and reads == []
    flip_middle_byte(folder / "model.safetensors")  # same size and inode, a new mtime
    assert model_file_digests(folder)["model.safetensors"] != first["model.safetensors"]
    assert reads == ["model.safetensors"]


def test_a_file_changed_just_now_is_not_remembered(folder, reads):
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")  # mtime: now
    model_file_digests(folder)
    reads.clear()
    model_file_digests(folder)
    assert reads == ["config.json"]  # a second change within the same clock tick would not move its mtime


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"version": 1, "files": {"x": "y"}}', b"\xff\xfe",
                                     b'{"version": 2, "files": {}}'])
def test_a_corrupt_cache_is_ignored_and_replaced(folder, reads, content):
    expected = model_file_digests(folder)
    cache = folder.parent / "cache" / FINGERPRINT_CACHE
    cache.write_bytes(content)
    reads.clear()
    assert model_file_digests(folder) == expected
    assert len(reads) == 3
    assert json.loads(cache.read_text(encoding="utf-8"))["version"] == 1


def test_a_cache_entry_for_other_bytes_is_not_trusted(folder, reads):
    model_file_digests(folder)
    cache = folder.parent / "cache" / FINGERPRINT_CACHE
    data = json.loads(cache.read_text(encoding="utf-8"))
    key = str((folder / "model.safetensors").resolve())
    data["files"][key][0] += 1  # another size
    cache.write_text(json.dumps(data), encoding="utf-8")
    reads.clear()
    model_file_digests(folder)
    assert reads == ["model.safetensors"]


def test_an_unwritable_cache_costs_only_a_reread(folder, reads, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("CHEEMS_CACHE_DIR", str(blocker / "cache"))
    first = model_file_digests(folder)
    assert model_file_digests(folder) == first and len(reads) == 6


# ----------------------------------------------------------------------------- score --model

def test_score_refuses_to_resume_after_one_byte_of_the_weights_changed(tmp_path, sample_annotations,
                                                                         cli_tiny_model, reads):
    env = {"CHEEMS_CACHE_DIR": str(tmp_path / "cache")}
    assert run_cli_in(tmp_path, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl").returncode == 0
    model = copy_checkpoint(cli_tiny_model, tmp_path / "tiny")
    age(model)
    args = ("score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl")
    first = run_cli_in(tmp_path, *args, env=env)
    assert first.returncode == 0, first.stderr
    assert "model.safetensors" in reads
    meta = json.loads((tmp_path / "scores.jsonl.meta.json").read_text(encoding="utf-8"))
    assert meta["model file model.safetensors_fingerprint"] == file_digest(model / "model.safetensors")
    assert "model file tokenizer.json_fingerprint" in meta and "model file config.json_fingerprint" in meta

    reads.clear()
    again = run_cli_in(tmp_path, *args, env=env)  # unchanged: resumes without hashing the weights again
    assert again.returncode == 0, again.stderr
    assert reads == []

    scores = (tmp_path / "scores.jsonl").read_bytes()
    flip_middle_byte(model / "model.safetensors")
    refused = run_cli_in(tmp_path, *args, env=env)
    assert_one_line_error(refused, "scores.jsonl", "the model file model.safetensors changed", "--overwrite")
    assert "config.json" not in refused.stderr and "tokenizer" not in refused.stderr
    assert (tmp_path / "scores.jsonl").read_bytes() == scores
