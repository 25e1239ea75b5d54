"""Every bad input is one line and exit 2: model folders (checked before any work), YAML
configs (typed, bounded), caches, seeds, tokenizer sources, and files whose first row looks
like a JSON list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli_in, write_jsonl_rows
from tests.test_cli import assert_one_line_error
from tests.tiny_models import ranked_folder_with_model


@pytest.fixture(scope="module")
def work(tmp_path_factory, sample_annotations, cli_tiny_model) -> Path:
    """The ranked sample benchmark and, as ``tiny``, the tiny model `cheems init-model` makes from it."""
    return ranked_folder_with_model(tmp_path_factory.mktemp("bad_input"), sample_annotations / "open.jsonl",
                                    cli_tiny_model)


def broken_copy(work: Path, name: str, damage) -> Path:
    """A copy of the tiny model with ``damage(folder)`` applied."""
    folder = work / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(work / "tiny", folder)
    damage(folder)
    return folder


def truncate_weights(folder: Path) -> None:
    f = folder / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def set_config(**changes):
    def damage(folder: Path) -> None:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        cfg.update(changes)
        (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return damage


def set_template(template: str):
    def damage(folder: Path) -> None:
        cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        cfg["chat_template"] = template
        (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
        (folder / "chat_template.jinja").unlink(missing_ok=True)
    return damage


def remove(*names: str):
    def damage(folder: Path) -> None:
        for name in names:
            (folder / name).unlink(missing_ok=True)
    return damage


MODEL_DAMAGE = [
    ("no-weights", remove("model.safetensors"), "no weights"),
    ("truncated", truncate_weights, "truncated"),
    ("no-tokenizer", remove("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
     "no tokenizer files"),
    ("two-labels", set_config(num_labels=2, id2label={"0": "a", "1": "b"}), "one label; this one has 2"),
    ("bad-template", set_template("{% for m in messages %}{{ m['content'] }"), "chat template does not compile"),
    ("config-list", lambda f: (f / "config.json").write_text("[1, 2]", encoding="utf-8"), "JSON object"),
]


@pytest.mark.parametrize("name, damage, message", MODEL_DAMAGE, ids=[m[0] for m in MODEL_DAMAGE])
def test_a_broken_model_folder_is_one_line_before_any_work(work, name, damage, message):
    broken_copy(work, name, damage)
    for command in (["score", "bench.jsonl", "--model", name, "-o", f"{name}.jsonl"],
                    ["eval", "bench.jsonl", "--model", name],
                    ["train", "--model", name, "--train", "bench.jsonl", "--output", f"{name}-out"]):
        r = run_cli_in(work, *command)
        assert_one_line_error(r, name, message)
        assert not (work / f"{name}.jsonl").exists() and not (work / f"{name}.jsonl.meta.json").exists()
        assert not (work / f"{name}-out").exists()


def test_a_chat_template_that_raises_is_one_line_naming_the_model_and_its_message(work):
    """A template that compiles but calls raise_exception on the conversations it meets: the
    model loads, then the first conversation rendered is one line (no jinja2 traceback)."""
    broken_copy(work, "strict", set_template("{{ raise_exception('只接受单轮对话') }}"))
    for command in (["score", "bench.jsonl", "--model", "strict", "-o", "strict.jsonl"],
                    ["eval", "bench.jsonl", "--model", "strict"],
                    ["train", "--model", "strict", "--train", "bench.jsonl", "--output", "strict-out"]):
        r = run_cli_in(work, *command)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]  # after "loading strict ..."
        assert errors == ["error: strict: the chat template failed on a conversation: 只接受单轮对话"], r.stderr
        scores = work / "strict.jsonl"  # resumable: made before scoring starts, and holds no score
        assert not scores.exists() or scores.read_bytes() == b""
        assert not (work / "strict-out" / "model.safetensors").exists()


def test_a_model_path_that_does_not_exist_or_is_a_file(work):
    assert_one_line_error(run_cli_in(work, "eval", "bench.jsonl", "--model", "nowhere"), "nowhere",
                          "no such model folder")
    assert_one_line_error(run_cli_in(work, "score", "bench.jsonl", "--model", "bench.jsonl", "-o", "s.jsonl"),
                          "is a file, expected a model folder")


@pytest.mark.parametrize("text, message", [
    ("model: tiny\ntrain: bench.jsonl\noutput: o\nepochs: many\n", "epochs: must be an integer of at least 1"),
    ("model: tiny\ntrain: bench.jsonl\noutput: o\nlearning_rate: [1, 2]\n", "learning_rate: must be a positive number"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "expands to more than"),
    ("x: " + "[" * 200 + "]" * 200 + "\n", "nests deeper than"),
    ("- just\n- a list\n", "mapping"),
    ("model: [unclosed\n", "cannot read YAML config"),
])
def test_bad_yaml_configs_are_one_short_line(work, text, message):
    (work / "bad.yaml").write_text(text, encoding="utf-8")
    r = run_cli_in(work, "train", "--config", "bad.yaml")
    assert_one_line_error(r, "bad.yaml", message)
    assert len(r.stderr) < 500


def test_yaml_number_text_is_a_number(work):
    (work / "ok.yaml").write_text("model: tiny\ntrain: bench.jsonl\noutput: yaml-run\nlearning_rate: 1e-3\n"
                                  "epochs: 1\ngradient_accumulation: 8\n", encoding="utf-8")
    r = run_cli_in(work, "train", "--config", "ok.yaml")
    assert r.returncode == 0, r.stderr
    state = json.loads(next((work / "yaml-run").glob("checkpoint-*/trainer_state.json")).read_text(encoding="utf-8"))
    assert state["config"]["learning_rate"] == 1e-3


def test_a_cache_that_is_a_folder_or_not_sqlite(work):
    (work / "cache-dir").mkdir(exist_ok=True)
    (work / "not-sqlite.db").write_text("这不是数据库" * 100, encoding="utf-8")
    for cache, message in (("cache-dir", "is a folder"), ("not-sqlite.db", "cannot be used as a reply cache")):
        r = run_cli_in(work, "eval", "bench.jsonl", "--judge", "m", "--api-base", "http://127.0.0.1:9/v1",
                       "--cache", cache)
        assert_one_line_error(r, cache, message)


def test_a_negative_seed(work):
    assert_one_line_error(run_cli_in(work, "eval", "bench.jsonl", "--scorer", "random", "--seed", "-1"),
                          "--seed: must be >= 0")
    assert_one_line_error(run_cli_in(work, "score", "bench.jsonl", "--scorer", "random", "--seed", "-3",
                                     "-o", "neg.jsonl"), "--seed: must be >= 0")
    assert not (work / "neg.jsonl").exists()


def test_a_tokenizer_source_that_is_not_utf8(work):
    (work / "latin1.txt").write_bytes("café crème\n".encode("latin-1"))
    r = run_cli_in(work, "init-model", "-o", "from-latin1", "--tokenizer-from", "latin1.txt")
    assert_one_line_error(r, "latin1.txt", "UTF-8")
    assert not (work / "from-latin1").exists()


def test_a_jsonl_file_is_read_line_by_line_even_when_a_row_is_a_list(tmp_path):
    good = {"prompt": "一加一等于几？", "responses": ["二。", "三。"]}
    write_jsonl_rows(tmp_path / "mixed.jsonl", [[1, 2], good, good | {"prompt": "二加二等于几？"}])
    r = run_cli_in(tmp_path, "validate", "mixed.jsonl")
    assert r.returncode == 1 and "2 valid row(s)" in r.stdout and "mixed.jsonl:1:" in r.stdout
    r = run_cli_in(tmp_path, "stats", "mixed.jsonl", "--skip-invalid")
    assert r.returncode == 0 and "skipped 1 invalid row(s)" in r.stderr


def test_rows_validate_accepts_never_crash_another_command(tmp_path):
    task = {"task_id": "p#1", "prompt_id": "p", "prompt": "问题", "ids": ["a", "b", "c"], "ranking": "a>b>c",
            "responses": [{"id": "a", "content": "甲"}, {"id": "b", "content": "乙"}]}  # no response c
    sharegpt = {"conversations": [{"from": 5, "value": "你好"}], "chosen": "好", "rejected": "坏"}
    write_jsonl_rows(tmp_path / "odd.jsonl", [task, sharegpt])
    r = run_cli_in(tmp_path, "validate", "odd.jsonl")
    assert r.returncode == 1 and "odd.jsonl:1: ids[2]: names unknown response 'c'" in r.stdout
    assert "odd.jsonl:2: conversations[0].from" in r.stdout
    for command in (["rank", "odd.jsonl", "-o", "r.jsonl", "--skip-invalid"], ["stats", "odd.jsonl", "--skip-invalid"],
                    ["curate", "merge", "--human", "odd.jsonl", "--judge", "odd.jsonl", "-o", "m.jsonl"]):
        r = run_cli_in(tmp_path, *command)
        assert "Traceback" not in r.stderr and r.returncode in (0, 2), (command, r.stderr)
