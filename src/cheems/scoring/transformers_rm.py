"""Discriminative reward models through transformers (the ``[models]`` extra).

Both checkpoint layouts of :mod:`cheems.models.checkpoints` are scored: ``seq-cls`` (any
``*ForSequenceClassification`` with one label) and ``v-head`` (the official Cheems causal LM +
linear ``v_head``). Each (prompt, response) goes through the tokenizer's chat template as one
conversation, and each distinct conversation is scored once. By default a batch's sequences are
packed end to end into one row under a token budget, a prompt's responses together with their
shared prefix laid down once (:mod:`cheems.models.packing`); with ``packing=False`` they are
sorted by length and padded on the right to each batch's longest sequence (see
:mod:`cheems.models.sequences`). Either way scores do not depend on batch size or order
(``check_batch_invariance`` verifies it). Only the base model and the reward head run: no LM
head is ever computed. With ``fixed_shapes`` each packed row is padded to one of a few lengths
(:mod:`cheems.models.fixed_shapes`), so that compiled layers meet few shapes; the scores stay
the same and the padding is counted (`RowStats`). The batches themselves are planned by
:mod:`cheems.scoring.batching`, as for every back-end that runs here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cheems.models.checkpoints import (best_attention, detect_layout, load_classifier, load_tensors, load_tokenizer,
                                       quiet_transformers, require_torch, resolve_dtype, value_head_source,
                                       weights_that_fit)
from cheems.models.fixed_shapes import row_length
from cheems.models.memory_budget import probe_sequences, probe_token_budget
from cheems.models.packing import (pack_sequences, packed_backend, padded_attention, prepare_attention, rewards_at,
                                   use_packed_attention)
from cheems.models.reward_position import UNRECORDED, recorded_reward_position
from cheems.models.sequences import (ConversationEncoder, EncodeStats, default_token_budget, pad_right,
                                     reward_at_last_token)
from cheems.models.threads import use_available_cores
from cheems.records import CheemsInputError, Prompt, PromptText
from cheems.scoring.batching import (check_batch_invariance, conversation_key, resolve_token_budget, score_items,
                                     score_prompts, scored_batches)
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.scorer import Progress, RowStats, ScoredRows, ScorerDefaults

__all__ = ["PROBE_CEILING", "RowStats", "TransformersRewardModel", "check_batch_invariance", "conversation_key",
           "load_reward_model", "probe_scoring_budget", "score_head", "score_items", "score_prompts",
           "scored_batches"]


@dataclass
class TransformersRewardModel(ConversationEncoder, ScorerDefaults):
    """A loaded reward model: tokenizer, network, layout, and how to batch it (a
    :class:`~cheems.scoring.scorer.RewardScorer` and :class:`~cheems.scoring.scorer.SequenceScorer`).
    Encodes conversations with `ConversationEncoder` (``encode``, ``encode_many``)."""

    tokenizer: object
    model: object
    layout: str = field()  # no default: the interface's None is for back-ends that do not know it
    device: str
    max_length: int = 2048
    truncation: str = "left"
    stats: EncodeStats = field(default_factory=EncodeStats)
    v_head: object = None
    packing: bool = False  # one row per batch (the model then runs packed attention only)
    share_prefix: bool = True  # with packing: a prompt's common prefix laid down once
    token_budget: int | None = None  # most tokens of a forward batch, resolved at load (`resolve_token_budget`)
    token_budget_auto: bool = False  # token_budget was found by auto (probed once, at load)
    fixed_shapes: bool = False  # with packing: rows padded to a few lengths (cheems.models.fixed_shapes)
    row_stats: RowStats = field(default_factory=RowStats)
    reward_position: str = UNRECORDED  # where the reward is read (cheems.models.reward_position)
    name: str = ""  # the model folder's name

    # ------------------------------------------------------------------ forward
    def score_ids(self, batch: Sequence[Sequence[int]]) -> list[float]:
        """Scores of already-encoded sequences, as one right-padded batch."""
        torch = require_torch()
        input_ids, mask = pad_right(batch, self.tokenizer.pad_token_id, self.device)
        with torch.inference_mode(), padded_attention(self.model):
            if self.layout == "v-head":
                hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
                values = reward_at_last_token(hidden, mask, self.v_head)
            else:
                head = score_head(self.model)
                base = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
                if head is not None and base is not None:
                    hidden = base(input_ids=input_ids, attention_mask=mask).last_hidden_state
                    values = reward_at_last_token(hidden, mask, head)
                else:  # an unfamiliar architecture: its own pooling, which finds the pad token
                    values = self.model(input_ids=input_ids, attention_mask=mask).logits[:, 0]
        return values.float().cpu().tolist()

    def score_packed(self, seqs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]] | None = None, *,
                     budget: int | None = None) -> list[float]:
        """Scores of already-encoded sequences, packed into one row; each group of ``groups``
        (indices into ``seqs``) shares its common prefix (see :mod:`cheems.models.packing`).
        With ``fixed_shapes`` the row is padded to its bucket under ``budget`` (default: the
        row's own length, the one bucket then)."""
        torch = require_torch()
        pad_to = (lambda row: row_length(row, budget or row)) if self.fixed_shapes else None  # the row's bucket
        pad_id = self.tokenizer.pad_token_id
        batch = pack_sequences(seqs, self.device, groups=groups, backend=packed_backend(self.device), pad_to=pad_to,
                               pad_id=0 if pad_id is None else pad_id)
        if self.fixed_shapes:
            prepare_attention(batch)  # the layout's tables built here, not traced in a compiled layer
        kwargs = {**batch.forward_kwargs(), "use_cache": False}  # no key-value cache: one forward, nothing kept
        with torch.inference_mode():
            if self.layout == "v-head":
                values = rewards_at(self.model(**kwargs).last_hidden_state, batch, self.v_head)
            else:
                base = getattr(self.model, self.model.base_model_prefix)
                values = rewards_at(base(**kwargs).last_hidden_state, batch, score_head(self.model))
        stats = self.row_stats
        stats.rows += 1
        stats.real_tokens += batch.real_tokens
        stats.row_tokens += batch.row_tokens
        stats.padding_tokens += batch.padding
        return values.float().cpu().tolist()

    def score(self, items: Sequence[tuple[PromptText, str]], *, batch_size: int = 64,
              token_budget: int | None = None) -> list[float]:
        """One float per (prompt, response), in input order; batches of ``token_budget`` tokens
        (None: the budget resolved at load)."""
        return score_items(self, items, token_budget=token_budget, batch_size=batch_size)

    def score_prompts(self, prompts: Sequence[Prompt], *, batch_size: int = 64, done: set | None = None,
                      progress: Progress | None = None) -> ScoredRows:
        """The scorer interface: :func:`cheems.scoring.batching.score_prompts` with this model."""
        return score_prompts(self, prompts, batch_size=batch_size, done=done, progress=progress)


PROBE_CEILING = 1 << 18
"""The largest scoring budget probed (262,144 tokens): beyond it a GPU gains nothing."""


def probe_scoring_budget(rm) -> int:
    """The largest forward batch of ``rm`` (a `TransformersRewardModel`) that fits its GPU: probes
    of one worst-case batch each (sequences of ``rm.max_length`` random tokens, packed or padded
    as ``rm`` runs), see :func:`cheems.models.memory_budget.probe_token_budget`; on CPU the default."""
    torch = require_torch()
    if not str(rm.device).startswith("cuda"):
        return default_token_budget(rm.device)
    vocab = int(getattr(rm.model.config, "vocab_size", 0) or 32000)
    generator = torch.Generator().manual_seed(0)

    def run(budget: int) -> None:
        seqs = probe_sequences(budget, rm.max_length, vocab, generator)
        rm.score_packed(seqs, budget=budget) if rm.packing else rm.score_ids(seqs)

    budget, _ = probe_token_budget(run, start=default_token_budget(rm.device), ceiling=PROBE_CEILING)
    return budget


def score_head(model):
    """The linear reward head of a decoder *ForSequenceClassification model, if it has one."""
    torch = require_torch()
    head = getattr(model, "score", None)
    if isinstance(head, torch.nn.Linear) and head.out_features == 1:
        return head
    return None


def load_reward_model(path: str | Path, *, device: str = "cpu", dtype: str = "auto", max_length: int = 2048,
                      truncation: str = "left", trust_remote_code: bool = False, packing: bool = True,
                      share_prefix: bool = True, liger_kernels: bool = False, compile: bool = False,
                      fixed_shapes: bool = False, reward_position: str | None = None,
                      token_budget: int | str | None = None) -> TransformersRewardModel:
    """Load a reward model folder with ``from_pretrained``, detecting its layout.

    ``dtype="auto"``: bfloat16 on CUDA, float32 on CPU. ``packing`` (default) scores packed
    rows with the packed attention (:mod:`cheems.models.packing`), ``share_prefix`` laying a
    prompt's common prefix down once; without packing, right-padded batches run SDPA attention
    (or flash-attention 2 on CUDA when installed). ``liger_kernels`` swaps in Liger's fused
    RMSNorm, SwiGLU and RoPE kernels (CUDA, the ``[gpu]`` extra); ``compile`` compiles each
    decoder layer (:func:`cheems.models.kernels.compile_layers`). ``fixed_shapes`` pads packed
    rows to a few lengths (:mod:`cheems.models.fixed_shapes`; scores unchanged), and with
    ``compile`` the layers are compiled for static shapes. ``reward_position``: where the reward
    is read (:mod:`cheems.models.reward_position`); None: the rule the checkpoint's config.json
    records, ``template_end`` when it records none. ``token_budget``: most tokens in one forward
    batch, resolved here once (None: the device's default; ``auto``: on a GPU the largest batch
    that fits, probed with :func:`probe_scoring_budget`) and kept as ``rm.token_budget``.
    """
    torch = require_torch()
    path = Path(path)
    ModelSettings(device=device, dtype=dtype, max_length=max_length, truncation=truncation,
                  trust_remote_code=trust_remote_code, packing=packing, share_prefix=share_prefix,
                  liger_kernels=liger_kernels, compile=compile, fixed_shapes=fixed_shapes,
                  reward_position=reward_position, token_budget=token_budget)  # one declaration, one check
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CheemsInputError(f"{device} asked for, but no CUDA device is available", field="device",
                               remedy=("device", "{} cpu runs without one"))
    if liger_kernels and not device.startswith("cuda"):
        raise CheemsInputError("Liger kernels run on CUDA GPUs only", field="liger_kernels",
                               remedy=("device", "leave them out, or give {} cuda"))
    layout = detect_layout(path)  # checks the folder before anything loads: weights whole, tokenizer, one label
    if device.startswith("cpu"):
        use_available_cores()  # torch's default is every core of the machine, busy or not
    tokenizer, model, v_head = _load_network(path, layout, device, resolve_dtype(dtype, device), trust_remote_code)
    if liger_kernels:
        from cheems.models.kernels import use_liger_kernels

        use_liger_kernels(model)
    if packing and layout == "seq-cls" and (score_head(model) is None or
                                            getattr(model, getattr(model, "base_model_prefix", ""), None) is None):
        packing = False  # an unfamiliar architecture scores with its own pooling, padded
    packing = packing and use_packed_attention(model)
    if compile:
        from cheems.models.kernels import compile_layers

        compile_layers(model, dynamic=not (fixed_shapes and packing))  # fixed shapes: a few static ones
    rule = reward_position or recorded_reward_position(model.config, file=str(path / "config.json"))
    rm = TransformersRewardModel(tokenizer, model, layout, device, max_length, truncation, v_head=v_head,
                                 packing=packing, share_prefix=share_prefix, fixed_shapes=fixed_shapes and packing,
                                 reward_position=rule, name=path.resolve().name)
    rm.token_budget, rm.token_budget_auto = resolve_token_budget(token_budget, default_token_budget(device),
                                                                 lambda: probe_scoring_budget(rm))
    return rm


def _load_network(path: Path, layout: str, device: str, torch_dtype, trust_remote_code: bool):
    """(tokenizer, model, v_head or None) of a reward model folder of ``layout``, on ``device``."""
    from transformers import AutoModel

    kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if device.startswith("cuda"):
        kwargs["attn_implementation"] = best_attention()
    with quiet_transformers():
        tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "right"
    v_head = None
    if layout == "seq-cls":
        model, _ = load_classifier(path, tokenizer, **kwargs)
    else:
        with quiet_transformers(), weights_that_fit(path):
            model = AutoModel.from_pretrained(path, **kwargs)
        v_head = _load_v_head(path).to(device=device, dtype=torch_dtype).eval()
    return tokenizer, model.to(device).eval(), v_head


def _load_v_head(path: Path):
    """The checkpoint's v_head as a ``torch.nn.Linear(hidden, 1)``."""
    torch = require_torch()
    f, keys = value_head_source(path)
    tensors = load_tensors(f, list(keys.values()))
    weight = tensors[keys["weight"]].reshape(1, -1)
    v_head = torch.nn.Linear(weight.shape[1], 1, bias="bias" in keys)
    with torch.no_grad():
        v_head.weight.copy_(weight)
        if "bias" in keys:
            v_head.bias.copy_(tensors[keys["bias"]].reshape(1))
    return v_head
