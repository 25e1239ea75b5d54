"""The library speaks in its own words: no module outside ``cli/`` names a command-line flag.

An error that a setting would fix names the setting through ``CheemsInputError(remedy=(setting,
text))``: ``str(e)`` says the setting's Python name and the CLI's error line says its flag. The
static check reads every string constant that is not a docstring (error texts, f-string parts,
notes and warnings handed to ``notify``) and refuses a ``--word`` token.
"""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cheems
from cheems.io import ResumableJsonl
from cheems.records import CheemsInputError

PACKAGE = Path(cheems.__file__).resolve().parent

FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
"""A flag-like token: two dashes, then a name (``---`` rules and ``<!-- -->`` do not match)."""

NOT_YET: tuple[str, ...] = ()
"""Paths (relative to the package) left out of the check, with the reason beside each: none now.
The reward server's refusals and log lines name settings through :mod:`cheems.serving.naming`
(its own names from Python, its flags under `cheems serve`)."""

ALLOWED: dict[tuple[str, str], str] = {
    ("experiments/cell_recipe.py", "--config_file"): "the argv of `accelerate launch` the library runs",
    ("experiments/cell_recipe.py", "--num_processes"): "the argv of `accelerate launch` the library runs",
    ("experiments/cell_recipe.py", "--config"): "the argv of the `cheems train` process the library starts",
    ("scoring/ray_scoring.py", "--head"): "`ray start --head`, Ray's own command that starts a cluster",
    ("training/config.py", "--objective"): "the help texts of the settings of one objective (`With --objective dual:`)",
}
"""(module, token) -> why it is not a flag named to a user: command lines the library itself runs."""


def _checked_modules() -> list[Path]:
    def skipped(rel: str) -> bool:
        return rel.startswith("cli/") or any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in NOT_YET)

    return [p for p in sorted(PACKAGE.rglob("*.py")) if not skipped(p.relative_to(PACKAGE).as_posix())]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of every bare string statement: docstrings of modules, classes and functions, and
    the attribute docstrings that follow a constant."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def _help_texts(tree: ast.AST) -> set[int]:
    """The ids of the strings of every ``help=`` argument: a setting's help is what ``--help``
    prints for its flag (:func:`cheems.settings.setting`), written for the command line."""
    return {id(node) for call in ast.walk(tree) if isinstance(call, ast.Call)
            for kw in call.keywords if kw.arg in ("help", "default_text") for node in ast.walk(kw.value)}


def flag_mentions(path: Path) -> list[tuple[int, str]]:
    """(line, token) of each flag-like token in a string constant of ``path`` that is not a
    docstring or a setting's help text."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docs = _docstrings(tree) | _help_texts(tree)
    return [(node.lineno, m.group()) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            for m in FLAG.finditer(node.value)]


def test_no_library_message_names_a_flag():
    found, used = [], set()
    for path in _checked_modules():
        rel = path.relative_to(PACKAGE).as_posix()
        for line, token in flag_mentions(path):
            if (rel, token) in ALLOWED:
                used.add((rel, token))
            else:
                found.append(f"src/cheems/{rel}:{line}: {token}")
    assert not found, "library text naming a flag (name the setting, e.g. remedy=(setting, text)):\n" + "\n".join(
        sorted(found))
    assert used == set(ALLOWED), f"allowed but no longer there: {sorted(set(ALLOWED) - used)}"


def test_the_check_sees_strings_in_errors_and_f_strings_but_not_docstrings(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Use --doc."""\nX = 1\n"""--attr doc"""\n\n\ndef f(n):\n    """--doc too"""\n'
                      '    raise ValueError(f"n {n}; use --overwrite")\n\n\ndef g():\n'
                      '    return "a --- rule, <!-- html -->, and --skip-invalid"\n', encoding="utf-8")
    assert sorted(flag_mentions(module)) == [(8, "--overwrite"), (12, "--skip-invalid")]


def test_a_remedy_names_the_setting_survives_pickle_and_the_cli_names_the_flag(tmp_path, monkeypatch):
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n', encoding="utf-8")
    with pytest.raises(CheemsInputError) as caught:
        ResumableJsonl.check(tmp_path / "rows.jsonl", {"model": "b"})
    e = caught.value
    assert e.remedy == ("overwrite", "{} starts again") and "--" not in str(e)
    assert str(e).endswith("(overwrite starts again)") and e.file == str(tmp_path / "rows.jsonl")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is CheemsInputError and str(back) == str(e)
    assert (back.message, back.file, back.line, back.field, back.remedy) == (e.message, e.file, e.line, e.field,
                                                                               e.remedy)
    assert back.render(lambda s: "--" + s) == str(e).replace("(overwrite", "(--overwrite")

    # the CLI: a local copy of a release whose file is not the pinned revision's names --revision
    from cheems.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "clone" / "data" / "cheems_bench").mkdir(parents=True)
    (tmp_path / "clone" / "data" / "cheems_bench" / "open.jsonl").write_text('{"x": 1}\n', encoding="utf-8")
    r = CliRunner().invoke(app, ["data", "get", "cheemsbench", "--source", "clone", "-o", "bench.jsonl"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().endswith("check out that revision (or give --revision the revision it holds)"), r.output
    assert not (tmp_path / "bench.jsonl").exists()
