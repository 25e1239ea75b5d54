"""The vLLM reward-model backend's own code (cheems.scoring.vllm_backend), on the CPU.

vLLM itself needs a GPU and is not installed here, so an engine that keeps vLLM's offline
interface (``LLM(**engine args)``, ``get_tokenizer()``, ``classify(list of TokensPrompt)``)
stands in for it: it records what cheems hands over and scores each token sequence with the
tiny checkpoint through transformers, one sequence at a time. What is tested is cheems' side:
the engine arguments (pooling runner, prefix caching), the token ids (the transformers
backend's encoding), the order of the sequences (a prompt's responses together) and the
scores coming back to the right responses.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tiny_models import require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.scoring.evaluate import ModelSettings, load_scorer  # noqa: E402
from cheems.scoring.transformers_rm import conversation_key, load_reward_model, score_prompts  # noqa: E402
from cheems.scoring.vllm_backend import load_vllm_reward_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")


@dataclass
class TokensPrompt:
    prompt_token_ids: list[int]


class Engine:
    """vLLM's offline ``LLM`` as far as the reward-model backend uses it."""

    made: list["Engine"] = []

    def __init__(self, model: str, **engine_args):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.path, self.engine_args, self.calls = model, engine_args, []
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSequenceClassification.from_pretrained(model, torch_dtype=torch.float32).eval()
        Engine.made.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def classify(self, prompts, use_tqdm=True):
        ids = [list(p.prompt_token_ids) for p in prompts]
        self.calls.append(ids)
        out = []
        with torch.no_grad():
            for seq in ids:
                logit = float(self.model(torch.tensor([seq])).logits[0, 0])
                out.append(types.SimpleNamespace(outputs=types.SimpleNamespace(probs=[logit])))
        return out


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = Engine
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = TokensPrompt
    module.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    Engine.made = []
    return Engine


def test_engine_runs_the_pooling_runner_with_prefix_caching(fake_vllm, seq_cls_model: Path):
    rm = load_vllm_reward_model(str(seq_cls_model), max_length=300)
    args = fake_vllm.made[-1].engine_args
    assert args["runner"] == "pooling" and args["max_model_len"] == 300
    assert args["enable_prefix_caching"] is True and rm.share_prefix
    rm = load_vllm_reward_model(str(seq_cls_model), prefix_caching=False)
    assert fake_vllm.made[-1].engine_args["enable_prefix_caching"] is False and not rm.share_prefix


def test_tensor_parallel_setting_reaches_the_engine(fake_vllm, seq_cls_model: Path, tiny_prompts):
    load_scorer(seq_cls_model, ModelSettings(backend="vllm", tensor_parallel_size=4), tiny_prompts)
    assert fake_vllm.made[-1].engine_args["tensor_parallel_size"] == 4
    load_scorer(seq_cls_model, ModelSettings(backend="vllm"), tiny_prompts)
    assert fake_vllm.made[-1].engine_args["tensor_parallel_size"] == 1


@pytest.mark.parametrize("share_prefix", [True, False])
def test_share_prefix_setting_reaches_the_engine(fake_vllm, seq_cls_model: Path, tiny_prompts, share_prefix):
    settings = ModelSettings(backend="vllm", share_prefix=share_prefix)
    rm = load_scorer(seq_cls_model, settings, tiny_prompts)
    assert fake_vllm.made[-1].engine_args["enable_prefix_caching"] is share_prefix
    assert rm.share_prefix is share_prefix


def test_scores_equal_the_transformers_backend_with_prompts_kept_together(fake_vllm, seq_cls_model: Path,
                                                                          tiny_prompts):
    prompts = tiny_prompts[:12]
    vllm_rm = load_vllm_reward_model(str(seq_cls_model), max_length=256)
    got = {(pid, rid): s for rows in score_prompts(vllm_rm, prompts, batch_size=4) for pid, rid, s in rows}
    plain = load_reward_model(seq_cls_model, max_length=256, packing=False)
    want = {(pid, rid): s for rows in score_prompts(plain, prompts, batch_size=4) for pid, rid, s in rows}
    assert got.keys() == want.keys() == {(p.id, r.id) for p in prompts for r in p.responses}
    assert max(abs(got[k] - want[k]) for k in want) < 1e-5

    calls = fake_vllm.made[-1].calls
    assert len(calls) == 1  # a small --batch-size does not cut vLLM's calls: it schedules its own batches
    encoded = {}  # the token ids of each distinct conversation, as the transformers backend encodes them
    for p in prompts:
        for r in p.responses:
            encoded.setdefault(conversation_key(p.prompt, r.content), (p.id, plain.encode(p.prompt, r.content)))
    owner = {tuple(ids): pid for pid, ids in encoded.values()}
    sent = [owner[tuple(seq)] for seq in calls[0]]  # every sequence sent is one of them
    assert len(sent) == len(encoded)
    runs = [pid for k, pid in enumerate(sent) if k == 0 or sent[k - 1] != pid]
    assert len(runs) == len(set(runs))  # each prompt's responses sent one after the other
