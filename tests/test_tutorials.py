"""The tutorials of the documentation site run as written (docs/tutorials/*.md), and so does the
README's tour as far as the bundled sample takes it.

Each page is read as a user reads it: its fenced ```bash blocks run in order in one empty folder
(with this interpreter's bin folder, and so `cheems` and `python`, first on PATH), its ```python
blocks run in order in one interpreter sharing their names, like cells of a notebook. A ```text
block right after a code block (nothing but blank lines between them) is the output the page
promises for it: stdout and stderr together, compared line by line with trailing spaces ignored,
a line holding only `…` standing for any number of lines. Other blocks (```console, ```json) are
shown, not run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TUTORIALS = REPO_ROOT / "docs" / "tutorials"
RUN = {"shell.md": "bash", "python.md": "python"}
"""Each tutorial page and the language of the blocks it runs."""

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
ANY_LINES = "…"
TIMEOUT_S = 120


@dataclass
class Block:
    language: str
    code: str
    line: int  # where the block starts on its page (1-based), for messages
    expected: str | None = None  # the ```text block that follows it, if any


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, each ```text block attached to the block before it."""
    return blocks_of_text(page.read_text(encoding="utf-8"))


def blocks_of_text(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown ``text`` (see :func:`blocks`)."""
    found: list[Block] = []
    previous_end = None
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if language == "text" and found and previous_end is not None and not text[previous_end:match.start()].strip():
            found[-1].expected = body
        else:
            found.append(Block(language, body, line))
        previous_end = match.end()
    return found


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` matches ``expected`` line by line, where an expected line ``…`` matches
    any number of lines (zero included)."""
    if not expected:
        return not actual
    if expected[0] == ANY_LINES:
        return any(lines_match(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and lines_match(expected[1:], actual[1:])


def normalised(text: str) -> list[str]:
    """The lines of ``text`` without trailing spaces, leading and trailing blank lines dropped."""
    return [line.rstrip() for line in text.replace("\r\n", "\n").strip("\n").split("\n")]


def check_output(block: Block, page: str, output: str) -> None:
    if block.expected is None:
        return
    expected, actual = normalised(block.expected), normalised(output)
    assert lines_match(expected, actual), (
        f"{page}:{block.line}: the output differs from the page's.\n--- page ---\n{block.expected}"
        f"\n--- actual ---\n{output}")


def user_env() -> dict[str, str]:
    """The environment of a user whose activated virtual environment is this interpreter's."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def test_every_tutorial_page_is_run():
    pages = sorted(p.name for p in TUTORIALS.glob("*.md") if p.name != "index.md")
    assert pages == sorted(RUN), "add the new tutorial to RUN"
    for name, language in RUN.items():
        runnable = [b for b in blocks(TUTORIALS / name) if b.language == language]
        assert runnable, f"{name} has no {language} block"
        other = {b.language for b in blocks(TUTORIALS / name)} - {language, "console", "json", "text"}
        assert not other, f"{name}: blocks of {other} would be neither run nor checked"


def test_the_shell_tutorial(tmp_path):
    env = user_env()
    for block in blocks(TUTORIALS / "shell.md"):
        if block.language != "bash":
            continue
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                              timeout=TIMEOUT_S)
        assert proc.returncode == 0, f"shell.md:{block.line}: exit {proc.returncode}\n{block.code}\n{proc.stdout}"
        assert "Traceback" not in proc.stdout, f"shell.md:{block.line}:\n{proc.stdout}"
        check_output(block, "shell.md", proc.stdout)


DRIVER = r"""
import contextlib, io, json, sys, traceback
cells = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
results = []
for code in cells:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(code, "<tutorial>", "exec"), namespace)
    except BaseException:
        results.append({"output": out.getvalue(), "error": traceback.format_exc()})
        break
    results.append({"output": out.getvalue(), "error": None})
json.dump(results, open(sys.argv[2], "w", encoding="utf-8"))
"""


def test_the_python_tutorial(tmp_path):
    cells = [b for b in blocks(TUTORIALS / "python.md") if b.language == "python"]
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "cells.json").write_text(json.dumps([b.code for b in cells]), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "cells.json"), str(tmp_path / "out.json")],
                          cwd=work, env=user_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          encoding="utf-8", timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout
    results = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    for block, result in zip(cells, results):
        assert result["error"] is None, f"python.md:{block.line}:\n{block.code}\n{result['output']}\n{result['error']}"
        check_output(block, "python.md", result["output"])
    assert len(results) == len(cells)


@pytest.mark.parametrize(("expected", "actual", "matches"), [
    (["a", "b"], ["a", "b"], True),
    (["a", "…"], ["a", "b", "c"], True),
    (["…", "c"], ["a", "b", "c"], True),
    (["a", "…", "c"], ["a", "c"], True),
    (["a", "…", "c"], ["a", "b"], False),
    (["a"], ["a", "b"], False),
    (["…"], [], True),
])
def test_lines_match(expected, actual, matches):
    assert lines_match(expected, actual) is matches


def test_the_readme_tour_gives_the_figure_it_names(tmp_path):
    """The README's tour runs on the sample up to its first command that needs a model of your own,
    and the Overall figure its comment names is what that `cheems eval` prints."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    tour = readme[readme.index("## A tour"):]
    code = next(b.code for b in blocks_of_text(tour) if b.language == "bash")
    lines = code.splitlines()
    runnable = lines[:next(k for k, line in enumerate(lines) if "my-rm" in line)]
    figure = next(re.search(r"Overall: ([0-9.]+) here", line)[1] for line in runnable if "Overall:" in line)
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", "\n".join(runnable)], cwd=tmp_path, env=user_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout
    assert re.search(rf"│\s+{re.escape(figure)} │", proc.stdout), proc.stdout
