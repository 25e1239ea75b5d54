"""Local generative judges (cheems.scoring.local_judge): a tiny causal LM read as a pairwise judge.

The formulas are checked against plain Python; the batching against itself (one sequence at a
time against packed and padded batches); the report through the real CLI, against the report
an API judge (a loopback OpenAI-compatible server) writes for the same benchmark; the vLLM
back-end with an engine that keeps vLLM's offline interface and computes with transformers.
"""

from __future__ import annotations

import json
import math
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import write_jsonl_rows
from tests.openai_server import JudgeServer, smart_judge
from tests.tiny_models import copy_checkpoint, require_models_extra, set_chat_template

require_models_extra()
import torch  # noqa: E402

from cheems.llm.verdict_template import save_verdict_template, verdict_template  # noqa: E402
from cheems.scoring.local_judge import (averaged_verdicts, load_local_judge, load_vllm_judge,  # noqa: E402
                                        verdict_softmax)
from cheems.scoring.model_settings import ModelSettings  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")


# ----------------------------------------------------------------------------- formulas

logit_rows = st.lists(st.lists(st.floats(-30, 30), min_size=3, max_size=3), min_size=1, max_size=6)


@given(logit_rows, st.sampled_from([2, 3]))
@settings(max_examples=60, deadline=None)
def test_verdict_softmax_is_the_plain_softmax_over_the_verdicts(rows, k):
    got = verdict_softmax(np.array(rows), k)
    for row, p in zip(rows, got):
        denominator = sum(math.exp(z) for z in row[:k])
        assert np.allclose(p, [math.exp(z) / denominator for z in row[:k]], rtol=1e-12, atol=0)
        assert abs(p.sum() - 1) < 1e-12


def _distribution(k):
    return st.lists(st.floats(0.01, 1), min_size=k, max_size=k).map(lambda xs: [x / sum(xs) for x in xs])


@given(st.sampled_from([2, 3]).flatmap(lambda k: st.tuples(_distribution(k), _distribution(k))))
@settings(max_examples=60, deadline=None)
def test_averaged_verdicts_is_the_plain_average_of_both_orders(pair):
    p_xy, p_yx = pair
    got = averaged_verdicts(np.array([p_xy]), np.array([p_yx]))[0]
    want = [(p_xy[0] + p_yx[1]) / 2, (p_xy[1] + p_yx[0]) / 2] + ([(p_xy[2] + p_yx[2]) / 2] if len(p_xy) > 2 else [])
    assert np.allclose(got, want, rtol=0, atol=1e-15)
    swapped = averaged_verdicts(np.array([p_yx]), np.array([p_xy]))[0]  # the pair given the other way round
    assert np.allclose(swapped[[1, 0]], got[:2], atol=1e-15) and abs(got.sum() - 1) < 1e-12


# ----------------------------------------------------------------------------- the model

def _items(prompts, n=6):
    """Both orders of the first two responses of ``n`` prompts (their openings, so no judge
    prompt is cut), and a third pair where there is one: lengths vary, prefixes are shared."""
    items = []
    for k, p in enumerate(prompts[:n]):
        question = p.prompt if isinstance(p.prompt, str) else p.prompt[-1]["content"]
        a, b, *rest = [r.content[:20 + 7 * k] for r in p.responses]
        items += [(question[:30], a, b), (question[:30], b, a)] + [(question[:30], a, c) for c in rest[:1]]
    return items


@pytest.fixture(scope="module")
def judges(causal_lm_model):
    return {packing: load_local_judge(causal_lm_model, ModelSettings(packing=packing, max_length=768))
            for packing in (True, False)}


@pytest.mark.parametrize("packing", [True, False])
@pytest.mark.parametrize("ties", [False, True])
def test_batch_sizes_one_and_sixteen_give_the_same_probabilities(judges, tiny_prompts, packing, ties):
    judge = judges[packing]
    assert judge.packing is packing  # Qwen2 runs the packed attention
    items = _items(tiny_prompts)
    alone = judge.verdict_probabilities(items, ties, batch_size=1)
    together = judge.verdict_probabilities(items, ties, batch_size=16, token_budget=1 << 15)
    assert alone.shape == (len(items), 3 if ties else 2) and judge.stats.truncated == 0
    assert np.abs(alone - together).max() <= 1e-5
    assert np.allclose(alone.sum(axis=1), 1, atol=1e-12)
    other = judges[not packing].verdict_probabilities(items, ties, batch_size=16, token_budget=1 << 15)
    assert np.abs(other - together).max() <= 1e-5  # packed rows and padded batches agree


def test_verdict_tokens_are_the_template_letters(judges):
    judge = judges[True]
    assert [judge.tokenizer.decode([t]) for t in judge.verdict_ids] == ["A", "B", "C"]
    assert judge.template == verdict_template("zh")


def test_swapping_the_responses_swaps_the_averaged_probabilities(judges, tiny_prompts):
    judge = judges[True]
    p = tiny_prompts[3]
    x, y = p.responses[0].content, p.responses[1].content
    probs = judge.verdict_probabilities([(p.prompt, x, y), (p.prompt, y, x)], False)
    xy = averaged_verdicts(probs[[0]], probs[[1]])[0]  # p(x better), p(y better)
    yx = averaged_verdicts(probs[[1]], probs[[0]])[0]  # the same pair, given as (y, x)
    assert abs(xy[0] - yx[1]) < 1e-12 and abs(xy[1] - yx[0]) < 1e-12
    assert abs(xy[0] + xy[1] - 1) < 1e-12
    assert abs(probs[0, 0] - probs[1, 1]) > 1e-4  # the untrained model does prefer a position


def test_a_model_folder_with_a_judge_template_uses_it(causal_lm_model, tmp_path, judges, tiny_prompts):
    folder = copy_checkpoint(causal_lm_model, tmp_path / "generative")
    changed = replace(verdict_template("zh"), instruction="请只看事实是否正确。边界标记“{tag}”。", version="mine")
    save_verdict_template(changed, folder)
    mine = load_local_judge(folder, ModelSettings(max_length=768), language="en")  # the folder's template wins
    assert mine.template == changed
    items = _items(tiny_prompts, 2)
    text = mine.tokenizer.decode(mine.encode_judgements(items[:1], False)[0])
    assert "请只看事实是否正确" in text and "请比较下面两个回答" not in text
    default = judges[True].tokenizer.decode(judges[True].encode_judgements(items[:1], False)[0])
    assert "请比较下面两个回答" in default
    assert np.abs(mine.verdict_probabilities(items, False) - judges[True].verdict_probabilities(items, False)).max() > 0


def test_the_english_template_is_used_when_asked(causal_lm_model, tiny_prompts):
    judge = load_local_judge(causal_lm_model, ModelSettings(max_length=768), language="en")
    text = judge.tokenizer.decode(judge.encode_judgements(_items(tiny_prompts, 1)[:1], True)[0])
    assert "Compare the two responses below" in text and "C if they are equally good" in text


# ----------------------------------------------------------------------------- the CLI

def _bench(tmp_path: Path) -> Path:
    """Three ranked prompts with short responses carrying the marker the API stand-in reads."""
    from tests.openai_server import quality

    rows = []
    for k, (cat, texts) in enumerate([("数学", ["答案是12。", "答案是十二。", "不会"]),
                                      ("代码", ["用for循环。", "先排序。"]),
                                      ("安全", ["不能帮忙。", "照做就行。", "随便"])]):
        n = len(texts)
        rows.append({"id": f"p{k}", "prompt": f"第{k}题", "category": [cat], "subset": "open",
                     "responses": [{"id": f"r{i}", "content": quality(n - i) + t} for i, t in enumerate(texts)],
                     "rank": {f"r{i}": i for i in range(n)}})
    return write_jsonl_rows(tmp_path / "bench.jsonl", rows)


def _macro_accuracy(items: list[dict]) -> float:
    """Accuracy as CheemsBench defines it, from the items: per category right / pairs, averaged."""
    by_cat: dict[str, list[int]] = {}
    for it in items:
        right, total = by_cat.setdefault(it["category"], [0, 0])
        by_cat[it["category"]] = [right + sum(o == "right" for _, _, o in it["pairs"]), total + len(it["pairs"])]
    return sum(r / n for r, n in by_cat.values()) / len(by_cat)


def test_eval_judge_model_reports_what_an_api_judge_reports(tmp_path, run_cli, causal_lm_model):
    bench = _bench(tmp_path)
    with JudgeServer(smart_judge) as server:
        api = run_cli("eval", bench, "--judge", "api", "--api-base", server.base_url, "--cache", tmp_path / "c.sqlite",
                      "--json", "api.json", "--bootstrap", "0")
    assert api.returncode == 0, api.stderr
    r = run_cli("eval", bench, "--judge-model", causal_lm_model, "--json", "local.json", "--bootstrap", "0",
                "--max-length", "512")
    assert r.returncode == 0, r.stderr
    assert "position consistency" in r.stdout
    api_report = json.loads((tmp_path / "api.json").read_text(encoding="utf-8"))
    report = json.loads((tmp_path / "local.json").read_text(encoding="utf-8"))
    assert set(api_report) <= set(report)
    assert report["scorer"] == api_report["scorer"] == "generative" and report["kind"] == "eval"
    assert report["model"] == causal_lm_model.name and set(report["orders"]) == {"ab", "ba"}
    assert set(api_report["pairs"][0]) <= set(report["pairs"][0])
    assert set(api_report["pairs"][0]["judgements"]["ab"]) <= set(report["pairs"][0]["judgements"]["ab"])
    items = [json.loads(line) for line in (tmp_path / "local.items.jsonl").read_text(encoding="utf-8").splitlines()]
    assert report["subsets"]["open"]["accuracy"] == pytest.approx(_macro_accuracy(items), abs=1e-12)
    for pair in report["pairs"]:  # the verdict is the argmax of the averaged probabilities
        probs = pair["probabilities"]
        assert set(probs) == {"first", "second"} and abs(sum(probs.values()) - 1) < 1e-9
        assert pair["choice"] == (pair["first"] if probs["first"] >= probs["second"] else pair["second"])
        assert pair["correct"] == (pair["choice"] == pair["better"])
    agree = [p["judgements"]["ab"]["choice"] == p["judgements"]["ba"]["choice"] for p in report["pairs"]]
    assert report["position_consistency"] == pytest.approx(sum(agree) / len(agree))
    assert all(len(ps) == len(it["pairs"]) and all(len(p) == 2 for p in ps)
               for it in items for ps in [it["probabilities"]])


def test_eval_judge_model_one_order_and_ties(tmp_path, run_cli, causal_lm_model):
    bench = _bench(tmp_path)
    r = run_cli("eval", bench, "--judge-model", causal_lm_model, "--one-order", "--judge-ties", "--seed", "2",
                "--json", "one.json", "--bootstrap", "0", "--max-length", "512", "--name", "tiny-judge", "--check")
    assert r.returncode == 0, r.stderr
    assert "batch invariance: 14 judge prompts alone vs in batches" in r.stderr and ": ok" in r.stderr
    report = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
    assert set(report["orders"]) == {"random"} and report["model"] == "tiny-judge" and report["judge_ties"]
    assert report["overall"] == report["orders"]["random"]["overall"]
    for pair in report["pairs"]:
        ((order, j),) = pair["judgements"].items()
        assert j["choice"] == pair["choice"] and set(pair["probabilities"]) == {"first", "second", "tie"}
    assert report["tie_verdicts"] == sum(p["choice"] == "tie" for p in report["pairs"])


def test_a_model_trained_with_ties_judges_with_the_tie_verdict(tmp_path, run_cli, causal_lm_model):
    bench = _bench(tmp_path)
    folder = copy_checkpoint(causal_lm_model, tmp_path / "tied-judge")
    save_verdict_template(replace(verdict_template("zh"), ties=True), folder)
    r = run_cli("eval", bench, "--judge-model", folder, "--json", "tied.json", "--bootstrap", "0", "--max-length", "512")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "tied.json").read_text(encoding="utf-8"))
    assert report["judge_ties"] and set(report["pairs"][0]["probabilities"]) == {"first", "second", "tie"}


@pytest.mark.parametrize("extra, message", [
    (("--model", "m"), "--judge-model is the scorer itself"),
    (("--scorer", "length"), "--judge-model is the scorer itself"),
    (("--truncation", "right"), "truncation: a judge prompt keeps its end (the verdict question) (leave out "
                                "--truncation right)"),
])
def test_judge_model_beside_another_scorer_is_one_line(tmp_path, run_cli, causal_lm_model, extra, message):
    r = run_cli("eval", _bench(tmp_path), "--judge-model", causal_lm_model, *extra)
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_judge_template_that_raises_is_one_line_naming_the_model(tmp_path, run_cli, causal_lm_model):
    folder = copy_checkpoint(causal_lm_model, tmp_path / "strict-judge")
    set_chat_template(folder, "{{ raise_exception('只接受单轮对话') }}")
    r = run_cli("eval", _bench(tmp_path), "--judge-model", folder, "--max-length", "512")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]  # after "loading FOLDER ..."
    assert len(lines) == 1 and f"{folder}: the chat template failed on a conversation: 只接受单轮对话" in lines[0], r.stderr


def test_a_reward_model_folder_is_no_judge_model(tmp_path, run_cli, seq_cls_model):
    r = run_cli("eval", _bench(tmp_path), "--judge-model", seq_cls_model)
    assert r.returncode == 2 and "is not a causal language model" in r.stderr and "(a reward model: " in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_judge_language_without_judge_model_is_one_line(tmp_path, run_cli):
    r = run_cli("eval", _bench(tmp_path), "--scorer", "length", "--judge-language", "en")
    assert r.returncode == 2 and "--judge-model" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- vLLM

@dataclass
class TokensPrompt:
    prompt_token_ids: list[int]


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    logprobs: int | None = None
    allowed_token_ids: list[int] | None = None


class Engine:
    """vLLM's offline ``LLM`` as far as the judge uses it: ``generate`` of token prompts, one
    token, its log-probabilities after the allowed-tokens restriction (``processed_logprobs``),
    computed here with transformers one sequence at a time."""

    made: list["Engine"] = []

    def __init__(self, model: str, **engine_args):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.engine_args, self.calls = engine_args, []
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        Engine.made.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append(([list(p.prompt_token_ids) for p in prompts], params))
        allowed = params.allowed_token_ids
        out = []
        with torch.no_grad():
            for p in prompts:
                logits = self.model(torch.tensor([p.prompt_token_ids])).logits[0, -1, allowed]
                logprobs = torch.log_softmax(logits.double(), 0).tolist()
                top = {t: types.SimpleNamespace(logprob=v) for t, v in zip(allowed, logprobs)}
                out.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(logprobs=[top])]))
        return out


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = Engine, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = TokensPrompt
    module.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    Engine.made = []
    return Engine


def test_vllm_judge_gives_the_transformers_probabilities(fake_vllm, causal_lm_model, judges, tiny_prompts):
    judge = load_vllm_judge(causal_lm_model, ModelSettings(backend="vllm", max_length=768))
    engine = fake_vllm.made[-1]
    assert engine.engine_args["logprobs_mode"] == "processed_logprobs"
    assert engine.engine_args["enable_prefix_caching"] is True
    items = _items(tiny_prompts, 3)
    got = judge.verdict_probabilities(items, True, batch_size=2)
    assert np.abs(got - judges[True].verdict_probabilities(items, True)).max() <= 1e-5
    sent, params = engine.calls[-1]
    assert len(engine.calls) == 1  # a small --batch-size does not cut vLLM's calls: it schedules its own batches
    assert params.max_tokens == 1 and params.temperature == 0.0
    assert params.allowed_token_ids == judge.verdict_ids and params.logprobs == 3
    assert sorted(sent) == sorted(judges[True].encode_judgements(items, True))  # the transformers back-end's tokens
