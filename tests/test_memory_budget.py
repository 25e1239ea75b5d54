"""Token budgets found by probing (``--token-budget auto``) and out-of-memory errors as one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.models.memory_budget import (GRANULE, is_out_of_memory, out_of_memory_error, probe_sequences,
                                         probe_token_budget, smaller_budget)
from cheems.records import CheemsInputError
from cheems.settings import check_settings
from cheems.training.config import TrainConfig
from tests.conftest import run_cli_in
from tests.test_train_cli import workdir  # noqa: F401  (the ranked sample and a tiny model in a folder)

torch = pytest.importorskip("torch")


def _oom(budget: int):
    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {budget} bytes")


def _expected(threshold: int, ceiling: int, headroom: float, g: int = GRANULE) -> int:
    """The plain answer: the largest multiple of ``g`` that runs, at most the ceiling in
    granules, times the headroom, in granules (at least one)."""
    top = min(threshold // g * g, max(g, ceiling // g * g))
    return max(g, int(top * headroom) // g * g)


@settings(max_examples=200, deadline=None)
@given(threshold=st.integers(0, 400_000), start=st.integers(1, 80_000), ceiling=st.integers(1, 400_000),
       headroom=st.sampled_from([0.5, 0.85, 1.0]))
def test_probe_finds_the_largest_budget_that_runs(threshold, start, ceiling, headroom):
    seen = []

    def run(b):
        seen.append(b)
        assert b % GRANULE == 0 and GRANULE <= b <= max(GRANULE, ceiling // GRANULE * GRANULE)
        if b > threshold:
            raise _oom(b)

    if threshold < GRANULE:
        with pytest.raises(CheemsInputError, match="even at 256 tokens"):
            probe_token_budget(run, start=start, ceiling=ceiling, headroom=headroom, release=lambda: None)
        return
    budget, probes = probe_token_budget(run, start=start, ceiling=ceiling, headroom=headroom, release=lambda: None)
    assert budget == _expected(threshold, ceiling, headroom)
    assert [b for b, _ in probes] == seen and all(ok == (b <= threshold) for b, ok in probes)
    assert len(probes) <= 2 * (400_000 // GRANULE).bit_length() + 2  # logarithmic, not linear


def test_other_errors_go_through_the_probe():
    def run(b):
        raise ValueError("a bug, not memory")

    with pytest.raises(ValueError, match="a bug"):
        probe_token_budget(run, start=1024, ceiling=8192, release=lambda: None)


def test_what_counts_as_out_of_memory():
    assert is_out_of_memory(_oom(1))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_the_message_names_the_budget_that_failed_and_the_one_to_try():
    e = out_of_memory_error(65536, 65000)
    assert e.field == "token_budget" and "\n" not in e.message
    assert "65000 tokens" in e.message and "token budget 65536" in e.message
    assert e.remedy == ("token_budget", f"try {{}} {smaller_budget(65536)} or {{}} auto")
    assert str(e).endswith(f"(try token_budget {smaller_budget(65536)} or token_budget auto)")
    assert smaller_budget(65536) == 49152 and smaller_budget(512) == 384 and smaller_budget(300) == 224
    assert smaller_budget(100) == 64 and smaller_budget(20) == 15 and smaller_budget(1) == 1
    assert "no token budget" in out_of_memory_error(None, 4000).message
    assert "token budget 16384, found by probing" in out_of_memory_error(16384, 9000, auto=True).message


def test_probe_sequences_fill_the_budget():
    seqs = probe_sequences(1000, 300, 50, torch.Generator().manual_seed(0))
    assert [len(s) for s in seqs] == [300, 300, 300, 100]
    assert all(0 <= t < 50 for s in seqs for t in s)


def test_token_budget_takes_a_number_or_auto(tmp_path):
    c = TrainConfig(model="m", train=["t.jsonl"], output="o")
    for ok in ("auto", 2048, None):
        c.token_budget = ok
        check_settings(c)
    c.token_budget = "big"
    with pytest.raises(CheemsInputError, match="an integer of at least 1 or 'auto', got 'big'"):
        check_settings(c)
    c.token_budget = 0
    with pytest.raises(CheemsInputError, match="at least 1"):
        check_settings(c)
    (tmp_path / "t.yaml").write_text("model: m\ntrain: t.jsonl\noutput: o\ntoken_budget: '4096'\n", encoding="utf-8")
    assert TrainConfig.from_yaml(tmp_path / "t.yaml").token_budget == 4096


def test_training_out_of_memory_is_one_line(workdir, monkeypatch):
    from cheems.training import reward_model

    def no_memory(self, *args, **kwargs):
        raise _oom(1 << 30)

    monkeypatch.setattr(reward_model.RewardModel, "forward", no_memory)
    r = run_cli_in(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "run-oom",
                   "--epochs", "1", "--gradient-accumulation", "1", "--token-budget", "512")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if "out of GPU memory" in x]
    assert len(lines) == 1 and "(token budget 512) (try --token-budget 384 or --token-budget auto)" in lines[0], r.stderr


def test_scoring_out_of_memory_is_one_line(workdir, monkeypatch):
    from cheems.scoring import transformers_rm

    def no_memory(self, *args, **kwargs):
        raise _oom(1 << 30)

    monkeypatch.setattr(transformers_rm.TransformersRewardModel, "score_packed", no_memory)
    r = run_cli_in(workdir, "score", "bench.jsonl", "--model", "tiny", "-o", "scores.jsonl", "--token-budget", "2048")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "(token budget 2048) (try --token-budget 1536" in r.stderr
    assert (workdir / "scores.jsonl").read_text(encoding="utf-8") == ""  # no score written (a rerun resumes)


def test_auto_on_cpu_trains_with_the_default_and_records_it(workdir):
    r = run_cli_in(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "run-auto",
                   "--epochs", "1", "--gradient-accumulation", "1", "--token-budget", "auto", "--save-every", "2")
    assert r.returncode == 0, r.stderr
    states = sorted((workdir / "run-auto").glob("checkpoint-*/trainer_state.json"))
    assert states and json.loads(states[-1].read_text(encoding="utf-8"))["token_budget"] is None
    s = run_cli_in(workdir, "score", "bench.jsonl", "--model", "run-auto", "-o", "auto.jsonl", "--token-budget", "auto")
    d = run_cli_in(workdir, "score", "bench.jsonl", "--model", "run-auto", "-o", "default.jsonl")
    assert s.returncode == 0 and d.returncode == 0, s.stderr + d.stderr
    auto, default = ([json.loads(line) for line in (workdir / name).read_text(encoding="utf-8").splitlines()[1:]]
                     for name in ("auto.jsonl", "default.jsonl"))
    # the same rows in the same order; the scores of two processes agree within 1e-5 (float32, docs/evaluation.md)
    assert [(r["prompt_id"], r["response_id"]) for r in auto] == [(r["prompt_id"], r["response_id"]) for r in default]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(auto, default)) <= 1e-5
