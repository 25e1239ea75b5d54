"""vLLM offline backends (the ``[vllm]`` extra, GPU only).

- :class:`VllmRewardModel`: a sequence-classification reward model served by vLLM's pooling
  runner. Conversations are encoded by the code the transformers scorer uses
  (:class:`cheems.models.sequences.ConversationEncoder`: same chat template, BOS,
  truncation and reward position rules) and handed to vLLM as token ids, so both backends score
  the same sequences (vLLM's pooler reads the last token, where each sequence ends). vLLM's
  classify task may pass the single logit through an activation (sigmoid); it is monotonic,
  so Accuracy and Exact Match are unchanged. A prompt's responses go to vLLM together, one
  after the other, and vLLM's automatic prefix caching (on by default here) computes their
  shared prompt tokens once.
- :class:`VllmChat`: a local judge model; ``generate(list of message lists) -> list of texts``,
  continuous batching done by vLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cheems.models.reward_position import UNRECORDED, recorded_reward_position
from cheems.models.sequences import ConversationEncoder, EncodeStats
from cheems.records import CheemsInputError, Prompt, PromptText
from cheems.scoring.batching import resolve_token_budget, score_items, score_prompts
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.scorer import Progress, ScoredRows, ScorerDefaults

__all__ = ["VLLM_TOKEN_BUDGET", "VllmChat", "VllmRewardModel", "load_vllm_chat", "load_vllm_reward_model"]

VLLM_TOKEN_BUDGET = 1 << 20
"""Tokens handed to vLLM in one call when no budget is given: vLLM schedules its own batches."""

MISSING_EXTRA = "the vLLM backend needs a GPU machine with the vllm extra: pip install 'cheems[vllm]'"


def _require_vllm():
    try:
        import vllm
    except ImportError:
        raise CheemsInputError(MISSING_EXTRA) from None
    return vllm


@dataclass
class VllmRewardModel(ConversationEncoder, ScorerDefaults):
    """A sequence-classification reward model in vLLM's pooling runner, scoring the token ids
    that `ConversationEncoder` makes, as the transformers back-end does (a
    :class:`~cheems.scoring.scorer.RewardScorer` and :class:`~cheems.scoring.scorer.SequenceScorer`)."""

    llm: object
    tokenizer: object
    max_length: int = 2048
    truncation: str = "left"
    stats: EncodeStats = field(default_factory=EncodeStats)
    layout: str = "seq-cls"
    share_prefix: bool = True  # vLLM's prefix cache is on: keep a prompt's responses together
    reward_position: str = UNRECORDED  # where the reward is read (cheems.models.reward_position)
    token_budget: int = VLLM_TOKEN_BUDGET  # tokens handed to vLLM in one call, resolved at load
    token_budget_auto: bool = False
    name: str = ""  # the model folder's name
    packing = True  # batches are whole prompts (see `scored_batches`); vLLM lays out the sequences itself

    def score_ids(self, batch: Sequence[Sequence[int]]) -> list[float]:
        from vllm.inputs import TokensPrompt

        outputs = self.llm.classify([TokensPrompt(prompt_token_ids=list(ids)) for ids in batch], use_tqdm=False)
        return [float(o.outputs.probs[0]) for o in outputs]

    def score_packed(self, seqs: Sequence[Sequence[int]], layout: Sequence[Sequence[int]]) -> list[float]:
        """The scores of ``seqs``, handed to vLLM in this order: the members of one group of
        ``layout`` (a prompt's responses) are adjacent, so that its prefix cache serves them."""
        return self.score_ids(seqs)

    def max_batch(self, asked: int) -> int:
        """Sequences per call: vLLM forms its own forward batches, so a call takes many."""
        return max(asked, 1 << 16)

    def score(self, items: Sequence[tuple[PromptText, str]], *, batch_size: int = 1 << 16,
              token_budget: int | None = None) -> list[float]:
        return score_items(self, items, token_budget=token_budget, batch_size=batch_size)

    def score_prompts(self, prompts: Sequence[Prompt], *, batch_size: int = 64, done: set | None = None,
                      progress: Progress | None = None) -> ScoredRows:
        """The scorer interface: :func:`cheems.scoring.batching.score_prompts` with this model."""
        return score_prompts(self, prompts, batch_size=batch_size, done=done, progress=progress)


def load_vllm_reward_model(path: str, *, max_length: int = 2048, truncation: str = "left", dtype: str = "auto",
                           tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                           trust_remote_code: bool = False, prefix_caching: bool = True,
                           reward_position: str | None = None,
                           token_budget: int | str | None = None) -> VllmRewardModel:
    """A sequence-classification reward model in vLLM's pooling runner; with
    ``prefix_caching``, vLLM's automatic prefix caching computes a prompt's tokens once for
    all its responses (the classify task reads only the last token, so cached prefixes serve
    it). ``reward_position`` as for :func:`cheems.scoring.transformers_rm.load_reward_model`
    (None: the checkpoint's record). ``token_budget``: tokens handed to vLLM in one call (None or
    ``auto``: :data:`VLLM_TOKEN_BUDGET`, vLLM schedules its own batches)."""
    ModelSettings(backend="vllm", dtype=dtype, max_length=max_length, truncation=truncation,
                  trust_remote_code=trust_remote_code, share_prefix=prefix_caching,
                  reward_position=reward_position, token_budget=token_budget)  # one declaration, one check
    rule = reward_position or _recorded(Path(path) / "config.json")
    vllm = _require_vllm()
    llm = vllm.LLM(model=str(path), runner="pooling", dtype=dtype, max_model_len=max_length,
                   tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
                   trust_remote_code=trust_remote_code, enable_prefix_caching=prefix_caching)
    budget, auto = resolve_token_budget(token_budget, VLLM_TOKEN_BUDGET)
    return VllmRewardModel(llm, llm.get_tokenizer(), max_length, truncation, share_prefix=prefix_caching,
                           reward_position=rule, token_budget=budget, token_budget_auto=auto,
                           name=Path(path).resolve().name)


def _recorded(config_file: Path) -> str:
    """The reward position ``config_file`` records (a folder vLLM will refuse reads as none)."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    return recorded_reward_position(config if isinstance(config, dict) else {}, file=str(config_file))


@dataclass
class VllmChat:
    """A local chat model for judging; temperature 0 by default."""

    llm: object
    temperature: float = 0.0
    max_tokens: int = 1024

    def generate(self, conversations: Sequence[list[dict]]) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens)
        outputs = self.llm.chat(list(conversations), params, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]


def load_vllm_chat(path: str, *, dtype: str = "auto", tensor_parallel_size: int = 1, max_model_len: int = 8192,
                   gpu_memory_utilization: float = 0.9, temperature: float = 0.0, max_tokens: int = 1024,
                   trust_remote_code: bool = False) -> VllmChat:
    vllm = _require_vllm()
    llm = vllm.LLM(model=str(path), dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                   max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                   trust_remote_code=trust_remote_code)
    return VllmChat(llm, temperature, max_tokens)
