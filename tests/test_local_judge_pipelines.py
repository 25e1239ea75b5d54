"""A local judge model wherever a judge is taken: `cheems bon --judge-model`, `cheems curate judge
--judge-model` and what `cheems eval --judge-model` prints.

Each command runs in-process on rows of the bundled sample with the tiny causal LM of
tests/tiny_models.py, and what it writes is checked against the judge's own verdict
probabilities, averaged by hand (the plain formula), for the same pairs.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import write_jsonl_rows
from tests.tiny_models import require_models_extra

require_models_extra()

from cheems.curation.all_pairs_judge import pair_verdict  # noqa: E402
from cheems.scoring.local_judge import load_local_judge  # noqa: E402
from cheems.scoring.model_settings import ModelSettings  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

MAX_LENGTH = "256"  # the sample's longest judge prompts keep their end: short sequences, fast tests


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _sample_rows(sample_annotations: Path, n: int) -> list[dict]:
    return _lines(sample_annotations / "open.jsonl")[:n]


@pytest.fixture(scope="module")
def judge(causal_lm_model):
    return load_local_judge(causal_lm_model, ModelSettings(max_length=int(MAX_LENGTH)))


def _by_hand(judge, items: list[tuple], ties: bool) -> np.ndarray:
    """Per (prompt, x, y): (p(x better), p(y better)(, p(tie))), the two orders' verdict probabilities
    averaged as the formula says."""
    probs = judge.verdict_probabilities([it for p, x, y in items for it in ((p, x, y), (p, y, x))], ties)
    rows = []
    for p_xy, p_yx in zip(probs[0::2], probs[1::2]):
        rows.append([(p_xy[0] + p_yx[1]) / 2, (p_xy[1] + p_yx[0]) / 2] + ([(p_xy[2] + p_yx[2]) / 2] if ties else []))
    return np.array(rows)


# ----------------------------------------------------------------------------- the verdict of a pair

distribution = st.integers(2, 3).flatmap(
    lambda k: st.tuples(*[st.lists(st.floats(0.01, 1), min_size=k, max_size=k) for _ in range(2)]))


@given(distribution, st.sampled_from(["both", "ab", "ba"]))
@settings(max_examples=80, deadline=None)
def test_a_pair_verdict_is_the_argmax_of_its_averaged_probabilities(rows, orders):
    ab, ba = ([x / sum(r) for x in r] for r in rows)
    given_orders = {"both": {"ab": ab, "ba": ba}, "ab": {"ab": ab}, "ba": {"ba": ba}}[orders]
    label, verdict, probs = pair_verdict(given_orders)
    if orders == "both":  # p(first) = (P_ab(A) + P_ba(B)) / 2, p(second) = (P_ab(B) + P_ba(A)) / 2
        want = [(ab[0] + ba[1]) / 2, (ab[1] + ba[0]) / 2] + ([(ab[2] + ba[2]) / 2] if len(ab) == 3 else [])
    else:
        want = ab if orders == "ab" else ba
    assert probs == pytest.approx(want, abs=1e-12)
    best = max(range(len(want)), key=lambda k: (want[k], -k))
    assert verdict == "ABC"[best] and label == "gbs"[best]


# ----------------------------------------------------------------------------- bon

def test_bon_judge_model_decides_each_pick_by_the_averaged_probabilities(tmp_path, run_cli, sample_annotations,
                                                                        causal_lm_model, judge):
    rows = _sample_rows(sample_annotations, 6)
    write_jsonl_rows(tmp_path / "cands.jsonl", rows)
    assert run_cli("score", "cands.jsonl", "--scorer", "length", "-o", "length.jsonl").returncode == 0
    r = run_cli("bon", "cands.jsonl", "--scores", "length.jsonl", "--judge-model", causal_lm_model, "--baseline", "r1",
                "--max-length", MAX_LENGTH, "--bootstrap", "50", "--json", "bon.json")
    assert r.returncode == 0, r.stderr
    judged = json.loads((tmp_path / "bon.json").read_text(encoding="utf-8"))["judged"]
    assert "verdict probabilities averaged over both orders" in r.stdout
    scores = {(s["prompt_id"], s["response_id"]): s["score"] for s in _lines(tmp_path / "length.jsonl")}
    items = []
    for row in rows:
        content = {x["id"]: x["content"] for x in row["responses"]}
        pick = max((rid for rid in content if rid != "r1"), key=lambda rid: scores[(row["id"], rid)])
        items.append((row["prompt"], content[pick], content["r1"]))
    wins = [1.0 if p[0] > p[1] else 0.0 for p in _by_hand(judge, items, ties=False)]
    first = judge.verdict_probabilities(items, False)
    second = judge.verdict_probabilities([(p, y, x) for p, x, y in items], False)
    consistent = [(a[0] > a[1]) == (b[1] > b[0]) for a, b in zip(first, second)]
    assert judged["win_rate"] == pytest.approx(np.mean(wins), abs=1e-12)
    assert judged["position_consistency"] == pytest.approx(np.mean(consistent), abs=1e-12)
    assert judged["judge"] == causal_lm_model.name and judged["scored_prompts"] == judged["prompts"] == 6
    api_fields = {"judge", "baseline", "prompts", "scored_prompts", "win_rate", "ci", "position_consistency",
                  "first_position_rate", "requests", "cached", "errors", "unparseable"}
    assert api_fields <= set(judged) and judged["requests"] == 12 and judged["cached"] == 0
    assert judged["judge_backend"] == "transformers" and 0 <= judged["win_probability"] <= 1


def test_bon_takes_one_judge_and_judge_flags_need_the_model(tmp_path, run_cli, sample_annotations, causal_lm_model):
    write_jsonl_rows(tmp_path / "cands.jsonl", _sample_rows(sample_annotations, 2))
    assert run_cli("score", "cands.jsonl", "--scorer", "length", "-o", "length.jsonl").returncode == 0
    for extra, message in ((("--judge-model", causal_lm_model, "--judge", "gpt", "--api-base", "http://127.0.0.1:9",
                             "--baseline", "r1"), "give one judge"),
                           (("--judge-model", causal_lm_model), "judge_model needs a baseline"),
                           (("--gold", "length.jsonl", "--judge-ties"), "go with --judge-model")):
        r = run_cli("bon", "cands.jsonl", "--scores", "length.jsonl", *extra)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- curate judge

def _judged(path: Path) -> dict[str, list[dict]]:
    return {row["id"]: row.get("comparisons", []) for row in _lines(path)}


@pytest.mark.parametrize("ties", [False, True])
def test_curate_judge_model_labels_every_pair_by_its_averaged_probabilities(tmp_path, run_cli, sample_annotations,
                                                                           causal_lm_model, judge, ties):
    rows = [{k: v for k, v in row.items() if k != "rank"} for row in _sample_rows(sample_annotations, 2)]
    write_jsonl_rows(tmp_path / "rows.jsonl", rows)
    r = run_cli("curate", "judge", "rows.jsonl", "-o", "judged.jsonl", "--judge-model", causal_lm_model,
                "--max-length", MAX_LENGTH, *(["--judge-ties"] if ties else []))
    assert r.returncode == 0, r.stderr
    assert "20 pairs judged by" in r.stdout and "requests sent" not in r.stdout
    report = json.loads((tmp_path / "judged.report.json").read_text(encoding="utf-8"))
    assert report["pairs"] == report["comparisons"] == 20 and report["judgements"] == 40 and report["balanced"]
    assert report["ties"] is ties and report["judge_backend"] == "transformers"
    judged = {k: [c for c in cs if c.get("source") == "judge"] for k, cs in _judged(tmp_path / "judged.jsonl").items()}
    pairs = [(row, c) for row in rows for c in judged[row["id"]]]
    assert [(c["a"], c["b"]) for _, c in pairs] == [
        ab for row in rows for ab in combinations([x["id"] for x in row["responses"]], 2)]
    want = _by_hand(judge, [(row["prompt"], *({x["id"]: x["content"] for x in row["responses"]}[k]
                                              for k in (c["a"], c["b"]))) for row, c in pairs], ties)
    for (_, c), w in zip(pairs, want):
        probs = c["probabilities"]
        assert set(probs) == ({"a", "b", "tie"} if ties else {"a", "b"})
        assert [probs["a"], probs["b"], *([probs["tie"]] if ties else [])] == pytest.approx(w, abs=1e-6)
        assert c["label"] == "gbs"[int(np.argmax(w))] and c["verdict"] == "ABC"[int(np.argmax(w))]
        assert c["annotator"] == c["judge_model"] == causal_lm_model.name and c["orders"] == "both averaged"
    labels = [c["label"] for _, c in pairs]
    assert report["labels"] == {k: labels.count(k) for k in "gbs"}


def _judge_comparisons(path: Path) -> list[dict]:
    return [c for cs in _judged(path).values() for c in cs if c.get("source") == "judge"]


def _same_comparisons(got: list[dict], want: list[dict]) -> None:
    assert [{k: v for k, v in c.items() if k != "probabilities"} for c in got] == \
        [{k: v for k, v in c.items() if k != "probabilities"} for c in want]
    for c, w in zip(got, want):
        assert c["probabilities"] == pytest.approx(w["probabilities"], abs=1e-6)


def test_curate_judge_model_resumes_from_its_verdicts(tmp_path, run_cli, sample_annotations, causal_lm_model):
    write_jsonl_rows(tmp_path / "rows.jsonl", _sample_rows(sample_annotations, 2))
    args = ("curate", "judge", "rows.jsonl", "-o", "judged.jsonl", "--judge-model", causal_lm_model,
            "--max-length", MAX_LENGTH)
    assert run_cli(*args).returncode == 0
    first = _judge_comparisons(tmp_path / "judged.jsonl")
    verdicts = tmp_path / "judged.verdicts.jsonl"
    lines = verdicts.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 20
    verdicts.write_text("".join(lines[:7]) + lines[7][:25], encoding="utf-8")  # killed while writing row 8
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    _same_comparisons(_judge_comparisons(tmp_path / "judged.jsonl"), first)  # the rest batched otherwise: ~1e-9
    assert "14 read from" in again.stdout
    report = json.loads((tmp_path / "judged.report.json").read_text(encoding="utf-8"))
    assert report["resumed_judgements"] == 14 and len(verdicts.read_text(encoding="utf-8").splitlines()) == 20
    done = run_cli(*args)  # everything on file: no model is loaded
    assert done.returncode == 0 and "loading the judge" not in done.stderr
    _same_comparisons(_judge_comparisons(tmp_path / "judged.jsonl"), first)
    tied = run_cli(*args, "--judge-ties")  # other settings: the verdicts are judged again
    assert tied.returncode == 0 and "judging every pair" in tied.stderr
    assert all("tie" in c["probabilities"] for c in _judge_comparisons(tmp_path / "judged.jsonl"))


@pytest.mark.parametrize("extra, config", [
    (("--judge", "gpt-4o"), None),
    (("--api-base", "http://127.0.0.1:9/v1"), None),
    ((), "judge:\n  model: gpt-4o\n  api_base: http://127.0.0.1:9/v1\n"),
])
def test_curate_judge_model_beside_an_api_judge_is_one_line(tmp_path, run_cli, sample_annotations, causal_lm_model,
                                                           extra, config):
    write_jsonl_rows(tmp_path / "rows.jsonl", _sample_rows(sample_annotations, 1))
    if config:
        (tmp_path / "pipeline.yaml").write_text(config, encoding="utf-8")
    r = run_cli("curate", "judge", "rows.jsonl", "-o", "judged.jsonl", "--judge-model", causal_lm_model, *extra,
                *(["--config", "pipeline.yaml"] if config else []))
    assert r.returncode == 2 and "--judge-model is the judge itself" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "judged.jsonl").exists()


# ----------------------------------------------------------------------------- what eval prints

def test_eval_judge_model_prints_pairs_consistency_and_ties_not_requests(tmp_path, run_cli, sample_annotations,
                                                                         causal_lm_model):
    assert run_cli("rank", sample_annotations / "open.jsonl", "-o", "ranked.jsonl").returncode == 0
    write_jsonl_rows(tmp_path / "bench.jsonl", _lines(tmp_path / "ranked.jsonl")[:2])
    r = run_cli("eval", "bench.jsonl", "--judge-model", causal_lm_model, "--judge-ties", "--max-length", MAX_LENGTH,
                "--bootstrap", "0", "--json", "judge.json")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "judge.json").read_text(encoding="utf-8"))
    n_pairs = len(report["pairs"])
    ties = sum(p["choice"] == "tie" for p in report["pairs"])
    assert "requests sent" not in r.stdout and "from cache" not in r.stdout
    assert f"pairs judged: {n_pairs} ({2 * n_pairs} judge prompts, transformers)" in r.stdout
    assert f"tie verdicts: {ties} of {n_pairs} pairs" in r.stdout and "position consistency:" in r.stdout
    plain = run_cli("eval", "bench.jsonl", "--judge-model", causal_lm_model, "--max-length", MAX_LENGTH,
                    "--bootstrap", "0")
    assert plain.returncode == 0 and "tie verdicts: not offered" in plain.stdout
