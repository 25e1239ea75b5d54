"""`cheems annotate` from the command line as a user runs it: the bundled sample in three
commands, every bad input one line and exit 2, status as JSON, re-import idempotent."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_cli_in
from tests.test_cli import assert_one_line_error


def add_user(cwd, name: str, role: str, password: str = "pw", *extra: str):
    """``cheems annotate add-user NAME --password-stdin``, the password given on stdin."""
    return run_cli_in(cwd, "annotate", "add-user", name, "--role", role, "--password-stdin", *extra,
                      input=password + "\n")


@pytest.fixture(scope="module")
def ready(tmp_path_factory, sample_annotations):
    folder = tmp_path_factory.mktemp("annotate")
    shutil.copyfile(sample_annotations / "open.jsonl", folder / "open.jsonl")
    assert run_cli_in(folder, "annotate", "init").returncode == 0  # the default database: annotations.db here
    r = run_cli_in(folder, "annotate", "import", "open.jsonl")
    assert r.returncode == 0 and "imported 24 prompts (120 tasks, overlap 2)" in r.stdout, r.stderr
    assert add_user(folder, "李雷", "annotator", "口令", "--categories", "数学,代码").returncode == 0
    return folder


def test_the_sample_imports_and_status_reports_it(ready):
    r = run_cli_in(ready, "annotate", "status", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["tasks"]["total"] == 120 and st["tasks"]["open"] == 120
    assert st["by_annotator"]["李雷"]["role"] == "annotator"
    assert st["krippendorff"]["scores_ordinal"]["value"] is None
    again = run_cli_in(ready, "annotate", "import", "open.jsonl")
    assert again.returncode == 0 and "24 already there" in again.stdout, again.stdout


@pytest.mark.parametrize("argv, parts", [
    (["annotate", "init", "--db", "not a url"], ["--db", "not a database URL"]),
    (["annotate", "init", "--db", "sqlite:///no/such/folder/a.db"], ["--db", "does not exist"]),
    (["annotate", "import", "open.jsonl", "--db", "sqlite:///fresh.db"], ["not initialised"]),
    (["annotate", "import", "missing.jsonl"], ["missing.jsonl"]),
    (["annotate", "import", "open.jsonl", "--overlap", "0"], ["overlap: overlap must be at least 1"]),
    (["annotate", "import", "open.jsonl", "--gold", "open.jsonl"], ["has no rank"]),
    (["annotate", "status", "--db", "postgresql://nobody@127.0.0.1:1/none"], ["--db", "cannot open the database"]),
    (["annotate", "export", "-o", "open.jsonl", "--raw", "open.jsonl"], ["two outputs"]),
    (["annotate", "serve", "--agreement-bar", "1.5"], ["--agreement-bar"]),
    (["annotate", "serve", "--db", "sqlite:///fresh.db"], ["not initialised"]),
])
def test_bad_input_is_one_line(ready, argv, parts):
    before = (ready / "open.jsonl").read_bytes()
    r = run_cli_in(ready, *argv)
    assert_one_line_error(r, *parts)
    assert (ready / "open.jsonl").read_bytes() == before


@pytest.mark.parametrize("name, role, password, parts", [
    ("李雷", "annotator", "x", ["already exists"]),
    ("韩梅梅", "boss", "x", ["--role", "unknown role"]),
    ("韩梅梅", "annotator", "", ["password", "empty"]),
])
def test_bad_users_are_one_line(ready, name, role, password, parts):
    assert_one_line_error(add_user(ready, name, role, password), *parts)


def test_export_of_nothing_settled_writes_an_empty_benchmark_and_says_so(ready):
    r = run_cli_in(ready, "annotate", "export", "-o", "bench.jsonl")
    assert r.returncode == 0, r.stderr
    assert "24 prompts without a settled task yet" in r.stdout
    assert (ready / "bench.jsonl").read_text(encoding="utf-8") == ""
