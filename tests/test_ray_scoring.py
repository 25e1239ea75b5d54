"""Scoring on a Ray cluster (a local CPU instance here) writes the single-process scores file.

Slow-ish (Ray and actor start-up take seconds each): skip with ``pytest -m "not ray"``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cheems.formats import read_prompts, read_scores
from cheems.io import ResumableJsonl
from cheems.records import CheemsInputError

pytestmark = pytest.mark.ray

META = {"model": "tiny", "max_length": 2048, "truncation": "left", "dtype": "auto", "layout": "seq-cls"}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def prompts(sample_annotations: Path) -> list:
    return [p for f in sorted(sample_annotations.glob("*.jsonl")) for p in read_prompts(f).prompts]


@pytest.fixture(scope="module")
def tiny_model(seq_cls_model) -> Path:
    """The session's tiny reward model, trained on the sample's texts (tests/tiny_models.py)."""
    return seq_cls_model


@pytest.fixture(scope="module")
def single_process_scores(tiny_model, prompts, tmp_path_factory) -> dict:
    """The reference: the same model scored in this process by ``score_to_file``."""
    from cheems.scoring.run import score_to_file
    from cheems.scoring.transformers_rm import load_reward_model

    out = tmp_path_factory.mktemp("single") / "scores.jsonl"
    score_to_file(load_reward_model(tiny_model), prompts, out, meta=META)
    return read_scores(out)


@pytest.fixture(scope="module")
def local_ray():
    """A local two-CPU Ray instance shared by the tests below, stopped after them."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    # address="local": a private instance even where `ray start` left a cluster running
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _rows(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _assert_same_scores(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    worst = max(abs(got[k] - want[k]) for k in want)
    assert worst <= TOLERANCE, f"scores differ from single-process ones by up to {worst:.2e}"


# ---------------------------------------------------------------- bad input, no cluster needed

def test_missing_ray_extra_says_what_to_install(monkeypatch, tmp_path, prompts):
    from cheems.scoring.ray_scoring import score_with_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(CheemsInputError, match=r"pip install 'cheems\[ray\]'"):
        score_with_ray(prompts, tmp_path, tmp_path / "s.jsonl", meta=META, load_kwargs={})


def test_device_is_not_a_load_option(tiny_model, tmp_path, prompts):
    pytest.importorskip("ray")
    from cheems.scoring.ray_scoring import score_with_ray

    with pytest.raises(CheemsInputError, match="each replica uses its own GPU"):
        score_with_ray(prompts, tiny_model, tmp_path / "s.jsonl", meta=META, load_kwargs={"device": "cuda"})


def test_not_a_model_folder_fails_before_ray_starts(tmp_path, prompts):
    ray = pytest.importorskip("ray")
    from cheems.scoring.ray_scoring import score_with_ray

    connected = ray.is_initialized()
    with pytest.raises(CheemsInputError, match="not a model folder"):
        score_with_ray(prompts, tmp_path, tmp_path / "s.jsonl", meta=META, load_kwargs={})
    assert not (tmp_path / "s.jsonl").exists()
    assert ray.is_initialized() == connected  # nothing was started on its account


# ---------------------------------------------------------------- real scoring

def test_starts_a_local_instance_resumes_and_stops_it(tiny_model, prompts, single_process_scores, tmp_path):
    """No Ray running: one is started for the call (one CPU replica) and stopped after; the
    rows a killed earlier run left in the file are kept and only the rest is scored."""
    ray = pytest.importorskip("ray")
    from cheems.scoring.ray_scoring import score_with_ray

    if ray.is_initialized():
        pytest.skip("this process is already connected to Ray")
    out = tmp_path / "scores.jsonl"
    first = {(p.id, r.id) for p in prompts[:20] for r in p.responses}
    with ResumableJsonl(out, META) as f:  # as a killed earlier run left it
        f.append({"prompt_id": p, "response_id": r, "score": single_process_scores[(p, r)]}
                 for p, r in sorted(first))
    prefilled = _rows(out)

    # address="local": a fresh instance even where RAY_ADDRESS or `ray start` points elsewhere
    summary = score_with_ray(prompts, tiny_model, out, meta=META, load_kwargs={}, address="local")
    assert not ray.is_initialized(), "the instance started for the call was left running"
    total = sum(len(p.responses) for p in prompts)
    assert summary["replicas"] == 1 and summary["total"] == total
    assert summary["resumed"] == len(first) and summary["scored"] == total - len(first)
    rows = _rows(out)
    assert rows[:len(prefilled)] == prefilled  # the earlier rows are kept as they were
    assert len(rows) == total  # and nothing was scored twice
    _assert_same_scores(read_scores(out), single_process_scores)

    again = score_with_ray(prompts, tiny_model, out, meta=META, load_kwargs={})
    assert (again["scored"], again["resumed"], again["replicas"]) == (0, total, 0)
    assert len(_rows(out)) == total and not ray.is_initialized()  # nothing left to do: Ray not even started


def test_two_cpu_replicas_write_the_single_process_file(local_ray, tiny_model, prompts, single_process_scores,
                                                        tmp_path):
    from cheems.scoring.ray_scoring import score_with_ray

    out = tmp_path / "scores.jsonl"
    calls = []
    summary = score_with_ray(prompts, tiny_model, out, meta=META, load_kwargs={}, replicas=2,
                             batch_size=16, progress=lambda done, total: calls.append((done, total)))
    total = sum(len(p.responses) for p in prompts)
    assert summary["scored"] == summary["total"] == total
    assert summary["resumed"] == 0 and summary["replicas"] == 2
    assert summary["stats"].sequences == total and summary["stats"].truncated == 0
    _assert_same_scores(read_scores(out), single_process_scores)
    assert len(_rows(out)) == total  # each pair once
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len(calls) > 2  # results streamed in
    assert local_ray.is_initialized(), "a connection the caller opened must stay open"


def test_resuming_with_other_settings_is_refused(local_ray, tiny_model, prompts, tmp_path):
    from cheems.scoring.ray_scoring import score_with_ray

    out = tmp_path / "scores.jsonl"
    with ResumableJsonl(out, META) as f:
        f.append([{"prompt_id": prompts[0].id, "response_id": prompts[0].responses[0].id, "score": 0.0}])
    with pytest.raises(CheemsInputError, match=r"\(overwrite starts again\)"):
        score_with_ray(prompts, tiny_model, out, meta={**META, "max_length": 512}, load_kwargs={})


def test_replicas_that_cannot_be_placed_are_refused_instead_of_waiting(local_ray, tiny_model, prompts, tmp_path):
    from cheems.scoring.ray_scoring import score_with_ray

    with pytest.raises(CheemsInputError, match="has no GPU"):
        score_with_ray(prompts, tiny_model, tmp_path / "a.jsonl", meta=META, load_kwargs={},
                       num_gpus_per_replica=1)
    with pytest.raises(CheemsInputError, match="3 CPU replicas do not fit on the cluster's 2 CPUs"):
        score_with_ray(prompts, tiny_model, tmp_path / "b.jsonl", meta=META, load_kwargs={}, replicas=3)


def test_a_bad_load_option_reaches_the_caller_as_one_readable_error(local_ray, tiny_model, prompts, tmp_path):
    from cheems.scoring.ray_scoring import score_with_ray

    with pytest.raises(CheemsInputError) as caught:
        score_with_ray(prompts, tiny_model, tmp_path / "s.jsonl", meta=META, load_kwargs={"dtype": "float33"},
                       replicas=1)
    assert type(caught.value) is CheemsInputError  # not Ray's wrapper with a remote traceback
    assert str(caught.value) == "dtype: unknown dtype 'float33' (try bfloat16, float16, float32)"
