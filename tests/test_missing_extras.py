"""Every command of the core install (no torch, no matplotlib, no fastapi ...) that needs a package of
an extra ends in one line naming the extra (`pip install 'cheems[models]'`), exit 2, no traceback:
one mechanism (:meth:`cheems.cli.app.CommandGroup.main`) maps the missing module to the extra of
pyproject.toml that installs it."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import time
import tomllib
import types
from pathlib import Path

import typer

from cheems.cli import app
from cheems.cli.app import IMPORT_NAMES, NOT_ADVISED, extra_for, extras_by_module, missing_extra_line
from tests.conftest import REPO_ROOT, run_cli_in

EXTRA_LINE = re.compile(r"^error: cheems [a-z -]+ needs the ([a-z]+) extra \([a-z_]+ is not installed\): "
                        r"pip install 'cheems\[([a-z]+)\]'$")


def pyproject_extras() -> dict[str, list[str]]:
    """pyproject.toml's extras (the development bundle aside): extra -> its requirements."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"]
    return {name: requirements for name, requirements in extras.items() if name not in NOT_ADVISED}


def distribution(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement)[0].lower()


def import_name(distribution: str) -> str:
    return IMPORT_NAMES.get(distribution, re.sub(r"[-.]", "_", distribution))


def test_the_mapping_is_pyprojects_extras():
    """Each module an extra lists maps to that extra, and no module maps to an extra that does not
    install it (an extra that includes another, `cheems[models]`, installs the other's modules too)."""
    extras = pyproject_extras()
    provides = {name: {import_name(distribution(r)) for r in reqs if distribution(r) != "cheems"}
                for name, reqs in extras.items()}
    for name, reqs in extras.items():
        for included in (re.fullmatch(r"cheems\[([^\]]+)\]", r) for r in reqs):
            provides[name] |= {m for e in (included[1].split(",") if included else ()) for m in provides[e.strip()]}
    expected = {m: {e for e, ms in provides.items() if m in ms} for ms in provides.values() for m in ms}
    assert {m: set(es) for m, es in extras_by_module().items()} == expected


def test_import_names_are_the_installed_distributions_modules():
    """The module name taken for each distribution of the extras is the one it installs, for every one
    installed here (IMPORT_NAMES holds those whose module is not their own name)."""
    installs = importlib.metadata.packages_distributions()
    checked = 0
    for requirements in pyproject_extras().values():
        for d in map(distribution, requirements):
            try:
                name = importlib.metadata.distribution(d).metadata["Name"]
            except importlib.metadata.PackageNotFoundError:
                continue
            checked += 1
            assert name in installs.get(import_name(d), []), (d, import_name(d))
    assert checked >= 10


def test_which_extra_is_named(monkeypatch):
    assert extra_for("torch", ["init-model"]) == "models"
    assert extra_for("torch.nn", ["train"]) == "train"  # train's extra holds the models extra and more
    assert extra_for("fastapi", ["serve"]) == "serve" and extra_for("fastapi", ["annotate", "init"]) == "annotate"
    assert extra_for("matplotlib", ["report"]) == "plot"
    assert extra_for("numpy") is None and extra_for("cheems.nothing") is None
    line = "error: " + missing_extra_line(ModuleNotFoundError("x", name="torch"), ["init-model"])
    assert EXTRA_LINE.match(line).groups() == ("models", "models"), line
    assert missing_extra_line(ModuleNotFoundError("x", name="no_such_module"), ["rank"]) is None  # a bug: traceback
    monkeypatch.setitem(sys.modules, "krippendorff", types.ModuleType("krippendorff"))  # installed, but too old
    assert missing_extra_line(ModuleNotFoundError("x", name="krippendorff.new"), ["annotate", "status"]) == (
        "cheems annotate status: krippendorff.new is missing from the installed krippendorff (too old, or a broken "
        "install): pip install -U 'cheems[annotate]'")


# ----------------------------------------------------------------------------- every command, no extra installed

def every_command(command, words=()):
    """(words, click command) of every command of ``command``, subcommands of groups included."""
    if hasattr(command, "list_commands"):
        for name in command.list_commands(None):
            yield from every_command(command.get_command(None, name), (*words, name))
    else:
        yield words, command


TYPICAL = {
    ("init-model",): ["-o", "{out}", "--tokenizer-from", "bench.jsonl"],
    ("score",): ["bench.jsonl", "--model", "model", "-o", "{out}"],
    ("eval",): ["bench.jsonl", "--model", "model"],
    ("train",): ["--train", "bench.jsonl", "--model", "model", "-o", "{out}"],
    ("convert",): ["model", "-o", "{out}"],
    ("serve",): ["model"],
    ("bon",): ["bench.jsonl", "--gold", "gold.jsonl", "--model", "model"],
    ("report",): ["results.json", "-o", "{out}.html"],
    ("analyze", "bias"): ["bench.jsonl", "--plots", "{out}"],
    ("data", "get"): ["zhihu", "-o", "{out}.jsonl"],
    ("curate", "judge"): ["bench.jsonl", "-o", "{out}", "--judge", "judge", "--api-base", "http://127.0.0.1:9"],
}
"""A user's arguments to the commands that need a model, plots, datasets, a judge or a server: each run
reaches the package of an extra. Every annotate command needs the annotate extra with any arguments."""


def needs_an_extra(words: tuple) -> bool:
    return words in TYPICAL or words[0] == "annotate"


def arguments(words: tuple, command) -> list[str]:
    """TYPICAL's arguments, else the command's required ones, each given a data file (an output a fresh
    path, a seed 0)."""
    out = "out-" + "-".join(words)
    if words in TYPICAL:
        return [a.replace("{out}", out) for a in TYPICAL[words]]
    args = []
    for p in command.params:
        if p.required:
            value = out if p.name == "output" else "0" if p.name == "seed" else "bench.jsonl"
            args += [value] if p.param_type_name == "argument" else [p.opts[0], value]
    return args


def fake_model(folder: Path) -> Path:
    """A model folder that passes the checks made before torch is imported: config, a safetensors file
    with an empty header, a tokenizer config."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForSequenceClassification"],
                                                    "model_type": "qwen2"}), encoding="utf-8")
    (folder / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    (folder / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    return folder


def core_modules() -> set[str]:
    """The top-level modules the core install brings (cheems' requirements without an extra, and theirs)."""
    installs: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for d in dists:
            installs.setdefault(d.lower().replace("_", "-"), set()).add(module)
    todo, seen = list(importlib.metadata.requires("cheems") or []), set()
    while todo:
        requirement = todo.pop()
        if ";" in requirement:
            continue  # an extra's, or another platform's
        name = re.match(r"[A-Za-z0-9._-]+", requirement)[0].lower().replace("_", "-")
        if name not in seen:
            seen.add(name)
            todo += importlib.metadata.requires(name) or []
    return {m for d in seen for m in installs.get(d, ())}


def test_every_command_names_the_missing_extra_in_one_line(tmp_path, sample_annotations):
    commands = list(every_command(typer.main.get_command(app)))
    assert len(commands) > 30 and all(w in dict(commands) for w in TYPICAL), sorted(dict(commands))
    fake_model(tmp_path / "model")
    setup = [["rank", sample_annotations / "open.jsonl", sample_annotations / "human.jsonl", "-o", "bench.jsonl"],
             ["eval", "bench.jsonl", "--scorer", "length", "--json", "results.json"],
             ["score", "bench.jsonl", "--scorer", "length", "-o", "gold.jsonl"]]
    for args in setup:
        assert run_cli_in(tmp_path, *args).returncode == 0, args
    blocked = sorted(set(extras_by_module()) - core_modules())
    assert {"torch", "transformers", "matplotlib", "fastapi", "datasets", "openai", "sqlalchemy"} <= set(blocked)
    job = {"blocked": blocked, "cwd": str(tmp_path), "output": str(tmp_path / "results.out.json"),
           "runs": [[*words, *arguments(words, command)] for words, command in commands]}
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "tests.without_extras"], input=json.dumps(job), text=True, cwd=REPO_ROOT,
                   check=True, timeout=120)
    print(f"{len(commands)} commands without the extras in {time.monotonic() - start:.1f} s")
    results = json.loads((tmp_path / "results.out.json").read_text(encoding="utf-8"))
    for (words, _), r in zip(commands, results):
        shown = f"cheems {' '.join(r['args'])} -> {r['returncode']}\n{r['stderr']}"
        assert "Traceback" not in r["stderr"] + r["stdout"], shown
        if r["returncode"] == 0 and not needs_an_extra(words):
            continue
        lines = r["stderr"].strip().splitlines()
        assert r["returncode"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), shown
        if needs_an_extra(words):
            assert "pip install 'cheems[" in lines[0], shown
