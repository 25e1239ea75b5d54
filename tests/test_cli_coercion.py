"""cheems.cli.coercion: plain flag values converted without pydantic, exactly as Typer's own
converter converts them (values, errors and exit codes), on a small Typer app run both ways."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import typer
import typer.core
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cheems.cli import coercion

coercion.install()

probe = typer.Typer()


@probe.command()
def show(i: int = typer.Option(0), x: float = typer.Option(0.0), s: str = typer.Option(""),
         p: Optional[Path] = typer.Option(None), many: List[Path] = typer.Option([]),
         ranged: int = typer.Option(1, min=0, max=9), flag: bool = typer.Option(False)):
    typer.echo(repr((i, x, s, p, many, ranged, flag)))


def run(args: list[str], *, plain: bool) -> tuple[int, str]:
    """Exit code and output of ``probe`` on ``args``, with the plain converter or Typer's alone."""
    with pytest.MonkeyPatch.context() as m:
        if not plain:
            m.setattr(typer.core, "build_runtime_param", coercion.typer_converter)
        result = CliRunner().invoke(probe, args)
    return result.exit_code, result.output


def test_installed_on_this_typer():
    assert coercion.PlainParam is not None and coercion.typer_converter is not None
    assert typer.core.build_runtime_param is not coercion.typer_converter


NUMBERISH = st.text(alphabet="0123456789+-._eE xn", max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.one_of(NUMBERISH, st.integers(-10**20, 10**20).map(str), st.floats(allow_nan=False).map(repr)))
def test_numbers_as_typer_reads_them(value):
    for flag in ("--i", "--x", "--ranged"):
        args = [f"{flag}={value}"]
        if flag == "--i" and _past_64_bits(value):
            continue  # refused on purpose: test_integers_past_64_bits_are_bad_values
        assert run(args, plain=True) == run(args, plain=False)


def _past_64_bits(value: str) -> bool:
    try:
        return abs(int(value)) > coercion.LARGEST_INTEGER
    except ValueError:
        return False


@pytest.mark.parametrize("value", [str(2**63), str(-2**63 - 1), str(10**20), "+" + str(2**64)])
def test_integers_past_64_bits_are_bad_values(value):
    assert run([f"--i={value}"], plain=False)[0] == 0  # Typer alone takes them
    code, output = run([f"--i={value}"], plain=True)
    assert code == 2 and "must be at most 2**63 - 1" in output
    assert run([f"--i={coercion.LARGEST_INTEGER}"], plain=True) == (0, f"({coercion.LARGEST_INTEGER}, 0.0, '', None, [], 1, False)\n")


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=10))
def test_words_and_paths_as_typer_reads_them(value):
    for flag in ("--s", "--p", "--many"):
        args = [f"{flag}={value}"]
        assert run(args, plain=True) == run(args, plain=False)


def test_paths_checked_by_typer_rules(tmp_path):
    unreadable = tmp_path / "secret.txt"
    unreadable.write_text("x")
    cases = [["--p", str(tmp_path)], ["--many", str(tmp_path), "--many", "missing.jsonl"], ["--p", ""],
             ["--p", str(unreadable)], ["--flag", "--i", "-3", "--x", "2.5e3"]]
    for args in cases:
        plain = run(args, plain=True)
        assert plain == run(args, plain=False)
    assert run(["--flag", "--i", "-3", "--x", "2.5e3"], plain=True) == \
        (0, "(-3, 2500.0, '', None, [], 1, True)\n")


def test_bad_number_says_what_typer_says():
    code, output = run(["--i", "1.5x"], plain=True)
    assert code == 2 and "Invalid value for '--i'" in output


@pytest.mark.parametrize("argv", [["rank", "{src}", "-o", "{out}"], ["stats", "{src}"]])
def test_plain_commands_run_without_pydantic(tmp_path, argv):
    src = tmp_path / "a.jsonl"
    src.write_text('{"id": "q1", "prompt": "你好", "responses": [{"id": "r1", "content": "甲"}, '
                   '{"id": "r2", "content": "乙"}], "comparisons": [{"a": "r1", "b": "r2", "label": "g"}]}\n',
                   encoding="utf-8")
    words = [w.format(src=src, out=tmp_path / "out.jsonl") for w in argv]
    code = ("import sys\nfrom cheems.cli import main\nsys.argv = ['cheems', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('pydantic' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
