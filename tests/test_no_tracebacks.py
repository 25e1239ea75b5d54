"""Input that used to end in a traceback (or pass unnoticed) ends in one line naming the file
and field, exit 2, and no output file: deep nesting (JSONL, JSON lists, YAML), lone
surrogates, files named .parquet that are not Parquet, inputs that are no regular file,
settings that would multiply work without bound, and a full disk while saving a model."""

from __future__ import annotations

import errno
import json
import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import run_cli_in
from tests.tiny_models import ranked_folder_with_model

def assert_one_error_line(r, *parts: str) -> None:
    """Exit 2, no traceback, and stderr one line starting with ``error:`` that holds ``parts``
    (stdout may hold what the run printed before it failed, such as training progress)."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for p in parts:
        assert p in lines[0], r.stderr


GOOD = {"id": "p1", "prompt": "一加一等于几？", "responses": [{"id": "a", "content": "二。"}, {"id": "b", "content": "三。"}],
        "rank": {"a": 0, "b": 1}}


def row_text(**changes) -> str:
    """GOOD as a JSON line with top-level keys changed, ``...`` standing for raw JSON put in later."""
    return json.dumps(GOOD | changes, ensure_ascii=False)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_row(depth: int) -> str:
    return row_text(meta="@").replace('"@"', nested(depth))


def surrogate_row(where: str) -> str:
    """A row whose ``where`` (id or the first content) holds the escape of a lone surrogate."""
    if where == "id":
        return row_text(id="p@").replace("p@", "p\\ud800")
    return row_text().replace("二。", "二\\udc00")


def write(name: str, data: str | bytes) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        path = folder / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return make


def symlink_loop(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        os.symlink(name, folder / name)
    return make


def folder_named(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).mkdir()


def fifo(name: str) -> Callable[[Path], None]:
    return lambda folder: os.mkfifo(folder / name)


READERS = {  # the commands that read a data file and write an output: args after the input
    "eval": ["--scorer", "random", "--json", "out.json"],
    "score": ["--scorer", "random", "-o", "out.jsonl"],
    "tasks": ["-o", "out.jsonl"],
    "rank": ["-o", "out.jsonl"],
}


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[Path], None]
    input: str
    parts: tuple[str, ...]
    commands: tuple[str, ...] = tuple(READERS)


DATA_CASES = [
    Case("nesting-past-the-parser", write("deep.jsonl", deep_row(100_000) + "\n"), "deep.jsonl",
         ("deep.jsonl:1:", "nests deeper than 100 levels")),
    Case("nesting-past-the-writer", write("deep.jsonl", deep_row(300) + "\n"), "deep.jsonl",
         ("deep.jsonl:1: meta:", "nests deeper than 100 levels")),
    Case("nesting-in-a-json-list", write("deep.json", "[" + deep_row(300) + "]"), "deep.json",
         ("deep.json:1: meta:", "nests deeper than 100 levels")),
    Case("surrogate-in-an-id", write("s.jsonl", surrogate_row("id") + "\n"), "s.jsonl",
         ("s.jsonl:1: id:", "lone surrogate (\\ud800)")),
    Case("surrogate-in-content", write("s.jsonl", row_text() + "\n" + surrogate_row("content") + "\n"), "s.jsonl",
         ("s.jsonl:2: responses[0].content:", "lone surrogate (\\udc00)")),
    Case("surrogate-with-nan", write("s.jsonl", surrogate_row("id").replace('"rank"', '"x": NaN, "rank"') + "\n"),
         "s.jsonl", ("s.jsonl:1: id:", "lone surrogate")),
    Case("parquet-that-is-jsonl", write("x.parquet", row_text() + "\n"), "x.parquet",
         ("x.parquet:", "holds JSON text, not Parquet")),
    Case("parquet-of-0-bytes", write("x.parquet", b""), "x.parquet", ("x.parquet:", "is empty (0 bytes)")),
    Case("parquet-of-random-bytes", write("x.parquet", bytes(range(256)) * 8), "x.parquet",
         ("x.parquet:", "is not a Parquet file")),
    Case("parquet-cut-short", write("x.parquet", b"PAR1" + bytes(100) + b"PAR1"), "x.parquet",
         ("x.parquet:", "cannot read as Parquet")),
    Case("symlink-loop", symlink_loop("loop.jsonl"), "loop.jsonl", ("loop.jsonl:", "symbolic link that loops")),
    Case("a-folder", folder_named("dir.jsonl"), "dir.jsonl", ("dir.jsonl:", "is a directory")),
    Case("a-fifo", fifo("pipe.jsonl"), "pipe.jsonl", ("pipe.jsonl:", "not a regular file")),
]


@pytest.mark.parametrize("case", DATA_CASES, ids=[c.id for c in DATA_CASES])
def test_bad_data_files_are_one_line_and_exit_2(tmp_path, case):
    case.make(tmp_path)
    for command in case.commands:
        r = run_cli_in(tmp_path, command, case.input, *READERS[command])
        assert_one_error_line(r, *case.parts)
        assert not any(p.name.startswith("out.") or p.name.startswith(".out.") for p in tmp_path.iterdir()), command


SAMPLE_MODEL = "    - name: m\n      api_base: http://127.0.0.1:9/v1\n"
CONFIG_CASES = [
    Case("yaml-nesting-past-the-parser", write("c.yaml", "x: " + nested(100_000) + "\n"), "c.yaml",
         ("c.yaml:", "nests deeper than 32 levels"), ("train", "curate sample")),
    Case("yaml-surrogate", write("c.yaml", 'model: "m\\ud800"\nsample:\n  models:\n' + SAMPLE_MODEL), "c.yaml",
         ("c.yaml: model:", "lone surrogate (\\ud800)"), ("train", "curate sample")),
    Case("sample-n-of-a-billion", write("c.yaml", "sample:\n  models:\n" + SAMPLE_MODEL + "      n: 1000000000\n"),
         "c.yaml", ("c.yaml: models[0].n:", "1000000000"), ("curate sample",)),
    Case("sample-max-tokens-of-a-billion", write("c.yaml", "sample:\n  models:\n" + SAMPLE_MODEL +
                                                 "      max_tokens: 1000000000\n"),
         "c.yaml", ("c.yaml: models[0].max_tokens:",), ("curate sample",)),
    Case("yaml-symlink-loop", symlink_loop("loop.yaml"), "loop.yaml", ("loop.yaml:", "loops"), ("train",)),
    Case("yaml-fifo", fifo("pipe.yaml"), "pipe.yaml", ("pipe.yaml:", "not a regular file"), ("train",)),
]
CONFIG_COMMANDS = {
    "train": ["train", "--config", "{}"],
    "curate sample": ["curate", "sample", "prompts.jsonl", "-o", "out.jsonl", "--config", "{}"],
}


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c.id for c in CONFIG_CASES])
def test_bad_configs_are_one_line_and_exit_2(tmp_path, case):
    case.make(tmp_path)
    (tmp_path / "prompts.jsonl").write_text('{"id": "p1", "prompt": "你好"}\n', encoding="utf-8")
    for command in case.commands:
        r = run_cli_in(tmp_path, *(a.format(case.input) for a in CONFIG_COMMANDS[command]))
        assert_one_error_line(r, *case.parts)
        assert not (tmp_path / "out.jsonl").exists()


# ----------------------------------------------------------------------------- a full disk while saving

def full_disk(monkeypatch, only_in: str | None = None) -> None:
    """Saving a tokenizer writes half a file and fails as a full disk does (into folders named
    ``only_in`` alone, when given)."""
    from transformers import PreTrainedTokenizerBase

    real = PreTrainedTokenizerBase.save_pretrained

    def save_pretrained(self, save_directory, *args, **kwargs):
        folder = Path(save_directory)
        if only_in is not None and folder.name != only_in:
            return real(self, save_directory, *args, **kwargs)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tokenizer.json").write_text('{"version": "1.0", "trunc', encoding="utf-8")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "tokenizer.json"))

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", save_pretrained)


LIBRARY_FULL_DISKS = {  # how the libraries that write weights report a full disk, in their own words
    "safetensors": RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                'message: "No space left on device" })'),
    "torch.save": RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0: "
                               "PytorchStreamWriter failed writing file data/0: file write failed"),
}


@pytest.mark.parametrize("library", list(LIBRARY_FULL_DISKS))
def test_init_model_when_the_weights_writer_reports_a_full_disk_its_own_way(tmp_path, sample_annotations,
                                                                            monkeypatch, library):
    from transformers import PreTrainedModel

    def save_pretrained(self, save_directory, *args, **kwargs):
        Path(save_directory).mkdir(parents=True, exist_ok=True)
        (Path(save_directory) / "model.safetensors").write_bytes(b"\0" * 10)
        raise LIBRARY_FULL_DISKS[library]

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)
    r = run_cli_in(tmp_path, "init-model", "-o", "m", "--tokenizer-from", sample_annotations / "open.jsonl",
                   "--vocab-size", "300")
    expected = "No space left on device" if library == "safetensors" else "Input/output error"
    assert_one_error_line(r, f"m: cannot write: {expected}")
    assert list(tmp_path.iterdir()) == []


def test_other_errors_of_a_writer_are_not_taken_for_a_full_disk():
    from cheems.io import storage_failure

    assert storage_failure(RuntimeError("size mismatch for lm_head")) is None
    assert storage_failure(OSError(errno.ENOENT, "No such file")) is None
    assert storage_failure(OSError(errno.ENOSPC, "No space left on device")).errno == errno.ENOSPC


MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "train_summary.json")


@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "existing-folder"])
def test_init_model_on_a_full_disk(tmp_path, sample_annotations, monkeypatch, existing):
    if existing:
        (tmp_path / "m").mkdir()
    full_disk(monkeypatch)
    r = run_cli_in(tmp_path, "init-model", "-o", "m", "--tokenizer-from", sample_annotations / "open.jsonl",
                   "--vocab-size", "300")
    assert_one_error_line(r, "m: cannot write: No space left on device")
    assert [p.name for p in tmp_path.iterdir()] == (["m"] if existing else [])
    assert not existing or not any((tmp_path / "m").iterdir())


@pytest.fixture(scope="module")
def train_folder(tmp_path_factory, sample_annotations, cli_tiny_model) -> Path:
    return ranked_folder_with_model(tmp_path_factory.mktemp("full_disk_train"), sample_annotations / "open.jsonl",
                                    cli_tiny_model)


TRAIN = ("train", "--model", "tiny", "--train", "bench.jsonl", "--epochs", "1", "--gradient-accumulation", "1",
         "--micro-batch-size", "4")


@pytest.mark.parametrize("only_in", [None, ".final-model.tmp"], ids=["at-the-checkpoint", "at-the-final-model"])
def test_train_on_a_full_disk(train_folder, monkeypatch, only_in):
    out = train_folder / f"out-{only_in is None}"
    full_disk(monkeypatch, only_in)
    fake_clock(monkeypatch, slow_step=None)  # a busy test machine says nothing here
    # 4 epochs of 30 steps: a plan long enough to have no few-steps note; stderr is the error alone
    r = run_cli_in(train_folder, *TRAIN, "--epochs", "4", "--output", out.name)
    assert_one_error_line(r, f"{out.name}: cannot write: No space left on device")
    assert not any((out / name).exists() for name in MODEL_FILES)  # no final model that looks whole
    assert not (out / ".final-model.tmp").exists()
    if only_in is None:  # nothing saved whole: nothing left, not even the metrics log or the folder
        assert not out.exists()
    else:  # the epochs' checkpoints were saved whole: a run to resume, its log up to the last of them
        last = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
        log = (out / "train_log.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["step"] for line in log] == list(range(1, last + 1))


def folder_bytes(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``folder``, by relative path."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def test_a_resumed_run_on_a_full_disk_leaves_the_earlier_run_as_it_was(train_folder, monkeypatch):
    fast = ("--micro-batch-size", "64", "--save-every", "1", "--max-length", "128", "--truncate")  # 2 steps
    r = run_cli_in(train_folder, *TRAIN, *fast, "--output", "earlier")
    assert r.returncode == 0, r.stderr
    earlier = train_folder / "earlier"
    # as a kill after step 2 leaves it: step 1's checkpoint, step 2 logged, a line cut short
    import shutil
    shutil.rmtree(earlier / "checkpoint-2")
    (earlier / "train_summary.json").unlink()
    with open(earlier / "train_log.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 3')
    before = folder_bytes(earlier)
    full_disk(monkeypatch)  # the next checkpoint fails, after the resumed run rewrote and appended to the log
    r = run_cli_in(train_folder, *TRAIN, *fast, "--output", "earlier", "--resume")
    assert_one_error_line(r, "earlier: cannot write: No space left on device")
    assert folder_bytes(earlier) == before


def test_a_generative_run_on_a_full_disk_leaves_nothing(train_folder, causal_lm_model, monkeypatch):
    rows = (train_folder / "bench.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (train_folder / "three.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    full_disk(monkeypatch)
    r = run_cli_in(train_folder, "train", "--objective", "generative", "--model", causal_lm_model, "--train",
                   "three.jsonl", "--output", "judge", "--epochs", "1", "--gradient-accumulation", "1",
                   "--micro-batch-size", "64")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "error: judge: cannot write: No space left on device", r.stderr
    assert not (train_folder / "judge").exists()


def test_what_a_run_saved_whole_before_the_disk_filled_stays(tmp_path):
    """The folder put back after a failed write: new files gone and the log's bytes restored,
    unless the run saved a whole checkpoint: that stays, with the log up to its step."""
    from cheems.training.output_folder import OutputBefore, put_back

    out = tmp_path / "out"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text('{"step": 2}', encoding="utf-8")
    (out / "train_log.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"st', encoding="utf-8")
    (out / "runs").mkdir()
    (out / "runs" / "events.1").write_bytes(b"1")
    before = OutputBefore.of(out)
    was = folder_bytes(out)

    def run_on(saved: bool) -> None:  # what a resumed run writes before the disk fills
        (out / "train_log.jsonl").write_text("".join(f'{{"step": {s}}}\n' for s in range(1, 6)), encoding="utf-8")
        (out / "runs" / "events.2").write_bytes(b"2")
        (out / ".final-model.tmp").mkdir()
        (out / ".checkpoint-6.tmp").mkdir()
        if saved:
            (out / "checkpoint-4").mkdir()
            (out / "checkpoint-4" / "trainer_state.json").write_text('{"step": 4}', encoding="utf-8")

    run_on(saved=False)
    put_back(out, before)
    assert folder_bytes(out) == was
    run_on(saved=True)
    put_back(out, before)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", "checkpoint-4", "runs", "train_log.jsonl"]
    assert (out / "train_log.jsonl").read_text(encoding="utf-8") == "".join(f'{{"step": {s}}}\n' for s in range(1, 5))
    new = tmp_path / "new"
    run_on_new = OutputBefore.of(new)
    (new / "runs").mkdir(parents=True)
    (new / "train_log.jsonl").write_text('{"step": 1}\n', encoding="utf-8")
    put_back(new, run_on_new)
    assert not new.exists()


# ----------------------------------------------------------------------------- a busy machine

def fake_clock(monkeypatch, slow_step: int | None) -> None:
    """The trainer's clock: every step takes 1 s, but step ``slow_step``, which takes 101 s.
    It is read once when training starts, then before and after each step."""
    calls = []

    def perf_counter() -> float:
        calls.append(None)
        late = slow_step is not None and len(calls) >= 1 + 2 * slow_step
        return len(calls) + (100.0 if late else 0.0)

    monkeypatch.setattr("cheems.training.trainer.time", types.SimpleNamespace(perf_counter=perf_counter))


def test_training_says_once_that_the_machine_is_busy(train_folder, monkeypatch):
    """Every step takes 1 s on a fake clock but the ninth, which takes 100 s: one note says so,
    naming the threads torch runs (OMP_NUM_THREADS=1 here), and the run finishes."""
    fake_clock(monkeypatch, slow_step=9)
    r = run_cli_in(train_folder, *TRAIN, "--micro-batch-size", "1", "--output", "busy",
                   env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "machine looks busy" in line]
    assert len(notes) == 1, r.stderr
    assert notes[0].startswith("note: step 9 took 101.0 s") and "torch runs 1 CPU thread(s)" in notes[0]
