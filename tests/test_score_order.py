"""`cheems score --model -o` writes its rows in the input's order (prompt by prompt, each prompt's
responses as given), whatever order the length-planned batches scored them in; a run resumed
after a crash ends in the same order."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli_in
from tests.tiny_models import copy_checkpoint, require_models_extra

require_models_extra()

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _rows(n: int) -> list[dict]:
    """Prompts whose responses run from long to short, so that batches planned by length take
    them out of order (and cross prompts)."""
    return [{"id": f"q{i}", "prompt": f"第{i}个问题：" + "请解释。" * (n - i),
             "responses": [{"id": f"r{j}", "content": "回答" * (12 - 3 * j + i)} for j in range(3)]}
            for i in range(n)]


def test_rows_come_out_in_input_order(tmp_path, cli_tiny_model):
    copy_checkpoint(cli_tiny_model, tmp_path / "tiny")
    rows = _rows(6)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                       encoding="utf-8")
    expected = [(r["id"], x["id"]) for r in rows for x in r["responses"]]
    done = run_cli_in(tmp_path, "score", "in.jsonl", "--model", "tiny", "-o", "s.jsonl", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    written = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(w["prompt_id"], w["response_id"]) for w in written] == expected

    # a run cut short (the file holds the scored rows in batch order, the rest missing) resumes
    # and ends in input order with the same scores
    kept = list(reversed(written))[:7]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(w) + "\n" for w in kept), encoding="utf-8")
    done = run_cli_in(tmp_path, "score", "in.jsonl", "--model", "tiny", "-o", "s.jsonl", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    resumed = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(w["prompt_id"], w["response_id"]) for w in resumed] == expected
    assert [w["score"] for w in resumed] == pytest.approx([w["score"] for w in written], abs=1e-5)
