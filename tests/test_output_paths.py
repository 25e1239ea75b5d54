"""Every command that writes a file meets a bad output path with one line, exit 2 and nothing
written: a folder, a path under a file, a pipe or device (renaming over it would replace it),
and a kernel folder where even root cannot create files. Run in-process (tests/conftest.py
``run_cli_in``) so that the sweep over every command stays quick."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import CliRun, run_cli_in, run_cli_process

# a command writing a file at {out}, from the inputs the `work` fixture holds
FILE_OUTPUTS = [
    "rank open.jsonl -o {out}",
    "rank open.jsonl -o ranked.jsonl --report {out}",
    "tasks bench.jsonl -o {out}",
    "score bench.jsonl --scorer length -o {out}",
    "eval bench.jsonl --scorer length --json {out}",
    "curate filter bench.jsonl -o {out}",
    "curate debias bench.jsonl -o {out} --seed 0",
    "curate merge --human open.jsonl --judge human.jsonl -o {out}",
    "curate resolve bench.jsonl --scores scores.jsonl -o {out}",
    "analyze bias open.jsonl --json {out}",
]
# a command writing a folder at {out}
FOLDER_OUTPUTS = [
    "analyze bias open.jsonl --plots {out}",
    "example-data -o {out}",
]

BAD_FILE_PATHS = {
    "a folder": ("a-folder", "is a folder"),
    "under a file": ("open.jsonl/out.jsonl", "is a file, not a folder"),
    "a pipe": ("a-pipe", "not a regular file"),
    "a device": ("a-device", "not a regular file"),
    "a kernel folder": ("/proc/cheems-out.jsonl", "cannot be written"),
}
BAD_FOLDER_PATHS = {
    "a file": ("human.jsonl", "is a file"),
    "under a file": ("open.jsonl/plots", "is a file, not a folder"),
    "a kernel folder": ("/proc/cheems-plots", "cannot be written"),
}


def invoke(cwd: Path, command: str) -> CliRun:
    """``cheems COMMAND`` (words split on spaces) in the folder ``cwd``, in this process."""
    return run_cli_in(cwd, *command.split())


@pytest.fixture(scope="module")
def work(tmp_path_factory, sample_annotations) -> Path:
    folder = tmp_path_factory.mktemp("outputs")
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copyfile(sample_annotations / name, folder / name)
    assert invoke(folder, "rank open.jsonl human.jsonl -o bench.jsonl").returncode == 0
    assert invoke(folder, "score bench.jsonl --scorer length -o scores.jsonl").returncode == 0
    (folder / "a-folder").mkdir()
    os.mkfifo(folder / "a-pipe")
    if os.geteuid() == 0:
        os.mknod(folder / "a-device", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a second /dev/null
    return folder


def snapshot(folder: Path) -> dict[str, object]:
    return {p.name: p.read_bytes() if p.is_file() else p.stat().st_mode for p in sorted(folder.rglob("*"))}


def assert_refused(work: Path, command: str, *parts: str) -> None:
    before = snapshot(work)
    r = invoke(work, command)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for p in parts:
        assert p in lines[0], r.stderr
    assert r.stdout.strip() == "", r.stdout
    assert snapshot(work) == before  # nothing written, the pipe and the device still what they were


@pytest.mark.parametrize("kind", list(BAD_FILE_PATHS))
@pytest.mark.parametrize("template", FILE_OUTPUTS)
def test_a_bad_output_file_is_one_line_and_nothing_is_written(work, template, kind):
    path, message = BAD_FILE_PATHS[kind]
    if not (work / path).exists() and kind == "a device":
        pytest.skip("making a device node needs root")
    assert_refused(work, template.format(out=path), path, message)


@pytest.mark.parametrize("kind", list(BAD_FOLDER_PATHS))
@pytest.mark.parametrize("template", FOLDER_OUTPUTS)
def test_a_bad_output_folder_is_one_line_and_nothing_is_written(work, template, kind):
    path, message = BAD_FOLDER_PATHS[kind]
    assert_refused(work, template.format(out=path), path, message)


def test_missing_folders_are_made_and_odd_file_names_written(tmp_path, sample_annotations):
    shutil.copyfile(sample_annotations / "open.jsonl", tmp_path / "open.jsonl")
    r = invoke(tmp_path, "rank open.jsonl -o new/deeper/ranked.jsonl")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "new/deeper/ranked.jsonl").stat().st_size > 0
    odd = os.fsdecode(b"r\xffnked.jsonl")  # a name that is not UTF-8: written, printed escaped
    r = run_cli_process(tmp_path, "rank", "open.jsonl", "-o", odd)  # through a real process's UTF-8 pipe
    assert r.returncode == 0, r.stderr
    assert "r\\udcffnked.jsonl" in r.stdout
    assert os.path.getsize(os.fsencode(tmp_path) + b"/r\xffnked.jsonl") > 0


def test_example_data_never_replaces_a_file_of_the_users(tmp_path):
    mine = tmp_path / "annotations" / "open.jsonl"
    mine.parent.mkdir()
    mine.write_text("my own rows\n", encoding="utf-8")
    r = invoke(tmp_path, "example-data -o .")
    assert r.returncode == 2 and "already exists" in r.stderr, r.stdout + r.stderr
    assert mine.read_text(encoding="utf-8") == "my own rows\n"
    assert sorted(p.name for p in mine.parent.iterdir()) == ["open.jsonl"]
    mine.unlink()
    assert invoke(tmp_path, "example-data -o .").returncode == 0
    assert invoke(tmp_path, "example-data -o .").returncode == 0  # the same files again: fine
